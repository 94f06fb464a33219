// TLS 1.3 for the tcp backend: OpenSSL 3's record layer on Asio sockets (asio::ssl::context
// holds the SSL_CTX; tls_stream.h drives the SSL objects with large socket reads and writes).
//
// A tcp transport made with Options::tls set wraps every socket in a TLS 1.3 stream: AES-GCM
// only (TLS_AES_128_GCM_SHA256, TLS_AES_256_GCM_SHA384), both ends authenticated. The TLS
// handshake starts in the background when accept() or connect() makes the link and the link's
// first send or receive waits for it, so a slow or hostile remote never stalls the accept loop;
// net/wire's handshake timeout (which closes the link) bounds it. Everything the link carries,
// net/wire's capnp handshake included, travels inside the tunnel.
//
// Two ways to authenticate, chosen by TlsConfig::mode:
// - psk: a TLS 1.3 external pre-shared key derived from the cluster secret,
//     PSK = HKDF-SHA256(ikm = secret, salt = "gossamer tls psk salt v1",
//                       info = "gossamer tls 1.3 external psk v1"), 32 bytes,
//   offered under the identity "gossamer-cluster-psk-v1" with the psk_dhe_ke mode only (an
//   ephemeral X25519/ECDHE exchange on top of the PSK: forward secrecy). Peers holding another
//   secret fail the PSK binder check, so the handshake fails before any application byte. No
//   certificate is needed; session tickets and early data are off (no resumption, no 0-RTT).
// - certificates: X.509 certificate and key of this peer and a CA file; both ends present their
//   certificate and verify the other's chain against the CA (no host name check: the CA defines
//   who belongs to the cluster).
//
// Errors of a TLS link (std::error_code values, like every link error):
// - a handshake that fails on TLS grounds (wrong PSK, untrusted certificate, TLS alert):
//   Errc::authenticationFailed, with OpenSSL's reason logged as a warning naming the remote;
// - a plaintext remote: Errc::peerSpeaksPlaintext (a TLS listener whose first bytes are not a
//   TLS record, or a TLS client whose server answered without TLS or hung up mid-handshake);
//   the tcp backend's plaintext listener reports a TLS ClientHello as Errc::peerSpeaksTls;
// - a record that fails its AEAD check after the handshake (altered, replayed or reordered
//   bytes): Errc::tlsRecordRejected, and the link closes.
// Key material (the secret, the PSK, private keys) is never logged.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

namespace gossamer::net::tcp {

// How links are authenticated; see the header comment.
struct TlsConfig {
  enum class Mode { psk, certificates };
  Mode mode = Mode::psk;
  // psk: the cluster secret the key is derived from. Must not be empty; never logged.
  std::vector<std::byte> secret;
  // certificates: PEM files of this peer's certificate chain, its private key, and the CA(s)
  // a remote's certificate must chain to.
  std::string certFile;
  std::string keyFile;
  std::string caFile;
};

// The OpenSSL context that every TLS link of a transport (or of several) uses: immutable once
// made, shared by the links (they keep it alive), safe to use from several io threads.
class TlsContext;

// Builds the context. Throws gossamer::Error with a sentence naming the file for a missing or
// unreadable certificate, key or CA file, a key that does not match its certificate, or an
// empty secret; never puts key material in the message.
std::shared_ptr<TlsContext> makeTlsContext(const TlsConfig& config);

// One line for the start-up log: "TLS 1.3 (AES-GCM), mutual authentication by a pre-shared key
// derived from the cluster secret".
std::string describe(const TlsContext& context);

}  // namespace gossamer::net::tcp
