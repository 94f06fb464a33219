// Relayed links (net/relay, Mesh::relay): two peers that cannot reach each other talk through a
// third over TLS between their own identity keys. The relay forwards what it cannot read; it
// refuses when relaying is off; a member posing as another through a relay is refused; when the
// relay goes, the link goes, and another relay carries the pair.
#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include "net/errors.h"
#include "net/mesh/mesh.h"
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

struct Got {
  Remote from;
  std::uint64_t tag = 0;
  std::vector<std::byte> payload;
};

// A peer on loopback tcp with its own identity and identity book, recording the envelopes it
// receives.
class RelayPeer {
 public:
  explicit RelayPeer(std::uint64_t id, relay::RelayOptions relayOptions = {},
                     std::shared_ptr<const wire::Identity> identity = wire::Identity::generate())
      : identity_(std::move(identity)) {
    io_.call([&] {
      transport_ = tcp::makeTransport(io_.io());
      MeshOptions options;
      options.handshake.clusterId = "relay-test";
      options.handshake.peerId = id;
      options.handshake.secret = bytesOf("s3cret");
      options.handshake.identity = identity_;
      options.handshake.book = std::make_shared<wire::IdentityBook>();
      options.handshake.timeout = 3s;
      options.relay = relayOptions;
      mesh_ = std::make_unique<Mesh>(io_.io(), *transport_, options);
      mesh_->onEnvelope(
          [this](const Remote& from, wire::EnvelopeHeader header, std::vector<Payload> payloads) {
            Got got{from, header.tag, {}};
            if (!payloads.empty())
              got.payload.assign(payloads[0].bytes().begin(), payloads[0].bytes().end());
            std::lock_guard lock(mutex_);
            got_.push_back(std::move(got));
          });
      REQUIRE(!mesh_->listen(Endpoint{"127.0.0.1", 0}));
      endpoint_ = mesh_->localEndpoint();
    });
  }
  ~RelayPeer() { stop(); }

  void stop() {
    io_.call([this] {
      mesh_.reset();
      transport_.reset();
    });
  }

  // What a member record would tell it: `other`'s identity key.
  void knows(const RelayPeer& other, std::uint64_t id) {
    mesh_->identityBook()->bind(id, other.identity_->publicKey());
  }

  // This peer's own links to `to` for both channels (a dial-out-only peer's links to a relay).
  void linkTo(const RelayPeer& to) {
    for (Channel channel : {Channel::control, Channel::data}) {
      const LinkOutcome outcome = io_.run([&]() -> asio::awaitable<LinkOutcome> {
        co_return co_await mesh_->open(to.endpoint_, channel, 3s);
      });
      REQUIRE(outcome.ok());
    }
  }

  LinkOutcome relay(const RelayPeer& via, const RelayPeer& to, std::uint64_t expected) {
    return io_.run([&]() -> asio::awaitable<LinkOutcome> {
      co_return co_await mesh_->relay(via.endpoint_, to.endpoint_, expected, Channel::data, 3s);
    });
  }

  std::error_code send(const RelayPeer& to, std::uint64_t tag, std::vector<std::byte> payload,
                       std::chrono::milliseconds timeout = 3s) {
    return io_.run([&]() -> asio::awaitable<std::error_code> {
      wire::EnvelopeHeader header;
      header.tag = tag;
      std::vector<std::span<const std::byte>> spans{payload};
      co_return co_await mesh_->sendEnvelope(to.endpoint_, Channel::data, header, std::move(spans),
                                             timeout);
    });
  }

  bool linked(const RelayPeer& to) {
    return io_.call([&] { return mesh_->hasOpenLink(to.endpoint_, Channel::data); });
  }

  std::vector<Got> got() {
    std::lock_guard lock(mutex_);
    return got_;
  }

  test::IoThread io_;
  std::shared_ptr<const wire::Identity> identity_;
  std::unique_ptr<Transport> transport_;
  std::unique_ptr<Mesh> mesh_;
  Endpoint endpoint_;
  std::mutex mutex_;
  std::vector<Got> got_;
};

// a (1) and b (3) reach only r (2): each opened its links to r, as dial-out-only peers do.
struct Triangle {
  RelayPeer a{1}, r{2}, b{3};
  Triangle() {
    a.linkTo(r);
    b.linkTo(r);
    a.knows(b, 3);
    b.knows(a, 1);
  }
};

TEST_CASE("relay: two peers that reach only a third talk through it, both ways") {
  Watchdog watchdog(60s);
  Triangle t;
  const LinkOutcome opened = t.a.relay(t.r, t.b, 3);
  REQUIRE_MESSAGE(opened.ok(), opened.error.message(), ": ", opened.reason);
  CHECK(opened.remote.peerId == 3);
  CHECK(opened.remote.observed == "relayed by " + t.r.endpoint_.str());
  // A bulk frame (many chunks of ciphertext) and a small one, in order, and a reply.
  std::vector<std::byte> bulk(5 << 20);
  for (std::size_t i = 0; i < bulk.size(); ++i) bulk[i] = static_cast<std::byte>(i * 131 % 251);
  REQUIRE(!t.a.send(t.b, 1, bulk));
  REQUIRE(!t.a.send(t.b, 2, bytesOf("after")));
  REQUIRE(waitUntil(10s, [&] { return t.b.got().size() == 2; }));
  CHECK(t.b.got()[0].tag == 1);
  CHECK(t.b.got()[0].payload == bulk);
  CHECK(t.b.got()[1].payload == bytesOf("after"));
  CHECK(t.b.got()[0].from.peerId == 1);
  CHECK(t.b.got()[0].from.listen == t.a.endpoint_);
  REQUIRE(!t.b.send(t.a, 3, bytesOf("back")));
  REQUIRE(waitUntil(5s, [&] { return t.a.got().size() == 1; }));
  CHECK(t.a.got()[0].from.peerId == 3);
  // Nothing reached r's own handlers; it counted what it forwarded, apart.
  CHECK(t.r.got().empty());
  CHECK(t.r.mesh_->streamsRelayed() == 1);
  CHECK(t.r.mesh_->bytesRelayed() > bulk.size());
  CHECK(t.r.mesh_->counters(Traffic::relay).bytesReceived > bulk.size());
  CHECK(t.a.mesh_->linksRelayed() == 1);
  CHECK(waitUntil(5s, [&] { return t.b.mesh_->linksRelayed() == 1; }));
  // The relayed link carries the control channel too.
  CHECK(t.a.io_.call([&] { return t.a.mesh_->hasOpenLink(t.b.endpoint_, Channel::control); }));
}

TEST_CASE("relay: a member with --relay off refuses, and says so") {
  Watchdog watchdog(60s);
  RelayPeer a{1}, r{2, relay::RelayOptions{.enabled = false}}, b{3};
  a.linkTo(r);
  b.linkTo(r);
  a.knows(b, 3);
  b.knows(a, 1);
  const LinkOutcome opened = a.relay(r, b, 3);
  CHECK(opened.error == asio::error::connection_refused);
  CHECK(opened.reason.find("--relay off") != std::string::npos);
  CHECK(r.mesh_->streamsRelayed() == 0);
  CHECK(b.mesh_->linksRelayed() == 0);
}

TEST_CASE(
    "relay: a relay that cannot reach the target refuses, and a peer without a key is "
    "not reached") {
  Watchdog watchdog(60s);
  RelayPeer a{1}, r{2}, b{3};
  a.linkTo(r);
  a.knows(b, 3);
  b.stop();  // nobody listens where b did
  const LinkOutcome noLink = a.relay(r, b, 3);
  CHECK(noLink.error == asio::error::connection_refused);
  CHECK(noLink.reason.find("could not reach 0000000000000003") != std::string::npos);
  // a knows no key for 4: nothing is sent.
  const LinkOutcome noKey = a.relay(r, b, 4);
  CHECK(noKey.error == Errc::identityMismatch);
}

TEST_CASE("relay: a member posing as another peer's id through a relay is refused") {
  Watchdog watchdog(60s);
  // b knows a's key (from a's member record); m claims a's id (1) with a key of its own. r has
  // never met a, so m's links to r open; the TLS inside the relayed stream fails at b.
  RelayPeer a{1}, r{2}, b{3};
  b.linkTo(r);
  b.knows(a, 1);
  RelayPeer m{1};
  m.linkTo(r);
  m.knows(b, 3);
  const LinkOutcome posed = m.relay(r, b, 3);
  CHECK_FALSE(posed.ok());
  CHECK(b.mesh_->linksRelayed() == 0);
  CHECK_FALSE(b.linked(a));
  CHECK(b.got().empty());
  // And m cannot ask r to relay in another's name: the relay's open must come from its source.
  CHECK(r.mesh_->streamsRelayed() == 1);  // m's own stream, which b refused
}

TEST_CASE("relay: when the relay goes, the relayed link goes, and another relay carries the pair") {
  Watchdog watchdog(60s);
  Triangle t;
  RelayPeer r2{4};
  t.a.linkTo(r2);
  t.b.linkTo(r2);
  REQUIRE(t.a.relay(t.r, t.b, 3).ok());
  REQUIRE(!t.a.send(t.b, 1, bytesOf("first")));
  REQUIRE(waitUntil(5s, [&] { return t.b.got().size() == 1; }));
  t.r.stop();
  CHECK(waitUntil(10s, [&] { return !t.a.linked(t.b) && !t.b.linked(t.a); }));
  const LinkOutcome again = t.a.relay(r2, t.b, 3);
  REQUIRE_MESSAGE(again.ok(), again.error.message(), ": ", again.reason);
  REQUIRE(!t.a.send(t.b, 2, bytesOf("second")));
  REQUIRE(waitUntil(5s, [&] { return t.b.got().size() == 2; }));
  CHECK(t.b.got()[1].payload == bytesOf("second"));
  CHECK(r2.mesh_->streamsRelayed() == 1);
}

}  // namespace
}  // namespace gossamer::net
