// What gossamer-peer's flags set (PeerOptions, one field a setting of peer_settings.h, whose
// declarations bind it to the flags, config files and environment variables), and the peer
// configurations they make.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "engine/exit_status.h"
#include "engine/registry.h"
#include "engine/runtime/config.h"
#include "topology/topology.h"

namespace gossamer::engine::cli {

using runtime::PeerConfig;

struct PeerOptions {
  // model, data, local optimizer
  std::string model = "mlp";
  std::vector<std::size_t> hidden = {256, 256};
  std::string dataset = "fashion-mnist";
  std::string dataDir;
  std::size_t trainSamples = 0;
  std::size_t testSamples = 0;
  std::size_t shards = 1;
  std::size_t shardIndex = 0;
  std::string split = "iid";
  double dirichletAlpha = 0.5;
  std::string device = "auto";
  std::string optimizer = "momentum";
  engine::train::OptimizerOptions optimizerOptions;
  std::string lrSchedule = "cosine";
  std::uint64_t warmupSteps = 0;
  std::size_t batch = 64;
  double epochs = 3;
  std::uint64_t maxSteps = 0;
  std::uint64_t seed = 1;
  std::int64_t evalEvery = -1;  // -1: the default of the mode (single peer: each epoch; else none)
  std::size_t evalSamples = 0;
  std::string metricsPath;
  std::string checkpointFile;
  std::int64_t checkpointEvery = 0;
  bool resume = false;
  std::string logLevel = "info";
  bool json = false;

  // the cluster
  std::string algorithm;
  std::map<std::string, std::map<std::string, std::string>> algorithmOptions;  // set by the user
  std::string topology;
  std::string mixing = "metropolis";
  std::size_t treeArity = 2;
  std::size_t degree = 4;
  std::size_t starCenter = 0;
  std::string topologyFile;
  std::size_t minPeers = 1;
  std::string listen;
  std::string advertise;
  std::vector<std::string> seeds;
  std::uint64_t peerId = 0;
  std::string secretFile;
  bool insecurePlaintext = false;
  bool noInbound = false;
  std::string relay = "on";
  double relayBudget = 0;  // Mbit/s; 0: no bound
  std::string tlsCert;
  std::string tlsKey;
  std::string tlsCa;
  std::string clusterId = "gossamer";
  std::string network = "lan";
  std::size_t networkIndex = 0;
  std::string membership = "local";
  std::string transport;                  // empty: tcp
  engine::OptionValues transportOptions;  // --transport-option and the --rdma-* flags
  std::string tcpStreams = "auto";        // --tcp-streams: auto or a count
  std::string checkpointDir;
  double commTimeout = 10;
  std::string compress = "none";
  std::string errorFeedback = "on";
  double maxNormRatio = 0;
  double minStepTime = 0;             // milliseconds
  std::vector<double> peerStepTimes;  // milliseconds, per peer of --local (repeating)
  double startTimeout = 120;
  double joinTimeout = 60;
  double finishTimeout = 60;
  double stallTimeout = 0;
  std::size_t local = 0;
  std::string localTransport = "inproc";
  std::int64_t clusterEvalEvery = 0;

  std::string describeTopology;
  std::size_t describePeers = 16;

  bool networked() const {
    return !algorithm.empty() || local > 0 || !listen.empty() || !seeds.empty();
  }
};

// ---- what they make (peer_config.cc) ----
topology::TopologyOptions topologyOptions(const PeerOptions& o);
std::shared_ptr<const DatasetPair> loadData(const PeerOptions& o, const Registry& registry);
// A peer training alone: a cluster of one, with nobody to exchange with.
PeerConfig singleConfig(const PeerOptions& o);
// A cluster peer (--listen/--seeds) or the template of a --local cluster's peers.
PeerConfig peerConfig(const PeerOptions& o, const Registry& registry);
// The start-up line saying how links are secured, and what TLS does not cover.
void logSecurity(const PeerOptions& o, const runtime::NetworkConfig& n);

}  // namespace gossamer::engine::cli
