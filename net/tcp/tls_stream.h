// Internal to the tcp backend: the TLS context behind tls.h's opaque TlsContext, and the TLS
// steps of a link (handshake, error mapping). Only net/tcp/*.cc include this header: it pulls
// in Asio's SSL support and with it OpenSSL.
#pragma once

#include <array>
#include <string>
#include <system_error>

#include <asio/awaitable.hpp>
#include <asio/ip/tcp.hpp>
#include <asio/ssl/context.hpp>
#include <asio/ssl/stream.hpp>

#include "net/tcp/tls.h"

namespace gossamer::net::tcp {

class TlsContext final {
 public:
  // Throws gossamer::Error (see makeTlsContext).
  explicit TlsContext(const TlsConfig& config);
  // Wipes the PSK.
  ~TlsContext();
  TlsContext(const TlsContext&) = delete;
  TlsContext& operator=(const TlsContext&) = delete;

  // What asio::ssl::stream is constructed with. Thread-safe: streams only read it.
  asio::ssl::context& native() { return context_; }
  const std::string& description() const { return description_; }
  // psk mode: the derived key (32 bytes); empty span in certificate mode. Never log it.
  const std::array<unsigned char, 32>& psk() const { return psk_; }
  bool usesPsk() const { return usesPsk_; }

 private:
  asio::ssl::context context_;
  std::array<unsigned char, 32> psk_{};
  bool usesPsk_ = false;
  std::string description_;
};

namespace tls {

using Stream = asio::ssl::stream<asio::ip::tcp::socket>;

// Runs this end's TLS 1.3 handshake on a fresh stream (`client`: the connecting end). A server
// first waits for the remote's first byte and refuses a plaintext remote without starting TLS.
// Returns an empty code, or Errc::authenticationFailed, peerSpeaksPlaintext, or the socket's
// error (operation_aborted when the link was closed meanwhile); a failure is logged as a
// warning naming `remote` and OpenSSL's reason. Io thread; never throws for what the remote
// does.
asio::awaitable<std::error_code> handshake(Stream& stream, bool client, const std::string& remote);

// Maps an error of a read or write after the handshake: an alert refusing this end's
// certificate (TLS 1.3 sends it after the client's handshake ended) becomes
// Errc::authenticationFailed; any other TLS-level error (a record that fails its AEAD tag, a
// malformed record) becomes Errc::tlsRecordRejected; a TCP close without
// TLS close_notify becomes asio::error::eof (a remote that closes its socket, like the plaintext
// backend's close()); anything else is returned as is.
std::error_code afterHandshake(std::error_code ec);

}  // namespace tls
}  // namespace gossamer::net::tcp
