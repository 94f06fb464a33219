// gossamer-bench chaos: a randomised fault schedule over a running local cluster.
//
// Baseline: the same cluster and run length without faults, run first. The schedule is drawn
// from --seed before anything runs (chaos_schedule.h): when (seconds after training starts),
// what (kill -9, restart from the checkpoint, restart without it, join of a new peer, join during
// the cluster's finish, kill -9 and a join in the same second, partition of one peer from the
// others, loss on one peer's links, a straggler), for how long and how hard, and a draw that
// picks the target among the peers live at that moment. The same seed gives the same schedule;
// the targets follow from it, since the live set only changes through the schedule.
//
// The peers are threads of this process over the in-process transport (chaos_threads.cc), or
// with --processes gossamer-peer processes over TLS on 127.0.0.1 (chaos_processes.cc), which
// carry out only the kinds that start and kill peers. --loss (threads only) adds loss on every
// link of the cluster for the whole faulty run (not the baseline). Loss, the schedule's and
// --loss alike, acts by --loss-mode: stream (the default) loses TCP segments, which are
// retransmitted (frames arrive late, in order), datagram drops whole frames
// (net/shaped/profile.h).
//
// Invariants (violations are reported and must be 0): every surviving peer ends without an
// error and takes every step, or, having joined during the finish, is told the cluster is done;
// every final model is finite; the cluster ends within its deadline (no deadlock); the
// algorithm's declared invariants hold over the survivors' final metrics (Algorithm::invariants:
// for gosgd, the survivors agree on the weight the dead took with them, and their weights plus
// it sum to at most 1). Processes: every process exits within 10 s of the cluster's last step,
// and none hangs (chaos_processes.cc).
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <unistd.h>

#include "algorithms/builtin.h"
#include "bench/bench_settings.h"
#include "bench/bench_util.h"
#include "bench/benchmarks.h"
#include "bench/chaos_run.h"
#include "bench/chaos_schedule.h"
#include "engine/base/enforce.h"
#include "engine/base/json.h"

namespace gossamer::bench {

double resumeAfter(const std::vector<std::pair<double, std::uint64_t>>& progress, double killedAt) {
  auto stepAt = [&](double t) {
    std::uint64_t step = 0;
    for (const auto& [when, s] : progress) {
      if (when > t) break;
      step = s;
    }
    return static_cast<double>(step);
  };
  const double before = (stepAt(killedAt) - stepAt(killedAt - 2)) / 2;
  for (const auto& [when, s] : progress) {
    if (when < killedAt) continue;
    if (when + 0.5 > progress.back().first) break;
    if ((stepAt(when + 0.5) - stepAt(when)) / 0.5 >= 0.9 * before) return when - killedAt;
  }
  return -1;
}

namespace {

// The kinds to draw from: --kinds, or every kind the mode supports. Throws gossamer::Error on a
// kind that peers as processes cannot carry out.
std::vector<ChaosKind> chosenKinds(const ChaosOptions& o) {
  const std::vector<ChaosKind> supported = supportedKinds(o.processes);
  if (o.kinds.empty()) return supported;
  std::vector<ChaosKind> kinds;
  for (const std::string& text : o.kinds) {
    const std::optional<ChaosKind> kind = chaosKindNamed(text);
    if (!kind) throw Error(fmt::format("--kinds: unknown fault kind '{}'", text));
    if (std::find(supported.begin(), supported.end(), *kind) == supported.end())
      throw Error(fmt::format(
          "--kinds {}: peers as processes talk plain TCP, with no shaped transport to partition, "
          "lose or slow down; with --processes only kill, restart, restart-fresh, join, "
          "join-finishing and kill-join",
          text));
    kinds.push_back(*kind);
  }
  return kinds;
}

// --peer-binary, else the gossamer-peer beside this gossamer-bench: in the same folder (an
// install) or in the build tree's engine/ beside its bench/.
std::filesystem::path findPeerBinary(const std::string& given) {
  auto runnable = [](const std::filesystem::path& p) {
    return std::filesystem::is_regular_file(p) && ::access(p.c_str(), X_OK) == 0;
  };
  if (!given.empty()) {
    if (!runnable(given)) throw Error(fmt::format("--peer-binary {}: no such program", given));
    return std::filesystem::absolute(given);
  }
  std::error_code error;
  const std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", error);
  if (error)
    throw Error("cannot find gossamer-peer (/proc/self/exe unreadable): pass --peer-binary");
  const std::filesystem::path beside = self.parent_path() / "gossamer-peer";
  const std::filesystem::path built = self.parent_path().parent_path() / "engine" / "gossamer-peer";
  for (const std::filesystem::path& p : {beside, built})
    if (runnable(p)) return p;
  throw Error(
      fmt::format("cannot find gossamer-peer beside this gossamer-bench (not at {} nor {}): "
                  "pass --peer-binary PATH",
                  beside.string(), built.string()));
}

void runChaos(const ChaosOptions& o) {
  if (o.processes && o.loss > 0)
    throw Error("--loss needs the threads' shaped transport: not with --processes");
  const std::vector<ChaosKind> kinds = chosenKinds(o);
  const engine::Registry registry = algorithms::makeRegistry();
  registry.algorithms.get(o.algorithm);  // an unknown name fails here, listing the known ones
  registry.datasets.get(o.dataset);
  std::filesystem::path peerBinary;
  std::shared_ptr<const engine::DatasetPair> data;
  if (o.processes) {
    peerBinary = findPeerBinary(o.peerBinary);
  } else if (!o.planOnly) {
    data = std::make_shared<const engine::DatasetPair>(registry.datasets.get(o.dataset)(
        {.trainSamples = o.trainSamples, .testSamples = 0, .seed = o.seed}));
  }
  const auto totalSteps = static_cast<std::uint64_t>(o.minutes * 60000 / o.stepMs);
  const double runSeconds = static_cast<double>(totalSteps) * o.stepMs / 1000;
  const std::size_t count =
      o.faults > 0 ? o.faults : static_cast<std::size_t>(std::round(o.faultsPerMinute * o.minutes));
  const std::vector<ChaosFault> schedule =
      drawChaosSchedule(o.seed, count, runSeconds, kinds, o.straggler);
  fmt::print("chaos: {} peers of {} as {}, {} steps of >= {} ms ({:.0f} s), seed {}, {} faults\n",
             o.peers, o.algorithm, o.processes ? "gossamer-peer processes" : "threads", totalSteps,
             o.stepMs, runSeconds, o.seed, schedule.size());
  if (o.processes) fmt::print("peers: {}\n", peerBinary.string());
  if (o.loss > 0) {
    fmt::print("loss on every link for the whole faulty run: {:.1f}% {}\n", 100 * o.loss,
               describeLoss(o.lossMode));
  }
  for (const ChaosFault& f : schedule) {
    fmt::print(
        "  planned t={:6.2f}s  {}{}\n", f.at, label(f.kind),
        f.kind == ChaosKind::joinFinishing ? " (when the first peer reaches the last step)" : "");
  }
  if (o.planOnly) return;

  const auto scratch = std::filesystem::temp_directory_path() /
                       fmt::format("gossamer-chaos-{}-{}", ::getpid(), o.seed);
  auto runOnce = [&](const std::string& name, const std::vector<ChaosFault>& faults, double loss) {
    return o.processes ? runProcesses(o, peerBinary, totalSteps, scratch / name, faults,
                                      registry.algorithms.get(o.algorithm).make({})->invariants())
                       : runThreads(o, registry, data, totalSteps, scratch / name, loss, faults);
  };
  std::optional<ChaosRunResult> baseline;
  if (o.baseline) {
    fmt::print("baseline: the same run without faults\n");
    baseline = runOnce("baseline", {}, 0);
  }
  fmt::print("chaos run\n");
  const ChaosRunResult chaos = runOnce("chaos", schedule, o.loss);

  fmt::print("\nschedule as executed (seed {}):\n", o.seed);
  for (const std::string& line : chaos.executed) fmt::print("  {}\n", line);
  std::vector<std::string> violations = chaos.violations;
  std::size_t hangs = chaos.hangs;
  if (baseline) {
    for (const std::string& v : baseline->violations) violations.push_back("baseline: " + v);
    hangs += baseline->hangs;
  }
  // The processes' logs stay for a post-mortem when something went wrong.
  if (o.processes && !violations.empty()) {
    fmt::print("\nthe peers' logs and metrics are kept in {}\n", scratch.string());
  } else {
    std::filesystem::remove_all(scratch);
  }
  fmt::print("\ninvariant violations: {}\n", violations.size());
  for (const std::string& v : violations) fmt::print("  {}\n", v);
  const double base = baseline ? baseline->accuracy : std::nan("");
  double worstResume = 0;
  for (double r : chaos.resumeSeconds) {
    fmt::print("after a kill, the survivors stepped at full speed again within {:.2f} s\n", r);
    worstResume = r < 0 ? INFINITY : std::max(worstResume, r);
  }
  if (o.processes) {
    fmt::print("hangs: {}; the last process exited {:.2f} s after the cluster's last step\n", hangs,
               chaos.maxExitAfterLastStepSeconds);
  }
  fmt::print(
      "final consensus accuracy: {:.2f}% with faults ({} survivors), {:.2f}% without: "
      "{:+.2f} points\n",
      100 * chaos.accuracy, chaos.survivors, 100 * base, 100 * (chaos.accuracy - base));
  if (o.common.json) {
    std::cout << JsonObject()
                     .add("benchmark", "chaos")
                     .add("mode", o.processes ? "processes" : "threads")
                     .add("seed", o.seed)
                     .add("algorithm", o.algorithm)
                     .add("loss", o.loss)
                     .add("loss_mode", net::shaped::name(o.lossMode))
                     .add("peers", static_cast<std::uint64_t>(o.peers))
                     .add("steps", totalSteps)
                     .add("faults", static_cast<std::uint64_t>(chaos.executed.size()))
                     .add("survivors", static_cast<std::uint64_t>(chaos.survivors))
                     .add("accuracy_with_faults", chaos.accuracy)
                     .add("accuracy_without_faults", base)
                     .add("delta_points", 100 * (chaos.accuracy - base))
                     .add("invariant_violations", static_cast<std::uint64_t>(violations.size()))
                     .add("hangs", static_cast<std::uint64_t>(hangs))
                     .add("max_exit_after_last_step_s", chaos.maxExitAfterLastStepSeconds)
                     .add("kills", static_cast<std::uint64_t>(chaos.resumeSeconds.size()))
                     .add("max_resume_s", worstResume)
                     .str()
              << std::endl;
  }
}

}  // namespace

void addChaosCommand(CLI::App& app) {
  auto options = std::make_shared<ChaosOptions>();
  CLI::App* command = app.add_subcommand(
      "chaos",
      "a randomised fault schedule (kills, restarts, joins, partitions, loss, stragglers) over a "
      "running local cluster of threads or of gossamer-peer processes (--processes); final "
      "accuracy against the same run without faults, invariant violations, the schedule "
      "(replayable from --seed)");
  addCommonOptions(*command, options->common);
  command->add_option("--seed", options->seed, "seed of the schedule (and of the run)")
      ->capture_default_str();
  command->add_option("--minutes", options->minutes, "length of each run (baseline, chaos)")
      ->check(CLI::Range(0.1, 600.0))
      ->capture_default_str();
  command->add_option("--peers", options->peers, "peers at the start")
      ->check(CLI::Range(std::size_t{3}, std::size_t{64}))
      ->capture_default_str();
  command->add_option("--algorithm", options->algorithm, "decentralized optimizer")
      ->capture_default_str();
  command->add_option("--dataset", options->dataset, "fashion-mnist or synthetic")
      ->capture_default_str();
  command->add_option("--train-samples", options->trainSamples, "first N training samples (0: all)")
      ->capture_default_str();
  command->add_option("--hidden", options->hidden, "width of the MLP's hidden layer")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  command->add_option("--step-ms", options->stepMs, "minimum step time (sets the step count)")
      ->check(CLI::Range(1.0, 10000.0))
      ->capture_default_str();
  command->add_option("--lr", options->lr, "learning rate")->capture_default_str();
  command->add_option("--faults-per-minute", options->faultsPerMinute, "faults in the schedule")
      ->check(CLI::Range(0.0, 600.0))
      ->capture_default_str();
  command->add_option("--faults", options->faults, "exactly this many faults (0: per minute)")
      ->capture_default_str();
  addStragglerOptions(*command, options->straggler);
  command
      ->add_option("--kinds", options->kinds,
                   "fault kinds to draw from: kill, restart (from the checkpoint), "
                   "restart-fresh (without it), join, join-finishing (during the cluster's "
                   "finish), kill-join (kill -9 and a join in the same second), partition, loss, "
                   "straggler; with --processes not partition, loss nor straggler (default: every "
                   "kind the mode supports)")
      ->delimiter(',')
      ->check(CLI::IsMember(chaosKindNames()));
  command->add_flag("!--no-baseline", options->baseline, "skip the fault-free run");
  command
      ->add_option("--loss", options->loss,
                   "loss rate of every link for the whole faulty run (the baseline has none; "
                   "not with --processes)")
      ->check(CLI::Range(0.0, 0.5))
      ->capture_default_str();
  addLossModeOption(*command, options->lossMode, "loss, --loss and the schedule's,");
  command->add_flag("--plan-only", options->planOnly,
                    "print the schedule the seed draws (the 'planned' lines) and run nothing");
  command->add_flag("--processes", options->processes,
                    "every peer a gossamer-peer process on 127.0.0.1 (TLS, real TCP, kill -9 a "
                    "real SIGKILL) instead of a thread of this process");
  command->add_option("--peer-binary", options->peerBinary,
                      "the gossamer-peer of --processes (default: the one beside this "
                      "gossamer-bench)");
  command->callback([options] { runChaos(*options); });
}

}  // namespace gossamer::bench
