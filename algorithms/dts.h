// dts: synchronous all-reduce of gradients with the barrier moved later (delayed update) and
// made rarer (temporally sparse update), and an error compensation that makes the result what
// synchronous SGD would have computed (Zhu, Lu, Lin, Han, "Distributed Training Across the
// World", 2019 (seeds/002), sections 3.1 and 3.2, equations 3 and 4; algorithms/README.md,
// "dts").
//
//   communication    non-blocking all-reduce (async_allreduce.h) of one window of p local steps,
//                    started at the window's end and awaited t steps later
//   messages / step  2 (n-1) x pieces / p per peer
//   bytes on wire    2 (n-1)/n x 4|w| per p steps and peer with --optimizer sgd, or p = 1 (the
//                    gradient itself); 2 (n-1)/n x 8|w| with momentum or nesterov and p > 1 (the
//                    window's response on both w and the velocity: twice a gradient's bytes)
//   staleness        each peer runs ahead on its own gradients for at most p + t steps; every
//                    window is compensated exactly t steps after it ends
//
// The rule (peer j; the local optimizer opt_step is sgd, momentum or nesterov, eta_k the rate of
// step k; a window is the steps (e - p, e] for e a multiple of p; t a multiple of p):
//   every step k:   g(k,j) = gradient of the next mini-batch at w_j
//                   (w_j, v_j) = opt_step(w_j, v_j, g(k,j))             # the local gradient
//   when k = e:     X_j = (w_j, v_j) - A_e ... A_(e-p+1) (w_j, v_j)(e-p)  # the window's response
//                   start the all-reduce of X_j (round e)
//                   for the round e - t:  X~ = (1/n) sum_i X_i            # wait for it
//                   (w_j, v_j) += M (X~ - X_j),  M = A_e ... A_(e-t+1)    # error compensation
//                   keep (w_j, v_j) as the next window's start
// With p = 1 the round of step k carries g(k,j) itself and is compensated at k + t.
//
// Why it is exact. For a fixed rate the optimizers are linear in (w, v, g): PyTorch's steps
//   sgd:       w' = w - eta (g + wd w)
//   momentum:  v' = mu v + g + wd w;  w' = w - eta v'
//   nesterov:  v' = mu v + g + wd w;  w' = w - eta (g + wd w + mu v')
// so replacing the gradient g_k of step k by g_k + delta adds (c_w delta, c_v delta) to the state
// after step k, the injection B_k: sgd (-eta_k, 0); momentum (-eta_k, 1); nesterov
// (-eta_k (1 + mu), 1). Every later step m carries a perturbation (dw, dv) on by the homogeneous
// part of its step, the 2 x 2 map of scalars A_m (identical for every element of w):
//   sgd:       dw' = (1 - eta wd) dw
//   momentum:  dv' = wd dw + mu dv;  dw' = dw - eta dv'
//   nesterov:  dv' = wd dw + mu dv;  dw' = dw - eta (wd dw + mu dv')
// The window's gradients therefore contribute X = sum_k A_e...A_(k+1) B_k g_k to the state at its
// end: exactly what separates that state from the window's start carried through the same maps
// without gradients, (w, v)(e) - A_e...A_(e-p+1) (w, v)(e-p), which costs two passes per window
// instead of a recursion on vectors every step (compensations are applied at window ends only,
// after the response has been taken, so none lands inside a window). The average gradients would
// have contributed the
// average of the X_i (A and B are the same on every peer: the rate follows the step count), and
// at step e + t the difference has been carried on by M. After the compensation, the peer's state
// is exactly the one its optimizer would have reached with the averaged gradients of every
// compensated window and its own in the others (the gradients themselves were computed at the
// peer's own models, as the paper's are). For sgd with a constant rate and no weight decay, X is
// -eta times the window's gradient sum, and the compensation is equation 4; with p = 1 it is
// equation 3. When every window is compensated, every peer's state is the same: the one the
// optimizer reaches with the averaged gradients. Adam is not linear (its step divides by the
// square root of its second moment) and is refused at setup.
//
// What is sent. With p = 1, X = B_k g_k: the all-reduce carries the gradient itself (|w| floats)
// and the injection is folded into M. With p > 1, sgd sends X_w (|w|), momentum and nesterov
// [X_w, X_v] (2|w|, one buffer). The rounds are named by the window's end step, the same on every
// peer; floor(t / p) + 1 may be in flight at once.
//
// Failures. A round that fails (a member missing, gone or joined; a payload refused) is released
// without compensation: the peer keeps its local updates for that window ("dts.fallbacks"), and
// the peers' models then differ by them, as after a failed step of allreduce-sgd. setup() (after
// every membership change) releases every round in flight the same way and starts a new window;
// the first window after it may span different steps on different peers (each resets at its own
// step boundary), so its compensation is approximate. A joiner takes a live peer's model and a
// fresh optimizer state (the default join). Checkpoints keep nothing of dts: the window and the
// rounds in flight are dropped, so a resumed peer's uncompensated updates stay.
//
// Backup workers (`backups` = k > 0; algorithms/README.md, "Backup workers"). Each window's
// all-reduce goes on with the first n - k responses that reach each piece's owner
// (async_allreduce.h, "Backup workers"); the owners are the members whose response made the last
// complete round (flags after X, as allreduce-sgd's), so a slow member holds no round. A member
// that finds its window's round reduced already (a reduced chunk of it arrived: it went on
// without this peer; the others running ahead by up to t steps says nothing, they may still be
// waiting for this peer's response) catches up: it takes its steps without computing a gradient (g
// = 0, so its optimizer applies only the step's map A_k, which is what every peer's state goes
// through too) and listens to the rounds of the windows it skipped. Its compensation is the same,
// (w, v) += M (X~ - X_j) with its own X_j (0 for a window of skipped steps), so once every window
// is compensated it holds the others' state. A response that came too late is replaced by the mean
// of the others' in the same way.
//
// Memory. With p > 1, the window's start (|X| floats); per round in flight, what this peer sent
// and the all-reduce's result: (floor(t / p) + 1) x 2|X| floats, reused from round to round.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "algorithms/async_allreduce.h"
#include "algorithms/network_survey.h"
#include "engine/algorithm.h"
#include "engine/options.h"
#include "engine/train/optimizer.h"
#include "kernels/compute.h"

namespace gossamer::algorithms {

struct DtsOptions {
  // t: steps between a window's end and its compensation; p: local steps per window. auto (the
  // defaults): chosen from the view's first complete survey (network_fit.h, chooseDts: p the
  // fewest steps whose window's bytes the slowest link carries in kLinkShare of their time, t the
  // whole windows that cover one window's exchange); until then t = 0, p = 8 (a fixed one stays).
  engine::Auto<std::uint64_t> delay = engine::Auto<std::uint64_t>::automatic();
  engine::Auto<std::uint64_t> period = engine::Auto<std::uint64_t>::automatic();
  std::size_t pieces = 4;   // messages per all-reduce chunk
  std::size_t backups = 0;  // k: each window's all-reduce goes on with the first n - k responses

  template <typename Bind>
  void bind(Bind& b) {
    b("delay", delay,
      "t: steps a window's all-reduce may take; it is awaited and compensated t steps after the "
      "window ends (0: at once, synchronous); auto: the windows that cover its measured exchange");
    b("period", period,
      "p: local steps per window; one all-reduce per p steps (temporally sparse update; >= 1); "
      "auto: the fewest steps whose window the slowest measured link carries in 80% of their time");
    b("pieces", pieces,
      "messages each all-reduce chunk is cut into, so additions overlap the transfer (1-16)");
    b("backups", backups,
      "k: each window's all-reduce goes on with the first n - k responses (backup workers); a "
      "member a window behind takes its steps without computing until it is level (0-1024)");
  }
  void validate() const;
};

// The local optimizer seen as a linear map of (w, v, g) for a fixed rate (the header comment).
// Scalars in double; the vectors they act on stay float.
namespace dts {

struct Linear {
  engine::train::OptimizerKind kind = engine::train::OptimizerKind::kSgd;  // not kAdam
  double mu = 0;                                                           // momentum and nesterov
  double wd = 0;                                                           // weight decay
};

// A 2 x 2 matrix of scalars acting on (dw, dv), the same for every element.
struct Matrix {
  double ww = 1, wv = 0, vw = 0, vv = 1;
  friend Matrix operator*(const Matrix& a, const Matrix& b) {
    return {a.ww * b.ww + a.wv * b.vw, a.ww * b.wv + a.wv * b.vv, a.vw * b.ww + a.vv * b.vw,
            a.vw * b.wv + a.vv * b.vv};
  }
};

// A_k: how a step at rate `lr` carries a perturbation of the state it starts from.
Matrix stepMap(const Linear& opt, double lr);
// B_k: the state change of a step at rate `lr` per unit of change of its gradient, (c_w, c_v).
std::array<double, 2> injection(const Linear& opt, double lr);
// The window's response X from the state it ends in and the state it started from: X = (w, v) -
// M (w_s, v_s), with M the window's steps' maps (the state the window would have reached without
// gradients). `start` and `x` hold [w_s, v_s] and [X_w, X_v] (2|w| floats), or w_s and X_w (|w|)
// when `v` is empty (sgd). One pass of Compute::weightedSum per vector.
void windowResponse(kernels::Compute& compute, const Matrix& m, std::span<const float> w,
                    std::span<const float> v, std::span<const float> start, std::span<float> x);
// (w, v) += M (average - own), in one pass over each of w and v: with 2|w| floats, (dw, dv) =
// the two halves of the difference; with |w| (a single sent vector whose injection is folded
// into M's first column), (dw, dv) = (M.ww, M.vw) x the difference. `v` is empty for sgd.
void compensate(kernels::Compute& compute, const Matrix& m, std::span<float> w, std::span<float> v,
                std::span<const float> average, std::span<const float> own);

}  // namespace dts

class Dts final : public engine::Algorithm {
 public:
  explicit Dts(DtsOptions options);
  ~Dts() override;
  std::string name() const override { return "dts"; }
  bool lockstep() const override { return true; }  // rounds matched by step
  void setup(engine::PeerContext& ctx) override;
  double step(engine::PeerContext& ctx) override;
  // Sends the last, partial window and compensates every round still in flight, so the peers end
  // on the same model when no round failed.
  void finish(engine::PeerContext& ctx) override;
  // Fails the rounds in flight at once, so the others do not wait for this peer's part.
  void leave(engine::PeerContext& ctx) override;

  // Message kind of the all-reduce.
  static constexpr std::uint32_t kWindow = 1;
  // The window until auto has chosen (t = 0: nothing in flight at a survey step).
  static constexpr std::uint64_t kProvisionalPeriod = 8;

 private:
  struct Pending {
    dts::Matrix m;          // what a unit difference in X at the window's end is now
    std::uint64_t due = 0;  // the step count at which it is awaited
    // A round this peer listened to (backups): its own X_j, which it did not send.
    std::shared_ptr<kernels::Buffer<float>> own;
  };

  // The local optimizer as a linear map; throws gossamer::Error for Adam.
  dts::Linear linear(engine::PeerContext& ctx) const;
  // Floats sent per round: |w|, or 2|w| for momentum or nesterov with p > 1.
  std::size_t width(engine::PeerContext& ctx) const;
  // A window begins at the current state (p > 1: a copy of w, and v with momentum).
  void startWindow(engine::PeerContext& ctx);
  // The window's response leaves as round `round`.
  void endWindow(engine::PeerContext& ctx, std::uint64_t round);
  // `x` holds X (width(ctx) floats, and with backups a flag per member after it, this peer's set).
  void startRound(engine::PeerContext& ctx, std::uint64_t round,
                  std::shared_ptr<kernels::Buffer<float>> x, const dts::Matrix& m);
  // A buffer for a round's X: width(ctx) floats, and with backups the flags after them.
  std::shared_ptr<kernels::Buffer<float>> roundBuffer(engine::PeerContext& ctx);
  // With backups: the others are a window ahead of the one this step belongs to.
  bool behind(engine::PeerContext& ctx);
  void complete(engine::PeerContext& ctx, std::uint64_t round);
  // Polls, then compensates every round due at step count `done`.
  void completeDue(engine::PeerContext& ctx, std::uint64_t done);
  void dropAll(engine::PeerContext& ctx);
  // Auto: the survey after step count `done` (a window's end), and the choice it makes.
  void fit(engine::PeerContext& ctx, std::uint64_t done);
  bool windowEnds(std::uint64_t done) const { return (done - anchor_) % period_ == 0; }

  DtsOptions options_;
  // t and p now: the fixed ones, or auto's (provisional until the view's first survey); windows
  // end every p steps after anchor_.
  std::uint64_t delay_ = 0, period_ = kProvisionalPeriod, anchor_ = 0;
  ViewFit fit_{"dts"};
  std::unique_ptr<AsyncAllReduce> allreduce_;
  std::map<std::uint64_t, Pending> pending_;  // by round (the window's end step)
  kernels::Buffer<float> start_;              // the state the window started from (p > 1)
  dts::Matrix windowMap_;                     // the window's steps' maps so far
  std::uint64_t windowSteps_ = 0;             // steps in the window so far
  std::uint64_t lastRound_ = 0;               // the last round started (0: none)
  // Backups: the owners of the next rounds (the last complete round's contributors; empty:
  // every member), and whether this window took a step without computing.
  std::vector<engine::PeerId> owners_;
  bool skipped_ = false;
  double lastLoss_ = 0;  // the last computed step's loss (a step without computing reports it)
};

}  // namespace gossamer::algorithms
