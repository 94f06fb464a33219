// streaming-diloco's time-boxed rounds (round-seconds; algorithms/README.md, "Time-boxed rounds"):
// each fragment's round carries [n_i w_i[f], tail_i] (time_box.h), n_i the steps this peer took
// since the fragment's last complete round, so that its outer step takes the weighted mean
//   w~[f] = sum_i n_i w_i[f] / sum_i n_i
// and every member's theta[f] moves alike. The rounds start by time (FragmentClock: fragment f
// f/F of a round after fragment 0, T apart), overlap training, and merge at the first step
// boundary, tau steps or more after their start, where they are complete; a fragment whose next
// round is due first waits for its last one (at most the comm timeout). The members match rounds
// by number: round k of fragment f is k F + f + 1 on every member.
//
// Fragment 0's rounds count the cluster's steps and end the run at the round that spends the
// budget (every step counts once in them). After that round k_end, the rounds that follow it in
// start order are the last ones: fragment f's round k_end (f >= 1; a member may have started
// some of them already, the others start them in finish()) and fragment 0's round k_end + 1.
// Every member runs exactly these and merges them with alpha = 0 (w_i = theta). Where every round
// completed, every member holds the same theta; else the run ends on the consensus of the thetas
// (diloco.h's endOnConsensus), as rounds by steps do.
#include <algorithm>
#include <chrono>
#include <vector>

#include "algorithms/ring_allreduce.h"
#include "algorithms/streaming_diloco.h"
#include "algorithms/time_box.h"

namespace gossamer::algorithms {

StreamingDiloco::Timed::Timed(RoundTime time, std::uint64_t h, std::size_t fragments)
    : rounds("streaming-diloco", time, h, fragments), clock(fragments), next(fragments, 0) {}

std::unique_ptr<StreamingDiloco::Timed> StreamingDiloco::makeTimed(
    const StreamingDilocoOptions& options) {
  const RoundTime time = RoundTime::parse("streaming-diloco", options.roundSeconds);
  if (!time.enabled()) return nullptr;
  return std::make_unique<Timed>(time, options.h,
                                 options.fragments.valueOr(std::min<std::uint64_t>(4, options.h)));
}

StreamingDiloco::~StreamingDiloco() = default;

void StreamingDiloco::setupTimed(engine::PeerContext& ctx) {
  timed_->rounds.start(ctx);
  // setup() runs again at every view change: the clock keeps its anchor (this peer's rounds
  // started so far count from it).
  if (timed_->clockStarted) return;
  timed_->clock.begin(ctx.now());
  timed_->lastStep = ctx.now();
  timed_->clockStarted = true;
}

void StreamingDiloco::joinedTimed() {
  if (timed_) timed_->rounds.joined();
}

void StreamingDiloco::saveTimed(engine::AlgorithmState& state) const {
  if (timed_) timed_->rounds.save(state);
}

void StreamingDiloco::loadTimed(const engine::AlgorithmState& state) {
  if (timed_) timed_->rounds.load(state);
}

std::optional<double> StreamingDiloco::runProgress() const {
  return timed_ ? timed_->rounds.progress() : std::nullopt;
}

engine::Invariants StreamingDiloco::invariants() const {
  return timed_ ? timed_->rounds.invariants() : engine::Invariants{};
}

void StreamingDiloco::timedAfterStep(engine::PeerContext& ctx, std::uint64_t done) {
  Timed& t = *timed_;
  t.rounds.count(ctx);
  const engine::Clock::time_point now = ctx.now();
  const double stepSeconds = std::chrono::duration<double>(now - t.lastStep).count();
  t.lastStep = now;
  // The rounds that are done and tau steps old merge now, in start order, without waiting.
  while (!inFlight_.empty() && !t.rounds.endedByBudget()) {
    const auto [round, fragment] = *inFlight_.begin();
    if (done < lastStart_[fragment] + tau_ || allReduce_.status(round) == RoundStatus::kPending)
      break;
    mergeOldest(ctx, kAny, options_.alpha);
  }
  // The fragments due, in the order their rounds start on every member (a slow peer may find
  // fragment 0's next round due with the last fragment's).
  std::vector<std::size_t> due;
  for (std::size_t f = 0; f < fragments_; ++f)
    if (t.clock.due(f, now, stepSeconds, t.rounds.roundSeconds(f))) due.push_back(f);
  std::sort(due.begin(), due.end(), [&](std::size_t a, std::size_t b) {
    return timedRound(t.next[a], a) < timedRound(t.next[b], b);
  });
  for (const std::size_t f : due) {
    if (t.rounds.endedByBudget()) break;
    // One round of a fragment in flight: its last one merges first (this may wait).
    if (mergeOldest(ctx, f, options_.alpha) && t.rounds.endedByBudget()) break;
    // A joiner, or a peer that fell behind, meets the members' latest round of the fragment.
    if (const std::uint64_t heard = allReduce_.latestHeard(); heard > 0) {
      // The rounds of fragment f started up to round number `heard` (k F + f + 1 for round k).
      const std::uint64_t started =
          (heard - 1) / fragments_ + ((heard - 1) % fragments_ >= f ? 1 : 0);
      if (started > 0 && started - 1 > t.next[f]) {
        count(ctx, "rounds_skipped", static_cast<double>(started - 1 - t.next[f]));
        t.next[f] = started - 1;
      }
    }
    startTimed(ctx, done, f);
    t.clock.started(f);
  }
  outer_.setBusy(!inFlight_.empty());
}

void StreamingDiloco::startTimed(engine::PeerContext& ctx, std::uint64_t done,
                                 std::size_t fragment) {
  Timed& t = *timed_;
  std::uint64_t round = timedRound(t.next[fragment], fragment);
  while (started_ && round <= lastRound_) {  // round numbers grow on every member
    ++t.next[fragment];
    round = timedRound(t.next[fragment], fragment);
  }
  const Slice slice = ringSlice(ctx.params().size(), fragments_, fragment);
  t.rounds.send(ctx, allReduce_, round,
                std::span<const float>(ctx.params()).subspan(slice.offset, slice.count), fragment);
  inFlight_[round] = fragment;
  lastStart_[fragment] = done;
  lastRound_ = round;
  started_ = true;
  ++t.next[fragment];
  outer_.setBusy(true);
}

bool StreamingDiloco::mergeOldest(engine::PeerContext& ctx, std::size_t fragment, double alpha) {
  for (auto it = inFlight_.begin(); it != inFlight_.end(); ++it) {
    if (fragment != kAny && it->second != fragment) continue;
    const auto [round, f] = *it;
    inFlight_.erase(it);
    mergeTimed(ctx, round, f, alpha);
    return true;
  }
  return false;
}

bool StreamingDiloco::mergeTimed(engine::PeerContext& ctx, std::uint64_t round,
                                 std::size_t fragment, double alpha) {
  const Slice slice = ringSlice(ctx.params().size(), fragments_, fragment);
  const std::span<float> mean = scratch_.span().first(slice.count);
  if (!timed_->rounds.collect(ctx, allReduce_, round, mean, fragment)) {
    ++timed_->failures;
    return false;
  }
  apply(ctx, fragment, mean, mean, alpha);
  // theta as a whole: each fragment as its last complete round left it, alike on every member.
  ctx.roundMerged(round, outer_.theta());
  ctx.metrics().set("streaming-diloco.outer_rounds", static_cast<double>(outer_.rounds()));
  return true;
}

void StreamingDiloco::finishTimed(engine::PeerContext& ctx) {
  Timed& t = *timed_;
  while (mergeOldest(ctx, kAny, options_.alpha)) {
  }
  if (ctx.step() != ctx.totalSteps()) return;  // stopped early: the peers are where they are
  const std::uint64_t end = t.next[0];         // fragment 0's next round: the ending one + 1
  if (t.rounds.endedByBudget()) {
    // The rounds after the ending one in start order; every member runs the same.
    for (std::size_t f = 1; f < fragments_; ++f) {
      if (t.next[f] >= end) continue;  // started (and merged above)
      t.next[f] = end - 1;
      startTimed(ctx, ctx.step(), f);
    }
    startTimed(ctx, ctx.step(), 0);
    while (mergeOldest(ctx, kAny, 0.0)) {
    }
    // A member that had started some of them before the end merged those with alpha: every
    // member ends on theta.
    ctx.compute().copy(ctx.params(), outer_.theta());
  }
  outer_.setBusy(false);
  // Every round complete here, the last ones included: every member took the same outer steps
  // and holds the same theta, which the last rounds gave w_i. The consensus (a ring over the
  // members: 2 (n-1) latencies, 50 s for 256 peers on geo) is for a run where rounds failed.
  if (t.rounds.endedByBudget() && t.failures == 0) return;
  // At this peer's cap instead (rounds kept failing), the members may stand at different rounds:
  // the consensus then fails, and each keeps its own model.
  if (scratch_.size() != ctx.params().size())
    scratch_ = ctx.compute().allocate<float>(ctx.params().size());
  endOnConsensus(ctx, outer_, scratch_, kConsensus, timedRound(end + 1, 0), options_.pieces,
                 name());
}

}  // namespace gossamer::algorithms
