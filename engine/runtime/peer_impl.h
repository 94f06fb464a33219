// The parts of runtime::Peer (peer.h) and how they are held: internal to engine/runtime's
// peer.cc (construction, the start, the loop's driver, the public calls) and peer_finish.cc (the
// finish, the consensus, the result).
#pragma once

#include <atomic>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <type_traits>
#include <utility>
#include <vector>

#include "engine/base/log.h"
#include "engine/life/peer_life.h"
#include "engine/runtime/checkpoints.h"
#include "engine/runtime/context.h"
#include "engine/runtime/control.h"
#include "engine/runtime/messenger.h"
#include "engine/runtime/network.h"
#include "engine/runtime/payload_codec.h"
#include "engine/runtime/peer.h"
#include "engine/runtime/peer_state.h"
#include "engine/runtime/speeds.h"
#include "engine/runtime/staging.h"
#include "engine/runtime/stall_watch.h"
#include "engine/runtime/training_loop.h"
#include "kernels/cpu/cpu_compute.h"
#include "kernels/memory_meter.h"
#include "net/limits.h"

namespace gossamer::engine::runtime {

// The parts that talk to other peers, built around the network (engine/runtime/README.md).
struct Comms {
  Comms(const NetworkConfig& config, PeerId self, kernels::Compute& compute, Algorithm& algorithm,
        std::size_t modelBytes, const TrainingConfig& training, const LoopStatus& status,
        MetricsMap& metrics)
      : network(config, self),
        staging(compute, modelBytes,
                {.sendSlots = training.sendBuffers,
                 .receiveSlots = training.receiveBuffers,
                 .preallocate = config.transport == "ibverbs"}),
        codec(
            compute, *hostCompute, training.compression, training.seed ^ self,
            [this](std::size_t bytes) { return staging.receiveSlot(bytes); },
            net::Limits{}.maxFrameBytes),
        messenger(network, staging, codec),
        snapshots(self),
        control(network, messenger, snapshots, status),
        serveContext(self, *hostCompute, messenger, metrics, training.normBound),
        serveGate(algorithm, serveContext) {
    control.setSharedState([&algorithm] { return algorithm.sharedState(); });
    control.setCatchUpOptions({.maxInFlight = training.receiveBuffers});
  }
  // The io thread goes first: no handler may run on parts being destroyed.
  ~Comms() { network.shutdown(); }

  // serve() runs on the io thread, beside the compute thread's Compute: it gets a CPU one.
  std::unique_ptr<kernels::Compute> hostCompute = kernels::cpu::makeCompute({.blasThreads = 1});
  PeerNetwork network;
  Staging staging;
  PayloadCodec codec;
  MessageQueue inbox;
  Messenger messenger;
  SnapshotBoard snapshots;
  ClusterControl control;
  ServeContext serveContext;
  ServeGate serveGate;
};

// What exists while run() trains (compute thread).
struct Training {
  std::unique_ptr<train::Learner> learner;
  std::unique_ptr<life::PeerLife> life;  // the life's rules (engine/life), over these parts
  std::unique_ptr<ComputeContext> context;
  std::unique_ptr<TrainingLoop> loop;
  std::uint64_t stepsPerEpoch = 1;
  bool cannotJoin = false;   // the join deadline passed before anyone admitted this peer
  bool clusterDone = false;  // the cluster had trained all its steps when this peer came
  std::unique_ptr<StallWatch> stallWatch;  // while the loop runs (its verdict after)
  std::unique_ptr<SpeedReporter> speeds;   // while the loop runs: this peer's speed, shared
};

// Requests from other threads, read at step boundaries.
struct Requests {
  std::atomic<bool> stop{false}, leave{false}, killed{false};
};

// The membership events a peer saw, the last 1024 of them, for takeEvents(). Any thread.
class EventLog {
 public:
  void add(const net::membership::Event& event) {
    std::lock_guard lock(mutex_);
    events_.push_back(event);
    if (events_.size() > 1024) events_.pop_front();
  }
  std::vector<net::membership::Event> take() {
    std::lock_guard lock(mutex_);
    std::vector<net::membership::Event> out(events_.begin(), events_.end());
    events_.clear();
    return out;
  }

 private:
  std::mutex mutex_;  // leaf
  std::deque<net::membership::Event> events_;
};

// Runs `call` (the caller's code: its gradients, optimizer or evaluation) in the caller's turn on
// its stream (CallerBuffers on CUDA): the caller's work starts after the peer's so far, and the
// peer's after the caller's once `call` returns. No-ops on the CPU.
template <typename Call>
std::invoke_result_t<Call&> inCallerTurn(kernels::Compute& compute, void* stream, Call& call) {
  compute.orderStreamAfter(stream);
  if constexpr (std::is_void_v<std::invoke_result_t<Call&>>) {
    call();
    compute.waitForStream(stream);
  } else {
    auto result = call();
    compute.waitForStream(stream);
    return result;
  }
}

// The peer: its parts, the driver of its training loop, and the environment of its life (the
// life's I/O: the cluster-control protocol, the view, the data, checkpoints, evaluation points).
struct Peer::Impl final : private LoopDriver, private life::LifeEnvironment {
  Impl(PeerConfig c, const Registry& r, std::shared_ptr<const DatasetPair> d,
       std::optional<ExternalModel> e);

  PeerResult run();
  // run() in its parts, for the externally driven loop as well: start() (false: joined no one),
  // the loop, finish().
  bool start();
  PeerResult finish(const LoopFigures& figures);
  void kill();
  LoopDriver& driver() { return *this; }
  // The caller's current stream (CallerBuffers::place), null without caller buffers.
  void* callerStream() const;

  // ---- fixed after construction ----
  PeerConfig config;
  const Registry& registry;
  std::shared_ptr<const DatasetPair> data;  // null for an externally driven peer
  std::optional<ExternalModel> external;
  PeerId self = 0;
  // What the peer's buffers and staging pools hold (before everything it counts: it outlives it).
  kernels::MemoryMeter memory;
  std::unique_ptr<kernels::Compute> compute;
  std::unique_ptr<Model> model;
  std::unique_ptr<Algorithm> algorithm;
  std::unique_ptr<topology::Topology> topology;
  PeerCheckpoints checkpoints;
  std::optional<train::Checkpoint>
      resumeCheckpoint;  // --resume: loaded and checked at construction
  // A peer with seeds that joined no one by then gives up (TrainingConfig::joinTimeout).
  Clock::time_point joinDeadline = Clock::time_point::max();
  // ---- shared between threads ----
  LoopStatus status;
  MetricsMap metrics;
  Requests requests;
  EventLog events;               // for takeEvents()
  std::unique_ptr<Comms> comms;  // last: it stops the io thread before the rest goes
  // ---- compute thread ----
  Training training;
  enum class Phase { constructed, started, finished } phase = Phase::constructed;

 private:
  EvaluateFn evaluation();
  // The caller's buffers as spans, checked against the layout and this peer's Compute.
  std::pair<std::span<float>, std::span<float>> callerSpans(const CallerBuffers& buffers) const;
  // `evaluate`, run in the caller's turn on its stream.
  EvaluateFn inCallerOrder(EvaluateFn evaluate);
  std::vector<std::size_t> shardOf(std::size_t count, std::size_t rank) const;
  void publishSnapshot(bool final);
  void finishWithOthers(bool leaving);
  ConsensusResult pullConsensus();
  // A peer that did not start (cannotJoin or clusterDone): nothing to finish with anyone.
  PeerResult notStartedResult();
  void onMembershipEvent(const net::membership::Event& event);

  // LoopDriver
  std::optional<double> step() override;
  void afterStep() override;
  bool stopping() const override;
  std::uint64_t bytesSent() const override;

  // life::LifeEnvironment (peer_environment.cc)
  StartPlan awaitStart() override;
  void startedWith(const std::vector<PeerId>& members) override;
  std::vector<PeerId> members() override;
  std::uint64_t epoch() override;
  PeerContext& context() override;
  train::Learner& takeShard(std::size_t count, std::size_t rank) override;
  std::shared_ptr<const topology::Graph> graph(const std::vector<PeerId>& members,
                                               std::uint64_t step) override;
  bool timeVaryingGraph() const override;
  std::optional<std::uint64_t> trainingStep(PeerId member) override;
  std::optional<std::uint64_t> heardStep(PeerId member) override;
  std::uint64_t expiredWaits() override;
  std::uint64_t totalSteps(std::size_t shards) override;
  const train::Checkpoint* resumeFrom() override;
  void resumed(std::uint64_t step) override;
  void atEvalPoint(std::uint64_t step, std::uint64_t point) override;
  bool checkpointDue(std::uint64_t step) override;
  void keepCheckpoint(train::Checkpoint checkpoint) override;
  void announce(life::Barrier barrier) override;
  bool awaitOthers(life::Barrier barrier) override;
};

// The peer's logger, and `ids` without `self`.
const std::shared_ptr<spdlog::logger>& peerLogger();
std::vector<PeerId> without(std::vector<PeerId> ids, PeerId self);

}  // namespace gossamer::engine::runtime
