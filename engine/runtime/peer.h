// The runtime of one peer: its network (transport, mesh, membership) on an io thread, and its
// training on the thread that calls run() (the compute thread), driving a decentralized
// Algorithm through a PeerContext (engine/algorithm.h).
//
//   Peer peer(config, registry, data);   // starts the io thread, listens, joins by the seeds
//   PeerResult result = peer.run();      // waits for --min-peers members, trains, finishes
//
// run():
//   1. waits until the view holds config.training.minPeers members (startTimeout);
//   2. takes its data shard: the training set split into minPeers shards (iid or Dirichlet),
//      shard = this peer's rank among the members' sorted ids (mod minPeers);
//   3. builds the topology's graph over the members and calls algorithm.setup();
//   4. steps until totalSteps = epochs x ceil(train samples / (minPeers x batch)) (the same on
//   every
//      peer), rebuilding the graph and calling setup() again after a membership change, and
//      publishing a params snapshot at a step boundary whenever someone asked for one;
//   5. algorithm.finish(), then waits (finishTimeout) until every member has finished too, still
//      serving requests (an EASGD center must outlive its workers);
//   6. optionally pulls every member's final model and evaluates their average (the consensus
//      model), waits until every member is done pulling, and leaves the cluster gracefully.
//
// Messages to self never touch the network. Algorithm traffic is counted in bytes (header +
// payloads) per peer; runtime traffic (snapshot pulls, the finish barrier) and membership are not.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/algorithm.h"
#include "engine/data/sharding.h"
#include "engine/registry.h"
#include "engine/train/optimizer.h"
#include "engine/train/schedule.h"
#include "net/endpoint.h"
#include "net/membership/membership.h"
#include "net/shaped/profile.h"
#include "topology/topology.h"

namespace gossamer::net::inproc {
class Hub;
}
namespace gossamer::net::shaped {
class Partitions;
}

namespace gossamer::engine::runtime {

struct NetworkConfig {
  // "tcp" between processes and machines, "inproc" between peers of one process (sharing `hub`).
  std::string transport = "tcp";
  std::shared_ptr<net::inproc::Hub> hub;
  net::Endpoint listen{"127.0.0.1", 0};
  net::Endpoint advertise;           // where others reach us; empty host: the bound endpoint
  std::vector<net::Endpoint> seeds;  // empty: this peer starts the cluster
  // 0: derived from the listen endpoint when its port is fixed (a peer restarting there keeps
  // its identity), else random.
  std::uint64_t peerId = 0;
  std::string clusterId = "gossamer";
  std::vector<std::byte> secret;  // the cluster secret; never logged
  // An emulated network (net/shaped) around the transport: a profile, this peer's index in it
  // (its site and its side of partitions), the indices of the others by listen endpoint, and
  // run-time partitions. Unshaped when no profile is set and no partitions are given.
  std::optional<net::shaped::NetworkProfile> profile;
  std::size_t profileIndex = 0;
  std::function<std::optional<std::size_t>(const net::Endpoint&)> indexOf;
  std::shared_ptr<net::shaped::Partitions> partitions;
  net::membership::Options membership = net::membership::Options::local();
  std::chrono::milliseconds connectTimeout{2000};
};

struct TrainingConfig {
  std::string model = "mlp";
  ModelConfig modelConfig;  // inputs and classes are taken from the dataset
  std::string algorithm = "gosgd";
  OptionValues algorithmOptions;
  std::string topology;  // empty: the algorithm's default
  topology::TopologyOptions topologyOptions;
  kernels::Device device = kernels::Device::kCpu;
  train::OptimizerOptions optimizer;
  train::ScheduleOptions schedule;  // the learning rate over the run's steps
  std::size_t batch = 64;
  double epochs = 3;           // passes of the whole cluster over the training set
  std::uint64_t maxSteps = 0;  // > 0: stop after this many steps instead
  std::size_t minPeers = 1;    // training starts with this many members; also the shard count
  data::SplitKind split = data::SplitKind::kIid;
  double dirichletAlpha = 0.5;
  std::uint64_t seed = 1;  // initial model (the same on every peer), shards, shuffling
  std::chrono::milliseconds commTimeout{10000};    // default deadline of every wait
  std::chrono::milliseconds startTimeout{120000};  // for minPeers to join
  std::chrono::milliseconds finishTimeout{60000};  // for the others to finish
  std::int64_t evalEvery = 0;  // steps between evaluations of this peer's model (0: none)
  std::size_t evalSamples = 2000;
  // Replaces the seeded initial model (the same on every peer) with initialParams(rank, count),
  // host values for the peer of that rank among the members: for tests and experiments of
  // consensus, whose oracle is the average of distinct initial models.
  std::function<std::vector<float>(std::size_t rank, std::size_t count)> initialParams;
  bool finalLocalEval = true;   // evaluate this peer's model on the whole test set at the end
  bool finalConsensus = false;  // pull every member's model at the end and evaluate the average
  // Emulates a slower device: a step takes at least this long (the peer sleeps out the rest).
  // For tests and experiments of asynchrony, where tiny models step far faster than messages fly.
  std::chrono::microseconds minStepTime{0};
  std::size_t sendBuffers = 8;  // staging buffers for sends (each a model's size)
  std::size_t receiveBuffers = 16;
  std::string metricsPath;  // JSON lines (eval events, final); empty: none
  // Per-peer checkpoints (params, optimizer, data position, algorithm state) written atomically
  // to DIR/peer-<id>.ckpt every checkpointEvery steps (0: only at the end) and at the end.
  std::string checkpointDir;
  std::int64_t checkpointEvery = 0;
  // Restore this peer's checkpoint from checkpointDir before training and (re)join the cluster;
  // a missing, corrupt or mismatched checkpoint is an error at construction.
  bool resume = false;
  bool progress = false;  // draw a progress bar on stdout
};

struct PeerConfig {
  NetworkConfig network;
  TrainingConfig training;
};

// A copy of a peer's params at one of its step boundaries.
struct Snapshot {
  PeerId peer = 0;
  std::uint64_t step = 0;
  std::vector<float> params;
};

// The accuracy of the average of the members' models, and how far they are from it.
struct ConsensusResult {
  std::size_t peers = 0;
  double accuracy = 0;
  double loss = 0;
  double distance = 0;  // mean over peers of ||w_i - mean w||^2
  double minPeerAccuracy = 0;
  double meanPeerAccuracy = 0;
};

struct PeerResult {
  PeerId peer = 0;
  std::string algorithm;
  std::string topology;
  std::size_t peers = 0;  // members at the start
  std::uint64_t steps = 0;
  std::int64_t samples = 0;
  double wallSeconds = 0;   // the training loop (steps), without waiting for others at the end
  double trainLoss = 0;     // mean over the last 50 steps
  double testAccuracy = 0;  // this peer's own model (finalLocalEval)
  double testLoss = 0;
  std::optional<ConsensusResult> consensus;
  std::uint64_t bytesSent = 0;  // algorithm traffic, headers included
  std::uint64_t bytesReceived = 0;
  double commWaitSeconds = 0;             // blocked in gather, request and send back-pressure
  double commWaitFraction = 0;            // of wallSeconds
  bool stopped = false;                   // requestStop() ended it early
  std::map<std::string, double> metrics;  // what the algorithm counted
};

// What any thread may read about a running peer.
struct PeerStatus {
  std::uint64_t step = 0;
  std::uint64_t totalSteps = 0;
  double loss = 0;  // exponential moving average of the step losses
  std::uint64_t bytesSent = 0;
  std::uint64_t bytesReceived = 0;
  double commWaitSeconds = 0;
  double trainSeconds = 0;
  bool training = false;
  bool finished = false;
};

class Peer {
 public:
  // Builds the model, the algorithm and the topology, starts the io thread, listens and begins
  // joining. `registry` and `data` must outlive the peer. Throws gossamer::Error on bad
  // configuration (unknown names, bad options, cannot listen).
  Peer(PeerConfig config, const Registry& registry, std::shared_ptr<const DatasetPair> data);
  // Leaves gracefully if run() finished, else stops as a crash would.
  ~Peer();
  Peer(const Peer&) = delete;
  Peer& operator=(const Peer&) = delete;

  PeerId id() const;
  net::Endpoint endpoint() const;  // where others reach this peer

  // Trains on the calling thread (see the header comment). Call once. Throws gossamer::Error when
  // too few peers joined in time, or on a bug; returns early (stopped) after requestStop().
  PeerResult run();

  // Any thread: training ends at the next step boundary, then finishes as usual (for a whole
  // cluster stopping together).
  void requestStop();
  // Any thread: this peer leaves at its next step boundary while the others go on: the algorithm
  // hands over what it must (Algorithm::leave), then the membership leave is announced.
  void requestLeave();
  // Any thread: stops at once without telling anyone, as kill -9 would look from outside; run()
  // returns soon after with what it had.
  void kill();

  // Any thread: this peer's params at its next step boundary (at once after training), or
  // nullopt after `timeout`.
  std::optional<Snapshot> snapshot(Clock::duration timeout);
  PeerStatus status() const;
  net::membership::View view() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Evaluates the average of `snapshots` (and each of them) on `test` with a CPU copy of the model.
class ConsensusEvaluator {
 public:
  ConsensusEvaluator(const Registry& registry, const std::string& model, ModelConfig config,
                     const data::Dataset& test);
  ~ConsensusEvaluator();
  // `samples` = 0: the whole test set. Each peer's own accuracy is evaluated when `perPeer`.
  ConsensusResult evaluate(std::span<const Snapshot> snapshots, std::size_t samples = 0,
                           bool perPeer = true);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// A stable identity for a peer listening at `listen`: FNV-1a of "host:port" (never 0).
std::uint64_t peerIdFor(const net::Endpoint& listen);

}  // namespace gossamer::engine::runtime
