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
#include <csignal>
#include <cstdio>
#include <iostream>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "algorithms/builtin.h"
#include "engine/base/config.h"
#include "engine/base/enforce.h"
#include "engine/base/json.h"
#include "engine/base/log.h"
#include "engine/base/process_memory.h"
#include "engine/peer_options.h"
#include "engine/peer_settings.h"
#include "engine/runtime/cluster.h"
#include "engine/runtime/peer.h"
#include "topology/topology.h"

namespace {

using namespace gossamer;
using engine::cli::PeerOptions;
using engine::runtime::ClusterResult;
using engine::runtime::PeerConfig;
using engine::runtime::PeerResult;
using namespace engine::cli;

// Counts SIGINT/SIGTERM. The first: a peer of a cluster leaves it at its next step (a graceful
// leave, bounded by kLeaveBound); a local cluster or a single peer ends its training at the next
// step and finishes normally. A second signal ends the process at once.
std::atomic<int> gSignals{0};
extern "C" void onSignal(int signal) {
  if (gSignals.fetch_add(1) > 0) std::_Exit(128 + signal);
}

// The one line a failure ends with, on stderr.
void printError(const std::string& sentence) {
  fmt::print(stderr, "gossamer-peer: error: {}\n", sentence);
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

// The memory figures of a run: the peers' tracked peak (the largest peer's) against the model's
// bytes, and the process's peak resident memory.
JsonObject& addMemory(JsonObject& json, const std::vector<PeerResult>& peers) {
  std::size_t peak = 0, model = 0;
  for (const PeerResult& r : peers) {
    peak = std::max(peak, r.peakBytes);
    model = std::max(model, r.modelBytes());
  }
  return json.add("peak_bytes_per_peer", static_cast<std::uint64_t>(peak))
      .add("peak_memory_vs_model",
           model > 0 ? static_cast<double>(peak) / static_cast<double>(model) : 0.0)
      .add("peak_rss_bytes", static_cast<std::uint64_t>(peakRssBytes()));
}

// The knobs the algorithm chose itself (`auto`: its "chosen.<algorithm>.<knob>" metrics) under
// "chosen", by "<algorithm>.<knob>": the first peer's that has them (the members of a lockstep
// cluster choose the same; gosgd's p is each peer's own).
constexpr std::string_view kChosenPrefix = "chosen.";
JsonObject& addChosen(JsonObject& json, const std::vector<PeerResult>& peers) {
  JsonObject chosen;
  for (const PeerResult& r : peers) {
    bool any = false;
    for (const auto& [name, value] : r.metrics) {
      if (!name.starts_with(kChosenPrefix)) continue;
      chosen.add(name.substr(kChosenPrefix.size()), value);
      any = true;
    }
    if (any) break;
  }
  return json.addRaw("chosen", chosen.str());
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
  config.stopRequested = [] { return gSignals.load() > 0; };
  const ClusterResult result = engine::runtime::runLocalCluster(config, registry, data);
  double bytes = 0, wait = 0, finish = 0;
  std::uint64_t steps = 0;
  for (const PeerResult& r : result.peers) {
    bytes += static_cast<double>(r.bytesSent) / static_cast<double>(result.peers.size());
    wait += r.commWaitFraction / static_cast<double>(result.peers.size());
    steps = std::max(steps, r.steps);
    finish = std::max(finish, r.finishSeconds);
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
    JsonObject json = clusterJson(o, topologyName, result.peers.size(), result.consensus, steps,
                                  result.wallSeconds, bytes, wait);
    // The Compute every peer trained on (one device choice for the whole local cluster).
    json.add("device", result.peers.empty() ? std::string() : result.peers.front().device)
        .add("finish_s", finish)
        .add("utilization", utilization);
    addChosen(json, result.peers);
    std::cout << addMemory(json, result.peers).str() << std::endl;
  }
  return 0;
}

// Runs `peer` on this thread. On SIGINT/SIGTERM a single peer stops at its next step; a peer of
// a cluster (`leave`) leaves it there, and if run() has not returned kLeaveBound later it is
// killed (every wait ends at once: the others see a failure, not a leave) and `cut` says so.
PeerResult runStoppable(engine::runtime::Peer& peer, bool leave, std::atomic<bool>& cut) {
  std::atomic<bool> done{false};
  std::thread stopper([&] {
    const auto sleep = [] { std::this_thread::sleep_for(std::chrono::milliseconds(20)); };
    while (!done && gSignals == 0) sleep();
    if (done) return;
    if (!leave) {
      peer.requestStop();
      return;
    }
    log::get("engine")->info("SIGINT/SIGTERM: leaving the cluster at the next step (within {} s)",
                             kLeaveBound.count());
    peer.requestLeave();
    const auto deadline = std::chrono::steady_clock::now() + kLeaveBound;
    while (!done && std::chrono::steady_clock::now() < deadline) sleep();
    if (done) return;
    const engine::runtime::PeerStatus status = peer.status();
    printError(
        fmt::format("the leave did not end within {} s (at step {}, waiting for {}); "
                    "exiting without it",
                    kLeaveBound.count(), status.step,
                    status.waitingFor.empty() ? "nothing" : status.waitingFor));
    cut = true;
    peer.kill();
    // Killed, every wait ends; should anything still hold the thread, the process ends anyway.
    for (int i = 0; i < 50 && !done; ++i) sleep();
    if (!done) std::_Exit(kExitLeaveCut);
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
  std::atomic<bool> cut{false};
  const PeerResult result = runStoppable(peer, true, cut);
  if (cut) return kExitLeaveCut;  // its line is printed
  if (result.stalled) {
    printError(*result.stalled);
    return kExitStalled;
  }
  if (result.joinFailure) {
    printError(result.joinFailure->describe());
    return kExitCannotJoin;
  }
  if (result.clusterDone) {
    printError("the cluster had trained all its steps when this peer came: nothing to join");
    return kExitClusterDone;
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
        .add("device", result.device)
        .add("peer_test_accuracy", result.testAccuracy)
        .add("finish_s", result.finishSeconds)
        .add("loop_end_unix_s", result.loopEndUnixSeconds)
        .add("consensus_peers", static_cast<std::uint64_t>(consensus.peers))
        .add("utilization", result.utilization)
        .add("relay_bytes_sent", result.relayBytesSent)
        .add("relay_bytes_received", result.relayBytesReceived);
    // The algorithm's own counts, as its declared invariants read them (engine/invariants.h).
    JsonObject metrics;
    for (const auto& [name, value] : result.metrics)
      if (!name.starts_with(kChosenPrefix)) metrics.add(name, value);
    json.addRaw("metrics", metrics.str());
    addChosen(json, {result});
    std::cout << addMemory(json, {result}).str() << std::endl;
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
  std::atomic<bool> cut{false};
  const PeerResult result = runStoppable(peer, false, cut);
  logger->info(
      "done: test accuracy {:.2f}%, test loss {:.4f}, {} steps in {:.1f}s ({:.0f} samples/s)",
      100 * result.testAccuracy, result.testLoss, result.steps, result.wallSeconds,
      result.samplesPerSecond);
  if (o.json) {
    JsonObject json;
    json.add("model", o.model)
        .add("parameters", result.parameters)
        .add("dataset", o.dataset)
        .add("device", result.device)
        .add("optimizer", o.optimizer)
        .add("lr", std::stod(fmt::format("{}", o.optimizerOptions.lr)))  // 0.05, not 0.0500000007
        .add("batch", o.batch)
        .add("epochs", result.epochs)
        .add("steps", result.steps)
        .add("samples", result.samples)
        .add("train_loss", result.trainLoss)
        .add("test_loss", result.testLoss)
        .add("test_accuracy", result.testAccuracy)
        .add("wall_s", result.wallSeconds)
        .add("samples_per_s", result.samplesPerSecond);
    std::cout << addMemory(json, {result}).str() << std::endl;
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
  const std::vector<engine::cli::Setting> settings = engine::cli::peerSettings(registry);
  const std::vector<std::string> unknownVariables =
      engine::cli::addPeerFlags(app, options, settings, registry);
  app.footer(
      fmt::format("Exit status: 0 done (or left on SIGINT/SIGTERM); 1 failed (the cause in one "
                  "line on stderr); {} joined no one within --join-timeout (the same); {} came "
                  "when the cluster had trained all its steps (the same); {} stalled (no step "
                  "for twice --stall-timeout; the same, naming the peers it waited for); {} the "
                  "leave on SIGINT/SIGTERM did not end within {} s; 100 and up: a bad command "
                  "line. A second SIGINT/SIGTERM ends the process at once (128 + the signal).",
                  kExitCannotJoin, kExitClusterDone, kExitStalled, kExitLeaveCut,
                  kLeaveBound.count()) +
      " Every flag can also be set by an environment variable, GOSSAMER_ and its name in upper "
      "case with dashes and dots as underscores (GOSSAMER_SEEDS, GOSSAMER_JOIN_TIMEOUT, "
      "GOSSAMER_GOSGD_P); the command line wins, then --config, then the environment.");
  try {
    engine::cli::parsePeerFlags(app, argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  for (const std::string& unknown : unknownVariables)
    fmt::print(stderr, "gossamer-peer: warning: environment variable {}; ignored\n", unknown);
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
