#include "net/shaped/profile.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <fstream>
#include <set>
#include <sstream>
#include <utility>

#include <fmt/format.h>

#include "engine/base/enforce.h"

namespace gossamer::net::shaped {
namespace {

using std::chrono::microseconds;

// The `geo` built-in. One-way latency = half the round-trip time between the AWS regions
// ap-northeast-1 (Tokyo), eu-west-2 (London), us-west-2 (Oregon) and us-east-2 (Ohio), from the
// p50 inter-region RTTs published by cloudping.co (rounded to the millisecond; they drift by a
// few ms from month to month):
//
//   RTT ms    tokyo  london  oregon  ohio
//   tokyo       -     212      98    132
//   london     212     -      130     86
//   oregon      98    130      -      50
//   ohio       132     86      50      -
//
// Jitter: 1% of the one-way latency (0.05 ms within a site). Bandwidth: what one TCP flow with
// an 8 MiB window reaches, window / RTT, rounded down to 50 Mbit/s and capped at 1 Gbit/s;
// within a site 0.5 ms one-way and 5 Gbit/s, the AWS single-flow limit outside a cluster
// placement group. No loss. net/README.md has the same table.
struct GeoPair {
  const char* from;
  const char* to;
  double rttMs;
  double mbit;
};
constexpr const char* kGeoSites[] = {"tokyo", "london", "oregon", "ohio"};
constexpr GeoPair kGeoPairs[] = {
    {"tokyo", "london", 212, 300},  {"tokyo", "oregon", 98, 650}, {"tokyo", "ohio", 132, 500},
    {"london", "oregon", 130, 500}, {"london", "ohio", 86, 750},  {"oregon", "ohio", 50, 1000},
};
constexpr double kGeoWithinSiteMs = 0.5;
constexpr double kGeoWithinSiteJitterMs = 0.05;
constexpr double kGeoWithinSiteMbit = 5000;
constexpr double kGeoJitterFraction = 0.01;
// geo-cap: every link's capacity, and one TCP connection's window.
constexpr double kGeoCapMbit = 10000;
constexpr std::uint64_t kGeoCapWindowBytes = std::uint64_t{8} << 20;
constexpr double kMiB = 1024.0 * 1024.0;

microseconds fromMs(double ms) { return microseconds(std::llround(ms * 1000.0)); }

[[noreturn]] void parseError(const std::string& source, std::size_t line, const std::string& what) {
  throw Error(fmt::format("{}:{}: {}", source, line, what));
}

bool validSiteName(std::string_view name) {
  return !name.empty() && std::none_of(name.begin(), name.end(), [](char c) {
    return c == ' ' || c == '\t' || c == '\r' || c == '\n' || c == '#';
  });
}

std::vector<std::string_view> splitFields(std::string_view line) {
  std::vector<std::string_view> fields;
  std::size_t i = 0;
  while (i < line.size()) {
    while (i < line.size() && (line[i] == ' ' || line[i] == '\t' || line[i] == '\r')) ++i;
    std::size_t end = i;
    while (end < line.size() && line[end] != ' ' && line[end] != '\t' && line[end] != '\r') ++end;
    if (end > i) fields.push_back(line.substr(i, end - i));
    i = end;
  }
  return fields;
}

std::optional<double> parseNumber(std::string_view text) {
  double value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size() || !std::isfinite(value)) {
    return std::nullopt;
  }
  return value;
}

std::optional<std::size_t> parseIndex(std::string_view text) {
  std::size_t value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return value;
}

std::string stem(const std::string& path) {
  std::string name = path.substr(path.find_last_of('/') + 1);
  const std::size_t dot = name.rfind('.');
  if (dot != std::string::npos && dot > 0) name.resize(dot);
  return name.empty() ? path : name;
}

LossMode parseLossMode(const std::string& source, std::size_t line, std::string_view text) {
  const std::optional<LossMode> mode = lossModeNamed(text);
  if (!mode) {
    parseError(source, line,
               fmt::format("unknown loss mode '{}' (expected stream or datagram)", text));
  }
  return *mode;
}

// A window in MiB, kept to the byte.
std::uint64_t parseWindow(const std::string& source, std::size_t line, std::string_view text) {
  const std::optional<double> mib = parseNumber(text);
  if (!mib || *mib < 0 || *mib > 1024 * 1024) {
    parseError(source, line,
               fmt::format("a flow window is a number of MiB in [0, 1048576], not '{}'", text));
  }
  return static_cast<std::uint64_t>(std::llround(*mib * kMiB));
}

// Shortest text that reads back as the same double.
std::string formatNumber(double value) { return fmt::format("{}", value); }

}  // namespace

const char* name(LossMode mode) {
  switch (mode) {
    case LossMode::stream:
      return "stream";
    case LossMode::datagram:
      return "datagram";
  }
  return "?";
}

std::optional<LossMode> lossModeNamed(std::string_view text) {
  for (const LossMode mode : {LossMode::stream, LossMode::datagram}) {
    if (text == name(mode)) return mode;
  }
  return std::nullopt;
}

double LinkProfile::flowBitsPerSecond() const {
  if (flowWindowBytes == 0 || latency.count() == 0) return 0;
  return static_cast<double>(flowWindowBytes) * 8.0 / (2e-6 * static_cast<double>(latency.count()));
}

std::chrono::microseconds LinkProfile::retransmissionTimeout() const {
  const double rttUs = 2.0 * static_cast<double>(latency.count());
  const double rttVarUs = 2.0 / 3.0 * static_cast<double>(jitter.count());
  return std::max<microseconds>(kMinRetransmissionTimeout,
                                microseconds(std::llround(rttUs + 4.0 * rttVarUs)));
}

void validateLinkProfile(const LinkProfile& link, std::string_view what) {
  GOSSAMER_ENFORCE(link.latency.count() >= 0, "{}: latency must be >= 0 (got {} us)", what,
                   link.latency.count());
  GOSSAMER_ENFORCE(link.jitter.count() >= 0, "{}: jitter must be >= 0 (got {} us)", what,
                   link.jitter.count());
  GOSSAMER_ENFORCE(std::isfinite(link.bandwidthBitsPerSecond) && link.bandwidthBitsPerSecond >= 0,
                   "{}: bandwidth must be a finite number >= 0 bit/s, 0 = unlimited (got {})", what,
                   link.bandwidthBitsPerSecond);
  GOSSAMER_ENFORCE(link.lossRate >= 0 && link.lossRate <= 1,
                   "{}: loss rate must be in [0, 1] (got {})", what, link.lossRate);
  GOSSAMER_ENFORCE(lossModeNamed(name(link.lossMode)).has_value(),
                   "{}: loss mode must be stream or datagram (got {})", what,
                   static_cast<int>(link.lossMode));
}

NetworkProfile::NetworkProfile() : NetworkProfile("lan", {"lan"}, {LinkProfile{}}) {}

NetworkProfile::NetworkProfile(std::string name, std::vector<std::string> sites,
                               std::vector<LinkProfile> links)
    : name_(std::move(name)), sites_(std::move(sites)), links_(std::move(links)) {
  GOSSAMER_ENFORCE(!sites_.empty(), "network profile '{}' needs at least one site", name_);
  std::set<std::string_view> seen;
  for (const std::string& site : sites_) {
    GOSSAMER_ENFORCE(validSiteName(site),
                     "network profile '{}': site name '{}' must be one word without blanks or '#'",
                     name_, site);
    GOSSAMER_ENFORCE(seen.insert(site).second, "network profile '{}': site '{}' is repeated", name_,
                     site);
  }
  GOSSAMER_ENFORCE_EQ(links_.size(), sites_.size() * sites_.size(),
                      "network profile '{}': the link matrix needs sites^2 entries", name_);
  for (std::size_t from = 0; from < sites_.size(); ++from) {
    for (std::size_t to = 0; to < sites_.size(); ++to) {
      validateLinkProfile(
          links_[from * sites_.size() + to],
          fmt::format("network profile '{}', {} -> {}", name_, sites_[from], sites_[to]));
    }
  }
}

NetworkProfile NetworkProfile::lan() { return NetworkProfile(); }

NetworkProfile NetworkProfile::wan() {
  return uniform("wan",
                 LinkProfile{.latency = microseconds(25'000), .bandwidthBitsPerSecond = 1e9});
}

NetworkProfile NetworkProfile::geo() {
  const std::vector<std::string> sites(std::begin(kGeoSites), std::end(kGeoSites));
  const std::size_t n = sites.size();
  std::vector<LinkProfile> links(n * n);
  for (std::size_t i = 0; i < n; ++i) {
    links[i * n + i] = LinkProfile{.latency = fromMs(kGeoWithinSiteMs),
                                   .jitter = fromMs(kGeoWithinSiteJitterMs),
                                   .bandwidthBitsPerSecond = kGeoWithinSiteMbit * 1e6};
  }
  auto indexOf = [&sites](const char* site) {
    return static_cast<std::size_t>(std::find(sites.begin(), sites.end(), site) - sites.begin());
  };
  for (const GeoPair& pair : kGeoPairs) {
    const double oneWayMs = pair.rttMs / 2;
    const LinkProfile link{.latency = fromMs(oneWayMs),
                           .jitter = fromMs(oneWayMs * kGeoJitterFraction),
                           .bandwidthBitsPerSecond = pair.mbit * 1e6};
    const std::size_t a = indexOf(pair.from);
    const std::size_t b = indexOf(pair.to);
    links[a * n + b] = link;
    links[b * n + a] = link;
  }
  return NetworkProfile("geo", sites, std::move(links));
}

NetworkProfile NetworkProfile::geoCap() {
  NetworkProfile profile = geo();
  profile.name_ = "geo-cap";
  for (LinkProfile& link : profile.links_) {
    link.bandwidthBitsPerSecond = kGeoCapMbit * 1e6;
    link.flowWindowBytes = kGeoCapWindowBytes;
  }
  return profile;
}

NetworkProfile NetworkProfile::uniform(std::string name, const LinkProfile& link) {
  std::string site = name;
  return NetworkProfile(std::move(name), {std::move(site)}, {link});
}

std::vector<std::string> NetworkProfile::builtinNames() { return {"lan", "wan", "geo", "geo-cap"}; }

NetworkProfile NetworkProfile::builtin(std::string_view name) {
  if (name == "lan") return lan();
  if (name == "wan") return wan();
  if (name == "geo") return geo();
  if (name == "geo-cap") return geoCap();
  GOSSAMER_THROW("unknown network profile '{}' (built-ins: {})", name,
                 fmt::join(builtinNames(), ", "));
}

NetworkProfile NetworkProfile::fromSpec(const std::string& nameOrPath) {
  const std::vector<std::string> names = builtinNames();
  if (std::find(names.begin(), names.end(), nameOrPath) != names.end()) return builtin(nameOrPath);
  return load(nameOrPath);
}

NetworkProfile NetworkProfile::load(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    throw Error(
        fmt::format("cannot read network profile '{}' (not a built-in: {}; not a "
                    "readable file)",
                    path, fmt::join(builtinNames(), ", ")));
  }
  std::ostringstream text;
  text << in.rdbuf();
  return parse(text.str(), path);
}

NetworkProfile NetworkProfile::parse(std::string_view text, const std::string& source) {
  std::string name = stem(source);
  std::vector<std::string> sites;
  std::size_t sitesLine = 0;
  struct PairEntry {
    LinkProfile link;
    std::optional<LossMode> mode;           // none: the loss-mode line's
    std::optional<std::uint64_t> window;    // none: the flow-window line's
    std::size_t line = 0;
  };
  std::map<std::pair<std::size_t, std::size_t>, PairEntry> pairs;
  LossMode lossMode = LossMode::stream;  // of the links whose pair line names none
  std::size_t lossModeLine = 0;
  std::uint64_t flowWindow = 0;  // of the links whose pair line names none
  std::size_t flowWindowLine = 0;
  std::vector<std::pair<std::size_t, std::pair<std::string, std::string>>> peerLines;

  auto siteOf = [&](std::string_view site, std::size_t line) -> std::size_t {
    const auto it = std::find(sites.begin(), sites.end(), site);
    if (it == sites.end()) {
      parseError(source, line,
                 fmt::format("unknown site '{}' (sites: {})", site, fmt::join(sites, " ")));
    }
    return static_cast<std::size_t>(it - sites.begin());
  };

  std::size_t lineNumber = 0;
  std::size_t pos = 0;
  while (pos <= text.size()) {
    const std::size_t end = std::min(text.find('\n', pos), text.size());
    std::string_view line = text.substr(pos, end - pos);
    pos = end + 1;
    ++lineNumber;
    if (const std::size_t hash = line.find('#'); hash != std::string_view::npos) {
      line = line.substr(0, hash);
    }
    const std::vector<std::string_view> fields = splitFields(line);
    if (fields.empty()) continue;

    if (fields[0] == "name") {
      if (fields.size() != 2) parseError(source, lineNumber, "expected 'name NAME'");
      name = std::string(fields[1]);
    } else if (fields[0] == "sites") {
      if (sitesLine != 0) {
        parseError(source, lineNumber,
                   fmt::format("a second 'sites' line (the first is line {})", sitesLine));
      }
      if (fields.size() < 2) parseError(source, lineNumber, "expected 'sites SITE...'");
      for (std::size_t i = 1; i < fields.size(); ++i) {
        if (std::find(sites.begin(), sites.end(), fields[i]) != sites.end()) {
          parseError(source, lineNumber, fmt::format("site '{}' is listed twice", fields[i]));
        }
        sites.emplace_back(fields[i]);
      }
      sitesLine = lineNumber;
    } else if (fields[0] == "loss-mode") {
      if (lossModeLine != 0) {
        parseError(source, lineNumber,
                   fmt::format("a second 'loss-mode' line (the first is line {})", lossModeLine));
      }
      if (fields.size() != 2) {
        parseError(source, lineNumber, "expected 'loss-mode stream' or 'loss-mode datagram'");
      }
      lossMode = parseLossMode(source, lineNumber, fields[1]);
      lossModeLine = lineNumber;
    } else if (fields[0] == "flow-window") {
      if (flowWindowLine != 0) {
        parseError(source, lineNumber,
                   fmt::format("a second 'flow-window' line (the first is line {})",
                               flowWindowLine));
      }
      if (fields.size() != 2) parseError(source, lineNumber, "expected 'flow-window MIB'");
      flowWindow = parseWindow(source, lineNumber, fields[1]);
      flowWindowLine = lineNumber;
    } else if (fields[0] == "peer") {
      if (fields.size() != 3) {
        parseError(source, lineNumber, "expected 'peer INDEX SITE' or 'peer HOST:PORT SITE'");
      }
      peerLines.push_back({lineNumber, {std::string(fields[1]), std::string(fields[2])}});
    } else {
      if (sitesLine == 0) {
        parseError(source, lineNumber,
                   fmt::format("'{}' before the 'sites' line (expected 'name', 'sites', "
                               "'loss-mode', 'flow-window', 'peer' or a pair line after 'sites')",
                               fields[0]));
      }
      if (fields.size() < 6 || fields.size() > 8) {
        parseError(source, lineNumber,
                   fmt::format("a pair line needs 6 to 8 fields 'FROM TO LATENCY_MS JITTER_MS "
                               "MBIT LOSS [stream|datagram] [window=MIB]', got {}",
                               fields.size()));
      }
      const std::size_t from = siteOf(fields[0], lineNumber);
      const std::size_t to = siteOf(fields[1], lineNumber);
      constexpr const char* kFieldNames[] = {"latency_ms", "jitter_ms", "mbit", "loss"};
      double values[4] = {};
      for (std::size_t i = 0; i < 4; ++i) {
        const std::optional<double> value = parseNumber(fields[2 + i]);
        if (!value) {
          parseError(source, lineNumber,
                     fmt::format("{} '{}' is not a number", kFieldNames[i], fields[2 + i]));
        }
        values[i] = *value;
      }
      if (values[0] < 0) parseError(source, lineNumber, "latency_ms must be >= 0");
      if (values[1] < 0) parseError(source, lineNumber, "jitter_ms must be >= 0");
      if (values[2] < 0) parseError(source, lineNumber, "mbit must be >= 0 (0 = unlimited)");
      if (values[3] < 0 || values[3] > 1) {
        parseError(source, lineNumber, "loss must be a probability in [0, 1]");
      }
      const LinkProfile link{.latency = fromMs(values[0]),
                             .jitter = fromMs(values[1]),
                             .bandwidthBitsPerSecond = values[2] * 1e6,
                             .lossRate = values[3]};
      std::optional<LossMode> mode;
      std::optional<std::uint64_t> window;
      for (std::size_t i = 6; i < fields.size(); ++i) {
        if (fields[i].starts_with("window=")) {
          if (window) parseError(source, lineNumber, "window= is given twice");
          window = parseWindow(source, lineNumber, fields[i].substr(7));
        } else if (mode) {
          parseError(source, lineNumber, fmt::format("unexpected field '{}'", fields[i]));
        } else {
          mode = parseLossMode(source, lineNumber, fields[i]);
        }
      }
      const auto [it, inserted] =
          pairs.try_emplace({from, to}, PairEntry{link, mode, window, lineNumber});
      if (!inserted) {
        parseError(source, lineNumber,
                   fmt::format("pair {} -> {} is given twice (first on line {})", fields[0],
                               fields[1], it->second.line));
      }
    }
  }

  if (sitesLine == 0) parseError(source, 0, "no 'sites' line");
  const std::size_t n = sites.size();
  std::vector<LinkProfile> links(n * n);
  for (std::size_t from = 0; from < n; ++from) {
    for (std::size_t to = 0; to < n; ++to) {
      const auto it = pairs.find({from, to});
      LinkProfile& link = links[from * n + to];
      link.lossMode = lossMode;
      link.flowWindowBytes = flowWindow;
      if (it != pairs.end()) {
        link = it->second.link;
        link.lossMode = it->second.mode.value_or(lossMode);
        link.flowWindowBytes = it->second.window.value_or(flowWindow);
      } else if (from != to) {
        parseError(source, 0,
                   fmt::format("missing pair line '{} {} LATENCY_MS JITTER_MS MBIT LOSS' (every "
                               "ordered pair of distinct sites needs one)",
                               sites[from], sites[to]));
      }
    }
  }
  NetworkProfile profile(name, sites, std::move(links));
  for (const auto& [line, peer] : peerLines) {
    const std::size_t site = siteOf(peer.second, line);
    if (const std::optional<std::size_t> index = parseIndex(peer.first)) {
      profile.peerSites_[*index] = site;
      continue;
    }
    Endpoint endpoint;
    try {
      endpoint = Endpoint::parse(peer.first);
    } catch (const Error&) {
      parseError(source, line,
                 fmt::format("peer '{}' is neither an index nor a HOST:PORT endpoint", peer.first));
    }
    profile.endpointSites_[endpoint] = site;
  }
  return profile;
}

std::optional<std::size_t> NetworkProfile::siteIndex(std::string_view site) const {
  const auto it = std::find(sites_.begin(), sites_.end(), site);
  if (it == sites_.end()) return std::nullopt;
  return static_cast<std::size_t>(it - sites_.begin());
}

const LinkProfile& NetworkProfile::link(std::size_t fromSite, std::size_t toSite) const {
  GOSSAMER_ENFORCE(fromSite < sites_.size() && toSite < sites_.size(),
                   "network profile '{}' has {} sites; no link {} -> {}", name_, sites_.size(),
                   fromSite, toSite);
  return links_[fromSite * sites_.size() + toSite];
}

std::chrono::microseconds NetworkProfile::maxRoundTrip() const {
  std::chrono::microseconds worst{0};
  for (std::size_t a = 0; a < sites_.size(); ++a) {
    for (std::size_t b = 0; b < sites_.size(); ++b) {
      const LinkProfile& there = link(a, b);
      const LinkProfile& back = link(b, a);
      worst = std::max(worst, there.latency + there.jitter + back.latency + back.jitter);
    }
  }
  return worst;
}

void NetworkProfile::setLink(std::size_t fromSite, std::size_t toSite, const LinkProfile& link) {
  GOSSAMER_ENFORCE(fromSite < sites_.size() && toSite < sites_.size(),
                   "network profile '{}' has {} sites; no link {} -> {}", name_, sites_.size(),
                   fromSite, toSite);
  validateLinkProfile(
      link, fmt::format("network profile '{}', {} -> {}", name_, sites_[fromSite], sites_[toSite]));
  links_[fromSite * sites_.size() + toSite] = link;
}

void NetworkProfile::assignPeer(std::size_t peerIndex, std::string_view site) {
  const std::optional<std::size_t> index = siteIndex(site);
  GOSSAMER_ENFORCE(index.has_value(), "network profile '{}' has no site '{}' (sites: {})", name_,
                   site, fmt::join(sites_, " "));
  peerSites_[peerIndex] = *index;
}

void NetworkProfile::assignEndpoint(const Endpoint& endpoint, std::string_view site) {
  const std::optional<std::size_t> index = siteIndex(site);
  GOSSAMER_ENFORCE(index.has_value(), "network profile '{}' has no site '{}' (sites: {})", name_,
                   site, fmt::join(sites_, " "));
  endpointSites_[endpoint] = *index;
}

std::size_t NetworkProfile::siteOfPeer(std::size_t peerIndex) const {
  const auto it = peerSites_.find(peerIndex);
  return it != peerSites_.end() ? it->second : peerIndex % sites_.size();
}

std::optional<std::size_t> NetworkProfile::siteOfEndpoint(const Endpoint& endpoint) const {
  const auto it = endpointSites_.find(endpoint);
  if (it == endpointSites_.end()) return std::nullopt;
  return it->second;
}

std::uint64_t mixSeed(std::uint64_t seed, std::uint64_t value) {
  std::uint64_t z = seed + 0x9e3779b97f4a7c15ULL * (value + 1);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

std::string NetworkProfile::str() const {
  // The loss-mode line names the mode of most links; a pair line names its own when it differs.
  const auto datagrams = std::count_if(links_.begin(), links_.end(), [](const LinkProfile& l) {
    return l.lossMode == LossMode::datagram;
  });
  const LossMode common = 2 * static_cast<std::size_t>(datagrams) > links_.size()
                              ? LossMode::datagram
                              : LossMode::stream;
  std::string out = fmt::format(
      "name {}\nsites {}\nloss-mode {}\n# from to latency_ms jitter_ms mbit loss [loss mode]\n",
      name_, fmt::join(sites_, " "), shaped::name(common));
  for (std::size_t from = 0; from < sites_.size(); ++from) {
    for (std::size_t to = 0; to < sites_.size(); ++to) {
      const LinkProfile& l = link(from, to);
      out += fmt::format("{} {} {} {} {} {}", sites_[from], sites_[to],
                         formatNumber(static_cast<double>(l.latency.count()) / 1000.0),
                         formatNumber(static_cast<double>(l.jitter.count()) / 1000.0),
                         formatNumber(l.bandwidthBitsPerSecond / 1e6), formatNumber(l.lossRate));
      if (l.lossMode != common) out += fmt::format(" {}", shaped::name(l.lossMode));
      if (l.flowWindowBytes != 0) {
        out += fmt::format(" window={}", formatNumber(static_cast<double>(l.flowWindowBytes) / kMiB));
      }
      out += "\n";
    }
  }
  for (const auto& [peer, site] : peerSites_)
    out += fmt::format("peer {} {}\n", peer, sites_[site]);
  for (const auto& [endpoint, site] : endpointSites_) {
    out += fmt::format("peer {} {}\n", endpoint.str(), sites_[site]);
  }
  return out;
}

}  // namespace gossamer::net::shaped
