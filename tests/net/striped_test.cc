// The striped transport (net/striped/) beyond the conformance suite: its chunk layout and `auto`
// stream count in closed form, frames that really travel over every stream, in order with small
// frames between them, a broken stream failing the link, and bad set-up refused.
#include <atomic>
#include <memory>
#include <mutex>
#include <vector>

#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/io_context.hpp>
#include <asio/steady_timer.hpp>
#include <asio/use_awaitable.hpp>
#include <doctest/doctest.h>

#include "net/errors.h"
#include "net/striped/striped_link.h"
#include "net/striped/striped_transport.h"
#include "net/tcp/tcp_transport.h"
#include "tests/net/transport_conformance_harness.h"

namespace gossamer::net {
namespace {

using namespace conformance;

// A tcp transport that keeps every link it made, so that a test sees each stream's bytes and can
// break one. The recorded links are used on the transport's io thread only.
class RecordingLink final : public Link {
 public:
  explicit RecordingLink(std::unique_ptr<Link> inner) : inner_(std::move(inner)) {}
  asio::awaitable<std::error_code> send(OutFrame frame) override {
    return inner_->send(std::move(frame));
  }
  asio::awaitable<std::error_code> receive(InFrame& frame) override {
    return inner_->receive(frame);
  }
  void setPayloadTarget(PayloadTarget target) override {
    inner_->setPayloadTarget(std::move(target));
  }
  void close() override { inner_->close(); }
  std::string remoteAddress() const override { return inner_->remoteAddress(); }
  std::uint64_t bytesSent() const override { return inner_->bytesSent(); }
  std::uint64_t bytesReceived() const override { return inner_->bytesReceived(); }

 private:
  std::unique_ptr<Link> inner_;
};

struct Recorded {
  std::mutex mutex;
  std::vector<Link*> links;  // in the order they were made
};

class RecordingTransport final : public Transport {
 public:
  RecordingTransport(std::unique_ptr<Transport> inner, std::shared_ptr<Recorded> recorded)
      : inner_(std::move(inner)), recorded_(std::move(recorded)) {}
  std::string name() const override { return "recording"; }
  std::error_code listen(const Endpoint& local) override { return inner_->listen(local); }
  Endpoint localEndpoint() const override { return inner_->localEndpoint(); }
  asio::awaitable<LinkResult> accept() override { co_return record(co_await inner_->accept()); }
  asio::awaitable<LinkResult> connect(const Endpoint& remote,
                                      std::chrono::milliseconds timeout) override {
    co_return record(co_await inner_->connect(remote, timeout));
  }
  void registerMemory(std::span<std::byte>) override {}
  void close() override { inner_->close(); }
  const Limits& limits() const override { return inner_->limits(); }

 private:
  LinkResult record(LinkResult result) {
    if (result.error) return result;
    auto link = std::make_unique<RecordingLink>(std::move(result.link));
    std::lock_guard lock(recorded_->mutex);
    recorded_->links.push_back(link.get());
    return LinkResult{{}, std::move(link)};
  }
  std::unique_ptr<Transport> inner_;
  std::shared_ptr<Recorded> recorded_;
};

constexpr std::size_t kStreams = 4;
constexpr std::size_t kStripe = std::size_t{64} << 10;

// Striped over recording tcp; the fixture's backendState holds the connector's record (a's: made
// first), then the listener's.
struct RecordedStripedBackend {
  static std::unique_ptr<Transport> make(asio::io_context& io, Fixture& fixture) {
    auto recorded = std::make_shared<Recorded>();
    auto all =
        std::static_pointer_cast<std::vector<std::shared_ptr<Recorded>>>(fixture.backendState);
    if (!all) {
      all = std::make_shared<std::vector<std::shared_ptr<Recorded>>>();
      fixture.backendState = all;
    }
    all->push_back(recorded);
    tcp::Options tcpOptions;
    tcpOptions.limits = fixture.limits;
    striped::Options options;
    options.streams = kStreams;
    options.stripeBytes = kStripe;
    options.setupTimeout = std::chrono::milliseconds(500);
    return striped::makeTransport(
        std::make_unique<RecordingTransport>(tcp::makeTransport(io, tcpOptions), recorded),
        options);
  }
};

std::vector<std::shared_ptr<Recorded>>& records(Fixture& fixture) {
  return *std::static_pointer_cast<std::vector<std::shared_ptr<Recorded>>>(fixture.backendState);
}

TEST_CASE("striped: chunks cut the payloads' concatenation into equal ranges") {
  const std::vector<std::uint64_t> sizes{10, 0, 25, 5};  // 40 bytes
  CHECK(striped::streamsFor(40, 4, 10) == 4);
  CHECK(striped::streamsFor(19, 4, 10) == 1);  // below 2 x stripe: whole
  CHECK(striped::streamsFor(35, 4, 10) == 3);  // each chunk at least the stripe
  CHECK(striped::streamsFor(1000, 1, 10) == 1);
  // 3 chunks of ceil(40 / 3) = 14 bytes: [0, 14), [14, 28), [28, 40).
  const auto first = striped::chunkPieces(sizes, 3, 0);
  REQUIRE(first.size() == 2);
  CHECK((first[0].payload == 0 && first[0].offset == 0 && first[0].size == 10));
  CHECK((first[1].payload == 2 && first[1].offset == 0 && first[1].size == 4));
  const auto second = striped::chunkPieces(sizes, 3, 1);
  REQUIRE(second.size() == 1);
  CHECK((second[0].payload == 2 && second[0].offset == 4 && second[0].size == 14));
  const auto third = striped::chunkPieces(sizes, 3, 2);
  REQUIRE(third.size() == 2);
  CHECK((third[0].payload == 2 && third[0].offset == 18 && third[0].size == 7));
  CHECK((third[1].payload == 3 && third[1].offset == 0 && third[1].size == 5));
}

TEST_CASE("striped: auto opens enough window-limited connections to fill the capacity") {
  using Seconds = std::chrono::duration<double>;
  const std::uint64_t window = std::uint64_t{8} << 20;
  // Tokyo-London on geo-cap: 8 MiB / 212 ms = 316.6 Mbit/s a connection; 10 Gbit/s needs 32.
  CHECK(striped::autoStreams(Seconds(0.212), {window, 10e9}, 64) == 32);
  CHECK(striped::autoStreams(Seconds(0.212), {window, 10e9}, 16) == 16);
  // Oregon-Ohio, 50 ms: 1342 Mbit/s a connection, 8 fill 10 Gbit/s.
  CHECK(striped::autoStreams(Seconds(0.050), {window, 10e9}, 64) == 8);
  // Unknown capacity: a 10 Gbit/s interface is assumed.
  CHECK(striped::autoStreams(Seconds(0.050), {window, 0}, 64) == 8);
  // Loopback and links whose window does not limit: one.
  CHECK(striped::autoStreams(Seconds(50e-6), {window, 10e9}, 64) == 1);
  CHECK(striped::autoStreams(Seconds(0.212), {0, 10e9}, 64) == 1);
}

TEST_CASE("striped: a large frame travels over every stream, in order with small frames") {
  Watchdog watchdog(60s);
  TwoPeers<RecordedStripedBackend> net;
  const auto& connector = records(net.fixture)[0];
  REQUIRE(connector->links.size() == kStreams);
  const std::vector<std::byte> big = patternBytes(kStreams * kStripe * 3 + 17, 5);
  const std::vector<std::byte> second = patternBytes(kStripe + 3, 6);
  const std::vector<std::byte> tiny = patternBytes(100, 7);
  std::vector<std::byte> landing(big.size());
  net.b.call([&] {
    net.lb->setPayloadTarget([&](std::span<const std::byte> header, std::size_t index,
                                 std::size_t size) -> std::span<std::byte> {
      if (headerField(header, 0) == 2 && index == 0 && size == landing.size()) return landing;
      return {};
    });
  });
  auto received = net.b.spawn([&]() -> asio::awaitable<std::vector<InFrame>> {
    std::vector<InFrame> frames(4);
    for (InFrame& frame : frames) {
      const std::error_code ec = co_await net.lb->receive(frame);
      REQUIRE_MESSAGE(!ec, describe(ec));
    }
    co_return frames;
  });
  const std::vector<std::uint64_t> before = net.a.call([&] {
    std::vector<std::uint64_t> sent;
    for (Link* link : connector->links) sent.push_back(link->bytesSent());
    return sent;
  });
  // Four sends started at once: they must arrive in the order they started.
  const auto h1 = headerOf({1});
  const auto h2 = headerOf({2});
  const auto h3 = headerOf({3});
  const auto h4 = headerOf({4});
  net.a.run([&]() -> asio::awaitable<void> {
    auto sends = std::make_shared<std::atomic<int>>(0);
    auto sendOne = [&](std::span<const std::byte> header,
                       std::vector<std::span<const std::byte>> payloads) {
      asio::co_spawn(
          net.a.io(),
          [link = net.la, header, payloads, sends]() -> asio::awaitable<void> {
            const std::error_code ec = co_await link->send(OutFrame(header, payloads));
            CHECK_MESSAGE(!ec, describe(ec));
            ++*sends;
          },
          asio::detached);
    };
    sendOne(h1, {tiny});
    sendOne(h2, {big});
    sendOne(h3, {tiny, second});
    sendOne(h4, {});
    asio::steady_timer timer(net.a.io());
    while (*sends < 4) {
      timer.expires_after(1ms);
      co_await timer.async_wait(asio::use_awaitable);
    }
  });
  const std::vector<InFrame> frames = received.get();
  for (std::size_t i = 0; i < frames.size(); ++i) CHECK(headerField(frames[i].header, 0) == i + 1);
  CHECK(matchesPattern(frames[0].payloads.at(0).bytes(), 7));
  REQUIRE(frames[1].payloads.size() == 1);
  CHECK(frames[1].payloads[0].bytes().data() == landing.data());  // straight into the target
  CHECK(matchesPattern(landing, 5));
  REQUIRE(frames[2].payloads.size() == 2);
  CHECK(matchesPattern(frames[2].payloads[1].bytes(), 6));
  CHECK(frames[3].payloads.empty());
  // Every stream carried about a quarter of the large frame.
  net.a.call([&] {
    for (std::size_t i = 0; i < kStreams; ++i) {
      const std::uint64_t sent = connector->links[i]->bytesSent() - before[i];
      CHECK_MESSAGE(sent >= big.size() / kStreams, "stream " << i << " sent " << sent);
    }
    return 0;
  });
}

TEST_CASE("striped: a broken stream fails the whole link") {
  Watchdog watchdog(60s);
  TwoPeers<RecordedStripedBackend> net;
  const auto& connector = records(net.fixture)[0];
  auto received = net.b.spawn([&]() -> asio::awaitable<std::error_code> {
    InFrame frame;
    co_return co_await net.lb->receive(frame);
  });
  net.a.call([&] {
    connector->links[2]->close();
    return 0;
  });
  const std::vector<std::byte> big = patternBytes(kStreams * kStripe * 2, 1);
  const std::vector<std::byte> first = headerOf({1});
  const std::vector<std::byte> second = headerOf({2});
  const std::error_code sent = net.a.run([&]() -> asio::awaitable<std::error_code> {
    co_return co_await net.la->send(frameOf(first, big));
  });
  CHECK_MESSAGE(sent, "a send over a closed stream must fail");
  // The link stays failed, small frames included.
  const std::error_code after = net.a.run([&]() -> asio::awaitable<std::error_code> {
    co_return co_await net.la->send(frameOf(second));
  });
  CHECK(after == sent);
  const std::error_code remote = received.get();
  CHECK_MESSAGE(isDisconnect(remote), describe(remote));
}

TEST_CASE("striped: bad set-up is refused") {
  Watchdog watchdog(60s);
  Fixture fixture;
  Peer b;
  b.transport = b.call([&] { return RecordedStripedBackend::make(b.io(), fixture); });
  const Endpoint where = b.listen();
  Peer a;
  a.transport = a.call([&] { return tcp::makeTransport(a.io()); });
  auto acceptOne = [&] {
    return b.spawn(
        [&]() -> asio::awaitable<LinkResult> { co_return co_await b.transport->accept(); });
  };
  auto sendRaw = [&](std::vector<std::byte> header) {
    return a.run([&]() -> asio::awaitable<std::unique_ptr<Link>> {
      LinkResult result = co_await a.transport->connect(where, 5s);
      REQUIRE_MESSAGE(!result.error, describe(result.error));
      if (!header.empty()) co_await result.link->send(frameOf(header));
      co_return std::move(result.link);
    });
  };
  SUBCASE("a connector that speaks no striping") {
    auto accepted = acceptOne();
    auto link = sendRaw(headerOf({42, 43}));
    CHECK(accepted.get().error == make_error_code(Errc::malformedFrame));
    a.call([&] {
      link.reset();
      return 0;
    });
  }
  SUBCASE("a stream of a group nobody opened") {
    std::vector<std::byte> hello{std::byte{'G'}, std::byte{'S'}, std::byte{'T'}, std::byte{'R'},
                                 std::byte{1},   std::byte{1},   std::byte{2},   std::byte{0}};
    hello.resize(16, std::byte{9});
    auto accepted = acceptOne();
    auto link = sendRaw(hello);
    CHECK(accepted.get().error == make_error_code(Errc::malformedFrame));
    a.call([&] {
      link.reset();
      return 0;
    });
  }
  SUBCASE("a silent connector") {
    auto accepted = acceptOne();
    auto link = sendRaw({});
    CHECK(accepted.get().error == make_error_code(Errc::handshakeTimeout));
    a.call([&] {
      link.reset();
      return 0;
    });
  }
}

}  // namespace
}  // namespace gossamer::net
