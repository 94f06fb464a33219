// Helpers of the shaped transport's tests over inproc (shaped_transport_test.cc and
// shaped_faults_test.cc): two shaped peers on one io_context (one thread), a watchdog deadline for
// a case's coroutine, and frames that carry a sequence number.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <exception>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include <asio/co_spawn.hpp>
#include <asio/io_context.hpp>
#include <asio/use_awaitable.hpp>
#include <doctest/doctest.h>

#include "net/inproc/inproc_transport.h"
#include "net/shaped/profile.h"
#include "net/shaped/shaped_transport.h"
#include "net/transport.h"

// GCC 12 false positive (GCC PR 109224): after inlining it pairs asio's awaitable frame
// allocation (awaitable_frame_base::operator new, backed by the recycling allocator) with the
// wrong deallocation and warns on coroutine lambdas. Scoped to the coroutine bodies of this
// header and of the test files that include it.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
#endif

namespace gossamer::net::shaped::testing {

using namespace std::chrono_literals;
using asio::awaitable;
using Clock = std::chrono::steady_clock;

// Runs `body` on `io` with a hard deadline (a hung case aborts the binary instead of stalling
// the run); rethrows what it threw.
inline void runWithWatchdog(asio::io_context& io, std::function<awaitable<void>()> body,
                            std::chrono::seconds limit = 30s) {
  bool finished = false;
  std::exception_ptr failure;
  io.restart();  // a previous run may have left it stopped
  asio::co_spawn(io, body(), [&](std::exception_ptr error) {
    failure = error;
    finished = true;
  });
  const auto deadline = Clock::now() + limit;
  while (!finished && Clock::now() < deadline) io.run_for(50ms);
  REQUIRE_MESSAGE(finished, "watchdog: the test did not finish within its deadline");
  if (failure) std::rethrow_exception(failure);
}

// Two shaped peers, 0 and 1, over inproc on `io`, with `profile` and shared partitions.
struct PeerPair {
  std::shared_ptr<inproc::Hub> hub = inproc::makeHub();
  std::shared_ptr<Partitions> partitions = std::make_shared<Partitions>();
  std::unique_ptr<Transport> a, b;  // peer 0, peer 1 (b listens)

  PeerPair(asio::io_context& io, const NetworkProfile& profile, std::uint64_t seed = 7,
           std::chrono::milliseconds prefaceTimeout = 5000ms,
           std::size_t maxDelayedBytes = std::size_t{64} << 20) {
    for (std::size_t index : {0, 1}) {
      Options options{.profile = profile,
                      .selfIndex = index,
                      .indexOf = [this](const Endpoint& e) -> std::optional<std::size_t> {
                        if (b && e == b->localEndpoint()) return 1;
                        if (a && e == a->localEndpoint()) return 0;
                        return std::nullopt;
                      },
                      .seed = seed,
                      .maxDelayedBytes = maxDelayedBytes,
                      .prefaceTimeout = prefaceTimeout};
      (index == 0 ? a : b) =
          makeTransport(inproc::makeTransport(io, hub), std::move(options), partitions);
    }
    REQUIRE_FALSE(b->listen(Endpoint{"inproc", 0}));
  }

  // A connected link pair: (a's end, b's end).
  awaitable<std::pair<std::unique_ptr<Link>, std::unique_ptr<Link>>> connect() {
    LinkResult connected = co_await a->connect(b->localEndpoint(), 1000ms);
    REQUIRE_FALSE(connected.error);
    LinkResult accepted = co_await b->accept();
    REQUIRE_FALSE(accepted.error);
    co_return std::make_pair(std::move(connected.link), std::move(accepted.link));
  }
};

// Frames are built by these functions, outside co_await expressions (see OutFrame in
// net/frame.h for the GCC 12 bug this sidesteps).
inline OutFrame frameOf(std::span<const std::byte> header) { return OutFrame{header, {}}; }
inline OutFrame frameOf(std::span<const std::byte> header,
                        const std::vector<std::span<const std::byte>>& payloads) {
  return OutFrame{header, payloads};
}
// A frame of `header` and `payload`, plus an empty second payload if `withEmpty`.
inline OutFrame frameOf(std::span<const std::byte> header, std::span<const std::byte> payload,
                        bool withEmpty = false) {
  OutFrame frame{header, {payload}};
  if (withEmpty) frame.payloads.emplace_back();
  return frame;
}

// Sends `frame` and requires success.
inline awaitable<void> sendOk(Link& link, OutFrame frame) {
  const std::error_code error = co_await link.send(std::move(frame));
  REQUIRE_FALSE(error);
}

// Receives into `frame` and requires success.
inline awaitable<void> receiveOk(Link& link, InFrame& frame) {
  const std::error_code error = co_await link.receive(frame);
  REQUIRE_FALSE(error);
}

// A header carrying a sequence number.
inline std::vector<std::byte> sequenceHeader(std::uint32_t sequence) {
  std::vector<std::byte> header(4);
  std::memcpy(header.data(), &sequence, 4);
  return header;
}
inline std::uint32_t sequenceOf(const InFrame& frame) {
  std::uint32_t sequence = 0;
  REQUIRE(frame.header.size() == 4);
  std::memcpy(&sequence, frame.header.data(), 4);
  return sequence;
}

inline NetworkProfile singleLink(const LinkProfile& link) {
  return NetworkProfile::uniform("test", link);
}

}  // namespace gossamer::net::shaped::testing
