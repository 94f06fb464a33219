// streaming-diloco: DiLoCo with the model synchronised one fragment at a time and each fragment's
// all-reduce overlapped with inner steps (Douillard et al., "Streaming DiLoCo with overlapping
// communication: Towards a Distributed Free Lunch", 2025). The rule is algorithms/README.md's
// "streaming-diloco"; the outer step is diloco's (diloco.h).
//
//   communication    non-blocking all-reduce of one fragment's models (async_allreduce.h) every
//                    H/F inner steps, collected tau steps after it started
//   messages / step  2 (n-1) x pieces x F / H per peer
//   bytes on wire    2 (n-1)/n x |w| x 4 per H steps and peer (diloco's), in F parts of |w|/F
//   spread
//                    over the round, so the peak bandwidth is 1/F of diloco's; compressed, the
//                    codec's share of that
//   staleness        a fragment's outer step uses the models of tau steps ago; the step path never
//                    waits for a round trip while the network keeps up (it waits only for a round
//                    not complete when its merge is due, at most --comm-timeout)
//
// Fragments: the flat parameter buffer cut into F contiguous near-equal slices (ringSlice). The
// paper's fragments are groups of layers; contiguous slices of the flat buffer are that, since a
// model's parameters lie layer after layer in it (a fragment may start or end inside a layer).
// Fragment f has offset o_f = f H / F (integer division; F <= H, so the offsets differ).
//
// After inner step s (s = 1, 2, ...), on every peer:
//   for the fragment f with s mod H == o_f (at most one):            start
//     start the all-reduce of w_i[f] (copied: training goes on at once)
//   for the fragment f started at step s - tau:                       merge (tau = 0: at once)
//     w~[f]     = the all-reduce's mean (wait for it: normally complete already)
//     Delta     = theta[f] - w~[f]                                    // diloco's outer step
//     m[f]      = mu m[f] + Delta
//     theta[f] -= lr (Delta + mu m[f])                                 // or lr m[f]
//     w_i[f]    = alpha w_i[f] + (1 - alpha) theta[f]                 // alpha = 0: theta
// poll() once per step advances the rounds in flight without waiting.
//
// With F = 1, tau = 0 and alpha = 0 this is diloco (up to the all-reduce's order of additions).
//
// Time-boxed (round-seconds, for peers of uneven speed): the fragments' rounds start by time
// instead of by step, each contribution weighted by the steps since the fragment's last complete
// round, and the run ends at the cluster's budget of steps (streaming_diloco_timed.cc,
// algorithms/README.md).
//
// Compressed (--compress): a round sends the fragment's outer gradient Delta_i[f] = theta[f] -
// w_i[f] instead of w_i[f], as diloco does, through the same all-reduce with error feedback in both
// directions (async_allreduce.h, "Compression": every member decodes the same bits), each fragment
// a stream of residuals of its own; the merge takes w~[f] = theta[f] - mean(Delta[f]) and goes on
// as above. Delta_i[f] is taken at the start and merged tau steps later against the same theta[f]:
// a fragment has at most one round in flight (tau < H/F; start() enforces it), and only that
// round's merge changes theta[f] (the other fragments' merges change other slices). As diloco's,
// this assumes the members share theta (the same initial model, and every complete round since);
// uncompressed, the models travel, and their mean re-synchronises a theta that drifted. finish()'s
// last rounds are compressed like the others (they carry the residuals' last contributions); the
// consensus of the thetas after them stays float32, so that the run ends on one exact model.
//
// A failed fragment round (a peer died, left or joined, views differ, a refused payload, or the
// merge's deadline): that fragment's theta and m stay on every peer and w_i[f] goes on unmerged
// ("streaming-diloco.fallbacks"); its next round covers both. finish(): the rounds in flight are
// merged, then one last blocking round over every fragment with progress since its last start,
// after which every peer takes theta (alpha is not applied), and then the mean of the members'
// thetas (diloco.h's endOnConsensus: one all-reduce of |w| per run), so that the run ends on one
// model even when a round completed on some peers and failed on others (an asynchronous round
// fails where a member notices a view change first). A run stopped early does not.
//
// Joiner, checkpoint: as diloco (theta and m of every fragment, from a live member or the
// checkpoint). A member answers a joiner only between a merge and the next start (busy otherwise:
// the joiner asks again), so the theta it hands over misses no round it has started; tau < H/F
// leaves such a moment at every step boundary but tau of every H/F. A joiner merges only the
// rounds it started itself.
//
// Memory, on top of the model: theta and m (none when mu = 0), |w| x 4 bytes each (80 MB each for
// 20M parameters); one scratch of the largest fragment (|w|/F x 4); and the all-reduce's two
// buffers of the one fragment round in flight (2 |w|/F x 4): tau < H/F, so a round merges before
// the next one starts. At the end only, finish() holds the last rounds of all fragments at once (2
// |w| x 4) and then a scratch of |w| x 4 for the consensus. Compressed with error feedback, the
// all-reduce keeps two residuals per fragment (2 |w| x 4 in all). On CUDA, host mirrors of theta
// and m for serve() (2 |w| x 4 bytes of host memory).
#pragma once

#include <atomic>
#include <cstdint>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "algorithms/async_allreduce.h"
#include "algorithms/diloco.h"
#include "algorithms/network_survey.h"
#include "algorithms/time_box.h"
#include "engine/algorithm.h"
#include "engine/options.h"
#include "kernels/compute.h"

namespace gossamer::algorithms {

struct StreamingDilocoOptions {
  // Inner steps between two rounds of one fragment. 50, as diloco's h (see DilocoOptions). With the
  // defaults on Fashion-MNIST (MLP, 4 local peers, 3 epochs, seed 1): 85.6% with comm_wait_fraction
  // 0.03 (diloco: 86.3% at 0.13; one seed, differences within about half a point of noise).
  std::uint64_t h = 50;
  // Fragments F and the inner steps tau a fragment's all-reduce overlaps (the paper's ablations use
  // a few fragments and find 1-5 overlapping steps free of loss). auto (the defaults): chosen from
  // the view's first complete survey (network_fit.h, chooseStreaming: the smallest tau that covers
  // a fragment's exchange, fewer fragments first), applied at the first step with no round in
  // flight; F = 1, tau = 1 until then. Time-boxed rounds take F = min(4, h) and tau = 2 (within
  // h / F) for auto: their rounds are numbered by F from the start.
  engine::Auto<std::uint64_t> fragments = engine::Auto<std::uint64_t>::automatic();
  engine::Auto<std::uint64_t> tau = engine::Auto<std::uint64_t>::automatic();
  double alpha = 0.5;  // the paper's mixing factor
  OuterOptions outer;
  std::size_t pieces = 4;
  // Rounds bounded by time instead of h steps (algorithms/time_box.h): off, auto or seconds.
  std::string roundSeconds = "off";

  template <typename Bind>
  void bind(Bind& b) {
    b("h", h, "inner steps between two synchronisations of one fragment (the paper: 100)");
    b("fragments", fragments,
      "contiguous slices of the model synchronised in turn, H/F steps apart (1 to h); auto: "
      "the fewest (up to 8) that give the smallest tau covering a fragment's measured exchange");
    b("tau", tau,
      "inner steps a fragment's all-reduce overlaps before its outer step is merged (below h / "
      "fragments); auto: the fewest that cover a fragment's measured exchange");
    b("alpha", alpha,
      "mixing factor in [0, 1]: w = alpha w_local + (1 - alpha) theta (the paper: 0.5; 0 replaces "
      "the fragment by theta)");
    b("outer-lr", outer.lr, "outer learning rate, in (0, 2] (the paper: 0.7)");
    b("outer-momentum", outer.momentum, "outer momentum, in [0, 1) (the paper: 0.9)");
    b("nesterov", outer.nesterov, "Nesterov outer momentum (the paper's); false: heavy ball");
    b("pieces", pieces, "messages each all-reduce chunk is cut into (1-16)");
    b("round-seconds", roundSeconds,
      "time-boxed rounds: off (every h steps), auto (h x the members' mean step time) or seconds; "
      "fragment f's round starts f/F of a round after fragment 0's, contributions weighted by "
      "steps");
  }
  void validate() const;
};

class StreamingDiloco final : public engine::Algorithm {
 public:
  explicit StreamingDiloco(StreamingDilocoOptions options);
  ~StreamingDiloco() override;
  std::string name() const override { return "streaming-diloco"; }
  // Rounds matched by step; time-boxed rounds by their number instead.
  bool lockstep() const override { return timed_ == nullptr; }
  void setup(engine::PeerContext& ctx) override;
  void afterStep(engine::PeerContext& ctx) override;
  void finish(engine::PeerContext& ctx) override;
  void serve(engine::ServiceContext& ctx, const engine::Incoming& request) override;
  void join(engine::PeerContext& ctx) override;
  std::optional<engine::SharedState> sharedState() const override {
    return sharedOuterState(outer_, step_);
  }
  void resumedLate(engine::PeerContext& ctx) override;
  void saveState(engine::AlgorithmState& state) const override;
  void loadState(const engine::AlgorithmState& state) override;
  engine::Invariants invariants() const override;
  std::optional<double> runProgress() const override;

  // Message kinds: the all-reduce; a joiner's request and its reply (as diloco's).
  static constexpr std::uint32_t kAverage = 1;
  static constexpr std::uint32_t kStateRequest = 2;
  static constexpr std::uint32_t kState = 3;
  static constexpr std::uint32_t kConsensus = 4;  // the all-reduce of theta at the end

 private:
  // The all-reduce round of fragment f started after step s: s S + f, increasing in start order
  // (S = max(F, kMaxFragments): the same whatever auto chooses).
  std::uint64_t stride() const {
    return std::max<std::uint64_t>(options_.fragments.valueOr(1), kMaxFragments);
  }
  std::uint64_t roundOf(std::uint64_t step, std::size_t fragment) const {
    return step * stride() + fragment;
  }
  // Auto: the survey after step count `done`, and a choice (or, after a view change, the
  // provisional values) taken at the first step with no round in flight.
  void fit(engine::PeerContext& ctx, std::uint64_t done);
  void applyChoice(engine::PeerContext& ctx);
  // Starts the round of `fragment` after `step` (at most one round of a fragment in flight).
  void start(engine::PeerContext& ctx, std::uint64_t step, std::size_t fragment);
  // Merges, in start order, the rounds in flight started at step `last` or before (kAll: all).
  void mergeUpTo(engine::PeerContext& ctx, std::uint64_t last, double alpha);
  static constexpr std::uint64_t kAll = std::numeric_limits<std::uint64_t>::max();
  // Waits for `round` of `fragment` and merges it with `alpha`; false when it failed.
  bool merge(engine::PeerContext& ctx, std::uint64_t round, std::size_t fragment, double alpha);
  // theta[f], m[f] and w_i[f] from a fragment's mean model `mean` (the outer step, then alpha),
  // the round counted; `scratch`: the fragment's size, may be `mean`.
  void apply(engine::PeerContext& ctx, std::size_t fragment, std::span<const float> mean,
             std::span<float> scratch, double alpha);
  void count(engine::PeerContext& ctx, const std::string& what, double value = 1);

  // ---- time-boxed rounds (round-seconds; streaming_diloco_timed.cc) ----
  struct Timed {
    Timed(RoundTime time, std::uint64_t h, std::size_t fragments);
    TimedRounds rounds;
    FragmentClock clock;
    std::vector<std::uint64_t> next;  // per fragment: the number k of its next round here
    engine::Clock::time_point lastStep{};
    std::uint64_t failures = 0;  // rounds that failed here
    bool clockStarted = false;
  };
  static std::unique_ptr<Timed> makeTimed(const StreamingDilocoOptions& options);
  // Round k of fragment f: k F + f + 1, increasing in start order.
  std::uint64_t timedRound(std::uint64_t k, std::size_t fragment) const {
    return k * fragments_ + fragment + 1;
  }
  void timedAfterStep(engine::PeerContext& ctx, std::uint64_t done);
  // Starts round `k` of `fragment` (this peer's next of it) after step `done`.
  void startTimed(engine::PeerContext& ctx, std::uint64_t done, std::size_t fragment);
  // Waits for `round` of `fragment` and merges it with `alpha`; false when it failed.
  bool mergeTimed(engine::PeerContext& ctx, std::uint64_t round, std::size_t fragment,
                  double alpha);
  // The oldest round in flight (of `fragment`, or of any: kAny), merged; false when none.
  static constexpr std::size_t kAny = std::numeric_limits<std::size_t>::max();
  bool mergeOldest(engine::PeerContext& ctx, std::size_t fragment, double alpha);
  void finishTimed(engine::PeerContext& ctx);
  void setupTimed(engine::PeerContext& ctx);
  void joinedTimed();  // a joiner, or a peer resumed late: it learns the spend from a round
  void saveTimed(engine::AlgorithmState& state) const;
  void loadTimed(const engine::AlgorithmState& state);

  StreamingDilocoOptions options_;
  // F and tau now: the fixed ones, or auto's; a choice waits in next_ for no round in flight.
  std::uint64_t fragments_ = 1, tau_ = 1;
  std::optional<StreamingChoice> next_;
  bool chosen_ = false;  // next_ is a survey's choice (reported), not the provisional values
  ViewFit fit_{"streaming-diloco"};
  OuterState outer_;
  AsyncAllReduce allReduce_;
  // Delta of one fragment (compressed: the mean model first); |w| at the end (endOnConsensus).
  kernels::Buffer<float> scratch_;
  // Rounds this peer started and has not merged: round -> fragment (round / F: the step started).
  std::map<std::uint64_t, std::size_t> inFlight_;
  // Per fragment: the step of its last start, and the start step of its last merged round.
  std::map<std::size_t, std::uint64_t> lastStart_, merged_;
  std::uint64_t lastRound_ = 0;  // the last round started, when started_
  bool started_ = false;
  std::atomic<std::uint64_t> step_{0};  // the compute thread's step, for replies to joiners
  std::unique_ptr<Timed> timed_;        // round-seconds on, else null
};

}  // namespace gossamer::algorithms
