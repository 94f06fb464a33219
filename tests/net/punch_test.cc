// Hole punching in the tcp backend (Transport::punch): two transports connect to each other at
// once from their listen ports. On loopback the first connect reaches the other's listener; the
// listener hands it to the punch awaiting that remote instead of accept()'s caller, so both ends
// get the one connection, with the TLS roles their callers chose. Backends without it say so.
#include <future>
#include <memory>
#include <string>
#include <vector>

#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/use_future.hpp>
#include <doctest/doctest.h>

#include "net/inproc/inproc_transport.h"
#include "net/tcp/tcp_transport.h"
#include "tests/net/tls_support.h"
#include "tests/support/io_thread.h"
#include "tests/support/watchdog.h"

namespace gossamer::net {
namespace {

using namespace std::chrono_literals;
using test::IoThread;
using test::Watchdog;

// A listening tcp transport whose accept loop counts the links accept() hands out.
struct Listener {
  explicit Listener(IoThread& io, tcp::Options options = {}) : io_(io) {
    io_.call([&] {
      transport = tcp::makeTransport(io_.io(), options);
      REQUIRE(!transport->listen(Endpoint{"127.0.0.1", 0}));
      endpoint = transport->localEndpoint();
      asio::co_spawn(io_.io(), acceptLoop(), asio::detached);
    });
  }
  ~Listener() {
    io_.call([&] {
      accepts.clear();
      transport.reset();
    });
  }
  asio::awaitable<void> acceptLoop() {
    Transport* t = transport.get();
    const std::shared_ptr<int> count = accepted;
    for (;;) {
      LinkResult result = co_await t->accept();
      if (result.error) co_return;
      ++*count;
      accepts.push_back(std::move(result.link));
    }
  }
  IoThread& io_;
  std::unique_ptr<Transport> transport;
  Endpoint endpoint;
  std::shared_ptr<int> accepted = std::make_shared<int>(0);
  std::vector<std::unique_ptr<Link>> accepts;
};

std::vector<std::byte> bytesOf(const std::string& text) {
  const auto bytes = std::as_bytes(std::span(text.data(), text.size()));
  return {bytes.begin(), bytes.end()};
}

// Both punch at once; each sends a frame on its link and receives the other's.
void punchPair(IoThread& io, Listener& a, Listener& b) {
  auto punched = io.call([&] {
    return std::pair{
        asio::co_spawn(io.io(), a.transport->punch(b.endpoint, 5s, false), asio::use_future),
        asio::co_spawn(io.io(), b.transport->punch(a.endpoint, 5s, true), asio::use_future)};
  });
  LinkResult ab = punched.first.get();
  LinkResult ba = punched.second.get();
  REQUIRE_MESSAGE(!ab.error, ab.error.message());
  REQUIRE_MESSAGE(!ba.error, ba.error.message());
  const std::vector<std::byte> hello = bytesOf("from a"), back = bytesOf("from b");
  const auto exchange = [&](Link& from, Link& to, const std::vector<std::byte>& bytes) {
    return io.run([&]() -> asio::awaitable<std::string> {
      std::vector<std::span<const std::byte>> payloads{bytes};
      if (auto error = co_await from.send(OutFrame(std::span(bytes), payloads)))
        co_return error.message();
      InFrame frame;
      if (auto error = co_await to.receive(frame)) co_return error.message();
      const auto got = frame.payloads.at(0).bytes();
      co_return std::string(reinterpret_cast<const char*>(got.data()), got.size());
    });
  };
  CHECK(exchange(*ab.link, *ba.link, hello) == "from a");
  CHECK(exchange(*ba.link, *ab.link, back) == "from b");
  // The accept loops saw nothing: the connection went to the punch awaiting it.
  CHECK(io.call([&] { return *a.accepted + *b.accepted; }) == 0);
  io.call([&] {
    ab.link.reset();
    ba.link.reset();
  });
}

TEST_CASE("tcp punch: both ends connect from their listen ports and share one connection") {
  Watchdog watchdog(30s);
  IoThread io;
  Listener a(io), b(io);
  punchPair(io, a, b);
  // The ports stay usable: a second punch between the same two works too.
  punchPair(io, a, b);
}

TEST_CASE("tcp punch: over TLS, one end takes the server role") {
  Watchdog watchdog(30s);
  IoThread io;
  tcp::Options options;
  options.tls = test::pskContext("punch secret");
  Listener a(io, options), b(io, options);
  punchPair(io, a, b);
}

TEST_CASE("tcp punch: with nobody punching back it times out, and the listener still accepts") {
  Watchdog watchdog(30s);
  IoThread io;
  Listener a(io);
  // A port nobody listens on: refused, retried, then timed out.
  const Endpoint nobody{"127.0.0.1", 1};
  const auto start = std::chrono::steady_clock::now();
  const LinkResult result = io.call([&] {
    return asio::co_spawn(io.io(), a.transport->punch(nobody, 500ms, false), asio::use_future);
  }).get();
  CHECK(result.error == asio::error::timed_out);
  CHECK(std::chrono::steady_clock::now() - start >= 450ms);
  // A plain connect to the listener is accept()'s as before.
  LinkResult plain = io.call([&] {
    return asio::co_spawn(io.io(), a.transport->connect(a.endpoint, 2s), asio::use_future);
  }).get();
  REQUIRE(!plain.error);
  REQUIRE(test::waitUntil(5s, [&] { return io.call([&] { return *a.accepted; }) == 1; }));
  io.call([&] { return plain.link->close(); });
}

TEST_CASE("tcp punch: a second transport cannot listen on a port in use") {
  IoThread io;
  Listener a(io);
  io.call([&] {
    auto other = tcp::makeTransport(io.io());
    CHECK(other->listen(a.endpoint) == asio::error::address_in_use);
  });
}

TEST_CASE("punch: a backend without it says so") {
  IoThread io;
  auto hub = inproc::makeHub();
  std::unique_ptr<Transport> transport;
  auto done = io.call([&] {
    transport = inproc::makeTransport(io.io(), hub);
    REQUIRE(!transport->listen(Endpoint{"inproc", 0}));
    return asio::co_spawn(io.io(), transport->punch(Endpoint{"inproc", 9}, 1s, false),
                          asio::use_future);
  });
  CHECK(done.get().error == asio::error::operation_not_supported);
  io.call([&] { transport.reset(); });
}

}  // namespace
}  // namespace gossamer::net
