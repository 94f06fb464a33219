// net/wire/handshake_server: the accept loop that authenticates inbound links, over real TCP on
// loopback, with its bound on pending handshakes.
#include "net/wire/handshake_server.h"

#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/io_context.hpp>
#include <asio/ip/tcp.hpp>
#include <spdlog/sinks/base_sink.h>
#include <doctest/doctest.h>

#include "engine/base/log.h"
#include "net/errors.h"
#include "net/tcp/tcp_transport.h"
#include "tests/net/tls_support.h"

using namespace gossamer;
using namespace gossamer::net;
using namespace std::chrono_literals;

namespace {

wire::HandshakeConfig configFor(std::uint64_t peerId, std::chrono::milliseconds timeout = 5s) {
  wire::HandshakeConfig config;
  config.clusterId = "bounded";
  config.peerId = peerId;
  config.listen = Endpoint{"127.0.0.1", static_cast<std::uint16_t>(9000 + peerId)};
  config.model = wire::ModelFingerprint{1234, "f32", 0x42};
  const std::string secret = "shared secret";
  for (char c : secret) config.secret.push_back(static_cast<std::byte>(c));
  config.identity = wire::Identity::generate();
  config.timeout = timeout;
  return config;
}

// Runs `io` until `done()` holds or 10 s pass (a hang guard, not a speed assertion).
template <typename Predicate>
bool runUntil(asio::io_context& io, Predicate done) {
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (!done() && std::chrono::steady_clock::now() < deadline) io.run_for(5ms);
  return done();
}

struct ClientOutcome {
  bool done = false;
  wire::HandshakeResult result;
  std::unique_ptr<Link> link;
};

void startClient(asio::io_context& io, Transport& transport, Endpoint server,
                 wire::HandshakeConfig config, std::shared_ptr<ClientOutcome> out) {
  asio::co_spawn(
      io,
      [&transport, server, config, out]() -> asio::awaitable<void> {
        LinkResult connected = co_await transport.connect(server, 5s);
        if (connected.error) {
          out->result.error = connected.error;
        } else {
          out->result = co_await wire::clientHandshake(*connected.link, config);
          out->link = std::move(connected.link);
        }
        out->done = true;
      },
      asio::detached);
}

// A listening TCP transport serving handshakes and a client transport, on one io_context.
struct Served {
  asio::io_context io;
  std::unique_ptr<Transport> server;
  std::unique_ptr<Transport> client = tcp::makeTransport(io);
  std::shared_ptr<wire::HandshakeServerStats> stats =
      std::make_shared<wire::HandshakeServerStats>();
  Endpoint at;

  explicit Served(const tcp::Options& options,
                  wire::OnAuthenticatedLink onLink = [](wire::AuthenticatedLink) {})
      : server(tcp::makeTransport(io, options)) {
    REQUIRE_FALSE(server->listen(Endpoint{"127.0.0.1", 0}));
    at = server->localEndpoint();
    asio::co_spawn(io, wire::serveHandshakes(*server, configFor(1), std::move(onLink), stats),
                   asio::detached);
  }
  ~Served() {
    server->close();
    client->close();
    io.run_for(50ms);
  }
  // Opens `count` links from the client that never say hello, into `links`.
  void openSilent(int count, std::vector<std::unique_ptr<Link>>& links) {
    for (int i = 0; i < count; ++i)
      asio::co_spawn(
          io,
          [this, &links]() -> asio::awaitable<void> {
            LinkResult connected = co_await client->connect(at, 5s);
            if (!connected.error) links.push_back(std::move(connected.link));
          },
          asio::detached);
  }
};

}  // namespace

TEST_CASE("net handshake server: authenticates inbound links and hands them on") {
  asio::io_context io;
  auto server = tcp::makeTransport(io);
  auto client = tcp::makeTransport(io);
  REQUIRE_FALSE(server->listen(Endpoint{"127.0.0.1", 0}));
  std::vector<wire::AuthenticatedLink> links;
  auto stats = std::make_shared<wire::HandshakeServerStats>();
  asio::co_spawn(
      io,
      wire::serveHandshakes(
          *server, configFor(1),
          [&](wire::AuthenticatedLink link) { links.push_back(std::move(link)); }, stats),
      asio::detached);

  auto good = std::make_shared<ClientOutcome>();
  startClient(io, *client, server->localEndpoint(), configFor(2), good);
  auto badConfig = configFor(3);
  badConfig.secret.back() = std::byte{'X'};
  auto bad = std::make_shared<ClientOutcome>();
  startClient(io, *client, server->localEndpoint(), badConfig, bad);

  REQUIRE(runUntil(io, [&] { return good->done && bad->done && stats->refused == 1; }));
  CHECK(good->result.ok());
  CHECK(good->result.remotePeerId == 1);
  CHECK(bad->result.error == Errc::authenticationFailed);
  REQUIRE(links.size() == 1);
  CHECK(links[0].hello.remotePeerId == 2);
  CHECK(links[0].hello.remoteListen == configFor(2).listen);
  CHECK(stats->accepted == 1);
  CHECK(stats->pending == 0);
  server->close();
  client->close();
  io.run_for(50ms);
}

TEST_CASE("net handshake server: at most maxPendingHandshakes run at once, the rest wait") {
  tcp::Options serverOptions;
  serverOptions.limits.maxPendingHandshakes = 2;
  int handedOn = 0;
  Served s(serverOptions, [&](wire::AuthenticatedLink) { ++handedOn; });
  auto& [io, server, client, stats, at] = s;

  // Two connections that never say hello occupy both slots.
  std::vector<std::unique_ptr<Link>> silent;
  s.openSilent(2, silent);
  REQUIRE(runUntil(io, [&] { return silent.size() == 2 && stats->pending == 2; }));

  // A genuine client now connects (the kernel's backlog takes it) but is not served in time.
  auto starved = std::make_shared<ClientOutcome>();
  startClient(io, *client, at, configFor(2, 300ms), starved);
  REQUIRE(runUntil(io, [&] { return starved->done; }));
  CHECK(starved->result.error == Errc::handshakeTimeout);
  CHECK(stats->pending == 2);
  CHECK(stats->maxPending == 2);
  CHECK(handedOn == 0);

  // Freeing the slots lets the server go on: the silent links' handshakes fail (eof), the
  // starved one's too (its client gave up), and a new client is served.
  for (auto& link : silent) link->close();
  REQUIRE(runUntil(io, [&] { return stats->refused >= 2 && stats->pending <= 1; }));
  auto served = std::make_shared<ClientOutcome>();
  startClient(io, *client, at, configFor(3), served);
  REQUIRE(runUntil(io, [&] { return served->done && handedOn == 1; }));
  CHECK(served->result.ok());
  CHECK(stats->maxPending == 2);
}

TEST_CASE("net handshake server: ends when the transport closes, misuse throws") {
  asio::io_context io;
  auto server = tcp::makeTransport(io);
  REQUIRE_FALSE(server->listen(Endpoint{"127.0.0.1", 0}));
  bool ended = false;
  asio::co_spawn(
      io,
      [&]() -> asio::awaitable<void> {
        co_await wire::serveHandshakes(*server, configFor(1), [](wire::AuthenticatedLink) {});
        ended = true;
      },
      asio::detached);
  io.run_for(20ms);
  CHECK_FALSE(ended);
  server->close();
  REQUIRE(runUntil(io, [&] { return ended; }));

  auto noSecret = configFor(1);
  noSecret.secret.clear();
  bool threw = false;
  asio::co_spawn(
      io,
      [&]() -> asio::awaitable<void> {
        try {
          co_await wire::serveHandshakes(*server, noSecret, [](wire::AuthenticatedLink) {});
        } catch (const std::exception& e) {
          threw = std::string(e.what()).find("secret") != std::string::npos;
        }
      },
      asio::detached);
  io.restart();
  REQUIRE(runUntil(io, [&] { return threw; }));
}

namespace {

// Counts the warnings a logger writes while it lives.
class WarningCounter final : public spdlog::sinks::base_sink<std::mutex> {
 public:
  std::size_t warnings = 0;
  std::vector<std::string> lines;

 protected:
  void sink_it_(const spdlog::details::log_msg& message) override {
    if (message.level < spdlog::level::warn) return;
    ++warnings;
    lines.emplace_back(message.payload.data(), message.payload.size());
  }
  void flush_() override {}
};

struct CountWarnings {
  std::shared_ptr<spdlog::logger> logger = gossamer::log::get("net");
  std::shared_ptr<WarningCounter> counter = std::make_shared<WarningCounter>();
  CountWarnings() { logger->sinks().push_back(counter); }
  ~CountWarnings() { logger->sinks().pop_back(); }
};

// Opens and at once closes `count` plain TCP connections to `at` (a scanner's probes), on a
// thread of its own while the server's io_context runs.
std::thread connectAndClose(const Endpoint& at, int count) {
  return std::thread([at, count] {
    asio::io_context io;
    const asio::ip::tcp::endpoint target(asio::ip::make_address(at.host), at.port);
    for (int i = 0; i < count; ++i) {
      asio::ip::tcp::socket socket(io);
      socket.connect(target);
      socket.close();
    }
  });
}

}  // namespace

TEST_CASE("net handshake server: a scan of a TLS peer logs one line per cause, not per probe") {
  tcp::Options options;
  options.tls = test::pskContext("shared secret");
  Served s(options);
  CountWarnings count;
  std::thread scanner = connectAndClose(s.at, 300);
  const bool allRefused =
      runUntil(s.io, [&] { return s.stats->refused == 300 && s.stats->pending == 0; });
  scanner.join();
  REQUIRE(allRefused);
  const auto& by = s.stats->refusedBy;
  // Every probe is refused for what it was: closed before a byte (or, with more than 16 still
  // pending from this host, closed at once).
  CHECK(by[static_cast<std::size_t>(wire::Refusal::closedEarly)] +
            by[static_cast<std::size_t>(wire::Refusal::tooManyPending)] ==
        300);
  CHECK(by[static_cast<std::size_t>(wire::Refusal::closedEarly)] > 0);
  CHECK(count.counter->warnings <= 2);  // the first of each cause; the rest wait for the summary
  for (const std::string& line : count.counter->lines) {
    CAPTURE(line);
    CHECK(line.find("from 127.0.0.1") != std::string::npos);
    CHECK(line.find("plaintext") == std::string::npos);  // not the old, wrong cause
  }
}

TEST_CASE("net handshake server: one source holds at most its share of pending handshakes") {
  tcp::Options options;
  options.limits.maxPendingHandshakesPerSource = 2;
  Served s(options);
  // Five connections that never say hello: two are pending, three are closed at once.
  std::vector<std::unique_ptr<Link>> silent;
  s.openSilent(5, silent);
  REQUIRE(runUntil(s.io, [&] {
    return silent.size() == 5 &&
           s.stats->refusedBy[static_cast<std::size_t>(wire::Refusal::tooManyPending)] == 3;
  }));
  CHECK(s.stats->pending == 2);
  CHECK(s.stats->maxPending == 2);
}
