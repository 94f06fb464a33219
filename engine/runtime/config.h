// What a peer is configured with: its network (transport, address, seeds, secret, emulated
// network, membership) and its training (model, algorithm, topology, optimizer, schedule, data,
// timeouts, evaluation, checkpoints). gossamer-peer fills these from its flags; a program that
// embeds peers fills them itself (engine/runtime/peer.h).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/builtin.h"
#include "engine/data/sharding.h"
#include "engine/options.h"
#include "engine/registry.h"
#include "engine/runtime/eval_points.h"
#include "engine/train/optimizer.h"
#include "engine/train/schedule.h"
#include "net/endpoint.h"
#include "net/membership/membership.h"
#include "net/relay/relay_options.h"
#include "net/shaped/profile.h"
#include "net/wire/identity.h"
#include "topology/topology.h"

namespace gossamer::net::shaped {
class Partitions;
}

namespace gossamer::engine::runtime {

struct NetworkConfig {
  // The transport by its registry name (built in: "tcp" between processes and machines,
  // "ibverbs" (RDMA) between machines with an RDMA device, "inproc" between peers of one process)
  // and its options. `transportMaker`, when set, is used instead of preparing a fresh one: the
  // peers given one maker share what the transport shares (LocalPeerConfigs gives its inproc
  // peers one hub; an inproc peer on its own is a cluster of one).
  std::string transport = "tcp";
  OptionValues transportOptions;
  TransportMaker transportMaker;
  net::Endpoint listen;              // empty host: the transport's default (127.0.0.1:0, inproc:0)
  net::Endpoint advertise;           // where others reach us; empty host: the bound endpoint
  std::vector<net::Endpoint> seeds;  // empty: this peer starts the cluster
  // 0: derived from the listen endpoint when its port is fixed (a peer restarting there keeps
  // its identity), else random.
  std::uint64_t peerId = 0;
  std::string clusterId = "gossamer";
  // This peer cannot be dialed (--no-inbound: behind a NAT or a firewall): it says so in its
  // member record, and the others reach it on the links it opens. Without it, the member it joins
  // through dials its advertised address back and marks it dial-out only when that fails.
  bool noInbound = false;
  // What this peer lends to relayed links between members that cannot reach each other
  // (--relay, --relay-budget).
  net::relay::RelayOptions relay;
  std::vector<std::byte> secret;  // the cluster secret; never logged; empty: a random one
  // This peer's identity key pair (net/wire/identity.h), which every link proves. Null: a Peer
  // loads or makes it beside its checkpoints (peer-<id>.key in the checkpoint directory, or the
  // checkpoint file's name with ".key"), else in the state directory ($GOSSAMER_STATE_DIR, else
  // $XDG_STATE_HOME/gossamer, else ~/.local/state/gossamer; CLUSTER-ID/peer-<id>.key); a peer of
  // a random id gets a fresh one for this process.
  std::shared_ptr<const net::wire::Identity> identity;
  // How TCP connections (tcp, and ibverbs' control connections) are secured: TLS 1.3 with a key
  // derived from `secret` (the default), TLS 1.3 with certificates, or plaintext.
  enum class Security { tlsPsk, tlsCertificates, plaintext };
  Security security = Security::tlsPsk;
  // tlsCertificates: PEM files of this peer's certificate chain and key, and the cluster's CA.
  std::string tlsCert;
  std::string tlsKey;
  std::string tlsCa;
  // An emulated network (net/shaped) around the transport: a profile, this peer's index in it
  // (its site and its side of partitions), the indices of the others by listen endpoint, and
  // run-time partitions. Unshaped when no profile is set and no partitions are given.
  std::optional<net::shaped::NetworkProfile> profile;
  std::size_t profileIndex = 0;
  std::function<std::optional<std::size_t>(const net::Endpoint&)> indexOf;
  std::shared_ptr<net::shaped::Partitions> partitions;
  net::membership::Options membership = net::membership::Options::local();
  // Opening an algorithm link (connect and handshake: a few round trips). On `geo` the handshake
  // of a pair's second link queues behind the bulk data the pair already exchanges; at 2 s
  // handshakes failed there under load and the message that opened the link was lost. A send to
  // a dead peer waits this long at most, asynchronously on the io thread.
  std::chrono::milliseconds connectTimeout{10000};
  // Connections per tcp link (net/striped): large frames are cut into one chunk per connection,
  // so a long path is not held to one connection's window / RTT. 0: auto, as many as fill the
  // path (net::striped::autoStreams, from the round trip measured at connect, the connection's
  // window and the path's capacity: the profile's link when emulated, else the fastest interface).
  std::size_t tcpStreams = 0;
  // Sends that may wait for a link that was open and broke to open again (PeerNetwork::send);
  // more fail at once, so that a dead peer, until it is suspected, holds at most this many of the
  // peer's send slots (Peer sets it to half of TrainingConfig::sendBuffers).
  std::size_t linkWaitLimit = 4;
};

struct TrainingConfig {
  std::string model = "mlp";
  ModelConfig modelConfig;  // inputs and classes are taken from the dataset
  std::string algorithm = "gosgd";
  OptionValues algorithmOptions;
  std::string topology;  // empty: the algorithm's default
  topology::TopologyOptions topologyOptions;
  // The CPU (the reference backend) unless asked; gossamer-peer's --device defaults to auto.
  DeviceChoice device = DeviceChoice::kCpu;
  // A Compute of the caller's instead of `device`'s (an embedding's own backend, or a test's
  // device-like one); each peer calls it once.
  std::function<std::unique_ptr<kernels::Compute>()> makeCompute;
  train::OptimizerOptions optimizer;
  train::ScheduleOptions schedule;  // the learning rate over the run's steps
  std::size_t batch = 64;
  double epochs = 3;           // passes of the whole cluster over the training set
  std::uint64_t maxSteps = 0;  // > 0: stop after this many steps instead
  std::size_t minPeers = 1;    // training starts with this many members; also the shard count
  data::SplitKind split = data::SplitKind::kIid;
  double dirichletAlpha = 0.5;
  // Fixed shards: train on shard `shardIndex` of `shards` whatever the members are (a single peer
  // taking its part of a dataset). 0: one shard per member, this peer's by its rank.
  std::size_t shards = 0;
  std::size_t shardIndex = 0;
  std::uint64_t seed = 1;  // initial model (the same on every peer), shards, shuffling
  // How payloads that the algorithm marks compressible travel (engine/runtime/payload_codec.h).
  PayloadCompression compression;
  // Received models, differences, deltas and gradients farther from this peer's own than this
  // allows are refused as outliers (engine/algorithm.h, NormBound); off by default.
  NormBound normBound;
  std::chrono::milliseconds commTimeout{10000};    // default deadline of every wait
  std::chrono::milliseconds startTimeout{120000};  // for minPeers to join
  // A peer with seeds that joined no one within this (no seed admitted it, and no peer joined
  // through it) gives up, training or not: run() returns with PeerResult::joinFailure saying why.
  // Never once it has joined: a peer that loses the cluster later goes on and rejoins. 0: never.
  std::chrono::milliseconds joinTimeout{0};
  std::chrono::milliseconds finishTimeout{60000};  // for the others to finish
  // A step that waits on the others this long without progress is a stall (stall_watch.h): the
  // peer logs what it waits for and re-checks the view; at twice this it gives up
  // (PeerResult::stalled). 0: three comm timeouts, and at least ten mean steps.
  std::chrono::milliseconds stallTimeout{0};
  // Steps between evaluations of this peer's own model on evalSamples test samples, logged to
  // the metrics and the progress view; 0: none; kEachEpoch: after every pass over its shard.
  static constexpr std::int64_t kEachEpoch = -1;
  std::int64_t evalEvery = 0;
  std::size_t evalSamples = 2000;  // 0: the whole test set
  // Evaluation points of the cluster (eval_points.h): as it passes each, this peer hands
  // onEvalPoint a copy of its model and its figures, off its clock. Set by whoever evaluates the
  // points (a local cluster's monitor); no sink: no points.
  EvalSchedule evalPoints;
  PointSink onEvalPoint;
  // Time-boxed rounds' merged models (PeerContext::roundMerged), each a host copy, off this
  // peer's clock: set by whoever evaluates a local cluster at round boundaries; none: no copies.
  std::function<void(std::uint64_t round, std::vector<float> model)> onRoundMerged;
  // Replaces the seeded initial model (the same on every peer) with initialParams(rank, count),
  // host values for the peer of that rank among the members: for tests and experiments of
  // consensus, whose oracle is the average of distinct initial models.
  std::function<std::vector<float>(std::size_t rank, std::size_t count)> initialParams;
  bool finalLocalEval = true;   // evaluate this peer's model on the whole test set at the end
  bool finalConsensus = false;  // pull every member's model at the end and evaluate the average
  // Emulated compute (--step-time): a step's gradient computation takes at least this long (the
  // real compute runs, the peer sleeps out the rest), so that a small model steps at the pace of
  // a large one on a real accelerator while its messages fly as they would. Waits for messages
  // come on top, as they do on real hardware.
  std::chrono::microseconds minStepTime{0};
  // Uneven peers (peer-step-times): in a local or simulated cluster, the peer of index i (from
  // 0, in id order; joiners continue the count) steps at entry i mod size instead of
  // minStepTime (stepTimeOf). Empty: minStepTime for every peer.
  std::vector<std::chrono::microseconds> peerStepTimes;
  std::size_t sendBuffers = 8;  // staging buffers for sends (each at most a model's size)
  std::size_t receiveBuffers = 16;
  std::string metricsPath;  // JSON lines (eval events, final); empty: none
  // Checkpoints (params, optimizer, data position, algorithm state), written atomically every
  // checkpointEvery steps (0: only at the end) and at the end: to checkpointFile, or when that is
  // empty to checkpointDir/peer-<id>.ckpt; neither: none.
  std::string checkpointFile;
  std::string checkpointDir;
  std::int64_t checkpointEvery = 0;
  // Restore this peer's checkpoint before training and (re)join the cluster; a missing, corrupt
  // or mismatched checkpoint is an error at construction.
  bool resume = false;
  bool progress = false;  // draw a progress bar on stdout
};

// The emulated compute per step of the cluster peer of index `index` (TrainingConfig's
// peerStepTimes, else minStepTime).
inline std::chrono::microseconds stepTimeOf(const TrainingConfig& t, std::size_t index) {
  return t.peerStepTimes.empty() ? t.minStepTime : t.peerStepTimes[index % t.peerStepTimes.size()];
}

struct PeerConfig {
  NetworkConfig network;
  TrainingConfig training;
};

}  // namespace gossamer::engine::runtime
