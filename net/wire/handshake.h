// The handshake that opens every link: both peers prove knowledge of the shared cluster secret
// (mutual HMAC-SHA256 challenge-response with fresh nonces: membership), each proves it holds
// the identity key of the peer id it claims (an Ed25519 signature of the same transcript), and
// they check that they run the same protocol version, belong to the same cluster and train the
// same model.
//
//   client                                                      server
//   ClientHello(info_c, nonce_c)                       ->
//                                                           compares protocol versions
//                                                      <-   ServerHello(info_s, nonce_s, tag_s,
//                                                                       sig_s)
//     compares versions, verifies tag_s and sig_s, checks the server's id against its binding,
//     then compares info_s with its own
//   ClientProof(tag_c, sig_c)  or  Refusal(code, reason) ->
//                                                           verifies tag_c and sig_c, checks
//                                                           the binding, compares info_c
//                                                      <-   Accept  or  Refusal(code, reason)
//
//   tag_s = HMAC-SHA256(secret, T("server")), tag_c = HMAC-SHA256(secret, T("client")),
//   sig_s = Ed25519(server's identity key, T("server")), sig_c likewise with the client's, where
//   T(role) is an unambiguous (length-prefixed) encoding of a domain string, the role and
//   info_c, nonce_c, info_s, nonce_s (each info carries its side's public identity key). Nonces
//   are 32 bytes from OpenSSL's RAND_bytes; tags are compared in constant time (CRYPTO_memcmp).
//   A replayed hello or proof fails because the verifier's own nonce is fresh; the role label
//   stops a tag or signature being reflected back. A member that knows the secret but not
//   another's identity key cannot sign as that member, so it cannot claim its id (identity.h's
//   IdentityBook binds ids to keys). The handshake authenticates the peers, not the traffic that
//   follows it (no encryption or per-frame MAC: that is TLS's job).
//
// The protocol version is compared first (a peer of another version may not compute the same
// transcript), and named with both values; then authentication, so a peer with the wrong secret
// is told "authentication failed" and nothing else; then identity; then compatibility. Each side
// decides on its own checks; a refusal from the remote only supplies the reason when the local
// side has none of its own.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <system_error>
#include <vector>

#include <asio/awaitable.hpp>

#include "net/endpoint.h"
#include "net/transport.h"
#include "net/wire/codec.h"
#include "net/wire/identity.h"

namespace gossamer::net::wire {

// The protocol version this build speaks; peers with another version are refused. 2: identity
// keys and signatures in the handshake.
inline constexpr std::uint32_t kProtocolVersion = 2;
inline constexpr std::size_t kNonceBytes = 32;
inline constexpr std::size_t kTagBytes = 32;  // HMAC-SHA256
// Longest cluster id, host name and dtype accepted from a remote (longer: malformedMessage).
inline constexpr std::size_t kMaxIdentityText = 256;

struct HandshakeConfig {
  std::uint32_t protocolVersion = kProtocolVersion;
  std::string clusterId;
  std::uint64_t peerId = 0;
  Endpoint listen;  // where this peer accepts links, told to the remote
  ModelFingerprint model;
  std::vector<std::byte> secret;             // the cluster secret; must not be empty; never logged
  std::shared_ptr<const Identity> identity;  // this peer's key pair; must be set
  // The bindings of peer ids to identity keys: a remote whose id is bound to another key is
  // refused; one not bound yet is bound to its key when the handshake succeeds. Null: no
  // bindings are kept (a tool or test that talks to one peer); signatures are still checked.
  std::shared_ptr<IdentityBook> book;
  std::uint8_t channel = 0;  // client: what it opens the link for (told to the server)
  std::chrono::milliseconds timeout{10000};  // for the whole handshake
};

struct HandshakeResult {
  // Empty on success; otherwise Errc::authenticationFailed, identityMismatch, versionMismatch,
  // clusterMismatch, modelMismatch, handshakeTimeout, malformedMessage, unexpectedMessage,
  // cryptoFailure, or the link's error (e.g. asio::error::eof when the remote hung up).
  std::error_code error;
  // Human text for logs, empty on success: which field differs with both values ("protocol
  // version differs: 2 here vs 1 remote"), which side's proof failed, or what the remote said.
  // Never contains the secret; remote-supplied text is truncated and made printable.
  std::string reason;
  // The remote's introduction, as far as it was received (authenticated only on success).
  std::uint64_t remotePeerId = 0;
  Endpoint remoteListen;
  std::uint32_t remoteProtocolVersion = 0;
  ModelFingerprint remoteModel;
  std::optional<IdentityKey> remoteIdentity;  // set, and verified, on success
  std::uint8_t remoteChannel = 0;             // server: what the client opened the link for

  bool ok() const { return !error; }
};

// Run the client (connecting) or server (accepting) side of the handshake on `link`, which
// must be fresh (no frame sent or received yet) and belong to the executor the coroutine runs
// on. The link must outlive the returned awaitable; the config is copied. Completes within
// config.timeout (then with Errc::handshakeTimeout). On failure the refusal (if any) is sent, a
// warning naming the remote address and the reason is logged, and the link is closed; on success
// the link is open for traffic. Never throws for anything the remote does; throws gossamer::Error
// on misuse (empty secret, no identity, non-positive timeout).
asio::awaitable<HandshakeResult> clientHandshake(Link& link, const HandshakeConfig& config);
asio::awaitable<HandshakeResult> serverHandshake(Link& link, const HandshakeConfig& config);

}  // namespace gossamer::net::wire
