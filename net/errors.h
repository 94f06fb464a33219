// net's own error codes, in a std::error_category ("gossamer.net"), for failures that are not
// plain socket errors.
#pragma once

#include <system_error>

namespace gossamer::net {

enum class Errc {
  frameTooLarge = 1,     // a frame or header beyond Limits
  tooManyPayloads,       // more payload buffers than Limits::maxPayloads
  malformedFrame,        // bad magic or inconsistent lengths in a frame prefix
  malformedMessage,      // a Cap'n Proto header that fails to decode within its limits
  authenticationFailed,  // wrong cluster secret, or a replayed handshake
  versionMismatch,       // protocol version differs
  clusterMismatch,       // cluster id differs
  modelMismatch,         // model fingerprint differs
  handshakeTimeout,
  tooManyHandshakes,     // Limits::maxPendingHandshakes reached
  receiveInProgress,     // a second concurrent receive on one link
  partitioned,           // the shaped transport's partition drops this pair
  unexpectedMessage,     // a well-formed message that is not valid at this point of the protocol
  cryptoFailure,         // the crypto library failed (random source or MAC computation)
  invalidPayloadTarget,  // a PayloadTarget returned a buffer whose size is not the payload's
  rdmaAccessError,       // an RDMA work request failed a memory protection check (local or remote)
  rdmaFailure,           // any other failed RDMA work request (its status is logged)
  joinRefused,           // a member refused to admit this peer to the cluster (membership)
  peerSpeaksTls,         // a plaintext link's remote started a TLS handshake (tcp)
  peerSpeaksPlaintext,   // a TLS link's remote speaks plaintext (tcp)
  tlsRecordRejected,     // a TLS record failed its integrity check: bytes altered in transit
  identityMismatch,      // a peer's identity signature failed, or its id is bound to another key
};

const std::error_category& netCategory();
std::error_code make_error_code(Errc e);

// Whether `error` is a handshake refusal: the remote answered but will not have this peer (wrong
// secret or identity, or another protocol version, cluster id or model, or TLS on one side only),
// as opposed
// to not being reached.
bool isRefusal(std::error_code error);

}  // namespace gossamer::net

template <>
struct std::is_error_code_enum<gossamer::net::Errc> : std::true_type {};
