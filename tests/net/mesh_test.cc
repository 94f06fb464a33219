// net::Mesh: authenticated links on demand, envelope delivery with payload targets, identity of
// senders, ordering, refusal of wrong secrets and of malformed frames (over inproc and tcp).
#include "net/mesh/mesh.h"

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/post.hpp>
#include <asio/use_awaitable.hpp>
#include <doctest/doctest.h>

#include "net/errors.h"
#include "net/inproc/inproc_transport.h"
#include "net/tcp/tcp_transport.h"
#include "net/wire/handshake.h"
#include "tests/support/io_thread.h"
#include "tests/support/watchdog.h"

namespace gossamer::net {
namespace {

using namespace std::chrono_literals;
using test::waitUntil;
using test::Watchdog;

std::vector<std::byte> bytesOf(const std::string& text) {
  std::vector<std::byte> out;
  for (char c : text) out.push_back(static_cast<std::byte>(c));
  return out;
}

struct Received {
  Remote from;
  wire::EnvelopeHeader header;
  std::vector<std::vector<std::byte>> payloads;
};

// A peer with a mesh that records every envelope and membership message it receives.
class MeshPeer {
 public:
  MeshPeer(bool inproc, std::shared_ptr<inproc::Hub> hub, std::uint64_t id,
           const std::string& secret = "s3cret", Endpoint advertise = {}) {
    io_.call([&] {
      transport_ = inproc ? inproc::makeTransport(io_.io(), hub) : tcp::makeTransport(io_.io());
      MeshOptions options;
      options.handshake.clusterId = "mesh-test";
      options.handshake.peerId = id;
      options.handshake.secret = bytesOf(secret);
      options.handshake.identity = wire::Identity::generate();
      options.handshake.timeout = 2s;
      options.advertise = advertise;
      mesh_ = std::make_unique<Mesh>(io_.io(), *transport_, options);
      mesh_->onEnvelope(
          [this](const Remote& from, wire::EnvelopeHeader header, std::vector<Payload> payloads) {
            Received r{from, std::move(header), {}};
            for (const Payload& p : payloads)
              r.payloads.emplace_back(p.bytes().begin(), p.bytes().end());
            std::lock_guard lock(mutex_);
            envelopes_.push_back(std::move(r));
          });
      mesh_->onMembership([this](const Remote&, wire::MembershipMessage) { ++memberships_; });
      REQUIRE(!mesh_->listen(Endpoint{inproc ? "inproc" : "127.0.0.1", 0}));
      endpoint_ = mesh_->localEndpoint();
    });
  }
  ~MeshPeer() {
    io_.call([this] {
      mesh_.reset();
      transport_.reset();
    });
  }

  std::error_code sendEnvelope(const Endpoint& to, Channel channel, wire::EnvelopeHeader header,
                               std::vector<std::vector<std::byte>> payloads) {
    return io_.run([&]() -> asio::awaitable<std::error_code> {
      std::vector<std::span<const std::byte>> spans(payloads.begin(), payloads.end());
      co_return co_await mesh_->sendEnvelope(to, channel, header, std::move(spans), 2s);
    });
  }

  LinkOutcome open(const Endpoint& to, Channel channel) {
    return io_.run(
        [&]() -> asio::awaitable<LinkOutcome> { co_return co_await mesh_->open(to, channel, 2s); });
  }

  std::vector<Received> envelopes() {
    std::lock_guard lock(mutex_);
    return envelopes_;
  }

  test::IoThread io_;
  std::unique_ptr<Transport> transport_;
  std::unique_ptr<Mesh> mesh_;
  Endpoint endpoint_;
  std::mutex mutex_;
  std::vector<Received> envelopes_;
  std::atomic<int> memberships_{0};
};

void checkDelivery(bool inproc) {
  Watchdog watchdog(30s);
  auto hub = inproc::makeHub();
  MeshPeer a(inproc, hub, 11), b(inproc, hub, 22);
  // b's target takes payload 0 into its own buffer; payload 1 goes to the pool.
  std::vector<std::byte> landing(5);
  auto released = std::make_shared<std::atomic<int>>(0);
  b.io_.call([&] {
    b.mesh_->setEnvelopeTarget([&, released](const Remote& from, const wire::EnvelopeHeader& header,
                                             std::size_t index, std::size_t size) {
      if (index != 0 || from.peerId != 11 || header.kind != 7) return Payload{};
      return Payload(std::span<std::byte>(landing).first(size),
                     std::shared_ptr<void>(nullptr, [released](void*) { ++*released; }));
    });
  });
  wire::EnvelopeHeader header;
  header.tag = 99;
  header.kind = 7;
  header.sender = 11;
  header.step = 5;
  header.scalars = {0.25, -2};
  REQUIRE(!a.sendEnvelope(b.endpoint_, Channel::data, header, {bytesOf("hello"), bytesOf("pool")}));
  REQUIRE(waitUntil(5s, [&] { return b.envelopes().size() == 1; }));
  const Received r = b.envelopes()[0];
  CHECK(r.from.peerId == 11);
  CHECK(r.from.listen == a.endpoint_);
  CHECK(r.header.tag == 99);
  CHECK(r.header.step == 5);
  CHECK(r.header.scalars == std::vector<double>{0.25, -2});
  REQUIRE(r.header.payloads.size() == 2);
  CHECK(r.header.payloads[0].size == 5);
  CHECK(r.payloads[0] == bytesOf("hello"));
  CHECK(r.payloads[1] == bytesOf("pool"));
  CHECK(landing == bytesOf("hello"));                    // it landed in place
  CHECK(waitUntil(2s, [&] { return *released == 1; }));  // and the owner was let go

  // Replies on another channel travel on b's own link to a; many frames keep their order.
  for (int i = 0; i < 200; ++i) {
    wire::EnvelopeHeader h;
    h.tag = static_cast<std::uint64_t>(i);
    REQUIRE(!b.sendEnvelope(a.endpoint_, Channel::control, h, {}));
  }
  REQUIRE(waitUntil(5s, [&] { return a.envelopes().size() == 200; }));
  const auto got = a.envelopes();
  for (int i = 0; i < 200; ++i)
    CHECK(got[static_cast<std::size_t>(i)].header.tag == static_cast<std::uint64_t>(i));
  CHECK(got[0].from.peerId == 22);

  const TrafficCounters sent = a.mesh_->counters(Traffic::algorithm);
  CHECK(sent.framesSent == 1);
  CHECK(sent.framesReceived == 200);
  CHECK(sent.bytesSent > 9);
  CHECK(a.mesh_->counters(Traffic::membership).framesSent == 0);

  // Envelopes of the runtime route are counted apart from the algorithm's, on both sides; one
  // encoded header serves several sends.
  wire::EnvelopeHeader control;
  control.route = wire::Route::runtime;
  control.control = bytesOf("status");
  const auto encoded = EncodedEnvelope::of(control);
  CHECK(encoded->traffic == Traffic::runtime);
  for (int i = 0; i < 2; ++i) {
    REQUIRE(!a.io_.run([&]() -> asio::awaitable<std::error_code> {
      std::vector<std::span<const std::byte>> none;
      co_return co_await a.mesh_->sendEnvelope(b.endpoint_, Channel::control, encoded,
                                               std::move(none), 2s);
    }));
  }
  REQUIRE(waitUntil(5s, [&] { return b.envelopes().size() == 3; }));
  CHECK(b.envelopes()[2].header.control == bytesOf("status"));
  CHECK(a.mesh_->counters(Traffic::runtime).framesSent == 2);
  CHECK(a.mesh_->counters(Traffic::runtime).bytesSent == 2 * encoded->bytes.size());
  CHECK(b.mesh_->counters(Traffic::runtime).framesReceived == 2);
  CHECK(b.mesh_->counters(Traffic::algorithm).framesReceived == 1);
  CHECK(a.mesh_->counters(Traffic::algorithm).framesSent == 1);
}

TEST_CASE(
    "mesh: envelopes arrive with the sender's identity, in order, payloads in place (inproc)") {
  checkDelivery(true);
}

TEST_CASE("mesh: envelopes arrive with the sender's identity, in order, payloads in place (tcp)") {
  checkDelivery(false);
}

// Sends started one per turn of the io loop while the link opens: the ones that waited for it
// and the ones that came once it was open must reach the link in the order they started.
void checkOrderWhileOpening(bool inproc) {
  Watchdog watchdog(30s);
  auto hub = inproc::makeHub();
  MeshPeer a(inproc, hub, 1), b(inproc, hub, 2);
  constexpr int kFrames = 300;
  auto failures = std::make_shared<std::atomic<int>>(0);
  a.io_.run([&]() -> asio::awaitable<void> {
    const auto executor = co_await asio::this_coro::executor;
    for (int i = 0; i < kFrames; ++i) {
      wire::EnvelopeHeader header;
      header.tag = static_cast<std::uint64_t>(i);
      asio::co_spawn(
          executor,
          [&a, header, failures, to = b.endpoint_]() -> asio::awaitable<void> {
            std::vector<std::span<const std::byte>> none;
            if (co_await a.mesh_->sendEnvelope(to, Channel::data, header, std::move(none), 5s))
              ++*failures;
          },
          asio::detached);
      co_await asio::post(executor, asio::use_awaitable);  // the next send starts a turn later
    }
  });
  REQUIRE(waitUntil(10s, [&] { return b.envelopes().size() == kFrames; }));
  CHECK(*failures == 0);
  const auto got = b.envelopes();
  int outOfOrder = 0;
  for (int i = 0; i < kFrames; ++i)
    if (got[static_cast<std::size_t>(i)].header.tag != static_cast<std::uint64_t>(i)) ++outOfOrder;
  CHECK(outOfOrder == 0);
}

TEST_CASE("mesh: frames keep their order while the link opens (inproc)") {
  checkOrderWhileOpening(true);
}

TEST_CASE("mesh: frames keep their order while the link opens (tcp)") {
  checkOrderWhileOpening(false);
}

TEST_CASE("mesh: a peer with the wrong secret cannot send") {
  Watchdog watchdog(30s);
  auto hub = inproc::makeHub();
  MeshPeer a(false, hub, 1, "right"), intruder(false, hub, 2, "wrong");
  const std::error_code error =
      intruder.sendEnvelope(a.endpoint_, Channel::data, {}, {bytesOf("x")});
  CHECK(error == make_error_code(Errc::authenticationFailed));
  std::this_thread::sleep_for(100ms);
  CHECK(a.envelopes().empty());
}

TEST_CASE("mesh: open says why a link cannot open, and an open link serves the next send") {
  Watchdog watchdog(30s);
  auto hub = inproc::makeHub();
  MeshPeer a(false, hub, 1, "right"), b(false, hub, 2, "right"), intruder(false, hub, 3, "wrong");
  // Another secret: the handshake's error and its reason, which side's proof failed.
  const LinkOutcome refused = intruder.open(a.endpoint_, Channel::control);
  CHECK(refused.error == make_error_code(Errc::authenticationFailed));
  CHECK(refused.reason.find("HMAC") != std::string::npos);
  // Nobody listening: the connect error, no handshake reason.
  const LinkOutcome nobody = b.open(Endpoint{"127.0.0.1", 1}, Channel::control);
  CHECK(nobody.error == asio::error::timed_out);
  CHECK(nobody.reason.empty());
  // The same secret: open, and the send after it goes out on that link.
  const LinkOutcome opened = b.open(a.endpoint_, Channel::data);
  CHECK(opened.ok());
  CHECK(opened.reason.empty());
  CHECK(!b.sendEnvelope(a.endpoint_, Channel::data, {}, {bytesOf("x")}));
  CHECK(waitUntil(10s, [&] { return a.envelopes().size() == 1; }));
}

TEST_CASE("mesh: a malformed header after the handshake closes only that link") {
  Watchdog watchdog(30s);
  auto hub = inproc::makeHub();
  MeshPeer a(false, hub, 1), b(false, hub, 2);
  // A hand-driven client: connect, authenticate, then send bytes that are not a header.
  test::IoThread io;
  auto transport = io.call([&] { return tcp::makeTransport(io.io()); });
  const std::error_code sent = io.run([&]() -> asio::awaitable<std::error_code> {
    LinkResult link = co_await transport->connect(a.endpoint_, 2s);
    if (link.error) co_return link.error;
    wire::HandshakeConfig config;
    config.clusterId = "mesh-test";
    config.peerId = 3;
    config.secret = bytesOf("s3cret");
    config.identity = wire::Identity::generate();
    const wire::HandshakeResult hello = co_await wire::clientHandshake(*link.link, config);
    if (!hello.ok()) co_return hello.error;
    const std::vector<std::byte> garbage(24, std::byte{0x7f});
    const std::error_code error = co_await link.link->send(OutFrame(garbage));
    InFrame frame;
    const std::error_code closed = co_await link.link->receive(frame);  // a closes the link
    co_return error ? error
                    : (closed ? std::error_code{} : make_error_code(Errc::unexpectedMessage));
  });
  CHECK(!sent);
  CHECK(a.envelopes().empty());
  // a still talks to well-behaved peers.
  REQUIRE(!b.sendEnvelope(a.endpoint_, Channel::data, {}, {bytesOf("ok")}));
  CHECK(waitUntil(5s, [&] { return a.envelopes().size() == 1; }));
  io.call([&] { transport.reset(); });
}

TEST_CASE("mesh: disconnect drops the links and the next send reconnects") {
  Watchdog watchdog(30s);
  auto hub = inproc::makeHub();
  MeshPeer a(true, hub, 1), b(true, hub, 2);
  REQUIRE(!a.sendEnvelope(b.endpoint_, Channel::data, {}, {}));
  a.io_.call([&] { a.mesh_->disconnect(b.endpoint_); });
  REQUIRE(!a.sendEnvelope(b.endpoint_, Channel::data, {}, {}));
  CHECK(waitUntil(5s, [&] { return b.envelopes().size() == 2; }));
  // Sending to nobody fails within the connect timeout.
  const std::error_code error = a.sendEnvelope(Endpoint{"inproc", 65000}, Channel::data, {}, {});
  CHECK(error);
}

// A link, once open, carries traffic both ways. b advertises an address nobody can dial (a port
// nothing listens on): a cannot open a link to it, but once b opened its own link to a for a
// channel, a's sends to b on that channel ride it, in order; on the other channel a still cannot
// reach b.
TEST_CASE("mesh: a peer that cannot be dialed is reached on the link it opened") {
  Watchdog watchdog(30s);
  MeshPeer a(false, nullptr, 1);
  const Endpoint nowhere{"127.0.0.1", 1};
  MeshPeer b(false, nullptr, 2, "s3cret", nowhere);
  CHECK(b.endpoint_ == nowhere);
  wire::EnvelopeHeader hello;
  hello.tag = 1000;
  CHECK(a.sendEnvelope(nowhere, Channel::control, hello, {}));  // nobody listens there
  REQUIRE(!b.sendEnvelope(a.endpoint_, Channel::control, hello, {}));
  REQUIRE(waitUntil(5s, [&] { return a.envelopes().size() == 1; }));
  CHECK(a.envelopes()[0].from.listen == nowhere);
  CHECK(a.io_.call([&] { return a.mesh_->hasOpenLink(nowhere, Channel::control); }));
  for (int i = 0; i < 100; ++i) {
    wire::EnvelopeHeader h;
    h.tag = static_cast<std::uint64_t>(i);
    REQUIRE(!a.sendEnvelope(nowhere, Channel::control, h, {bytesOf("both ways")}));
  }
  REQUIRE(waitUntil(5s, [&] { return b.envelopes().size() == 100; }));
  const auto got = b.envelopes();
  for (int i = 0; i < 100; ++i) {
    CHECK(got[static_cast<std::size_t>(i)].header.tag == static_cast<std::uint64_t>(i));
    CHECK(got[static_cast<std::size_t>(i)].from.peerId == 1);
  }
  CHECK(a.sendEnvelope(nowhere, Channel::data, hello, {}));  // b opened no data link
  CHECK_FALSE(a.io_.call([&] { return a.mesh_->hasOpenLink(nowhere, Channel::data); }));
}

// Connection reversal: b cannot be dialed; a's reverser says so and has b open the link a
// needs (as net/membership would ask it to). a never dials b; its send rides b's new link. When
// the asked link never comes, the send fails at its timeout and the next one asks again.
TEST_CASE("mesh: a link to a peer that cannot be dialed is opened by that peer on request") {
  Watchdog watchdog(30s);
  MeshPeer a(false, nullptr, 1);
  const Endpoint nowhere{"127.0.0.1", 1};
  MeshPeer b(false, nullptr, 2, "s3cret", nowhere);
  std::atomic<int> asked{0};
  std::atomic<bool> obliging{true};
  a.io_.call([&] {
    a.mesh_->setReverser([&](const Endpoint& to, Channel channel) {
      if (to != nowhere) return false;
      ++asked;
      if (obliging)
        asio::post(b.io_.io(), [&b, at = a.endpoint_, channel] {
          asio::co_spawn(b.io_.io(), b.mesh_->open(at, channel, 2s), asio::detached);
        });
      return true;
    });
  });
  wire::EnvelopeHeader hello;
  hello.tag = 7;
  REQUIRE(!a.sendEnvelope(nowhere, Channel::data, hello, {bytesOf("reversed")}));
  REQUIRE(waitUntil(5s, [&] { return b.envelopes().size() == 1; }));
  CHECK(b.envelopes()[0].payloads[0] == bytesOf("reversed"));
  CHECK(asked == 1);
  CHECK(a.mesh_->linksReversed() == 1);
  REQUIRE(!a.sendEnvelope(nowhere, Channel::data, hello, {}));  // the link serves on
  CHECK(asked == 1);

  obliging = false;
  const auto start = std::chrono::steady_clock::now();
  const std::error_code error = a.sendEnvelope(nowhere, Channel::control, hello, {});
  CHECK(error == asio::error::timed_out);
  CHECK(std::chrono::steady_clock::now() - start >= 1900ms);  // it waited, it did not dial
  CHECK(a.mesh_->reversalsTimedOut() == 1);
  CHECK(a.sendEnvelope(nowhere, Channel::control, hello, {}));
  CHECK(asked == 3);
  CHECK(b.envelopes().size() == 2);
}

// Two peers that cannot be dialed at their advertised addresses (as behind NATs), for hole
// punching; a has the lower id, so it leads.
struct PunchPair {
  const Endpoint aAdvertised{"127.0.0.1", 2}, bAdvertised{"127.0.0.1", 1};
  MeshPeer a{false, nullptr, 1, "s3cret", aAdvertised};
  MeshPeer b{false, nullptr, 2, "s3cret", bAdvertised};
  const Endpoint aReal = a.io_.call([&] { return a.transport_->localEndpoint(); });
  const Endpoint bReal = b.io_.call([&] { return b.transport_->localEndpoint(); });
};

// Hole punching (Mesh::punch): both connect at once (as net/membership has them do when a
// rendezvous introduces them). a's send waits for the link instead of dialing; the link carries
// frames both ways, and both channels.
TEST_CASE("mesh: two peers that cannot be dialed open a link by hole punching") {
  Watchdog watchdog(30s);
  PunchPair pair;
  auto& [aAdvertised, bAdvertised, a, b, aReal, bReal] = pair;
  std::atomic<int> asked{0};
  a.io_.call([&] {
    a.mesh_->setReverser([&](const Endpoint& to, Channel channel) {
      if (to != bAdvertised) return false;
      ++asked;
      asio::co_spawn(a.io_.io(), a.mesh_->punch(bAdvertised, 2, bReal, channel, true, 3s),
                     asio::detached);
      asio::post(b.io_.io(), [&, channel] {
        asio::co_spawn(b.io_.io(), b.mesh_->punch(aAdvertised, 1, aReal, channel, false, 3s),
                       asio::detached);
      });
      return true;
    });
  });
  wire::EnvelopeHeader hello;
  hello.tag = 7;
  REQUIRE(!a.sendEnvelope(bAdvertised, Channel::data, hello, {bytesOf("punched")}));
  REQUIRE(waitUntil(5s, [&] { return b.envelopes().size() == 1; }));
  CHECK(b.envelopes()[0].payloads[0] == bytesOf("punched"));
  CHECK(b.envelopes()[0].from.peerId == 1);
  hello.tag = 8;
  REQUIRE(!b.sendEnvelope(aAdvertised, Channel::data, hello, {bytesOf("back")}));
  REQUIRE(waitUntil(5s, [&] { return a.envelopes().size() == 1; }));
  CHECK(a.envelopes()[0].from.peerId == 2);
  // The control channel rides the same link, both ways: nothing more is asked or punched.
  REQUIRE(!a.sendEnvelope(bAdvertised, Channel::control, hello, {}));
  REQUIRE(!b.sendEnvelope(aAdvertised, Channel::control, hello, {}));
  REQUIRE(waitUntil(5s, [&] { return a.envelopes().size() == 2 && b.envelopes().size() == 2; }));
  CHECK(asked == 1);
  CHECK(a.mesh_->linksPunched() == 1);
  CHECK(waitUntil(5s, [&] { return b.mesh_->linksPunched() == 1; }));
  CHECK(a.io_.call([&] { return a.mesh_->hasOpenLink(bAdvertised, Channel::control); }));
}

// On loopback the lead's connect reaches the follower's listener; when the follower's punch is
// not waiting there yet, its handshake server takes the connection, and the punch, once it runs,
// ends with that link as the pair's: it carries both channels both ways.
TEST_CASE("mesh: a punch whose lead's connection the handshake server took opens the pair link") {
  Watchdog watchdog(30s);
  PunchPair pair;
  auto& [aAdvertised, bAdvertised, a, b, aReal, bReal] = pair;
  auto ours = a.io_.spawn(
      [&] { return a.mesh_->punch(bAdvertised, 2, bReal, Channel::data, true, 3s); });
  REQUIRE(ours.get().ok());  // b's handshake server answered
  const LinkOutcome theirs = b.io_.run(
      [&] { return b.mesh_->punch(aAdvertised, 1, aReal, Channel::data, false, 3s); });
  REQUIRE(theirs.ok());
  CHECK(theirs.remote.peerId == 1);
  wire::EnvelopeHeader hello;
  REQUIRE(!b.sendEnvelope(aAdvertised, Channel::control, hello, {}));
  REQUIRE(!b.sendEnvelope(aAdvertised, Channel::data, hello, {}));
  REQUIRE(!a.sendEnvelope(bAdvertised, Channel::control, hello, {}));
  REQUIRE(waitUntil(5s, [&] { return a.envelopes().size() == 2 && b.envelopes().size() == 1; }));
  CHECK(a.mesh_->linksPunched() == 1);
  CHECK(b.mesh_->linksPunched() == 1);
}

// The peer that answers a punch must be the one expected (id and advertised address).
TEST_CASE("mesh: a punch answered by another peer opens no link") {
  Watchdog watchdog(30s);
  PunchPair pair;
  auto& [aAdvertised, bAdvertised, a, b, aReal, bReal] = pair;
  auto theirs = b.io_.spawn(
      [&] { return b.mesh_->punch(aAdvertised, 1, aReal, Channel::data, false, 3s); });
  const LinkOutcome ours =
      a.io_.run([&] { return a.mesh_->punch(bAdvertised, 9, bReal, Channel::data, true, 3s); });
  CHECK(ours.error == Errc::identityMismatch);
  CHECK(ours.reason.find("not 0000000000000009") != std::string::npos);
  theirs.get();
  CHECK_FALSE(a.io_.call([&] { return a.mesh_->hasOpenLink(bAdvertised, Channel::data); }));
  CHECK(a.mesh_->linksPunched() == 0);
}

}  // namespace
}  // namespace gossamer::net
