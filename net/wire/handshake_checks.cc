#include "net/wire/handshake_checks.h"

#include <algorithm>
#include <utility>

#include <fmt/format.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/rand.h>

#include "net/wire/handshake.h"
#include "net/wire/identity.h"

namespace gossamer::net::wire::handshake_detail {
namespace {

// Domain separation: a tag made for this protocol cannot be valid in any other use of the secret.
constexpr std::string_view kDomain = "gossamer handshake v2";
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
  appendBytes(out, info.identityKey);
}

}  // namespace

Bytes transcript(std::string_view role, const PeerInfo& client, const Bytes& clientNonce,
                 std::uint8_t channel, const PeerInfo& server, const Bytes& serverNonce) {
  Bytes out;
  out.reserve(512);
  appendText(out, kDomain);
  appendText(out, role);
  appendInfo(out, client);
  appendBytes(out, clientNonce);
  appendU64(out, channel);
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

bool tagsEqual(const Bytes& expected, const Bytes& received) {
  return received.size() == expected.size() &&
         CRYPTO_memcmp(expected.data(), received.data(), expected.size()) == 0;
}

// ---- reasons --------------------------------------------------------------------------------

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

namespace {

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

}  // namespace

std::optional<Mismatch> findVersionMismatch(const PeerInfo& self, const PeerInfo& remote) {
  if (self.protocolVersion == remote.protocolVersion) return std::nullopt;
  return findMismatch(self, remote);
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

std::optional<std::string> checkIntroduction(const PeerInfo& info, const Bytes& nonce) {
  if (nonce.size() != kNonceBytes) {
    return fmt::format("nonce has {} bytes, expected {}", nonce.size(), kNonceBytes);
  }
  if (info.identityKey.size() != kIdentityKeyBytes) {
    return fmt::format("identity key has {} bytes, expected {} (Ed25519)", info.identityKey.size(),
                       kIdentityKeyBytes);
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
    case RefusalCode::identity:
      return Errc::identityMismatch;
    case RefusalCode::protocol:
      break;
  }
  return Errc::malformedMessage;
}

}  // namespace gossamer::net::wire::handshake_detail
