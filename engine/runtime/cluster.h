// A local cluster: N peers in one process, each on its own threads (`gossamer-peer --local N`,
// the tests and the convergence benchmark). They talk over the in-process transport or TCP on
// 127.0.0.1, optionally through an emulated network (net/shaped: peer i is profile index i, so
// `geo` spreads them round-robin over its sites), and join by seeds like separate processes do:
// peer 1 starts the cluster, the others name it as their seed.
//
// While they train, the cluster draws one progress view and evaluates the consensus model (the
// average of the peers' models) on the test set: at the evaluation points every `evalEvery`
// steps, exactly (eval_points.h: each peer copies its model as it completes step evalEvery,
// 2 evalEvery, ...; the point's time is the slowest peer's training wall time there), and, when
// `evalInterval` is set, also every so often by wall time at the peers' next step boundaries (a
// live view, for monitoring and fault injection). Each evaluation is one EvalPoint of the
// convergence curve.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "engine/runtime/peer.h"

namespace gossamer::engine::runtime {

struct ClusterConfig {
  PeerConfig peer;  // the template: transport, profile, training (minPeers is set)
  std::size_t peers = 4;
  // Steps between the evaluation points (0: none; see the header comment).
  std::int64_t evalEvery = 0;
  // Also by wall time: a consensus evaluation at least this often, at the peers' next step
  // boundaries, not at a common step (0: none).
  std::chrono::milliseconds evalInterval{0};
  std::size_t evalSamples = 2000;
  // Evaluate the points once training is over (their models averaged as they complete, one model
  // a point kept): the evaluations then take no CPU from the peers, which matters on a machine
  // with fewer cores than peers; onEval gets them at the end. Else as they complete.
  bool evaluateAfterRun = false;
  bool progress = true;  // one progress view for the cluster on stdout
  // Called on the monitoring thread with each evaluation, in the order of the curve.
  std::function<void(const EvalPoint&)> onEval;
  // Called once every peer exists, before training starts (for fault injection in tests).
  std::function<void(std::vector<Peer*>&)> onStart;
  // Polled by the monitoring thread; once true, every peer stops at its next step boundary.
  std::function<bool()> stopRequested;
};

struct ClusterResult {
  std::vector<PeerResult> peers;  // in peer order (ids 1..N)
  ConsensusResult consensus;      // final, whole test set, per-peer accuracies included
  double wallSeconds = 0;         // the slowest peer's training loop
  // The evaluations while training (the points in order; polled ones where they came), then
  // the final one.
  std::vector<EvalPoint> curve;
  std::vector<Snapshot> finals;  // every peer's final params, in peer order
};

// The configurations of a local cluster's peers, made from one template: one transport maker
// for all (inproc peers share its hub), a fresh random secret unless one is set, and the endpoint
// -> index map the shaped transport needs. Peer `index` (0-based) gets id index + 1 and profile
// index `index`; peers may be added while the others run (the chaos benchmark's joins and
// restarts). Each peer id keeps one identity key for the life of this object, so that a peer
// restarted under its id is the same peer to the others (unless the base configuration keeps
// keys beside checkpoints: then the peers load theirs). Thread-safe.
class LocalPeerConfigs {
 public:
  LocalPeerConfigs(PeerConfig base, const Registry& registry);
  // The configuration of peer `index`, joining by `seed` (none: it starts the cluster).
  PeerConfig make(std::size_t index, std::optional<net::Endpoint> seed) const;
  // Records where peer `index` listens, once it is constructed.
  void listening(const net::Endpoint& endpoint, std::size_t index);
  const PeerConfig& base() const { return base_; }

 private:
  struct EndpointIndex;
  struct Identities;
  PeerConfig base_;
  std::shared_ptr<EndpointIndex> index_;
  std::shared_ptr<Identities> identities_;
};

// Runs the cluster to the end. Throws gossamer::Error when a peer fails (its message first).
ClusterResult runLocalCluster(const ClusterConfig& config, const Registry& registry,
                              std::shared_ptr<const DatasetPair> data);

}  // namespace gossamer::engine::runtime
