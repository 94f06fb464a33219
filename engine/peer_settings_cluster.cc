// The settings of a cluster peer: algorithm, topology, network, security, timeouts
// (peer_settings.h).
#include <fmt/format.h>

#include "engine/exit_status.h"
#include "engine/peer_settings.h"
#include "engine/peer_settings_declare.h"
#include "engine/runtime/tcp_streams.h"
#include "kernels/codec.h"
#include "net/wire/handshake.h"

namespace gossamer::engine::cli::declaring {
namespace {

std::string transportHelp(const Registry& registry) {
  std::string transports;
  for (const std::string& name : registry.transports.names()) {
    std::string knobs;
    for (const engine::OptionInfo& info : registry.transports.get(name).options)
      knobs += fmt::format("\n      {}={} ({})", info.name, info.defaultValue, info.help);
    transports += fmt::format("\n  {}: {}{}", name, registry.transports.description(name), knobs);
  }
  return "between peer processes (ibverbs fails at start, naming what is missing, where no RDMA "
         "device is usable); default tcp:" +
         transports;
}

// A transport option under a flag of its own (--rdma-port: the ibverbs transport's `port`).
auto transportOption(const char* key) {
  return std::make_pair(
      [key](PeerOptions& o, const std::string& text) { o.transportOptions[key] = text; },
      [key](const PeerOptions& o) {
        const auto it = o.transportOptions.find(key);
        return it == o.transportOptions.end() ? std::string() : it->second;
      });
}

Declare<double> addSeconds(std::vector<Setting>& out, const char* name, double PeerOptions::*member,
                           bool zeroAllowed, std::string help, const char* python,
                           std::chrono::milliseconds engine::runtime::TrainingConfig::*target) {
  Declare<double> d(out, name, std::move(help), "Cluster");
  d.field(member).seconds(zeroAllowed);
  if (python != nullptr)
    d.python(python, [target](PeerConfig& c, double v) { c.training.*target = millis(v); });
  return d;
}

}  // namespace

void addClusterSettings(std::vector<Setting>& out, const Registry& registry) {
  using Train = engine::runtime::TrainingConfig;
  using Text = Declare<std::string>;
  using Count = Declare<std::size_t>;
  const std::string cluster = "Cluster";

  std::string algorithms;
  for (const std::string& name : registry.algorithms.names()) {
    const engine::AlgorithmSpec& spec = registry.algorithms.get(name);
    algorithms += fmt::format("\n  {}: {} (default topology: {})", name, spec.description,
                              spec.defaultTopology);
  }
  Text(out, "algorithm", "decentralized optimizer:" + algorithms, cluster)
      .field(&PeerOptions::algorithm)
      .bench(kSimulate)
      .matrix("algorithms")
      .python("algorithm", [&registry](PeerConfig& c, const std::string& v) {
        registry.algorithms.get(v);  // an unknown name lists the known ones
        c.training.algorithm = v;
      });
  Text(out, "topology",
       "communication graph (default: the algorithm's):\n" + registry.topologies.describe(),
       cluster)
      .field(&PeerOptions::topology)
      .bench(kSimulate)
      .matrix("topologies")
      .python("topology", [](PeerConfig& c, const std::string& v) { c.training.topology = v; });
  Text(out, "mixing",
       "mixing weights of undirected topologies: metropolis (Metropolis-Hastings, doubly "
       "stochastic on every graph; metropolis-hastings is the same) or uniform (1/(degree+1), "
       "doubly stochastic only on regular graphs)",
       cluster)
      .field(&PeerOptions::mixing)
      .oneOf({"metropolis", "metropolis-hastings", "uniform"})
      .python("mixing", [](PeerConfig& c, const std::string& v) {
        c.training.topologyOptions.mixing =
            v == "uniform" ? topology::Mixing::kUniform : topology::Mixing::kMetropolisHastings;
      });
  Count(out, "tree-arity", "children per node of the tree topology", cluster)
      .field(&PeerOptions::treeArity)
      .above(0);
  Count(out, "degree", "degree of the random-regular topology", cluster)
      .field(&PeerOptions::degree);
  Count(out, "star-center", "position (in the sorted peer ids) of the star's center", cluster)
      .field(&PeerOptions::starCenter);
  Text(out, "topology-file", "edge-list file of the 'file' topology", cluster)
      .field(&PeerOptions::topologyFile);
  Count(out, "min-peers",
        "training starts once this many peers are members; also the number of data shards", cluster)
      .field(&PeerOptions::minPeers)
      .above(0)
      .python("min_peers", [](PeerConfig& c, std::size_t v) { c.training.minPeers = v; });
  Text(out, "listen", "HOST:PORT to accept peers on (port 0: any)", cluster)
      .field(&PeerOptions::listen)
      .python("listen", [](PeerConfig& c, const std::string& v) {
        c.network.listen = net::Endpoint::parse(v);
      });
  Text(out, "advertise",
       "HOST[:PORT] others reach this peer at (default: --listen; required when listening on "
       "0.0.0.0; no port: the one listened on)",
       cluster)
      .field(&PeerOptions::advertise)
      .python("advertise", [](PeerConfig& c, const std::string& v) {
        c.network.advertise = net::Endpoint::parse(v);
      });
  Declare<bool>(out, "no-inbound",
                "this peer cannot be dialed (behind a NAT or a firewall): the others reach it on "
                "the links it opens, and ask it to open those they need (default: the member it "
                "joins through dials its advertised address back and marks it dial-out only if "
                "that fails)",
                cluster)
      .field(&PeerOptions::noInbound)
      .flag()
      .python("no_inbound", [](PeerConfig& c, bool v) { c.network.noInbound = v; });
  Text(out, "relay",
       "on: carry links between members that cannot reach each other and whose direct link "
       "(hole punching) failed; the two talk TLS between their own identity keys, so this "
       "member forwards bytes it can neither read nor forge; off: refuse",
       cluster)
      .field(&PeerOptions::relay)
      .oneOf({"on", "off"})
      .python("relay",
              [](PeerConfig& c, const std::string& v) { c.network.relay.enabled = v == "on"; });
  Declare<double>(out, "relay-budget",
                  "Mbit/s: the most this member forwards for the links it relays (0: no bound)",
                  cluster)
      .field(&PeerOptions::relayBudget)
      .atLeast(0)
      .python("relay_budget",
              [](PeerConfig& c, double v) { c.network.relay.budgetBytesPerSecond = v * 1e6 / 8; });
  Declare<std::vector<std::string>>(
      out, "seeds",
      "HOST:PORT,... of some members (none: this peer starts the cluster); HOST may be a name, "
      "resolved at each attempt; dead or unresolved seeds are skipped and retried, and this "
      "peer's own entry is skipped",
      cluster)
      .field(&PeerOptions::seeds)
      .python("seeds", [](PeerConfig& c, const std::vector<std::string>& v) {
        for (const std::string& seed : v) c.network.seeds.push_back(net::Endpoint::parse(seed));
      });
  Declare<std::uint64_t>(out, "peer-id", "this peer's id (default: a hash of --advertise/--listen)",
                         cluster)
      .field(&PeerOptions::peerId)
      .hideDefault()
      .python("peer_id", [](PeerConfig& c, std::uint64_t v) { c.network.peerId = v; });
  Text(out, "secret-file",
       "file holding the cluster secret (chmod 600; never logged); required with --listen/--seeds",
       cluster)
      .field(&PeerOptions::secretFile)
      .python("secret_file", [](PeerConfig& c, const std::string& v) {
        c.network.secret = net::wire::readSecretFile(v);
      });
  Declare<bool>(out, "insecure-plaintext",
                "TCP links without TLS (default: TLS 1.3 with a key derived from the cluster "
                "secret, or --tls-cert): only for trusted networks and loopback benchmarks; every "
                "peer of a cluster must agree",
                cluster)
      .field(&PeerOptions::insecurePlaintext)
      .flag()
      .python("insecure_plaintext", [](PeerConfig& c, bool v) {
        if (v) c.network.security = engine::runtime::NetworkConfig::Security::plaintext;
      });
  Text(out, "tls-cert",
       "PEM certificate chain of this peer: TLS with certificates instead of the key derived "
       "from the secret (with --tls-key and --tls-ca)",
       cluster)
      .field(&PeerOptions::tlsCert);
  Text(out, "tls-key", "PEM private key of --tls-cert (chmod 600; never logged)", cluster)
      .field(&PeerOptions::tlsKey);
  Text(out, "tls-ca", "PEM certificate authorities a remote peer's certificate must chain to",
       cluster)
      .field(&PeerOptions::tlsCa);
  Text(out, "cluster-id", "peers of other clusters are refused", cluster)
      .field(&PeerOptions::clusterId)
      .python("cluster_id", [](PeerConfig& c, const std::string& v) { c.network.clusterId = v; });
  Text(out, "network",
       "emulated network around the transport: lan (none), wan, geo or a profile file "
       "(net/README.md: Networks and security)",
       cluster)
      .field(&PeerOptions::network)
      .bench(kSimulate)
      .matrix("networks");
  Count(out, "network-index",
        "this peer's index in the --network profile (its site); --local numbers peers 0..N-1",
        cluster)
      .field(&PeerOptions::networkIndex)
      .hideDefault();
  Text(out, "membership", "failure-detection profile: local (T = 200 ms) or lan (T = 1 s)", cluster)
      .field(&PeerOptions::membership)
      .oneOf({"local", "lan"})
      .python("membership", [](PeerConfig& c, const std::string& v) {
        c.network.membership = net::membership::Options::named(v);
      });
  Text(out, "transport", transportHelp(registry), cluster)
      .field(&PeerOptions::transport)
      .oneOf(registry.transports.names())
      .python(
          "transport", [](PeerConfig& c, const std::string& v) { c.network.transport = v; },
          "tcp (default) or inproc (peers of one process)");
  Text(out, "transport-option",
       "KEY=VALUE[,KEY=VALUE...]: the transport's options (listed under --transport)", cluster)
      .valid([](const std::string& v) { engine::parseOptionList(v); })
      .stored(
          [](PeerOptions& o, const std::string& text) {
            for (const auto& [key, value] : engine::parseOptionList(text))
              o.transportOptions[key] = value;
          },
          [](const PeerOptions& o) { return engine::formatOptionList(o.transportOptions); });
  Text(out, "tcp-streams",
       "connections per tcp link, large frames striped over them: auto (enough to fill the path: "
       "its capacity x round trip over one connection's window) or a count in [1, 64]",
       cluster)
      .field(&PeerOptions::tcpStreams)
      .valid([](const std::string& v) { engine::runtime::parseTcpStreams(v); })
      .python(
          "tcp_streams",
          [](PeerConfig& c, const std::string& v) {
            c.network.tcpStreams = engine::runtime::parseTcpStreams(v);
          },
          "auto (default) or a count of connections per tcp link")
      .bench(kRun);
  // The RDMA transport's options under their own names.
  const auto [setDevice, getDevice] = transportOption("device");
  Text(out, "rdma-device", "RDMA device (ibverbs); default: the first with an active port", cluster)
      .stored(setDevice, getDevice);
  const auto [setPort, getPort] = transportOption("port");
  Declare<std::int64_t>(out, "rdma-port", "its port; 0: the first active one", cluster)
      .atLeast(0)
      .atMost(255)
      .stored(setPort, getPort);
  const auto [setGid, getGid] = transportOption("gid-index");
  Declare<std::int64_t>(out, "rdma-gid-index",
                        "GID index; -1: LID on InfiniBand, the first GID in use on RoCE", cluster)
      .atLeast(-1)
      .atMost(255)
      .stored(setGid, getGid);
  const auto [setPoll, getPoll] = transportOption("busy-poll");
  Declare<bool>(out, "rdma-busy-poll",
                "poll completions on the io thread instead of waiting for events", cluster)
      .flag()
      .stored(
          [setPoll](PeerOptions& o, const std::string& text) {
            bool on = false;
            detail::parseOne("rdma-busy-poll", text, on);
            if (on) setPoll(o, "true");
          },
          getPoll);
  addSeconds(out, "comm-timeout", &PeerOptions::commTimeout, false,
             "seconds: the deadline of every synchronous wait", "comm_timeout", &Train::commTimeout)
      .bench(kSimulate | kRun);
  Text(out, "compress",
       "codec of the payloads an algorithm lets travel compressed: none, fp16, bf16, int8[:BLOCK], "
       "int4[:BLOCK], topk:FRACTION[:sampled] or randk:FRACTION",
       cluster)
      .field(&PeerOptions::compress)
      .bench(kSimulate | kRun)
      .matrix("compress")
      .valid([](const std::string& v) { kernels::parseCodec(v); })
      .python("compress", [](PeerConfig& c, const std::string& v) {
        c.training.compression.codec = kernels::parseCodec(v);
      });
  Text(out, "error-feedback",
       "keep what compression leaves out and send it later (on) or drop it (off)", cluster)
      .field(&PeerOptions::errorFeedback)
      .oneOf({"on", "off"})
      .bench(kSimulate | kRun)
      .python("error_feedback", [](PeerConfig& c, const std::string& v) {
        c.training.compression.errorFeedback = v == "on";
      });
  Declare<double>(out, "max-norm-ratio",
                  "refuse a received model, difference, delta or gradient farther from this "
                  "peer's own than this many times the own one's norm (a faulty or hostile peer; "
                  "counted in <algorithm>.outliers); 0: off",
                  cluster)
      .field(&PeerOptions::maxNormRatio)
      .atLeast(0)
      .python("max_norm_ratio", [](PeerConfig& c, double v) { c.training.normBound.ratio = v; });
  Declare<double>(out, "step-time",
                  "milliseconds of emulated compute per step: the gradient computation takes at "
                  "least this long (the real compute still runs; waits for messages come on top), "
                  "so a small model steps at a large one's pace",
                  cluster)
      .field(&PeerOptions::minStepTime)
      .alias("min-step-time")
      .hideDefault()
      .atLeast(0)
      .bench(kSimulate | kRun)
      .matrix("step-time", {"step-times"})
      .python(
          "step_time",
          [](PeerConfig& c, double seconds) {
            c.training.minStepTime =
                std::chrono::duration_cast<std::chrono::microseconds>(millis(seconds));
          },
          "emulated compute: each step takes at least this many seconds");
  Declare<std::vector<double>>(
      out, "peer-step-times",
      "milliseconds of emulated compute per step for each peer of a local or simulated cluster, "
      "in peer order and repeating (300,300,600,1200: the third peer steps at half the first's "
      "pace, the fourth at a quarter, the fifth like the first); replaces --step-time there",
      cluster)
      .field(&PeerOptions::peerStepTimes)
      .hideDefault()
      .atLeast(0)
      .bench(kSimulate | kRun);
  addSeconds(out, "start-timeout", &PeerOptions::startTimeout, false,
             "seconds to wait for --min-peers members before training; then it fails (exit status "
             "1) even if it got in (unlike --join-timeout, which is about getting in)",
             "start_timeout", &Train::startTimeout);
  addSeconds(
      out, "join-timeout", &PeerOptions::joinTimeout, true,
      fmt::format("seconds for a peer with --seeds to join anyone through them: one that joined "
                  "no one by then (its seeds refused its secret or model, or were unreachable), "
                  "waiting for --min-peers or training alone, exits with status {} and one line "
                  "naming the cause. Once in, it never gives up this way (it rejoins after losing "
                  "the cluster); a peer without seeds starts the cluster and never times out this "
                  "way. 0: never",
                  kExitCannotJoin),
      "join_timeout", &Train::joinTimeout);
  addSeconds(out, "finish-timeout", &PeerOptions::finishTimeout, false,
             "seconds to wait for the others at the end", "finish_timeout", &Train::finishTimeout);
  addSeconds(out, "stall-timeout", &PeerOptions::stallTimeout, true,
             fmt::format("seconds a step may wait on the others without progress before the peer "
                         "logs what it waits for and re-checks the view; at twice this it exits "
                         "with status {} naming the peers it waited for. 0: three --comm-timeout, "
                         "and at least ten mean steps",
                         kExitStalled),
             nullptr, nullptr);
  Count(out, "local", "run N peers in this process (threads) instead of one", cluster)
      .field(&PeerOptions::local)
      .hideDefault();
  Text(out, "local-transport", "--local peers talk over inproc or tcp (127.0.0.1)", cluster)
      .field(&PeerOptions::localTransport)
      .oneOf({"inproc", "tcp"})
      .bench(kRun, "transport",
             "the local cluster's transport under the emulated network: inproc or tcp "
             "(127.0.0.1)");
  Declare<std::int64_t>(out, "cluster-eval-every",
                        "--local: evaluate the consensus of every peer's model at exactly its "
                        "steps N, 2N, ... (shown in the progress view; 0: none)",
                        cluster)
      .field(&PeerOptions::clusterEvalEvery)
      .hideDefault();
  Text(out, "describe-topology",
       "print degree, diameter and spectral gap of topology NAME over --peers peers and exit",
       cluster)
      .field(&PeerOptions::describeTopology);
  Count(out, "peers", "peer count for --describe-topology", cluster)
      .field(&PeerOptions::describePeers);
}

}  // namespace gossamer::engine::cli::declaring
