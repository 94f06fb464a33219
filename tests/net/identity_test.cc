// Peer identities (net/wire/identity.h): Ed25519 key pairs, their files, the book that binds ids
// to keys, and the handshake's proof of them: a member that knows the cluster secret but holds
// another peer's id with its own key is refused, and so is a peer of the previous protocol
// version, with both versions named.
#include "net/wire/identity.h"

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/io_context.hpp>
#include <doctest/doctest.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine/base/enforce.h"
#include "net/errors.h"
#include "net/wire/codec.h"
#include "net/wire/handshake.h"
#include "tests/net/fake_link.h"
#include "tests/net/handshake_pair.h"
#include "tests/net/wire_fuzz.h"

using namespace gossamer;
using namespace gossamer::net;
using net::testing::FakeFrame;
using net::testing::FakeLink;
using net::testing::runPair;

namespace {

std::vector<std::byte> bytesOf(const std::string& text) {
  const auto* p = reinterpret_cast<const std::byte*>(text.data());
  return std::vector<std::byte>(p, p + text.size());
}

wire::HandshakeConfig configOf(std::uint64_t peerId,
                               std::shared_ptr<const wire::Identity> identity) {
  wire::HandshakeConfig config;
  config.clusterId = "identity-test";
  config.peerId = peerId;
  config.listen = Endpoint{"127.0.0.1", static_cast<std::uint16_t>(7100 + peerId)};
  config.model = wire::ModelFingerprint{4242, "f32", 0x77};
  config.secret = bytesOf("one cluster secret");
  config.identity = std::move(identity);
  config.timeout = std::chrono::milliseconds(5000);
  return config;
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

std::filesystem::path freshDirectory(const std::string& name) {
  const auto dir = std::filesystem::temp_directory_path() /
                   fmt::format("gossamer-identity-{}-{}", name, ::getpid());
  std::filesystem::remove_all(dir);
  return dir;
}

}  // namespace

TEST_CASE("identity: a signature verifies with its key only, and only for its message") {
  const auto alice = wire::Identity::generate();
  const auto bob = wire::Identity::generate();
  const std::vector<std::byte> message = bytesOf("transcript bytes");
  const std::vector<std::byte> signature = alice->sign(message);
  REQUIRE(signature.size() == wire::kSignatureBytes);
  CHECK(wire::verifySignature(alice->publicKey(), message, signature));
  CHECK_FALSE(wire::verifySignature(bob->publicKey(), message, signature));
  std::vector<std::byte> altered = message;
  altered[0] ^= std::byte{1};
  CHECK_FALSE(wire::verifySignature(alice->publicKey(), altered, signature));
  std::vector<std::byte> forged = signature;
  forged[17] ^= std::byte{0x80};
  CHECK_FALSE(wire::verifySignature(alice->publicKey(), message, forged));
  CHECK_FALSE(wire::verifySignature(std::span(alice->publicKey()).first(31), message, signature));
  CHECK(alice->fingerprint().size() == 16);
  CHECK(alice->fingerprint() != bob->fingerprint());
}

TEST_CASE("identity: a key file is made once with mode 0600 and gives the same key after") {
  const auto dir = freshDirectory("file");
  const std::string path = (dir / "sub" / "peer-0000000000000007.key").string();
  const auto made = wire::Identity::loadOrCreate(path);
  struct stat info {};
  REQUIRE(::stat(path.c_str(), &info) == 0);
  CHECK((info.st_mode & 0777) == 0600);
  const auto again = wire::Identity::loadOrCreate(path);
  CHECK(again->publicKey() == made->publicKey());
  // What one signs the other verifies: the private half came back too.
  const auto message = bytesOf("restart");
  CHECK(wire::verifySignature(made->publicKey(), message, again->sign(message)));

  const std::string corrupt = (dir / "corrupt.key").string();
  std::ofstream(corrupt) << "-----BEGIN PRIVATE KEY-----\nnot base64\n-----END PRIVATE KEY-----\n";
  try {
    wire::Identity::loadOrCreate(corrupt);
    FAIL("a corrupt key file was accepted");
  } catch (const Error& e) {
    CHECK(contains(e.what(), corrupt));
    CHECK(contains(e.what(), "no readable private key"));
  }
  std::filesystem::remove_all(dir);
}

TEST_CASE("identity: the book binds an id to its first key and refuses another") {
  wire::IdentityBook book;
  const auto a = wire::Identity::generate();
  const auto b = wire::Identity::generate();
  CHECK(book.bind(1, a->publicKey()) == wire::IdentityBook::Verdict::bound);
  CHECK(book.bind(1, a->publicKey()) == wire::IdentityBook::Verdict::known);
  CHECK(book.bind(1, b->publicKey()) == wire::IdentityBook::Verdict::conflict);
  CHECK(book.bind(2, b->publicKey()) == wire::IdentityBook::Verdict::bound);
  CHECK(book.keyOf(1) == a->publicKey());
  CHECK_FALSE(book.keyOf(3).has_value());
  CHECK(book.size() == 2);
}

TEST_CASE("identity: a successful handshake proves and binds both ends") {
  const auto clientKey = wire::Identity::generate();
  const auto serverKey = wire::Identity::generate();
  auto client = configOf(1, clientKey);
  auto server = configOf(2, serverKey);
  client.book = std::make_shared<wire::IdentityBook>();
  server.book = std::make_shared<wire::IdentityBook>();
  const auto out = runPair(client, server);
  REQUIRE(out.client.result.ok());
  REQUIRE(out.server.result.ok());
  CHECK(out.client.result.remoteIdentity == serverKey->publicKey());
  CHECK(out.server.result.remoteIdentity == clientKey->publicKey());
  CHECK(client.book->keyOf(2) == serverKey->publicKey());
  CHECK(server.book->keyOf(1) == clientKey->publicKey());
  // Again with the same keys: known, still fine.
  const auto again = runPair(client, server);
  CHECK(again.client.result.ok());
  CHECK(again.server.result.ok());
}

TEST_CASE("identity: a member holding the secret cannot pose as another member's id") {
  const auto real = wire::Identity::generate();
  const auto poser = wire::Identity::generate();
  auto server = configOf(2, wire::Identity::generate());
  server.book = std::make_shared<wire::IdentityBook>();
  server.book->bind(1, real->publicKey());  // peer 1 joined before, with its own key

  // The poser as client: it claims id 1 with its own key; the server refuses it.
  const auto out = runPair(configOf(1, poser), server);
  CHECK(out.server.result.error == Errc::identityMismatch);
  CHECK(out.client.result.error == Errc::identityMismatch);
  CHECK(contains(out.server.result.reason,
                 fmt::format("bound to identity key {}", wire::fingerprintOf(real->publicKey()))));
  CHECK(contains(out.server.result.reason, poser->fingerprint()));
  CHECK(contains(out.client.result.reason, "a peer that lost its key joins under a new --peer-id"));
  CHECK(server.book->keyOf(1) == real->publicKey());  // the binding stands

  // The poser as server: a client that knows id 2 by another key refuses it.
  auto client = configOf(1, real);
  client.book = std::make_shared<wire::IdentityBook>();
  client.book->bind(2, wire::Identity::generate()->publicKey());
  const auto reverse = runPair(client, configOf(2, poser));
  CHECK(reverse.client.result.error == Errc::identityMismatch);
  CHECK(reverse.server.result.error == Errc::identityMismatch);
}

TEST_CASE("identity: a hello whose signature is not its key's is refused") {
  // A relay or a man in the middle that swaps the server's signature (the HMAC tag still
  // verifies: it does not cover the signature): the client refuses the server's identity.
  const auto filter = [](FakeFrame& frame) {
    wire::HandshakeMessage message;
    if (wire::decodeHandshake(frame.header, message)) return true;
    if (auto* hello = std::get_if<wire::ServerHello>(&message)) {
      hello->signature = wire::Identity::generate()->sign(bytesOf("something else"));
      frame.header = wire::encodeHandshake(message);
    }
    return true;
  };
  const auto out = runPair(configOf(1, wire::Identity::generate()),
                           configOf(2, wire::Identity::generate()), filter);
  CHECK(out.client.result.error == Errc::identityMismatch);
  CHECK(contains(out.client.result.reason, "peer 0000000000000002's identity signature does not"));
  CHECK(out.server.result.error == Errc::identityMismatch);
}

TEST_CASE("identity: a peer of protocol version 1 is refused with both versions named") {
  REQUIRE(wire::kProtocolVersion == 2);
  // A version 1 hello: no identity key (version 1 had none).
  wire::PeerInfo old{1, "identity-test", 9, Endpoint{"127.0.0.1", 7109}, {4242, "f32", 0x77}, {}};
  const std::vector<std::byte> nonce(wire::kNonceBytes, std::byte{5});
  for (const bool oldIsServer : {false, true}) {
    CAPTURE(oldIsServer);
    asio::io_context io;
    auto [clientEnd, serverEnd] = FakeLink::pair(io);
    FakeLink& tested = oldIsServer ? *clientEnd : *serverEnd;
    FakeLink& scripted = oldIsServer ? *serverEnd : *clientEnd;
    wire::HandshakeMessage hello = wire::ClientHello{old, nonce};
    if (oldIsServer)
      hello = wire::ServerHello{old, nonce, std::vector<std::byte>(wire::kTagBytes), {}};
    std::string refusalText;
    asio::co_spawn(
        io,
        [&, hello]() -> asio::awaitable<void> {
          InFrame first;
          if (oldIsServer && co_await scripted.receive(first)) co_return;
          const std::vector<std::byte> bytes = wire::encodeHandshake(hello);
          OutFrame out;  // its header is a view of `bytes`
          out.header = bytes;
          if (co_await scripted.send(std::move(out))) co_return;
          InFrame answer;
          if (co_await scripted.receive(answer)) co_return;
          wire::HandshakeMessage refusal;
          if (!wire::decodeHandshake(answer.header, refusal))
            if (auto* r = std::get_if<wire::HandshakeRefusal>(&refusal)) refusalText = r->reason;
        },
        asio::detached);
    net::testing::detail::Outcome outcome;
    net::testing::detail::start(io, tested, configOf(2, wire::Identity::generate()), oldIsServer,
                                outcome);
    io.run_for(std::chrono::seconds(10));
    REQUIRE(outcome.done);
    CHECK(outcome.result.error == Errc::versionMismatch);
    CHECK(outcome.result.reason == "protocol version differs: 2 here vs 1 remote");
    // What the old peer reads (its log names both versions too).
    CHECK(refusalText == "protocol version differs: 2 at the refusing peer vs 1 at yours");
  }
}
