// Internal to the tcp backend: the TLS context behind tls.h's opaque TlsContext, the TLS stream
// of a link (OpenSSL driven on an Asio socket) and its handshake and error mapping. Only
// net/tcp/*.cc include this header: it pulls in OpenSSL.
#pragma once

#include <array>
#include <cstddef>
#include <span>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include <asio/awaitable.hpp>
#include <asio/ip/tcp.hpp>
#include <asio/ssl/context.hpp>
#include <openssl/ssl.h>

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

// One TLS connection over a TCP socket, driven by OpenSSL directly: OpenSSL reads records
// straight from the (non-blocking) socket into its own buffer (read-ahead, large buffer), and
// writes records into a batch that goes to the socket in large writes. (Asio's ssl::stream moves
// one record of at most 16 KiB per socket operation through a BIO pair: a quarter of the
// plaintext transport's bulk throughput on loopback.) OpenSSL is the record layer; this class
// only moves bytes and waits for the socket. Io thread only; one read and one write may be in
// progress at once (OpenSSL calls never overlap on one thread).
class Stream {
 public:
  // Adopts a connected socket. Misuse-free: a failure to set up OpenSSL shows as the first
  // operation's error (Errc::cryptoFailure).
  Stream(asio::ip::tcp::socket socket, TlsContext& context);
  ~Stream();
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;

  asio::ip::tcp::socket& socket() { return socket_; }
  asio::any_io_executor get_executor() { return socket_.get_executor(); }

  // The TLS handshake as client or server (OpenSSL's error in asio's SSL category, or the
  // socket's). Flushes whatever OpenSSL wrote (an alert too) before returning.
  asio::awaitable<std::error_code> handshakeRaw(bool client);
  // Encrypts and writes all of `buffers` (small ones are gathered into one record). Returns the
  // plaintext bytes taken and the first error.
  asio::awaitable<std::pair<std::error_code, std::size_t>> write(
      std::span<const asio::const_buffer> buffers);
  // Reads at least `atLeast` and at most out.size() plaintext bytes. Returns the bytes read and
  // the error that stopped it (asio::error::eof after close_notify).
  asio::awaitable<std::pair<std::error_code, std::size_t>> read(std::span<std::byte> out,
                                                                std::size_t atLeast);

 private:
  // Encrypts `bytes` into pending_ (never blocks).
  std::error_code encrypt(const void* data, std::size_t bytes);
  // Writes pending_ to the socket.
  asio::awaitable<std::error_code> flush();
  // The error of a failed OpenSSL call that returned `ret` (reads errno and the error queue).
  std::error_code failure(int ret);

  asio::ip::tcp::socket socket_;
  SSL* ssl_ = nullptr;
  std::vector<unsigned char> pending_;  // encrypted records not yet written to the socket
  std::vector<unsigned char> spare_;    // the last batch's buffer, reused
  std::vector<unsigned char> staging_;  // small plaintext buffers gathered into one record
};

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
