#include "net/errors.h"

#include <string>

namespace gossamer::net {
namespace {

class NetCategory final : public std::error_category {
 public:
  const char* name() const noexcept override { return "gossamer.net"; }
  std::string message(int code) const override {
    switch (static_cast<Errc>(code)) {
      case Errc::frameTooLarge: return "frame exceeds the configured size limits";
      case Errc::tooManyPayloads: return "frame has more payload buffers than allowed";
      case Errc::malformedFrame: return "malformed frame prefix";
      case Errc::malformedMessage: return "malformed message header";
      case Errc::authenticationFailed: return "authentication failed (wrong cluster secret or replayed handshake)";
      case Errc::versionMismatch: return "protocol version mismatch";
      case Errc::clusterMismatch: return "cluster id mismatch";
      case Errc::modelMismatch: return "model fingerprint mismatch";
      case Errc::handshakeTimeout: return "handshake timed out";
      case Errc::tooManyHandshakes: return "too many pending handshakes";
      case Errc::receiveInProgress: return "a receive is already in progress on this link";
      case Errc::partitioned: return "link is partitioned";
      case Errc::invalidPayloadTarget: return "a PayloadTarget returned a buffer of the wrong size";
      case Errc::unexpectedMessage: return "unexpected message for this point of the protocol";
      case Errc::cryptoFailure: return "the crypto library failed (random source or MAC)";
      case Errc::rdmaAccessError: return "an RDMA transfer failed a memory access check";
      case Errc::rdmaFailure: return "an RDMA work request failed";
      case Errc::joinRefused: return "a member refused to admit this peer";
      case Errc::peerSpeaksTls:
        return "the peer speaks TLS and this side plaintext; start both with or without "
               "--insecure-plaintext";
      case Errc::peerSpeaksPlaintext:
        return "the peer speaks plaintext and this side TLS; start both with or without "
               "--insecure-plaintext";
      case Errc::tlsRecordRejected:
        return "a TLS record failed its integrity check (bytes altered in transit); link closed";
      case Errc::identityMismatch:
        return "the peer's identity does not verify, or its peer id is bound to another identity "
               "key";
    }
    return "unknown gossamer.net error";
  }
};

}  // namespace

const std::error_category& netCategory() {
  static const NetCategory category;
  return category;
}

std::error_code make_error_code(Errc e) { return {static_cast<int>(e), netCategory()}; }

bool isRefusal(std::error_code error) {
  return error == Errc::authenticationFailed || error == Errc::versionMismatch ||
         error == Errc::clusterMismatch || error == Errc::modelMismatch ||
         error == Errc::peerSpeaksTls || error == Errc::peerSpeaksPlaintext ||
         error == Errc::identityMismatch;
}

}  // namespace gossamer::net
