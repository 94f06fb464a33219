#include "net/relay/secure_stream.h"

#include <algorithm>
#include <utility>

#include <asio/error.hpp>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>

#include "engine/base/enforce.h"
#include "net/errors.h"

namespace gossamer::net::relay {
namespace {

struct SslCtxFree {
  void operator()(SSL_CTX* c) const { SSL_CTX_free(c); }
};
struct SslFree {
  void operator()(SSL* s) const { SSL_free(s); }
};

// OpenSSL's queued errors as one line (and the queue emptied).
std::string openSslErrors() {
  std::string text;
  while (const unsigned long code = ERR_get_error()) {
    char buffer[256];
    ERR_error_string_n(code, buffer, sizeof buffer);
    if (!text.empty()) text += "; ";
    text += buffer;
  }
  return text;
}

}  // namespace

struct SecureStream::Tls {
  std::unique_ptr<SSL_CTX, SslCtxFree> context;
  std::unique_ptr<SSL, SslFree> ssl;
  BIO* in = nullptr;   // owned by ssl: what came from the other end
  BIO* out = nullptr;  // owned by ssl: what goes to it
  wire::IdentityKey expected{};
  bool keyMatched = false;
  bool established = false;
  std::error_code error;
  std::string reason;
  std::vector<std::byte> pending;  // plaintext written before the handshake ended
  std::vector<std::byte> incoming;

  // At depth 0 (the other end's own certificate) accepts exactly the expected key, whatever the
  // chain checks say (the certificate is self-signed by design); refuses anything else.
  static int verify(int /*preverified*/, X509_STORE_CTX* store) {
    if (X509_STORE_CTX_get_error_depth(store) != 0) return 0;
    auto* ssl =
        static_cast<SSL*>(X509_STORE_CTX_get_ex_data(store, SSL_get_ex_data_X509_STORE_CTX_idx()));
    auto* self = static_cast<Tls*>(SSL_get_app_data(ssl));
    EVP_PKEY* key = X509_get0_pubkey(X509_STORE_CTX_get_current_cert(store));
    wire::IdentityKey raw{};
    std::size_t length = raw.size();
    const bool matches = key != nullptr && EVP_PKEY_is_a(key, "ED25519") == 1 &&
                         EVP_PKEY_get_raw_public_key(
                             key, reinterpret_cast<unsigned char*>(raw.data()), &length) == 1 &&
                         length == raw.size() && raw == self->expected;
    if (!matches) {
      self->reason = "the other end's identity key is not the one bound to the peer it claims";
      return 0;
    }
    self->keyMatched = true;
    X509_STORE_CTX_set_error(store, X509_V_OK);
    return 1;
  }

  void fail(std::error_code code, std::string why) {
    if (error) return;
    error = code;
    if (reason.empty()) reason = std::move(why);
  }

  // Runs the handshake, then moves pending plaintext out and received plaintext in, until
  // OpenSSL needs more bytes from the other end.
  void pump() {
    if (error) return;
    if (!established) {
      const int result = SSL_do_handshake(ssl.get());
      if (result != 1) {
        const int why = SSL_get_error(ssl.get(), result);
        if (why != SSL_ERROR_WANT_READ && why != SSL_ERROR_WANT_WRITE)
          fail(make_error_code(Errc::authenticationFailed), openSslErrors());
        return;
      }
      if (!keyMatched) return fail(make_error_code(Errc::authenticationFailed), "no certificate");
      established = true;
    }
    if (!pending.empty()) {
      std::size_t written = 0;
      const int result = SSL_write_ex(ssl.get(), pending.data(), pending.size(), &written);
      if (result != 1) return fail(make_error_code(Errc::tlsRecordRejected), openSslErrors());
      pending.erase(pending.begin(), pending.begin() + static_cast<std::ptrdiff_t>(written));
    }
    std::byte buffer[16 * 1024];
    for (;;) {
      std::size_t read = 0;
      const int result = SSL_read_ex(ssl.get(), buffer, sizeof buffer, &read);
      if (result == 1) {
        incoming.insert(incoming.end(), buffer, buffer + read);
        continue;
      }
      const int why = SSL_get_error(ssl.get(), result);
      if (why == SSL_ERROR_WANT_READ || why == SSL_ERROR_WANT_WRITE) return;
      if (why == SSL_ERROR_ZERO_RETURN) return fail(asio::error::eof, {});
      return fail(make_error_code(Errc::tlsRecordRejected), openSslErrors());
    }
  }
};

SecureStream::SecureStream(Role role, const wire::Identity& self,
                           const wire::IdentityKey& expectedRemote)
    : tls_(std::make_unique<Tls>()) {
  Tls& t = *tls_;
  t.expected = expectedRemote;
  t.context.reset(SSL_CTX_new(TLS_method()));
  GOSSAMER_ENFORCE(t.context != nullptr, "OpenSSL could not make a TLS context");
  SSL_CTX* context = t.context.get();
  GOSSAMER_ENFORCE(
      SSL_CTX_set_min_proto_version(context, TLS1_3_VERSION) == 1 &&
          SSL_CTX_set_max_proto_version(context, TLS1_3_VERSION) == 1 &&
          SSL_CTX_set_ciphersuites(context, "TLS_AES_128_GCM_SHA256:TLS_AES_256_GCM_SHA384") == 1 &&
          SSL_CTX_set_num_tickets(context, 0) == 1 && self.installInto(context),
      "OpenSSL could not set up a relayed TLS stream: {}", openSslErrors());
  SSL_CTX_set_session_cache_mode(context, SSL_SESS_CACHE_OFF);
  SSL_CTX_set_verify(context, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, &Tls::verify);
  t.ssl.reset(SSL_new(context));
  t.in = BIO_new(BIO_s_mem());
  t.out = BIO_new(BIO_s_mem());
  GOSSAMER_ENFORCE(t.ssl && t.in && t.out, "OpenSSL could not make a relayed TLS stream");
  SSL_set_bio(t.ssl.get(), t.in, t.out);
  SSL_set_app_data(t.ssl.get(), &t);
  if (role == Role::client)
    SSL_set_connect_state(t.ssl.get());
  else
    SSL_set_accept_state(t.ssl.get());
  t.pump();
}

SecureStream::~SecureStream() = default;

std::error_code SecureStream::feed(std::span<const std::byte> bytes) {
  if (tls_->error) return tls_->error;
  if (!bytes.empty() && BIO_write(tls_->in, bytes.data(), static_cast<int>(bytes.size())) !=
                            static_cast<int>(bytes.size()))
    tls_->fail(make_error_code(Errc::tlsRecordRejected), "OpenSSL could not buffer the bytes");
  tls_->pump();
  return tls_->error;
}

std::error_code SecureStream::write(std::span<const std::byte> plaintext) {
  if (tls_->error) return tls_->error;
  tls_->pending.insert(tls_->pending.end(), plaintext.begin(), plaintext.end());
  tls_->pump();
  return tls_->error;
}

void SecureStream::close() {
  if (!tls_->error && tls_->established) SSL_shutdown(tls_->ssl.get());
  tls_->fail(asio::error::operation_aborted, {});
}

std::vector<std::byte> SecureStream::takeOutgoing() {
  std::vector<std::byte> out(static_cast<std::size_t>(BIO_ctrl_pending(tls_->out)));
  if (!out.empty()) {
    const int read = BIO_read(tls_->out, out.data(), static_cast<int>(out.size()));
    out.resize(static_cast<std::size_t>(std::max(read, 0)));
  }
  return out;
}

bool SecureStream::pendingOutgoing() const { return BIO_ctrl_pending(tls_->out) > 0; }

std::vector<std::byte> SecureStream::takeIncoming() { return std::exchange(tls_->incoming, {}); }

bool SecureStream::established() const { return tls_->established; }
std::error_code SecureStream::error() const { return tls_->error; }
const std::string& SecureStream::reason() const { return tls_->reason; }

}  // namespace gossamer::net::relay
