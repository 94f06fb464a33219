// The parts of the handshake (handshake.h) that need no link: the transcript each side's HMAC
// tag and identity signature cover, the crypto around it, and the comparison of two
// introductions. Internal to net/wire.
#pragma once

#include <cstddef>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "net/errors.h"
#include "net/wire/codec.h"

namespace gossamer::net::wire::handshake_detail {

using Bytes = std::vector<std::byte>;

// T(role): what each side's tag and signature cover: a domain string, the role, both
// introductions (identity keys included) and nonces, and the client's channel, length-prefixed, so
// that no two different field sequences encode to the same bytes. Both hellos and both nonces are
// in it, so a tag is bound to this exchange; the role keeps the server's tag from passing as the
// client's.
Bytes transcript(std::string_view role, const PeerInfo& client, const Bytes& clientNonce,
                 std::uint8_t channel, const PeerInfo& server, const Bytes& serverNonce);
bool hmacSha256(std::span<const std::byte> secret, const Bytes& message, Bytes& tag);
bool randomNonce(Bytes& nonce);
// Constant-time comparison of a computed tag with a received one of the right length.
bool tagsEqual(const Bytes& expected, const Bytes& received);

// Remote-controlled text made safe for a log line: printable ASCII, bounded length.
std::string printable(std::string_view text);

struct Mismatch {
  Errc error;
  RefusalCode code;
  std::string reason;  // in this side's words ("here" / "remote")
  std::string wire;    // in words the remote reads correctly
};

// The protocol versions when they differ: checked before anything else, since a peer of
// another version may not even speak the same transcript.
std::optional<Mismatch> findVersionMismatch(const PeerInfo& self, const PeerInfo& remote);
// The first incompatibility between this side's and the remote's introduction (protocol
// version, cluster id, model fingerprint), or none.
std::optional<Mismatch> findMismatch(const PeerInfo& self, const PeerInfo& remote);
// What is wrong with a remote's introduction as a message (nonce or identity key length, text
// lengths), if anything.
std::optional<std::string> checkIntroduction(const PeerInfo& info, const Bytes& nonce);
const char* messageName(const HandshakeMessage& message);
Errc errorOf(RefusalCode code);

}  // namespace gossamer::net::wire::handshake_detail
