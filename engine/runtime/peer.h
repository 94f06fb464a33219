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
// The externally driven loop: a caller with its own model, data and framework (libtorch, the
// Python module) owns the loop and hands the peer the local part of each step:
//
//   Peer peer(config, registry, ExternalModel{layout, evaluate});
//   write the initial model into peer.params() (the same on every peer, or let the algorithm
//   reach consensus)
//   if (peer.start()) {                  // steps 1-3 of run()
//     while (true) {
//       compute the gradients of the batch into peer.grads() (this peer's part of the data:
//       peer.shard(), read again after membership changes), then
//       if (!peer.step({.loss = loss, .samples = rows})) break;  // step 4, one step at a time
//     }
//   }
//   PeerResult result = peer.finish();   // steps 5-6
//
// step() runs one step of the same loop as run(): adopting a changed view (setup() again), the
// algorithm's step with its hooks, exchanges and merges around the caller's gradients (and the
// caller's optimizer, LocalStep::update), the step count and learning-rate schedule, snapshots,
// evaluation events and checkpoints when due. Everything else (joining late, leaving, stopping,
// a kill, resuming from a checkpoint, the finish barrier and the consensus) is the same too.
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
#include "engine/runtime/local_step.h"
#include "engine/runtime/snapshots.h"
#include "engine/runtime/training_loop.h"
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
  double epochs = 0;  // passes over this peer's shard
  // The training loop (steps) on its clock: without waiting for others at the end, and without
  // the time spent evaluating (TrainingLoop).
  double wallSeconds = 0;
  // The finish after the loop: the finish barrier and the algorithm's finish() (its last
  // exchanges), or a leaver's handover; the evaluation at the end is not part of it.
  double finishSeconds = 0;
  double samplesPerSecond = 0;
  double trainLoss = 0;     // mean over the last pass over the shard
  double testAccuracy = 0;  // this peer's own model (finalLocalEval)
  double testLoss = 0;
  std::optional<ConsensusResult> consensus;
  std::uint64_t bytesSent = 0;  // algorithm traffic, headers included
  std::uint64_t bytesReceived = 0;
  // The frames of relayed links on this peer's links to and from relays, as an end or as the
  // relay, counted apart from the above (net::Traffic::relay).
  std::uint64_t relayBytesSent = 0;
  std::uint64_t relayBytesReceived = 0;
  // Every wait of the compute thread on others, in the loop and the finish (LoopStatus): sends
  // waiting for a slot, gathers, requests, pulls, Inbox::wait, the finish barrier.
  double commWaitSeconds = 0;
  double commWaitFraction = 0;  // of wallSeconds + finishSeconds: never above 1
  double computeSeconds = 0;    // in the steps' compute (gradients, optimizer, emulated step time)
  double utilization = 0;       // computeSeconds / (wallSeconds + finishSeconds)
  bool stopped = false;         // requestStop() ended it early
  double loopEndUnixSeconds = 0;  // when its training loop ended (system clock, Unix epoch)
  // The most this peer held at once in the allocations it tracks (kernels/memory_meter.h): the
  // model, its gradients and activations, the optimizer's and the algorithm's buffers, the
  // staging and receive pools. Host memory an algorithm keeps in plain vectors (an EASGD center
  // on the host, say) and the dataset are not in it; the process's peak RSS has everything.
  std::size_t peakBytes = 0;
  std::size_t modelBytes() const { return parameters * sizeof(float); }
  std::map<std::string, double> metrics;  // what the algorithm counted
  // Set when this peer joined no one within TrainingConfig::joinTimeout: why (each seed's last
  // failure). Then only `peer` and `steps` (taken alone meanwhile, with --min-peers 1) are set.
  std::optional<JoinFailure> joinFailure;
  // Set when the cluster this peer found had trained all its steps (its run was ending): it
  // trained nothing and left at once. Then only `peer` and `steps` (0) are set.
  bool clusterDone = false;
  // Set when the peer gave up on a stall (TrainingConfig::stallTimeout): the verdict, naming its
  // step and the peers it waited for. The rest is as for a peer that was killed.
  std::optional<std::string> stalled;
};

// What any thread may read about a running peer.
struct PeerStatus {
  std::uint64_t step = 0;
  std::uint64_t totalSteps = 0;
  double loss = 0;  // exponential moving average of the step losses
  std::uint64_t bytesSent = 0;
  std::uint64_t bytesReceived = 0;
  double commWaitSeconds = 0;  // so far, in the loop and the finish
  double computeSeconds = 0;
  double trainSeconds = 0;  // the loop's clock at the last step
  StepFigures lastStep;     // as of the last step, taken together: ratios of these hold
  bool training = false;
  bool loopEnded = false;  // its training loop is over (done, stopped, left or killed)
  bool finished = false;
  // What the compute thread waits for on the others now ("a gather from 0000000000000002, ..."),
  // empty when it waits for nothing.
  std::string waitingFor;
};

// Parameter and gradient buffers the caller owns (a framework's flat tensors): `count` floats
// each at `params` and `grads`, disjoint, where `place` says. The peer trains over them without a
// copy of the model: its Compute is made for the place (host memory: the CPU backend; CUDA device
// N: the CUDA backend on N, unless TrainingConfig::makeCompute gives one), merges and the local
// update write into them, and receives land in pooled buffers on the same device; staging keeps
// its snapshots of what asynchronous sends are sending. Their values at start() are the initial
// model. On CUDA the peer's work is ordered after the caller's stream, and the stream's after the
// peer's, around every step and every call into the caller's code (events: neither side waits
// on the host); LocalStep::stream names the stream of a step when it changes.
struct CallerBuffers {
  float* params = nullptr;
  float* grads = nullptr;
  std::size_t count = 0;
  kernels::MemoryPlace place;
};

// A model that the caller trains (the externally driven loop, above).
struct ExternalModel {
  // The tensors of the flat buffers, in order (their fingerprint must be the same on every peer
  // and in a checkpoint to resume).
  ParamLayout layout;
  // Evaluates params (in the peer's Compute memory: host memory on the CPU) on the first
  // `samples` test samples (0: all) for the evaluation events (evalEvery, evalSamples), the final
  // evaluation (finalLocalEval) and the consensus (finalConsensus, with host params). Called on
  // the thread that calls step() and finish(). Empty: no evaluations.
  EvaluateFn evaluate;
  // Steps of one pass over this peer's data (epochs in the log, TrainingConfig::kEachEpoch);
  // 0: the whole run is one pass.
  std::uint64_t stepsPerEpoch = 0;
  // The caller's buffers (they must outlive the peer); without them the peer allocates its own,
  // zeroed, in its Compute's memory.
  std::optional<CallerBuffers> buffers;
};

// This peer's part of the training data: shard `index` of `count` (the rank among the members,
// or the fixed shard of TrainingConfig::shards).
struct DataShard {
  std::size_t index = 0;
  std::size_t count = 1;
};

class Peer {
 public:
  // Builds the model, the algorithm and the topology, starts the io thread, listens and begins
  // joining. `registry` and `data` must outlive the peer. Throws gossamer::Error on bad
  // configuration (unknown names, bad options, a checkpoint to resume that does not fit, cannot
  // listen).
  Peer(PeerConfig config, const Registry& registry, std::shared_ptr<const DatasetPair> data);
  // A peer of the externally driven loop (above): no model or data of its own; its flat params
  // and grads exist from construction (model.buffers, or its own, zeroed). Throws
  // gossamer::Error on buffers that do not fit the layout, overlap, or are not at their place.
  // config.training.maxSteps gives the run's steps (required); model, modelConfig and the data
  // settings other than the shards are not used.
  Peer(PeerConfig config, const Registry& registry, ExternalModel model);
  // Leaves gracefully if run() finished, else stops as a crash would.
  ~Peer();
  Peer(const Peer&) = delete;
  Peer& operator=(const Peer&) = delete;

  PeerId id() const;
  net::Endpoint endpoint() const;  // where others reach this peer

  // Trains on the calling thread (see the header comment). Call once. Throws gossamer::Error when
  // too few peers joined in time, or on a bug; returns early (stopped) after requestStop(), and
  // with `joinFailure` set when it joined no one within the join timeout, or `clusterDone` when
  // the cluster it found had trained all its steps.
  PeerResult run();

  // ---- the externally driven loop (compute thread: the caller's) ----
  // Steps 1-3 of run(): waits for the members, sets the algorithm up. False when it joined no one
  // within the join timeout (finish() then says why). Once, before step().
  bool start();
  // One step of the loop around `local` (see the header comment). False, without stepping, when
  // the run is over: the last step is done, or a stop, leave or kill was requested. Throws
  // gossamer::Error before start() or after finish().
  bool step(const LocalStep& local);
  // Steps 5-6 of run() and the result. Once, after start().
  PeerResult finish();
  // The flat buffers (the Compute's memory; the caller's own, given CallerBuffers), for as long
  // as the peer lives; the caller may write params before start() and between steps, and writes
  // grads for the algorithm to use.
  std::span<float> params();
  std::span<float> grads();
  // This peer's part of the data, valid from start(); it changes when the members change.
  DataShard shard() const;
  std::size_t parameterCount() const;

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
  // Any thread: the membership events this peer saw since the last call (joins, leaves, failures,
  // rejoins), oldest first; at most the last 1024 are kept.
  std::vector<net::membership::Event> takeEvents();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// A stable identity for a peer listening at `listen`: FNV-1a of "host:port" (never 0).
std::uint64_t peerIdFor(const net::Endpoint& listen);

}  // namespace gossamer::engine::runtime
