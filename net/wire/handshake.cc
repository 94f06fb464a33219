#include "net/wire/handshake.h"

#include <exception>
#include <filesystem>
#include <fstream>
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
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/rand.h>

#include "engine/base/enforce.h"
#include "engine/base/log.h"
#include "net/errors.h"

namespace gossamer::net::wire {
namespace {

using Bytes = std::vector<std::byte>;

// Domain separation: a tag made for this protocol cannot be valid in any other use of the secret.
constexpr std::string_view kDomain = "gossamer handshake v1";
constexpr std::size_t kMaxSecretFileBytes = 64 * 1024;
// Remote-supplied text is cut to this many characters before it reaches a reason or a log.
constexpr std::size_t kMaxReasonText = 200;

// ---- transcript and crypto ------------------------------------------------------------------

void appendU64(Bytes& out, std::uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<std::byte>(v >> (8 * i)));
}

// Length-prefixed, so that no two different field sequences encode to the same bytes.
void appendBytes(Bytes& out, std::span<const std::byte> bytes) {
  appendU64(out, bytes.size());
  out.insert(out.end(), bytes.begin(), bytes.end());
}

void appendText(Bytes& out, std::string_view text) {
  appendBytes(out, std::as_bytes(std::span(text.data(), text.size())));
}

void appendInfo(Bytes& out, const PeerInfo& info) {
  appendU64(out, info.protocolVersion);
  appendText(out, info.clusterId);
  appendU64(out, info.peerId);
  appendText(out, info.listen.host);
  appendU64(out, info.listen.port);
  appendU64(out, info.model.parameters);
  appendText(out, info.model.dtype);
  appendU64(out, info.model.layoutHash);
}

// T(role): what each side's tag covers. Both hellos and both nonces are in it, so a tag is
// bound to this exchange; the role keeps the server's tag from passing as the client's.
Bytes transcript(std::string_view role, const PeerInfo& client, const Bytes& clientNonce,
                 const PeerInfo& server, const Bytes& serverNonce) {
  Bytes out;
  out.reserve(512);
  appendText(out, kDomain);
  appendText(out, role);
  appendInfo(out, client);
  appendBytes(out, clientNonce);
  appendInfo(out, server);
  appendBytes(out, serverNonce);
  return out;
}

bool hmacSha256(std::span<const std::byte> secret, const Bytes& message, Bytes& tag) {
  tag.assign(kTagBytes, std::byte{0});
  std::size_t length = 0;
  const unsigned char* done =
      EVP_Q_mac(nullptr, "HMAC", nullptr, "SHA256", nullptr, secret.data(), secret.size(),
                reinterpret_cast<const unsigned char*>(message.data()), message.size(),
                reinterpret_cast<unsigned char*>(tag.data()), tag.size(), &length);
  return done != nullptr && length == kTagBytes;
}

bool randomNonce(Bytes& nonce) {
  nonce.assign(kNonceBytes, std::byte{0});
  return RAND_bytes(reinterpret_cast<unsigned char*>(nonce.data()),
                    static_cast<int>(nonce.size())) == 1;
}

// Constant-time comparison of a computed tag with a received one of the right length.
bool tagsEqual(const Bytes& expected, const Bytes& received) {
  return received.size() == expected.size() &&
         CRYPTO_memcmp(expected.data(), received.data(), expected.size()) == 0;
}

// ---- reasons --------------------------------------------------------------------------------

// Remote-controlled text made safe for a log line: printable ASCII, bounded length.
std::string printable(std::string_view text) {
  std::string out;
  out.reserve(std::min(text.size(), kMaxReasonText) + 3);
  for (std::size_t i = 0; i < text.size() && i < kMaxReasonText; ++i) {
    const char c = text[i];
    out.push_back(c >= 0x20 && c < 0x7f ? c : '?');
  }
  if (text.size() > kMaxReasonText) out += "...";
  return out;
}

struct Mismatch {
  Errc error;
  RefusalCode code;
  std::string reason;  // in this side's words ("here" / "remote")
  std::string wire;    // in words the remote reads correctly
};

// The first incompatibility between this side's and the remote's introduction, or none.
// `here` / `there` name the two sides in the reason text.
std::optional<std::pair<Errc, std::string>> compareInfo(const PeerInfo& self,
                                                        const PeerInfo& remote,
                                                        std::string_view here,
                                                        std::string_view there) {
  if (self.protocolVersion != remote.protocolVersion) {
    return std::pair{Errc::versionMismatch,
                     fmt::format("protocol version differs: {} {} vs {} {}", self.protocolVersion,
                                 here, remote.protocolVersion, there)};
  }
  if (self.clusterId != remote.clusterId) {
    return std::pair{Errc::clusterMismatch, fmt::format("cluster id differs: '{}' {} vs '{}' {}",
                                                        printable(self.clusterId), here,
                                                        printable(remote.clusterId), there)};
  }
  if (self.model != remote.model) {
    std::string parts;
    const auto add = [&parts](const std::string& part) {
      parts += parts.empty() ? part : ", " + part;
    };
    if (self.model.parameters != remote.model.parameters) {
      add(fmt::format("parameters {} {} vs {} {}", self.model.parameters, here,
                      remote.model.parameters, there));
    }
    if (self.model.dtype != remote.model.dtype) {
      add(fmt::format("dtype '{}' {} vs '{}' {}", printable(self.model.dtype), here,
                      printable(remote.model.dtype), there));
    }
    if (self.model.layoutHash != remote.model.layoutHash) {
      add(fmt::format("layout hash {:#018x} {} vs {:#018x} {}", self.model.layoutHash, here,
                      remote.model.layoutHash, there));
    }
    return std::pair{Errc::modelMismatch, "model fingerprint differs: " + parts};
  }
  return std::nullopt;
}

std::optional<Mismatch> findMismatch(const PeerInfo& self, const PeerInfo& remote) {
  auto local = compareInfo(self, remote, "here", "remote");
  if (!local) return std::nullopt;
  auto wire = compareInfo(self, remote, "at the refusing peer", "at yours");
  const RefusalCode code = local->first == Errc::versionMismatch   ? RefusalCode::version
                           : local->first == Errc::clusterMismatch ? RefusalCode::cluster
                                                                   : RefusalCode::model;
  return Mismatch{local->first, code, std::move(local->second), std::move(wire->second)};
}

// What is wrong with a remote's introduction as a message, if anything.
std::optional<std::string> checkIntroduction(const PeerInfo& info, const Bytes& nonce) {
  if (nonce.size() != kNonceBytes) {
    return fmt::format("nonce has {} bytes, expected {}", nonce.size(), kNonceBytes);
  }
  if (info.clusterId.size() > kMaxIdentityText || info.listen.host.size() > kMaxIdentityText ||
      info.model.dtype.size() > kMaxIdentityText) {
    return fmt::format("cluster id, host or dtype longer than {} bytes", kMaxIdentityText);
  }
  return std::nullopt;
}

const char* messageName(const HandshakeMessage& message) {
  constexpr const char* kNames[] = {"a client hello", "a server hello", "a client proof",
                                    "an accept", "a refusal"};
  return kNames[message.index()];
}

Errc errorOf(RefusalCode code) {
  switch (code) {
    case RefusalCode::authentication:
      return Errc::authenticationFailed;
    case RefusalCode::version:
      return Errc::versionMismatch;
    case RefusalCode::cluster:
      return Errc::clusterMismatch;
    case RefusalCode::model:
      return Errc::modelMismatch;
    case RefusalCode::protocol:
      break;
  }
  return Errc::malformedMessage;
}

PeerInfo introductionOf(const HandshakeConfig& config) {
  return PeerInfo{config.protocolVersion, config.clusterId, config.peerId, config.listen,
                  config.model};
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

asio::awaitable<void> Session::runClient() {
  Bytes clientNonce;
  if (!randomNonce(clientNonce)) {
    fail(Errc::cryptoFailure, "OpenSSL RAND_bytes could not produce a nonce");
    co_return;
  }
  HandshakeMessage outgoing = ClientHello{self_, clientNonce};
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
  if (auto problem = checkIntroduction(hello->info, hello->nonce)) {
    co_await refuse(Errc::malformedMessage, RefusalCode::protocol, "server hello: " + *problem);
    co_return;
  }

  // Authentication first: nothing the server says is believed before its tag verifies.
  Bytes expected;
  if (!hmacSha256(config_.secret,
                  transcript("server", self_, clientNonce, hello->info, hello->nonce), expected)) {
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
  if (auto mismatch = findMismatch(self_, hello->info)) {
    co_await refuse(mismatch->error, mismatch->code, mismatch->reason, mismatch->wire);
    co_return;
  }

  Bytes proof;
  if (!hmacSha256(config_.secret,
                  transcript("client", self_, clientNonce, hello->info, hello->nonce), proof)) {
    fail(Errc::cryptoFailure, "OpenSSL HMAC-SHA256 failed");
    co_return;
  }
  outgoing = ClientProof{proof};
  if (!co_await send(std::move(outgoing))) co_return;

  if (!co_await receive(message, "server's verdict")) co_return;
  if (std::holds_alternative<HandshakeAccept>(message)) {
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
  if (!hmacSha256(config_.secret, transcript("server", hello.info, hello.nonce, self_, serverNonce),
                  tag)) {
    fail(Errc::cryptoFailure, "OpenSSL HMAC-SHA256 failed");
    co_return;
  }
  HandshakeMessage outgoing = ServerHello{self_, serverNonce, tag};
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
  Bytes expected;
  if (!hmacSha256(config_.secret, transcript("client", hello.info, hello.nonce, self_, serverNonce),
                  expected)) {
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
  if (mismatch) {
    co_await refuse(mismatch->error, mismatch->code, mismatch->reason, mismatch->wire);
    co_return;
  }
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
                         "handshake ({} side) with {} refused: {} ({})", side,
                         link.remoteAddress(), result.reason, result.error.message());
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

std::vector<std::byte> readSecretFile(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::file_status status = fs::status(path, ec);
  GOSSAMER_ENFORCE(!ec && fs::exists(status), "cluster secret file '{}' cannot be accessed: {}",
                   path, ec ? ec.message() : std::string("no such file"));
  GOSSAMER_ENFORCE(fs::is_regular_file(status), "cluster secret file '{}' is not a regular file",
                   path);
  const std::uintmax_t size = fs::file_size(path, ec);
  GOSSAMER_ENFORCE(!ec, "cannot read the size of cluster secret file '{}': {}", path, ec.message());
  GOSSAMER_ENFORCE(size <= kMaxSecretFileBytes,
                   "cluster secret file '{}' has {} bytes; a secret file has at most {}", path,
                   size, kMaxSecretFileBytes);
  std::ifstream in(path, std::ios::binary);
  GOSSAMER_ENFORCE(in.good(), "cannot open cluster secret file '{}'", path);
  std::vector<std::byte> secret(static_cast<std::size_t>(size));
  in.read(reinterpret_cast<char*>(secret.data()), static_cast<std::streamsize>(secret.size()));
  GOSSAMER_ENFORCE(static_cast<std::uintmax_t>(in.gcount()) == size,
                   "cannot read cluster secret file '{}'", path);
  while (!secret.empty() &&
         (secret.back() == std::byte{'\n'} || secret.back() == std::byte{'\r'})) {
    secret.pop_back();
  }
  GOSSAMER_ENFORCE(!secret.empty(), "cluster secret file '{}' is empty", path);
  if ((status.permissions() & (fs::perms::group_read | fs::perms::others_read)) !=
      fs::perms::none) {
    log::get("net")->warn("cluster secret file '{}' is readable by other users; chmod 600 it",
                          path);
  }
  return secret;
}

}  // namespace gossamer::net::wire
