// TLS links of the tcp backend (net/tcp/tls.h) under attack and misconfiguration: what travels
// is ciphertext, a byte altered on the path closes the link and delivers nothing, a replayed
// recording of a connection is refused, a peer with another secret or an untrusted certificate
// is refused on both sides, and a plaintext peer and a TLS peer are each told that the other
// speaks the other language. The conformance suite runs over TLS too
// (transport_conformance_test.cc).
#include <algorithm>
#include <chrono>
#include <cstring>
#include <string>
#include <vector>

#include <asio/ip/tcp.hpp>
#include <asio/write.hpp>
#include <doctest/doctest.h>

#include "net/errors.h"
#include "net/tcp/tcp_transport.h"
#include "net/tcp/tls.h"
#include "tests/net/tls_support.h"
#include "tests/net/transport_conformance.h"
#include "tests/support/io_thread.h"
#include "tests/support/watchdog.h"

namespace gossamer::net {
namespace {

using namespace std::chrono_literals;
using conformance::describe;
using conformance::Peer;

// A peer whose tcp transport uses `tls` (null: plaintext).
void makeTransport(Peer& peer, std::shared_ptr<tcp::TlsContext> tls) {
  peer.transport = peer.call([&] {
    tcp::Options options;
    options.tls = std::move(tls);
    return tcp::makeTransport(peer.io(), options);
  });
}

// Connects `a` to `where` and `b` accepts; returns (a's link, b's link), owned by the peers.
std::pair<Link*, Link*> connectThrough(Peer& a, Peer& b, const Endpoint& where) {
  return conformance::connect(a, b, where);
}

std::error_code sendOn(Peer& peer, Link* link, std::span<const std::byte> header,
                       std::span<const std::byte> payload) {
  return peer.run([&]() -> asio::awaitable<std::error_code> {
    co_return co_await link->send(conformance::frameOf(header, payload));
  });
}

std::error_code receiveOn(Peer& peer, Link* link, InFrame& frame) {
  return peer.run(
      [&]() -> asio::awaitable<std::error_code> { co_return co_await link->receive(frame); });
}

// The outcome of a first frame from a to b on fresh links: (a's send or, when that passed, a's
// receive of b's answer; b's receive).
struct Exchange {
  std::error_code sender;
  std::error_code receiver;
};

Exchange firstFrame(Peer& a, Peer& b, const Endpoint& where) {
  auto [la, lb] = connectThrough(a, b, where);
  const std::vector<std::byte> header = conformance::headerOf({1, 2});
  InFrame got;
  auto received = b.spawn(
      [&, lb = lb]() -> asio::awaitable<std::error_code> { co_return co_await lb->receive(got); });
  Exchange out;
  out.sender = sendOn(a, la, header, {});
  if (!out.sender) {
    InFrame answer;
    out.sender = receiveOn(a, la, answer);  // b never answers: its close is what a reads
  }
  out.receiver = received.get();
  if (!out.receiver) b.call([&, lb = lb] { lb->close(); });
  return out;
}

// Two TLS peers of one secret, b listening at `where`, and a relay (a man in the middle) to it
// on its own thread, closed and destroyed there at the end.
struct RelayedPair {
  RelayedPair() {
    const auto tls = test::pskContext("cluster secret");
    makeTransport(a, tls);
    makeTransport(b, tls);
    where = b.listen();
    relay = middle.call([&] { return std::make_unique<test::Relay>(middle.io(), where); });
  }
  ~RelayedPair() {
    middle.call([&] {
      relay->close();
      relay.reset();
      return 0;
    });
  }
  Peer a, b, middle;
  Endpoint where;
  std::unique_ptr<test::Relay> relay;
};

bool contains(const std::vector<unsigned char>& haystack, std::span<const std::byte> needle) {
  const auto* begin = reinterpret_cast<const unsigned char*>(needle.data());
  return std::search(haystack.begin(), haystack.end(), begin, begin + needle.size()) !=
         haystack.end();
}

TEST_CASE("tls: frames travel as ciphertext and arrive intact") {
  test::Watchdog watchdog(30s);
  RelayedPair pair;
  auto& [a, b, middle, where, relay] = pair;
  auto [la, lb] = connectThrough(a, b, relay->endpoint());

  const std::vector<std::byte> header = conformance::headerOf({7, 8});
  const std::vector<std::byte> payload = conformance::patternBytes(100000, 42);
  REQUIRE(!sendOn(a, la, header, payload));
  InFrame got;
  REQUIRE(!receiveOn(b, lb, got));
  REQUIRE(got.payloads.size() == 1);
  CHECK(conformance::matchesPattern(got.payloads[0].bytes(), 42));

  const std::vector<unsigned char> wire = relay->clientBytes();
  CHECK(wire.size() > payload.size());
  CHECK(wire[0] == 0x16);  // a TLS handshake record opens the connection
  CHECK_FALSE(contains(wire, std::span(payload).subspan(5000, 64)));  // no plaintext run
  const std::uint32_t magic = conformance::kTcpMagic;
  CHECK_FALSE(contains(wire, std::as_bytes(std::span(&magic, 1))));  // no frame prefix
}

TEST_CASE("tls: a byte flipped on the path after the handshake closes the link, nothing delivered") {
  test::Watchdog watchdog(30s);
  RelayedPair pair;
  auto& [a, b, middle, where, relay] = pair;
  auto [la, lb] = connectThrough(a, b, relay->endpoint());

  // The handshake completes and one frame passes untouched.
  const std::vector<std::byte> header = conformance::headerOf({1});
  const std::vector<std::byte> payload = conformance::patternBytes(4096, 1);
  REQUIRE(!sendOn(a, la, header, payload));
  InFrame got;
  REQUIRE(!receiveOn(b, lb, got));
  got.payloads.clear();

  // Then the man in the middle flips one bit of the next frame.
  relay->flipNextClientByte();
  REQUIRE(!sendOn(a, la, header, payload));
  const std::error_code ec = receiveOn(b, lb, got);
  CHECK(relay->flipped());
  CHECK_MESSAGE(ec == Errc::tlsRecordRejected, describe(ec));
  CHECK(got.payloads.empty());
  CHECK(got.header.empty());
  CHECK(std::string(ec.message()).find("integrity") != std::string::npos);
  // The link stays closed with that error: nothing after the altered record is read.
  const std::error_code again = receiveOn(b, lb, got);
  CHECK_MESSAGE(again == Errc::tlsRecordRejected, describe(again));
}

TEST_CASE("tls: a replayed recording of a client's connection is refused") {
  test::Watchdog watchdog(30s);
  RelayedPair pair;
  auto& [a, b, middle, where, relay] = pair;
  std::vector<unsigned char> recording;
  {
    auto [la, lb] = connectThrough(a, b, relay->endpoint());
    const std::vector<std::byte> header = conformance::headerOf({5});
    const std::vector<std::byte> payload = conformance::patternBytes(1000, 5);
    REQUIRE(!sendOn(a, la, header, payload));
    InFrame got;
    REQUIRE(!receiveOn(b, lb, got));
    recording = relay->clientBytes();
  }
  REQUIRE(recording.size() > 1000);

  // The recorded client bytes, replayed to the server on a new connection.
  auto accepted = b.spawn(
      [&]() -> asio::awaitable<LinkResult> { co_return co_await b.transport->accept(); });
  asio::io_context rawIo;
  asio::ip::tcp::socket raw(rawIo);
  raw.connect(asio::ip::tcp::endpoint(asio::ip::make_address(where.host), where.port));
  asio::write(raw, asio::buffer(recording));
  LinkResult link = accepted.get();
  REQUIRE(!link.error);
  InFrame got;
  const std::error_code ec = receiveOn(b, link.link.get(), got);
  CHECK_MESSAGE(ec == Errc::authenticationFailed, describe(ec));
  CHECK(got.header.empty());
  CHECK(got.payloads.empty());
  b.call([&] {
    link.link.reset();
    return 0;
  });
}

TEST_CASE("tls: a peer with another secret is refused on both sides") {
  test::Watchdog watchdog(30s);
  Peer a, b;
  makeTransport(a, test::pskContext("another secret"));
  makeTransport(b, test::pskContext("cluster secret"));
  const Exchange e = firstFrame(a, b, b.listen());
  CHECK_MESSAGE(e.sender == Errc::authenticationFailed, describe(e.sender));
  CHECK_MESSAGE(e.receiver == Errc::authenticationFailed, describe(e.receiver));
}

TEST_CASE("tls: certificates of the cluster's CA pass and an untrusted certificate is refused") {
  test::Watchdog watchdog(30s);
  test::TestCa cluster("cluster");
  test::TestCa stranger("stranger");
  const auto trusted = tcp::makeTlsContext(cluster.issue("peer-b", cluster.caFile()));

  SUBCASE("both trusted") {
    Peer a, b;
    makeTransport(a, tcp::makeTlsContext(cluster.issue("peer-a", cluster.caFile())));
    makeTransport(b, trusted);
    auto [la, lb] = connectThrough(a, b, b.listen());
    const std::vector<std::byte> header = conformance::headerOf({3});
    REQUIRE(!sendOn(a, la, header, {}));
    InFrame got;
    const std::error_code ec = receiveOn(b, lb, got);
    CHECK_MESSAGE(!ec, describe(ec));
    CHECK(got.header == header);
  }
  SUBCASE("the client's certificate comes from another CA") {
    Peer a, b;
    makeTransport(a, tcp::makeTlsContext(stranger.issue("intruder", cluster.caFile())));
    makeTransport(b, trusted);
    const Exchange e = firstFrame(a, b, b.listen());
    CHECK_MESSAGE(e.sender == Errc::authenticationFailed, describe(e.sender));
    CHECK_MESSAGE(e.receiver == Errc::authenticationFailed, describe(e.receiver));
  }
  SUBCASE("the server's certificate comes from another CA") {
    Peer a, b;
    makeTransport(a, tcp::makeTlsContext(cluster.issue("peer-a", cluster.caFile())));
    makeTransport(b, tcp::makeTlsContext(stranger.issue("impostor", cluster.caFile())));
    const Exchange e = firstFrame(a, b, b.listen());
    CHECK_MESSAGE(e.sender == Errc::authenticationFailed, describe(e.sender));
    CHECK_MESSAGE(e.receiver == Errc::authenticationFailed, describe(e.receiver));
  }
  SUBCASE("a certificate file that does not exist is named") {
    tcp::TlsConfig config = cluster.issue("peer-c", cluster.caFile());
    config.certFile += ".missing";
    CHECK_THROWS_WITH(tcp::makeTlsContext(config),
                      doctest::Contains(config.certFile.c_str()));
  }
}

TEST_CASE("tls: a plaintext peer and a TLS peer are each told what the other speaks") {
  test::Watchdog watchdog(30s);
  SUBCASE("plaintext client, TLS listener") {
    Peer a, b;
    makeTransport(a, nullptr);
    makeTransport(b, test::pskContext("cluster secret"));
    const Exchange e = firstFrame(a, b, b.listen());
    CHECK_MESSAGE(e.sender == Errc::peerSpeaksTls, describe(e.sender));
    CHECK_MESSAGE(e.receiver == Errc::peerSpeaksPlaintext, describe(e.receiver));
  }
  SUBCASE("TLS client, plaintext listener") {
    Peer a, b;
    makeTransport(a, test::pskContext("cluster secret"));
    makeTransport(b, nullptr);
    const Exchange e = firstFrame(a, b, b.listen());
    CHECK_MESSAGE(e.sender == Errc::peerSpeaksPlaintext, describe(e.sender));
    CHECK_MESSAGE(e.receiver == Errc::peerSpeaksTls, describe(e.receiver));
  }
  const std::string advice = make_error_code(Errc::peerSpeaksTls).message();
  CHECK(advice.find("start both with or without --insecure-plaintext") != std::string::npos);
}

}  // namespace
}  // namespace gossamer::net
