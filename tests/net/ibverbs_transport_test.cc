// The RDMA transport (net/ibverbs/) over its links: the transport conformance suite over the fake
// verbs of tests/net/fake_verbs.h (two fake devices connected in memory, so it runs on any
// machine) and over the real devices (each case skips with a message where there is none), plus
// what only RDMA links have: the QP state machine and the verbs objects freed, the bootstrap's
// bounds, credits and chunking, error completions, disconnects, busy polling and RoCE, and
// registered and device memory (only in a build with the ibverbs backend). The wire records are
// tested in ibverbs_protocol_test.cc, the fake device and device selection in
// ibverbs_device_test.cc.
#include <doctest/doctest.h>

#include "engine/base/config.h"

#if GOSSAMER_HAVE_IBVERBS

#include <atomic>
#include <chrono>
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include <asio/io_context.hpp>

#include "net/errors.h"
#include "net/ibverbs/ibverbs_transport.h"
#include "net/ibverbs/protocol.h"
#include "net/ibverbs/verbs.h"
#include "net/tcp/tcp_transport.h"
#include "tests/net/fake_verbs.h"
#include "tests/net/transport_conformance.h"

namespace gossamer::net {
namespace {

using namespace std::chrono_literals;
using conformance::Fixture;
using ibverbs::fake::FakeFabric;

// The ibverbs transport over fake devices: every transport of a case gets its own fake device
// on the case's fabric.
struct FakeIbverbsBackend {
  static constexpr bool kRawTcpListener = false;
  static std::unique_ptr<Transport> make(asio::io_context& io, Fixture& fixture) {
    if (!fixture.backendState) fixture.backendState = std::make_shared<FakeFabric>();
    auto fabric = std::static_pointer_cast<FakeFabric>(fixture.backendState);
    ibverbs::Options options;
    options.limits = fixture.limits;
    options.verbs = fabric->makeHost();
    return ibverbs::makeTransport(io, options);
  }
};

// The ibverbs transport over this machine's RDMA devices (libibverbs).
struct IbverbsBackend {
  static constexpr bool kRawTcpListener = false;
  static bool available(std::string* reason) { return ibverbs::isViable(reason); }
  static std::unique_ptr<Transport> make(asio::io_context& io, Fixture& fixture) {
    ibverbs::Options options;
    options.limits = fixture.limits;
    return ibverbs::makeTransport(io, options);
  }
};

}  // namespace
}  // namespace gossamer::net

TYPE_TO_STRING_AS("FakeIbverbsBackend", gossamer::net::FakeIbverbsBackend);
TYPE_TO_STRING_AS("IbverbsBackend", gossamer::net::IbverbsBackend);

GOSSAMER_TRANSPORT_CONFORMANCE(FakeIbverbsBackend, IbverbsBackend);

namespace gossamer::net::ibverbs {
namespace {

using conformance::describe;
using conformance::fillPattern;
using conformance::frameOf;
using conformance::headerField;
using conformance::headerOf;
using conformance::isDisconnect;
using conformance::matchesPattern;
using conformance::patternBytes;
using conformance::Peer;
using conformance::Watchdog;
using fake::FakeFabric;
using fake::HostOptions;

// Small slots and buffers, so that a few KiB exercise chunking and credits.
Options smallOptions() {
  Options options;
  options.slotBytes = 4096;
  options.slotCount = 4;
  options.headerDepth = 4;
  options.receiveBytes = 256;
  return options;
}

// Two peers on one fake fabric, a connected to b, with the options given (verbs filled in).
struct FakeNet {
  explicit FakeNet(Options optionsA = {}, Options optionsB = {}, HostOptions hostA = {},
                   HostOptions hostB = {}) {
    optionsA.verbs = fabric->makeHost(hostA);  // "fake0"
    optionsB.verbs = fabric->makeHost(hostB);  // "fake1"
    a.transport = a.call([&] { return makeTransport(a.io(), optionsA); });
    b.transport = b.call([&] { return makeTransport(b.io(), optionsB); });
    where = b.listen();
    std::tie(la, lb) = conformance::connect(a, b, where);
  }

  std::error_code send(Peer& peer, Link* link, OutFrame frame) {
    return peer.run([&]() -> asio::awaitable<std::error_code> {
      co_return co_await link->send(std::move(frame));
    });
  }
  std::future<std::pair<std::error_code, InFrame>> receive(Peer& peer, Link* link) {
    return peer.spawn([link]() -> asio::awaitable<std::pair<std::error_code, InFrame>> {
      InFrame frame;
      const std::error_code ec = co_await link->receive(frame);
      co_return std::make_pair(ec, std::move(frame));
    });
  }

  std::shared_ptr<FakeFabric> fabric = std::make_shared<FakeFabric>();
  Peer a;
  Peer b;
  Endpoint where;
  Link* la = nullptr;
  Link* lb = nullptr;
};

// ---- the transport over fake devices ----

TEST_CASE("net ibverbs: links bring their QPs up RESET-INIT-RTR-RTS and free every verbs object") {
  Watchdog watchdog(30s);
  auto fabric = std::make_shared<FakeFabric>();
  {
    FakeNet net;
    fabric = net.fabric;
    const std::vector<std::byte> header = headerOf({3});
    auto received = net.receive(net.b, net.lb);
    CHECK(!net.send(net.a, net.la, frameOf(header)));
    CHECK(headerField(received.get().second.header, 0) == 3);
    for (const std::string device : {"fake0", "fake1"}) {
      const auto histories = net.fabric->qpHistories(device);
      REQUIRE(histories.size() == 1);
      CHECK(histories[0] == std::vector<QpState>{QpState::kReset, QpState::kInit,
                                                 QpState::kReadyToReceive, QpState::kReadyToSend});
    }
    CHECK(net.fabric->live().qps == 2);
    CHECK(net.a.call([&] { return net.a.transport->name(); }) == "ibverbs");
  }
  // Peers, transports and links gone: nothing of the device is left behind.
  CHECK(fabric->live() == fake::LiveCounts{});
  CHECK(fabric->violations().empty());
}

TEST_CASE("net ibverbs: accept bounds a remote that does not bootstrap, before any handshake") {
  Watchdog watchdog(30s);
  auto fabric = std::make_shared<FakeFabric>();
  Peer b;
  Peer a;
  Options options;
  options.verbs = fabric->makeHost();
  options.bootstrapTimeout = 300ms;
  b.transport = b.call([&] { return makeTransport(b.io(), options); });
  const Endpoint where = b.listen();
  a.transport = a.call([&] { return tcp::makeTransport(a.io()); });  // a plain TCP client
  auto acceptOne = [&] {
    return b.spawn(
        [&]() -> asio::awaitable<LinkResult> { co_return co_await b.transport->accept(); });
  };
  auto connectTcp = [&] {
    LinkResult connected = a.run([&]() -> asio::awaitable<LinkResult> {
      co_return co_await a.transport->connect(where, 5s);
    });
    REQUIRE_MESSAGE(!connected.error, describe(connected.error));
    Link* link = connected.link.get();
    a.call([&] { a.links.push_back(std::move(connected.link)); });
    return link;
  };

  SUBCASE("a silent remote is cut off after bootstrapTimeout") {
    auto accepted = acceptOne();
    connectTcp();
    const auto start = std::chrono::steady_clock::now();
    LinkResult result = accepted.get();
    CHECK_MESSAGE(result.error == make_error_code(Errc::handshakeTimeout), describe(result.error));
    CHECK(std::chrono::steady_clock::now() - start < 5s);
  }
  SUBCASE("garbage, a record with hostile values, or a large frame is refused") {
    protocol::BootstrapInfo hostile{.qpn = 1,
                                    .mtu = 1024,
                                    .slotCount = 1,
                                    .slotBytes = std::uint64_t{1} << 40,  // 1 TiB slots
                                    .dataWindow = 2,
                                    .creditWindow = 1,
                                    .receiveBytes = 256};
    const auto record = protocol::encodeBootstrap(hostile);
    const std::vector<std::byte> garbage = patternBytes(76, 1);
    const std::vector<std::byte> large = patternBytes(64 * 1024, 2);
    struct Bad {
      OutFrame frame;
      std::error_code expected;
    };
    const std::vector<Bad> bads{
        {OutFrame(garbage), Errc::malformedFrame},
        {OutFrame(record), Errc::malformedFrame},
        // The control connection takes small frames only, checked before allocating.
        {OutFrame(large), Errc::frameTooLarge},
        {OutFrame(record, {large}), Errc::tooManyPayloads},
    };
    for (const Bad& bad : bads) {
      auto accepted = acceptOne();
      Link* link = connectTcp();
      a.run(
          [&]() -> asio::awaitable<std::error_code> { co_return co_await link->send(bad.frame); });
      LinkResult result = accepted.get();
      CHECK_MESSAGE(result.error == bad.expected, describe(result.error));
    }
  }
  // Refused links leave nothing of the device behind (once b's io thread ran what was queued).
  b.call([] {});
  CHECK(fabric->live().qps == 0);
  CHECK(fabric->live().mrs == 0);
}

TEST_CASE("net ibverbs: a sender never overruns the receiver's slots, it waits for credits") {
  Watchdog watchdog(60s);
  const Options options = smallOptions();  // 4 slots of 4 KiB
  FakeNet net(options, options);
  constexpr std::size_t kFrames = 20;
  constexpr std::size_t kPayloadBytes = 3 * 4096 + 100;  // 4 chunks each
  std::vector<std::vector<std::byte>> payloads;
  for (std::size_t i = 0; i < kFrames; ++i) payloads.push_back(patternBytes(kPayloadBytes, i));
  std::atomic<std::size_t> sent{0};
  auto sending = net.a.spawn([&]() -> asio::awaitable<std::error_code> {
    for (std::size_t i = 0; i < kFrames; ++i) {
      const std::vector<std::byte> header = headerOf({i});
      if (auto ec = co_await net.la->send(frameOf(header, payloads[i]))) co_return ec;
      sent = i + 1;
    }
    co_return std::error_code{};
  });
  // Nobody receives: the first frame fills the 4 slots, then the sender waits for credits that
  // do not come.
  std::this_thread::sleep_for(300ms);
  const fake::DeviceStats stalled = net.fabric->stats("fake0");
  CHECK(stalled.writes == options.slotCount);
  CHECK(sent == 1);
  std::this_thread::sleep_for(100ms);
  CHECK(net.fabric->stats("fake0").writes == options.slotCount);

  // The receiver drains everything, intact and in order; credits flow back.
  const std::size_t received = net.b.run([&]() -> asio::awaitable<std::size_t> {
    InFrame frame;
    for (std::size_t i = 0; i < kFrames; ++i) {
      if (co_await net.lb->receive(frame)) co_return i;
      if (headerField(frame.header, 0) != i || frame.payloads.size() != 1 ||
          !matchesPattern(frame.payloads[0].bytes(), i))
        co_return i;
    }
    co_return kFrames;
  });
  CHECK(received == kFrames);
  const std::error_code sendError = sending.get();
  CHECK_MESSAGE(!sendError, describe(sendError));
  const fake::DeviceStats done = net.fabric->stats("fake0");
  CHECK(done.writes == kFrames * 4);
  CHECK(done.largestWrite <= options.slotBytes);
  CHECK(net.fabric->violations().empty());  // no message ever found its receive missing
}

TEST_CASE("net ibverbs: payloads and headers larger than a slot are chunked and reassembled") {
  Watchdog watchdog(60s);
  Options options = smallOptions();
  Options bigger = smallOptions();
  bigger.slotBytes = 64 * 1024;  // the smaller end's slots decide the chunk size
  bigger.receiveBytes = 4096;
  FakeNet net(bigger, options);
  // A header of 10 KB does not fit the 256-byte receives: its meta goes on in chunks.
  const std::vector<std::byte> header = patternBytes(10'000, 77);
  const std::vector<std::byte> large = patternBytes((1 << 20) + 3, 1);
  const std::vector<std::byte> small = patternBytes(17, 2);
  auto received = net.receive(net.b, net.lb);
  const std::error_code sent = net.send(net.a, net.la, OutFrame{header, {large, {}, small}});
  CHECK_MESSAGE(!sent, describe(sent));
  auto [ec, frame] = received.get();
  REQUIRE_MESSAGE(!ec, describe(ec));
  CHECK(matchesPattern(frame.header, 77));
  CHECK(frame.header.size() == header.size());
  REQUIRE(frame.payloads.size() == 3);
  CHECK(matchesPattern(frame.payloads[0].bytes(), 1));
  CHECK(frame.payloads[0].size() == large.size());
  CHECK(frame.payloads[1].size() == 0);
  CHECK(matchesPattern(frame.payloads[2].bytes(), 2));
  const fake::DeviceStats stats = net.fabric->stats("fake0");
  const std::size_t metaOverflow = 8 + 3 * 8 + header.size() - 256;
  CHECK(stats.writes ==
        protocol::chunkCount(metaOverflow, 4096) + protocol::chunkCount(large.size(), 4096) + 1);
  CHECK(stats.largestWrite == 4096);
  CHECK(stats.frameSends == 1);
  CHECK(net.la->bytesSent() >= large.size() + header.size());
  CHECK(net.lb->bytesReceived() == net.la->bytesSent());
  CHECK(net.fabric->violations().empty());
}

TEST_CASE("net ibverbs: both ends sending and holding at once make progress (credit deadlock)") {
  Watchdog watchdog(60s);
  Options options = smallOptions();
  options.slotCount = 2;
  options.headerDepth = 1;
  FakeNet net(options, options);
  static constexpr std::uint64_t kFrames = 300;
  auto pump = [](Link* link, std::uint64_t seed) -> asio::awaitable<std::error_code> {
    std::vector<std::byte> payload(5000);
    for (std::uint64_t i = 0; i < kFrames; ++i) {
      fillPattern(payload, seed + i);
      const std::vector<std::byte> header = headerOf({i});
      if (auto ec = co_await link->send(
              frameOf(header, i % 3 == 0 ? std::span(payload).first(0) : std::span(payload))))
        co_return ec;
    }
    co_return std::error_code{};
  };
  auto drain = [](Link* link) -> asio::awaitable<std::uint64_t> {
    InFrame frame;
    for (std::uint64_t i = 0; i < kFrames; ++i) {
      if (co_await link->receive(frame) || headerField(frame.header, 0) != i) co_return i;
    }
    co_return kFrames;
  };
  auto sendA = asio::co_spawn(net.a.io(), pump(net.la, 1000), asio::use_future);
  auto sendB = asio::co_spawn(net.b.io(), pump(net.lb, 2000), asio::use_future);
  auto receiveA = asio::co_spawn(net.a.io(), drain(net.la), asio::use_future);
  auto receiveB = asio::co_spawn(net.b.io(), drain(net.lb), asio::use_future);
  CHECK(!sendA.get());
  CHECK(!sendB.get());
  CHECK(receiveA.get() == kFrames);
  CHECK(receiveB.get() == kFrames);
  CHECK(net.fabric->violations().empty());
}

TEST_CASE("net ibverbs: failed work completions close the link with an error code") {
  Watchdog watchdog(30s);
  struct Case {
    WcStatus status;
    std::error_code expected;
  };
  for (const Case& c : {Case{WcStatus::kRetryExceeded, asio::error::connection_reset},
                        Case{WcStatus::kRemoteAccessError, Errc::rdmaAccessError},
                        Case{WcStatus::kLocalProtectionError, Errc::rdmaAccessError},
                        Case{WcStatus::kOther, Errc::rdmaFailure}}) {
    CAPTURE(statusName(c.status));
    FakeNet net;
    net.fabric->failNextSend("fake0", c.status);
    const std::vector<std::byte> header = headerOf({1});
    const std::vector<std::byte> payload = patternBytes(1000, 1);
    const std::error_code sent = net.send(net.a, net.la, frameOf(header, payload));
    CHECK_MESSAGE(sent == c.expected, describe(sent));
    // The link stays closed with that error; the remote sees the disconnect.
    CHECK(net.send(net.a, net.la, frameOf(header)) == c.expected);
    auto [remote, unused] = net.receive(net.b, net.lb).get();
    CHECK_MESSAGE(isDisconnect(remote), describe(remote));
  }
}

TEST_CASE("net ibverbs: a peer whose device stops answering is a disconnect on both ends") {
  Watchdog watchdog(30s);
  FakeNet net;
  net.fabric->breakDevice("fake1");  // b's QPs go to the error state and stop answering
  const std::vector<std::byte> header = headerOf({1});
  // a's send fails: after its retries (connection_reset), or sooner when b, which saw its QP
  // fail, closed the link first (broken_pipe).
  const std::error_code sent = net.send(net.a, net.la, frameOf(header));
  CHECK_MESSAGE(isDisconnect(sent), describe(sent));
  auto [ec, unused] = net.receive(net.b, net.lb).get();
  CHECK_MESSAGE(ec == make_error_code(Errc::rdmaFailure), describe(ec));
  auto [other, unused2] = net.receive(net.a, net.la).get();
  CHECK_MESSAGE(isDisconnect(other), describe(other));
}

TEST_CASE("net ibverbs: a receiver gets the frames sent before its peer closed, then eof") {
  Watchdog watchdog(30s);
  FakeNet net(smallOptions(), smallOptions());
  constexpr std::uint64_t kFrames = 3;
  for (std::uint64_t i = 0; i < kFrames; ++i) {
    const std::vector<std::byte> header = headerOf({i});
    const std::vector<std::byte> payload = patternBytes(2000, i);
    REQUIRE(!net.send(net.a, net.la, frameOf(header, payload)));
  }
  net.a.call([&] {
    net.a.links.clear();  // dropping the link closes it
    net.a.transport.reset();
  });
  for (std::uint64_t i = 0; i < kFrames; ++i) {
    auto [ec, frame] = net.receive(net.b, net.lb).get();
    REQUIRE_MESSAGE(!ec, describe(ec));
    CHECK(headerField(frame.header, 0) == i);
    CHECK(matchesPattern(frame.payloads.at(0).bytes(), i));
  }
  auto [end, unused] = net.receive(net.b, net.lb).get();
  CHECK_MESSAGE(end == asio::error::eof, describe(end));
  const std::vector<std::byte> header = headerOf({9});
  CHECK(net.send(net.b, net.lb, frameOf(header)) == asio::error::eof);  // closed with eof
}

TEST_CASE("net ibverbs: busy polling and RoCE (GID) addressing carry frames too") {
  Watchdog watchdog(30s);
  Options options = smallOptions();
  options.busyPoll = true;
  HostOptions roce;
  roce.linkLayer = LinkLayer::kEthernet;
  roce.activeMtu = 1024;
  FakeNet net(options, smallOptions(), roce, roce);
  constexpr std::uint64_t kFrames = 200;
  auto received = net.b.spawn([&]() -> asio::awaitable<std::uint64_t> {
    InFrame frame;
    for (std::uint64_t i = 0; i < kFrames; ++i) {
      if (co_await net.lb->receive(frame) || !matchesPattern(frame.payloads.at(0).bytes(), i))
        co_return i;
    }
    co_return kFrames;
  });
  const std::uint64_t sent = net.a.run([&]() -> asio::awaitable<std::uint64_t> {
    for (std::uint64_t i = 0; i < kFrames; ++i) {
      const std::vector<std::byte> header = headerOf({i});
      const std::vector<std::byte> payload = patternBytes(9000, i);
      if (co_await net.la->send(frameOf(header, payload))) co_return i;
    }
    co_return kFrames;
  });
  CHECK(sent == kFrames);
  CHECK(received.get() == kFrames);
  CHECK(net.fabric->violations().empty());
}

TEST_CASE(
    "net ibverbs: registered memory is written in place, device memory staged or registered") {
  Watchdog watchdog(30s);
  // "Device memory": a host buffer the callbacks call device memory, copies counted.
  std::vector<std::byte> deviceBuffer(64 * 1024);
  const std::byte* deviceBegin = deviceBuffer.data();
  auto isDevice = [deviceBegin](const void* p) {
    const auto* b = static_cast<const std::byte*>(p);
    return b >= deviceBegin && b < deviceBegin + 64 * 1024;
  };
  std::atomic<std::size_t> toHost{0};
  std::atomic<std::size_t> toDevice{0};
  Options options = smallOptions();
  options.deviceMemory.isDevice = isDevice;
  options.deviceMemory.copyToHost = [&](void* dst, const void* src, std::size_t n) {
    toHost += n;
    std::memcpy(dst, src, n);
  };
  options.deviceMemory.copyToDevice = [&](void* dst, const void* src, std::size_t n) {
    toDevice += n;
    std::memcpy(dst, src, n);
  };

  for (const bool gpuDirect : {false, true}) {
    CAPTURE(gpuDirect);
    toHost = 0;
    toDevice = 0;
    HostOptions host;
    host.isDeviceMemory = isDevice;
    host.peerMemory = gpuDirect;
    FakeNet net(options, options, host, host);
    std::vector<std::byte> params = patternBytes(20'000, 5);  // host memory, registered
    fillPattern(std::span(deviceBuffer).first(20'000), 6);
    net.a.call([&] {
      net.a.transport->registerMemory(params);
      net.a.transport->registerMemory(std::span(deviceBuffer));
    });
    std::vector<std::byte> landing(20'000);
    net.b.call([&] {
      net.lb->setPayloadTarget(
          [&](std::span<const std::byte>, std::size_t index, std::size_t size) {
            // Payload 1 lands in "device memory" on the receiver (the upper half of the buffer).
            return index == 1 ? std::span(deviceBuffer).subspan(32 * 1024, size)
                              : std::span<std::byte>(landing).first(size);
          });
    });
    const std::vector<std::byte> header = headerOf({1});
    auto received = net.receive(net.b, net.lb);
    const OutFrame frame{header, {params, std::span(deviceBuffer).first(20'000)}};
    const std::error_code sent = net.send(net.a, net.la, frame);
    CHECK_MESSAGE(!sent, describe(sent));
    auto [ec, in] = received.get();
    REQUIRE_MESSAGE(!ec, describe(ec));
    CHECK(matchesPattern(landing, 5));
    CHECK(matchesPattern(std::span(deviceBuffer).subspan(32 * 1024, 20'000), 6));
    // Staged device memory is copied to the host once; GPUDirect writes it in place.
    CHECK(toHost == (gpuDirect ? 0 : 20'000));
    CHECK(toDevice == 20'000);  // the receive side always copies out of its slots
  }
}

}  // namespace
}  // namespace gossamer::net::ibverbs

#endif  // GOSSAMER_HAVE_IBVERBS
