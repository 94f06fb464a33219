// The chaos run with every peer a gossamer-peer process on 127.0.0.1 (runProcesses in
// chaos_run.h): TLS with a secret file, real TCP, kill -9 as a real SIGKILL, restarts at the
// port the killed life listened on. A peer's index i is its --peer-id i + 1; each life of it has
// its own log (stdout and stderr) and metrics file in the scratch directory.
//
// Invariants (violations must be 0): every process that was not killed exits 0, or 4 when it
// joined during the finish (the cluster had trained all its steps; 3 when it came after every
// member had left, so that nobody could tell it, and gave up on its seed); one that exits 0
// reports in its --json line all the run's steps and a finite peer_test_accuracy; every process
// exits within 10 s of the cluster's last step (the latest loop_end_unix_s of the survivors'
// --json lines); none still runs at the deadline, 3x the run plus 60 s (each such one is
// SIGKILLed and counted as a hang); the algorithm's declared invariants hold over the metrics of
// the survivors' --json lines (engine/invariants.h).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include "bench/chaos_run.h"
#include "bench/peer_process.h"
#include "engine/base/enforce.h"
#include "engine/exit_status.h"

namespace gossamer::bench {
namespace {

using Clock = std::chrono::steady_clock;
using Seconds = std::chrono::duration<double>;

constexpr double kMaxExitAfterLastStepSeconds = 10;

// Writes a fresh random cluster secret to `path`, created with mode 0600.
void writeSecret(const std::filesystem::path& path) {
  std::random_device random;
  std::string secret;
  for (int i = 0; i < 32; ++i) secret += fmt::format("{:02x}", random() & 0xff);
  secret += "\n";
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  if (fd < 0) throw Error(fmt::format("cannot create the cluster secret {}", path.string()));
  const bool written =
      ::write(fd, secret.data(), secret.size()) == static_cast<ssize_t>(secret.size());
  ::close(fd);
  if (!written) throw Error(fmt::format("cannot write the cluster secret {}", path.string()));
}

// One life of a peer: a process from its start to its exit.
struct Life {
  std::unique_ptr<PeerProcess> process;
  bool killed = false;         // by the schedule (kill -9)
  bool hung = false;           // SIGKILLed at the run's deadline
  bool finishingJoin = false;  // joined during the finish: exit status 4 is its correct end
  std::uint64_t step = 0;      // its last reported step, as of the last pollAll()
};

// A peer index: its port (from its first life's log; restarts listen there again) and lives.
struct Slot {
  int port = 0;
  std::vector<Life> lives;
  Life& latest() { return lives.back(); }
  const Life& latest() const { return lives.back(); }
};

// What the run does at a later time: a kill-join's join.
struct TimedJoin {
  double at = 0;  // seconds into the run
};

class ProcessRun {
 public:
  ProcessRun(const ChaosOptions& o, std::filesystem::path binary, std::uint64_t totalSteps,
             std::filesystem::path scratch, engine::Invariants invariants)
      : options_(o),
        invariants_(std::move(invariants)),
        binary_(std::move(binary)),
        totalSteps_(totalSteps),
        scratch_(std::move(scratch)),
        secret_(scratch_ / "secret"),
        checkpoints_(scratch_ / "checkpoints") {
    std::filesystem::create_directories(checkpoints_);
    writeSecret(secret_);
  }

  ChaosRunResult run(const std::vector<ChaosFault>& schedule) {
    ChaosRunResult out;
    if (!formCluster(out)) return out;
    const Clock::time_point began = Clock::now();
    const double runSeconds = static_cast<double>(totalSteps_) * options_.stepMs / 1000;
    const Clock::time_point deadline =
        began + std::chrono::duration_cast<Clock::duration>(Seconds(3 * runSeconds + 60));
    std::size_t next = 0;
    std::vector<TimedJoin> joins;                            // of kill-joins, still to come
    std::vector<std::pair<double, std::uint64_t>> progress;  // (t, slowest live peer's step)
    std::vector<double> kills;
    for (;;) {
      const double now = Seconds(Clock::now() - began).count();
      pollAll();
      progress.emplace_back(now, slowestStep());
      fastestProgress_.emplace_back(now, fastest().second);
      while (next < schedule.size() && due(schedule[next], now)) {
        bool killed = false;
        const std::string what = apply(schedule[next], now, joins, killed);
        if (killed) kills.push_back(now);
        out.executed.push_back(fmt::format("t={:6.2f}s  {}", now, what));
        ++next;
      }
      for (auto it = joins.begin(); it != joins.end();) {
        if (it->at <= now) {
          start(slots_.size(), {});
          out.executed.push_back(fmt::format("t={:6.2f}s  {}: peer {} joins", it->at,
                                             label(ChaosKind::killJoin), slots_.size()));
          it = joins.erase(it);
        } else {
          ++it;
        }
      }
      if (live().empty()) {
        // A join to come would find no one: the run is over.
        for (const TimedJoin& join : joins)
          out.executed.push_back(
              fmt::format("t={:6.2f}s  {}: its join not carried out (the run had ended)", join.at,
                          label(ChaosKind::killJoin)));
        break;
      }
      if (Clock::now() > deadline) {
        for (std::size_t i : live()) {
          Life& life = slots_[i].latest();
          life.process->kill();
          life.hung = true;
          ++out.hangs;
          out.violations.push_back(
              fmt::format("peer {} still ran {:.0f} s after training began (3x the run plus 60 "
                          "s): a hang; its log ends: {}",
                          i + 1, Seconds(deadline - began).count(), life.process->logTail(5)));
        }
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    for (; next < schedule.size(); ++next)
      out.executed.push_back(fmt::format("          {}: not carried out (the run had ended)",
                                         label(schedule[next].kind)));
    out.wallSeconds = Seconds(Clock::now() - began).count();
    for (double at : kills) out.resumeSeconds.push_back(resumeAfter(progress, at));
    checkInvariants(out);
    return out;
  }

 private:
  struct StartOptions {
    bool resume = false;
    bool finishingJoin = false;
    std::optional<std::size_t> seed;  // the peer to join through; none: the first live one
  };

  // Starts peer 1, waits for its port, then the others through it; waits until one trains.
  bool formCluster(ChaosRunResult& out) {
    start(0, {});
    const Clock::time_point begun = Clock::now();
    while (slots_[0].port == 0) {
      pollAll();
      if (slots_[0].latest().process->exited() || Clock::now() - begun > std::chrono::seconds(60)) {
        out.violations.push_back(
            fmt::format("peer 1 did not listen: {}", slots_[0].latest().process->logTail(5)));
        return false;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    for (std::size_t i = 1; i < options_.peers; ++i) start(i, {});
    while (fastest().second == 0) {
      pollAll();
      if (live().size() < options_.peers || Clock::now() - begun > std::chrono::seconds(120)) {
        out.violations.push_back(
            live().size() < options_.peers
                ? fmt::format("a peer ended before training began: {}", firstEndedLog())
                : std::string("the cluster did not start training within 120 s"));
        return false;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return true;
  }

  std::string firstEndedLog() const {
    for (std::size_t i = 0; i < slots_.size(); ++i) {
      const PeerProcess& p = *slots_[i].latest().process;
      if (p.exited())
        return fmt::format("peer {} exited {}; its log ends: {}", i + 1, *p.exitStatus(),
                           p.logTail(5));
    }
    return "?";
  }

  // Starts peer `index`: a new one (a new slot), or a killed one again at its port.
  void start(std::size_t index, StartOptions how) {
    const std::optional<std::size_t> seed = how.seed ? how.seed : firstListening();
    if (index == slots_.size()) slots_.emplace_back();
    Slot& slot = slots_[index];
    const std::string name =
        fmt::format("peer{}-{}", index + 1, slot.lives.size() + 1);  // peer3-2: its second life
    const std::vector<std::pair<std::string, std::string>> flags = {
        {"--listen", fmt::format("127.0.0.1:{}", slot.port)},
        {"--peer-id", std::to_string(index + 1)},
        {"--secret-file", secret_.string()},
        {"--min-peers", std::to_string(options_.peers)},
        {"--algorithm", options_.algorithm},
        {"--model", "mlp"},
        {"--hidden", std::to_string(options_.hidden)},
        {"--optimizer", "momentum"},  // as the threads' TrainingConfig: momentum, constant rate
        {"--lr-schedule", "constant"},
        {"--lr", fmt::format("{}", options_.lr)},
        {"--batch", "32"},
        {"--steps", std::to_string(totalSteps_)},
        {"--step-time", fmt::format("{}", options_.stepMs)},
        {"--comm-timeout", "2"},
        {"--checkpoint-dir", checkpoints_.string()},
        {"--checkpoint-every", "25"},
        {"--metrics", (scratch_ / (name + ".metrics.jsonl")).string()},
        {"--eval-every", "10"},
        {"--eval-samples", "200"},
        {"--dataset", options_.dataset},
        {"--train-samples", std::to_string(options_.trainSamples)},
        {"--seed", std::to_string(options_.seed)},
        {"--device", "cpu"},
        {"--log-level", "info"},  // its "listening on" line gives its port
    };
    std::vector<std::string> args = {"--json"};
    for (const auto& [flag, value] : flags) args.insert(args.end(), {flag, value});
    if (how.resume) args.push_back("--resume");
    // Come too late, it would find no one; then it gives up instead of waiting a minute.
    // Arriving after the last member left, it finds nobody to tell it the run is over: it gives
    // up on its seed soon, so that it too exits within the bound after the last step.
    if (how.finishingJoin) args.insert(args.end(), {"--join-timeout", "3"});
    if (seed) args.insert(args.end(), {"--seeds", fmt::format("127.0.0.1:{}", slots_[*seed].port)});
    Life life;
    life.finishingJoin = how.finishingJoin;
    life.process = std::make_unique<PeerProcess>(binary_, args, scratch_ / (name + ".log"),
                                                 scratch_ / (name + ".metrics.jsonl"));
    slot.lives.push_back(std::move(life));
  }

  // The first live peer whose port is known: the seed of a new life.
  std::optional<std::size_t> firstListening() const {
    for (std::size_t i : live())
      if (slots_[i].port != 0) return i;
    return std::nullopt;
  }

  // Reaps what exited, reads steps, and ports as they are logged; the slowest start-up so far is
  // the time a joiner takes to reach the cluster.
  void pollAll() {
    for (Slot& slot : slots_) {
      Life& life = slot.latest();
      life.process->poll();
      life.step = life.process->step();
      if (slot.port == 0 && life.process->port() != 0) {
        slot.port = life.process->port();
        if (slot.lives.size() == 1)
          startupSeconds_ =
              std::max(startupSeconds_, Seconds(Clock::now() - life.process->startedAt()).count());
      }
    }
  }

  std::vector<std::size_t> live() const {
    std::vector<std::size_t> indices;
    for (std::size_t i = 0; i < slots_.size(); ++i) {
      const Life& life = slots_[i].latest();
      if (!life.killed && !life.process->exited()) indices.push_back(i);
    }
    return indices;
  }

  // The step of the slowest live peer that has reported one (starting ones excluded).
  std::uint64_t slowestStep() const {
    std::uint64_t slowest = UINT64_MAX;
    for (std::size_t i : live()) {
      const std::uint64_t step = slots_[i].latest().step;
      if (step > 0) slowest = std::min(slowest, step);
    }
    return slowest == UINT64_MAX ? 0 : slowest;
  }

  // The live peer furthest along (its index), and its step.
  std::pair<std::size_t, std::uint64_t> fastest() const {
    std::pair<std::size_t, std::uint64_t> best{0, 0};
    for (std::size_t i : live()) {
      const std::uint64_t step = slots_[i].latest().step;
      if (step >= best.second) best = {i, step};
    }
    return best;
  }

  // Whether `f` is due at `now`. A join during the finish is due when the furthest live peer is
  // about to reach the last step: as many steps before it as that peer takes (at its pace over
  // the last 2 s) in a process's start-up less 0.3 s, so that the joiner comes just after it.
  bool due(const ChaosFault& f, double now) const {
    if (f.kind != ChaosKind::joinFinishing) return f.at <= now;
    const double pace = recentPace(now);
    const double lead = pace * std::max(0.0, startupSeconds_ - 0.3);
    return static_cast<double>(fastest().second) + lead >= static_cast<double>(totalSteps_);
  }

  // Steps per second of the furthest live peer over the last 2 s (the nominal pace before).
  double recentPace(double now) const {
    const double nominal = 1000 / options_.stepMs;
    if (fastestProgress_.empty() || fastestProgress_.front().first > now - 2) return nominal;
    std::uint64_t before = 0;
    for (const auto& [t, step] : fastestProgress_) {
      if (t > now - 2) break;
      before = step;
    }
    const std::uint64_t latest = fastestProgress_.back().second;
    return latest > before ? static_cast<double>(latest - before) / 2 : nominal;
  }

  std::optional<std::size_t> firstKilled() const {
    for (std::size_t i = 0; i < slots_.size(); ++i)
      if (slots_[i].latest().killed) return i;
    return std::nullopt;
  }

  void kill(std::size_t index) {
    Life& life = slots_[index].latest();
    life.process->kill();
    life.killed = true;
  }

  std::filesystem::path checkpointOf(std::size_t index) const {
    return checkpoints_ / fmt::format("peer-{:016x}.ckpt", index + 1);
  }

  // Carries out `f` at `now` (seconds into the run); returns what happened (the line of the
  // executed schedule) and sets `killed` when a peer was killed.
  std::string apply(const ChaosFault& f, double now, std::vector<TimedJoin>& joins, bool& killed) {
    const std::vector<std::size_t> alive = live();
    if (std::optional<std::string> skip = skipped(f, {.live = alive.size(),
                                                      .started = slots_.size(),
                                                      .pendingJoins = joins.size(),
                                                      .anyKilled = firstKilled().has_value(),
                                                      .startingPeers = options_.peers}))
      return *skip;
    const std::size_t target = alive[f.pick % alive.size()];
    switch (f.kind) {
      case ChaosKind::kill:
        kill(target);
        killed = true;
        return fmt::format("{} of peer {}", label(f.kind), target + 1);
      case ChaosKind::restart:
      case ChaosKind::restartFresh: {
        const std::optional<std::size_t> index = firstKilled();
        const bool fromCheckpoint =
            f.kind == ChaosKind::restart && std::filesystem::exists(checkpointOf(*index));
        const int port = slots_[*index].port;
        start(*index, {.resume = fromCheckpoint});
        return fmt::format("{} of peer {} at 127.0.0.1:{}{}", label(f.kind), *index + 1, port,
                           f.kind == ChaosKind::restart && !fromCheckpoint
                               ? " (no checkpoint yet: without --resume)"
                               : "");
      }
      case ChaosKind::join:
        start(slots_.size(), {});
        return fmt::format("{}: peer {}", label(f.kind), slots_.size());
      case ChaosKind::joinFinishing: {
        const auto [seed, step] = fastest();
        if (slots_[seed].port == 0)
          return fmt::format("{}: skipped (peer {} never listened)", label(f.kind), seed + 1);
        start(slots_.size(), {.finishingJoin = true, .seed = seed});
        return fmt::format("{}: peer {} through peer {} (at step {} of {})", label(f.kind),
                           slots_.size(), seed + 1, step, totalSteps_);
      }
      case ChaosKind::killJoin:
        kill(target);
        killed = true;
        joins.push_back({.at = now + f.seconds});
        return fmt::format("{}: peer {} killed, a new peer joins {:.2f} s later", label(f.kind),
                           target + 1, f.seconds);
      case ChaosKind::partition:
      case ChaosKind::loss:
      case ChaosKind::straggler:
        break;
    }
    GOSSAMER_THROW("the fault kind {} needs peers as threads (chaos_bench.cc refuses it)",
                   name(f.kind));
  }

  void checkInvariants(ChaosRunResult& out) {
    // The cluster's last step: the latest end of a training loop among the survivors.
    std::optional<double> lastStep;
    double accuracySum = 0;
    // The survivors' final metrics (their --json "metrics"), for the algorithm's own invariants.
    std::vector<std::map<std::string, double>> metrics;
    std::vector<engine::PeerOutcome> outcomes;
    metrics.reserve(slots_.size());
    for (std::size_t i = 0; i < slots_.size(); ++i) {
      const Life& life = slots_[i].latest();
      if (life.killed || life.hung) continue;
      const PeerProcess& p = *life.process;
      const int status = p.exitStatus().value_or(-1);
      // Told the cluster had trained all its steps (4), or, come after every member had left,
      // joined no one (3): both are the end of a join during the finish.
      if (life.finishingJoin &&
          (status == engine::cli::kExitClusterDone || status == engine::cli::kExitCannotJoin))
        continue;
      if (status != 0) {
        out.violations.push_back(fmt::format("peer {} exited {}{}; its log ends: {}", i + 1, status,
                                             status == engine::cli::kExitClusterDone
                                                 ? " (the cluster was done) before the finish"
                                                 : "",
                                             p.logTail(3)));
        continue;
      }
      const std::string json = p.resultLine();
      const double steps = jsonNumber(json, "steps");
      const double accuracy = jsonNumber(json, "peer_test_accuracy");
      const double loopEnd = jsonNumber(json, "loop_end_unix_s");
      if (json.empty()) {
        out.violations.push_back(fmt::format("peer {} exited 0 without a --json line", i + 1));
        continue;
      }
      ++out.survivors;
      accuracySum += jsonNumber(json, "test_accuracy");
      metrics.push_back(jsonNumbers(json, "metrics"));
      outcomes.push_back({.name = fmt::format("peer {}", i + 1),
                          .steps = static_cast<std::uint64_t>(steps),
                          .metrics = &metrics.back()});
      if (steps != static_cast<double>(totalSteps_))
        out.violations.push_back(
            fmt::format("peer {} took {} of the {} steps", i + 1, steps, totalSteps_));
      if (!std::isfinite(accuracy))
        out.violations.push_back(
            fmt::format("peer {}'s final model has no finite test accuracy", i + 1));
      if (!std::isfinite(loopEnd))
        out.violations.push_back(fmt::format(
            "peer {}'s --json line has no loop_end_unix_s (a gossamer-peer without it?)", i + 1));
      else
        lastStep = std::max(lastStep.value_or(loopEnd), loopEnd);
    }
    // Errors and step counts are the exit statuses' and the lines' above: the rules only here.
    engine::Invariants rules = invariants_;
    rules.sameStepCount = false;
    for (std::string& what : engine::invariantViolations(rules, outcomes, totalSteps_))
      out.violations.push_back(std::move(what));
    // The consensus model (every member's final model averaged) as each survivor evaluated it.
    if (out.survivors > 0) out.accuracy = accuracySum / static_cast<double>(out.survivors);
    if (!lastStep) return;
    for (std::size_t i = 0; i < slots_.size(); ++i) {
      const Life& life = slots_[i].latest();
      if (life.killed || life.hung) continue;
      const double exited = Seconds(life.process->exitedAt().time_since_epoch()).count();
      const double after = exited - *lastStep;
      out.maxExitAfterLastStepSeconds = std::isnan(out.maxExitAfterLastStepSeconds)
                                            ? after
                                            : std::max(out.maxExitAfterLastStepSeconds, after);
      if (after > kMaxExitAfterLastStepSeconds)
        out.violations.push_back(
            fmt::format("peer {} exited {:.1f} s after the cluster's last step (more than {:.0f} "
                        "s); its log ends: {}",
                        i + 1, after, kMaxExitAfterLastStepSeconds, life.process->logTail(3)));
    }
  }

  const ChaosOptions& options_;
  engine::Invariants invariants_;  // the algorithm's (gossamer-peer runs its default options)
  std::filesystem::path binary_;
  std::uint64_t totalSteps_;
  std::filesystem::path scratch_;
  std::filesystem::path secret_;
  std::filesystem::path checkpoints_;
  std::vector<Slot> slots_;    // peer index -> its lives
  double startupSeconds_ = 0;  // the slowest first life's time from its start to listening
  std::vector<std::pair<double, std::uint64_t>> fastestProgress_;  // (t, furthest live step)
};

}  // namespace

ChaosRunResult runProcesses(const ChaosOptions& o, const std::filesystem::path& peerBinary,
                            std::uint64_t totalSteps, const std::filesystem::path& scratch,
                            const std::vector<ChaosFault>& schedule,
                            const engine::Invariants& invariants) {
  ProcessRun run(o, peerBinary, totalSteps, scratch, invariants);
  return run.run(schedule);
}

}  // namespace gossamer::bench
