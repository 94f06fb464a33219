// Time-boxed rounds with token-weighted merging, and the run's end at a budget the cluster
// shares, for the round-based algorithms (algorithms/README.md, "Time-boxed rounds").
//
// A round is bounded by time instead of steps. Every peer starts round r when round r-1 merged
// (the merge is an all-reduce: every member leaves it within a latency of the others) and takes
// inner steps while the next one still fits before the round's length has passed (at least one):
// a fast peer takes many, a slow one few, and all reach the merge at about the same time. Each
// contribution is weighted by the samples it processed (steps x the run's batch, one batch size
// per run, so steps stand for samples):
//   x~ = sum_i n_i x_i / sum_i n_i
// travelling as one all-reduce of [n_i x_i, tail_i] (the tail: kTailFloats scalars). Every member
// of a complete round holds the same reduced bits (async_allreduce.h), so every member computes the
// same x~, the same round length and the same end of the run: nothing else is agreed on.
//
// The tail, per member i (the all-reduce gives every member their means):
//   n_i   the steps it took this round                 -> x~'s weights; the cluster's steps P n~
//   s_i   its seconds per step in this round            -> `auto`: the next round lasts k x mean s
//   k_i   1 when it knows the run's budget and spend, 0 for a joiner before its first round
//   k_i B_i, k_i C_i   the budget (cluster steps: the run's steps x the members at its start)
//                      and the cluster steps spent before this round, as this member knows them
//   b_i   the budget this member would set itself (its steps x the members it saw at its start)
// after which every member takes B = mean(k B) / mean(k) and C = mean(k C) / mean(k) + P mean(n)
// (when no member knows them, a round of joiners only: B = mean(b), C = P mean(n)): the same value
// everywhere (a joiner adopts it), and the run ends at the round where C >= B. A failed round
// changes none of it; its steps count in the next complete round's n_i.
//
// After the tail, one slot per member of the view: member i writes its n_i at slot i, so every
// member learns each member's steps (the quorum's leader, round_quorum.h).
//
// With a minimum quorum (`quorum`, round_quorum.h) the all-reduce runs over the contributors the
// round's leader names, means over them; the others listen to the result and keep their unmerged
// steps for a later round (TimedRounds::rebased).
//
//   e_i   its estimate of the round's exchange, from its own measured paths
//         (network_survey.h: ownExchangeSeconds; 0 when it measured none)
//
// Round length: `round-seconds` fixed, or `auto`: the first round is one step on every peer (it
// measures the speeds: a round of k steps would keep the fast peers waiting k slow steps, past
// the comm timeout), every later one k x the members' mean seconds per step in the round before
// (k: the algorithm's h or tau; so a cluster of equal peers keeps k steps per round). When k is
// itself auto (stepsPerRound 0), the round lasts blockingRoundSeconds(mean e) (network_fit.h: the
// exchange then takes kBlockingShare of the round), the rule a step-based round's auto h follows;
// at least one mean step, and 8 mean steps while nobody measured a path.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "algorithms/async_allreduce.h"
#include "algorithms/round_quorum.h"
#include "engine/algorithm.h"
#include "engine/invariants.h"
#include "kernels/compute.h"

namespace gossamer::algorithms {

// `round-seconds`: "off" (rounds by steps), "auto", or seconds > 0.
struct RoundTime {
  double seconds = 0;
  bool automatic = false;
  bool enabled() const { return automatic || seconds > 0; }
  // Throws gossamer::Error naming `<algorithm>.round-seconds` for anything else.
  static RoundTime parse(const std::string& algorithm, const std::string& text);
};

// What every member of a complete round learned from it (the means of the tail).
struct RoundAgreement {
  double steps = 0;           // the cluster's steps in the round: P mean(n)
  double secondsPerStep = 0;  // mean(s)
  double budget = 0;          // B, in cluster steps
  double spent = 0;           // C after this round
  bool ended() const { return spent >= budget; }
  // With a quorum (round_quorum.h): the members that contributed, and whether this peer did (a
  // member left out listened: its steps since it last contributed are not in the merge).
  std::size_t contributors = 0;
  bool contributed = true;
  // Per member of the view, in order: the steps it contributed (0: left out).
  std::vector<double> memberSteps;
};

class TimeBox {
 public:
  using Clock = engine::Clock;
  static constexpr std::size_t kTailFloats = 7;
  // k while auto's exchange is unknown (stepsPerRound 0).
  static constexpr std::uint64_t kProvisionalSteps = 8;

  // `stepsPerRound`: auto's multiple k (0: auto too, from the exchange).
  TimeBox(RoundTime time, std::uint64_t stepsPerRound);

  // The run (or this peer's part of it) starts: the first round starts now. `budget`: the run's
  // cluster steps as this peer knows them (a joiner: as it would set them itself); `spent`: the
  // cluster steps spent before, when known (a fresh start: 0; a checkpoint's), nullopt for a
  // joiner.
  void begin(Clock::time_point now, double budget, std::optional<double> spent);
  // After each local step (counted here): true when the next step would not fit in this round.
  bool due(Clock::time_point now);
  // After each local step, for a caller that decides itself when a round starts: counts it.
  void count(Clock::time_point now);
  // Whether the round will be due after one more step as long as the mean of this round's (not
  // counting it): a member tells the quorum's leader it is ready one step early.
  bool dueAfterNext(Clock::time_point now) const;
  // When a round's leader may close it without the members not ready yet: the round's length
  // and `grace` x that length after its start (auto's first round, one step each: at its start,
  // so the round closes as soon as a quorum is ready).
  Clock::time_point closeAt(double grace) const;
  // Whether this round's length has passed (never in auto's first round).
  bool overdue(Clock::time_point now) const {
    return roundSeconds_ > 0 &&
           now >= roundStart_ + std::chrono::duration_cast<Clock::duration>(
                                    std::chrono::duration<double>(roundSeconds_));
  }
  // When this peer's last step started (the end of the one before it).
  Clock::time_point lastStepStart() const { return previousStep_; }
  // The round in progress started at `start` (a member left out of a round learns of it only
  // after its step: it starts the next round when the others did, not later).
  void startedAt(Clock::time_point start) { roundStart_ = std::min(roundStart_, start); }
  // The round's length in seconds (0 while `auto` has measured nothing: the round is one step).
  double roundSeconds() const { return roundSeconds_; }
  // Steps this peer took since the last complete round (its weight n_i).
  std::uint64_t steps() const { return steps_; }

  // Writes [n_i x_i, tail_i] into `out` (x.size() + kTailFloats floats, the Compute's memory),
  // n_i = steps(); the round is in flight until merged() or failed(). Steps counted meanwhile
  // (a round that overlaps training) count in the next round.
  // s_i: the mean time of the steps since the last pack, each from the step (or the round's
  // start) before it.
  // `exchangeSeconds`: e_i.
  void pack(kernels::Compute& compute, std::span<const float> x, std::span<float> out,
            double exchangeSeconds = 0);
  // Whether the round length follows the exchange (k auto): pack() then wants e_i.
  bool fitsExchange() const { return time_.automatic && stepsPerRound_ == 0; }
  // From a complete round's mean of the packs of `members` members: `merged` = x~ (x.size()
  // floats), and what the round agreed; the next round starts now.
  RoundAgreement merged(kernels::Compute& compute, std::span<const float> mean, std::size_t members,
                        std::span<float> merged, Clock::time_point now);
  // A failed round: the next one starts now, its steps adding to the next one's.
  void failed(Clock::time_point now);

  // The cluster steps spent after the last complete round, when known (checkpoints).
  std::optional<double> spent() const { return spent_; }
  double budget() const { return budget_; }

 private:
  void restart(Clock::time_point now);

  RoundTime time_;
  std::uint64_t stepsPerRound_;
  double roundSeconds_ = 0;
  Clock::time_point roundStart_{};  // this round's
  std::uint64_t roundSteps_ = 0;    // steps in this round (the deadline's estimate)
  // What pack() reports as s_i: the steps since the last pack, each timed from the step (or the
  // round's start) before it, so that a round's wait is no step's time.
  Clock::time_point lastStep_{};
  Clock::time_point previousStep_{};
  double stepSeconds_ = 0;
  std::uint64_t timedSteps_ = 0;
  std::uint64_t steps_ = 0;   // steps since the last complete round
  std::uint64_t packed_ = 0;  // of which the round in flight carries
  double budget_ = 0;
  std::optional<double> spent_;
};

// When each fragment's time-boxed round starts on this peer's clock (streaming-diloco): this peer's
// round c (from 0) of fragment f at anchor + (c + f / F) T, T the round length (0 while `auto`
// has measured nothing: every fragment is due at once). A fragment is due after a step when the
// next step, as long as the last one, would end past that time. The members match rounds by
// their number, not their time: the clock only paces this peer.
class FragmentClock {
 public:
  using Clock = engine::Clock;
  explicit FragmentClock(std::size_t fragments) : starts_(std::max<std::size_t>(fragments, 1)) {}

  void begin(Clock::time_point now) { anchor_ = now; }
  bool due(std::size_t fragment, Clock::time_point now, double stepSeconds,
           double roundSeconds) const;
  void started(std::size_t fragment) { ++starts_.at(fragment); }

 private:
  Clock::time_point anchor_{};
  std::vector<std::uint64_t> starts_;  // per fragment: rounds this peer started
};

// The time-boxed rounds of one algorithm (`who`: its name, for messages and metrics): the TimeBox
// and what lives around it for the run: the budget and the cap at the start, the weighted
// exchange of a round, the end of the run, the checkpoint values and the invariants. Compute
// thread.
//
// An algorithm that synchronises its model in `fragments` parts, each in rounds of its own that
// overlap training (streaming-diloco), has one TimeBox per fragment: each weights its fragment's
// contributions by the steps since that fragment's last complete round. Fragment 0's rounds
// count the cluster's steps and end the run (each step is counted once in fragment 0's rounds,
// as in any fragment's).
class TimedRounds {
 public:
  // `quorum`: the minimum quorum of the rounds (round_quorum.h; one fragment only).
  TimedRounds(std::string who, RoundTime time, std::uint64_t stepsPerRound,
              std::size_t fragments = 1, QuorumSize quorum = {});

  // At the first setup() (later calls do nothing): the budget B = the run's steps x the members
  // (or the checkpoint's), the cap of this peer's steps at B, the first round starts. Throws
  // gossamer::Error with --compress (the tail must arrive exact).
  void start(engine::PeerContext& ctx);
  // After each local step: true when round `round` (this peer's next) is due, or, with a quorum,
  // when it closed without this peer (which then listens to it). With a quorum, tells the leader
  // one step early that this peer is ready.
  bool due(engine::PeerContext& ctx, std::uint64_t round);
  // After each local step, for a caller that starts the rounds itself (send/collect).
  void count(engine::PeerContext& ctx);
  // With a quorum, after a round: whether this peer should go on to round `round` before its next
  // step: it is decided already (this peer was left out of it), or this peer's time for it is up
  // already (it learned late of the last one).
  bool behind(engine::PeerContext& ctx, std::uint64_t round);
  // One round: the all-reduce of [n_i x_i, tail_i] over `exchange`, numbered `round` (this
  // peer's next; raised to the latest round heard from the members, so that a joiner or a peer
  // that fell behind meets them), x~ into `merged` (x.size() floats). The agreement, with the
  // metrics and the end of the run set; nullopt when the round failed (counted). With a quorum,
  // the leader decides the contributors first; a member left out takes x~ without contributing
  // (agreement.contributed false) and must keep its unmerged steps: rebased(agreement).
  std::optional<RoundAgreement> exchange(engine::PeerContext& ctx, AsyncAllReduce& exchange,
                                         std::uint64_t& round, std::span<const float> x,
                                         std::span<float> merged);
  // The same in two parts, for a round that overlaps training: send() starts `round` of
  // `fragment` (x: the fragment's floats) over `exchange`; collect() waits for it until the comm
  // timeout and merges it into `merged`. The agreement, with fragment 0's metrics and end of the
  // run set; nullopt when the round failed (counted).
  void send(engine::PeerContext& ctx, AsyncAllReduce& exchange, std::uint64_t round,
            std::span<const float> x, std::size_t fragment);
  std::optional<RoundAgreement> collect(engine::PeerContext& ctx, AsyncAllReduce& exchange,
                                        std::uint64_t round, std::span<float> merged,
                                        std::size_t fragment);
  // Whether a member left out of the round must rebase its model on x~ (keep its unmerged
  // change) rather than adopt x~: not when the round ended the run (everyone ends on x~).
  static bool rebased(const RoundAgreement& agreed) {
    return !agreed.contributed && !agreed.ended();
  }
  bool quorum() const { return quorum_.enabled(); }
  // This peer joined a cluster in training, or resumed into one that went on without it: it
  // learns the spend from its first round.
  void joined() { joined_ = true; }
  // The run ended at a round that spent the budget (so on every member at once).
  bool endedByBudget() const { return endedByBudget_; }
  // C / B after the last complete round (nullopt before this peer knows them: a joiner).
  std::optional<double> progress() const;
  // The round length (`auto`: as fragment `fragment`'s last complete round measured it).
  double roundSeconds(std::size_t fragment = 0) const { return boxes_[fragment].roundSeconds(); }

  void save(engine::AlgorithmState& state) const;
  void load(const engine::AlgorithmState& state);
  // The survivors agree on the cluster steps spent; their step counts differ.
  engine::Invariants invariants() const;

  // How long past a round's length the quorum's leader waits for members not ready yet, as a
  // fraction of the length.
  static constexpr double kGrace = 0.1;

 private:
  // The members' per-member slots after the tail: member i writes its steps at slot i.
  static std::size_t packedSize(std::size_t floats, std::size_t members) {
    return floats + TimeBox::kTailFloats + members;
  }
  // The quorum's part of exchange(): the contributors decided, then this peer's contribution or
  // its listening; the agreement as collect() gives it.
  // collect() of a round of `contributors` contributions (fewer than the members with a quorum).
  std::optional<RoundAgreement> finishRound(engine::PeerContext& ctx, AsyncAllReduce& exchange,
                                            std::uint64_t round, std::span<float> merged,
                                            std::size_t fragment, std::size_t contributors);
  std::optional<RoundAgreement> exchangeWithQuorum(engine::PeerContext& ctx,
                                                   AsyncAllReduce& exchange, std::uint64_t round,
                                                   std::span<const float> x,
                                                   std::span<float> merged);

  std::string who_;
  RoundQuorum quorum_;
  std::vector<TimeBox> boxes_;  // one per fragment
  bool started_ = false;
  bool joined_ = false;
  bool endedByBudget_ = false;
  std::optional<double> resumedBudget_, resumedSpent_;  // a checkpoint's
  double lastRoundSteps_ = 0;  // the cluster's steps in the last complete round (fragment 0's)
};

}  // namespace gossamer::algorithms
