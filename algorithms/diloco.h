// diloco: local SGD with an outer optimizer (Douillard et al., "DiLoCo: Distributed
// Low-Communication Training of Language Models", 2023, algorithm 1). The rule is
// algorithms/README.md's "diloco".
//
//   communication    all-reduce of w every H inner steps, started and awaited at once
//                    (async_allreduce.h: two one-way latencies, n-1 links per peer at once)
//   messages / step  2 (n-1) x pipeline / H per peer
//   bytes on wire    2 (n-1)/n x |w| x 4 per H steps and peer
//   staleness        none: a round waits for its data, up to a deadline
//
// Every peer holds the same theta (the shared model of the last outer step) and the same outer
// momentum m. Round r (after inner step r H), on every peer:
//   w~    = (1/n) sum_i w_i                  // all-reduce of the models (same bits everywhere)
//   Delta = theta - w~                       // = (1/n) sum_i (theta - w_i), the outer gradient
//   m     = mu m + Delta                     // outer momentum (PyTorch's SGD: no dampening)
//   theta = theta - lr (Delta + mu m)        // Nesterov; plain momentum: theta - lr m
//   w_i   = theta                            // the inner optimizer's state is kept (the paper)
// Between rounds: H inner steps w_i = opt_step(w_i, g_i) with the peer's --optimizer.
//
// Why the models and not the Delta_i are all-reduced: the same bytes, and the same value in exact
// arithmetic while theta is common, but the result depends on theta only through this peer's own
// theta. Should the thetas ever differ (a round that completes on some peers and fails on others
// when a peer dies in its last phases, or a joiner that fetched theta just before a round the
// others ran without it), each round contracts the difference (by |1 - lr (1 + mu)|-ish; about
// 0.5 per round with the paper's lr 0.7 and mu 0.9), where averaged Delta_i would carry it forever.
//
// With lr 1 and mu 0 this is local-sgd with tau = H (theta = w~, up to float rounding).
//
// A failed round (RingOutcome != kComplete: a peer died or left, views differ, a chunk refused):
// theta and m stay as they were on every peer, and every peer continues from its own w_i, so the
// next complete round's Delta covers both rounds' progress ("diloco.fallbacks").
// The run's last round is in finish() when the step count is not a multiple of H
// (periodic_averaging.h). Then every peer takes the mean of the thetas (endOnConsensus: one more
// all-reduce of |w| per run), so that the run ends on one model even if the thetas drifted apart.
//
// Joiner: fetches theta, m and the outer round count from the members at once, in verified
// chunks (PeerContext::catchUpState over sharedState(): theta is the same on every member after
// a round), or, where the runtime has no such fetch (the simulator) or no member has a state to
// give, requests them from one live member (serve() answers from host memory under a mutex); it
// takes w_i = theta and that member's step, and starts with a fresh inner optimizer.
// When nobody answers, it falls back to Algorithm::join (a member's model) with theta = that
// model and m = 0 ("diloco.join_fallbacks"). Checkpoints keep theta, m and the round count.
//
// Time-boxed rounds (round-seconds, algorithms/time_box.h): a round lasts a time instead of H
// steps, each peer taking the steps that fit; the all-reduce carries [n_i w_i, tail] and the
// outer step uses the weighted mean w~ = sum n_i w_i / sum n_i; rounds are numbered by the rounds
// attempted (a joiner takes the number with theta, and any peer that hears a later round joins
// it); the run ends at the round that spends an even run's cluster steps, on every peer at once.
//
// Memory, on top of the model: theta, m (none when mu = 0) and one scratch buffer for the
// all-reduce, |w| x 4 bytes each in the Compute's memory (80 MB each for a 20M-parameter model).
// serve() reads theta and m in place on the CPU backend; on CUDA, host mirrors refreshed after
// every outer step (another 2 |w| x 4 bytes of host memory).
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "algorithms/async_allreduce.h"
#include "algorithms/periodic_averaging.h"
#include "algorithms/time_box.h"
#include "engine/algorithm.h"
#include "kernels/compute.h"

namespace gossamer::algorithms {

// The outer optimizer's options, shared with streaming-diloco.
struct OuterOptions {
  double lr = 0.7;        // the paper's outer learning rate
  double momentum = 0.9;  // the paper's outer momentum
  bool nesterov = true;

  // Validates, naming the options as `<algorithm>.outer-lr`, ...
  void validate(const char* algorithm) const;
};

struct DilocoOptions {
  // Inner steps per outer round; auto (the default): the fewest (10-500) that keep the round's
  // exchange within kBlockingShare of the time (network_fit.h), the rule time-boxed rounds' auto
  // length follows too. The paper's 500 suits its 88k steps (176 rounds); its H ablation loses
  // little down to H = 50, and our runs are hundreds to a few thousand steps, where the outer
  // momentum needs tens of rounds to build up. On Fashion-MNIST (MLP, 4 local peers, 3 epochs =
  // 705 steps, seed 1) H = 50 reached 86.3% with comm_wait_fraction 0.13, H = 6 85.2% at 0.31.
  engine::Auto<std::uint64_t> h = engine::Auto<std::uint64_t>::automatic();
  OuterOptions outer;
  std::size_t pipeline = 4;  // messages per all-reduce chunk
  // Rounds bounded by time instead of h steps (algorithms/time_box.h): off, auto or seconds.
  std::string roundSeconds = "off";
  // The minimum quorum of time-boxed rounds (round_quorum.h).
  std::string quorum = "all";

  template <typename Bind>
  void bind(Bind& b) {
    b("h", h,
      "inner steps between outer rounds (the paper: 500), or auto: the fewest (10-500) that keep "
      "the round's exchange within 5% of the time, from what the peers measure");
    b("round-seconds", roundSeconds,
      "bound each outer round by time instead of h steps: seconds, auto (h x the members' mean "
      "step time; with h auto, 19 x the round's measured exchange) or off; each peer takes the "
      "steps that fit, the merge weights each model by its "
      "steps, and the run ends when the cluster has taken the steps of an even run");
    b("quorum", quorum,
      "time-boxed rounds: the fewest members a round merges (all, a count, or a fraction in "
      "(0, 1)); a member not ready when the round's time is up joins the next round instead of "
      "holding the others");
    b("outer-lr", outer.lr,
      "outer learning rate, in (0, 2] (the paper: 0.7; 1 with momentum 0 is "
      "local-sgd)");
    b("outer-momentum", outer.momentum, "outer momentum, in [0, 1) (the paper: 0.9)");
    b("nesterov", outer.nesterov, "Nesterov outer momentum (the paper's); false: heavy ball");
    b("pipeline", pipeline,
      "messages each chunk of the all-reduce is cut into, so that transfer and reduction "
      "overlap (1-16)");
  }
  void validate() const;
};

// theta and the outer momentum m of one buffer (the whole model for diloco, the fragments for
// streaming-diloco), in the Compute's memory, with the host view serve() reads for joiners and the
// checkpoint. Compute thread, except snapshot() (any thread).
class OuterState {
 public:
  OuterState(std::string who, OuterOptions options) : who_(std::move(who)), options_(options) {}

  // Allocates theta and m for `size` floats (once) and, the first time, sets theta = params (or
  // the loaded/received state) and m = 0.
  void setup(engine::PeerContext& ctx);
  bool ready() const { return ready_; }
  std::span<float> theta() { return theta_.span(); }
  std::span<float> momentum() { return momentum_.span(); }

  // The outer step on the slice [offset, offset + mean.size()) given the mean of the models on it:
  // Delta = theta - mean; m = mu m + Delta; theta -= lr (Delta + mu m) (or lr m). `scratch` (the
  // slice's size, may be `mean` itself) receives Delta.
  void step(engine::PeerContext& ctx, std::size_t offset, std::span<const float> mean,
            std::span<float> scratch);
  // Refreshes the host view of [offset, offset + count) after step() (a no-op on the CPU backend,
  // where the view is theta itself); the whole buffer without a slice.
  void publish(engine::PeerContext& ctx);
  void publish(engine::PeerContext& ctx, std::size_t offset, std::size_t count);

  // A copy of theta, m (empty when mu = 0) and the outer rounds done, for a joiner or a checkpoint;
  // false before setup. Any thread.
  bool snapshot(std::vector<float>& theta, std::vector<float>& momentum,
                std::uint64_t& rounds) const;
  // Takes theta and m (host memory) before or after setup(); checks sizes when it applies them.
  void adopt(std::vector<float> theta, std::vector<float> momentum, std::uint64_t rounds);
  std::uint64_t rounds() const {
    std::lock_guard lock(mutex_);
    return rounds_;
  }
  // Time-boxed rounds: the members are at a later round than this peer counted (it joined or
  // fell behind): the count moves up to `rounds`.
  void skipTo(std::uint64_t rounds) {
    std::lock_guard lock(mutex_);
    rounds_ = std::max(rounds_, rounds);
  }
  void countRound() {
    std::lock_guard lock(mutex_);
    ++rounds_;
  }
  bool hasMomentum() const { return options_.momentum > 0; }
  // While busy (a round started and not merged yet: theta may still change by it), snapshot()
  // answers "later": a joiner handed theta now could miss that round's outer step.
  void setBusy(bool busy) {
    std::lock_guard lock(mutex_);
    busy_ = busy;
  }
  bool busy() const {
    std::lock_guard lock(mutex_);
    return busy_;
  }

 private:
  void apply(engine::PeerContext& ctx);

  std::string who_;
  OuterOptions options_;
  kernels::Buffer<float> theta_, momentum_;
  bool ready_ = false;
  bool onHost_ = false;  // the Compute's memory is host memory: serve() reads theta_ in place

  mutable std::mutex mutex_;
  std::span<const float> hostTheta_, hostMomentum_;    // guarded by mutex_
  std::vector<float> mirrorTheta_, mirrorMomentum_;    // CUDA: host mirrors; guarded by mutex_
  std::vector<float> pendingTheta_, pendingMomentum_;  // adopted before setup; guarded by mutex_
  bool pending_ = false;                               // guarded by mutex_
  bool busy_ = false;                                  // guarded by mutex_
  std::uint64_t rounds_ = 0;                           // outer steps done; guarded by mutex_
};

// What a member gives a joiner's catch-up (Algorithm::sharedState): theta then m as the floats,
// the outer rounds done as the version and the one integer, `step` as the step; none while a
// round is half merged (busy) or before setup.
std::optional<engine::SharedState> sharedOuterState(const OuterState& outer, std::uint64_t step);

class Diloco final : public PeriodicAveraging {
 public:
  explicit Diloco(DilocoOptions options);
  std::string name() const override { return "diloco"; }
  void setup(engine::PeerContext& ctx) override;
  void afterStep(engine::PeerContext& ctx) override;
  // The last round when the run did not end on one, then endOnConsensus().
  void finish(engine::PeerContext& ctx) override;
  void serve(engine::ServiceContext& ctx, const engine::Incoming& request) override;
  void join(engine::PeerContext& ctx) override;
  std::optional<engine::SharedState> sharedState() const override {
    return sharedOuterState(outer_, step_);
  }
  void saveState(engine::AlgorithmState& state) const override;
  void loadState(const engine::AlgorithmState& state) override;

  // Message kinds: the all-reduce; a joiner's request for theta and m (no payload) and its reply
  // (theta and, with outer momentum, m as payloads; the outer rounds done as integer 0; the serving
  // peer's step; no payload when it has no state yet); the all-reduce of theta at the end.
  static constexpr std::uint32_t kAverage = 1;
  static constexpr std::uint32_t kStateRequest = 2;
  static constexpr std::uint32_t kState = 3;
  static constexpr std::uint32_t kConsensus = 4;

 protected:
  void average(engine::PeerContext& ctx, std::uint64_t round) override;

 private:
  // A time-boxed round (round-seconds): the weighted all-reduce of [n_i w_i, tail], numbered by
  // the rounds attempted (the same on every member; a joiner takes it with theta), then the outer
  // step on the weighted mean; the round that spends the budget ends the run.
  void timedRound(engine::PeerContext& ctx) override;
  std::uint64_t nextTimedRound() const override { return outer_.rounds() + 1; }

  DilocoOptions options_;
  OuterState outer_;
  kernels::Buffer<float> mean_;         // scratch of the outer step
  AsyncAllReduce exchange_;             // the round's average
  std::atomic<std::uint64_t> step_{0};  // the compute thread's step, for replies to joiners
};

// The joiner's side shared with streaming-diloco: the members' outer state fetched in verified
// chunks (PeerContext::catchUpState); failing that, asks every other member in turn for it,
// again after 1 ms while one is busy, for at most --comm-timeout; true (params = theta, step
// adopted, inner optimizer reset) when one answered.
bool joinFromOuterState(engine::PeerContext& ctx, OuterState& outer, const std::string& who,
                        std::uint32_t requestKind);
// serve()'s side: answers a request of the joiner with `outer`'s snapshot and `step`; without a
// payload when it has none, and with integer 0 = 1 when it is busy (the joiner asks again).
void serveOuterState(engine::ServiceContext& ctx, const engine::Incoming& request,
                     const OuterState& outer, std::uint32_t replyKind, std::uint64_t step,
                     const std::string& who);
// The end of a run (finish(), after the last outer step): theta = the mean of the members' thetas
// (ring all-reduce of `kind` at step `step`), and w_i = theta, so that every peer ends on the same
// bits even when a round completed on some peers and failed on others (the thetas then differ by
// what the later rounds have not contracted away yet). Equal thetas stay equal (up to the mean's
// rounding). A failed all-reduce leaves everything as it was ("<who>.consensus_failed").
void endOnConsensus(engine::PeerContext& ctx, OuterState& outer, std::span<float> scratch,
                    std::uint32_t kind, std::uint64_t step, std::size_t pipeline,
                    const std::string& who);
// Checkpoint helpers: tensors "outer_theta", "outer_momentum", value "outer_rounds".
void saveOuterState(const OuterState& outer, engine::AlgorithmState& state);
void loadOuterState(OuterState& outer, const engine::AlgorithmState& state);

}  // namespace gossamer::algorithms
