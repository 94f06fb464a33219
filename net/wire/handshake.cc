#include "net/wire/handshake.h"

#include <exception>
#include <new>
#include <optional>
#include <span>
#include <string_view>
#include <utility>
#include <variant>

#include <asio/experimental/as_tuple.hpp>
#include <asio/experimental/awaitable_operators.hpp>
#include <asio/steady_timer.hpp>
#include <asio/this_coro.hpp>
#include <asio/use_awaitable.hpp>
#include <fmt/format.h>

#include "engine/base/enforce.h"
#include "engine/base/log.h"
#include "net/errors.h"
#include "net/wire/handshake_checks.h"

namespace gossamer::net::wire {
namespace {

using namespace handshake_detail;

PeerInfo introductionOf(const HandshakeConfig& config) {
  const IdentityKey& key = config.identity->publicKey();
  return PeerInfo{config.protocolVersion, config.clusterId,
                  config.peerId,          config.listen,
                  config.model,           std::vector<std::byte>(key.begin(), key.end())};
}

// ---- the two sides --------------------------------------------------------------------------

// One run of one side. Every failure path records exactly one error (the first) in result.
class Session {
 public:
  Session(Link& link, const HandshakeConfig& config)
      : link_(link), config_(config), self_(introductionOf(config)) {}

  asio::awaitable<void> runClient();
  asio::awaitable<void> runServer();

  void fail(std::error_code error, std::string reason) {
    if (result.error) return;
    result.error = error;
    result.reason = std::move(reason);
  }

  HandshakeResult result;
  bool succeeded = false;

 private:
  // Messages and frames are always named locals, never a braced temporary inside a co_await
  // expression: GCC 12 destroys such a temporary twice.
  asio::awaitable<bool> send(HandshakeMessage message);
  asio::awaitable<bool> receive(HandshakeMessage& message, std::string_view waitingFor);
  // Records the failure and tells the remote why (best effort: the link closes next).
  asio::awaitable<void> refuse(Errc error, RefusalCode code, std::string reason,
                               std::string wireReason = {});
  void remoteRefused(const HandshakeRefusal& refusal, const std::optional<Mismatch>& local);
  // Signs T(role) with this peer's identity key (empty, with the failure recorded, if the crypto
  // library fails).
  Bytes sign(const Bytes& transcriptBytes);
  // Verifies the remote's signature of T(role) and its id's binding; refuses and returns false
  // when either fails.
  asio::awaitable<bool> checkIdentity(const PeerInfo& remote, const Bytes& transcriptBytes,
                                      const Bytes& signature);
  // Binds the remote's id to its key (the handshake succeeded on this side); refuses and
  // returns false when another peer bound that id first.
  asio::awaitable<bool> bindIdentity(const PeerInfo& remote);
  void noteRemote(const PeerInfo& info) {
    result.remotePeerId = info.peerId;
    result.remoteListen = info.listen;
    result.remoteProtocolVersion = info.protocolVersion;
    result.remoteModel = info.model;
  }

  Link& link_;
  const HandshakeConfig& config_;
  PeerInfo self_;
};

asio::awaitable<bool> Session::send(HandshakeMessage message) {
  const Bytes header = encodeHandshake(message);
  OutFrame frame;
  frame.header = header;
  const std::error_code ec = co_await link_.send(std::move(frame));
  if (ec) {
    fail(ec, fmt::format("link failed while sending {}: {}", messageName(message), ec.message()));
    co_return false;
  }
  co_return true;
}

asio::awaitable<bool> Session::receive(HandshakeMessage& message, std::string_view waitingFor) {
  InFrame frame;
  std::error_code ec = co_await link_.receive(frame);
  if (ec) {
    fail(ec, fmt::format("link failed while waiting for the {}: {}", waitingFor, ec.message()));
    co_return false;
  }
  if (!frame.payloads.empty()) {
    co_await refuse(Errc::malformedMessage, RefusalCode::protocol,
                    fmt::format("the {} came with {} payload buffers; handshake frames have none",
                                waitingFor, frame.payloads.size()));
    co_return false;
  }
  ec = decodeHandshake(frame.header, message);
  if (ec == Errc::unexpectedMessage) {
    co_await refuse(Errc::unexpectedMessage, RefusalCode::protocol,
                    fmt::format("expected the {}, got a non-handshake message", waitingFor));
    co_return false;
  }
  if (ec) {
    co_await refuse(Errc::malformedMessage, RefusalCode::protocol,
                    fmt::format("expected the {}, got a malformed header of {} bytes", waitingFor,
                                frame.header.size()));
    co_return false;
  }
  co_return true;
}

asio::awaitable<void> Session::refuse(Errc error, RefusalCode code, std::string reason,
                                      std::string wireReason) {
  HandshakeRefusal refusal{code, wireReason.empty() ? reason : std::move(wireReason)};
  fail(error, std::move(reason));
  const Bytes header = encodeHandshake(refusal);
  OutFrame frame;
  frame.header = header;
  co_await link_.send(std::move(frame));  // its error changes nothing: we are failing
}

void Session::remoteRefused(const HandshakeRefusal& refusal, const std::optional<Mismatch>& local) {
  // A remote that failed to authenticate us says so; otherwise our own comparison, which names
  // the field in our words, beats the remote's text.
  if (refusal.code != RefusalCode::authentication && local) {
    fail(local->error, local->reason);
    return;
  }
  fail(errorOf(refusal.code),
       fmt::format("the remote refused the handshake: {}", printable(refusal.reason)));
}

Bytes Session::sign(const Bytes& transcriptBytes) {
  Bytes signature = config_.identity->sign(transcriptBytes);
  if (signature.empty()) fail(Errc::cryptoFailure, "OpenSSL Ed25519 signing failed");
  return signature;
}

asio::awaitable<bool> Session::checkIdentity(const PeerInfo& remote, const Bytes& transcriptBytes,
                                             const Bytes& signature) {
  if (verifySignature(remote.identityKey, transcriptBytes, signature)) co_return true;
  co_await refuse(Errc::identityMismatch, RefusalCode::identity,
                  fmt::format("peer {:016x}'s identity signature does not verify", remote.peerId),
                  "your identity signature does not verify");
  co_return false;
}

asio::awaitable<bool> Session::bindIdentity(const PeerInfo& remote) {
  const IdentityKey key = *identityKeyFrom(remote.identityKey);  // length checked on receipt
  if (!config_.book || config_.book->bind(remote.peerId, key) != IdentityBook::Verdict::conflict)
    co_return true;
  const std::optional<IdentityKey> bound = config_.book->keyOf(remote.peerId);
  const std::string boundTo = bound ? fingerprintOf(*bound) : std::string("(the book is full)");
  co_await refuse(Errc::identityMismatch, RefusalCode::identity,
                  fmt::format("peer id {:016x} is bound to identity key {}, and this remote "
                              "holds key {}: it is not that peer",
                              remote.peerId, boundTo, fingerprintOf(key)),
                  fmt::format("peer id {:016x} is bound to another identity key ({}) than yours "
                              "({}); a peer that lost its key joins under a new --peer-id",
                              remote.peerId, boundTo, fingerprintOf(key)));
  co_return false;
}

asio::awaitable<void> Session::runClient() {
  Bytes clientNonce;
  if (!randomNonce(clientNonce)) {
    fail(Errc::cryptoFailure, "OpenSSL RAND_bytes could not produce a nonce");
    co_return;
  }
  HandshakeMessage outgoing = ClientHello{self_, clientNonce, config_.channel};
  if (!co_await send(std::move(outgoing))) co_return;

  HandshakeMessage message;
  if (!co_await receive(message, "server hello")) co_return;
  if (const auto* refusal = std::get_if<HandshakeRefusal>(&message)) {
    remoteRefused(*refusal, std::nullopt);
    co_return;
  }
  const auto* hello = std::get_if<ServerHello>(&message);
  if (hello == nullptr) {
    co_await refuse(Errc::unexpectedMessage, RefusalCode::protocol,
                    fmt::format("expected the server hello, got {}", messageName(message)));
    co_return;
  }
  noteRemote(hello->info);
  if (auto version = findVersionMismatch(self_, hello->info)) {
    co_await refuse(version->error, version->code, version->reason, version->wire);
    co_return;
  }
  if (auto problem = checkIntroduction(hello->info, hello->nonce)) {
    co_await refuse(Errc::malformedMessage, RefusalCode::protocol, "server hello: " + *problem);
    co_return;
  }

  // Authentication first: nothing the server says is believed before its tag verifies.
  const Bytes serverTranscript =
      transcript("server", self_, clientNonce, config_.channel, hello->info, hello->nonce);
  Bytes expected;
  if (!hmacSha256(config_.secret, serverTranscript, expected)) {
    fail(Errc::cryptoFailure, "OpenSSL HMAC-SHA256 failed");
    co_return;
  }
  if (!tagsEqual(expected, hello->tag) || hello->nonce == clientNonce) {
    co_await refuse(Errc::authenticationFailed, RefusalCode::authentication,
                    "the server's HMAC tag does not verify: wrong cluster secret or a replayed "
                    "handshake",
                    "the client could not verify the server's HMAC tag: wrong cluster secret "
                    "or a replayed handshake");
    co_return;
  }
  if (!co_await checkIdentity(hello->info, serverTranscript, hello->signature)) co_return;
  if (auto mismatch = findMismatch(self_, hello->info)) {
    co_await refuse(mismatch->error, mismatch->code, mismatch->reason, mismatch->wire);
    co_return;
  }
  if (!co_await bindIdentity(hello->info)) co_return;
  // `hello` points into `message`, which the verdict below replaces.
  const std::optional<IdentityKey> serverIdentity = identityKeyFrom(hello->info.identityKey);

  const Bytes clientTranscript =
      transcript("client", self_, clientNonce, config_.channel, hello->info, hello->nonce);
  Bytes proof;
  if (!hmacSha256(config_.secret, clientTranscript, proof)) {
    fail(Errc::cryptoFailure, "OpenSSL HMAC-SHA256 failed");
    co_return;
  }
  Bytes signature = sign(clientTranscript);
  if (signature.empty()) co_return;
  outgoing = ClientProof{proof, std::move(signature)};
  if (!co_await send(std::move(outgoing))) co_return;

  if (!co_await receive(message, "server's verdict")) co_return;
  if (std::holds_alternative<HandshakeAccept>(message)) {
    result.remoteIdentity = serverIdentity;
    succeeded = true;
  } else if (const auto* refusal = std::get_if<HandshakeRefusal>(&message)) {
    remoteRefused(*refusal, std::nullopt);
  } else {
    co_await refuse(Errc::unexpectedMessage, RefusalCode::protocol,
                    fmt::format("expected the server's verdict, got {}", messageName(message)));
  }
}

asio::awaitable<void> Session::runServer() {
  HandshakeMessage message;
  if (!co_await receive(message, "client hello")) co_return;
  if (const auto* refusal = std::get_if<HandshakeRefusal>(&message)) {
    remoteRefused(*refusal, std::nullopt);
    co_return;
  }
  if (!std::holds_alternative<ClientHello>(message)) {
    co_await refuse(Errc::unexpectedMessage, RefusalCode::protocol,
                    fmt::format("expected the client hello, got {}", messageName(message)));
    co_return;
  }
  const ClientHello hello = std::get<ClientHello>(std::move(message));
  noteRemote(hello.info);
  if (auto version = findVersionMismatch(self_, hello.info)) {
    co_await refuse(version->error, version->code, version->reason, version->wire);
    co_return;
  }
  if (auto problem = checkIntroduction(hello.info, hello.nonce)) {
    co_await refuse(Errc::malformedMessage, RefusalCode::protocol, "client hello: " + *problem);
    co_return;
  }

  // The server answers even an incompatible client, so that the client can name the field.
  Bytes serverNonce;
  Bytes tag;
  if (!randomNonce(serverNonce)) {
    fail(Errc::cryptoFailure, "OpenSSL RAND_bytes could not produce a nonce");
    co_return;
  }
  const Bytes serverTranscript =
      transcript("server", hello.info, hello.nonce, hello.channel, self_, serverNonce);
  if (!hmacSha256(config_.secret, serverTranscript, tag)) {
    fail(Errc::cryptoFailure, "OpenSSL HMAC-SHA256 failed");
    co_return;
  }
  Bytes signature = sign(serverTranscript);
  if (signature.empty()) co_return;
  HandshakeMessage outgoing = ServerHello{self_, serverNonce, tag, std::move(signature)};
  if (!co_await send(std::move(outgoing))) co_return;
  const std::optional<Mismatch> mismatch = findMismatch(self_, hello.info);

  if (!co_await receive(message, "client proof")) co_return;
  if (const auto* refusal = std::get_if<HandshakeRefusal>(&message)) {
    remoteRefused(*refusal, mismatch);
    co_return;
  }
  const auto* proof = std::get_if<ClientProof>(&message);
  if (proof == nullptr) {
    co_await refuse(Errc::unexpectedMessage, RefusalCode::protocol,
                    fmt::format("expected the client proof, got {}", messageName(message)));
    co_return;
  }
  const Bytes clientTranscript =
      transcript("client", hello.info, hello.nonce, hello.channel, self_, serverNonce);
  Bytes expected;
  if (!hmacSha256(config_.secret, clientTranscript, expected)) {
    fail(Errc::cryptoFailure, "OpenSSL HMAC-SHA256 failed");
    co_return;
  }
  if (!tagsEqual(expected, proof->tag)) {
    co_await refuse(Errc::authenticationFailed, RefusalCode::authentication,
                    "the client's HMAC tag does not verify: wrong cluster secret or a replayed "
                    "handshake",
                    "the server could not verify the client's HMAC tag: wrong cluster secret "
                    "or a replayed handshake");
    co_return;
  }
  if (!co_await checkIdentity(hello.info, clientTranscript, proof->signature)) co_return;
  if (mismatch) {
    co_await refuse(mismatch->error, mismatch->code, mismatch->reason, mismatch->wire);
    co_return;
  }
  if (!co_await bindIdentity(hello.info)) co_return;
  result.remoteIdentity = identityKeyFrom(hello.info.identityKey);
  result.remoteChannel = hello.channel;
  outgoing = HandshakeAccept{};
  if (!co_await send(std::move(outgoing))) co_return;
  succeeded = true;
}

// ---- deadline -------------------------------------------------------------------------------

// Which of the two racing branches got there first, as seen by the other.
struct Race {
  bool finished = false;  // the handshake completed before the deadline
  bool expired = false;   // the deadline passed first (and closed the link)
};

asio::awaitable<void> runGuarded(Session& session, bool client, Race& race) {
  try {
    if (client) {
      co_await session.runClient();
    } else {
      co_await session.runServer();
    }
  } catch (const std::bad_alloc&) {
    session.fail(std::make_error_code(std::errc::not_enough_memory), "out of memory");
  } catch (const std::exception& e) {
    session.fail(std::make_error_code(std::errc::io_error), e.what());
  }
  if (!race.expired) race.finished = true;
}

// Closes the link at the deadline, so that a pending receive ends even on a link that ignores
// per-operation cancellation.
asio::awaitable<void> closeAtDeadline(asio::steady_timer& timer, Link& link, Race& race) {
  auto [ec] = co_await timer.async_wait(asio::experimental::as_tuple(asio::use_awaitable));
  if (!ec && !race.finished) {
    race.expired = true;
    link.close();
  }
}

// Takes the config by value: the coroutine frame owns a copy, so callers may pass a temporary
// even when they co_spawn the handshake instead of awaiting it.
asio::awaitable<HandshakeResult> runHandshake(Link& link, HandshakeConfig config, bool client) {
  GOSSAMER_ENFORCE(!config.secret.empty(), "the handshake needs a non-empty cluster secret");
  GOSSAMER_ENFORCE(config.identity != nullptr, "the handshake needs this peer's identity key");
  GOSSAMER_ENFORCE(config.timeout.count() > 0, "handshake timeout must be positive, got {} ms",
                   config.timeout.count());
  using namespace asio::experimental::awaitable_operators;
  Session session(link, config);
  Race race;
  asio::steady_timer timer(co_await asio::this_coro::executor, config.timeout);
  try {
    co_await (runGuarded(session, client, race) || closeAtDeadline(timer, link, race));
  } catch (const std::exception& e) {  // our caller cancelled us, or out of memory
    session.fail(std::make_error_code(std::errc::operation_canceled), e.what());
  }

  HandshakeResult result = std::move(session.result);
  if (race.expired) {
    result.error = Errc::handshakeTimeout;
    result.reason = fmt::format("no complete handshake within {} ms", config.timeout.count());
  } else if (!session.succeeded && !result.error) {
    result.error = Errc::unexpectedMessage;  // unreachable: every failure path records one
    result.reason = "the handshake ended without a verdict";
  } else if (session.succeeded) {
    result.error = {};
    result.reason.clear();
  }

  const char* side = client ? "client" : "server";
  if (result.error) {
    link.close();
    // The accepting side's refusals are logged by its caller, rate-limited with their cause
    // (handshake_server.h): a scan must not become a warning per connection.
    log::get("net")->log(client ? spdlog::level::warn : spdlog::level::debug,
                         "handshake ({} side) with {} refused: {} ({})", side, link.remoteAddress(),
                         result.reason, result.error.message());
  } else {
    log::get("net")->debug("handshake ({} side) with {} ok: peer {} listening on {}", side,
                           link.remoteAddress(), result.remotePeerId, result.remoteListen.str());
  }
  co_return result;
}

}  // namespace

asio::awaitable<HandshakeResult> clientHandshake(Link& link, const HandshakeConfig& config) {
  return runHandshake(link, config, true);
}

asio::awaitable<HandshakeResult> serverHandshake(Link& link, const HandshakeConfig& config) {
  return runHandshake(link, config, false);
}

}  // namespace gossamer::net::wire
