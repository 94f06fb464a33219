#include "engine/runtime/join_failure.h"

#include <algorithm>

#include <asio/error.hpp>
#include <fmt/format.h>

#include "net/errors.h"

namespace gossamer::engine::runtime {
namespace {

// Text that came from a remote or the system, made one printable line of bounded length.
std::string oneLine(std::string_view text) {
  constexpr std::size_t kMaxDetail = 300;
  std::string out;
  for (std::size_t i = 0; i < text.size() && i < kMaxDetail; ++i) {
    const char c = text[i];
    out.push_back(c >= 0x20 && c < 0x7f ? c : '?');
  }
  if (text.size() > kMaxDetail) out += "...";
  return out;
}

// A failed name lookup (getaddrinfo's errors, as Asio reports them).
bool isResolveError(std::error_code error) {
  return error.category() == asio::error::get_netdb_category() ||
         error.category() == asio::error::get_addrinfo_category();
}

std::string detailOf(const net::membership::SeedFailure& failure) {
  if (!failure.error) return "no answer yet";
  if (!failure.reason.empty()) return oneLine(failure.reason);
  std::string message = oneLine(failure.error.message());  // "Connection timed out"
  if (!message.empty() && message[0] >= 'A' && message[0] <= 'Z') message[0] += 'a' - 'A';
  if (isResolveError(failure.error))
    return fmt::format("its host name '{}' does not resolve: {}", oneLine(failure.seed.host),
                       message);
  return message;
}

// "a:1 (connection timed out), b:2 (no answer yet)"
std::string seedsWithDetails(const std::vector<SeedCause>& seeds) {
  std::string out;
  for (const SeedCause& s : seeds)
    out += fmt::format("{}{} ({})", out.empty() ? "" : ", ", s.seed.str(), s.detail);
  return out;
}

// One seed's cause, for a list of seeds that failed differently.
std::string seedText(const SeedCause& s) {
  const std::string seed = s.seed.str();
  switch (s.cause) {
    case JoinCause::authentication:
      return seed + " refused authentication (wrong --secret-file?)";
    case JoinCause::model:
      return fmt::format("{} trains another model ({})", seed, s.detail);
    case JoinCause::version:
      return fmt::format("{} speaks another protocol version ({})", seed, s.detail);
    case JoinCause::cluster:
      return fmt::format("{} belongs to another cluster ({})", seed, s.detail);
    case JoinCause::refused:
      return fmt::format("{} refused to admit this peer ({})", seed, s.detail);
    case JoinCause::tls:
      return fmt::format("{} and this peer disagree on TLS ({})", seed, s.detail);
    case JoinCause::unreachable:
      return fmt::format("{} was unreachable ({})", seed, s.detail);
  }
  return seed;
}

}  // namespace

JoinCause causeOf(std::error_code error) {
  if (error == net::Errc::authenticationFailed) return JoinCause::authentication;
  if (error == net::Errc::modelMismatch) return JoinCause::model;
  if (error == net::Errc::versionMismatch) return JoinCause::version;
  if (error == net::Errc::clusterMismatch) return JoinCause::cluster;
  if (error == net::Errc::joinRefused) return JoinCause::refused;
  if (error == net::Errc::peerSpeaksTls || error == net::Errc::peerSpeaksPlaintext)
    return JoinCause::tls;
  return JoinCause::unreachable;
}

JoinFailure JoinFailure::of(const std::vector<net::membership::SeedFailure>& failures,
                            std::chrono::milliseconds timeout) {
  JoinFailure out;
  out.timeout = timeout;
  for (const net::membership::SeedFailure& f : failures)
    out.seeds.push_back(SeedCause{f.seed, causeOf(f.error), detailOf(f)});
  return out;
}

std::optional<JoinCause> JoinFailure::commonCause() const {
  if (seeds.empty()) return std::nullopt;
  const JoinCause first = seeds.front().cause;
  const bool alike = std::all_of(seeds.begin(), seeds.end(),
                                 [first](const SeedCause& s) { return s.cause == first; });
  return alike ? std::optional(first) : std::nullopt;
}

std::string JoinFailure::cause() const {
  if (seeds.empty()) return "it has no seed to join through";
  if (const std::optional<JoinCause> common = commonCause()) {
    // One seed's words stand for all where they would repeat (every seed runs the cluster's).
    const std::string& detail = seeds.front().detail;
    switch (*common) {
      case JoinCause::authentication:
        return "every seed refused authentication (wrong --secret-file?)";
      case JoinCause::model:
        return fmt::format(
            "the cluster's model differs from this peer's ({}; check --model and --hidden)",
            detail);
      case JoinCause::version:
        return fmt::format("every seed speaks another protocol version ({})", detail);
      case JoinCause::cluster:
        return fmt::format("every seed belongs to another cluster ({}; check --cluster-id)",
                           detail);
      case JoinCause::refused:
        return "every seed refused to admit this peer: " + seedsWithDetails(seeds);
      case JoinCause::tls:
        return fmt::format("the seeds and this peer disagree on TLS ({})", detail);
      case JoinCause::unreachable:
        return "every seed was unreachable: " + seedsWithDetails(seeds);
    }
  }
  std::string out = "the seeds failed differently: ";
  for (std::size_t i = 0; i < seeds.size(); ++i) out += (i > 0 ? "; " : "") + seedText(seeds[i]);
  return out;
}

std::string JoinFailure::describe() const {
  return fmt::format("could not join the cluster within {:g} s (--join-timeout): {}",
                     static_cast<double>(timeout.count()) / 1000.0, cause());
}

}  // namespace gossamer::engine::runtime
