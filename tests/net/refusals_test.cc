// net/wire/refusals.h: the causes of refused inbound handshakes, and the log that names each
// cause and source once per window and summarizes the rest.
#include "net/wire/refusals.h"

#include <asio/error.hpp>
#include <doctest/doctest.h>

#include "net/errors.h"

using namespace gossamer::net;
using namespace gossamer::net::wire;
using namespace std::chrono_literals;

TEST_CASE("refusals: each error has its true cause") {
  CHECK(classify(asio::error::eof, 0) == Refusal::closedEarly);
  CHECK(classify(asio::error::connection_reset, 0) == Refusal::closedEarly);
  CHECK(classify(asio::error::eof, 12) == Refusal::closedMidway);
  CHECK(classify(Errc::peerSpeaksPlaintext, 5) == Refusal::notTls);
  CHECK(classify(Errc::peerSpeaksTls, 5) == Refusal::notPlaintext);
  CHECK(classify(Errc::malformedFrame, 16) == Refusal::notGossamer);
  CHECK(classify(Errc::authenticationFailed, 90) == Refusal::wrongSecret);
  CHECK(classify(Errc::versionMismatch, 90) == Refusal::wrongVersion);
  CHECK(classify(Errc::modelMismatch, 90) == Refusal::wrongCluster);
  CHECK(classify(Errc::handshakeTimeout, 0) == Refusal::timedOut);
  CHECK(classify(std::make_error_code(std::errc::not_enough_memory), 3) == Refusal::other);
  CHECK(sourceOf("10.0.0.7:41234") == "10.0.0.7");
  CHECK(sourceOf("[::1]:7000") == "::1");
  CHECK(sourceOf("inproc:3") == "inproc");
}

TEST_CASE("refusals: a scan is one line and a summary, not a line per connection") {
  RefusalLog log({.window = 10s, .fullLines = 3, .sources = 2});
  const auto t0 = RefusalLog::Clock::time_point{} + 1h;
  // 300 bare connect-and-close from one host within a second: the first is logged in full.
  std::size_t lines = 0;
  for (int i = 0; i < 300; ++i) {
    const auto out = log.record(Refusal::closedEarly, "203.0.113.9", "", t0 + i * 3ms);
    lines += out.size();
    if (i == 0) {
      REQUIRE(out.size() == 1);
      CHECK(out[0] == "refused an inbound handshake from 203.0.113.9: closed before sending a byte");
    }
  }
  CHECK(lines == 1);
  // Another cause from another source is news: logged at once, with its detail.
  const auto wrong = log.record(Refusal::wrongSecret, "198.51.100.4", "proof failed", t0 + 2s);
  REQUIRE(wrong.size() == 1);
  CHECK(wrong[0] == "refused an inbound handshake from 198.51.100.4: wrong secret or identity: "
                    "proof failed");
  log.record(Refusal::wrongSecret, "198.51.100.4", "", t0 + 3s);
  CHECK_FALSE(log.flush(t0 + 9s).has_value());  // the window is still open
  // The window closes: one line, the largest counts first.
  const auto summary = log.flush(t0 + 10s);
  REQUIRE(summary.has_value());
  CHECK(*summary == "refused 300 more inbound handshakes in the last 10 s: 299 closed before "
                    "sending a byte from 203.0.113.9, 1 wrong secret or identity from 198.51.100.4");
  CHECK_FALSE(log.flush(t0 + 30s).has_value());  // nothing held back since
  // The next window logs the first of each again.
  CHECK(log.record(Refusal::closedEarly, "203.0.113.9", "", t0 + 31s).size() == 1);
  CHECK(log.totals()[static_cast<std::size_t>(Refusal::closedEarly)] == 301);
  CHECK(log.totals()[static_cast<std::size_t>(Refusal::wrongSecret)] == 2);
}

TEST_CASE("refusals: many sources are bounded in lines and in the summary") {
  RefusalLog log({.window = 10s, .fullLines = 3, .sources = 2});
  const auto t0 = RefusalLog::Clock::time_point{} + 1h;
  std::size_t lines = 0;
  for (int host = 0; host < 50; ++host)
    for (int i = 0; i <= host % 3; ++i)
      lines += log.record(Refusal::notTls, "192.0.2." + std::to_string(host), "", t0 + 1ms).size();
  CHECK(lines == 3);  // fullLines, however many sources
  // The next record after the window carries its summary first.
  const auto next = log.record(Refusal::timedOut, "192.0.2.200", "", t0 + 11s);
  REQUIRE(next.size() == 2);
  // 99 refusals, 3 of them logged; hosts 5, 8, ..., 47 held back 3 each (named in the order of
  // their addresses as text), the other 90 (from the 47 other hosts that held any back) are
  // counted together.
  CHECK(next[0] == "refused 96 more inbound handshakes in the last 10 s: 3 not TLS (plaintext, or "
                   "not gossamer) from 192.0.2.11, 3 not TLS (plaintext, or not gossamer) from "
                   "192.0.2.14, 90 from 47 other sources or causes");
  CHECK(next[1] == "refused an inbound handshake from 192.0.2.200: timed out");
}
