#include "net/tcp/tls.h"

#include <cstring>
#include <span>
#include <string_view>

#include <asio/experimental/as_tuple.hpp>
#include <asio/write.hpp>
#include <openssl/bio.h>
#include <asio/ssl/error.hpp>
#include <asio/use_awaitable.hpp>
#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/kdf.h>
#include <openssl/core_names.h>
#include <openssl/ssl.h>

#include "engine/base/enforce.h"
#include "engine/base/log.h"
#include "net/errors.h"
#include "net/tcp/tls_stream.h"

namespace gossamer::net::tcp {
namespace {

constexpr auto kUseTuple = asio::experimental::as_tuple(asio::use_awaitable);

constexpr std::string_view kPskIdentity = "gossamer-cluster-psk-v1";
constexpr std::string_view kPskSalt = "gossamer tls psk salt v1";
constexpr std::string_view kPskInfo = "gossamer tls 1.3 external psk v1";
// TLS_AES_128_GCM_SHA256: the suite an external PSK session is bound to (its hash is SHA-256).
constexpr unsigned char kPskSuite[] = {0x13, 0x01};
constexpr unsigned char kTlsHandshakeRecord = 0x16;
// What a TLS listener answers a plaintext remote with before closing: a fatal TLS alert
// (protocol_version), unencrypted as alerts before a handshake are. A gossamer peer without TLS
// recognizes it (Errc::peerSpeaksTls); anything else sees a closed connection.
constexpr unsigned char kProtocolVersionAlert[] = {0x15, 0x03, 0x03, 0x00, 0x02, 0x02, 0x46};

// PSK = HKDF-SHA256(secret, salt, info): the secret itself never reaches TLS.
bool derivePsk(std::span<const std::byte> secret, std::array<unsigned char, 32>& out) {
  EVP_KDF* kdf = EVP_KDF_fetch(nullptr, "HKDF", nullptr);
  if (kdf == nullptr) return false;
  EVP_KDF_CTX* ctx = EVP_KDF_CTX_new(kdf);
  EVP_KDF_free(kdf);
  if (ctx == nullptr) return false;
  char digest[] = "SHA256";
  const OSSL_PARAM params[] = {
      OSSL_PARAM_construct_utf8_string(OSSL_KDF_PARAM_DIGEST, digest, 0),
      OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_KEY,
                                        const_cast<std::byte*>(secret.data()), secret.size()),
      OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_SALT, const_cast<char*>(kPskSalt.data()),
                                        kPskSalt.size()),
      OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_INFO, const_cast<char*>(kPskInfo.data()),
                                        kPskInfo.size()),
      OSSL_PARAM_construct_end()};
  const bool ok = EVP_KDF_derive(ctx, out.data(), out.size(), params) == 1;
  EVP_KDF_CTX_free(ctx);
  return ok;
}

// The ex_data slot of an SSL_CTX that points back at its TlsContext (the app_data slot is
// Asio's: it keeps its verify callback there).
int contextIndex() {
  static const int index = SSL_CTX_get_ex_new_index(0, nullptr, nullptr, nullptr, nullptr);
  return index;
}

const TlsContext* contextOf(SSL* ssl) {
  return static_cast<const TlsContext*>(SSL_CTX_get_ex_data(SSL_get_SSL_CTX(ssl), contextIndex()));
}

// A TLS 1.3 session carrying the external PSK, or null.
SSL_SESSION* pskSession(SSL* ssl) {
  const TlsContext* context = contextOf(ssl);
  const SSL_CIPHER* cipher = SSL_CIPHER_find(ssl, kPskSuite);
  if (context == nullptr || !context->usesPsk() || cipher == nullptr) return nullptr;
  SSL_SESSION* session = SSL_SESSION_new();
  if (session == nullptr) return nullptr;
  if (SSL_SESSION_set1_master_key(session, context->psk().data(), context->psk().size()) != 1 ||
      SSL_SESSION_set_cipher(session, cipher) != 1 ||
      SSL_SESSION_set_protocol_version(session, TLS1_3_VERSION) != 1) {
    SSL_SESSION_free(session);
    return nullptr;
  }
  return session;
}

// Client: offer the PSK (SSL_CTX_set_psk_use_session_callback). `md` is set after a
// HelloRetryRequest: the PSK is offered again only if its hash matches the chosen suite's.
int usePskSession(SSL* ssl, const EVP_MD* md, const unsigned char** id, std::size_t* idLength,
                  SSL_SESSION** session) {
  *session = pskSession(ssl);
  if (*session == nullptr) return 0;
  const EVP_MD* own = SSL_CIPHER_get_handshake_digest(SSL_SESSION_get0_cipher(*session));
  if (md != nullptr && (own == nullptr || EVP_MD_get_type(md) != EVP_MD_get_type(own))) {
    SSL_SESSION_free(*session);
    *session = nullptr;
    *id = nullptr;
    *idLength = 0;
    return 1;
  }
  *id = reinterpret_cast<const unsigned char*>(kPskIdentity.data());
  *idLength = kPskIdentity.size();
  return 1;
}

// Server: the session for the identity a client offered, or none (then the handshake fails:
// this server has no certificate to fall back to).
int findPskSession(SSL* ssl, const unsigned char* identity, std::size_t length,
                   SSL_SESSION** session) {
  *session = nullptr;
  if (length != kPskIdentity.size() || std::memcmp(identity, kPskIdentity.data(), length) != 0)
    return 1;
  *session = pskSession(ssl);
  return *session != nullptr ? 1 : 0;
}

// OpenSSL's reason for an error of the SSL category (never key material).
unsigned long reasonOf(const std::error_code& ec) {
  return ERR_GET_REASON(static_cast<unsigned long>(static_cast<unsigned int>(ec.value())));
}

bool isSslError(const std::error_code& ec) {
  return ec.category() == asio::error::get_ssl_category();
}

bool isCloseMidHandshake(const std::error_code& ec) {
  return ec == asio::ssl::error::stream_truncated || ec == asio::error::eof ||
         ec == asio::error::connection_reset || ec == asio::error::broken_pipe;
}

// Record-layer errors a client gets when the server answers with something that is not TLS.
bool isNotTls(const std::error_code& ec) {
  if (!isSslError(ec)) return false;
  const unsigned long reason = reasonOf(ec);
  return reason == SSL_R_WRONG_VERSION_NUMBER || reason == SSL_R_PACKET_LENGTH_TOO_LONG ||
         reason == SSL_R_UNKNOWN_PROTOCOL || reason == SSL_R_RECORD_LENGTH_MISMATCH;
}

// Records written to the socket at once, and plaintext encrypted per batch (bounds pending_).
constexpr std::size_t kBatchBytes = 256 * 1024;
// Buffers smaller than this are gathered into one record with their neighbours.
constexpr std::size_t kGatherBytes = 16 * 1024;
// OpenSSL's read buffer: one recv() takes up to this much (read-ahead).
constexpr std::size_t kReadBufferBytes = 256 * 1024;

// Lets each write move as much as the kernel takes (see tcp_transport.cc).
std::size_t transferAllUnchunked(const std::error_code& ec, std::size_t /*transferred*/) {
  return ec ? 0 : std::size_t(1) << 40;
}

// The write side of an SSL: a BIO that appends what OpenSSL writes to a vector (Stream's
// pending_), so that records leave in large socket writes.
int batchWrite(BIO* bio, const char* data, std::size_t size, std::size_t* written) {
  auto* out = static_cast<std::vector<unsigned char>*>(BIO_get_data(bio));
  out->insert(out->end(), data, data + size);
  *written = size;
  return 1;
}

long batchControl(BIO* /*bio*/, int command, long /*number*/, void* /*pointer*/) {
  return command == BIO_CTRL_FLUSH ? 1 : 0;  // flushing is Stream::flush()'s job
}

int batchCreate(BIO* bio) {
  BIO_set_init(bio, 1);
  return 1;
}

const BIO_METHOD* batchMethod() {
  static BIO_METHOD* method = [] {
    BIO_METHOD* m = BIO_meth_new(BIO_get_new_index() | BIO_TYPE_SOURCE_SINK, "gossamer batch");
    if (m != nullptr) {
      BIO_meth_set_write_ex(m, batchWrite);
      BIO_meth_set_ctrl(m, batchControl);
      BIO_meth_set_create(m, batchCreate);
    }
    return m;
  }();
  return method;
}

std::string mismatchAdvice(std::string_view remote, std::string_view peerSpeaks) {
  return fmt::format("the peer at {} speaks {}; start both with or without --insecure-plaintext",
                     remote, peerSpeaks);
}

}  // namespace

TlsContext::TlsContext(const TlsConfig& config) : context_(asio::ssl::context::tls) {
  SSL_CTX* ctx = context_.native_handle();
  GOSSAMER_ENFORCE(SSL_CTX_set_min_proto_version(ctx, TLS1_3_VERSION) == 1 &&
                       SSL_CTX_set_max_proto_version(ctx, TLS1_3_VERSION) == 1 &&
                       SSL_CTX_set_ciphersuites(
                           ctx, "TLS_AES_128_GCM_SHA256:TLS_AES_256_GCM_SHA384") == 1,
                   "OpenSSL cannot restrict TLS to version 1.3 with AES-GCM");
  SSL_CTX_set_read_ahead(ctx, 1);
  SSL_CTX_set_default_read_buffer_len(ctx, kReadBufferBytes);
  SSL_CTX_set_num_tickets(ctx, 0);  // no resumption: every link runs a full handshake
  SSL_CTX_set_options(ctx, SSL_OP_NO_TICKET);
  SSL_CTX_set_max_early_data(ctx, 0);  // no 0-RTT data, which a recording could replay
  GOSSAMER_ENFORCE(contextIndex() >= 0 && SSL_CTX_set_ex_data(ctx, contextIndex(), this) == 1,
                   "OpenSSL cannot attach data to an SSL context");
  std::error_code ec;
  if (config.mode == TlsConfig::Mode::psk) {
    GOSSAMER_ENFORCE(!config.secret.empty(), "TLS with a pre-shared key needs the cluster secret");
    GOSSAMER_ENFORCE(derivePsk(config.secret, psk_), "OpenSSL HKDF failed to derive the TLS key");
    usesPsk_ = true;
    SSL_CTX_set_psk_use_session_callback(ctx, usePskSession);
    SSL_CTX_set_psk_find_session_callback(ctx, findPskSession);
    description_ =
        "TLS 1.3 (AES-GCM, ephemeral key exchange), both ends authenticated by a pre-shared key "
        "derived from the cluster secret";
    return;
  }
  const auto check = [&ec](const std::string& what, const std::string& path) {
    GOSSAMER_ENFORCE(!path.empty(), "TLS with certificates needs {}", what);
    GOSSAMER_ENFORCE(!ec, "cannot use {} '{}': {}", what, path, ec.message());
  };
  check("--tls-cert (this peer's certificate chain, PEM)", config.certFile);
  context_.use_certificate_chain_file(config.certFile, ec);
  check("--tls-cert (this peer's certificate chain, PEM)", config.certFile);
  check("--tls-key (this peer's private key, PEM)", config.keyFile);
  context_.use_private_key_file(config.keyFile, asio::ssl::context::pem, ec);
  check("--tls-key (this peer's private key, PEM)", config.keyFile);
  GOSSAMER_ENFORCE(SSL_CTX_check_private_key(ctx) == 1,
                   "the private key '{}' does not belong to the certificate '{}'", config.keyFile,
                   config.certFile);
  check("--tls-ca (the certificate authorities of the cluster, PEM)", config.caFile);
  context_.load_verify_file(config.caFile, ec);
  check("--tls-ca (the certificate authorities of the cluster, PEM)", config.caFile);
  context_.set_verify_mode(asio::ssl::verify_peer | asio::ssl::verify_fail_if_no_peer_cert);
  ERR_clear_error();
  description_ = fmt::format(
      "TLS 1.3 (AES-GCM, ephemeral key exchange), both ends authenticated by certificates "
      "signed by '{}'",
      config.caFile);
}

TlsContext::~TlsContext() { OPENSSL_cleanse(psk_.data(), psk_.size()); }

std::shared_ptr<TlsContext> makeTlsContext(const TlsConfig& config) {
  return std::make_shared<TlsContext>(config);
}

std::string describe(const TlsContext& context) { return context.description(); }

namespace tls {

Stream::Stream(asio::ip::tcp::socket socket, TlsContext& context) : socket_(std::move(socket)) {
  std::error_code ec;
  socket_.non_blocking(true, ec);  // OpenSSL's socket BIO reads it directly
  const BIO_METHOD* method = batchMethod();
  if (ec || method == nullptr) return;
  ssl_ = SSL_new(context.native().native_handle());
  if (ssl_ == nullptr) return;
  BIO* in = BIO_new_socket(socket_.native_handle(), BIO_NOCLOSE);
  BIO* out = BIO_new(method);
  if (in == nullptr || out == nullptr) {
    BIO_free(in);
    BIO_free(out);
    SSL_free(ssl_);
    ssl_ = nullptr;
    return;
  }
  BIO_set_data(out, &pending_);
  SSL_set_bio(ssl_, in, out);  // the SSL owns both
}

Stream::~Stream() { SSL_free(ssl_); }

std::error_code Stream::failure(int ret) {
  const int kind = SSL_get_error(ssl_, ret);
  const int systemError = errno;
  const unsigned long queued = ERR_get_error();
  ERR_clear_error();
  if (kind == SSL_ERROR_ZERO_RETURN) return asio::error::eof;  // close_notify
  if (queued != 0) {
    if (ERR_GET_REASON(queued) == SSL_R_UNEXPECTED_EOF_WHILE_READING)
      return asio::ssl::error::stream_truncated;
    return {static_cast<int>(queued), asio::error::get_ssl_category()};
  }
  if (kind == SSL_ERROR_SYSCALL && systemError != 0)
    return {systemError, asio::error::get_system_category()};
  return asio::error::eof;
}

asio::awaitable<std::error_code> Stream::flush() {
  // The batch leaves pending_ first: OpenSSL may append to pending_ (an alert from a failed
  // read) while the write is under way.
  while (!pending_.empty()) {
    std::vector<unsigned char> batch = std::exchange(pending_, std::move(spare_));
    pending_.clear();
    auto [ec, written] = co_await asio::async_write(socket_, asio::buffer(batch),
                                                    transferAllUnchunked, kUseTuple);
    batch.clear();
    spare_ = std::move(batch);  // keeps its capacity for the next batch
    if (ec) co_return ec;
  }
  co_return std::error_code{};
}

asio::awaitable<std::error_code> Stream::handshakeRaw(bool client) {
  if (ssl_ == nullptr) co_return Errc::cryptoFailure;
  if (client) {
    SSL_set_connect_state(ssl_);
  } else {
    SSL_set_accept_state(ssl_);
  }
  for (;;) {
    ERR_clear_error();
    const int ret = SSL_do_handshake(ssl_);
    const bool wantRead = ret != 1 && SSL_get_error(ssl_, ret) == SSL_ERROR_WANT_READ;
    // Taken before the flush: another coroutine of this thread may use the error queue.
    const std::error_code error = ret == 1 || wantRead ? std::error_code{} : failure(ret);
    const std::error_code flushed = co_await flush();  // our flight, or the alert we failed with
    if (error) co_return error;
    if (flushed) co_return flushed;
    if (ret == 1) co_return std::error_code{};
    auto [waited] = co_await socket_.async_wait(asio::socket_base::wait_read, kUseTuple);
    if (waited) co_return waited;
  }
}

std::error_code Stream::encrypt(const void* data, std::size_t bytes) {
  if (bytes == 0) return {};
  ERR_clear_error();
  std::size_t written = 0;
  const int ret = SSL_write_ex(ssl_, data, bytes, &written);
  if (ret != 1) return failure(ret);
  return written == bytes ? std::error_code{} : std::error_code(Errc::cryptoFailure);
}

asio::awaitable<std::pair<std::error_code, std::size_t>> Stream::write(
    std::span<const asio::const_buffer> buffers) {
  if (ssl_ == nullptr) co_return std::pair{std::error_code(Errc::cryptoFailure), std::size_t{0}};
  std::size_t taken = 0;
  const auto encryptStaged = [this]() {
    const std::error_code ec = encrypt(staging_.data(), staging_.size());
    staging_.clear();
    return ec;
  };
  for (const asio::const_buffer& buffer : buffers) {
    const auto* data = static_cast<const unsigned char*>(buffer.data());
    if (buffer.size() < kGatherBytes) {
      staging_.insert(staging_.end(), data, data + buffer.size());
      taken += buffer.size();
      if (staging_.size() < kGatherBytes) continue;
      if (auto ec = encryptStaged()) co_return std::pair{ec, taken};
      continue;
    }
    if (auto ec = encryptStaged()) co_return std::pair{ec, taken};
    for (std::size_t offset = 0; offset < buffer.size(); offset += kBatchBytes) {
      const std::size_t bytes = std::min(kBatchBytes, buffer.size() - offset);
      if (auto ec = encrypt(data + offset, bytes)) co_return std::pair{ec, taken};
      taken += bytes;
      if (pending_.size() >= kBatchBytes) {
        if (auto ec = co_await flush()) co_return std::pair{ec, taken};
      }
    }
  }
  if (auto ec = encryptStaged()) co_return std::pair{ec, taken};
  co_return std::pair{co_await flush(), taken};
}

asio::awaitable<std::pair<std::error_code, std::size_t>> Stream::read(std::span<std::byte> out,
                                                                      std::size_t atLeast) {
  if (ssl_ == nullptr) co_return std::pair{std::error_code(Errc::cryptoFailure), std::size_t{0}};
  std::size_t got = 0;
  while (got < atLeast) {
    ERR_clear_error();
    std::size_t read = 0;
    const int ret = SSL_read_ex(ssl_, out.data() + got, out.size() - got, &read);
    if (ret == 1) {
      got += read;
      continue;
    }
    if (SSL_get_error(ssl_, ret) != SSL_ERROR_WANT_READ) co_return std::pair{failure(ret), got};
    auto [waited] = co_await socket_.async_wait(asio::socket_base::wait_read, kUseTuple);
    if (waited) co_return std::pair{waited, got};
  }
  co_return std::pair{std::error_code{}, got};
}

asio::awaitable<std::error_code> handshake(Stream& stream, bool client, const std::string& remote) {
  auto logger = log::get("net");
  const char* side = client ? "client" : "server";
  if (!client) {
    // A plaintext gossamer peer starts with its frame magic, not a TLS record: say so instead
    // of failing in OpenSSL's words.
    auto [waitError] = co_await stream.socket().async_wait(asio::socket_base::wait_read,
                                                               kUseTuple);
    if (waitError) co_return waitError;
    unsigned char first = 0;
    std::error_code ec;
    const std::size_t peeked = stream.socket().receive(asio::buffer(&first, 1),
                                                           asio::socket_base::message_peek, ec);
    if (ec) co_return ec;
    if (peeked == 0) co_return asio::error::eof;
    if (first != kTlsHandshakeRecord) {
      // The accepting side's refusals are logged rate-limited by net/wire's handshake server.
      logger->debug("TLS handshake (server side) with {} refused: {}", remote,
                    mismatchAdvice(remote, "plaintext"));
      // Best effort, we are failing anyway: the alert, then what the remote sent is read and
      // dropped, so that closing sends a FIN (not a reset that could overtake the alert).
      co_await asio::async_write(stream.socket(), asio::buffer(kProtocolVersionAlert),
                                 kUseTuple);
      std::array<unsigned char, 4096> drain;
      while (stream.socket().available(ec) > 0 && !ec)
        stream.socket().receive(asio::buffer(drain), 0, ec);
      co_return Errc::peerSpeaksPlaintext;
    }
  }
  const std::error_code ec = co_await stream.handshakeRaw(client);
  if (!ec) co_return ec;
  if (ec == asio::error::operation_aborted || ec == asio::error::bad_descriptor) co_return ec;
  if (client && (isNotTls(ec) || isCloseMidHandshake(ec))) {
    logger->warn("TLS handshake (client side) with {} failed: {} ({})", remote,
                 mismatchAdvice(remote, "plaintext (it answered without TLS or hung up)"),
                 ec.message());
    co_return Errc::peerSpeaksPlaintext;
  }
  const auto level = client ? spdlog::level::warn : spdlog::level::debug;
  if (!isSslError(ec)) {
    logger->log(level, "TLS handshake ({} side) with {} failed: {}", side, remote, ec.message());
    co_return ec;
  }
  logger->log(level,
              "TLS handshake ({} side) with {} failed: {}: the peer does not hold this cluster's "
              "secret (or a certificate this peer trusts), or does not trust ours",
              side, remote, ec.message());
  co_return Errc::authenticationFailed;
}

std::error_code afterHandshake(std::error_code ec) {
  if (!ec) return ec;
  if (ec == asio::ssl::error::stream_truncated) return asio::error::eof;
  if (!isSslError(ec)) return ec;
  // In TLS 1.3 a client's handshake ends before the server has checked the client's
  // certificate: the server's refusal arrives as an alert on the first read after it.
  const unsigned long reason = reasonOf(ec);
  if (reason > SSL_AD_REASON_OFFSET) {
    switch (reason - SSL_AD_REASON_OFFSET) {
      case SSL_AD_HANDSHAKE_FAILURE:
      case SSL_AD_BAD_CERTIFICATE:
      case SSL_AD_UNSUPPORTED_CERTIFICATE:
      case SSL_AD_CERTIFICATE_REVOKED:
      case SSL_AD_CERTIFICATE_EXPIRED:
      case SSL_AD_CERTIFICATE_UNKNOWN:
      case SSL_AD_UNKNOWN_CA:
      case SSL_AD_ACCESS_DENIED:
      case SSL_AD_DECRYPT_ERROR:
      case SSL_AD_CERTIFICATE_REQUIRED:
        return Errc::authenticationFailed;
      default:
        break;
    }
  }
  return Errc::tlsRecordRejected;
}

}  // namespace tls
}  // namespace gossamer::net::tcp
