// The shaped transport (net/shaped/) over inproc, for what loss and partitions do to frames:
// datagram loss drops frames and keeps the link open, stream loss delivers every frame in order
// but late, run-time loss rates act on one direction and stop, partitions drop frames and heal at
// run time, and frames in flight are lost when a cut starts. Coarse time bounds only; two shaped
// peers run on one io_context (one thread), each case under a watchdog deadline
// (tests/net/shaped_support.h).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <vector>

#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/experimental/awaitable_operators.hpp>
#include <asio/io_context.hpp>
#include <asio/steady_timer.hpp>
#include <asio/this_coro.hpp>
#include <asio/use_awaitable.hpp>
#include <doctest/doctest.h>

#include "net/errors.h"
#include "net/shaped/profile.h"
#include "net/shaped/shaped_transport.h"
#include "net/transport.h"
#include "tests/net/shaped_support.h"

namespace gossamer::net::shaped::testing {
namespace {

using namespace asio::experimental::awaitable_operators;

// ---- loss and partitions ----

TEST_CASE("net shaped: datagram loss drops frames and keeps the link open") {
  asio::io_context io;
  const int n = 2000;
  const double rate = 0.3;
  const auto run = [&](std::uint64_t seed) {
    PeerPair peers(io, singleLink(LinkProfile{.lossRate = rate, .lossMode = LossMode::datagram}),
                   seed);
    std::vector<std::uint32_t> received;
    runWithWatchdog(io, [&]() -> awaitable<void> {
      auto [a, b] = co_await peers.connect();
      std::vector<std::vector<std::byte>> headers;
      for (int i = 0; i < n; ++i) headers.push_back(sequenceHeader(static_cast<std::uint32_t>(i)));
      // No latency: every surviving frame reaches b while the sender goes on. Closing a's end a
      // while after the last send then ends b's stream.
      auto sendAll = [&, &a = a]() -> awaitable<void> {
        for (int i = 0; i < n; ++i) co_await sendOk(*a, frameOf(headers[i]));
        asio::steady_timer timer(co_await asio::this_coro::executor, 200ms);
        co_await timer.async_wait(asio::use_awaitable);
        a->close();
      };
      auto receiveAll = [&, &b = b]() -> awaitable<void> {
        for (;;) {
          InFrame frame;
          if (co_await b->receive(frame)) break;
          received.push_back(sequenceOf(frame));
        }
      };
      co_await (sendAll() && receiveAll());
    });
    return received;
  };
  const std::vector<std::uint32_t> first = run(11);
  const double sigma = std::sqrt(n * rate * (1 - rate));
  CHECK(std::abs(static_cast<double>(first.size()) - n * (1 - rate)) <= 3 * sigma);
  CHECK(std::is_sorted(first.begin(), first.end()));
  CHECK(run(11) == first);  // the same seed loses the same frames
}

TEST_CASE("net shaped: stream loss delivers every frame, in order, late") {
  asio::io_context io;
  // 10% of the segments lost, 5 ms one-way: frames of 3 segments, 40 of them sent back to back.
  PeerPair peers(io, singleLink(LinkProfile{.latency = 5ms, .lossRate = 0.1}), 21);
  runWithWatchdog(io, [&]() -> awaitable<void> {
    auto [a, b] = co_await peers.connect();
    const int n = 40;
    std::vector<std::vector<std::byte>> headers;
    for (int i = 0; i < n; ++i) headers.push_back(sequenceHeader(static_cast<std::uint32_t>(i)));
    const std::vector<std::byte> payload(3 * kSegmentBytes - 4);
    const auto start = Clock::now();
    for (int i = 0; i < n; ++i) co_await sendOk(*a, frameOf(headers[i], payload));
    CHECK(Clock::now() - start < 150ms);  // sends complete without waiting for retransmissions
    for (int i = 0; i < n; ++i) {
      InFrame frame;
      co_await receiveOk(*b, frame);
      CHECK(sequenceOf(frame) == static_cast<std::uint32_t>(i));
      CHECK(frame.payloads.at(0).size() == payload.size());
    }
    // P(no segment of 120 lost) = 0.9^120 < 4e-6, and this seed loses some; every loss of a
    // 3-segment frame is a tail loss: the last frame came at least one RTO after the first send.
    CHECK(Clock::now() - start >= 200ms);
    CHECK(b->bytesReceived() == n * 3 * kSegmentBytes);
  });
}

TEST_CASE("net shaped: run-time stream loss delays an unshaped link's frames, in order") {
  asio::io_context io;
  PeerPair peers(io, NetworkProfile::lan());  // passes frames straight through until the loss
  runWithWatchdog(io, [&]() -> awaitable<void> {
    auto [a, b] = co_await peers.connect();
    // Fewer frames before the loss than the inner link queues: nobody receives them yet.
    const std::uint32_t before = 4, n = 44;
    std::vector<std::vector<std::byte>> headers;
    for (std::uint32_t i = 0; i < n; ++i) headers.push_back(sequenceHeader(i));
    // Frames 0-3 straight through; 4-43 under 20% loss from 0 to 1: late, none lost, in order.
    for (std::uint32_t i = 0; i < before; ++i) co_await sendOk(*a, frameOf(headers[i]));
    peers.partitions->setLoss(0, 1, 0.2);
    const auto start = Clock::now();
    for (std::uint32_t i = before; i < n; ++i) co_await sendOk(*a, frameOf(headers[i]));
    co_await sendOk(*b, frameOf(headers[0]));  // the other direction is not affected
    InFrame back;
    co_await receiveOk(*a, back);
    CHECK(sequenceOf(back) == 0);
    CHECK(Clock::now() - start < 200ms);
    for (std::uint32_t i = 0; i < n; ++i) {
      InFrame frame;
      co_await receiveOk(*b, frame);
      CHECK(sequenceOf(frame) == i);
    }
    // P(none of 40 lost) = 0.8^40 ~ 1e-4, and this seed loses some: at least one RTO.
    CHECK(Clock::now() - start >= 200ms);
    peers.partitions->setLoss(0, 1, 0);
  });
}

TEST_CASE("net shaped: run-time datagram loss drops frames in one direction only, then stops") {
  asio::io_context io;
  PeerPair peers(io, singleLink(LinkProfile{.latency = 1ms, .lossMode = LossMode::datagram}));
  runWithWatchdog(io, [&]() -> awaitable<void> {
    auto [a, b] = co_await peers.connect();
    std::vector<std::vector<std::byte>> headers;
    for (std::uint32_t i = 0; i < 20; ++i) headers.push_back(sequenceHeader(i));
    // Loss 1 from 0 to 1: frames 0-9 from a are lost, b's reach a; then loss 0: 10-19 arrive.
    peers.partitions->setLoss(0, 1, 1.0);
    for (int i = 0; i < 10; ++i) {
      co_await sendOk(*a, frameOf(headers[i]));
      co_await sendOk(*b, frameOf(headers[i]));
    }
    peers.partitions->setLoss(0, 1, 0);
    for (int i = 10; i < 20; ++i) co_await sendOk(*a, frameOf(headers[i]));
    std::vector<std::uint32_t> atB, atA;
    for (int i = 0; i < 10; ++i) {
      InFrame frame;
      co_await receiveOk(*b, frame);
      atB.push_back(sequenceOf(frame));
      InFrame back;
      co_await receiveOk(*a, back);
      atA.push_back(sequenceOf(back));
    }
    std::vector<std::uint32_t> later, first;
    for (std::uint32_t i = 0; i < 10; ++i) {
      first.push_back(i);
      later.push_back(i + 10);
    }
    CHECK(atB == later);
    CHECK(atA == first);
  });
}

TEST_CASE("net shaped: partitions drop frames and heal at run time") {
  asio::io_context io;
  PeerPair peers(io, singleLink(LinkProfile{.latency = 2ms}));
  runWithWatchdog(io, [&]() -> awaitable<void> {
    auto [a, b] = co_await peers.connect();
    std::vector<std::vector<std::byte>> headers;
    for (std::uint32_t i = 0; i < 30; ++i) headers.push_back(sequenceHeader(i));
    // Frames 0-9 before the cut, 10-19 during it (dropped both ways, sends succeed), 20-29 after.
    for (int i = 0; i < 10; ++i) co_await sendOk(*a, frameOf(headers[i]));
    asio::steady_timer timer(co_await asio::this_coro::executor);
    timer.expires_after(20ms);
    co_await timer.async_wait(asio::use_awaitable);  // 0-9 are delivered
    peers.partitions->cut(0, 1);
    for (int i = 10; i < 20; ++i) {
      co_await sendOk(*a, frameOf(headers[i]));
      co_await sendOk(*b, frameOf(headers[i]));
    }
    // A new connection across the cut fails with `partitioned` once its timeout passes.
    const auto start = Clock::now();
    LinkResult refused = co_await peers.a->connect(peers.b->localEndpoint(), 50ms);
    CHECK(refused.error == make_error_code(Errc::partitioned));
    CHECK(Clock::now() - start >= 50ms);
    timer.expires_after(20ms);
    co_await timer.async_wait(asio::use_awaitable);
    peers.partitions->heal(0, 1);
    for (int i = 20; i < 30; ++i) co_await sendOk(*a, frameOf(headers[i]));
    std::vector<std::uint32_t> received;
    for (int i = 0; i < 20; ++i) {
      InFrame frame;
      co_await receiveOk(*b, frame);
      received.push_back(sequenceOf(frame));
    }
    std::vector<std::uint32_t> expected;
    for (std::uint32_t i = 0; i < 10; ++i) expected.push_back(i);
    for (std::uint32_t i = 20; i < 30; ++i) expected.push_back(i);
    CHECK(received == expected);
    // A connect that starts during a cut goes ahead when the cut heals in time.
    peers.partitions->cut(0, 1);
    asio::co_spawn(
        co_await asio::this_coro::executor,
        [&]() -> awaitable<void> {
          asio::steady_timer healer(co_await asio::this_coro::executor, 30ms);
          co_await healer.async_wait(asio::use_awaitable);
          peers.partitions->healAll();
        },
        asio::detached);
    LinkResult late = co_await peers.a->connect(peers.b->localEndpoint(), 2000ms);
    CHECK_FALSE(late.error);
    LinkResult accepted = co_await peers.b->accept();
    CHECK_FALSE(accepted.error);
  });
}

TEST_CASE("net shaped: frames in flight are lost when a cut starts") {
  asio::io_context io;
  PeerPair peers(io, singleLink(LinkProfile{.latency = 50ms}));
  runWithWatchdog(io, [&]() -> awaitable<void> {
    auto [a, b] = co_await peers.connect();
    const std::vector<std::byte> lost = sequenceHeader(1), kept = sequenceHeader(2);
    co_await sendOk(*a, frameOf(lost));
    peers.partitions->cut(0, 1);  // frame 1 is on the wire
    asio::steady_timer timer(co_await asio::this_coro::executor, 80ms);
    co_await timer.async_wait(asio::use_awaitable);
    peers.partitions->heal(0, 1);
    co_await sendOk(*a, frameOf(kept));
    InFrame frame;
    co_await receiveOk(*b, frame);
    CHECK(sequenceOf(frame) == 2);
  });
}

}  // namespace
}  // namespace gossamer::net::shaped::testing
