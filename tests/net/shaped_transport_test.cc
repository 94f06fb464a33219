// The shaped transport (net/shaped/) over inproc, for what it does to frames on a working link:
// lan passes them through, latency is pipelined and keeps order under jitter, frames arrive after
// their latency and serialization time, the delay line is bounded and back-pressures the sender,
// close completes waiting sends, geo sites shape each direction by the sender's profile, and accept
// needs the preface. Coarse time bounds only: accuracy against the profile is measured by
// `gossamer-bench shaped`, not asserted here. Two shaped peers run on one io_context (one thread),
// each case under a watchdog deadline (tests/net/shaped_support.h).
#include "net/shaped/shaped_transport.h"

#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
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
#include "net/inproc/inproc_transport.h"
#include "net/shaped/profile.h"
#include "net/transport.h"
#include "tests/net/shaped_support.h"

namespace gossamer::net::shaped::testing {
namespace {

using namespace asio::experimental::awaitable_operators;

// ---- the transport ----

TEST_CASE("net shaped: lan passes frames through unchanged") {
  asio::io_context io;
  PeerPair peers(io, NetworkProfile::lan());
  CHECK(peers.a->name() == "shaped(inproc)");
  runWithWatchdog(io, [&]() -> awaitable<void> {
    auto [a, b] = co_await peers.connect();
    const std::vector<std::byte> payload(1000, std::byte{7});
    // More frames than the inner link queues (Limits::maxInFlightSends), so the receiver runs
    // alongside the sender.
    auto sendAll = [&, &a = a]() -> awaitable<void> {
      for (std::uint32_t i = 0; i < 20; ++i) {
        const std::vector<std::byte> header = sequenceHeader(i);
        co_await sendOk(*a, frameOf(header, payload, true));
      }
    };
    auto receiveAll = [&, &b = b]() -> awaitable<void> {
      for (std::uint32_t i = 0; i < 20; ++i) {
        InFrame frame;
        co_await receiveOk(*b, frame);
        CHECK(sequenceOf(frame) == i);
        REQUIRE(frame.payloads.size() == 2);
        CHECK(frame.payloads[0].size() == 1000);
        CHECK(frame.payloads[1].size() == 0);
      }
    };
    co_await (sendAll() && receiveAll());
    CHECK(a->bytesSent() == 20 * 1004);
    CHECK(b->bytesReceived() == 20 * 1004);
    // Replies go the other way over the accepted link.
    const std::vector<std::byte> header = sequenceHeader(99);
    co_await sendOk(*b, frameOf(header));
    InFrame reply;
    co_await receiveOk(*a, reply);
    CHECK(sequenceOf(reply) == 99);
    // Limits are checked before anything is sent.
    std::vector<std::span<const std::byte>> many(peers.a->limits().maxPayloads + 1);
    const std::error_code tooMany = co_await a->send(frameOf(header, many));
    CHECK(tooMany == make_error_code(Errc::tooManyPayloads));
  });
}

TEST_CASE("net shaped: latency is pipelined and order kept under jitter") {
  asio::io_context io;
  PeerPair peers(io, singleLink(LinkProfile{.latency = 30ms, .jitter = 20ms}));
  runWithWatchdog(io, [&]() -> awaitable<void> {
    auto [a, b] = co_await peers.connect();
    const int n = 200;
    std::vector<std::vector<std::byte>> headers;
    for (int i = 0; i < n; ++i) headers.push_back(sequenceHeader(static_cast<std::uint32_t>(i)));
    const auto start = Clock::now();
    for (int i = 0; i < n; ++i) co_await sendOk(*a, frameOf(headers[i]));
    const auto sendTime = Clock::now() - start;
    for (int i = 0; i < n; ++i) {
      InFrame frame;
      co_await receiveOk(*b, frame);
      CHECK(sequenceOf(frame) == static_cast<std::uint32_t>(i));
      if (i == 0) CHECK(Clock::now() - start >= 10ms);  // latency - jitter
    }
    const auto total = Clock::now() - start;
    // Pipelined: 200 frames take about one latency, not 200 (coarse bounds: loaded machines).
    CHECK(sendTime < 10ms * n / 4);
    CHECK(total >= 30ms);
    CHECK(total < 30ms * n / 4);
  });
}

TEST_CASE("net shaped: frames arrive after their latency and serialization time") {
  asio::io_context io;
  // 100 ms of latency + 100 KB at 8 Mbit/s = 100 ms of serialization per frame.
  PeerPair peers(io, singleLink(LinkProfile{.latency = 100ms, .bandwidthBitsPerSecond = 8e6}));
  runWithWatchdog(io, [&]() -> awaitable<void> {
    auto [a, b] = co_await peers.connect();
    const std::vector<std::byte> first = sequenceHeader(1), second = sequenceHeader(2);
    const std::vector<std::byte> payload(100'000 - 4);
    const auto start = Clock::now();
    co_await sendOk(*a, frameOf(first, payload));
    const auto firstSent = Clock::now() - start;
    // The second send waits for the first frame's serialization (back-pressure).
    co_await sendOk(*a, frameOf(second, payload));
    const auto secondSent = Clock::now() - start;
    InFrame frame;
    co_await receiveOk(*b, frame);
    const auto firstArrived = Clock::now() - start;
    CHECK(sequenceOf(frame) == 1);
    co_await receiveOk(*b, frame);
    const auto secondArrived = Clock::now() - start;
    CHECK(sequenceOf(frame) == 2);
    CHECK(frame.payloads.at(0).size() == payload.size());
    // Timers never fire early; the upper bounds are generous for a loaded machine.
    CHECK(firstSent < 80ms);
    CHECK(secondSent >= 100ms);
    CHECK(secondSent < 100ms + 400ms);
    CHECK(firstArrived >= 200ms);
    CHECK(firstArrived < 200ms + 400ms);
    CHECK(secondArrived >= 300ms);
    CHECK(secondArrived < 300ms + 400ms);
  });
}

TEST_CASE("net shaped: the delay line is bounded and back-pressures the sender") {
  asio::io_context io;
  // Unlimited bandwidth, 100 ms latency, room for 4 frames of 1000 bytes.
  PeerPair peers(io, singleLink(LinkProfile{.latency = 100ms}), 7, 5000ms, 4000);
  runWithWatchdog(io, [&]() -> awaitable<void> {
    auto [a, b] = co_await peers.connect();
    const std::vector<std::byte> payload(1000 - 4);
    std::vector<std::vector<std::byte>> headers;
    for (std::uint32_t i = 0; i < 12; ++i) headers.push_back(sequenceHeader(i));
    const auto start = Clock::now();
    for (int i = 0; i < 4; ++i) co_await sendOk(*a, frameOf(headers[i], payload));
    CHECK(Clock::now() - start < 80ms);  // fits: no waiting for the latency
    for (int i = 4; i < 12; ++i) co_await sendOk(*a, frameOf(headers[i], payload));
    // Frames 4.. waited for 0.. to be delivered: two more latencies.
    CHECK(Clock::now() - start >= 200ms);
    for (std::uint32_t i = 0; i < 12; ++i) {
      InFrame frame;
      co_await receiveOk(*b, frame);
      CHECK(sequenceOf(frame) == i);
    }
    // A frame larger than the whole bound still goes, alone.
    const std::vector<std::byte> big(10'000);
    co_await sendOk(*a, frameOf(headers[0], big));
    InFrame frame;
    co_await receiveOk(*b, frame);
    CHECK(frame.payloads.at(0).size() == big.size());
  });
}

TEST_CASE("net shaped: close completes waiting sends and later ones") {
  asio::io_context io;
  // 1 MB at 8 Mbit/s: a second send that would wait one second for the first.
  PeerPair peers(io, singleLink(LinkProfile{.bandwidthBitsPerSecond = 8e6}));
  runWithWatchdog(io, [&]() -> awaitable<void> {
    auto [a, b] = co_await peers.connect();
    const std::vector<std::byte> header = sequenceHeader(1);
    const std::vector<std::byte> payload(1'000'000);
    Link* sender = a.get();
    asio::co_spawn(
        co_await asio::this_coro::executor,
        [sender]() -> awaitable<void> {
          asio::steady_timer timer(co_await asio::this_coro::executor, 50ms);
          co_await timer.async_wait(asio::use_awaitable);
          sender->close();
        },
        asio::detached);
    const auto start = Clock::now();
    co_await sendOk(*a, frameOf(header, payload));  // starts serializing at once
    const std::error_code waiting = co_await a->send(frameOf(header, payload));
    CHECK(waiting == asio::error::operation_aborted);
    CHECK(Clock::now() - start < 800ms);
    const std::error_code later = co_await a->send(frameOf(header));
    CHECK(later == asio::error::operation_aborted);
    InFrame frame;
    const std::error_code received = co_await b->receive(frame);
    CHECK(received);  // the inner link is closed too
  });
}

TEST_CASE("net shaped: geo sites shape each direction by the sender's profile") {
  asio::io_context io;
  NetworkProfile profile = NetworkProfile::parse(R"(sites near far
near far 60 0 0 0
far near 5 0 0 0
)",
                                                 "two.net");
  PeerPair peers(io, profile);  // peer 0 near, peer 1 far
  runWithWatchdog(io, [&]() -> awaitable<void> {
    auto [a, b] = co_await peers.connect();
    const std::vector<std::byte> header = sequenceHeader(1);
    auto start = Clock::now();
    co_await sendOk(*b, frameOf(header));  // far -> near: 5 ms
    InFrame frame;
    co_await receiveOk(*a, frame);
    const auto backward = Clock::now() - start;
    start = Clock::now();
    co_await sendOk(*a, frameOf(header));  // near -> far: 60 ms
    co_await receiveOk(*b, frame);
    const auto forward = Clock::now() - start;
    CHECK(backward >= 5ms);
    CHECK(forward >= 60ms);
    CHECK(backward < forward);
  });
}

TEST_CASE("net shaped: accept needs the preface") {
  asio::io_context io;
  PeerPair peers(io, NetworkProfile::lan(), 7, 100ms);
  std::unique_ptr<Transport> plain = inproc::makeTransport(io, peers.hub);
  runWithWatchdog(io, [&]() -> awaitable<void> {
    // A connector that is not shaped and says nothing: timed out.
    LinkResult silent = co_await plain->connect(peers.b->localEndpoint(), 100ms);
    REQUIRE_FALSE(silent.error);
    LinkResult accepted = co_await peers.b->accept();
    CHECK(accepted.error == make_error_code(Errc::handshakeTimeout));
    // One that sends something else: malformed.
    LinkResult wrong = co_await plain->connect(peers.b->localEndpoint(), 100ms);
    REQUIRE_FALSE(wrong.error);
    const std::vector<std::byte> junk(16, std::byte{1});
    co_await sendOk(*wrong.link, frameOf(junk));
    accepted = co_await peers.b->accept();
    CHECK(accepted.error == make_error_code(Errc::malformedFrame));
    // The next good connector is accepted.
    auto [a, b] = co_await peers.connect();
    CHECK(a != nullptr);
    CHECK(b != nullptr);
    // After close, accept and connect fail.
    peers.b->close();
    accepted = co_await peers.b->accept();
    CHECK(accepted.error == asio::error::operation_aborted);
  });
}

}  // namespace
}  // namespace gossamer::net::shaped::testing
