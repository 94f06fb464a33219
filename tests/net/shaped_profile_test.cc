// The network profiles of the shaped transport (net/shaped/profile.h): the built-in ones (lan,
// wan, the geo matrix), custom profile files and their errors, which name the file and line, and
// the loss mode of each link (stream unless a profile says datagram).
#include <chrono>
#include <cmath>
#include <cstddef>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include "engine/base/enforce.h"
#include "net/shaped/profile.h"
#include "net/transport.h"

namespace gossamer::net::shaped {
namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;

// ---- helpers ----

// A fresh directory under the system temp dir, removed at scope exit.
struct TempDir {
  fs::path path;
  TempDir() {
    path = fs::temp_directory_path() /
           ("gossamer-shaped-test-" + std::to_string(std::random_device{}()));
    fs::create_directories(path);
  }
  ~TempDir() { fs::remove_all(path); }
  std::string write(const std::string& name, const std::string& text) const {
    const fs::path file = path / name;
    std::ofstream(file) << text;
    return file.string();
  }
};

// The message of the gossamer::Error that `parse` throws on `text` (empty if none).
std::string parseError(const std::string& text, const std::string& source = "bad.net") {
  try {
    NetworkProfile::parse(text, source);
  } catch (const Error& error) {
    return error.what();
  }
  return {};
}

// ---- profiles ----

TEST_CASE("net shaped: built-in profiles") {
  const NetworkProfile lan = NetworkProfile::builtin("lan");
  CHECK(lan.siteCount() == 1);
  CHECK_FALSE(lan.between(0, 5).shapes());
  CHECK(lan == NetworkProfile());

  const NetworkProfile wan = NetworkProfile::builtin("wan");
  CHECK(wan.between(0, 1).latency == 25ms);
  CHECK(wan.between(3, 8).bandwidthBitsPerSecond == 1e9);
  CHECK(wan.between(3, 8).lossRate == 0);

  CHECK_THROWS_WITH_AS(NetworkProfile::builtin("moon"), doctest::Contains("lan, wan, geo"), Error);
  for (const std::string& name : NetworkProfile::builtinNames()) {
    const NetworkProfile profile = NetworkProfile::builtin(name);
    CHECK(profile.name() == name);
    // The text format round-trips every built-in.
    CHECK(NetworkProfile::parse(profile.str(), name) == profile);
  }
}

TEST_CASE("net shaped: geo-cap is geo with 10 Gbit/s capacities and 8 MiB flow windows") {
  const NetworkProfile geo = NetworkProfile::geo();
  const NetworkProfile cap = NetworkProfile::builtin("geo-cap");
  REQUIRE(cap.sites() == geo.sites());
  for (std::size_t a = 0; a < geo.siteCount(); ++a) {
    for (std::size_t b = 0; b < geo.siteCount(); ++b) {
      CHECK(cap.link(a, b).latency == geo.link(a, b).latency);
      CHECK(cap.link(a, b).jitter == geo.link(a, b).jitter);
      CHECK(cap.link(a, b).bandwidthBitsPerSecond == 10e9);
      CHECK(cap.link(a, b).flowWindowBytes == std::uint64_t{8} << 20);
      CHECK(geo.link(a, b).flowWindowBytes == 0);  // geo is as it was
    }
  }
  // Tokyo-London: 212 ms RTT, 8 MiB a flow: 316.6 Mbit/s.
  const LinkProfile& tokyoLondon = cap.link(*cap.siteIndex("tokyo"), *cap.siteIndex("london"));
  CHECK(tokyoLondon.flowBitsPerSecond() == doctest::Approx(8.0 * 8 * (1 << 20) / 0.212));
}

TEST_CASE("net shaped: flow windows in the text format") {
  const NetworkProfile profile = NetworkProfile::parse(R"(sites a b
flow-window 4
a b 10 0 1000 0
b a 10 0 1000 0 window=0.5
)",
                                                       "w.net");
  CHECK(profile.link(0, 1).flowWindowBytes == std::uint64_t{4} << 20);
  CHECK(profile.link(1, 0).flowWindowBytes == std::uint64_t{1} << 19);
  CHECK(profile.link(0, 0).flowWindowBytes == std::uint64_t{4} << 20);
  CHECK(NetworkProfile::parse(profile.str(), "again") == profile);
  CHECK_THROWS_WITH_AS(NetworkProfile::parse("sites a b\na b 1 0 1 0 window=-1\n", "bad.net"),
                       doctest::Contains("bad.net:2: a flow window"), Error);
  CHECK_THROWS_WITH_AS(
      NetworkProfile::parse("sites a b\na b 1 0 1 0 window=1 window=2\n", "bad.net"),
      doctest::Contains("window= is given twice"), Error);
  CHECK_THROWS_WITH_AS(NetworkProfile::parse("flow-window 1\nflow-window 2\nsites a\n", "bad.net"),
                       doctest::Contains("bad.net:2: a second 'flow-window' line"), Error);
}

TEST_CASE("net shaped: the geo matrix is complete and symmetric") {
  const NetworkProfile geo = NetworkProfile::geo();
  REQUIRE(geo.sites() == std::vector<std::string>{"tokyo", "london", "oregon", "ohio"});
  const std::size_t n = geo.siteCount();
  for (std::size_t from = 0; from < n; ++from) {
    CHECK(geo.link(from, from).latency == 500us);
    for (std::size_t to = 0; to < n; ++to) {
      const LinkProfile& link = geo.link(from, to);
      const LinkProfile& back = geo.link(to, from);
      CAPTURE(geo.sites()[from]);
      CAPTURE(geo.sites()[to]);
      CHECK(link.shapes());
      CHECK(link.bandwidthBitsPerSecond > 0);
      CHECK(link.lossRate == 0);
      // Symmetric within 5% (published RTT tables differ by a few percent per direction).
      CHECK(std::abs(static_cast<double>((link.latency - back.latency).count())) <=
            0.05 * static_cast<double>(link.latency.count()));
      if (from == to) continue;
      // Realistic inter-region figures: 10-150 ms one-way, 100-1000 Mbit/s.
      CHECK(link.latency >= 10ms);
      CHECK(link.latency <= 150ms);
      CHECK(link.bandwidthBitsPerSecond >= 100e6);
      CHECK(link.bandwidthBitsPerSecond <= 1000e6);
      CHECK(link.jitter < link.latency / 10);
    }
  }
  // Published orders: Tokyo-London is the longest hop, Oregon-Ohio the shortest.
  const auto site = [&geo](const char* name) { return *geo.siteIndex(name); };
  CHECK(geo.link(site("tokyo"), site("london")).latency >
        geo.link(site("tokyo"), site("ohio")).latency);
  CHECK(geo.link(site("oregon"), site("ohio")).latency <
        geo.link(site("london"), site("ohio")).latency);
  // Peers are spread round-robin over the sites.
  CHECK(geo.siteOfPeer(0) == 0);
  CHECK(geo.siteOfPeer(5) == 1);
  CHECK(geo.between(0, 4).latency == 500us);  // both in tokyo
}

TEST_CASE("net shaped: custom profile file") {
  TempDir dir;
  const std::string path = dir.write("two-labs.net", R"(# two labs and a cloud
sites lab cloud   # comment after fields
lab   cloud 10   1    100   0.01
cloud lab   12.5 0.5  0     0
cloud cloud 0.25 0    10000 0
peer 3 cloud
peer 10.0.0.5:7000 lab
)");
  const NetworkProfile profile = NetworkProfile::fromSpec(path);
  CHECK(profile.name() == "two-labs");
  REQUIRE(profile.siteCount() == 2);
  const LinkProfile& up = profile.link(0, 1);
  CHECK(up.latency == 10ms);
  CHECK(up.jitter == 1ms);
  CHECK(up.bandwidthBitsPerSecond == 100e6);
  CHECK(up.lossRate == doctest::Approx(0.01));
  CHECK(profile.link(1, 0).latency == 12500us);
  CHECK(profile.link(1, 0).bandwidthBitsPerSecond == 0);
  CHECK_FALSE(profile.link(0, 0).shapes());  // within-site lines are optional
  CHECK(profile.link(1, 1).latency == 250us);
  // Round-robin unless a peer line says otherwise.
  CHECK(profile.siteOfPeer(0) == 0);
  CHECK(profile.siteOfPeer(1) == 1);
  CHECK(profile.siteOfPeer(2) == 0);
  CHECK(profile.siteOfPeer(3) == 1);
  CHECK(profile.siteOfEndpoint(Endpoint{"10.0.0.5", 7000}) == 0);
  CHECK_FALSE(profile.siteOfEndpoint(Endpoint{"10.0.0.6", 7000}).has_value());
  CHECK(NetworkProfile::parse(profile.str(), "again") == profile);

  NetworkProfile named = NetworkProfile::parse("name other\nsites x\n", "ignored.net");
  CHECK(named.name() == "other");
  named.assignPeer(4, "x");
  CHECK_THROWS_AS(named.assignPeer(4, "y"), Error);
  CHECK_THROWS_WITH_AS(NetworkProfile::fromSpec(dir.path.string() + "/missing.net"),
                       doctest::Contains("missing.net"), Error);
}

TEST_CASE("net shaped: profile errors name the file and line") {
  const std::string sites = "sites a b\n";
  CHECK(parseError("a b 1 0 0 0\n") ==
        "bad.net:1: 'a' before the 'sites' line (expected "
        "'name', 'sites', 'loss-mode', 'flow-window', 'peer' or a pair line after 'sites')");
  CHECK(parseError(sites + "a b 1 0 0\n") ==
        "bad.net:2: a pair line needs 6 to 8 fields 'FROM TO LATENCY_MS JITTER_MS MBIT LOSS "
        "[stream|datagram] [window=MIB]', got 5");
  CHECK(parseError(sites + "a b 1 0 0 0 stream window=1 x\n") ==
        "bad.net:2: a pair line needs 6 to 8 fields 'FROM TO LATENCY_MS JITTER_MS MBIT LOSS "
        "[stream|datagram] [window=MIB]', got 9");
  CHECK(parseError(sites + "a b 1 0 0 0 stream x\n") == "bad.net:2: unexpected field 'x'");
  CHECK(parseError(sites + "a b 1 0 0 0 tcp\n") ==
        "bad.net:2: unknown loss mode 'tcp' (expected stream or datagram)");
  CHECK(parseError(sites + "loss-mode udp\n") ==
        "bad.net:2: unknown loss mode 'udp' (expected stream or datagram)");
  CHECK(parseError(sites + "loss-mode\n") ==
        "bad.net:2: expected 'loss-mode stream' or 'loss-mode datagram'");
  CHECK(parseError(sites + "loss-mode stream datagram\n") ==
        "bad.net:2: expected 'loss-mode stream' or 'loss-mode datagram'");
  CHECK(parseError("loss-mode datagram\n" + sites + "loss-mode stream\n") ==
        "bad.net:3: a second 'loss-mode' line (the first is line 1)");
  CHECK(parseError(sites + "a c 1 0 0 0\n") == "bad.net:2: unknown site 'c' (sites: a b)");
  CHECK(parseError(sites + "\n\na b 1x 0 0 0\n") == "bad.net:4: latency_ms '1x' is not a number");
  CHECK(parseError(sites + "a b -1 0 0 0\n") == "bad.net:2: latency_ms must be >= 0");
  CHECK(parseError(sites + "a b 1 -1 0 0\n") == "bad.net:2: jitter_ms must be >= 0");
  CHECK(parseError(sites + "a b 1 0 -5 0\n") == "bad.net:2: mbit must be >= 0 (0 = unlimited)");
  CHECK(parseError(sites + "a b 1 0 0 1.5\n") == "bad.net:2: loss must be a probability in [0, 1]");
  CHECK(parseError(sites + "a b 1 0 0 0\nb a 1 0 0 0\na b 2 0 0 0\n") ==
        "bad.net:4: pair a -> b is given twice (first on line 2)");
  CHECK(parseError(sites + "a b 1 0 0 0\n") ==
        "bad.net:0: missing pair line 'b a LATENCY_MS JITTER_MS MBIT LOSS' (every ordered pair "
        "of distinct sites needs one)");
  CHECK(parseError("sites a a\n") == "bad.net:1: site 'a' is listed twice");
  CHECK(parseError("sites a\nsites b\n") ==
        "bad.net:2: a second 'sites' line (the first is line 1)");
  CHECK(parseError("# nothing\n") == "bad.net:0: no 'sites' line");
  CHECK(parseError("sites a\npeer 1\n") ==
        "bad.net:2: expected 'peer INDEX SITE' or 'peer HOST:PORT SITE'");
  CHECK(parseError("sites a\npeer 1 b\n") == "bad.net:2: unknown site 'b' (sites: a)");
  CHECK(parseError("sites a\npeer nohost a\n") ==
        "bad.net:2: peer 'nohost' is neither an index nor a HOST:PORT endpoint");
  CHECK(parseError("sites a\nname\n", "dir/x.net") == "dir/x.net:2: expected 'name NAME'");
}

TEST_CASE("net shaped: loss mode, stream unless a profile says datagram") {
  // Default: stream, for every link (built-ins included).
  CHECK(LinkProfile{}.lossMode == LossMode::stream);
  const NetworkProfile plain =
      NetworkProfile::parse("sites a b\na b 1 0 0 0.1\nb a 1 0 0 0\n", "p");
  CHECK(plain.link(0, 1).lossMode == LossMode::stream);
  CHECK(plain.link(1, 1).lossMode == LossMode::stream);
  for (const std::string& name : NetworkProfile::builtinNames()) {
    const NetworkProfile profile = NetworkProfile::builtin(name);
    for (std::size_t from = 0; from < profile.siteCount(); ++from) {
      for (std::size_t to = 0; to < profile.siteCount(); ++to)
        CHECK(profile.link(from, to).lossMode == LossMode::stream);
    }
  }
  // A loss-mode line sets every link's mode wherever it stands, within-site defaults included; a
  // pair line's seventh field overrides it for that pair.
  const NetworkProfile mixed = NetworkProfile::parse(R"(sites a b
a b 1 0 0 0.1
b a 1 0 0 0.2 stream
loss-mode datagram   # after the pair lines: still for all of them
)",
                                                     "mixed.net");
  CHECK(mixed.link(0, 1).lossMode == LossMode::datagram);
  CHECK(mixed.link(1, 0).lossMode == LossMode::stream);
  CHECK(mixed.link(0, 0).lossMode == LossMode::datagram);
  CHECK(mixed.link(1, 0).lossRate == doctest::Approx(0.2));
  // The text format keeps every link's mode: the loss-mode line names the most common one.
  const std::string text = mixed.str();
  CHECK(text.find("loss-mode datagram\n") != std::string::npos);
  CHECK(text.find("b a 1 0 0 0.2 stream\n") != std::string::npos);
  CHECK(NetworkProfile::parse(text, "mixed.net") == mixed);
  NetworkProfile programmatic = NetworkProfile::uniform("u", LinkProfile{.lossRate = 0.05});
  CHECK(programmatic.str().find("loss-mode stream\n") != std::string::npos);
  programmatic.setLink(0, 0, LinkProfile{.lossRate = 0.05, .lossMode = LossMode::datagram});
  CHECK(NetworkProfile::parse(programmatic.str(), "u") == programmatic);
  // Names, and a mode out of range is refused like any invalid link.
  CHECK(std::string(name(LossMode::stream)) == "stream");
  CHECK(std::string(name(LossMode::datagram)) == "datagram");
  CHECK(lossModeNamed("datagram") == LossMode::datagram);
  CHECK_FALSE(lossModeNamed("udp").has_value());
  CHECK_THROWS_WITH_AS(
      NetworkProfile::uniform("x", LinkProfile{.lossMode = static_cast<LossMode>(7)}),
      doctest::Contains("loss mode must be stream or datagram"), Error);
}

}  // namespace
}  // namespace gossamer::net::shaped
