// What a peer proves itself with: the cluster secret (membership: wire/handshake.h's HMAC) and
// its own identity key, an Ed25519 key pair made on first start and kept beside its checkpoints.
// Every handshake proves both: the secret that the peer belongs, the identity key that it is the
// peer whose id it claims. An id is bound to the first key that authenticated it (IdentityBook);
// a later peer claiming that id with another key is refused, so no member can pose as another.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

struct ssl_ctx_st;  // OpenSSL's SSL_CTX

namespace gossamer::net::wire {

inline constexpr std::size_t kIdentityKeyBytes = 32;  // an Ed25519 public key
inline constexpr std::size_t kSignatureBytes = 64;    // an Ed25519 signature

using IdentityKey = std::array<std::byte, kIdentityKeyBytes>;

// A short, stable name of a public key for logs: the first 8 bytes of its SHA-256, in hex.
std::string fingerprintOf(const IdentityKey& key);

// A peer's Ed25519 key pair. Immutable once made; safe to share across threads.
class Identity {
 public:
  ~Identity();
  Identity(const Identity&) = delete;
  Identity& operator=(const Identity&) = delete;

  // A fresh key pair (OpenSSL's random source). Throws gossamer::Error if it fails.
  static std::shared_ptr<const Identity> generate();
  // The key pair in `path` (PKCS#8 PEM); when the file does not exist, a fresh one written there
  // with mode 0600 (atomically: a temporary file renamed), its directory made if needed. Throws
  // gossamer::Error naming the path for an unreadable or corrupt file, a key that is not
  // Ed25519, or a directory it cannot write; never puts key material in a message.
  static std::shared_ptr<const Identity> loadOrCreate(const std::string& path);

  const IdentityKey& publicKey() const { return publicKey_; }
  std::string fingerprint() const { return fingerprintOf(publicKey_); }
  // The Ed25519 signature of `message`; empty if the crypto library fails.
  std::vector<std::byte> sign(std::span<const std::byte> message) const;
  // Puts this key pair into an OpenSSL context, with a certificate of it that it signs itself
  // (valid from an hour ago for a day; made at each call, never stored), for TLS between
  // identities (net/relay). False when OpenSSL fails.
  bool installInto(ssl_ctx_st* context) const;

 private:
  struct Key;
  explicit Identity(std::unique_ptr<Key> key);
  std::unique_ptr<Key> key_;
  IdentityKey publicKey_{};
};

// Whether `signature` is `key`'s Ed25519 signature of `message`.
bool verifySignature(std::span<const std::byte> key, std::span<const std::byte> message,
                     std::span<const std::byte> signature);

// The bindings of peer ids to identity keys this peer knows: learned from handshakes and from
// member records, never forgotten while the process lives (a member that leaves or crashes keeps
// its binding, so it may come back only with its own key), bounded in size. Thread-safe.
class IdentityBook {
 public:
  enum class Verdict { bound, known, conflict };
  static constexpr std::size_t kMaxBindings = 1 << 16;

  // Binds `peer` to `key` when it has no binding yet (bound), agrees with the binding (known),
  // or refuses: `peer` is bound to another key (conflict). A full book binds nothing more
  // (known for the bound, conflict for the rest: an unbounded book is a memory attack).
  Verdict bind(std::uint64_t peer, const IdentityKey& key);
  std::optional<IdentityKey> keyOf(std::uint64_t peer) const;
  std::size_t size() const;

 private:
  mutable std::mutex mutex_;
  std::map<std::uint64_t, IdentityKey> keys_;
};

// The identity key in `bytes` when it has the right length.
std::optional<IdentityKey> identityKeyFrom(std::span<const std::byte> bytes);

// Reads the cluster secret from `path`: the file's bytes with trailing "\n" / "\r\n" removed
// (so `echo secret > file` and an editor's file agree). Throws gossamer::Error naming the path
// (never the contents) when the file is missing, not a regular file, larger than 64 KiB or empty.
// Logs a warning when the file is readable by group or others.
std::vector<std::byte> readSecretFile(const std::string& path);

}  // namespace gossamer::net::wire
