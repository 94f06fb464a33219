// What gossamer-peer's flags make (peer_options.h): the data, the topology's options and the
// configurations of a single peer and of a cluster peer.
#include <algorithm>

#include <fmt/format.h>

#include "engine/base/enforce.h"
#include "engine/base/log.h"
#include "engine/data/sharding.h"
#include "engine/peer_options.h"
#include "engine/runtime/network.h"
#include "engine/runtime/tcp_streams.h"
#include "net/shaped/profile.h"
#include "net/wire/handshake.h"

namespace gossamer::engine::cli {
namespace {

// Seconds of a flag (finite and not negative: its check) as a duration, a century at most.
std::chrono::milliseconds durationOf(double seconds) {
  return std::chrono::milliseconds(static_cast<std::int64_t>(std::min(seconds, 3.2e9) * 1000));
}

// What every peer trains with, alone or in a cluster.
engine::runtime::TrainingConfig trainingConfig(const PeerOptions& o) {
  engine::runtime::TrainingConfig t;
  t.model = o.model;
  t.modelConfig.hidden = o.hidden;
  t.device = engine::parseDevice(o.device);
  t.optimizer = o.optimizerOptions;
  t.optimizer.kind = engine::train::parseOptimizerKind(o.optimizer);
  t.schedule = {engine::train::parseLrSchedule(o.lrSchedule), o.warmupSteps};
  t.batch = o.batch;
  t.epochs = o.epochs;
  t.maxSteps = o.maxSteps;
  t.split = engine::data::parseSplitKind(o.split);
  t.dirichletAlpha = o.dirichletAlpha;
  t.seed = o.seed;
  t.commTimeout = durationOf(o.commTimeout);
  t.compression = {kernels::parseCodec(o.compress), o.errorFeedback == "on"};
  t.normBound = {o.maxNormRatio};
  t.startTimeout = durationOf(o.startTimeout);
  t.finishTimeout = durationOf(o.finishTimeout);
  t.stallTimeout = durationOf(o.stallTimeout);
  t.minStepTime = std::chrono::microseconds(static_cast<std::int64_t>(o.minStepTime * 1000));
  for (double ms : o.peerStepTimes)
    t.peerStepTimes.emplace_back(static_cast<std::int64_t>(ms * 1000));
  t.evalSamples = o.evalSamples;
  t.metricsPath = o.metricsPath;
  t.checkpointEvery = o.checkpointEvery;
  t.resume = o.resume;
  return t;
}

// --insecure-plaintext, or --tls-cert/--tls-key/--tls-ca, or the default: TLS with a key derived
// from the cluster secret.
void setSecurity(const PeerOptions& o, engine::runtime::NetworkConfig& n) {
  using Security = engine::runtime::NetworkConfig::Security;
  const bool certificates = !o.tlsCert.empty() || !o.tlsKey.empty() || !o.tlsCa.empty();
  GOSSAMER_ENFORCE(!(certificates && o.insecurePlaintext),
                   "--insecure-plaintext turns TLS off; it cannot go with --tls-cert, --tls-key or "
                   "--tls-ca");
  GOSSAMER_ENFORCE(!certificates || (!o.tlsCert.empty() && !o.tlsKey.empty() && !o.tlsCa.empty()),
                   "TLS with certificates needs all of --tls-cert, --tls-key and --tls-ca");
  n.security = o.insecurePlaintext ? Security::plaintext
               : certificates      ? Security::tlsCertificates
                                   : Security::tlsPsk;
  n.tlsCert = o.tlsCert;
  n.tlsKey = o.tlsKey;
  n.tlsCa = o.tlsCa;
}

}  // namespace

topology::TopologyOptions topologyOptions(const PeerOptions& o) {
  topology::TopologyOptions t;
  t.mixing =
      o.mixing == "uniform" ? topology::Mixing::kUniform : topology::Mixing::kMetropolisHastings;
  t.arity = o.treeArity;
  t.degree = o.degree;
  t.centerIndex = o.starCenter;
  t.file = o.topologyFile;
  t.seed = o.seed;
  return t;
}

std::shared_ptr<const engine::DatasetPair> loadData(const PeerOptions& o,
                                                    const engine::Registry& registry) {
  return std::make_shared<const engine::DatasetPair>(
      registry.datasets.get(o.dataset)({.dataDir = o.dataDir,
                                        .trainSamples = o.trainSamples,
                                        .testSamples = o.testSamples,
                                        .seed = o.seed}));
}

// A peer training alone: a cluster of one, with nobody to exchange with.
PeerConfig singleConfig(const PeerOptions& o) {
  GOSSAMER_ENFORCE(o.shardIndex < o.shards, "--shard-index {} must be below --shards {}",
                   o.shardIndex, o.shards);
  GOSSAMER_ENFORCE(!o.resume || !o.checkpointFile.empty(), "--resume needs --checkpoint FILE");
  PeerConfig c;
  engine::runtime::TrainingConfig& t = c.training = trainingConfig(o);
  t.algorithm = "none";
  t.shards = o.shards;
  t.shardIndex = o.shardIndex;
  t.epochs = std::max(1.0, o.epochs);
  t.evalEvery = o.evalEvery >= 0 ? o.evalEvery : engine::runtime::TrainingConfig::kEachEpoch;
  t.checkpointFile = o.checkpointFile;
  t.progress = !o.json;
  c.network.transport = "inproc";  // a cluster of one: no other peer can reach it
  return c;
}

// The start-up line saying how links are secured, and what TLS does not cover.
void logSecurity(const PeerOptions& o, const engine::runtime::NetworkConfig& n) {
  auto logger = log::get("engine");
  if (n.security == engine::runtime::NetworkConfig::Security::plaintext) {
    logger->warn("links: {}", engine::runtime::describeSecurity(n));
    return;
  }
  logger->info("links: {}", engine::runtime::describeSecurity(n));
  if (o.transport == "ibverbs")
    logger->warn(
        "links: TLS covers the RDMA transport's TCP control connections only; frames and "
        "parameters travel by RDMA unencrypted and without TLS integrity protection");
}

PeerConfig peerConfig(const PeerOptions& o, const engine::Registry& registry) {
  GOSSAMER_ENFORCE(!o.algorithm.empty(),
                   "--algorithm is required with --local, --listen or --seeds "
                   "(one of: {})",
                   fmt::join(registry.algorithms.names(), ", "));
  for (const auto& [name, values] : o.algorithmOptions) {
    GOSSAMER_ENFORCE(name == o.algorithm,
                     "--{}.{} is an option of algorithm {}, but --algorithm is {}", name,
                     values.begin()->first, name, o.algorithm);
  }
  PeerConfig c;
  engine::runtime::TrainingConfig& t = c.training = trainingConfig(o);
  t.algorithm = o.algorithm;
  if (const auto it = o.algorithmOptions.find(o.algorithm); it != o.algorithmOptions.end())
    t.algorithmOptions = engine::OptionValues(it->second.begin(), it->second.end());
  t.topology = o.topology;
  t.topologyOptions = topologyOptions(o);
  t.minPeers = o.local > 0 ? o.local : o.minPeers;
  GOSSAMER_ENFORCE(o.peerStepTimes.empty() || o.local > 0,
                   "--peer-step-times gives each peer of a --local cluster its step time; a peer "
                   "process takes --step-time");
  t.evalEvery = std::max<std::int64_t>(o.evalEvery, 0);
  if (t.evalSamples == 0) t.evalSamples = 2000;
  t.checkpointDir = o.checkpointDir;
  GOSSAMER_ENFORCE(!t.resume || !t.checkpointDir.empty(),
                   "--resume of a cluster peer needs --checkpoint-dir (where its checkpoint is)");
  GOSSAMER_ENFORCE(o.checkpointFile.empty(),
                   "--checkpoint is for a single peer; a cluster peer takes --checkpoint-dir");
  t.progress = !o.json && o.local == 0;
  t.finalConsensus = o.local == 0;

  engine::runtime::NetworkConfig& n = c.network;
  n.clusterId = o.clusterId;
  setSecurity(o, n);
  n.membership = net::membership::Options::named(o.membership);
  n.relay.enabled = o.relay == "on";
  n.relay.budgetBytesPerSecond = o.relayBudget * 1e6 / 8;
  if (o.network != "lan") n.profile = net::shaped::NetworkProfile::fromSpec(o.network);
  n.profileIndex = o.networkIndex;
  n.tcpStreams = engine::runtime::parseTcpStreams(o.tcpStreams);
  if (o.local > 0) {
    GOSSAMER_ENFORCE(o.transport.empty() && o.transportOptions.empty(),
                     "--transport and its options are for peer processes; --local peers take "
                     "--local-transport");
    n.transport = o.localTransport;
    if (!o.secretFile.empty()) n.secret = net::wire::readSecretFile(o.secretFile);
  } else {
    GOSSAMER_ENFORCE(!o.secretFile.empty(),
                     "--secret-file is required for a networked peer (a file "
                     "holding the cluster secret, e.g. made by `head -c 32 "
                     "/dev/urandom | base64 > secret; chmod 600 secret`)");
    n.secret = net::wire::readSecretFile(o.secretFile);
    if (!o.transport.empty()) n.transport = o.transport;
    n.transportOptions = o.transportOptions;
    if (!o.listen.empty())
      n.listen = net::Endpoint::parse(o.listen);  // else the transport's default
    if (!o.advertise.empty()) {
      // HOST alone (a name or an address, [::1] for IPv6): the port is the one listened on.
      const bool hostOnly = o.advertise.find(':') == std::string::npos ||
                            (o.advertise.front() == '[' && o.advertise.back() == ']');
      n.advertise = hostOnly
                        ? net::Endpoint::parse(o.advertise + ":" + std::to_string(n.listen.port))
                        : net::Endpoint::parse(o.advertise);
    }
    GOSSAMER_ENFORCE(!o.advertise.empty() || (n.listen.host != "0.0.0.0" && n.listen.host != "::"),
                     "--listen {} accepts on every interface; add --advertise HOST:PORT, the "
                     "address other machines reach this peer at",
                     o.listen);
    for (const std::string& seed : o.seeds) n.seeds.push_back(net::Endpoint::parse(seed));
    n.peerId = o.peerId;
    n.noInbound = o.noInbound;
    t.joinTimeout = durationOf(o.joinTimeout);
  }
  return c;
}

}  // namespace gossamer::engine::cli
