// Refused inbound handshakes, as the accepting side names, counts and logs them. A peer that
// accepts connections from the internet meets scanners: hundreds of bare connect-and-close a
// second must not become hundreds of warnings, and each refusal must say its true cause.
//
// RefusalLog is a pure state machine over the times it is given: within one window (10 s by
// default) the first refusal of each cause from each source (the remote host, without its port)
// is logged in full, up to `fullLines` lines; the others are counted and summarized in one line
// when the window closes ("refused 299 more inbound handshakes in the last 10 s: 299 closed before
// sending a byte from 127.0.0.1"). Counts per cause are kept for the whole life.
#pragma once

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

namespace gossamer::net::wire {

enum class Refusal {
  closedEarly,       // connected and closed (or reset) before sending a byte: a port scan
  closedMidway,      // hung up after some bytes, before the handshake completed
  notTls,            // a TLS peer got plaintext (or no gossamer at all)
  notPlaintext,      // a plaintext peer got TLS
  notGossamer,       // bytes that are not gossamer's handshake
  wrongSecret,       // failed the proof of the cluster secret (or the TLS certificate check)
  wrongVersion,      // another protocol version
  wrongCluster,      // another cluster id or model fingerprint
  timedOut,          // no complete handshake within the timeout
  tooManyPending,    // the source already had its share of pending handshakes
  other,             // anything else (out of memory, a socket error)
};
inline constexpr std::size_t kRefusalKinds = static_cast<std::size_t>(Refusal::other) + 1;

// "closed before sending a byte", ...
const char* describe(Refusal cause);

// The cause of a failed server handshake from its error and the bytes the link had received.
Refusal classify(std::error_code error, std::uint64_t bytesReceived);

// The host of "host:port", "[v6]:port" or "inproc:N" (a transport's remoteAddress).
std::string sourceOf(const std::string& remoteAddress);

class RefusalLog {
 public:
  using Clock = std::chrono::steady_clock;
  struct Options {
    Clock::duration window = std::chrono::seconds(10);
    std::size_t fullLines = 8;  // refusals logged in full per window, at most
    std::size_t sources = 16;   // sources named in a summary; the rest are counted together
  };
  explicit RefusalLog(Options options);
  RefusalLog() : RefusalLog(Options{}) {}

  // One refusal at `now`; returns the line to log at once (the first of its cause and source in
  // this window), or nothing (counted for the summary). Closes the last window first if it ended
  // (its summary then comes first in the returned lines).
  std::vector<std::string> record(Refusal cause, const std::string& source,
                                  const std::string& detail, Clock::time_point now);
  // The summary of the window, once it ended by `now` (nothing when nothing was held back).
  std::optional<std::string> flush(Clock::time_point now);
  // Refusals of each cause so far.
  const std::array<std::uint64_t, kRefusalKinds>& totals() const { return totals_; }

 private:
  std::optional<std::string> closeWindow();

  Options options_;
  Clock::time_point windowStart_{};
  bool open_ = false;
  std::size_t linesThisWindow_ = 0;
  std::map<std::pair<Refusal, std::string>, std::uint64_t> logged_;  // cause, source: held back
  std::array<std::uint64_t, kRefusalKinds> totals_{};
};

}  // namespace gossamer::net::wire
