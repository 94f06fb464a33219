// easgd and eamsgd: asynchronous elastic averaging SGD with a center variable (Zhang, Choromanska
// and LeCun, "Deep learning with Elastic Averaging SGD", NeurIPS 2015, algorithms 1 and 2).
// Langer et al. (seeds/003) figure 10 and equation 1; the rule is algorithms/README.md's "easgd /
// eamsgd".
//
//   communication    star: every worker pulls from and pushes to the center, asynchronously
//   messages / step  3 / tau per worker (a pull request, its reply carrying w~, the delta); the
//                    center serves 2 n / tau and sends n / tau
//   bytes on wire    2 x |w| x 4 / tau per step and worker (w~ down, delta up); with --compress C
//                    |w| x (4 + C's bytes per element) / tau (the delta in C, w~ in float32):
//                    int8 (1 + 0.254) / 2 of float32's
//   round trips      prefetch = 0: one blocking pull every tau steps, in the step path;
//                    prefetch = K > 0: none (the pull leaves K steps ahead; waited for only when
//                    its reply is not there yet, "<name>.late")
//   staleness        unbounded: each worker exchanges on its own clock; the pulled w~ may be
//                    older than deltas already in flight (the rule stays symmetric regardless);
//                    with prefetch K, w~ is K local steps older still
//   invariant        with lr 0: sum_i w_i + w~ is conserved by every exchange (delta moves from
//                    one side to the other; compressed, its decoded bits), so all of them meet at
//                    (sum_i w_i(0) + w~(0)) / (n + 1)
//
// The center variable w~ lives on the star's center peer (ctx.graph().root(); default topology
// "star"), in host memory owned by the algorithm and guarded by a mutex, because serve() reads and
// updates it on the IO thread while the compute thread trains. It starts as the center peer's
// model at its first setup (the common initial model). Every peer, the center peer included, is a
// worker and runs the same code: its request to itself never touches the network.
//
// Worker i, before local step t_i when t_i mod tau == 0 (t_i = local steps done, as in the paper):
//   w~' = request(center)                    // pull; on timeout: no exchange, counted
//   delta = alpha (w_i - w~')                // one weightedSum
//   w_i = w_i - delta                        // one axpby
//   notify(center, delta)                    // the center: w~ = w~ + delta (hostCompute axpby)
// Symmetric force: the same delta leaves w_i and enters w~ (alpha = beta in the paper's terms),
// so one exchange leaves w_i + w~ unchanged. The pulled w~' is a copy of the center: when
// another worker's delta lands between the pull and this worker's notify, the center still adds
// exactly the delta this worker subtracted.
//
// Prefetch (option prefetch = K in [0, tau)). With K = 0 the pull is a blocking request(): a
// full round trip in the step path every tau steps (on the `geo` profile up to 212 ms). With
// K > 0 the pull for the exchange before step t (t mod tau == 0) leaves before step t - K
// without waiting (a notify() with a fresh tag, which serve() answers like a request: the reply
// lands in the inbox with that tag), and before step t the worker takes it from the inbox and
// exchanges exactly as above with that w~'. A reply that is not there yet is waited for
// (Inbox::wait) up to the pull deadline ("<name>.late"; missed after it). The
// first exchange (step 0, and the first after a membership change that moved the center, or
// after a join) has no prefetched pull and pulls blocking. Cost: w~' misses the deltas that
// other workers pushed during those K steps, a staleness the asynchronous EASGD of Zhang et al.
// already allows (a worker's w~ is any past value of the center); the rule stays symmetric (the
// center adds exactly the delta the worker subtracted), so with lr 0 sum_i w_i + w~ is still
// conserved. Default 0: a default K > 0 would refuse --easgd.tau 1, and two runs are too few to
// show the variant no worse. Measured on Fashion-MNIST (MLP, 4 peers in one process, 3 epochs,
// --lr 0.025, tau 8, a loaded 2-core machine): lan K = 0 84.97% / 85.15%, K = 2 85.22% / 85.11%;
// --network geo K = 0 85.26% in 29.7 s (56% of the time waiting on communication), K = 4 85.22%
// in 24.3 s (9%; a wait for a late reply in the inbox is not counted there). Set it on slow links.
//
// Compressed (--compress C). The delta travels through the run's codec (Message::compressible):
// notify() takes the compute thread's send path (Messenger::send), which encodes it before it
// returns, and Compressible::sent gives the worker the float32 values the center decodes. The
// worker gives up exactly those bits, the center adds them (with the same axpby as uncompressed):
//   q = decode(C(delta));  w_i = w_i - q;  notify(center, C(delta))   // the center: w~ = w~ + q
// so sum_i w_i + w~ is conserved as without a codec (up to float rounding). No residual is kept,
// and --error-feedback does not apply: what C drops is not lost, it stays in w_i - w~, and the next
// exchange sends alpha of that gap again. A residual on top would count it twice: an element that
// top-k leaves out for K exchanges would leave with K alpha of its gap at once and overshoot once K
// alpha > 1; measured with one (4 peers, top-k 10%), the convex test problem ended 7e3 from its
// optimum and models pulled with learning rate 0 drifted 1e3 apart (0.006 and under 1e-3 without).
// The pull's reply, w~, a model, travels as CHOCO-SGD's public estimates do (public_estimates.h),
// one stream per worker: the center keeps the estimate x^_c->i of w~ that worker i holds and the
// number of its last reply; a pull names the last reply number the worker took in. When they
// match, the reply is q = C(w~ - x^_c->i) (encoded on the io thread; ServiceContext::reply), both
// sides add the decoded q to their x^_c->i, and the worker uses x^_c->i as w~'. Otherwise (the
// first pull, a lost or late reply, a new center) the reply is an anchor: w~ in float32, x^ = w~
// on both sides ("<name>.center_anchors"). A difference that does not follow the worker's last
// reply is a missed pull. The estimate's lag is the compression's cost: delta = alpha (w_i - x^),
// still subtracted and added as the same bits, so the invariant holds. Memory: the center keeps
// one host copy of w~ per worker. The handover of w~, the joiner's pull and finish()'s last pull
// are float32 (finish() ends on w~ itself). Measured on the convex problem (4 peers, tau 2):
// 0.006-0.010 from the optimum with int8 and top-k 10%, as with float32.
//
// Options: alpha is the per-exchange moving rate of both sides (the paper's alpha = eta rho);
// 0 picks the paper's beta = n alpha = 0.9. Progress: sum_i w_i + w~ moves only by the n workers'
// gradient steps but is spread over n + 1 variables, so once they stay close, the models advance
// at n / (n + 1) of SGD's pace at the same learning rate (4 peers: 80%). On Fashion-MNIST (MLP,
// 4 peers, 3 epochs) that left 84.6-84.9% at --lr 0.02 for every alpha and tau tried, and 85.2%
// at --lr 0.025 (= 0.02 x 5 / 4).
//
// eamsgd: the same exchange; the local steps are momentum steps of the local optimizer (its
// velocity, learning rate, schedule, momentum coefficient and weight decay): --optimizer nesterov
// is the paper's rule (algorithm 2: Nesterov momentum), --optimizer momentum a heavy-ball
// variant. EAMSGD is defined by its momentum, so setup() refuses --optimizer sgd and adam with
// a message naming the fix (easgd is elastic averaging with any local optimizer). The velocity
// is the local optimizer's state, so it is checkpointed with it and reset for a joiner.
//
// Received messages are checked (engine::acceptMessage) before use: a delta, a handover or a
// pulled w~ of the wrong size or with a non-finite value, or a request of an unknown kind, is
// refused with a warning naming its sender and counted in "<name>.refused" (a refused pull is a
// missed exchange); nothing a remote sends makes serve() throw. Under the run's NormBound
// (--max-norm-ratio), the center refuses a delta whose norm exceeds R ||w~||, and a worker a pulled
// w~ far from w_i (counted in "<name>.outliers"; the exchange is missed).
//
// EASGD's result is the center variable (the paper evaluates w~): with final_center (the default),
// finish() pulls w~ once more, after every worker has finished its steps and sent its last delta,
// and every worker adopts it, so the peers end with one model (up to deltas still in flight to the
// center when a worker pulls). final_center=false keeps each worker's own model.
//
// Elastic membership (setup() runs again after every change and takes the new graph's root as the
// center; the star's center is a position in the sorted members, so every peer agrees on it):
//   center lost     REBUILD (option b): a peer that becomes the center without a handed-over w~
//                   starts w~ from its own model ("easgd.center_restarts"). Chosen over a replica
//                   because it costs no traffic while nothing fails, and because it loses little:
//                   every worker sits within an elastic pull of w~ (each exchange moves it alpha of
//                   the way), so the new center's own model is a recent, slightly noisier w~ that
//                   the workers' next deltas pull back to their mean. A replica pushed every few
//                   exchanges would cost |w| per push and still be stale by those exchanges.
//   center leaves   leave() hands w~ over (a request carrying it) to the next candidate, the
//                   member after it in the sorted view (the star's center position then holds
//                   that member), and stops serving it; the receiver adopts it as its w~ and
//                   answers, and only then does the leave go out, so the handover is there before
//                   the view without the old center (no rebuild in between).
//   center moves    (a joiner with a smaller id, --star-center) the old center hands w~ over to
//                   the new one in setup(); a handover that reaches a peer that is not the center
//                   of its next view is passed on to that view's center by that setup() (not
//                   before: a leaving center's handover is received ahead of its leave).
//   pull timeout    the worker keeps its own model and trains on ("easgd.missed"); so does a
//                   pull answered by a peer that does not hold the center (yet).
//   joiner          receives w~ from the center peer as its model, and the center peer's step.
//   checkpoint      saveState/loadState keep w~ (when this peer holds it); eamsgd's velocity is
//                   the local optimizer's, in the runtime's part of the checkpoint.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "algorithms/shared_end.h"
#include "engine/algorithm.h"

namespace gossamer::algorithms {

struct EasgdOptions {
  // Communication period. 8: on Fashion-MNIST (MLP, 4 peers, 3 epochs, --lr 0.02) every tau from 2
  // to 16 gave 84.6-84.9% (the symmetric force costs a fixed share of the progress, see the header
  // comment), and comm_wait_fraction fell from 0.10-0.15 at tau = 4 to 0.04-0.08 at tau = 8.
  std::uint64_t tau = 8;
  double alpha = 0;  // moving rate; 0: 0.9 / n, the paper's beta = n alpha = 0.9
  std::int64_t timeoutMs = 0;
  bool finalCenter = true;     // finish() replaces w_i with w~
  std::uint64_t prefetch = 0;  // pull K steps ahead of the exchange (0: blocking pull)
  std::string end = "steps";   // or "budget": algorithms/shared_end.h

  template <typename Bind>
  void bind(Bind& b) {
    b("tau", tau, "communication period: exchange with the center every tau local steps");
    b("alpha", alpha,
      "elastic moving rate alpha = beta, in [0, 1); 0 means 0.9 / n for n workers (the paper's "
      "beta = n alpha = 0.9), recomputed when the membership changes");
    b("timeout_ms", timeoutMs,
      "deadline of a pull from the center in ms (the exchange is skipped after it); 0: "
      "--comm-timeout");
    b("final_center", finalCenter,
      "at the end, every worker takes the center variable w~ as its final model (the model EASGD "
      "returns); false: each worker keeps its own");
    b("prefetch", prefetch,
      "K in [0, tau): the pull of w~ for an exchange leaves K local steps ahead and its reply is "
      "collected at the exchange, so no round trip is waited for while training (w~ is K steps "
      "staler); 0: the pull is a blocking request at the exchange");
    b("end", end,
      "steps (every peer takes the run's steps) or budget (the cluster takes the run's steps x "
      "the members, each peer training until about the same moment: peers of uneven speed)");
  }
  void validate(const char* name = "easgd") const;
};

// The local steps' momentum is the local optimizer's (--optimizer nesterov or momentum, with
// --momentum): eamsgd has the exchange's options only.
struct EamsgdOptions {
  EasgdOptions elastic;  // the exchange: the same options as easgd

  template <typename Bind>
  void bind(Bind& b) {
    elastic.bind(b);
  }
  void validate() const;
};

// The elastic exchange with the center, shared by easgd and eamsgd: the worker side on the compute
// thread, the center side in serve() on the IO thread.
class ElasticCenter {
 public:
  // `name` prefixes the metrics ("easgd.exchanges", ...).
  ElasticCenter(std::string name, EasgdOptions options)
      : name_(std::move(name)), options_(options), end_(name_, options.end) {}

  void setup(engine::PeerContext& ctx);
  // The exchange, when ctx.step() mod tau == 0; the shared end's estimate (end = budget).
  void beforeStep(engine::PeerContext& ctx);
  void serve(engine::ServiceContext& ctx, const engine::Incoming& request);
  // With final_center: w_i = w~, pulled once more after every worker has finished.
  void finish(engine::PeerContext& ctx);
  // None of its own; with end = budget, not the same step count.
  engine::Invariants invariants() const { return end_.adjust({}); }
  std::optional<double> runProgress() const { return end_.progress(); }
  // A joiner: params = w~ pulled from the center (any member that holds it), step = the center
  // peer's; false when nobody answered with w~.
  bool join(engine::PeerContext& ctx);
  // Hands w~ over to the next center candidate when this peer holds it.
  void leave(engine::PeerContext& ctx);
  // w~ as tensor "center" when this peer holds it; loadState makes this peer hold it again (until
  // setup() finds another center in the view, which it then hands w~ over to).
  void saveState(engine::AlgorithmState& state) const;
  void loadState(const engine::AlgorithmState& state);

  // A copy of w~ when this peer holds the center, else nullopt. Any thread.
  std::optional<std::vector<float>> center() const;
  // The alpha in use (after the 0.9 / n default is resolved by setup()).
  double alpha() const { return alpha_; }

  // Message kinds: a pull (request, no payload), its reply (w~ as payload 0 and the center peer's
  // step, or no payload when the peer asked does not hold the center), a delta (notify, payload
  // 0) and a handover of w~ to a new center (payload 0; integer 0 is 1 when the sender waits for
  // a receipt, a reply of the same kind without payload: a leaving center).
  static constexpr std::uint32_t kPull = 1;
  static constexpr std::uint32_t kCenter = 2;
  static constexpr std::uint32_t kDelta = 3;
  static constexpr std::uint32_t kHandover = 4;

 private:
  void exchange(engine::PeerContext& ctx);
  // Pulls w~ (nullopt, counted as missed, when none came in time).
  std::optional<engine::Incoming> pull(engine::PeerContext& ctx);
  // Posts the pull for the exchange before step `at` (prefetch > 0).
  void prefetch(engine::PeerContext& ctx, std::uint64_t at);
  // The prefetched pull's reply (waited for up to the pull deadline, counted as late when it was
  // not there yet), checked like pull()'s.
  std::optional<engine::Incoming> collect(engine::PeerContext& ctx);
  // Whether a pull's reply carries a usable w~; else counted as missed.
  bool usable(engine::PeerContext& ctx, const std::optional<engine::Incoming>& reply);
  // The pull message: with a codec, it names the last compressed reply taken in (see
  // "Compressed").
  engine::Message pullMessage(engine::PeerContext& ctx) const;
  // w~ from a usable reply: its payload, or (a compressed reply) this worker's estimate of w~
  // after the reply; nullopt (counted as missed) for a difference that does not follow the last
  // reply taken in.
  std::optional<std::span<const float>> centerOf(engine::PeerContext& ctx,
                                                 const engine::Incoming& reply);
  // Center side of a compressed pull (mutex_ held): an anchor or the difference from `worker`'s
  // estimate of w~, `seen` being the last reply number the worker took in.
  void replyCompressed(engine::ServiceContext& ctx, const engine::Incoming& request,
                       std::uint64_t seen);
  engine::Clock::duration pullTimeout(engine::PeerContext& ctx) const;
  // Sends w~ to `to` and stops holding it; with awaitReceipt, returns once `to` has it (or after
  // the comm timeout).
  void handOver(engine::PeerContext& ctx, engine::PeerId to, bool awaitReceipt);
  std::string metric(const char* what) const { return name_ + "." + what; }

  std::string name_;
  EasgdOptions options_;
  SharedEnd end_;
  double alpha_ = 0;
  engine::PeerId centerPeer_ = 0;
  kernels::Buffer<float> delta_;        // the Compute's memory
  kernels::Buffer<float> sent_;         // with a codec: decode(C(delta)), what w_i gives up
  std::atomic<std::uint64_t> step_{0};  // the compute thread's step, for replies to joiners
  // The prefetched pull in flight (compute thread): its tag, the peer asked, and the step before
  // which its exchange is due.
  struct Pending {
    std::uint64_t tag = 0;
    engine::PeerId from = 0;
    std::uint64_t step = 0;
  };
  std::optional<Pending> pending_;

  // With a codec, a worker's estimate of w~ (the Compute's memory): the sum of the compressed
  // replies since an anchor from `estimateFrom_`, the last of them numbered `estimateSeq_` (0:
  // no estimate).
  kernels::Buffer<float> estimate_;
  engine::PeerId estimateFrom_ = 0;
  std::uint64_t estimateSeq_ = 0;

  mutable std::mutex mutex_;
  bool holdsCenter_ = false;   // guarded by mutex_
  std::vector<float> center_;  // w~, host memory; guarded by mutex_
  std::size_t modelSize_ = 0;  // from setup(), for handovers; guarded by mutex_
  // The center's copy of each worker's estimate of w~ and the number of its last reply, and the
  // scratch of a compressed reply (host memory; guarded by mutex_).
  struct WorkerEstimate {
    std::vector<float> x;
    std::uint64_t seq = 0;
  };
  std::map<engine::PeerId, WorkerEstimate> workerEstimates_;
  std::vector<float> replyDifference_, replySent_;
};

class Easgd final : public engine::Algorithm {
 public:
  explicit Easgd(EasgdOptions options) : elastic_("easgd", options) {}
  std::string name() const override { return "easgd"; }
  void setup(engine::PeerContext& ctx) override { elastic_.setup(ctx); }
  void beforeStep(engine::PeerContext& ctx) override { elastic_.beforeStep(ctx); }
  engine::Invariants invariants() const override { return elastic_.invariants(); }
  std::optional<double> runProgress() const override { return elastic_.runProgress(); }
  void finish(engine::PeerContext& ctx) override { elastic_.finish(ctx); }
  void serve(engine::ServiceContext& ctx, const engine::Incoming& request) override {
    elastic_.serve(ctx, request);
  }
  void join(engine::PeerContext& ctx) override;
  void leave(engine::PeerContext& ctx) override { elastic_.leave(ctx); }
  void saveState(engine::AlgorithmState& state) const override { elastic_.saveState(state); }
  void loadState(const engine::AlgorithmState& state) override { elastic_.loadState(state); }

  const ElasticCenter& elastic() const { return elastic_; }

 private:
  ElasticCenter elastic_;
};

class Eamsgd final : public engine::Algorithm {
 public:
  explicit Eamsgd(EamsgdOptions options) : elastic_("eamsgd", options.elastic) {}
  std::string name() const override { return "eamsgd"; }
  // Refuses a local optimizer without momentum (see the header comment).
  void setup(engine::PeerContext& ctx) override;
  // The elastic exchange (every tau steps), then the local optimizer's momentum step.
  void beforeStep(engine::PeerContext& ctx) override { elastic_.beforeStep(ctx); }
  engine::Invariants invariants() const override { return elastic_.invariants(); }
  std::optional<double> runProgress() const override { return elastic_.runProgress(); }
  void finish(engine::PeerContext& ctx) override { elastic_.finish(ctx); }
  void serve(engine::ServiceContext& ctx, const engine::Incoming& request) override {
    elastic_.serve(ctx, request);
  }
  // The joiner takes w~ and starts with zero velocity.
  void join(engine::PeerContext& ctx) override;
  void leave(engine::PeerContext& ctx) override { elastic_.leave(ctx); }
  void saveState(engine::AlgorithmState& state) const override { elastic_.saveState(state); }
  void loadState(const engine::AlgorithmState& state) override { elastic_.loadState(state); }

  const ElasticCenter& elastic() const { return elastic_; }

 private:
  ElasticCenter elastic_;
  bool warnedHeavyBall_ = false;
};

}  // namespace gossamer::algorithms
