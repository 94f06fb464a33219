// gossamer-bench chaos: a randomised fault schedule over a running local cluster.
//
// Baseline: the same cluster and run length without faults, run first in the same process. The
// schedule is drawn from --seed before anything runs: when (seconds after training starts), what
// (kill -9, restart from the checkpoint, join of a new peer, partition of one peer from the
// others, loss on one peer's links, a straggler), for how long and how hard, and a draw
// that picks the target among the peers live at that moment. The same seed gives the same
// schedule; the targets follow from it, since the live set only changes through the schedule.
// --loss adds loss on every link of the cluster for the whole faulty run (not the baseline).
// Loss, the schedule's and --loss alike, acts by --loss-mode: stream (the default) loses TCP
// segments, which are retransmitted (frames arrive late, in order), datagram drops whole frames
// (net/shaped/profile.h).
//
// Invariants (violations are reported and must be 0): every surviving peer ends without an
// error and takes every step; every final model is finite; the cluster ends within its deadline
// (no deadlock); for gosgd, the survivors agree on the weight the dead took with them, and their
// weights plus it sum to at most 1 (mass is never created, restarts included).
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <exception>
#include <filesystem>
#include <iostream>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "algorithms/builtin.h"
#include "bench/bench_util.h"
#include "bench/benchmarks.h"
#include "engine/base/json.h"
#include "engine/base/log.h"
#include "engine/runtime/cluster.h"
#include "engine/sim/world.h"
#include "net/inproc/inproc_transport.h"
#include "net/shaped/shaped_transport.h"

namespace gossamer::bench {
namespace {

using engine::runtime::Peer;
using engine::runtime::PeerConfig;
using engine::runtime::PeerResult;
using Clock = std::chrono::steady_clock;
using Seconds = std::chrono::duration<double>;

struct ChaosOptions {
  CommonOptions common;
  std::uint64_t seed = 1;
  double minutes = 2;
  std::size_t peers = 8;
  std::string algorithm = "gosgd";
  std::string dataset = "fashion-mnist";
  std::size_t trainSamples = 0;
  std::size_t hidden = 64;
  double stepMs = 20;  // every step takes at least this long: the run lasts `minutes`
  double lr = 0.05;
  double faultsPerMinute = 6;
  std::size_t faults = 0;          // > 0: exactly this many, instead of faultsPerMinute
  std::vector<std::string> kinds;  // empty: every kind
  bool baseline = true;
  double loss = 0;  // on every link, for the whole faulty run
  net::shaped::LossMode lossMode = net::shaped::LossMode::stream;
};

using engine::sim::Fault;
using engine::sim::FaultKind;

// What a fault is called in the executed schedule (by FaultKind).
const char* label(FaultKind kind) {
  constexpr const char* kLabels[] = {
      "kill -9", "restart from checkpoint", "join of a new peer", "partition", "loss", "straggler"};
  return kLabels[static_cast<std::size_t>(kind)];
}

// The schedule of a seed: faults spread over the run (none in its first and last tenth, so that
// the cluster forms and ends cleanly), drawn as the simulator draws its own (engine/sim).
std::vector<Fault> drawSchedule(const ChaosOptions& o, double runSeconds) {
  std::vector<FaultKind> kinds;
  for (const std::string& k : o.kinds) {
    if (const std::optional<FaultKind> kind = engine::sim::faultKindNamed(k))
      kinds.push_back(*kind);
  }
  const std::size_t count =
      o.faults > 0 ? o.faults : static_cast<std::size_t>(std::round(o.faultsPerMinute * o.minutes));
  return engine::sim::drawFaults(o.seed, count, runSeconds, kinds);
}

// One peer of the run: its object, its thread, and how it ended.
struct Member {
  std::unique_ptr<Peer> peer;
  std::thread thread;
  PeerResult result;
  std::exception_ptr error;
  bool killed = false;
  std::atomic<bool> done{false};
};

struct RunResult {
  engine::runtime::ConsensusResult consensus;
  // Per kill: seconds until the survivors' slowest peer steps at >= 90% of its rate in the 2 s
  // before the kill again (over a 0.5 s window); negative: never within the run.
  std::vector<double> resumeSeconds;
  std::vector<std::string> executed;  // the schedule as it ran, with its targets
  std::vector<std::string> violations;
  std::size_t survivors = 0;
  double wallSeconds = 0;
};

class ChaosRun {
 public:
  // `loss`: the loss rate of every link (the faulty run's --loss, 0 for the baseline).
  ChaosRun(const ChaosOptions& o, const engine::Registry& registry,
           std::shared_ptr<const engine::DatasetPair> data, std::uint64_t totalSteps,
           const std::filesystem::path& checkpoints, double loss)
      : options_(o),
        registry_(registry),
        data_(std::move(data)),
        partitions_(std::make_shared<net::shaped::Partitions>()),
        configs_(baseConfig(o, totalSteps, checkpoints, partitions_, loss), registry),
        totalSteps_(totalSteps) {}

  ~ChaosRun() {
    for (auto& m : members_) {
      if (m->thread.joinable()) {
        m->peer->kill();
        m->thread.join();
      }
    }
  }

  RunResult run(const std::vector<Fault>& schedule) {
    RunResult out;
    for (std::size_t i = 0; i < options_.peers; ++i) start(i, false);
    const Clock::time_point formed = Clock::now();
    while (!anyTraining()) {
      if (Clock::now() - formed > std::chrono::seconds(120)) {
        out.violations.push_back("the cluster did not start training within 120 s");
        return out;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    const Clock::time_point start = Clock::now();
    const double runSeconds = static_cast<double>(totalSteps_) * options_.stepMs / 1000;
    const Clock::time_point deadline =
        start + std::chrono::duration_cast<Clock::duration>(Seconds(3 * runSeconds + 120));
    std::size_t next = 0;
    std::vector<std::pair<double, std::function<void()>>> undo;  // (when, what) to end a fault
    std::vector<std::pair<double, std::uint64_t>> progress;      // (t, slowest live peer's step)
    std::vector<double> kills;
    for (;;) {
      const double now = Seconds(Clock::now() - start).count();
      progress.emplace_back(now, slowestStep());
      while (next < schedule.size() && schedule[next].at <= now) {
        const std::string what = apply(schedule[next], undo);
        if (schedule[next].kind == FaultKind::kill && what.find("skipped") == std::string::npos)
          kills.push_back(now);
        out.executed.push_back(fmt::format("t={:6.2f}s  {}", now, what));
        ++next;
      }
      for (auto it = undo.begin(); it != undo.end();) {
        if (it->first <= now) {
          it->second();
          it = undo.erase(it);
        } else {
          ++it;
        }
      }
      if (allLiveFinished()) break;
      if (Clock::now() > deadline) {
        out.violations.push_back(fmt::format(
            "the cluster did not end within {:.0f} s (3x its run plus 120 s): a deadlock?",
            Seconds(deadline - start).count()));
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    for (auto& [when, what] : undo) what();
    out.wallSeconds = Seconds(Clock::now() - start).count();
    for (double at : kills) out.resumeSeconds.push_back(resumeAfter(progress, at));

    // The survivors' final models, before anyone leaves; then every thread ends.
    std::vector<engine::runtime::Snapshot> finals;
    for (auto& m : members_) {
      if (m->killed) continue;
      if (auto s = m->peer->snapshot(std::chrono::seconds(30))) finals.push_back(std::move(*s));
    }
    for (auto& m : members_) {
      if (!m->killed && !m->done) m->peer->requestStop();
      if (m->thread.joinable()) m->thread.join();
    }
    checkInvariants(finals, out);
    engine::runtime::ConsensusEvaluator evaluator(registry_, configs_.base().training.model,
                                                  modelConfig(), data_->test);
    if (!finals.empty()) out.consensus = evaluator.evaluate(finals, 0, true);
    out.survivors = finals.size();
    return out;
  }

 private:
  static PeerConfig baseConfig(const ChaosOptions& o, std::uint64_t totalSteps,
                               const std::filesystem::path& checkpoints,
                               std::shared_ptr<net::shaped::Partitions> partitions, double loss) {
    PeerConfig c;
    c.network.transport = "inproc";
    c.network.partitions = std::move(partitions);
    // No delay; the loss mode also governs the schedule's run-time loss faults.
    c.network.profile = net::shaped::NetworkProfile::uniform(
        "chaos", net::shaped::LinkProfile{.lossRate = loss, .lossMode = o.lossMode});
    c.network.membership = net::membership::Options::local();
    engine::runtime::TrainingConfig& t = c.training;
    t.algorithm = o.algorithm;
    t.model = "mlp";
    t.modelConfig.hidden = {o.hidden};
    t.optimizer.lr = o.lr;
    t.batch = 32;
    t.maxSteps = totalSteps;
    t.minPeers = o.peers;
    t.seed = o.seed;
    t.minStepTime = std::chrono::microseconds(static_cast<std::int64_t>(o.stepMs * 1000));
    t.commTimeout = std::chrono::seconds(2);
    t.checkpointDir = checkpoints.string();
    t.checkpointEvery = 25;
    t.progress = false;
    t.finalConsensus = false;
    t.finalLocalEval = false;
    return c;
  }

  engine::ModelConfig modelConfig() const {
    engine::ModelConfig m = configs_.base().training.modelConfig;
    m.inputs = data_->train.features;
    m.classes = data_->train.classes;
    return m;
  }

  // Starts peer `index` (a new one, or a restart of a killed one from its checkpoint).
  void start(std::size_t index, bool resume) {
    std::optional<net::Endpoint> seed;
    for (const auto& m : members_) {
      if (!m->killed && !m->done) {
        seed = m->peer->endpoint();
        break;
      }
    }
    PeerConfig c = configs_.make(index, seed);
    c.training.resume = resume;
    auto member = std::make_unique<Member>();
    member->peer = std::make_unique<Peer>(std::move(c), registry_, data_);
    configs_.listening(member->peer->endpoint(), index);
    Member* raw = member.get();
    member->thread = std::thread([raw] {
      try {
        raw->result = raw->peer->run();
      } catch (...) {
        raw->error = std::current_exception();
      }
      raw->done = true;
    });
    if (index < slots_.size()) {
      members_[slots_[index]]->thread.join();  // the killed one's thread ended long ago
      slots_[index] = members_.size();
    } else {
      slots_.push_back(members_.size());
    }
    members_.push_back(std::move(member));
  }

  std::vector<std::size_t> live() const {
    std::vector<std::size_t> indices;
    for (std::size_t i = 0; i < slots_.size(); ++i) {
      const Member& m = *members_[slots_[i]];
      if (!m.killed && !m.done) indices.push_back(i);
    }
    return indices;
  }

  // The step of the slowest peer that is training (killed and starting ones excluded).
  std::uint64_t slowestStep() const {
    std::uint64_t slowest = UINT64_MAX;
    for (std::size_t slot : slots_) {
      const Member& m = *members_[slot];
      if (m.killed || m.done) continue;
      const engine::runtime::PeerStatus s = m.peer->status();
      if (s.training) slowest = std::min(slowest, s.step);
    }
    return slowest == UINT64_MAX ? 0 : slowest;
  }

  // See RunResult::resumeSeconds.
  static double resumeAfter(const std::vector<std::pair<double, std::uint64_t>>& progress,
                            double killedAt) {
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

  bool anyTraining() const {
    return std::any_of(members_.begin(), members_.end(),
                       [](const auto& m) { return m->peer->status().training; });
  }
  bool allLiveFinished() const {
    for (std::size_t i = 0; i < slots_.size(); ++i) {
      const Member& m = *members_[slots_[i]];
      if (!m.killed && !m.done && !m.peer->status().finished) return false;
    }
    return true;
  }

  // Carries out `f`; returns what happened (the line of the executed schedule).
  std::string apply(const Fault& f, std::vector<std::pair<double, std::function<void()>>>& undo) {
    const std::vector<std::size_t> alive = live();
    const double now = f.at;
    if (alive.empty()) return fmt::format("{}: skipped (no live peer)", label(f.kind));
    const std::size_t target = alive[f.pick % alive.size()];
    switch (f.kind) {
      case FaultKind::kill:
        if (alive.size() <= std::max<std::size_t>(2, options_.peers / 2))
          return fmt::format("{}: skipped (only {} live)", label(f.kind), alive.size());
        members_[slots_[target]]->killed = true;
        members_[slots_[target]]->peer->kill();
        return fmt::format("{} of peer {}", label(f.kind), target + 1);
      case FaultKind::restart: {
        for (std::size_t i = 0; i < slots_.size(); ++i) {
          if (members_[slots_[i]]->killed) {
            start(i, std::filesystem::exists(checkpointOf(i)));
            return fmt::format("{} of peer {}", label(f.kind), i + 1);
          }
        }
        return fmt::format("{}: skipped (no killed peer)", label(f.kind));
      }
      case FaultKind::join:
        if (slots_.size() >= 2 * options_.peers)
          return fmt::format("{}: skipped ({} peers so far)", label(f.kind), slots_.size());
        start(slots_.size(), false);
        return fmt::format("{}: peer {}", label(f.kind), slots_.size());
      case FaultKind::partition: {
        std::vector<std::size_t> others;
        for (std::size_t i = 0; i < slots_.size(); ++i)
          if (i != target) others.push_back(i);
        const std::vector<std::size_t> one{target};
        partitions_->cut(one, others);
        undo.emplace_back(now + f.seconds, [this, one, others] { partitions_->heal(one, others); });
        return fmt::format("{} of peer {} from the others for {:.1f} s", label(f.kind), target + 1,
                           f.seconds);
      }
      case FaultKind::loss: {
        for (std::size_t i = 0; i < slots_.size(); ++i) {
          if (i == target) continue;
          partitions_->setLoss(target, i, f.magnitude);
          partitions_->setLoss(i, target, f.magnitude);
        }
        const std::size_t n = slots_.size();
        undo.emplace_back(now + f.seconds, [this, target, n] {
          for (std::size_t i = 0; i < n; ++i) {
            partitions_->setLoss(target, i, 0);
            partitions_->setLoss(i, target, 0);
          }
        });
        return fmt::format("{} of {:.0f}% on peer {}'s links for {:.1f} s", label(f.kind),
                           100 * f.magnitude, target + 1, f.seconds);
      }
      case FaultKind::straggler: {
        Peer* peer = members_[slots_[target]]->peer.get();
        const auto slow = std::chrono::microseconds(
            static_cast<std::int64_t>(options_.stepMs * 1000 * f.magnitude));
        peer->setMinStepTime(slow);
        const std::size_t slot = slots_[target];
        undo.emplace_back(now + f.seconds, [this, slot] {
          if (!members_[slot]->killed) members_[slot]->peer->setMinStepTime({});
        });
        return fmt::format("{}: peer {} {:.1f}x slower for {:.1f} s", label(f.kind), target + 1,
                           f.magnitude, f.seconds);
      }
    }
    return "?";
  }

  std::filesystem::path checkpointOf(std::size_t index) const {
    return std::filesystem::path(configs_.base().training.checkpointDir) /
           fmt::format("peer-{:016x}.ckpt", index + 1);
  }

  void checkInvariants(const std::vector<engine::runtime::Snapshot>& finals, RunResult& out) {
    std::vector<engine::sim::Survivor> survivors;
    for (std::size_t i = 0; i < slots_.size(); ++i) {
      const Member& m = *members_[slots_[i]];
      if (m.killed) continue;
      engine::sim::Survivor s{.name = fmt::format("peer {}", i + 1),
                              .steps = m.result.steps,
                              .metrics = &m.result.metrics};
      if (m.error) {
        try {
          std::rethrow_exception(m.error);
        } catch (const std::exception& e) {
          s.error = e.what();
        }
      }
      survivors.push_back(std::move(s));
    }
    for (std::string& what : engine::sim::survivorViolations(survivors, finals, totalSteps_,
                                                             options_.algorithm == "gosgd"))
      out.violations.push_back(std::move(what));
  }

  const ChaosOptions& options_;
  const engine::Registry& registry_;
  std::shared_ptr<const engine::DatasetPair> data_;
  std::shared_ptr<net::shaped::Partitions> partitions_;
  engine::runtime::LocalPeerConfigs configs_;
  std::uint64_t totalSteps_;
  std::vector<std::unique_ptr<Member>> members_;  // every peer object of the run
  std::vector<std::size_t> slots_;                // peer index -> its latest object in members_
};

void runChaos(const ChaosOptions& o) {
  const engine::Registry registry = algorithms::makeRegistry();
  auto data = std::make_shared<const engine::DatasetPair>(registry.datasets.get(o.dataset)(
      {.trainSamples = o.trainSamples, .testSamples = 0, .seed = o.seed}));
  const auto totalSteps = static_cast<std::uint64_t>(o.minutes * 60000 / o.stepMs);
  const double runSeconds = static_cast<double>(totalSteps) * o.stepMs / 1000;
  const std::vector<Fault> schedule = drawSchedule(o, runSeconds);
  fmt::print("chaos: {} peers of {}, {} steps of >= {} ms ({:.0f} s), seed {}, {} faults\n",
             o.peers, o.algorithm, totalSteps, o.stepMs, runSeconds, o.seed, schedule.size());
  if (o.loss > 0) {
    fmt::print("loss on every link for the whole faulty run: {:.1f}% {}\n", 100 * o.loss,
               describeLoss(o.lossMode));
  }
  for (const Fault& f : schedule) fmt::print("  planned t={:6.2f}s  {}\n", f.at, label(f.kind));

  const auto scratch = std::filesystem::temp_directory_path() /
                       fmt::format("gossamer-chaos-{}-{}", ::getpid(), o.seed);
  std::optional<RunResult> baseline;
  if (o.baseline) {
    fmt::print("baseline: the same run without faults\n");
    ChaosRun run(o, registry, data, totalSteps, scratch / "baseline", 0);
    baseline = run.run({});
  }
  fmt::print("chaos run\n");
  RunResult chaos;
  {
    ChaosRun run(o, registry, data, totalSteps, scratch / "chaos", o.loss);
    chaos = run.run(schedule);
  }
  std::filesystem::remove_all(scratch);

  fmt::print("\nschedule as executed (seed {}):\n", o.seed);
  for (const std::string& line : chaos.executed) fmt::print("  {}\n", line);
  std::vector<std::string> violations = chaos.violations;
  if (baseline)
    for (const std::string& v : baseline->violations) violations.push_back("baseline: " + v);
  fmt::print("\ninvariant violations: {}\n", violations.size());
  for (const std::string& v : violations) fmt::print("  {}\n", v);
  const double base = baseline ? baseline->consensus.accuracy : std::nan("");
  double worstResume = 0;
  for (double r : chaos.resumeSeconds) {
    fmt::print("after a kill, the survivors stepped at full speed again within {:.2f} s\n", r);
    worstResume = r < 0 ? INFINITY : std::max(worstResume, r);
  }
  fmt::print(
      "final consensus accuracy: {:.2f}% with faults ({} survivors), {:.2f}% without: "
      "{:+.2f} points\n",
      100 * chaos.consensus.accuracy, chaos.survivors, 100 * base,
      100 * (chaos.consensus.accuracy - base));
  if (o.common.json) {
    std::cout << JsonObject()
                     .add("benchmark", "chaos")
                     .add("seed", o.seed)
                     .add("algorithm", o.algorithm)
                     .add("loss", o.loss)
                     .add("loss_mode", net::shaped::name(o.lossMode))
                     .add("peers", static_cast<std::uint64_t>(o.peers))
                     .add("steps", totalSteps)
                     .add("faults", static_cast<std::uint64_t>(chaos.executed.size()))
                     .add("survivors", static_cast<std::uint64_t>(chaos.survivors))
                     .add("accuracy_with_faults", chaos.consensus.accuracy)
                     .add("accuracy_without_faults", base)
                     .add("delta_points", 100 * (chaos.consensus.accuracy - base))
                     .add("invariant_violations", static_cast<std::uint64_t>(violations.size()))
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
      "running local cluster; final accuracy against the same run without faults, invariant "
      "violations, the schedule (replayable from --seed)");
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
  command
      ->add_option("--kinds", options->kinds,
                   "fault kinds to draw from: kill, restart, join, partition, loss, straggler "
                   "(default: all)")
      ->delimiter(',')
      ->check(CLI::IsMember({"kill", "restart", "join", "partition", "loss", "straggler"}));
  command->add_flag("!--no-baseline", options->baseline, "skip the fault-free run");
  command
      ->add_option("--loss", options->loss,
                   "loss rate of every link for the whole faulty run (the baseline has none)")
      ->check(CLI::Range(0.0, 0.5))
      ->capture_default_str();
  addLossModeOption(*command, options->lossMode, "loss, --loss and the schedule's,");
  command->callback([options] { runChaos(*options); });
}

}  // namespace gossamer::bench
