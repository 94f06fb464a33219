// net::relay::SecureStream: TLS 1.3 between two peers' identity keys over a byte stream that
// another member carries (a relay between two peers that cannot reach each other), so that the
// member in the middle forwards ciphertext it can neither read nor forge, and cannot pose as
// either end.
//
// It is driven by hand, not by a socket: bytes that came from the other end go in (feed()),
// records for the other end come out (takeOutgoing()); plaintext goes the other way (write(),
// takeIncoming()). OpenSSL runs over a pair of memory BIOs. Each end presents a certificate
// self-signed by its Ed25519 identity key (made per stream, never stored; wire::Identity), and
// accepts the other's only when its public key is the one it expects: the key its IdentityBook
// binds to the peer id it means to reach. There is no certificate authority: the binding is
// the trust. AES-GCM only, no session tickets, no resumption.
//
// Errors (std::error_code values; after one, every call returns it and nothing more moves):
// - the handshake fails (the other end holds another key, is not TLS 1.3, or sent an alert):
//   Errc::authenticationFailed; reason() says OpenSSL's why;
// - a record fails its integrity check (bytes altered, dropped, replayed or reordered on the
//   way): Errc::tlsRecordRejected;
// - the other end closed the stream (a TLS close_notify): asio::error::eof.
// Not thread-safe: one owner drives it.
#pragma once

#include <cstddef>
#include <memory>
#include <span>
#include <string>
#include <system_error>
#include <vector>

#include "net/wire/identity.h"

namespace gossamer::net::relay {

class SecureStream {
 public:
  // The client speaks first: its first flight is in takeOutgoing() at once.
  enum class Role { client, server };

  // Throws gossamer::Error when OpenSSL cannot set the stream up (no key material in the text).
  SecureStream(Role role, const wire::Identity& self, const wire::IdentityKey& expectedRemote);
  ~SecureStream();
  SecureStream(const SecureStream&) = delete;
  SecureStream& operator=(const SecureStream&) = delete;

  // Bytes from the other end, in the order it sent them (any split).
  std::error_code feed(std::span<const std::byte> bytes);
  // Plaintext for the other end; held until the handshake is done, then encrypted.
  std::error_code write(std::span<const std::byte> plaintext);
  // Closes the stream: a close_notify for the other end goes to takeOutgoing().
  void close();

  // The records for the other end made so far (handshake and application data), moved out.
  std::vector<std::byte> takeOutgoing();
  // Whether records for the other end wait in takeOutgoing().
  bool pendingOutgoing() const;
  // The plaintext the other end sent so far, moved out.
  std::vector<std::byte> takeIncoming();

  bool established() const;
  std::error_code error() const;
  // Why the handshake failed (OpenSSL's reason), empty otherwise.
  const std::string& reason() const;

 private:
  struct Tls;
  std::unique_ptr<Tls> tls_;
};

}  // namespace gossamer::net::relay
