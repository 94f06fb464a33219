// The runtime of one peer: its network (transport, mesh, membership) on an io thread, and its
// training on the thread that calls run() (the compute thread), driving a decentralized
// Algorithm through a PeerContext (engine/algorithm.h). A peer training alone is a cluster of one:
// the same loop, with no one to exchange with (algorithm "none").
//
//   Peer peer(config, registry, data);   // starts the io thread, listens, joins by the seeds
//   PeerResult result = peer.run();      // waits for --min-peers members, trains, finishes
//
// run():
//   1. waits until the view holds config.training.minPeers members (startTimeout), or finds the
//      cluster already training and joins it late (ClusterControl::awaitStart); a peer with seeds
//      that joined no one within joinTimeout gives up, then or later while training alone
//      (PeerResult::joinFailure);
//   2. takes its data shard: the training set split into one shard per member (iid or
//      Dirichlet), this peer's by its rank among the members' sorted ids (or a fixed shard);
//   3. builds the topology's graph over the members and calls algorithm.setup() (a late joiner
//      first calls algorithm.join(); a resumed peer restores its checkpoint);
//   4. runs the training loop (TrainingLoop) until totalSteps = epochs x ceil(train samples /
//      (shards x batch)), the same on every peer, rebuilding the graph and calling setup() again
//      after a membership change, and publishing a params snapshot at a step boundary whenever
//      someone asked for one;
//   5. announces that it finished, waits (finishTimeout) until every member has, then
//      algorithm.finish() (still serving requests: an EASGD center must outlive its workers);
//   6. optionally pulls every member's final model and evaluates their average (the consensus
//      model), waits until every member is done pulling, and leaves the cluster gracefully.
//
// The parts, each with one job, are described in engine/runtime/README.md with the threads that
// run them and the lock order. Messages to self never touch the network. Algorithm traffic is
// counted in bytes (header + payloads) per peer by the mesh; the runtime's own traffic (status,
// barriers, model pulls) and membership are counted apart.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "engine/algorithm.h"
#include "engine/registry.h"
#include "engine/runtime/config.h"
#include "engine/runtime/consensus.h"
#include "engine/runtime/join_failure.h"
#include "engine/runtime/snapshots.h"
#include "net/endpoint.h"
#include "net/membership/membership.h"

namespace gossamer::engine::runtime {

struct PeerResult {
  PeerId peer = 0;
  std::string algorithm;
  std::string topology;
  std::size_t peers = 0;  // shards of the training set (members at the start)
  std::size_t parameters = 0;
  std::string device;  // the Compute it trained on, described
  std::uint64_t steps = 0;
  std::int64_t samples = 0;
  double epochs = 0;        // passes over this peer's shard
  double wallSeconds = 0;   // the training loop (steps), without waiting for others at the end
  double samplesPerSecond = 0;
  double trainLoss = 0;     // mean over the last pass over the shard
  double testAccuracy = 0;  // this peer's own model (finalLocalEval)
  double testLoss = 0;
  std::optional<ConsensusResult> consensus;
  std::uint64_t bytesSent = 0;  // algorithm traffic, headers included
  std::uint64_t bytesReceived = 0;
  double commWaitSeconds = 0;             // blocked in gather, request and send back-pressure
  double commWaitFraction = 0;            // of wallSeconds
  double computeSeconds = 0;  // in the steps' compute (gradients, optimizer, emulated step time)
  double utilization = 0;     // computeSeconds / wallSeconds: the compute utilization
  bool stopped = false;                   // requestStop() ended it early
  std::map<std::string, double> metrics;  // what the algorithm counted
  // Set when this peer joined no one within TrainingConfig::joinTimeout: why (each seed's last
  // failure). Then only `peer` and `steps` (taken alone meanwhile, with --min-peers 1) are set.
  std::optional<JoinFailure> joinFailure;
};

// What any thread may read about a running peer.
struct PeerStatus {
  std::uint64_t step = 0;
  std::uint64_t totalSteps = 0;
  double loss = 0;  // exponential moving average of the step losses
  std::uint64_t bytesSent = 0;
  std::uint64_t bytesReceived = 0;
  double commWaitSeconds = 0;
  double computeSeconds = 0;
  double trainSeconds = 0;
  bool training = false;
  bool finished = false;
};

class Peer {
 public:
  // Builds the model, the algorithm and the topology, starts the io thread, listens and begins
  // joining. `registry` and `data` must outlive the peer. Throws gossamer::Error on bad
  // configuration (unknown names, bad options, a checkpoint to resume that does not fit, cannot
  // listen).
  Peer(PeerConfig config, const Registry& registry, std::shared_ptr<const DatasetPair> data);
  // Leaves gracefully if run() finished, else stops as a crash would.
  ~Peer();
  Peer(const Peer&) = delete;
  Peer& operator=(const Peer&) = delete;

  PeerId id() const;
  net::Endpoint endpoint() const;  // where others reach this peer

  // Trains on the calling thread (see the header comment). Call once. Throws gossamer::Error when
  // too few peers joined in time, or on a bug; returns early (stopped) after requestStop(), and
  // with `joinFailure` set when it joined no one within the join timeout.
  PeerResult run();

  // Any thread: training ends at the next step boundary, then finishes as usual (for a whole
  // cluster stopping together, or a signal).
  void requestStop();
  // Any thread: this peer leaves at its next step boundary while the others go on: the algorithm
  // hands over what it must (Algorithm::leave), then the membership leave is announced.
  void requestLeave();
  // Any thread: stops at once without telling anyone, as kill -9 would look from outside; run()
  // returns soon after with what it had.
  void kill();
  // Any thread: from the next step on, every step takes at least `time` (or the configured
  // minStepTime if longer): a straggler, for fault injection. 0 restores the configuration.
  void setMinStepTime(std::chrono::microseconds time);

  // Any thread: this peer's params at its next step boundary (at once after training), or
  // nullopt after `timeout`.
  std::optional<Snapshot> snapshot(Clock::duration timeout);
  PeerStatus status() const;
  net::membership::View view() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// A stable identity for a peer listening at `listen`: FNV-1a of "host:port" (never 0).
std::uint64_t peerIdFor(const net::Endpoint& listen);

}  // namespace gossamer::engine::runtime
