// net/wire: header codec round trips, hostile frames, and the authenticated handshake over an
// in-memory link pair (tests/net/fake_link.h), so that no transport backend is involved.
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/io_context.hpp>
#include <asio/use_awaitable.hpp>
#include <doctest/doctest.h>
#include <fmt/format.h>
#include <unistd.h>

#include "engine/base/enforce.h"
#include "net/errors.h"
#include "net/wire/codec.h"
#include "net/wire/handshake.h"
#include "tests/net/fake_link.h"
#include "tests/net/handshake_pair.h"
#include "tests/net/wire_fuzz.h"
#include "tests/net/wire_samples.h"

using namespace gossamer;
using namespace gossamer::net;
using net::testing::FakeFrame;
using net::testing::FakeLink;
using net::testing::runPair;

namespace {

std::span<const std::byte> asSpan(const std::vector<std::byte>& v) { return v; }

std::vector<std::byte> bytesOf(const std::string& text) {
  const auto* p = reinterpret_cast<const std::byte*>(text.data());
  return std::vector<std::byte>(p, p + text.size());
}

wire::HandshakeConfig makeConfig(std::uint64_t peerId) {
  wire::HandshakeConfig config;
  config.clusterId = "test-cluster";
  config.peerId = peerId;
  config.listen = Endpoint{"127.0.0.1", static_cast<std::uint16_t>(7000 + peerId)};
  config.model = wire::ModelFingerprint{101770, "f32", 0xabcdef};
  config.secret = bytesOf("correct horse battery staple");
  config.identity = wire::Identity::generate();
  config.timeout = std::chrono::milliseconds(5000);
  return config;
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

}  // namespace

// ---- codec ----------------------------------------------------------------------------------

TEST_CASE("net wire: every sample header round trips") {
  for (const wire::Header& header : net::testing::sampleHeaders()) {
    const std::vector<std::byte> bytes = wire::encodeHeader(header);
    CHECK(bytes.size() % 8 == 0);
    wire::Header decoded;
    REQUIRE(wire::decodeHeader(bytes, decoded) == std::error_code{});
    CHECK(decoded == header);
  }
}

TEST_CASE("net wire: envelope round trip through the typed shorthands") {
  wire::EnvelopeHeader envelope{99,
                                7,
                                3,
                                123456789,
                                {1.0, 0.25, -3.5},
                                {{1024, wire::Dtype::f32, 256}, {8, wire::Dtype::f64, 1}}};
  const auto bytes = wire::encodeEnvelope(envelope);
  wire::EnvelopeHeader decoded;
  REQUIRE(wire::decodeEnvelope(bytes, decoded) == std::error_code{});
  CHECK(decoded == envelope);

  // A membership header is well formed but not an envelope.
  wire::MembershipMessage membership;
  CHECK(wire::decodeMembership(bytes, membership) == Errc::unexpectedMessage);
  CHECK(wire::decodeEnvelope(wire::encodeMembership(wire::Leave{1, 2}), decoded) ==
        Errc::unexpectedMessage);
}

TEST_CASE("net wire: the encoding of compressed payloads round trips, raw ones carry none") {
  using Codec = wire::PayloadEncoding::Codec;
  wire::EnvelopeHeader envelope{1, 2, 3, 4, {}, {}};
  envelope.payloads = {{1024, wire::Dtype::f32, 256},
                       {260, wire::Dtype::i8, 256, {Codec::int8, 64, 0, false}},
                       {84, wire::Dtype::bytes, 1000, {Codec::topk, 0, 0.01, true}},
                       {512, wire::Dtype::f16, 256, {Codec::fp16, 0, 0, false}}};
  const auto bytes = wire::encodeEnvelope(envelope);
  wire::EnvelopeHeader decoded;
  REQUIRE(wire::decodeEnvelope(bytes, decoded) == std::error_code{});
  CHECK(decoded == envelope);
  CHECK(decoded.payloads[0].encoding.codec == Codec::none);
  CHECK(decoded.payloads[2].encoding.fraction == 0.01);
}

TEST_CASE("net wire: membership messages round trip") {
  std::vector<wire::MemberUpdate> members;
  for (std::uint64_t i = 0; i < 200; ++i) {  // large enough to need several segments
    members.push_back({i, Endpoint{"10.1.0." + std::to_string(i % 250), 7000}, i * 3,
                       static_cast<wire::MemberState>(i % 4)});
  }
  const std::vector<wire::MembershipMessage> messages = {
      wire::JoinRequest{5, Endpoint{"a", 1}, 2},
      wire::JoinReply{true, "", members},
      wire::Ping{1, 2, {members[0]}},
      wire::PingReq{1, 3, 9, Endpoint{"b", 2}, {}},
      wire::Ack{9, 3, {members[7], members[8]}},
      wire::Gossip{1, members},
      wire::Leave{5, 6}};
  for (const auto& message : messages) {
    const auto bytes = wire::encodeMembership(message);
    wire::MembershipMessage decoded;
    REQUIRE(wire::decodeMembership(bytes, decoded) == std::error_code{});
    CHECK(decoded == message);
  }
}

TEST_CASE("net wire: decoder rejects truncated and padded frames") {
  for (const wire::Header& header : net::testing::sampleHeaders()) {
    const auto bytes = wire::encodeHeader(header);
    wire::Header decoded;
    for (std::size_t size = 0; size < bytes.size(); ++size) {
      CHECK(wire::decodeHeader(asSpan(bytes).first(size), decoded) == Errc::malformedMessage);
    }
    auto padded = bytes;
    padded.resize(bytes.size() + 8);
    CHECK(wire::decodeHeader(padded, decoded) == Errc::malformedMessage);
  }
}

TEST_CASE("net wire: decoder accepts a frame at any address") {
  const auto bytes = wire::encodeHeader(net::testing::sampleHeaders()[1]);
  std::vector<std::byte> shifted(bytes.size() + 3);
  std::copy(bytes.begin(), bytes.end(), shifted.begin() + 3);
  wire::Header decoded;
  CHECK(wire::decodeHeader(asSpan(shifted).subspan(3), decoded) == std::error_code{});
  CHECK(decoded == net::testing::sampleHeaders()[1]);
}

TEST_CASE("net wire: decoder rejects absurd segment tables before allocating") {
  wire::Header decoded;
  // 24 bytes claiming 32 GiB of segment, or 2^32 segments: refused from the table alone (the
  // decoder allocates only after the claimed sizes matched the bytes present).
  CHECK(wire::decodeHeader(net::testing::hugeSegmentClaim(), decoded) == Errc::malformedMessage);
  CHECK(wire::decodeHeader(net::testing::segmentCountClaim(), decoded) == Errc::malformedMessage);
  // More segments than kMaxSegments, each of one word, sizes consistent.
  {
    const std::size_t count = wire::kMaxSegments + 1;
    const std::size_t table = (4 + 4 * count + 7) / 8 * 8;
    std::vector<std::byte> frame(table + 8 * count, std::byte{0});
    frame[0] = static_cast<std::byte>(count - 1);
    for (std::size_t i = 0; i < count; ++i) frame[4 + 4 * i] = std::byte{1};
    CHECK(wire::decodeHeader(frame, decoded) == Errc::malformedMessage);
  }
  // An empty first segment, an odd size, an empty input.
  CHECK(wire::decodeHeader(std::vector<std::byte>(16, std::byte{0}), decoded) ==
        Errc::malformedMessage);
  CHECK(wire::decodeHeader(std::vector<std::byte>(17, std::byte{0}), decoded) ==
        Errc::malformedMessage);
  CHECK(wire::decodeHeader(std::span<const std::byte>{}, decoded) == Errc::malformedMessage);
}

TEST_CASE("net wire: decoder stops a tiny frame claiming half a billion list elements") {
  wire::Header decoded;
  // A small count is a legal (if odd) gossip of default-valued updates...
  REQUIRE(wire::decodeHeader(net::testing::amplifiedList(3), decoded) == std::error_code{});
  const auto& gossip = std::get<wire::Gossip>(std::get<wire::MembershipMessage>(decoded));
  CHECK(gossip.sender == 42);
  CHECK(gossip.updates.size() == 3);
  // ...but 2^29 - 1 elements in 72 bytes exceed the frame-scaled traversal limit.
  const auto hostile = net::testing::amplifiedList();
  CHECK(hostile.size() == 72);
  CHECK(wire::traversalLimitWords(hostile.size()) == 4 * 9 + 1024);
  CHECK(wire::decodeHeader(hostile, decoded) == Errc::malformedMessage);
}

TEST_CASE("net wire: decoder rejects a pointer that loops back on its own struct") {
  wire::Header decoded;
  CHECK(wire::decodeHeader(net::testing::selfReference(), decoded) == Errc::malformedMessage);
}

TEST_CASE("net wire: decoder rejects unknown union members and enum values") {
  using net::testing::structPointer;
  wire::Header decoded;
  // Header union tag 9.
  CHECK(wire::decodeHeader(net::testing::frameFromWords({structPointer(0, 1, 1), 9, 0}), decoded) ==
        Errc::malformedMessage);
  // An envelope with one payload descriptor whose dtype is 200.
  const auto frame = net::testing::frameFromWords({
      structPointer(0, 1, 1), 2,           // Header: envelope
      structPointer(0, 4, 2), 0, 0, 0, 0,  // Envelope: data, then its two pointers
      0,                                   // scalars: null
      net::testing::listPointer(0, 7, 3),  // payloads: inline composite, 3 words
      structPointer(1, 3, 0),              // tag: 1 element of 3 data words
      16, 200, 4,                          // size, dtype, elements
  });
  CHECK(wire::decodeHeader(frame, decoded) == Errc::malformedMessage);
}

// ---- handshake ------------------------------------------------------------------------------

TEST_CASE("net wire: handshake succeeds and each side learns the other") {
  const auto clientConfig = makeConfig(1);
  const auto serverConfig = makeConfig(2);
  const auto out = runPair(clientConfig, serverConfig);
  REQUIRE_MESSAGE(out.client.result.ok(), out.client.result.reason);
  REQUIRE_MESSAGE(out.server.result.ok(), out.server.result.reason);
  CHECK(out.client.result.remotePeerId == 2);
  CHECK(out.client.result.remoteListen == serverConfig.listen);
  CHECK(out.client.result.remoteModel == serverConfig.model);
  CHECK(out.server.result.remotePeerId == 1);
  CHECK(out.server.result.remoteListen == clientConfig.listen);
  CHECK(out.server.result.remoteProtocolVersion == wire::kProtocolVersion);
  CHECK(out.client.result.reason.empty());
}

TEST_CASE("net wire: handshake succeeds in both directions between the same two peers") {
  const auto a = makeConfig(1);
  const auto b = makeConfig(2);
  const auto ab = runPair(a, b);
  const auto ba = runPair(b, a);
  CHECK(ab.client.result.ok());
  CHECK(ab.server.result.ok());
  CHECK(ba.client.result.ok());
  CHECK(ba.server.result.ok());
  CHECK(ba.client.result.remotePeerId == 1);
}

TEST_CASE("net wire: handshake with a wrong secret is refused on both sides") {
  auto serverConfig = makeConfig(2);
  serverConfig.secret = bytesOf("a different secret");
  const auto out = runPair(makeConfig(1), serverConfig);
  CHECK(out.client.result.error == Errc::authenticationFailed);
  CHECK(out.server.result.error == Errc::authenticationFailed);
  CHECK(contains(out.client.result.reason, "HMAC tag does not verify"));
  CHECK(contains(out.server.result.reason, "wrong cluster secret"));
  for (const auto* reason : {&out.client.result.reason, &out.server.result.reason}) {
    CHECK_FALSE(contains(*reason, "correct horse"));
    CHECK_FALSE(contains(*reason, "a different secret"));
  }
}

TEST_CASE("net wire: handshake refuses a protocol version mismatch naming both versions") {
  // The server compares versions on the client's hello and refuses at once: the client reads
  // the server's words.
  auto serverConfig = makeConfig(2);
  serverConfig.protocolVersion = 7;
  const auto out = runPair(makeConfig(1), serverConfig);
  CHECK(out.client.result.error == Errc::versionMismatch);
  CHECK(out.server.result.error == Errc::versionMismatch);
  CHECK(out.client.result.reason ==
        fmt::format("the remote refused the handshake: protocol version differs: 7 at the "
                    "refusing peer vs {} at yours",
                    wire::kProtocolVersion));
  CHECK(out.server.result.reason ==
        fmt::format("protocol version differs: 7 here vs {} remote", wire::kProtocolVersion));
}

TEST_CASE("net wire: handshake refuses a cluster id mismatch naming both ids") {
  auto serverConfig = makeConfig(2);
  serverConfig.clusterId = "other-cluster";
  const auto out = runPair(makeConfig(1), serverConfig);
  CHECK(out.client.result.error == Errc::clusterMismatch);
  CHECK(out.server.result.error == Errc::clusterMismatch);
  CHECK(out.client.result.reason ==
        "cluster id differs: 'test-cluster' here vs 'other-cluster' remote");
}

TEST_CASE("net wire: handshake refuses a model mismatch naming the field and both values") {
  auto clientConfig = makeConfig(1);
  clientConfig.model.parameters = 235146;
  const auto out = runPair(clientConfig, makeConfig(2));
  CHECK(out.client.result.error == Errc::modelMismatch);
  CHECK(out.server.result.error == Errc::modelMismatch);
  CHECK(out.client.result.reason ==
        "model fingerprint differs: parameters 235146 here vs 101770 remote");
  CHECK(out.server.result.reason ==
        "model fingerprint differs: parameters 101770 here vs 235146 remote");

  auto serverConfig = makeConfig(2);
  serverConfig.model.dtype = "bf16";
  serverConfig.model.layoutHash = 1;
  const auto other = runPair(makeConfig(1), serverConfig);
  CHECK(other.client.result.error == Errc::modelMismatch);
  CHECK(contains(other.client.result.reason, "dtype 'f32' here vs 'bf16' remote"));
  CHECK(contains(other.client.result.reason, "layout hash"));
}

TEST_CASE("net wire: a version mismatch is reported before the wrong secret") {
  // A peer of another version may not compute the same transcript: its tag says nothing.
  auto serverConfig = makeConfig(2);
  serverConfig.secret = bytesOf("another");
  serverConfig.protocolVersion = 9;
  const auto out = runPair(makeConfig(1), serverConfig);
  CHECK(out.client.result.error == Errc::versionMismatch);
  CHECK(out.server.result.error == Errc::versionMismatch);
}

namespace {

// Frames recorded from one honest handshake.
struct Recording {
  std::vector<FakeFrame> fromClient;
  std::vector<FakeFrame> fromServer;
};

Recording recordHonestHandshake() {
  Recording recording;
  const auto out = runPair(
      makeConfig(1), makeConfig(2),
      [&recording](FakeFrame& f) {
        recording.fromServer.push_back(f);
        return true;
      },
      [&recording](FakeFrame& f) {
        recording.fromClient.push_back(f);
        return true;
      });
  REQUIRE(out.client.result.ok());
  REQUIRE(out.server.result.ok());
  REQUIRE(recording.fromClient.size() == 2);  // hello, proof
  REQUIRE(recording.fromServer.size() == 2);  // hello, accept
  return recording;
}

// A scripted remote: for each recorded frame, receives one frame, then sends the recorded one.
asio::awaitable<void> replay(FakeLink& link, std::vector<FakeFrame> frames) {
  for (auto& frame : frames) {
    InFrame incoming;
    if (co_await link.receive(incoming)) co_return;
    OutFrame outgoing;  // named: see the GCC 12 note in net/wire/handshake.cc
    outgoing.header = frame.header;
    if (co_await link.send(std::move(outgoing))) co_return;
  }
}

}  // namespace

TEST_CASE("net wire: a replayed server hello is refused by the client") {
  const Recording recording = recordHonestHandshake();
  asio::io_context io;
  auto [clientEnd, serverEnd] = FakeLink::pair(io);
  net::testing::detail::Outcome client;
  net::testing::detail::start(io, *clientEnd, makeConfig(1), true, client);
  asio::co_spawn(io, replay(*serverEnd, recording.fromServer), asio::detached);
  io.run_for(std::chrono::seconds(10));
  REQUIRE(client.done);
  CHECK(client.result.error == Errc::authenticationFailed);
  CHECK(contains(client.result.reason, "replayed"));
  CHECK(clientEnd->closed());
}

TEST_CASE("net wire: a replayed client hello and proof are refused by the server") {
  const Recording recording = recordHonestHandshake();
  asio::io_context io;
  auto [clientEnd, serverEnd] = FakeLink::pair(io);
  net::testing::detail::Outcome server;
  net::testing::detail::start(io, *serverEnd, makeConfig(2), false, server);
  // The fake client sends the recorded hello, waits for the (fresh) server hello, then sends
  // the recorded proof.
  asio::co_spawn(
      io,
      [&]() -> asio::awaitable<void> {
        OutFrame hello;
        hello.header = recording.fromClient[0].header;
        co_await clientEnd->send(std::move(hello));
        InFrame serverHello;
        co_await clientEnd->receive(serverHello);
        OutFrame proof;
        proof.header = recording.fromClient[1].header;
        co_await clientEnd->send(std::move(proof));
      },
      asio::detached);
  io.run_for(std::chrono::seconds(10));
  REQUIRE(server.done);
  CHECK(server.result.error == Errc::authenticationFailed);
  CHECK(contains(server.result.reason, "client's HMAC tag does not verify"));
}

TEST_CASE("net wire: handshake times out when the remote is silent") {
  for (const bool client : {true, false}) {
    asio::io_context io;
    auto [clientEnd, serverEnd] = FakeLink::pair(io);
    auto config = makeConfig(1);
    config.timeout = std::chrono::milliseconds(100);
    net::testing::detail::Outcome outcome;
    FakeLink& tested = client ? *clientEnd : *serverEnd;
    net::testing::detail::start(io, tested, config, client, outcome);
    const auto start = std::chrono::steady_clock::now();
    io.run_for(std::chrono::seconds(10));
    const auto elapsed = std::chrono::steady_clock::now() - start;
    REQUIRE(outcome.done);
    CHECK(outcome.result.error == Errc::handshakeTimeout);
    CHECK(contains(outcome.result.reason, "100 ms"));
    CHECK(tested.closed());
    CHECK(elapsed >= std::chrono::milliseconds(100));
    CHECK(elapsed < std::chrono::seconds(5));  // a hang guard, not a speed assertion
  }
}

TEST_CASE("net wire: handshake refuses a non-handshake first frame") {
  asio::io_context io;
  auto [clientEnd, serverEnd] = FakeLink::pair(io);
  serverEnd->inject(FakeFrame{wire::encodeEnvelope(wire::EnvelopeHeader{}), {}});
  net::testing::detail::Outcome server;
  net::testing::detail::start(io, *serverEnd, makeConfig(2), false, server);
  io.run_for(std::chrono::seconds(10));
  REQUIRE(server.done);
  CHECK(server.result.error == Errc::unexpectedMessage);
  // The client end got a refusal explaining it.
  InFrame refusal;
  bool received = false;
  asio::co_spawn(
      io, [&]() -> asio::awaitable<void> { received = !co_await clientEnd->receive(refusal); },
      asio::detached);
  io.restart();
  io.run_for(std::chrono::seconds(10));
  REQUIRE(received);
  wire::HandshakeMessage message;
  REQUIRE(wire::decodeHandshake(refusal.header, message) == std::error_code{});
  CHECK(std::get<wire::HandshakeRefusal>(message).code == wire::RefusalCode::protocol);
}

TEST_CASE("net wire: handshake misuse throws") {
  asio::io_context io;
  auto [clientEnd, serverEnd] = FakeLink::pair(io);
  auto config = makeConfig(1);
  config.secret.clear();
  net::testing::detail::Outcome outcome;
  net::testing::detail::start(io, *clientEnd, config, true, outcome);
  io.run_for(std::chrono::seconds(10));
  REQUIRE(outcome.done);
  CHECK(contains(outcome.exception, "non-empty cluster secret"));
}

TEST_CASE("net wire: readSecretFile strips line breaks and names the path on errors") {
  namespace fs = std::filesystem;
  const fs::path dir =
      fs::temp_directory_path() / ("gossamer-wire-test-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const fs::path good = dir / "secret";
  {
    std::ofstream out(good, std::ios::binary);
    out << "s3cr3t value\r\n";
  }
  fs::permissions(good, fs::perms::owner_read | fs::perms::owner_write);
  CHECK(wire::readSecretFile(good.string()) == bytesOf("s3cr3t value"));

  const fs::path empty = dir / "empty";
  {
    std::ofstream out(empty, std::ios::binary);
    out << "\n";
  }
  const fs::path missing = dir / "missing";
  for (const fs::path& path : {empty, missing, dir}) {
    try {
      wire::readSecretFile(path.string());
      FAIL("expected an error for " << path);
    } catch (const gossamer::Error& e) {
      CHECK(contains(e.what(), path.string()));
      CHECK_FALSE(contains(e.what(), "s3cr3t"));
    }
  }
  fs::remove_all(dir);
}
