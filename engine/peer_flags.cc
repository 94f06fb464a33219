// gossamer-peer's flags (peer_options.h): their definitions with CLI11, and their environment
// variables.
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <set>

#include <fmt/format.h>
#include <unistd.h>

#include "engine/base/config.h"
#include "engine/options.h"
#include "engine/peer_options.h"
#include "net/shaped/profile.h"

namespace gossamer::engine::cli {
namespace {

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

}  // namespace

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
                 "geo or a profile file (net/README.md: Networks and security)")
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
                 "no RDMA device is usable); default tcp:" +
                     transports)
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
  rdmaFlag("--rdma-device", "device",
           "RDMA device (ibverbs); default: the first with an active port")
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
  app.add_option("--stall-timeout", o.stallTimeout,
                 fmt::format("seconds a step may wait on the others without progress before the "
                             "peer logs what it waits for and re-checks the view; at twice this "
                             "it exits with status {} naming the peers it waited for. 0: three "
                             "--comm-timeout, and at least ten mean steps",
                             kExitStalled))
      ->check(secondsFlag(true))
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
         "--local: evaluate the consensus of every peer's model at exactly its steps N, 2N, ... "
         "(shown in the progress view; 0: none)")
      ->group(cluster);
  app.add_option("--describe-topology", o.describeTopology,
                 "print degree, diameter and spectral gap "
                 "of topology NAME over --peers peers and exit")
      ->group(cluster);
  app.add_option("--peers", o.describePeers, "peer count for --describe-topology")
      ->capture_default_str()
      ->group(cluster);
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

}  // namespace gossamer::engine::cli
