// ad-psgd: asynchronous decentralized parallel SGD (Lian, Zhang, Zhang and Liu, "Asynchronous
// Decentralized Parallel Stochastic Gradient Descent", ICML 2018, algorithm 1); the rule is
// algorithms/README.md's "ad-psgd".
//
//   communication    pairwise averaging with one random passive neighbour of the topology (ring
//                    by default), asynchronous: an offer and its answer, never waited for
//   messages / step  active peer: 1 / period offers (one model each); passive peer: one answer
//                    (one model) per offer it receives
//   bytes on wire    2 x |w| x 4 per exchange (offer and answer), 1 / period exchanges per step
//                    and active peer; compressed, the codec's share of that for both, except
//                    anchor offers (float32: first contact, membership change, a miss or an
//                    expired offer) and "missed" answers (no payload) (see "Compressed")
//   staleness        bounded by the round trip: the offer is the model of the step it was sent
//                    at, the answer lands one or a few steps later (at most `outstanding` offers
//                    in flight, each forgotten after `timeout`)
//   invariant        every exchange moves +d to the passive peer and -d to the active one, so
//                    with lr 0 and no failure sum_i x_i never changes (exactly, up to float)
//   paper            Lian et al. 2018, algorithm 1; compressed, the public estimates of CHOCO-SGD
//                    (Koloskova, Stich and Jaggi, ICML 2019) per pair of peers
//
// The paper's worker i repeats: g = gradient at x_i (read before the averaging); pick a random
// neighbour j and atomically x_i = x_j = (x_i + x_j) / 2; x_i = x_i - lr g. Here nothing is atomic
// and nothing waits for a round trip; the exchange is split in two messages:
//
//   step of peer i:
//     g_i = gradient at x_i                           (the pre-averaging model)
//     for each OFFER (s, id) from k that arrived:     (any peer answers, see "Roles")
//       x_i = (x_i + s) / 2;  send ANSWER (x_i, id) to k
//     for each ANSWER (a, id) to an outstanding offer s:
//       x_i = x_i + a - s                             (one fused weightedSum)
//     x_i = opt_step(x_i, g_i)                        (--optimizer; sgd is the paper's)
//     active peer, every `period` steps, with fewer than `outstanding` offers in flight:
//       s = copy of x_i;  send OFFER (s, id) to a random passive out-neighbour
//
// The answer a = (x_j + s) / 2 is the paper's average; x_i = a + (x_i_now - s) keeps the local
// progress i made while the exchange was in flight. j gained d = (s - x_j) / 2 and i lost the
// same d: every completed exchange conserves sum_i x_i, however exchanges interleave (several in
// flight, both ways). With lr 0 the network mean is constant and the models contract toward it.
//
// Roles (the paper's bipartition, which it needs against deadlocks of the atomic averaging):
// position p in the sorted members is ACTIVE when p is even, PASSIVE when odd, except that for an
// odd member count the last position (even, and the ring neighbour of position 0) is passive. On
// the ring every active peer then has two passive neighbours and no two actives are adjacent. On
// any other topology an active peer offers only to its passive out-neighbours (a peer with none
// never offers: "ad-psgd.no_partner"). Roles are positions, so every peer agrees on them without
// talking; they are recomputed at every membership change. Every peer answers every offer from a
// member, whatever its role (peers may briefly disagree about roles after a membership change,
// and answering is always safe: it never waits).
//
// Received messages are checked (engine::acceptMessage: one payload of |w| finite values, the
// offer id): a bad one is refused with a warning naming its sender ("ad-psgd.refused") and not
// used. Under the run's NormBound (--max-norm-ratio), an offer or an average far from x_i, or a
// compressed half-difference longer than R ||x_i||, is refused as an outlier
// ("ad-psgd.outliers"): an offer is not answered (compressed: answered as a miss), an answer's
// offer is dropped. An offer from a peer outside the view is dropped unanswered
// ("ad-psgd.strangers"): its sender cannot be answered, so applying it would move mass one way
// only.
//
// Failures. An offer is held (its snapshot s in a buffer of the Compute, sent from there without a
// staging copy on a CPU peer) until its answer comes or `timeout` passes; then it is forgotten
// ("ad-psgd.expired") and an answer that comes later is dropped ("ad-psgd.late"). An offer to a
// peer that left the view is still held until then (a leaver answers what it holds before it
// goes, and that answer may land after the view changed), but it no longer counts toward
// `outstanding`, and finish() does not wait for it ("ad-psgd.abandoned" when it is dropped). An
// offer its receiver never applied costs nothing. An offer it applied whose answer never lands
// (the offerer died, or the answer was later than `timeout`) moved d to the receiver only: the
// survivors' sum then differs from the initial one by that half-difference.
// A dead peer takes its model out of the sum in any case.
// Answers are not escrowed and resent as gosgd's transfers are (ReliableDelivery,
// reliable_delivery.h): that escrow is the sender's own mass, kept until the ack, so a transfer
// never acknowledged leaves the sum whole. An answer leaves after its sender applied its half of
// the exchange (x_j += d): there is nothing left to keep, and j cannot take d back, since it
// cannot tell a lost answer from a lost ack. A resent answer lands only while the offerer holds s
// (until `timeout`); holding s longer needs the offer resent too (a lost offer and a lost answer
// look alike to the offerer), and lifts the bound on staleness. That is another exchange (j would
// apply d on the offerer's ack), not a use of that part.
//
// Compressed (--compress). The offer travels over CHOCO-SGD's public estimates, one stream per
// ordered pair (PairEstimates, public_estimates.h): x^_i->j, the estimate of x_i that j holds, in
// the same bits on both sides. An offer is an anchor (x_i in float32; first contact, after a
// membership change, after a "missed" answer or an expired offer) or the difference
// C(x_i - x^_i->j); both sides add the decoded difference to x^_i->j, and s' = x^_i->j is the
// model j averages with. The answer needs no estimate: it is a difference already. j computes
// d = (s' - x_j) / 2 and sends it compressed; both ends move by the decoded d^
// (Compressible::sent):
//   x_j += d^;  x_i -= d^
// so every completed exchange conserves sum_i x_i exactly, whatever the codec dropped (what C
// leaves out of d is simply not moved, and is still in the next exchange's difference), and the
// offerer keeps no snapshot. No consensus step size is needed: nothing is extrapolated (the
// offerer's model is never moved by its own residual, only the estimate lags).
// Losses. An offer j cannot decode (its number does not follow: an earlier one was lost) moves
// nothing: j answers "missed" (kMissed, no payload) and forgets its estimate of i until an
// anchor; i makes its next offer to j an anchor and forgets its earlier offers to j (their answers
// would have come first on the link: they were lost). An offer that expires unanswered makes the
// next offer to its peer an anchor too (the peer may have missed it). An answer lost after j
// applied d^ moves mass one way, as uncompressed. Memory: two buffers of |w| per partner and
// four scratch buffers.
//
// Finish. After the runtime's barrier every offer sent is in its receiver's inbox: every peer
// answers what it holds and waits (at most `timeout`) for the answers to its own offers, so that
// every exchange completes on both sides. Leave (graceful): the leaver does the same, then goes;
// offers that reach it later are never applied (they expire at their sender, costing nothing).
// A joiner takes a live neighbour's model (the default Algorithm::join) and has nothing in
// flight. Nothing is checkpointed: offers in flight are forgotten by a restarted peer.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "algorithms/public_estimates.h"
#include "algorithms/shared_end.h"
#include "algorithms/spare_buffers.h"
#include "engine/algorithm.h"

namespace gossamer::algorithms {

struct AdPsgdOptions {
  std::int64_t period = 1;       // an active peer offers every `period` steps
  std::int64_t outstanding = 2;  // offers in flight at most
  double timeout = 0;            // seconds an offer waits for its answer; 0: --comm-timeout
  std::string end = "steps";     // or "budget": algorithms/shared_end.h

  template <typename Bind>
  void bind(Bind& b) {
    b("period", period,
      "an active peer offers its model to a random passive neighbour every "
      "`period` steps");
    b("outstanding", outstanding,
      "offers an active peer keeps in flight at most (each holds a copy of the model, except "
      "with --compress); an offer due beyond that is skipped");
    b("timeout", timeout,
      "seconds an offer waits for its answer before it is forgotten, and the longest the end of "
      "the run waits for the last answers (0: --comm-timeout)");
    b("end", end,
      "steps (every peer takes the run's steps) or budget (the cluster takes the run's steps x "
      "the members, each peer training until about the same moment: peers of uneven speed)");
  }
  void validate() const;
};

class AdPsgd final : public engine::Algorithm {
 public:
  explicit AdPsgd(AdPsgdOptions options)
      : options_(options),
        end_("ad-psgd", options.end),
        spare_(static_cast<std::size_t>(options.outstanding)) {}
  std::string name() const override { return "ad-psgd"; }
  // Roles from the sorted members; offers to peers that left the view stop counting as in
  // flight (see "Failures").
  void setup(engine::PeerContext& ctx) override;
  // Gradient, exchanges, the local optimizer's step, then an offer (see the header comment).
  double step(engine::PeerContext& ctx) override;
  engine::Invariants invariants() const override { return end_.adjust({}); }
  std::optional<double> runProgress() const override { return end_.progress(); }
  // Answers what is left and waits for the answers to this peer's offers.
  void finish(engine::PeerContext& ctx) override;
  void leave(engine::PeerContext& ctx) override;

  // Whether this peer initiates exchanges in the current view.
  bool active() const { return active_; }
  // Offers in flight (sent, not answered, not forgotten).
  std::size_t outstanding() const { return offers_.size(); }

  // The role of position `index` among `count` sorted members (see "Roles").
  static bool activeAt(std::size_t index, std::size_t count);

  // Message kinds, both to the receiver's inbox. kOffer: payload s, integers {id}; kAnswer:
  // payload (x_j + s) / 2, integers {id of the offer}. Compressed (see "Compressed"): kOffer
  // integers {id, form, number}, payload x_i (an anchor) or the encoded difference; kAnswer
  // integers {id, kHalfDifference} with the encoded d, or {id, kMissed} without payload.
  static constexpr std::uint32_t kOffer = 1;
  static constexpr std::uint32_t kAnswer = 2;
  // The forms of a compressed answer (its integer 1).
  static constexpr std::uint64_t kHalfDifference = 1;  // payload d = (s' - x_j) / 2
  static constexpr std::uint64_t kMissed = 2;          // no payload: the offer was not decoded

 private:
  struct Offer {
    engine::PeerId to = 0;
    // The snapshot s (uncompressed only). Never written while the offer is held; shared with the
    // transport while the send is in flight.
    std::shared_ptr<kernels::Buffer<float>> model;
    engine::Clock::time_point expires;
    bool departed = false;  // `to` left the view: not counted in flight, not waited for
  };

  // Offers held to members of the view (those to departed peers are held, but not counted).
  std::size_t inFlight() const;
  // Answers the offers and applies the answers that arrived; forgets expired offers.
  void exchange(engine::PeerContext& ctx);
  // Whether `m` is shaped as an offer or an answer of its form (else refused and counted).
  bool acceptable(engine::PeerContext& ctx, const engine::Incoming& m);
  void answer(engine::PeerContext& ctx, const engine::Incoming& offer);
  void apply(engine::PeerContext& ctx, const engine::Incoming& answer);
  // Under the run's NormBound: whether `model` (an offer, or an average answering one) is near
  // x_i; else it is refused as an outlier ("ad-psgd.outliers").
  bool withinBound(engine::PeerContext& ctx, const engine::Incoming& m,
                   std::span<const float> model);
  // Sends an offer of the current model to a random passive out-neighbour, if any.
  void offer(engine::PeerContext& ctx);
  // Loops on exchange() until no offer is in flight or `timeout` passed (finish and leave).
  void settle(engine::PeerContext& ctx, const char* when);
  void refuse(engine::PeerContext& ctx, const engine::Incoming& m, const std::string& why);
  engine::Clock::duration timeout(engine::PeerContext& ctx) const;
  void publish(engine::PeerContext& ctx);

  AdPsgdOptions options_;
  SharedEnd end_;
  // Everything runs on the compute thread.
  bool active_ = false;
  bool warnedNoPartner_ = false;
  std::uint64_t nextId_ = 1;
  std::map<std::uint64_t, Offer> offers_;
  SpareBuffers spare_;  // snapshot buffers to reuse (as many as offers may be in flight)
  PairEstimates estimates_{"ad-psgd"};
  kernels::Buffer<float> half_, halfSent_;  // a compressed answer's d and its decoded d^
};

}  // namespace gossamer::algorithms
