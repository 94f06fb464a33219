// gossamer-peer: one peer of a decentralized training cluster, a whole local cluster, or a single
// peer training alone.
//
//   gossamer-peer --listen H:P --seeds H:P,... --secret-file F --algorithm NAME --min-peers N ...
//       one peer process; peers on other machines join by the seed list
//   gossamer-peer --local N --algorithm NAME ...
//       N peers in this process (threads), over the in-process transport or TCP on 127.0.0.1
//   gossamer-peer --model mlp --epochs 3 ...
//       (no network flags) one peer training alone, with checkpoints and --resume: a cluster of
//       one, through the same runtime and training loop as every peer
//   gossamer-peer --describe-topology NAME --peers N
//       degree, diameter and spectral gap of a topology
#include <atomic>
#include <cctype>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <unistd.h>

#include "algorithms/builtin.h"
#include "engine/base/config.h"
#include "engine/base/enforce.h"
#include "engine/base/json.h"
#include "engine/base/log.h"
#include "engine/builtin.h"
#include "engine/data/sharding.h"
#include "engine/runtime/cluster.h"
#include "engine/runtime/network.h"
#include "engine/runtime/peer.h"
#include "net/shaped/profile.h"
#include "net/wire/handshake.h"

namespace {

using namespace gossamer;
using engine::runtime::ClusterResult;
using engine::runtime::PeerConfig;
using engine::runtime::PeerResult;

// Set by SIGINT/SIGTERM: training ends at the next step boundary and the run finishes normally.
std::atomic<bool> gStop{false};
extern "C" void onSignal(int) { gStop = true; }

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
  std::string tlsCert;
  std::string tlsKey;
  std::string tlsCa;
  std::string clusterId = "gossamer";
  std::string network = "lan";
  std::size_t networkIndex = 0;
  std::string membership = "local";
  std::string transport;  // empty: tcp
  engine::OptionValues transportOptions;  // --transport-option and the --rdma-* flags
  std::string checkpointDir;
  double commTimeout = 10;
  std::string compress = "none";
  std::string errorFeedback = "on";
  double maxNormRatio = 0;
  double minStepTime = 0;  // milliseconds
  double startTimeout = 120;
  double joinTimeout = 60;
  double finishTimeout = 60;
  std::size_t local = 0;
  std::string localTransport = "inproc";
  std::int64_t clusterEvalEvery = 0;

  std::string describeTopology;
  std::size_t describePeers = 16;

  bool networked() const {
    return !algorithm.empty() || local > 0 || !listen.empty() || !seeds.empty();
  }
};

// The exit status of a peer that joined no one within --join-timeout (other failures: 1).
constexpr int kExitCannotJoin = 3;

// The one line a failure ends with, on stderr.
void printError(const std::string& sentence) {
  fmt::print(stderr, "gossamer-peer: error: {}\n", sentence);
}

// SECONDS: a finite number of seconds, above 0, or also 0 where 0 means "never".
CLI::Validator secondsFlag(bool zeroAllowed) {
  return CLI::Validator(
      [zeroAllowed](std::string& text) -> std::string {
        char* end = nullptr;
        const double value = std::strtod(text.c_str(), &end);
        const bool number =
            !text.empty() && end == text.c_str() + text.size() && std::isfinite(value);
        if (number && (zeroAllowed ? value >= 0 : value > 0)) return {};
        return fmt::format("'{}' is not a number of seconds ({})", text,
                           zeroAllowed ? "0 or more" : "more than 0");
      },
      "SECONDS");
}

void addModelOptions(CLI::App& app, PeerOptions& o, const engine::Registry& registry) {
  app.set_config("--config", "",
                 "read flags from a TOML/INI config file (CLI11 format; "
                 "algorithm options go in a [NAME] section)");
  app.add_option("--model", o.model, "model:\n" + registry.models.describe())
      ->capture_default_str();
  app.add_option("--hidden", o.hidden, "hidden layer widths of the MLP, e.g. 256,256")
      ->delimiter(',')
      ->capture_default_str();
  app.add_option("--dataset", o.dataset, "dataset:\n" + registry.datasets.describe())
      ->capture_default_str();
  app.add_option("--data-dir", o.dataDir,
                 "directory of the dataset files (default: the "
                 "dataset's install location)");
  app.add_option("--train-samples", o.trainSamples,
                 "use only the first N training samples (0: all)");
  app.add_option("--test-samples", o.testSamples, "use only the first N test samples (0: all)");
  app.add_option("--shards", o.shards, "single peer: split the training set into this many shards")
      ->check(CLI::PositiveNumber);
  app.add_option("--shard-index", o.shardIndex, "single peer: train on this shard (0-based)");
  app.add_option("--split", o.split, "how shards are drawn: iid or dirichlet")
      ->check(CLI::IsMember({"iid", "dirichlet"}))
      ->capture_default_str();
  app.add_option("--dirichlet-alpha", o.dirichletAlpha,
                 "label skew of the dirichlet split "
                 "(smaller: more skewed)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--device", o.device,
                 "compute device: auto (CUDA when a GPU is usable, else the CPU, logging why), "
                 "cpu, or cuda (fails at start, with the reason, when no GPU is usable)")
      ->check(CLI::IsMember({"auto", "cpu", "cuda"}))
      ->capture_default_str();
  app.add_option("--optimizer", o.optimizer, "local optimizer: sgd, momentum, nesterov or adam")
      ->check(CLI::IsMember({"sgd", "momentum", "nesterov", "adam"}))
      ->capture_default_str();
  app.add_option("--lr", o.optimizerOptions.lr, "learning rate")->capture_default_str();
  app.add_option("--lr-schedule", o.lrSchedule, "constant or cosine (decays to 0 at the last step)")
      ->check(CLI::IsMember({"constant", "cosine"}))
      ->capture_default_str();
  app.add_option("--warmup-steps", o.warmupSteps, "linear learning-rate warm-up steps")
      ->capture_default_str();
  app.add_option("--momentum", o.optimizerOptions.momentum, "momentum coefficient")
      ->capture_default_str();
  app.add_option("--weight-decay", o.optimizerOptions.weightDecay, "L2 weight decay")
      ->capture_default_str();
  app.add_option("--epochs", o.epochs,
                 "passes over the training set (a cluster: of all its peers "
                 "together)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--steps", o.maxSteps, "a cluster: stop after this many steps per peer instead");
  app.add_option("--batch", o.batch, "mini-batch size")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--seed", o.seed, "seed of initialisation, sharding and shuffling")
      ->capture_default_str();
  app.add_option("--eval-every", o.evalEvery,
                 "steps between evaluations of this peer's model on the test set (0: none; "
                 "default: each epoch for a single peer, none for a cluster peer)");
  app.add_option("--eval-samples", o.evalSamples,
                 "test samples per periodic evaluation (0: all; the final one uses all)");
  app.add_option("--metrics", o.metricsPath, "append JSON-lines metrics to this file");
  app.add_option("--checkpoint", o.checkpointFile,
                 "single peer: checkpoint file (written atomically)");
  app.add_option("--checkpoint-dir", o.checkpointDir,
                 "a cluster peer: directory of its checkpoint DIR/peer-<id>.ckpt (written "
                 "atomically; params, optimizer, data position and algorithm state)");
  app.add_option("--checkpoint-every", o.checkpointEvery,
                 "steps between checkpoints (0: only at the end)");
  app.add_flag("--resume", o.resume,
               "continue from --checkpoint (single peer) or from this peer's checkpoint in "
               "--checkpoint-dir, rejoining the cluster (a cluster peer)");
  app.add_option("--log-level", o.logLevel, "trace, debug, info, warn, error, off")
      ->capture_default_str();
  app.add_flag("--json", o.json,
               "print one JSON object with the results as the last stdout line "
               "(and no progress view)");
}

// Every algorithm's options as --NAME.OPTION flags (a config file's [NAME] section sets them too).
void addAlgorithmOptions(CLI::App& app, PeerOptions& o, const engine::Registry& registry) {
  for (const std::string& name : registry.algorithms.names()) {
    const engine::AlgorithmSpec& spec = registry.algorithms.get(name);
    for (const engine::OptionInfo& info : spec.options) {
      const std::string flag = "--" + name + "." + info.name;
      app.add_option_function<std::string>(
             flag,
             [&o, name, key = info.name](const std::string& value) {
               o.algorithmOptions[name][key] = value;
             },
             fmt::format("{} ({}, default {})", info.help, info.type, info.defaultValue))
          ->group("Options of algorithm " + name);
    }
  }
}

void addClusterOptions(CLI::App& app, PeerOptions& o, const engine::Registry& registry) {
  const std::string cluster = "Cluster";
  std::string algorithms;
  for (const std::string& name : registry.algorithms.names()) {
    const engine::AlgorithmSpec& spec = registry.algorithms.get(name);
    algorithms += fmt::format("\n  {}: {} (default topology: {})", name, spec.description,
                              spec.defaultTopology);
  }
  app.add_option("--algorithm", o.algorithm, "decentralized optimizer:" + algorithms)
      ->group(cluster);
  app.add_option(
         "--topology", o.topology,
         "communication graph (default: the algorithm's):\n" + registry.topologies.describe())
      ->group(cluster);
  app.add_option("--mixing", o.mixing,
                 "mixing weights of undirected topologies: metropolis (Metropolis-Hastings, "
                 "doubly stochastic on every graph; metropolis-hastings is the same) or uniform "
                 "(1/(degree+1), doubly stochastic only on regular graphs)")
      ->check(CLI::IsMember({"metropolis", "metropolis-hastings", "uniform"}))
      ->capture_default_str()
      ->group(cluster);
  app.add_option("--tree-arity", o.treeArity, "children per node of the tree topology")
      ->check(CLI::PositiveNumber)
      ->capture_default_str()
      ->group(cluster);
  app.add_option("--degree", o.degree, "degree of the random-regular topology")
      ->capture_default_str()
      ->group(cluster);
  app.add_option("--star-center", o.starCenter,
                 "position (in the sorted peer ids) of the star's center")
      ->capture_default_str()
      ->group(cluster);
  app.add_option("--topology-file", o.topologyFile, "edge-list file of the 'file' topology")
      ->group(cluster);
  app.add_option("--min-peers", o.minPeers,
                 "training starts once this many peers are members; "
                 "also the number of data shards")
      ->check(CLI::PositiveNumber)
      ->capture_default_str()
      ->group(cluster);
  app.add_option("--listen", o.listen, "HOST:PORT to accept peers on (port 0: any)")
      ->group(cluster);
  app.add_option("--advertise", o.advertise,
                 "HOST[:PORT] others reach this peer at (default: --listen; required when "
                 "listening on 0.0.0.0; no port: the one listened on)")
      ->group(cluster);
  app.add_option("--seeds", o.seeds,
                 "HOST:PORT,... of some members (none: this peer starts the cluster); HOST "
                 "may be a name, resolved at each attempt; dead or unresolved seeds are "
                 "skipped and retried, and this peer's own entry is skipped")
      ->delimiter(',')
      ->group(cluster);
  app.add_option("--peer-id", o.peerId, "this peer's id (default: a hash of --advertise/--listen)")
      ->group(cluster);
  app.add_option("--secret-file", o.secretFile,
                 "file holding the cluster secret (chmod 600; never "
                 "logged); required with --listen/--seeds")
      ->group(cluster);
  app.add_flag("--insecure-plaintext", o.insecurePlaintext,
               "TCP links without TLS (default: TLS 1.3 with a key derived from the cluster "
               "secret, or --tls-cert): only for trusted networks and loopback benchmarks; every "
               "peer of a cluster must agree")
      ->group(cluster);
  app.add_option("--tls-cert", o.tlsCert,
                 "PEM certificate chain of this peer: TLS with certificates instead of the key "
                 "derived from the secret (with --tls-key and --tls-ca)")
      ->group(cluster);
  app.add_option("--tls-key", o.tlsKey, "PEM private key of --tls-cert (chmod 600; never logged)")
      ->group(cluster);
  app.add_option("--tls-ca", o.tlsCa,
                 "PEM certificate authorities a remote peer's certificate must chain to")
      ->group(cluster);
  app.add_option("--cluster-id", o.clusterId, "peers of other clusters are refused")
      ->capture_default_str()
      ->group(cluster);
  app.add_option("--network", o.network,
                 "emulated network around the transport: lan (none), wan, "
                 "geo or a profile file (README: Networks)")
      ->capture_default_str()
      ->group(cluster);
  app.add_option("--network-index", o.networkIndex,
                 "this peer's index in the --network profile "
                 "(its site); --local numbers peers 0..N-1")
      ->group(cluster);
  app.add_option("--membership", o.membership,
                 "failure-detection profile: local (T = 200 ms) or lan (T = 1 s)")
      ->check(CLI::IsMember({"local", "lan"}))
      ->capture_default_str()
      ->group(cluster);
  std::string transports;
  for (const std::string& name : registry.transports.names()) {
    std::string knobs;
    for (const engine::OptionInfo& info : registry.transports.get(name).options)
      knobs += fmt::format("\n      {}={} ({})", info.name, info.defaultValue, info.help);
    transports += fmt::format("\n  {}: {}{}", name, registry.transports.description(name), knobs);
  }
  app.add_option("--transport", o.transport,
                 "between peer processes (ibverbs fails at start, naming what is missing, where "
                 "no RDMA device is usable); default tcp:" + transports)
      ->check(CLI::IsMember(registry.transports.names()))
      ->group(cluster);
  app.add_option_function<std::string>(
         "--transport-option",
         [&o](const std::string& text) {
           for (const auto& [key, value] : engine::parseOptionList(text))
             o.transportOptions[key] = value;
         },
         "KEY=VALUE[,KEY=VALUE...]: the transport's options (listed under --transport)")
      ->group(cluster);
  // The RDMA transport's options under their own names.
  auto rdmaFlag = [&](const char* flag, const char* key, const char* help) {
    return app.add_option_function<std::string>(
        flag, [&o, key](const std::string& value) { o.transportOptions[key] = value; }, help);
  };
  rdmaFlag("--rdma-device", "device", "RDMA device (ibverbs); default: the first with an active port")
      ->group(cluster);
  rdmaFlag("--rdma-port", "port", "its port; 0: the first active one")
      ->check(CLI::Range(0, 255))
      ->group(cluster);
  rdmaFlag("--rdma-gid-index", "gid-index",
           "GID index; -1: LID on InfiniBand, the first GID in use on RoCE")
      ->check(CLI::Range(-1, 255))
      ->group(cluster);
  app.add_flag_callback(
         "--rdma-busy-poll", [&o] { o.transportOptions["busy-poll"] = "true"; },
         "poll completions on the io thread instead of waiting for events")
      ->group(cluster);
  app.add_option("--comm-timeout", o.commTimeout, "seconds: the deadline of every synchronous wait")
      ->check(secondsFlag(false))
      ->capture_default_str()
      ->group(cluster);
  app.add_option("--compress", o.compress,
                 "codec of the payloads an algorithm lets travel compressed: none, fp16, bf16, "
                 "int8[:BLOCK], int4[:BLOCK], topk:FRACTION[:sampled] or randk:FRACTION")
      ->capture_default_str()
      ->group(cluster);
  app.add_option("--error-feedback", o.errorFeedback,
                 "keep what compression leaves out and send it later (on) or drop it (off)")
      ->check(CLI::IsMember({"on", "off"}))
      ->capture_default_str()
      ->group(cluster);
  app.add_option("--max-norm-ratio", o.maxNormRatio,
                 "refuse a received model, difference, delta or gradient farther from this "
                 "peer's own than this many times the own one's norm (a faulty or hostile "
                 "peer; counted in <algorithm>.outliers); 0: off")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str()
      ->group(cluster);
  app.add_option("--step-time,--min-step-time", o.minStepTime,
                 "milliseconds of emulated compute per step: the gradient computation takes at "
                 "least this long (the real compute still runs; waits for messages come on "
                 "top), so a small model steps at a large one's pace")
      ->check(CLI::NonNegativeNumber)
      ->group(cluster);
  app.add_option("--start-timeout", o.startTimeout,
                 "seconds to wait for --min-peers members before training; then it fails (exit "
                 "status 1) even if it got in (unlike --join-timeout, which is about getting in)")
      ->check(secondsFlag(false))
      ->capture_default_str()
      ->group(cluster);
  app.add_option(
         "--join-timeout", o.joinTimeout,
         fmt::format("seconds for a peer with --seeds to join anyone through them: one that "
                     "joined no one by then (its seeds refused its secret or model, or were "
                     "unreachable), waiting for --min-peers or training alone, exits with status "
                     "{} and one line naming the cause. Once in, it never gives up this way (it "
                     "rejoins after losing the cluster); a peer without seeds starts the cluster "
                     "and never times out this way. 0: never",
                     kExitCannotJoin))
      ->check(secondsFlag(true))
      ->capture_default_str()
      ->group(cluster);
  app.add_option("--finish-timeout", o.finishTimeout, "seconds to wait for the others at the end")
      ->check(secondsFlag(false))
      ->capture_default_str()
      ->group(cluster);
  app.add_option("--local", o.local, "run N peers in this process (threads) instead of one")
      ->group(cluster);
  app.add_option("--local-transport", o.localTransport,
                 "--local peers talk over inproc or tcp (127.0.0.1)")
      ->check(CLI::IsMember({"inproc", "tcp"}))
      ->capture_default_str()
      ->group(cluster);
  app.add_option(
         "--cluster-eval-every", o.clusterEvalEvery,
         "--local: steps between consensus evaluations shown in the progress view (0: none)")
      ->group(cluster);
  app.add_option("--describe-topology", o.describeTopology,
                 "print degree, diameter and spectral gap "
                 "of topology NAME over --peers peers and exit")
      ->group(cluster);
  app.add_option("--peers", o.describePeers, "peer count for --describe-topology")
      ->capture_default_str()
      ->group(cluster);
}

// The environment variable of a flag: GOSSAMER_ and its long name in upper case, dashes and dots
// as underscores (--join-timeout: GOSSAMER_JOIN_TIMEOUT; --gosgd.p: GOSSAMER_GOSGD_P).
std::string environmentName(const std::string& longName) {
  std::string out = "GOSSAMER_";
  for (const char c : longName)
    out.push_back(c == '-' || c == '.'
                      ? '_'
                      : static_cast<char>(std::toupper(static_cast<unsigned char>(c))));
  return out;
}

// Every flag of `app` (but --help) can come from its environment variable, for launchers that
// configure containers and batch jobs by environment. Precedence: the command line, then the
// --config file, then the environment (CLI11 reads a variable only for a flag still unset; an
// empty variable counts as unset). GOSSAMER_CONFIG names a config file that must exist. Returns
// the GOSSAMER_ variables that name no flag (a misspelling would otherwise go unnoticed).
std::vector<std::string> bindEnvironment(CLI::App& app) {
  std::set<std::string> known;
  for (CLI::Option* option : app.get_options()) {
    if (option == app.get_help_ptr() || option->get_lnames().empty()) continue;
    const std::string name = environmentName(option->get_lnames().front());
    known.insert(name);
    if (option == app.get_config_ptr()) {
      // CLI11 reads the config file before the environment: the variable becomes the default.
      if (const char* file = std::getenv(name.c_str()); file != nullptr && *file != '\0')
        option->default_str(file)->required();
      continue;
    }
    option->envname(name);
  }
  std::vector<std::string> unknown;
  for (char** entry = ::environ; *entry != nullptr; ++entry) {
    const std::string text = *entry;
    const std::string name = text.substr(0, text.find('='));
    if (name.rfind("GOSSAMER_", 0) == 0 && known.count(name) == 0) unknown.push_back(name);
  }
  return unknown;
}

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
  t.minStepTime = std::chrono::microseconds(static_cast<std::int64_t>(o.minStepTime * 1000));
  t.evalSamples = o.evalSamples;
  t.metricsPath = o.metricsPath;
  t.checkpointEvery = o.checkpointEvery;
  t.resume = o.resume;
  return t;
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
  if (o.network != "lan") n.profile = net::shaped::NetworkProfile::fromSpec(o.network);
  n.profileIndex = o.networkIndex;
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
    if (!o.listen.empty()) n.listen = net::Endpoint::parse(o.listen);  // else the transport's default
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
    t.joinTimeout = durationOf(o.joinTimeout);
  }
  return c;
}

JsonObject clusterJson(const PeerOptions& o, const std::string& topologyName, std::size_t peers,
                       const engine::runtime::ConsensusResult& consensus, std::uint64_t steps,
                       double wallSeconds, double bytesPerPeer, double commWait) {
  JsonObject json;
  json.add("algorithm", o.algorithm)
      .add("topology", topologyName)
      .add("network", o.network)
      .add("compress", kernels::formatCodec(kernels::parseCodec(o.compress)))
      .add("error_feedback", o.errorFeedback == "on")
      .add("peers", static_cast<std::uint64_t>(peers))
      .add("model", o.model)
      .add("dataset", o.dataset)
      .add("batch", static_cast<std::uint64_t>(o.batch))
      .add("lr", std::stod(fmt::format("{}", o.optimizerOptions.lr)))
      .add("test_accuracy", consensus.accuracy)
      .add("test_loss", consensus.loss)
      .add("min_peer_accuracy", consensus.minPeerAccuracy)
      .add("mean_peer_accuracy", consensus.meanPeerAccuracy)
      .add("consensus_distance", consensus.distance)
      .add("steps", steps)
      .add("wall_s", wallSeconds)
      .add("bytes_sent_per_peer", bytesPerPeer)
      .add("comm_wait_fraction", commWait);
  return json;
}

int runLocalCluster(const PeerOptions& o, const engine::Registry& registry) {
  engine::runtime::ClusterConfig config;
  config.peer = peerConfig(o, registry);
  config.peers = o.local;
  config.progress = !o.json;
  config.evalEvery = o.clusterEvalEvery;
  config.evalSamples = o.evalSamples == 0 ? 2000 : o.evalSamples;
  auto logger = log::get("engine");
  auto data = loadData(o, registry);
  logger->info("local cluster: {} peers over {} ({} network), {} on {} ({} training samples)",
               o.local, o.localTransport, o.network, o.algorithm, o.model, data->train.count());
  if (o.localTransport == "tcp") logSecurity(o, config.peer.network);
  config.stopRequested = [] { return gStop.load(); };
  const ClusterResult result = engine::runtime::runLocalCluster(config, registry, data);
  double bytes = 0, wait = 0;
  std::uint64_t steps = 0;
  for (const PeerResult& r : result.peers) {
    bytes += static_cast<double>(r.bytesSent) / static_cast<double>(result.peers.size());
    wait += r.commWaitFraction / static_cast<double>(result.peers.size());
    steps = std::max(steps, r.steps);
  }
  const std::string topologyName = result.peers.empty() ? "" : result.peers.front().topology;
  logger->info(
      "done: consensus accuracy {:.2f}% (peers {:.2f}%..), distance {:.3g}, {} steps in {:.1f}s, "
      "{:.1f} MB sent per peer, {:.1f}% of the time waiting on communication",
      100 * result.consensus.accuracy, 100 * result.consensus.minPeerAccuracy,
      result.consensus.distance, steps, result.wallSeconds, bytes / 1e6, 100 * wait);
  if (o.json) {
    double utilization = 0;
    for (const auto& r : result.peers)
      utilization += r.utilization / static_cast<double>(result.peers.size());
    std::cout << clusterJson(o, topologyName, result.peers.size(), result.consensus, steps,
                             result.wallSeconds, bytes, wait)
                     .add("utilization", utilization)
                     .str()
              << std::endl;
  }
  return 0;
}

// Runs `peer` on this thread; SIGINT/SIGTERM end its training at the next step boundary.
PeerResult runStoppable(engine::runtime::Peer& peer) {
  std::atomic<bool> done{false};
  std::thread stopper([&] {
    while (!done) {
      if (gStop) {
        peer.requestStop();
        return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  });
  struct Join {
    std::atomic<bool>& done;
    std::thread& stopper;
    ~Join() {
      done = true;
      stopper.join();
    }
  } join{done, stopper};
  return peer.run();
}

int runPeer(const PeerOptions& o, const engine::Registry& registry) {
  auto data = loadData(o, registry);
  PeerConfig config = peerConfig(o, registry);
  logSecurity(o, config.network);
  engine::runtime::Peer peer(std::move(config), registry, data);
  log::get("engine")->info("peer {:016x} listening on {}", peer.id(), peer.endpoint().str());
  const PeerResult result = runStoppable(peer);
  if (result.joinFailure) {
    printError(result.joinFailure->describe());
    return kExitCannotJoin;
  }
  const engine::runtime::ConsensusResult consensus =
      result.consensus.value_or(engine::runtime::ConsensusResult{});
  log::get("engine")->info(
      "done: this peer {:.2f}%, consensus {:.2f}% over {} peers, {} steps in {:.1f}s, {:.1f} MB "
      "sent, "
      "{:.1f}% waiting",
      100 * result.testAccuracy, 100 * consensus.accuracy, consensus.peers, result.steps,
      result.wallSeconds, static_cast<double>(result.bytesSent) / 1e6,
      100 * result.commWaitFraction);
  if (o.json) {
    JsonObject json =
        clusterJson(o, result.topology, result.peers, consensus, result.steps, result.wallSeconds,
                    static_cast<double>(result.bytesSent), result.commWaitFraction);
    json.add("peer_id", fmt::format("{:016x}", result.peer))
        .add("peer_test_accuracy", result.testAccuracy)
        .add("utilization", result.utilization);
    std::cout << json.str() << std::endl;
  }
  return 0;
}

int describeTopology(const PeerOptions& o, const engine::Registry& registry) {
  const auto topology = registry.topologies.get(o.describeTopology)(topologyOptions(o));
  const topology::Description d = topology::describe(*topology, o.describePeers);
  if (o.json) {
    JsonObject json;
    json.add("topology", topology->name())
        .add("peers", static_cast<std::uint64_t>(d.peers))
        .add("min_degree", static_cast<std::uint64_t>(d.minDegree))
        .add("max_degree", static_cast<std::uint64_t>(d.maxDegree))
        .add("mean_degree", d.meanDegree)
        .add("spectral_gap", d.spectralGap)
        .add("connected", d.connected);
    if (d.diameter) json.add("diameter", static_cast<std::uint64_t>(*d.diameter));
    std::cout << json.str() << std::endl;
  } else {
    std::cout << topology::formatDescription(*topology, d);
  }
  return 0;
}

// One peer training alone: the same runtime and loop as a cluster peer, in a cluster of one.
int runSingle(const PeerOptions& o, const engine::Registry& registry) {
  auto logger = log::get("engine");
  PeerConfig config = singleConfig(o);
  const auto data = loadData(o, registry);
  engine::runtime::Peer peer(config, registry, data);
  const PeerResult result = runStoppable(peer);
  logger->info(
      "done: test accuracy {:.2f}%, test loss {:.4f}, {} steps in {:.1f}s ({:.0f} samples/s)",
      100 * result.testAccuracy, result.testLoss, result.steps, result.wallSeconds,
      result.samplesPerSecond);
  if (o.json) {
    std::cout << JsonObject()
                     .add("model", o.model)
                     .add("parameters", result.parameters)
                     .add("dataset", o.dataset)
                     .add("device", result.device)
                     .add("optimizer", o.optimizer)
                     .add("lr",
                          std::stod(fmt::format("{}", o.optimizerOptions.lr)))  // 0.05, not 0.0500000007
                     .add("batch", o.batch)
                     .add("epochs", result.epochs)
                     .add("steps", result.steps)
                     .add("samples", result.samples)
                     .add("train_loss", result.trainLoss)
                     .add("test_loss", result.testLoss)
                     .add("test_accuracy", result.testAccuracy)
                     .add("wall_s", result.wallSeconds)
                     .add("samples_per_s", result.samplesPerSecond)
                     .str()
              << std::endl;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const engine::Registry registry = algorithms::makeRegistry();
  CLI::App app{"gossamer-peer " GOSSAMER_VERSION
               ": one peer of a decentralized training cluster "
               "(--listen/--seeds), a local cluster (--local N), or a single peer"};
  PeerOptions options;
  addModelOptions(app, options, registry);
  addClusterOptions(app, options, registry);
  addAlgorithmOptions(app, options, registry);
  app.footer(
      fmt::format("Exit status: 0 done; 1 failed (the cause in one line on stderr); {} "
                  "joined no one within --join-timeout (the same); 100 and up: a bad "
                  "command line.",
                  kExitCannotJoin) +
      " Every flag can also be set by an environment variable, GOSSAMER_ and its name in upper "
      "case with dashes and dots as underscores (GOSSAMER_SEEDS, GOSSAMER_JOIN_TIMEOUT, "
      "GOSSAMER_GOSGD_P); the command line wins, then --config, then the environment.");
  const std::vector<std::string> unknownVariables = bindEnvironment(app);
  CLI11_PARSE(app, argc, argv);
  for (const std::string& name : unknownVariables)
    fmt::print(stderr, "gossamer-peer: warning: environment variable {} names no flag; ignored\n",
               name);
  std::signal(SIGINT, onSignal);
  std::signal(SIGTERM, onSignal);
  try {
    log::setLevel(options.logLevel);
    if (!options.describeTopology.empty()) return describeTopology(options, registry);
    if (options.local > 0) return runLocalCluster(options, registry);
    if (options.networked()) return runPeer(options, registry);
    return runSingle(options, registry);
  } catch (const gossamer::Error& e) {
    // The sentence for the user; the failed check and its source location for a developer.
    printError(e.what());
    if (!e.where().empty()) log::get("engine")->debug("that error was raised at {}", e.where());
    return 1;
  } catch (const std::exception& e) {
    fmt::print(stderr, "gossamer-peer: unexpected error: {}\n", e.what());
    return 1;
  }
}
