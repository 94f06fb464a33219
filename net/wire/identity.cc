#include "net/wire/identity.h"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

#include <fcntl.h>
#include <fmt/format.h>
#include <openssl/bio.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine/base/enforce.h"
#include "engine/base/log.h"

namespace gossamer::net::wire {
namespace {

constexpr std::size_t kMaxSecretFileBytes = 64 * 1024;
constexpr std::size_t kMaxKeyFileBytes = 16 * 1024;

struct PkeyFree {
  void operator()(EVP_PKEY* p) const { EVP_PKEY_free(p); }
};
struct MdCtxFree {
  void operator()(EVP_MD_CTX* c) const { EVP_MD_CTX_free(c); }
};
struct BioFree {
  void operator()(BIO* b) const { BIO_free(b); }
};
struct X509Free {
  void operator()(X509* x) const { X509_free(x); }
};
using Pkey = std::unique_ptr<EVP_PKEY, PkeyFree>;

const unsigned char* bytes(std::span<const std::byte> s) {
  return reinterpret_cast<const unsigned char*>(s.data());
}

IdentityKey rawPublicKey(EVP_PKEY* pkey) {
  IdentityKey key{};
  std::size_t length = key.size();
  GOSSAMER_ENFORCE(EVP_PKEY_get_raw_public_key(pkey, reinterpret_cast<unsigned char*>(key.data()),
                                               &length) == 1 &&
                       length == key.size(),
                   "OpenSSL could not read an Ed25519 public key");
  return key;
}

// The key pair `pkey` as PKCS#8 PEM text.
std::string pemOf(EVP_PKEY* pkey) {
  std::unique_ptr<BIO, BioFree> bio(BIO_new(BIO_s_mem()));
  GOSSAMER_ENFORCE(
      bio && PEM_write_bio_PrivateKey(bio.get(), pkey, nullptr, nullptr, 0, nullptr, nullptr) == 1,
      "OpenSSL could not encode an identity key");
  char* data = nullptr;
  const long length = BIO_get_mem_data(bio.get(), &data);
  return std::string(data, static_cast<std::size_t>(length));
}

// Writes `text` to `path` as a new file of mode 0600: written to a temporary file, then linked
// into place, so that a reader never sees half a key and an existing key is never replaced.
// False when `path` appeared meanwhile (another process made it first).
bool writeNewKeyFile(const std::filesystem::path& path, const std::string& text) {
  const std::string temporary = path.string() + fmt::format(".tmp-{}", ::getpid());
  const int fd = ::open(temporary.c_str(), O_CREAT | O_TRUNC | O_WRONLY | O_CLOEXEC, 0600);
  GOSSAMER_ENFORCE(fd >= 0, "cannot write identity key file '{}': {}", temporary,
                   std::strerror(errno));
  const bool written = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size()) &&
                       ::fsync(fd) == 0;
  ::close(fd);
  if (!written) {
    ::unlink(temporary.c_str());
    GOSSAMER_THROW("cannot write identity key file '{}': {}", temporary, std::strerror(errno));
  }
  const int linked = ::link(temporary.c_str(), path.c_str());
  const int linkErrno = errno;
  ::unlink(temporary.c_str());
  if (linked != 0 && linkErrno == EEXIST) return false;
  GOSSAMER_ENFORCE(linked == 0, "cannot write identity key file '{}': {}", path.string(),
                   std::strerror(linkErrno));
  return true;
}

// The whole of a small file that holds a secret (`what` names it in errors: "cluster secret
// file"): a regular file of at most `maxBytes`, checked before anything is allocated; a warning
// when other users may read it.
std::vector<std::byte> readPrivateFile(const std::string& path, const char* what,
                                       std::uintmax_t maxBytes) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::file_status status = fs::status(path, ec);
  GOSSAMER_ENFORCE(!ec && fs::exists(status), "{} '{}' cannot be accessed: {}", what, path,
                   ec ? ec.message() : std::string("no such file"));
  GOSSAMER_ENFORCE(fs::is_regular_file(status), "{} '{}' is not a regular file", what, path);
  const std::uintmax_t size = fs::file_size(path, ec);
  GOSSAMER_ENFORCE(!ec, "cannot read the size of {} '{}': {}", what, path, ec.message());
  GOSSAMER_ENFORCE(size <= maxBytes, "{} '{}' has {} bytes; at most {} are expected", what, path,
                   size, maxBytes);
  std::ifstream in(path, std::ios::binary);
  GOSSAMER_ENFORCE(in.good(), "cannot open {} '{}'", what, path);
  std::vector<std::byte> bytes(static_cast<std::size_t>(size));
  in.read(reinterpret_cast<char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  GOSSAMER_ENFORCE(static_cast<std::uintmax_t>(in.gcount()) == size, "cannot read {} '{}'", what,
                   path);
  if ((status.permissions() & (fs::perms::group_read | fs::perms::others_read)) != fs::perms::none)
    log::get("net")->warn("{} '{}' is readable by other users; chmod 600 it", what, path);
  return bytes;
}

Pkey readKeyFile(const std::string& path) {
  const std::vector<std::byte> text = readPrivateFile(path, "identity key file", kMaxKeyFileBytes);
  std::unique_ptr<BIO, BioFree> bio(BIO_new_mem_buf(text.data(), static_cast<int>(text.size())));
  Pkey pkey(bio ? PEM_read_bio_PrivateKey(bio.get(), nullptr, nullptr, nullptr) : nullptr);
  GOSSAMER_ENFORCE(pkey != nullptr,
                   "identity key file '{}' holds no readable private key (PKCS#8 PEM); move it "
                   "away to make a new identity (the peer then joins under a new --peer-id)",
                   path);
  GOSSAMER_ENFORCE(EVP_PKEY_is_a(pkey.get(), "ED25519") == 1,
                   "identity key file '{}' holds a {} key; a peer's identity is an Ed25519 key",
                   path, EVP_PKEY_get0_type_name(pkey.get()));
  return pkey;
}

}  // namespace

struct Identity::Key {
  Pkey pkey;
};

Identity::Identity(std::unique_ptr<Key> key)
    : key_(std::move(key)), publicKey_(rawPublicKey(key_->pkey.get())) {}

Identity::~Identity() = default;

std::shared_ptr<const Identity> Identity::generate() {
  Pkey pkey(EVP_PKEY_Q_keygen(nullptr, nullptr, "ED25519"));
  GOSSAMER_ENFORCE(pkey != nullptr, "OpenSSL could not make an Ed25519 key pair");
  return std::shared_ptr<const Identity>(new Identity(std::make_unique<Key>(Key{std::move(pkey)})));
}

std::shared_ptr<const Identity> Identity::loadOrCreate(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::exists(path, ec)) {
    const fs::path target(path);
    if (target.has_parent_path()) {
      fs::create_directories(target.parent_path(), ec);
      GOSSAMER_ENFORCE(!ec, "cannot make the directory of identity key file '{}': {}", path,
                       ec.message());
    }
    auto made = generate();
    if (writeNewKeyFile(target, pemOf(made->key_->pkey.get()))) {
      log::get("net")->info("made identity key {} in '{}'", made->fingerprint(), path);
      return made;
    }
  }
  auto loaded =
      std::shared_ptr<const Identity>(new Identity(std::make_unique<Key>(Key{readKeyFile(path)})));
  log::get("net")->debug("identity key {} from '{}'", loaded->fingerprint(), path);
  return loaded;
}

std::vector<std::byte> Identity::sign(std::span<const std::byte> message) const {
  std::unique_ptr<EVP_MD_CTX, MdCtxFree> ctx(EVP_MD_CTX_new());
  std::vector<std::byte> signature(kSignatureBytes);
  std::size_t length = signature.size();
  if (!ctx || EVP_DigestSignInit(ctx.get(), nullptr, nullptr, nullptr, key_->pkey.get()) != 1 ||
      EVP_DigestSign(ctx.get(), reinterpret_cast<unsigned char*>(signature.data()), &length,
                     bytes(message), message.size()) != 1 ||
      length != kSignatureBytes)
    return {};
  return signature;
}

bool Identity::installInto(ssl_ctx_st* context) const {
  std::unique_ptr<X509, X509Free> certificate(X509_new());
  if (!certificate) return false;
  X509* c = certificate.get();
  const std::string name = "gossamer peer key " + fingerprint();
  X509_NAME* subject = X509_get_subject_name(c);
  const bool made =
      X509_set_version(c, 2) == 1 && ASN1_INTEGER_set(X509_get_serialNumber(c), 1) == 1 &&
      X509_gmtime_adj(X509_getm_notBefore(c), -3600) != nullptr &&
      X509_gmtime_adj(X509_getm_notAfter(c), 24 * 3600) != nullptr &&
      X509_NAME_add_entry_by_txt(subject, "CN", MBSTRING_ASC,
                                 reinterpret_cast<const unsigned char*>(name.c_str()), -1, -1,
                                 0) == 1 &&
      X509_set_issuer_name(c, subject) == 1 && X509_set_pubkey(c, key_->pkey.get()) == 1 &&
      X509_sign(c, key_->pkey.get(), nullptr) > 0;  // Ed25519 signs without a digest
  return made && SSL_CTX_use_certificate(context, c) == 1 &&
         SSL_CTX_use_PrivateKey(context, key_->pkey.get()) == 1;
}

bool verifySignature(std::span<const std::byte> key, std::span<const std::byte> message,
                     std::span<const std::byte> signature) {
  if (key.size() != kIdentityKeyBytes || signature.size() != kSignatureBytes) return false;
  Pkey pkey(EVP_PKEY_new_raw_public_key(EVP_PKEY_ED25519, nullptr, bytes(key), key.size()));
  std::unique_ptr<EVP_MD_CTX, MdCtxFree> ctx(EVP_MD_CTX_new());
  return pkey && ctx &&
         EVP_DigestVerifyInit(ctx.get(), nullptr, nullptr, nullptr, pkey.get()) == 1 &&
         EVP_DigestVerify(ctx.get(), bytes(signature), signature.size(), bytes(message),
                          message.size()) == 1;
}

std::string fingerprintOf(const IdentityKey& key) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  if (EVP_Digest(key.data(), key.size(), digest, &length, EVP_sha256(), nullptr) != 1) return "?";
  std::string out;
  for (unsigned int i = 0; i < 8 && i < length; ++i) out += fmt::format("{:02x}", digest[i]);
  return out;
}

std::optional<IdentityKey> identityKeyFrom(std::span<const std::byte> bytes) {
  if (bytes.size() != kIdentityKeyBytes) return std::nullopt;
  IdentityKey key{};
  std::copy(bytes.begin(), bytes.end(), key.begin());
  return key;
}

IdentityBook::Verdict IdentityBook::bind(std::uint64_t peer, const IdentityKey& key) {
  std::lock_guard lock(mutex_);
  const auto found = keys_.find(peer);
  if (found != keys_.end()) return found->second == key ? Verdict::known : Verdict::conflict;
  if (keys_.size() >= kMaxBindings) return Verdict::conflict;
  keys_.emplace(peer, key);
  return Verdict::bound;
}

std::optional<IdentityKey> IdentityBook::keyOf(std::uint64_t peer) const {
  std::lock_guard lock(mutex_);
  const auto found = keys_.find(peer);
  if (found == keys_.end()) return std::nullopt;
  return found->second;
}

std::size_t IdentityBook::size() const {
  std::lock_guard lock(mutex_);
  return keys_.size();
}

std::vector<std::byte> readSecretFile(const std::string& path) {
  std::vector<std::byte> secret = readPrivateFile(path, "cluster secret file", kMaxSecretFileBytes);
  while (!secret.empty() &&
         (secret.back() == std::byte{'\n'} || secret.back() == std::byte{'\r'})) {
    secret.pop_back();
  }
  GOSSAMER_ENFORCE(!secret.empty(), "cluster secret file '{}' is empty", path);
  return secret;
}

}  // namespace gossamer::net::wire
