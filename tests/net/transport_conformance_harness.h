// The harness of the transport conformance suite (transport_conformance.h): the Fixture a
// backend's factory takes, peers on their own io_context threads with a link between them, the
// seeded payload pattern a receiver checks without a second copy, hand-written frames of the tcp
// wire format for raw sockets, and what counts as a disconnect. Other tests of the net folder use
// these helpers too (tls_test.cc and ibverbs_transport_test.cc, through transport_conformance.h).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <memory>
#include <span>
#include <string>
#include <system_error>
#include <tuple>
#include <utility>
#include <vector>

#include <asio/io_context.hpp>
#include <asio/ip/tcp.hpp>
#include <asio/use_awaitable.hpp>
#include <asio/write.hpp>
#include <doctest/doctest.h>

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

// False, with a MESSAGE naming the reason, when `Backend` cannot run here (its `available`, as
// transport_conformance.h describes it).
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

}  // namespace gossamer::net::conformance
