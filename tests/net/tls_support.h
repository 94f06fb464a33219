// Test helpers for TLS links (net/tcp/tls.h): a PSK context from a text secret, certificates
// made at run time with the OpenSSL API (no private key is committed), and a loopback TCP relay
// that records what the client sent and can flip a byte on the way (a man in the middle).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/experimental/as_tuple.hpp>
#include <asio/ip/tcp.hpp>
#include <asio/use_awaitable.hpp>
#include <asio/write.hpp>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <unistd.h>

#include "net/endpoint.h"
#include "net/tcp/tls.h"

namespace gossamer::test {

// A TLS context authenticating by a key derived from `secret`.
inline std::shared_ptr<net::tcp::TlsContext> pskContext(std::string_view secret) {
  net::tcp::TlsConfig config;
  const auto bytes = std::as_bytes(std::span(secret.data(), secret.size()));
  config.secret.assign(bytes.begin(), bytes.end());
  return net::tcp::makeTlsContext(config);
}

// A certificate authority made at run time; issue() writes a peer's certificate and key signed
// by it (PEM files in a scratch directory removed at the end).
class TestCa {
 public:
  explicit TestCa(const std::string& name) : key_(newKey()) {
    static int counter = 0;
    dir_ = std::filesystem::temp_directory_path() /
           ("gossamer-tls-" + std::to_string(::getpid()) + "-" + std::to_string(counter++));
    std::filesystem::create_directories(dir_);
    cert_ = makeCertificate(key_.get(), name, nullptr, nullptr, true);
    caFile_ = (dir_ / (name + "-ca.pem")).string();
    writePem(caFile_, [&](FILE* f) { return PEM_write_X509(f, cert_.get()); });
  }
  ~TestCa() {
    std::error_code ignored;
    std::filesystem::remove_all(dir_, ignored);
  }
  TestCa(const TestCa&) = delete;
  TestCa& operator=(const TestCa&) = delete;

  const std::string& caFile() const { return caFile_; }

  // A TLS config with a fresh key and a certificate for `name` signed by this CA, trusting `ca`.
  net::tcp::TlsConfig issue(const std::string& name, const std::string& trustedCa) const {
    Key key(newKey());
    Cert cert = makeCertificate(key.get(), name, cert_.get(), key_.get(), false);
    net::tcp::TlsConfig config;
    config.mode = net::tcp::TlsConfig::Mode::certificates;
    config.certFile = (dir_ / (name + ".pem")).string();
    config.keyFile = (dir_ / (name + "-key.pem")).string();
    config.caFile = trustedCa;
    writePem(config.certFile, [&](FILE* f) { return PEM_write_X509(f, cert.get()); });
    writePem(config.keyFile, [&](FILE* f) {
      return PEM_write_PrivateKey(f, key.get(), nullptr, nullptr, 0, nullptr, nullptr);
    });
    return config;
  }

 private:
  struct KeyFree {
    void operator()(EVP_PKEY* key) const { EVP_PKEY_free(key); }
  };
  struct CertFree {
    void operator()(X509* cert) const { X509_free(cert); }
  };
  using Key = std::unique_ptr<EVP_PKEY, KeyFree>;
  using Cert = std::unique_ptr<X509, CertFree>;

  static EVP_PKEY* newKey() {
    EVP_PKEY* key = EVP_PKEY_Q_keygen(nullptr, nullptr, "EC", "P-256");
    if (key == nullptr) throw std::runtime_error("EC key generation failed");
    return key;
  }

  static void addExtension(X509* cert, X509* issuer, int nid, const char* value) {
    X509V3_CTX ctx;
    X509V3_set_ctx_nodb(&ctx);
    X509V3_set_ctx(&ctx, issuer != nullptr ? issuer : cert, cert, nullptr, nullptr, 0);
    X509_EXTENSION* extension = X509V3_EXT_conf_nid(nullptr, &ctx, nid, value);
    if (extension == nullptr) throw std::runtime_error("X509 extension failed");
    X509_add_ext(cert, extension, -1);
    X509_EXTENSION_free(extension);
  }

  // Signed by `issuerKey` (self-signed when null), valid from an hour ago for a day.
  static Cert makeCertificate(EVP_PKEY* key, const std::string& name, X509* issuer,
                              EVP_PKEY* issuerKey, bool ca) {
    static std::atomic<long> serial{1};
    Cert cert(X509_new());
    X509_set_version(cert.get(), 2);
    ASN1_INTEGER_set(X509_get_serialNumber(cert.get()), serial++);
    X509_gmtime_adj(X509_getm_notBefore(cert.get()), -3600);
    X509_gmtime_adj(X509_getm_notAfter(cert.get()), 86400);
    X509_set_pubkey(cert.get(), key);
    X509_NAME* subject = X509_get_subject_name(cert.get());
    X509_NAME_add_entry_by_txt(subject, "CN", MBSTRING_ASC,
                               reinterpret_cast<const unsigned char*>(name.c_str()), -1, -1, 0);
    X509_set_issuer_name(cert.get(), issuer != nullptr ? X509_get_subject_name(issuer) : subject);
    addExtension(cert.get(), issuer, NID_basic_constraints, ca ? "critical,CA:TRUE" : "CA:FALSE");
    if (ca) addExtension(cert.get(), issuer, NID_key_usage, "critical,keyCertSign,cRLSign");
    if (X509_sign(cert.get(), issuerKey != nullptr ? issuerKey : key, EVP_sha256()) == 0)
      throw std::runtime_error("X509 signing failed");
    return cert;
  }

  template <typename Write>
  static void writePem(const std::string& path, Write write) {
    FILE* f = std::fopen(path.c_str(), "w");
    if (f == nullptr) throw std::runtime_error("cannot write " + path);
    const int ok = write(f);
    std::fclose(f);
    if (ok != 1) throw std::runtime_error("PEM write failed for " + path);
  }

  Key key_;
  Cert cert_;
  std::filesystem::path dir_;
  std::string caFile_;
};

// A man in the middle on 127.0.0.1: accepts connections and relays each to `upstream`, both
// ways. It records every byte a client sent (clientBytes), and flipNextClientByte() makes it
// invert one bit of the next chunk it relays from a client. Runs on `io` (one thread); the
// accessors are thread-safe.
class Relay {
 public:
  Relay(asio::io_context& io, net::Endpoint upstream)
      : io_(io),
        upstream_(asio::ip::make_address(upstream.host), upstream.port),
        acceptor_(io, asio::ip::tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0)) {
    asio::co_spawn(io_, acceptLoop(), asio::detached);
  }

  net::Endpoint endpoint() const {
    return net::Endpoint{"127.0.0.1", acceptor_.local_endpoint().port()};
  }
  void flipNextClientByte() { flip_ = true; }
  bool flipped() const { return flipped_; }
  std::vector<unsigned char> clientBytes() const {
    std::lock_guard lock(mutex_);
    return recorded_;
  }
  // Io thread: stops accepting and closes every relayed connection.
  void close() {
    std::error_code ignored;
    acceptor_.close(ignored);
    for (auto& socket : sockets_) socket->close(ignored);
  }

 private:
  using Socket = asio::ip::tcp::socket;
  static constexpr auto kUseTuple = asio::experimental::as_tuple(asio::use_awaitable);

  asio::awaitable<void> acceptLoop() {
    for (;;) {
      auto [ec, client] = co_await acceptor_.async_accept(kUseTuple);
      if (ec) co_return;
      auto downstream = std::make_shared<Socket>(std::move(client));
      auto upstream = std::make_shared<Socket>(io_);
      auto [connectError] = co_await upstream->async_connect(upstream_, kUseTuple);
      if (connectError) co_return;
      sockets_.push_back(downstream);
      sockets_.push_back(upstream);
      asio::co_spawn(io_, pump(downstream, upstream, true), asio::detached);
      asio::co_spawn(io_, pump(upstream, downstream, false), asio::detached);
    }
  }

  asio::awaitable<void> pump(std::shared_ptr<Socket> from, std::shared_ptr<Socket> to,
                             bool fromClient) {
    std::vector<unsigned char> buffer(64 * 1024);
    for (;;) {
      auto [ec, n] = co_await from->async_read_some(asio::buffer(buffer), kUseTuple);
      if (ec) break;
      if (fromClient) {
        std::lock_guard lock(mutex_);
        recorded_.insert(recorded_.end(), buffer.begin(), buffer.begin() + n);
      }
      if (fromClient && flip_.exchange(false)) {
        buffer[n / 2] ^= 0x01;  // a bit in the middle of the chunk: ciphertext, not a header
        flipped_ = true;
      }
      auto [writeError, written] = co_await asio::async_write(*to, asio::buffer(buffer, n),
                                                              kUseTuple);
      if (writeError) break;
    }
    std::error_code ignored;
    to->shutdown(Socket::shutdown_send, ignored);
  }

  asio::io_context& io_;
  asio::ip::tcp::endpoint upstream_;
  asio::ip::tcp::acceptor acceptor_;
  std::vector<std::shared_ptr<Socket>> sockets_;
  std::atomic<bool> flip_{false};
  std::atomic<bool> flipped_{false};
  mutable std::mutex mutex_;
  std::vector<unsigned char> recorded_;
};

}  // namespace gossamer::test
