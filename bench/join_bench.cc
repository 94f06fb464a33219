// `gossamer-bench join`: how fast a joiner catches up a large model (engine/runtime/catch_up.h)
// from 1, 2 and 4 members at once. Each member holds the same model as its final snapshot and
// serves it over TCP on 127.0.0.1 through the shaped transport, every pair of peers its own link
// of --mbit (one connection per source); the joiner fetches it in verified chunks, the path a
// peer joining a synchronous cluster takes. join_seconds runs from the joiner's first request to
// the whole model verified in its memory, the members' hashing of the chunks they check
// included. Baseline: the ideal, the model's bytes over the sources' total bandwidth
// (`vs_ideal` = time / ideal). Fresh members for each count, so no digest is reused; one
// uncounted catch-up first warms the process. All the
// peers share this machine's cores: `cores_busy` (the process's CPU seconds over the wall
// seconds of the fetch) says when they, not the links, set the pace.
//
// Targets: speedup_4_vs_1 (time with 1 source / time with 4) >= 2.85, and vs_ideal <= 1.3 for
// each count, plaintext; the same with TLS is reported beside it.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <sys/resource.h>

#include "bench/bench_util.h"
#include "bench/benchmarks.h"
#include "engine/base/enforce.h"
#include "engine/base/json.h"
#include "engine/base/log.h"
#include "engine/builtin.h"
#include "engine/runtime/control_node.h"

namespace gossamer::bench {
namespace {

using namespace std::chrono_literals;
using engine::runtime::ControlNode;
using engine::runtime::NetworkConfig;

constexpr double kTargetSpeedup = 2.85;
constexpr double kTargetVsIdeal = 1.3;

struct JoinBenchOptions {
  CommonOptions common;
  double modelMib = 1024;
  std::vector<std::size_t> sources = {1, 2, 4};
  double mbit = 1000;
  double latencyMs = 0.5;
  double chunkMib = 4;
  std::size_t window = 8;
  bool tls = true;  // also measure with TLS
  std::string logLevel = "warn";
};

NetworkConfig nodeConfig(const engine::Registry& registry, std::size_t index,
                         const std::optional<net::Endpoint>& seed, bool tls,
                         const std::vector<std::byte>& secret, const JoinBenchOptions& options) {
  NetworkConfig c;
  c.transport = "tcp";
  c.security = tls ? NetworkConfig::Security::tlsPsk : NetworkConfig::Security::plaintext;
  c.secret = secret;
  // SWIM at its LAN defaults (T = 1 s, probe timeout 400 ms): five peers share this machine's
  // cores with a gigabyte's transfer, hashing and copies, and the loopback timings of local()
  // would take a member stalled for a fraction of a second for a dead one.
  c.membership = net::membership::Options{};
  net::shaped::LinkProfile link;
  link.latency = std::chrono::microseconds(static_cast<long>(options.latencyMs * 1000));
  link.bandwidthBitsPerSecond = options.mbit * 1e6;
  c.profile = net::shaped::NetworkProfile::uniform("join", link);
  c.profileIndex = index;
  // One site: every remote is shaped alike (the index only seeds the jitter, of which there is
  // none).
  c.indexOf = [](const net::Endpoint&) -> std::optional<std::size_t> { return 0; };
  if (seed) c.seeds = {*seed};
  engine::runtime::prepareTransport(c, registry);
  return c;
}

// The process's CPU time (every thread, user and system), seconds.
double cpuSeconds() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  const auto seconds = [](const timeval& t) { return t.tv_sec + t.tv_usec / 1e6; };
  return seconds(usage.ru_utime) + seconds(usage.ru_stime);
}

struct Measured {
  double seconds = 0;
  double cpuSeconds = 0;  // of the whole process (joiner and members) over the same time
};

// One catch-up of `model` from `count` fresh members.
Measured measure(const std::vector<float>& model, std::size_t count, bool tls,
                 const JoinBenchOptions& options) {
  const engine::Registry registry = engine::makeBuiltinRegistry();
  std::vector<std::byte> secret(32);
  std::mt19937_64 rng(count);
  for (std::byte& b : secret) b = static_cast<std::byte>(rng());
  const std::size_t chunkBytes = static_cast<std::size_t>(options.chunkMib * (1 << 20));
  const net::wire::ModelFingerprint fingerprint{model.size(), "f32", 0x101};
  ControlNode joiner(1, nodeConfig(registry, 0, std::nullopt, tls, secret, options), fingerprint,
                     chunkBytes);
  joiner.control.setCatchUpOptions({.chunkBytes = chunkBytes,
                                    .window = options.window,
                                    .maxInFlight = engine::runtime::StagingSizes{}.receiveSlots,
                                    .maxSources = count});
  std::vector<std::unique_ptr<ControlNode>> members;
  std::vector<engine::PeerId> ids;
  for (std::size_t i = 0; i < count; ++i) {
    members.push_back(std::make_unique<ControlNode>(
        100 + i, nodeConfig(registry, i + 1, joiner.network.endpoint(), tls, secret, options),
        fingerprint, chunkBytes));
    members.back()->serve(7, model);
    ids.push_back(100 + i);
  }
  GOSSAMER_ENFORCE(joiner.waitForMembers(count + 1, 60s),
                   "join bench: the members did not all join");
  const double cpuStart = cpuSeconds();
  const auto start = std::chrono::steady_clock::now();
  const std::optional<engine::CaughtUpModel> got =
      joiner.control.catchUp(ids, engine::ModelHolders::identical, model.size(), 20s);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const double cpu = cpuSeconds() - cpuStart;
  GOSSAMER_ENFORCE(got.has_value(), "join bench: the catch-up failed (see the log)");
  GOSSAMER_ENFORCE(std::ranges::equal(got->params(), model),
                   "join bench: the model caught up differs from the members'");
  GOSSAMER_ENFORCE(got->from.size() == count, "join bench: {} of {} members sent chunks",
                   got->from.size(), count);
  return {seconds, cpu};
}

struct Series {
  std::vector<double> seconds;  // per options.sources
  std::vector<double> vsIdeal;
  std::vector<double> coresBusy;  // CPU seconds over wall seconds: 2 is every core of this VM
  double speedup = 0;             // first count over last
};

Series run(const std::vector<float>& model, bool tls, const JoinBenchOptions& options) {
  Series series;
  // One catch-up first, not counted: the first in a process ran 4-12% slower than the same one
  // after it (fresh memory of the allocator's arenas and the shaper's buffers), which would
  // favour whichever count came later.
  measure(model, *std::max_element(options.sources.begin(), options.sources.end()), tls, options);
  const double bits = static_cast<double>(model.size()) * sizeof(float) * 8;
  fmt::print("\n{}\n{:>8} {:>12} {:>12} {:>10} {:>12}\n", tls ? "TLS 1.3" : "plaintext", "sources",
             "seconds", "ideal s", "vs ideal", "cores busy");
  for (std::size_t count : options.sources) {
    const Measured measured = measure(model, count, tls, options);
    const double seconds = measured.seconds;
    const double ideal = bits / (static_cast<double>(count) * options.mbit * 1e6);
    series.seconds.push_back(seconds);
    series.vsIdeal.push_back(seconds / ideal);
    series.coresBusy.push_back(measured.cpuSeconds / seconds);
    fmt::print("{:>8} {:>12.2f} {:>12.2f} {:>10.2f} {:>12.2f}\n", count, seconds, ideal,
               seconds / ideal, measured.cpuSeconds / seconds);
    std::fflush(stdout);
  }
  series.speedup = series.seconds.front() / series.seconds.back();
  return series;
}

std::string perCount(const std::vector<std::size_t>& counts, const std::vector<double>& values) {
  JsonObject json;
  for (std::size_t i = 0; i < counts.size(); ++i) json.add(std::to_string(counts[i]), values[i]);
  return json.str();
}

void runJoinBench(const JoinBenchOptions& options) {
  log::setLevel(options.logLevel);
  GOSSAMER_ENFORCE(!options.sources.empty(), "join bench: --sources needs at least one count");
  const std::size_t floats = static_cast<std::size_t>(options.modelMib * (1 << 20) / sizeof(float));
  std::vector<float> model(floats);
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> value(-1, 1);
  for (float& v : model) v = value(rng);
  fmt::print(
      "join: a joiner catching up a {:.0f} MiB model from {} member(s) at once; every pair of "
      "peers its own {:.0f} Mbit/s link ({} ms one way) over TCP on 127.0.0.1; chunks of {:.0f} "
      "MiB, {} in flight per member (16 in all at most), each checked against a second member's "
      "SHA-256. Baseline: "
      "the ideal, bytes / (sources x bandwidth).\n",
      options.modelMib, fmt::join(options.sources, ", "), options.mbit, options.latencyMs,
      options.chunkMib, options.window);
  const Series plain = run(model, false, options);
  std::optional<Series> tls;
  if (options.tls) tls = run(model, true, options);
  const double worst = *std::max_element(plain.vsIdeal.begin(), plain.vsIdeal.end());
  fmt::print(
      "\nspeedup {} vs {} sources: {:.2f} plaintext{} (target >= {}); worst vs ideal "
      "{:.2f} (target <= {})\n",
      options.sources.back(), options.sources.front(), plain.speedup,
      tls ? fmt::format(", {:.2f} TLS", tls->speedup) : std::string(), kTargetSpeedup, worst,
      kTargetVsIdeal);
  if (options.common.json) {
    JsonObject json;
    json.add("benchmark", "join");
    json.add("model_bytes", static_cast<std::uint64_t>(floats * sizeof(float)));
    json.add("mbit_per_pair", options.mbit);
    json.add("chunk_bytes", static_cast<std::uint64_t>(options.chunkMib * (1 << 20)));
    json.addRaw("join_seconds", perCount(options.sources, plain.seconds));
    json.addRaw("vs_ideal", perCount(options.sources, plain.vsIdeal));
    json.add(fmt::format("speedup_{}_vs_{}", options.sources.back(), options.sources.front()),
             plain.speedup);
    json.add("max_vs_ideal", worst);
    json.addRaw("cores_busy", perCount(options.sources, plain.coresBusy));
    json.add("cores", static_cast<std::uint64_t>(std::thread::hardware_concurrency()));
    if (tls) {
      json.addRaw("tls_join_seconds", perCount(options.sources, tls->seconds));
      json.addRaw("tls_vs_ideal", perCount(options.sources, tls->vsIdeal));
      json.addRaw("tls_cores_busy", perCount(options.sources, tls->coresBusy));
      json.add(fmt::format("tls_speedup_{}_vs_{}", options.sources.back(), options.sources.front()),
               tls->speedup);
    }
    json.add("target_speedup", kTargetSpeedup);
    json.add("target_vs_ideal", kTargetVsIdeal);
    fmt::print("{}\n", json.str());
  }
}

}  // namespace

void addJoinCommand(CLI::App& app) {
  auto options = std::make_shared<JoinBenchOptions>();
  CLI::App* command = app.add_subcommand(
      "join", "a joiner catching up a large model in verified chunks from 1, 2 and 4 members");
  addCommonOptions(*command, options->common);
  command->add_option("--model-mib", options->modelMib, "model size in MiB")
      ->capture_default_str()
      ->check(CLI::Range(0.001, 4096.0));
  command
      ->add_option("--sources", options->sources,
                   "member counts, in order (the speedup is the last's over the first's)")
      ->delimiter(',')
      ->capture_default_str()
      ->check(CLI::Range(1, 16));
  command->add_option("--mbit", options->mbit, "bandwidth of each pair's link, Mbit/s")
      ->capture_default_str()
      ->check(CLI::Range(1.0, 100000.0));
  command->add_option("--latency-ms", options->latencyMs, "one-way latency of each link")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 1000.0));
  command->add_option("--chunk-mib", options->chunkMib, "chunk size")
      ->capture_default_str()
      ->check(CLI::Range(0.0625, 256.0));
  command
      ->add_option("--window", options->window,
                   "chunks in flight per member (at most 16 in all: the joiner's receive buffers)")
      ->capture_default_str()
      ->check(CLI::Range(1, 64));
  command->add_option("--log-level", options->logLevel, "log level of the peers")
      ->capture_default_str();
  command->add_flag("--tls,!--no-tls", options->tls, "also measure with TLS on")
      ->capture_default_str();
  command->callback([options] { runJoinBench(*options); });
}

}  // namespace gossamer::bench
