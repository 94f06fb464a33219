// The chaos run with peers as threads of this process (runThreads in chaos_run.h): the in-process
// transport under the shaped decorator, whose partitions and loss the schedule sets at run time.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <exception>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "bench/chaos_run.h"
#include "engine/runtime/cluster.h"
#include "engine/sim/faults.h"
#include "net/shaped/shaped_transport.h"

namespace gossamer::bench {
namespace {

using engine::runtime::Peer;
using engine::runtime::PeerConfig;
using engine::runtime::PeerResult;
using Clock = std::chrono::steady_clock;
using Seconds = std::chrono::duration<double>;

// One peer of the run: its object, its thread, and how it ended.
struct Member {
  std::unique_ptr<Peer> peer;  // null once a restart at its address replaced it
  std::thread thread;
  PeerResult result;
  std::exception_ptr error;
  bool killed = false;
  bool finishingJoin = false;  // joined during the finish: "the cluster is done" is its answer
  std::atomic<bool> done{false};
};

// What the run does at a later time: end a timed fault, or start a kill-join's joiner.
struct TimedAction {
  double at = 0;  // seconds into the run
  std::function<void()> what;
  bool startsPeer = false;  // left out once the run is over
};
using TimedActions = std::vector<TimedAction>;

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

  ChaosRunResult run(const std::vector<ChaosFault>& schedule) {
    ChaosRunResult out;
    for (std::size_t i = 0; i < options_.peers; ++i) start(i, {.resume = false});
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
    TimedActions timed;
    std::vector<std::pair<double, std::uint64_t>> progress;  // (t, slowest live peer's step)
    std::vector<double> kills;
    for (;;) {
      const double now = Seconds(Clock::now() - start).count();
      progress.emplace_back(now, slowestStep());
      // A join during the finish waits for the first peer at the last step, whatever its time.
      while (next < schedule.size() &&
             (schedule[next].kind == ChaosKind::joinFinishing ? fastestStep() >= totalSteps_
                                                              : schedule[next].at <= now)) {
        bool killed = false;
        const std::string what = apply(schedule[next], now, timed, killed);
        if (killed) kills.push_back(now);
        executed_.push_back(fmt::format("t={:6.2f}s  {}", now, what));
        ++next;
      }
      for (auto it = timed.begin(); it != timed.end();) {
        if (it->at <= now) {
          it->what();
          it = timed.erase(it);
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
    for (; next < schedule.size(); ++next)
      executed_.push_back(fmt::format("          {}: not carried out (the run had ended)",
                                      label(schedule[next].kind)));
    for (const TimedAction& action : timed) {
      if (!action.startsPeer) {
        action.what();
      } else {
        executed_.push_back(
            fmt::format("t={:6.2f}s  {}: its join not carried out (the run had ended)", action.at,
                        label(ChaosKind::killJoin)));
      }
    }
    out.executed = std::move(executed_);
    out.wallSeconds = Seconds(Clock::now() - start).count();
    for (double at : kills) out.resumeSeconds.push_back(resumeAfter(progress, at));

    // The survivors' final models, before anyone leaves; then every thread ends. A peer that
    // found the cluster done has no model to give.
    std::vector<engine::runtime::Snapshot> finals;
    for (auto& m : members_) {
      if (m->killed || !m->peer || (m->done && m->result.clusterDone)) continue;
      if (auto s = m->peer->snapshot(std::chrono::seconds(30))) finals.push_back(std::move(*s));
    }
    for (auto& m : members_) {
      if (!m->killed && !m->done) m->peer->requestStop();
      if (m->thread.joinable()) m->thread.join();
    }
    checkInvariants(finals, out);
    engine::runtime::ConsensusEvaluator evaluator(registry_, configs_.base().training.model,
                                                  modelConfig(), data_->test);
    if (!finals.empty()) out.accuracy = evaluator.evaluate(finals, 0, true).accuracy;
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

  struct StartOptions {
    bool resume = false;
    // Listen where the killed peer it replaces listened (that peer's object is destroyed first,
    // freeing the address); else wherever the transport puts it.
    bool sameAddress = false;
    bool finishingJoin = false;
    std::optional<std::size_t> seed;  // the peer to join through; none: the first live one
  };

  // Starts peer `index`: a new one, or a killed one again.
  void start(std::size_t index, StartOptions how) {
    std::optional<net::Endpoint> seed;
    if (how.seed) {
      seed = members_[slots_[*how.seed]]->peer->endpoint();
    } else {
      for (const auto& m : members_) {
        if (!m->killed && !m->done) {
          seed = m->peer->endpoint();
          break;
        }
      }
    }
    PeerConfig c = configs_.make(index, seed);
    c.training.resume = how.resume;
    // Come too late, it would find no one; then it gives up instead of waiting forever.
    if (how.finishingJoin) c.training.joinTimeout = std::chrono::seconds(10);
    if (index < slots_.size()) {
      Member& old = *members_[slots_[index]];
      old.thread.join();  // the killed one's thread ended long ago
      if (how.sameAddress) {
        c.network.listen = old.peer->endpoint();
        old.peer.reset();
      }
    }
    auto member = std::make_unique<Member>();
    member->finishingJoin = how.finishingJoin;
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
    for (std::size_t i : live()) {
      const engine::runtime::PeerStatus s = members_[slots_[i]]->peer->status();
      if (s.training) slowest = std::min(slowest, s.step);
    }
    return slowest == UINT64_MAX ? 0 : slowest;
  }

  // The live peer furthest along (its index), and its step.
  std::pair<std::size_t, std::uint64_t> fastest() const {
    std::pair<std::size_t, std::uint64_t> best{0, 0};
    for (std::size_t i : live()) {
      const std::uint64_t step = members_[slots_[i]]->peer->status().step;
      if (step >= best.second) best = {i, step};
    }
    return best;
  }
  std::uint64_t fastestStep() const { return fastest().second; }

  bool anyTraining() const {
    return std::any_of(members_.begin(), members_.end(),
                       [](const auto& m) { return m->peer && m->peer->status().training; });
  }
  bool allLiveFinished() const {
    for (std::size_t i : live())
      if (!members_[slots_[i]]->peer->status().finished) return false;
    return true;
  }

  std::optional<std::size_t> firstKilled() const {
    for (std::size_t i = 0; i < slots_.size(); ++i)
      if (members_[slots_[i]]->killed) return i;
    return std::nullopt;
  }

  void kill(std::size_t index) {
    members_[slots_[index]]->killed = true;
    members_[slots_[index]]->peer->kill();
  }

  // Carries out `f` at `now` (seconds into the run); returns what happened (the line of the
  // executed schedule) and sets `killed` when a peer was killed.
  std::string apply(const ChaosFault& f, double now, TimedActions& timed, bool& killed) {
    const std::vector<std::size_t> alive = live();
    if (std::optional<std::string> skip = skipped(f, {.live = alive.size(),
                                                      .started = slots_.size(),
                                                      .pendingJoins = pendingJoins_,
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
        start(*index, {.resume = fromCheckpoint, .sameAddress = f.kind == ChaosKind::restartFresh});
        return fmt::format("{} of peer {}{}", label(f.kind), *index + 1,
                           f.kind == ChaosKind::restart && !fromCheckpoint
                               ? " (no checkpoint yet: without resume)"
                               : "");
      }
      case ChaosKind::join:
        start(slots_.size(), {});
        return fmt::format("{}: peer {}", label(f.kind), slots_.size());
      case ChaosKind::joinFinishing: {
        const auto [seed, step] = fastest();
        start(slots_.size(), {.finishingJoin = true, .seed = seed});
        return fmt::format("{}: peer {} through peer {} (at step {} of {})", label(f.kind),
                           slots_.size(), seed + 1, step, totalSteps_);
      }
      case ChaosKind::killJoin: {
        kill(target);
        killed = true;
        ++pendingJoins_;
        const double at = now + f.seconds;
        timed.push_back({.at = at,
                         .what =
                             [this, at] {
                               --pendingJoins_;
                               start(slots_.size(), {});
                               executed_.push_back(fmt::format("t={:6.2f}s  {}: peer {} joins", at,
                                                               label(ChaosKind::killJoin),
                                                               slots_.size()));
                             },
                         .startsPeer = true});
        return fmt::format("{}: peer {} killed, a new peer joins {:.2f} s later", label(f.kind),
                           target + 1, f.seconds);
      }
      case ChaosKind::partition: {
        std::vector<std::size_t> others;
        for (std::size_t i = 0; i < slots_.size(); ++i)
          if (i != target) others.push_back(i);
        const std::vector<std::size_t> one{target};
        partitions_->cut(one, others);
        timed.push_back({.at = now + f.seconds,
                         .what = [this, one, others] { partitions_->heal(one, others); }});
        return fmt::format("{} of peer {} from the others for {:.1f} s", label(f.kind), target + 1,
                           f.seconds);
      }
      case ChaosKind::loss: {
        for (std::size_t i = 0; i < slots_.size(); ++i) {
          if (i == target) continue;
          partitions_->setLoss(target, i, f.magnitude);
          partitions_->setLoss(i, target, f.magnitude);
        }
        const std::size_t n = slots_.size();
        timed.push_back({.at = now + f.seconds, .what = [this, target, n] {
                           for (std::size_t i = 0; i < n; ++i) {
                             partitions_->setLoss(target, i, 0);
                             partitions_->setLoss(i, target, 0);
                           }
                         }});
        return fmt::format("{} of {:.0f}% on peer {}'s links for {:.1f} s", label(f.kind),
                           100 * f.magnitude, target + 1, f.seconds);
      }
      case ChaosKind::straggler: {
        Peer* peer = members_[slots_[target]]->peer.get();
        const auto slow = std::chrono::microseconds(
            static_cast<std::int64_t>(options_.stepMs * 1000 * f.magnitude));
        peer->setMinStepTime(slow);
        const std::size_t slot = slots_[target];
        timed.push_back({.at = now + f.seconds, .what = [this, slot] {
                           if (!members_[slot]->killed) members_[slot]->peer->setMinStepTime({});
                         }});
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

  void checkInvariants(const std::vector<engine::runtime::Snapshot>& finals, ChaosRunResult& out) {
    std::vector<engine::sim::Survivor> survivors;
    for (std::size_t i = 0; i < slots_.size(); ++i) {
      const Member& m = *members_[slots_[i]];
      if (m.killed) continue;
      // Coming when the cluster has trained all its steps, the answer is "done"; come after every
      // member had left (or while its seed was leaving), it joins no one: both correct.
      if (m.finishingJoin && !m.error && (m.result.clusterDone || m.result.joinFailure)) continue;
      engine::sim::Survivor s{.name = fmt::format("peer {}", i + 1),
                              .steps = m.result.steps,
                              .metrics = &m.result.metrics};
      if (m.error) {
        try {
          std::rethrow_exception(m.error);
        } catch (const std::exception& e) {
          s.error = e.what();
        }
      } else if (m.result.joinFailure) {
        s.error = "joined no one: " + m.result.joinFailure->describe();
      } else if (m.result.clusterDone) {
        s.error = "found the cluster done, though it came before the finish";
      }
      survivors.push_back(std::move(s));
    }
    const engine::Invariants invariants = registry_.algorithms.get(options_.algorithm)
                                              .make(configs_.base().training.algorithmOptions)
                                              ->invariants();
    for (std::string& what :
         engine::sim::survivorViolations(survivors, finals, totalSteps_, invariants))
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
  std::size_t pendingJoins_ = 0;                  // kill-joins whose join is still to come
  std::vector<std::string> executed_;             // the schedule as it ran, with its targets
};

}  // namespace

ChaosRunResult runThreads(const ChaosOptions& o, const engine::Registry& registry,
                          std::shared_ptr<const engine::DatasetPair> data, std::uint64_t totalSteps,
                          const std::filesystem::path& checkpoints, double loss,
                          const std::vector<ChaosFault>& schedule) {
  ChaosRun run(o, registry, std::move(data), totalSteps, checkpoints, loss);
  return run.run(schedule);
}

}  // namespace gossamer::bench
