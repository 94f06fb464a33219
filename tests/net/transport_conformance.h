// The conformance suite for net::Transport / net::Link: one set of cases, defined here once and
// instantiated per backend by the test file of each backend with
// GOSSAMER_TRANSPORT_CONFORMANCE(BackendA, BackendB, ...) at global scope (tcp, inproc and shaped
// in transport_conformance_test.cc; ibverbs in ibverbs_transport_test.cc, which alone knows whether
// this build has it). Every case runs two peers, each with its own io_context on its own thread (so
// inproc's cross-thread hand-offs are exercised too), binds port 0 on 127.0.0.1, and runs under a
// Watchdog that aborts the binary with a clear message if the case hangs. Payload bytes come from a
// seeded pattern, so a receiver checks them without a second copy.
//
// A backend is a tag type with
//   static constexpr bool kRawTcpListener;  // a plain TCP socket can talk the tcp wire format to
//                                           // its listener (cases that write broken frames)
//   static std::unique_ptr<Transport> make(asio::io_context&, Fixture&);
// and optionally
//   static bool available(std::string* reason);  // false: every case is skipped with a MESSAGE
// (a backend that needs hardware this machine lacks).
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <future>
#include <memory>
#include <mutex>
#include <set>
#include <span>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include <asio/co_spawn.hpp>
#include <asio/executor_work_guard.hpp>
#include <asio/io_context.hpp>
#include <asio/ip/tcp.hpp>
#include <asio/post.hpp>
#include <asio/use_awaitable.hpp>
#include <asio/use_future.hpp>
#include <asio/write.hpp>
#include <doctest/doctest.h>

#include "net/errors.h"
#include "net/inproc/inproc_transport.h"
#include "net/transport.h"
#include "tests/support/io_thread.h"
#include "tests/support/watchdog.h"

namespace gossamer::net::conformance {

using namespace std::chrono_literals;

// What a backend's factory may take from the case: the Limits of the transport being made (a case
// sets them before each make), the in-process registry shared by the case's peers, and state any
// other backend shares between the case's peers (made by its first make, e.g. a fake fabric).
struct Fixture {
  Limits limits;
  std::shared_ptr<inproc::Hub> hub = inproc::makeHub();
  std::shared_ptr<void> backendState;
};

// False, with a MESSAGE naming the reason, when `Backend` cannot run here (see above).
template <typename Backend>
bool available() {
  if constexpr (requires(std::string * reason) { Backend::available(reason); }) {
    std::string reason;
    if (!Backend::available(&reason)) {
      MESSAGE("skipped: " << reason);
      return false;
    }
  }
  return true;
}

// ---- harness ----

using test::Watchdog;  // a hung transport fails the run instead of stalling it

inline std::string describe(const std::error_code& ec) {
  return ec ? ec.category().name() + std::string(":") + std::to_string(ec.value()) + " " +
                  ec.message()
            : std::string("success");
}

// A peer: an io_context run by its own thread (test::IoThread: call, spawn, run), with the
// transport and links that live on it. They are made, used and destroyed on that thread (the
// destructor closes them there).
class Peer : public test::IoThread {
 public:
  ~Peer() {
    call([this] {
      links.clear();
      transport.reset();
    });
  }

  // Listens on 127.0.0.1, port 0; returns where.
  Endpoint listen() {
    return call([this] {
      const std::error_code ec = transport->listen(Endpoint{"127.0.0.1", 0});
      REQUIRE_MESSAGE(!ec, describe(ec));
      return transport->localEndpoint();
    });
  }

  std::unique_ptr<Transport> transport;
  std::vector<std::unique_ptr<Link>> links;
};

// Peer `a` connected to the listening peer `b`; returns the new links (a's end, b's end), which
// the peers own.
inline std::pair<Link*, Link*> connect(Peer& a, Peer& b, const Endpoint& where) {
  auto accepted =
      b.spawn([&]() -> asio::awaitable<LinkResult> { co_return co_await b.transport->accept(); });
  LinkResult connected = a.run(
      [&]() -> asio::awaitable<LinkResult> { co_return co_await a.transport->connect(where, 5s); });
  LinkResult acceptedResult = accepted.get();
  REQUIRE_MESSAGE(!connected.error, describe(connected.error));
  REQUIRE_MESSAGE(!acceptedResult.error, describe(acceptedResult.error));
  REQUIRE(connected.link != nullptr);
  REQUIRE(acceptedResult.link != nullptr);
  Link* mine = connected.link.get();
  Link* theirs = acceptedResult.link.get();
  a.links.push_back(std::move(connected.link));
  b.links.push_back(std::move(acceptedResult.link));
  return {mine, theirs};
}

// Two peers with a transport each (a with `limitsA`, b listening with `limitsB`) and one link.
// Members are destroyed in reverse order: the peers (with their links) before the fixture.
template <typename Backend>
struct TwoPeers {
  explicit TwoPeers(const Limits& limitsA = {}, const Limits& limitsB = {}) {
    fixture.limits = limitsA;
    a.transport = a.call([&] { return Backend::make(a.io(), fixture); });
    fixture.limits = limitsB;
    b.transport = b.call([&] { return Backend::make(b.io(), fixture); });
    where = b.listen();
    std::tie(la, lb) = connect(a, b, where);
  }

  Fixture fixture;
  Peer a;
  Peer b;
  Endpoint where;
  Link* la = nullptr;
  Link* lb = nullptr;
};

// ---- frame contents ----

inline std::uint64_t splitmix64(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// Byte i of the pattern `seed` is byte (i % 8) of word i / 8 (little-endian hosts, as all ours).
inline void fillPattern(std::span<std::byte> bytes, std::uint64_t seed) {
  const std::size_t words = bytes.size() / 8;
  for (std::size_t w = 0; w < words; ++w) {
    const std::uint64_t value = splitmix64(seed ^ (w * 0x632be59bd9b4e019ULL));
    std::memcpy(bytes.data() + 8 * w, &value, 8);
  }
  if (bytes.size() == 8 * words) return;
  const std::uint64_t tail = splitmix64(seed ^ (words * 0x632be59bd9b4e019ULL));
  std::memcpy(bytes.data() + 8 * words, &tail, bytes.size() - 8 * words);
}

inline bool matchesPattern(std::span<const std::byte> bytes, std::uint64_t seed) {
  const std::size_t words = bytes.size() / 8;
  for (std::size_t w = 0; w < words; ++w) {
    const std::uint64_t value = splitmix64(seed ^ (w * 0x632be59bd9b4e019ULL));
    if (std::memcmp(bytes.data() + 8 * w, &value, 8) != 0) return false;
  }
  if (bytes.size() == 8 * words) return true;
  const std::uint64_t tail = splitmix64(seed ^ (words * 0x632be59bd9b4e019ULL));
  return std::memcmp(bytes.data() + 8 * words, &tail, bytes.size() - 8 * words) == 0;
}

inline std::vector<std::byte> patternBytes(std::size_t size, std::uint64_t seed) {
  std::vector<std::byte> bytes(size);
  fillPattern(bytes, seed);
  return bytes;
}

// A header of 64-bit numbers (sequence numbers, link ids).
inline std::vector<std::byte> headerOf(std::initializer_list<std::uint64_t> values) {
  std::vector<std::byte> bytes(8 * values.size());
  std::size_t offset = 0;
  for (const std::uint64_t value : values) {
    std::memcpy(bytes.data() + offset, &value, 8);
    offset += 8;
  }
  return bytes;
}

inline std::uint64_t headerField(std::span<const std::byte> header, std::size_t index) {
  std::uint64_t value = ~std::uint64_t{0};
  if (header.size() >= 8 * (index + 1)) std::memcpy(&value, header.data() + 8 * index, 8);
  return value;
}

// Frames to send. (Coroutine bodies build frames through these: GCC 12 rejects a braced
// std::initializer_list inside a co_await expression, "array used as initializer".)
inline OutFrame frameOf(std::span<const std::byte> header) { return OutFrame{header, {}}; }

inline OutFrame frameOf(std::span<const std::byte> header, std::span<const std::byte> payload) {
  OutFrame frame{header, {}};
  frame.payloads.push_back(payload);
  return frame;
}

// Frames of the tcp wire format (net/tcp/tcp_transport.h), written by hand on a raw socket.
inline constexpr std::uint32_t kTcpMagic = 0x314d5347;

inline std::vector<std::byte> tcpPrefix(std::uint32_t magic, std::uint32_t headerBytes,
                                        std::uint32_t payloadCount,
                                        std::initializer_list<std::uint64_t> payloadBytes) {
  std::vector<std::byte> prefix(12 + 8 * payloadBytes.size());
  std::memcpy(prefix.data(), &magic, 4);
  std::memcpy(prefix.data() + 4, &headerBytes, 4);
  std::memcpy(prefix.data() + 8, &payloadCount, 4);
  std::size_t offset = 12;
  for (const std::uint64_t size : payloadBytes) {
    std::memcpy(prefix.data() + offset, &size, 8);
    offset += 8;
  }
  return prefix;
}

// Connects a plain (blocking) socket to `where` and writes `bytes` on it.
inline void writeRaw(asio::ip::tcp::socket& socket, const Endpoint& where,
                     std::span<const std::byte> bytes) {
  socket.connect(asio::ip::tcp::endpoint(asio::ip::make_address(where.host), where.port));
  asio::write(socket, asio::buffer(bytes.data(), bytes.size()));
}

// How a link reports that the other end went away: eof after a clean close, or a reset or
// broken pipe when the other end closed with data unread (an earlier send may have met that
// first and closed the link with it).
inline bool isDisconnect(const std::error_code& ec) {
  return ec == asio::error::eof || ec == asio::error::connection_reset ||
         ec == asio::error::broken_pipe;
}

// ---- cases ----

// ---- cases ----

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

TEST_CASE_TEMPLATE_DEFINE("net transport: limits are enforced on send and on receive", Backend,
                          conformance_limits) {
  if (!available<Backend>()) return;
  Watchdog watchdog(60s);
  Limits small;
  small.maxFrameBytes = 1 << 20;
  small.maxPayloads = 4;
  small.maxHeaderBytes = 1024;
  const std::vector<std::byte> header = headerOf({7});
  const std::vector<std::byte> big = patternBytes(2 << 20, 1);
  const std::vector<std::byte> tiny = patternBytes(100, 2);
  const std::vector<std::byte> longHeader(2048);
  auto receiveOne = [](Peer& peer, Link* link) {
    return peer.spawn([link]() -> asio::awaitable<std::pair<std::error_code, InFrame>> {
      InFrame frame;
      const std::error_code ec = co_await link->receive(frame);
      co_return std::make_pair(ec, std::move(frame));
    });
  };
  auto send = [](Peer& peer, Link* link, OutFrame frame) {
    return peer.run([&]() -> asio::awaitable<std::error_code> {
      co_return co_await link->send(std::move(frame));
    });
  };

  SUBCASE("the sender refuses frames beyond its own limits and sends nothing") {
    TwoPeers<Backend> net(small, Limits{});
    CHECK(send(net.a, net.la, OutFrame{header, {big}}) == make_error_code(Errc::frameTooLarge));
    CHECK(send(net.a, net.la, OutFrame{header, {tiny, tiny, tiny, tiny, tiny}}) ==
          make_error_code(Errc::tooManyPayloads));
    CHECK(send(net.a, net.la, OutFrame{longHeader, {}}) == make_error_code(Errc::frameTooLarge));
    // The link still works, and what arrives first is the valid frame.
    auto received = receiveOne(net.b, net.lb);
    CHECK(!send(net.a, net.la, OutFrame{header, {tiny, tiny}}));
    auto [ec, frame] = received.get();
    REQUIRE_MESSAGE(!ec, describe(ec));
    CHECK(headerField(frame.header, 0) == 7);
    CHECK(frame.payloads.size() == 2);
  }

  SUBCASE("the receiver refuses a frame beyond its limits and closes the link") {
    TwoPeers<Backend> net(Limits{}, small);
    auto received = receiveOne(net.b, net.lb);
    auto sent = net.a.spawn([&]() -> asio::awaitable<std::error_code> {
      co_return co_await net.la->send(frameOf(header, big));
    });
    auto [ec, frame] = received.get();
    CHECK(ec == make_error_code(Errc::frameTooLarge));
    sent.get();  // either outcome: the bytes may be in the kernel before the receiver refuses
    // The receiver closed its end: a's receive sees the disconnect.
    auto [after, unused] = receiveOne(net.a, net.la).get();
    CHECK_MESSAGE(isDisconnect(after), describe(after));
  }

  if constexpr (Backend::kRawTcpListener) {
    SUBCASE("a raw prefix that claims 2^40 bytes fails before any allocation") {
      Fixture fixture;
      Peer b;
      b.transport = b.call([&] { return Backend::make(b.io(), fixture); });
      const Endpoint where = b.listen();
      struct Bad {
        std::vector<std::byte> prefix;
        std::error_code expected;
      };
      const std::vector<Bad> bads{
          {tcpPrefix(kTcpMagic, 8, 1, {std::uint64_t{1} << 40}), Errc::frameTooLarge},
          {tcpPrefix(kTcpMagic, 8, 2, {~std::uint64_t{0}, 16}), Errc::frameTooLarge},
          {tcpPrefix(kTcpMagic, 1u << 31, 0, {}), Errc::frameTooLarge},
          {tcpPrefix(kTcpMagic, 8, 100'000, {}), Errc::tooManyPayloads},
          {tcpPrefix(0xdeadbeef, 8, 0, {}), Errc::malformedFrame},
      };
      for (const Bad& bad : bads) {
        asio::io_context rawIo;
        asio::ip::tcp::socket raw(rawIo);
        writeRaw(raw, where, bad.prefix);
        LinkResult accepted = b.run(
            [&]() -> asio::awaitable<LinkResult> { co_return co_await b.transport->accept(); });
        REQUIRE_MESSAGE(!accepted.error, describe(accepted.error));
        Link* link = accepted.link.get();
        b.call([&] { b.links.push_back(std::move(accepted.link)); });
        auto [ec, frame] = receiveOne(b, link).get();
        CHECK_MESSAGE(ec == bad.expected, describe(ec));
        CHECK(frame.header.empty());
      }
    }
  }
}

TEST_CASE_TEMPLATE_DEFINE("net transport: a receiver that holds its payloads stalls the sender",
                          Backend, conformance_back_pressure) {
  if (!available<Backend>()) return;
  Watchdog watchdog(60s);
  constexpr std::size_t kPayloadBytes = 256 * 1024;
  constexpr std::size_t kHeld = 4;      // what fits in the receiver's pool
  constexpr std::size_t kFrames = 256;  // 64 MiB: far beyond any socket buffers
  Limits receiverLimits;
  receiverLimits.maxBufferedBytes = kHeld * kPayloadBytes;
  TwoPeers<Backend> net(Limits{}, receiverLimits);
  const std::vector<std::byte> payload = patternBytes(kPayloadBytes, 3);

  std::atomic<std::size_t> sentCount{0};
  std::atomic<std::size_t> receivedCount{0};
  std::vector<InFrame> held;  // b's thread only
  bool release = false;       // b's thread only
  auto received = net.b.spawn([&]() -> asio::awaitable<std::error_code> {
    for (std::size_t i = 0; i < kFrames; ++i) {
      InFrame frame;
      if (auto ec = co_await net.lb->receive(frame)) co_return ec;
      if (headerField(frame.header, 0) != i) co_return Errc::malformedFrame;
      if (!release) held.push_back(std::move(frame));
      receivedCount = i + 1;
    }
    co_return std::error_code{};
  });
  auto sent = net.a.spawn([&]() -> asio::awaitable<std::error_code> {
    for (std::size_t i = 0; i < kFrames; ++i) {
      const std::vector<std::byte> header = headerOf({i});
      if (auto ec = co_await net.la->send(frameOf(header, payload))) co_return ec;
      sentCount = i + 1;
    }
    co_return std::error_code{};
  });

  // The receiver takes what its pool holds, then stops; the sender stalls once the buffers in
  // between are full.
  const auto deadline = std::chrono::steady_clock::now() + 20s;
  while (receivedCount < kHeld && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(5ms);
  std::size_t before = 0;
  std::size_t after = sentCount;
  do {
    before = after;
    std::this_thread::sleep_for(200ms);
    after = sentCount;
  } while (after != before && std::chrono::steady_clock::now() < deadline);
  CHECK(receivedCount == kHeld);
  CHECK(after < kFrames);
  MESSAGE("sender stalled after " << after << " of " << kFrames << " frames");

  // Releasing the payloads lets everything through.
  net.b.call([&] {
    release = true;
    held.clear();
  });
  const std::error_code sendError = sent.get();
  const std::error_code receiveError = received.get();
  CHECK_MESSAGE(!sendError, describe(sendError));
  CHECK_MESSAGE(!receiveError, describe(receiveError));
  CHECK(sentCount == kFrames);
  CHECK(receivedCount == kFrames);
}

TEST_CASE_TEMPLATE_DEFINE("net transport: a peer that disconnects mid-frame gives an error code",
                          Backend, conformance_disconnect) {
  if (!available<Backend>()) return;
  Watchdog watchdog(60s);
  TwoPeers<Backend> net;
  constexpr std::size_t kBytes = 64 << 20;
  std::unique_ptr<std::byte[]> data(new std::byte[kBytes]);
  fillPattern({data.get(), kBytes}, 9);
  const std::vector<std::byte> header = headerOf({1});

  // The sender closes its link (from this thread, as close() allows) while the frame is going.
  auto received = net.b.spawn([&]() -> asio::awaitable<std::error_code> {
    InFrame frame;
    for (;;) {
      if (auto ec = co_await net.lb->receive(frame)) co_return ec;
      if (frame.payloads.size() != 1 || !matchesPattern(frame.payloads[0].bytes(), 9))
        co_return Errc::malformedFrame;  // a whole frame or none, never a torn one
    }
  });
  auto sent = asio::co_spawn(net.a.io(), net.la->send(frameOf(header, {data.get(), kBytes})),
                             asio::use_future);
  std::this_thread::sleep_for(1ms);
  net.la->close();
  net.la->close();  // idempotent
  const std::error_code sendResult = sent.get();
  CHECK_MESSAGE((!sendResult || sendResult == asio::error::operation_aborted),
                describe(sendResult));
  const std::error_code receiveResult = received.get();
  CHECK_MESSAGE(isDisconnect(receiveResult), describe(receiveResult));

  if constexpr (Backend::kRawTcpListener) {
    // Half a frame on a raw socket, then the socket closes.
    std::vector<std::byte> bytes = tcpPrefix(kTcpMagic, 8, 1, {1 << 20});
    const std::vector<std::byte> part = patternBytes(8 + (1 << 19), 4);
    bytes.insert(bytes.end(), part.begin(), part.end());
    asio::io_context rawIo;
    asio::ip::tcp::socket raw(rawIo);
    writeRaw(raw, net.where, bytes);
    raw.close();
    LinkResult accepted = net.b.run(
        [&]() -> asio::awaitable<LinkResult> { co_return co_await net.b.transport->accept(); });
    REQUIRE_MESSAGE(!accepted.error, describe(accepted.error));
    const std::error_code ec = net.b.run([&]() -> asio::awaitable<std::error_code> {
      InFrame frame;
      co_return co_await accepted.link->receive(frame);
    });
    CHECK_MESSAGE(isDisconnect(ec), describe(ec));
    net.b.call([&] { accepted.link.reset(); });
  }

  // The listener is unharmed: a new link carries a frame.
  auto [mine, theirs] = connect(net.a, net.b, net.where);
  auto again = net.b.spawn([theirs]() -> asio::awaitable<std::error_code> {
    InFrame frame;
    co_return co_await theirs->receive(frame);
  });
  const std::error_code resent = net.a.run([&, mine]() -> asio::awaitable<std::error_code> {
    co_return co_await mine->send(frameOf(header));
  });
  CHECK(!resent);
  CHECK(!again.get());
}

TEST_CASE_TEMPLATE_DEFINE("net transport: connect to a dead address fails within its timeout",
                          Backend, conformance_dead_address) {
  if (!available<Backend>()) return;
  Watchdog watchdog(30s);
  Fixture fixture;
  Peer a;
  Peer gone;
  a.transport = a.call([&] { return Backend::make(a.io(), fixture); });
  // A port that was just free: listen on it, then close the listener.
  gone.transport = gone.call([&] { return Backend::make(gone.io(), fixture); });
  const Endpoint dead = gone.listen();
  gone.call([&] { gone.transport.reset(); });

  const auto start = std::chrono::steady_clock::now();
  LinkResult result = a.run([&]() -> asio::awaitable<LinkResult> {
    co_return co_await a.transport->connect(dead, 300ms);
  });
  const auto elapsed = std::chrono::steady_clock::now() - start;
  CHECK(result.link == nullptr);
  CHECK_MESSAGE(result.error == asio::error::timed_out, describe(result.error));
  CHECK(elapsed >= 250ms);  // it kept retrying until the timeout
  CHECK(elapsed < 1s);
  a.call([&] { result.link.reset(); });
}

TEST_CASE_TEMPLATE_DEFINE("net transport: close aborts pending operations and is idempotent",
                          Backend, conformance_close) {
  if (!available<Backend>()) return;
  Watchdog watchdog(30s);
  TwoPeers<Backend> net;
  auto pending = net.b.spawn([&]() -> asio::awaitable<std::error_code> {
    InFrame frame;
    co_return co_await net.lb->receive(frame);
  });
  // One receive at a time per link.
  const std::error_code second = net.b.run([&]() -> asio::awaitable<std::error_code> {
    InFrame frame;
    co_return co_await net.lb->receive(frame);
  });
  CHECK(second == make_error_code(Errc::receiveInProgress));

  net.lb->close();  // from this thread, twice
  net.lb->close();
  CHECK(pending.get() == asio::error::operation_aborted);
  const std::vector<std::byte> header = headerOf({5});
  const std::error_code sendAfter = net.b.run([&]() -> asio::awaitable<std::error_code> {
    co_return co_await net.lb->send(frameOf(header));
  });
  CHECK(sendAfter == asio::error::operation_aborted);
  // The other end sees the disconnect.
  const std::error_code remote = net.a.run([&]() -> asio::awaitable<std::error_code> {
    InFrame frame;
    co_return co_await net.la->receive(frame);
  });
  CHECK_MESSAGE(isDisconnect(remote), describe(remote));

  // Closing the transport aborts a pending accept; closing again is harmless.
  auto accepting = net.b.spawn(
      [&]() -> asio::awaitable<LinkResult> { co_return co_await net.b.transport->accept(); });
  std::this_thread::sleep_for(10ms);
  net.b.call([&] {
    net.b.transport->close();
    net.b.transport->close();
  });
  LinkResult accepted = accepting.get();
  CHECK(accepted.error == asio::error::operation_aborted);
}

}  // namespace gossamer::net::conformance

// Registers every case of the suite for each backend tag given.
#define GOSSAMER_TRANSPORT_CONFORMANCE(...)                           \
  namespace gossamer::net::conformance {                              \
  TEST_CASE_TEMPLATE_INVOKE(conformance_order, __VA_ARGS__);          \
  TEST_CASE_TEMPLATE_INVOKE(conformance_large, __VA_ARGS__);          \
  TEST_CASE_TEMPLATE_INVOKE(conformance_header_only, __VA_ARGS__);    \
  TEST_CASE_TEMPLATE_INVOKE(conformance_eight_links, __VA_ARGS__);    \
  TEST_CASE_TEMPLATE_INVOKE(conformance_payload_target, __VA_ARGS__); \
  TEST_CASE_TEMPLATE_INVOKE(conformance_limits, __VA_ARGS__);         \
  TEST_CASE_TEMPLATE_INVOKE(conformance_back_pressure, __VA_ARGS__);  \
  TEST_CASE_TEMPLATE_INVOKE(conformance_disconnect, __VA_ARGS__);     \
  TEST_CASE_TEMPLATE_INVOKE(conformance_dead_address, __VA_ARGS__);   \
  TEST_CASE_TEMPLATE_INVOKE(conformance_close, __VA_ARGS__);          \
  }                                                                   \
  static_assert(true, "")
