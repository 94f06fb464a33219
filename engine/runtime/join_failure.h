// Why a peer with seeds joined no one (TrainingConfig::joinTimeout, gossamer-peer's
// --join-timeout): each seed's last failed join attempt, as the membership recorded it (error
// codes, not log text), sorted into the causes a user can act on, and the one line naming them.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <system_error>
#include <vector>

#include "net/endpoint.h"
#include "net/membership/membership.h"

namespace gossamer::engine::runtime {

enum class JoinCause {
  authentication,  // the seed's cluster secret differs (net::Errc::authenticationFailed)
  model,           // the seed trains another model: its fingerprint differs (modelMismatch)
  version,         // the seed speaks another protocol version (versionMismatch)
  cluster,         // the seed belongs to another cluster id (clusterMismatch)
  refused,         // the seed would not admit this peer (Errc::joinRefused)
  tls,             // one side speaks TLS, the other plaintext (peerSpeaksTls, peerSpeaksPlaintext)
  unreachable,     // no connection, no complete handshake, no reply, or not tried yet
};

// The cause of a failed join attempt: its error sorted (an empty error: none failed yet, which
// counts as unreachable).
JoinCause causeOf(std::error_code error);

struct SeedCause {
  net::Endpoint seed;
  JoinCause cause = JoinCause::unreachable;
  // The failure in words: the handshake's reason ("model fingerprint differs: parameters 2410
  // here vs 4810 remote, ..."), the seed's refusal, or the error ("connection timed out").
  std::string detail;
};

struct JoinFailure {
  std::chrono::milliseconds timeout{0};  // the join timeout that passed
  std::vector<SeedCause> seeds;          // in the order of the seed list

  // The membership's record of its seeds (net::membership::Service::seedFailures), sorted.
  static JoinFailure of(const std::vector<net::membership::SeedFailure>& failures,
                        std::chrono::milliseconds timeout);

  // The cause every seed failed with, when they all failed alike (and there is a seed).
  std::optional<JoinCause> commonCause() const;
  // The cause in one line: the common one ("every seed refused authentication (wrong
  // --secret-file?)", "every seed was unreachable: a:1 (connection timed out), b:2 (...)", "the
  // cluster's model differs from this peer's (...)"), else each seed with its own.
  std::string cause() const;
  // "could not join the cluster within 2 s (--join-timeout): " and the cause.
  std::string describe() const;
};

}  // namespace gossamer::engine::runtime
