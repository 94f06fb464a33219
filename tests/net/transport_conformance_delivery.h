// The transport conformance suite (transport_conformance.h), its cases on delivery: frames on a
// link arrive in the order their sends started, a 256 MiB payload and 100k header-only frames
// arrive intact, eight links carry frames both ways at once, and payloads land in place in the
// buffers a PayloadTarget gives.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <future>
#include <memory>
#include <set>
#include <span>
#include <utility>
#include <vector>

#include <asio/co_spawn.hpp>
#include <asio/use_awaitable.hpp>
#include <asio/use_future.hpp>
#include <doctest/doctest.h>

#include "net/errors.h"
#include "net/transport.h"
#include "tests/net/transport_conformance_harness.h"

namespace gossamer::net::conformance {

TEST_CASE_TEMPLATE_DEFINE(
    "net transport: frames on one link arrive in the order their sends started", Backend,
    conformance_order) {
  if (!available<Backend>()) return;
  Watchdog watchdog(60s);
  TwoPeers<Backend> net;
  constexpr std::size_t kFrames = 1000;
  std::vector<std::vector<std::byte>> headers;
  std::vector<std::vector<std::byte>> payloads;
  for (std::size_t i = 0; i < kFrames; ++i) {
    headers.push_back(headerOf({i}));
    payloads.push_back(patternBytes((i % 13) * 997 + (i % 3), i));
  }

  auto received = net.b.spawn([&]() -> asio::awaitable<std::size_t> {
    InFrame frame;
    for (std::size_t i = 0; i < kFrames; ++i) {
      const std::error_code ec = co_await net.lb->receive(frame);
      if (ec || headerField(frame.header, 0) != i || frame.payloads.size() != 1 ||
          frame.payloads[0].size() != payloads[i].size() ||
          !matchesPattern(frame.payloads[0].bytes(), i))
        co_return i;
    }
    co_return kFrames;
  });
  // Every send is its own coroutine, all started at once (co_spawn keeps their order), so they
  // queue behind each other on the link.
  std::vector<std::future<std::error_code>> sends;
  for (std::size_t i = 0; i < kFrames; ++i) {
    OutFrame frame{headers[i], {payloads[i]}};
    sends.push_back(asio::co_spawn(net.a.io(), net.la->send(std::move(frame)), asio::use_future));
  }
  std::size_t failedSends = 0;
  for (auto& send : sends) failedSends += send.get() ? 1 : 0;
  CHECK(failedSends == 0);
  CHECK(received.get() == kFrames);  // the index of the first wrong frame otherwise
}

TEST_CASE_TEMPLATE_DEFINE("net transport: a 256 MiB payload arrives intact", Backend,
                          conformance_large) {
  if (!available<Backend>()) return;
  Watchdog watchdog(120s);
  TwoPeers<Backend> net;
  constexpr std::size_t kBytes = std::size_t{256} << 20;
  constexpr std::uint64_t kSeed = 0x5eed;
  // Two copies alive at most: the sender's and the receiver's.
  std::unique_ptr<std::byte[]> data(new std::byte[kBytes]);
  fillPattern({data.get(), kBytes}, kSeed);
  const std::vector<std::byte> header = headerOf({42});

  auto received = net.b.spawn([&]() -> asio::awaitable<std::pair<std::error_code, InFrame>> {
    InFrame frame;
    const std::error_code ec = co_await net.lb->receive(frame);
    co_return std::make_pair(ec, std::move(frame));
  });
  const std::error_code sent = net.a.run([&]() -> asio::awaitable<std::error_code> {
    co_return co_await net.la->send(frameOf(header, {data.get(), kBytes}));
  });
  CHECK_MESSAGE(!sent, describe(sent));
  data.reset();
  auto [ec, frame] = received.get();
  REQUIRE_MESSAGE(!ec, describe(ec));
  CHECK(headerField(frame.header, 0) == 42);
  REQUIRE(frame.payloads.size() == 1);
  CHECK(frame.payloads[0].pooled());
  REQUIRE(frame.payloads[0].size() == kBytes);
  CHECK(matchesPattern(frame.payloads[0].bytes(), kSeed));
  CHECK(net.la->bytesSent() >= kBytes);
  CHECK(net.lb->bytesReceived() >= kBytes);
}

TEST_CASE_TEMPLATE_DEFINE("net transport: 100k header-only frames arrive in order", Backend,
                          conformance_header_only) {
  if (!available<Backend>()) return;
  Watchdog watchdog(60s);
  TwoPeers<Backend> net;
  constexpr std::uint64_t kFrames = 100'000;
  auto received = net.b.spawn([&]() -> asio::awaitable<std::uint64_t> {
    InFrame frame;
    for (std::uint64_t i = 0; i < kFrames; ++i) {
      const std::error_code ec = co_await net.lb->receive(frame);
      if (ec || frame.header.size() != 8 || headerField(frame.header, 0) != i ||
          !frame.payloads.empty())
        co_return i;
    }
    co_return kFrames;
  });
  const std::uint64_t sent = net.a.run([&]() -> asio::awaitable<std::uint64_t> {
    for (std::uint64_t i = 0; i < kFrames; ++i) {
      const std::vector<std::byte> header = headerOf({i});
      if (co_await net.la->send(frameOf(header))) co_return i;
    }
    co_return kFrames;
  });
  CHECK(sent == kFrames);
  CHECK(received.get() == kFrames);
}

TEST_CASE_TEMPLATE_DEFINE("net transport: eight links carry frames both ways at once", Backend,
                          conformance_eight_links) {
  if (!available<Backend>()) return;
  Watchdog watchdog(60s);
  TwoPeers<Backend> net;  // its first link is one of the eight
  constexpr std::size_t kLinks = 8;
  constexpr std::uint64_t kFrames = 200;
  constexpr std::size_t kPayloadBytes = 16 * 1024 + 3;
  std::vector<Link*> linksA{net.la};
  std::vector<Link*> linksB{net.lb};
  while (linksA.size() < kLinks) {
    auto [mine, theirs] = connect(net.a, net.b, net.where);
    linksA.push_back(mine);
    linksB.push_back(theirs);
  }

  // Link i of a peer sends frames (id i, seq) with pattern (i << 32 | seq); each receiver checks
  // order and content, and returns the id it saw (or ~0 on a wrong frame).
  auto sender = [](Link* link, std::uint64_t id) -> asio::awaitable<std::error_code> {
    std::vector<std::byte> payload(kPayloadBytes);
    for (std::uint64_t seq = 0; seq < kFrames; ++seq) {
      fillPattern(payload, id << 32 | seq);
      const std::vector<std::byte> header = headerOf({id, seq});
      if (auto ec = co_await link->send(frameOf(header, payload))) co_return ec;
    }
    co_return std::error_code{};
  };
  auto receiver = [](Link* link) -> asio::awaitable<std::uint64_t> {
    InFrame frame;
    std::uint64_t id = ~std::uint64_t{0};
    for (std::uint64_t seq = 0; seq < kFrames; ++seq) {
      if (co_await link->receive(frame)) co_return ~std::uint64_t{0};
      if (seq == 0) id = headerField(frame.header, 0);
      if (headerField(frame.header, 0) != id || headerField(frame.header, 1) != seq ||
          frame.payloads.size() != 1 || frame.payloads[0].size() != kPayloadBytes ||
          !matchesPattern(frame.payloads[0].bytes(), id << 32 | seq))
        co_return ~std::uint64_t{0};
    }
    co_return id;
  };
  std::vector<std::future<std::error_code>> sends;
  std::vector<std::future<std::uint64_t>> receivesA;
  std::vector<std::future<std::uint64_t>> receivesB;
  for (std::size_t i = 0; i < kLinks; ++i) {
    sends.push_back(asio::co_spawn(net.a.io(), sender(linksA[i], i), asio::use_future));
    sends.push_back(asio::co_spawn(net.b.io(), sender(linksB[i], i), asio::use_future));
    receivesA.push_back(asio::co_spawn(net.a.io(), receiver(linksA[i]), asio::use_future));
    receivesB.push_back(asio::co_spawn(net.b.io(), receiver(linksB[i]), asio::use_future));
  }
  for (auto& send : sends) {
    const std::error_code ec = send.get();
    CHECK_MESSAGE(!ec, describe(ec));
  }
  std::set<std::uint64_t> idsA;
  std::set<std::uint64_t> idsB;
  for (auto& receive : receivesA) idsA.insert(receive.get());
  for (auto& receive : receivesB) idsB.insert(receive.get());
  const std::set<std::uint64_t> all{0, 1, 2, 3, 4, 5, 6, 7};
  CHECK(idsA == all);
  CHECK(idsB == all);
}

TEST_CASE_TEMPLATE_DEFINE("net transport: payloads land in place in buffers from the PayloadTarget",
                          Backend, conformance_payload_target) {
  if (!available<Backend>()) return;
  Watchdog watchdog(60s);
  TwoPeers<Backend> net;
  // Payload 0 of every frame goes to `landing`, payload 1 to the pool; payload 2 is empty.
  std::vector<std::byte> landing(1 << 20);
  struct Call {
    std::uint64_t seq;
    std::size_t index;
    std::size_t size;
  };
  std::vector<Call> calls;  // b's thread only
  net.b.call([&] {
    net.lb->setPayloadTarget(
        [&](std::span<const std::byte> header, std::size_t index, std::size_t size) {
          calls.push_back({headerField(header, 0), index, size});
          return index == 0 ? std::span<std::byte>(landing).first(size) : std::span<std::byte>();
        });
  });
  constexpr std::uint64_t kFrames = 3;
  for (std::uint64_t k = 0; k < kFrames; ++k) {
    const std::vector<std::byte> header = headerOf({k});
    const std::vector<std::byte> first = patternBytes(100'000 + 17 * k, 10 + k);
    const std::vector<std::byte> second = patternBytes(3000 + k, 20 + k);
    auto received = net.b.spawn([&]() -> asio::awaitable<std::pair<std::error_code, InFrame>> {
      InFrame frame;
      const std::error_code ec = co_await net.lb->receive(frame);
      co_return std::make_pair(ec, std::move(frame));
    });
    const OutFrame out{header, {first, second, {}}};
    const std::error_code sent = net.a.run(
        [&]() -> asio::awaitable<std::error_code> { co_return co_await net.la->send(out); });
    CHECK_MESSAGE(!sent, describe(sent));
    auto [ec, frame] = received.get();
    REQUIRE_MESSAGE(!ec, describe(ec));
    REQUIRE(frame.payloads.size() == 3);
    CHECK(frame.payloads[0].bytes().data() == landing.data());
    CHECK(!frame.payloads[0].pooled());
    CHECK(frame.payloads[0].size() == first.size());
    CHECK(matchesPattern({landing.data(), first.size()}, 10 + k));
    CHECK(frame.payloads[1].pooled());
    CHECK(frame.payloads[1].size() == second.size());
    CHECK(matchesPattern(frame.payloads[1].bytes(), 20 + k));
    CHECK(frame.payloads[2].size() == 0);
  }
  net.b.call([&] {
    REQUIRE(calls.size() == 3 * kFrames);
    for (std::size_t i = 0; i < calls.size(); ++i) {
      CHECK(calls[i].seq == i / 3);
      CHECK(calls[i].index == i % 3);
    }
    CHECK(calls[0].size == 100'000);
    CHECK(calls[1].size == 3000);
    CHECK(calls[2].size == 0);
  });

  // A target that returns a buffer of the wrong size is refused, not written past.
  net.b.call([&] {
    net.lb->setPayloadTarget([&](std::span<const std::byte>, std::size_t, std::size_t size) {
      return std::span<std::byte>(landing).first(size + 1);
    });
  });
  const std::vector<std::byte> header = headerOf({99});
  const std::vector<std::byte> payload = patternBytes(1000, 99);
  auto received = net.b.spawn([&]() -> asio::awaitable<std::error_code> {
    InFrame frame;
    co_return co_await net.lb->receive(frame);
  });
  net.a.run([&]() -> asio::awaitable<std::error_code> {
    co_return co_await net.la->send(frameOf(header, payload));
  });
  CHECK(received.get() == make_error_code(Errc::invalidPayloadTarget));
}

}  // namespace gossamer::net::conformance
