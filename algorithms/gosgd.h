// gosgd: sum-weighted gossip SGD (Blot, Picard, Cord and Thome, "Gossip training for deep
// learning", 2016; the push-sum protocol of Kempe, Dobra and Gehrke, FOCS 2003). Langer et al.
// (seeds/003) figure 17; the rule is algorithms/README.md's "gosgd", with acknowledged transfers.
//
//   communication    push to one uniformly random peer of the topology, asynchronous; each
//                    transfer is acknowledged, and sent again until it is
//   messages / step  p transfers on average, each (w_i, alpha_i, id); one small ack per merge
//                    (a peer of weight 0 sends none); compressed, one small kMissed per
//                    difference that could not be decoded
//   bytes on wire    p x |w| x 4 per step and peer (plus retransmissions of lost transfers);
//                    compressed, a transfer is the codec's share of that, except anchors (first
//                    contact with a partner, after a membership change or a reported miss) and
//                    retransmissions, which are float32 (see "Compressed")
//   staleness        unbounded: whatever arrived is merged, weighted by its alpha
//   in flight        unacknowledged transfers bounded in bytes by the link's bandwidth-delay
//                    product, estimated from the acks (or max_inflight_bytes); a draw that would
//                    exceed it is skipped ("gosgd.throttled")
//   invariant        sum over peers of alpha + escrow, plus the mass lost with dead peers, = 1;
//                    with lr 0, sum alpha_i w_i (escrow and lost included) never changes,
//                    compressed or not
//   paper            Blot et al. 2016 (Langer et al. figure 17); compressed, the public estimates
//                    of CHOCO-SGD (Koloskova, Stich and Jaggi, ICML 2019) per pair of peers
//
// Every peer starts with alpha_i = 1/n and the same w~0. Before each local step it merges every
// received transfer (w_j, a_j) it has not merged before:
//   w_i = (alpha_i w_i + sum_j a_j w_j) / (alpha_i + sum_j a_j) (one fused kernel),
//   alpha_i += sum_j a_j,
// and acknowledges it. After the step, with probability p, it halves alpha_i and sends
// (w_i, alpha_i, id) to a random out-neighbour (the default topology is the full mesh).
//
// Weight 0. A peer whose alpha_i is 0 (a late joiner, or a peer restored from a checkpoint of
// weight 0, that has received nothing yet) sends nothing: it has no mass to give, and two such
// peers exchanging would average with 0/0. Should transfers of total weight 0 reach a peer of
// weight 0 anyway, it keeps its model (counted in "gosgd.weightless"): no merge divides by 0.
//
// Received messages are checked before use (engine::acceptMessage, and a weight in [0, 1]): a
// transfer of the wrong size or with a non-finite value is refused with a warning naming its
// sender, counted in "gosgd.refused", and not acknowledged (its weight stays in the sender's
// escrow, so the mass is not lost; the sender stops choosing that peer once it has resent). So is,
// under the run's NormBound (--max-norm-ratio), a transfer whose model (compressed: the estimate
// it makes) is far from w_i ("gosgd.outliers"). An outlier is judged once: its retransmissions
// are dropped unseen ("gosgd.outliers_resent"). Judged again, a model refused early could pass
// late, once this peer's own norm has grown past the bound's reach, and carry with it the weight
// its sender has gathered meanwhile (a peer whose transfers are all refused keeps the weight it
// receives: it only accumulates).
//
// Acknowledged transfers (algorithms/reliable_delivery.h has the contract: escrow until the ack,
// retransmission after a timeout, exactly-once merge, the bound on bytes in flight, what a life's
// end does to the escrow). A message that is lost must not bias the average, so the sender keeps
// what it sent, (a, w, id), in ESCROW: still its mass, not merged into w_i, until the receiver's
// ack comes. Without an ack within `retransmit` x --comm-timeout it sends the same (a, w, id)
// again: the receiver merges an id at most once (per sender) and acknowledges duplicates again.
// The retransmission repeats the ESCROWED model, not the current one: a receiver that merged the
// first copy and lost only the ack keeps that copy, so re-binding the weight to a newer w would
// change sum alpha_i w_i by a (w_new - w_old). Everything is asynchronous: merges and acks happen
// on the compute thread at step boundaries, nothing waits on a round trip while training. Every
// gosgd message goes to the receiver's inbox (PeerContext::send), drained at its step boundaries.
// The escrowed model is sent from the escrow buffer itself (Message::owner keeps it alive and
// unchanged until the transport is done: no staging copy on a CPU peer); a buffer is reused only
// once the transport has let go of it, and finish() and leave() release them all.
//
// Bytes in flight. Every unacknowledged transfer holds a model copy in escrow and, while it is
// queued, a share of the link: a gossip draw goes ahead only when its transfer fits the bound on
// the bytes in escrow (always when nothing is in flight), and is skipped otherwise
// ("gosgd.throttled"). max_inflight_bytes = 0 (the default) estimates the bound as twice the
// bandwidth-delay product measured from the acks (InflightBound, reliable_delivery.h); a fixed
// count of transfers would be too few for a small model on a long fat link and too many for a
// large one.
//
// The ledger. live mass = sum over live peers of (alpha + escrow); a peer that leaves the view
// takes its own alpha and escrow with it, and the escrow of the others toward it is NOT
// reclaimed (it may have merged it before dying) but moved to `lost`. So
//   live mass + mass lost with dead peers = 1,
// exactly up to the transfers a peer merged but could not acknowledge before it died (and the
// other way round), which an observer of both sides resolves (see the tests). With no failure,
// finish() drains every escrow, and sum alpha_i = 1 and sum alpha_i w_i = the initial average
// (lr 0) hold exactly at the end.
//
// Finish. After the runtime's barrier every peer merges and acknowledges what is left, resends
// what is unacknowledged, and announces SETTLED (no escrow left) to the others; it returns once it
// is settled and has heard every other member settle (nobody owes it anything), or after
// --comm-timeout. Announcements repeat every few milliseconds while it waits (Inbox::wait until a
// message comes or the next announcement is due), so a lost one costs nothing.
//
// Leave (Algorithm::leave, a graceful departure). The leaver announces LEAVING, hands its whole
// alpha and model to a live peer as one acknowledged transfer (and again whatever it merges
// meanwhile), and waits (at most --comm-timeout) until that is acknowledged and every other
// member has answered SETTLED: it stopped choosing the leaver and has nothing unacknowledged
// toward it. The leaver exits with alpha 0; the survivors' alphas sum to 1.
//
// Compressed (--compress). Every ordered pair (i, j) is a stream of CHOCO-SGD's public estimates
// (PairEstimates, public_estimates.h): x^_i->j, the estimate of w_i that j holds, the same bits
// on both sides. A transfer to j is numbered on that stream and is either
//   an ANCHOR: w_i in float32, weight alpha_i / 2, x^_i->j = w_i on both sides, at the first
//     transfer to j, after setup() (a membership change), and after j reported a miss; or
//   a DIFFERENCE: q = C(w_i - x^_i->j), weight a = gamma alpha_i / 2 (gosgd.gamma); both sides
//     add the decoded q to x^_i->j (Compressible::sent gives the sender the receiver's bits), and
//     v = x^_i->j is the model the transfer stands for.
// The receiver merges v with weight a by the rule above. The sender escrows (a, v) and keeps the
// mass that did not travel: w_i = (alpha_i w_i - a v) / (alpha_i - a), alpha_i -= a; so sum
// alpha_i w_i is exact whatever the codec dropped (CHOCO's push-sum form: a sender gives exactly
// what the receiver gets). The residual w_i - v thus stays on the sender, and comes back in its
// next difference; it grows when a codec sends too small a share for the step, which is why a
// sparse codec takes a small gamma (default as dpsgd.gamma: 1 for fp16, bf16, int8 and int4, twice
// the fraction for top-k, the fraction for random-k). A whole handover (leave()) is an anchor.
//
// Retransmission (the contract). A transfer stands for ONE model v, whichever copy of it arrives:
// the first copy (a difference, or an anchor) and every resent copy, which is the anchor of the
// same number carrying v from the escrow in float32. The sender advanced x^_i->j once, when it
// first sent; the receiver advances its copy once, by the first copy it decodes: a difference
// applies only to the estimate of the number just before it, an anchor sets the estimate unless
// it holds a later number (a resent old transfer never moves it back), and a duplicate id is
// acknowledged, not merged. So:
//   - first copy lost: the resent anchor brings v (and x^ = v unless a later one came first);
//   - only the ack lost: the receiver merged v; the resent anchor is a duplicate, acknowledged;
//   - a difference that does not follow (an earlier one was lost, or the receiver's view
//     changed): not merged, not acknowledged, and reported in a kMissed message; the sender makes
//     its next transfer to that peer an anchor and resends at once every unacknowledged transfer
//     to it up to the reported one ("gosgd.anchors_requested"). A lost report costs one
//     retransmission timeout.
// Either way the receiver merges v exactly once and the escrow (a, v) leaves the sender with its
// ack: the ledger and sum alpha_i w_i are exact under lost transfers and lost acks. Memory: two
// buffers of |w| per partner (x^_i->j and x^_j->i) and two scratch buffers, plus the escrow.
//
// Join. A peer that joins a cluster already training gets a copy of a live peer's model (the
// default Algorithm::join) and weight 0: the mass of the cluster stays 1, and the newcomer gains
// weight from the transfers it receives (sending nothing until then, see "Weight 0").
//
// Lives and the weight of the dead. Every Gosgd instance is one LIFE of its peer, numbered by the
// wall clock (ns, PeerContext::wallNow: virtual time in a simulated world) when it was made: a
// peer restarted with the same identity is a later life. Every message carries a header: the
// sender's life, the life of the addressee as the sender knows it (0: none yet), and the sender's
// REPORT, (seq, alpha_i) at sending (seq counts the messages of that life). Transfer ids, dedup
// state, estimates and acks belong to one life of each side, so:
//   - a message of an earlier life of its sender than one already heard is stale: dropped
//     ("gosgd.stale");
//   - a message of a later life means the sender restarted: its earlier life ended (as below),
//     what this peer merged from it and its estimates are forgotten (the new life numbers its
//     transfers from 1 again; keeping the old ids would take its transfers for duplicates and
//     acknowledge them unmerged, destroying their weight), and the escrow toward it is lost;
//   - a message addressed to an earlier life of this peer is dropped (an ack for the ids of a
//     previous life, or a transfer its previous life may have merged before it died); a transfer
//     is answered with an empty ack, so that its sender learns this life and gives up its escrow.
// A life ENDS when its peer leaves the view or a later life of it is heard from. The weight it
// held then is what survivors know of it: its last report, the one with the highest seq any of
// them received. The peer that sees a life end records that report and sends it to every member
// (kDead); every SETTLED at finish() carries all the records again, and a peer takes the highest
// seq for each life. Every peer hears every other member settle before it returns, so at the end
// the survivors agree on the weight each ended life held ("gosgd.dead_weight"; the restarted life
// re-enters with weight 0, see resumedLate). A report is alpha_i without the escrow: what a dead
// peer had in flight was merged by its receiver or is lost with it (and escrow toward it is in
// "gosgd.lost"). Two peers that die close together: if B merged a transfer of A's and then told
// a survivor its weight, while the survivors' last report of A predates the transfer, the weight
// would count twice (in both records). So every message also RELAYS the latest reports of the
// lives whose transfers its sender merged within the last --comm-timeout, and a receiver keeps
// them as if it had heard them (a report of another life of the peer than the one it knows is
// ignored); the transfer's own header is later than the weight it carries. The live mass +
// gosgd.dead_weight is then at most 1 beyond what a dead peer merged from another dead one more
// than a comm timeout before its last message, with nothing newer heard from the other since. A
// life that comes back (a partition healed, same life) is alive again: its record no longer counts.
// Lives compare by the clock: a restart on a host whose clock stepped back more than the downtime
// would be taken for stale.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "algorithms/network_survey.h"
#include "algorithms/public_estimates.h"
#include "algorithms/reliable_delivery.h"
#include "algorithms/shared_end.h"
#include "engine/algorithm.h"
#include "engine/options.h"

namespace gossamer::algorithms {

struct GosgdOptions {
  // Probability of gossiping after a step; auto (the default): kLinkShare x this peer's step time
  // x its links' bandwidth / the model's bytes, within [0.01, 1] (network_fit.h), from its own
  // measurements (push-sum stays exact with any p_i: no agreement), recomputed at its survey
  // steps and view changes; kProvisionalP until it has measured its step and a path.
  engine::Auto<double> p = engine::Auto<double>::automatic();
  static constexpr double kProvisionalP = 0.1;
  double retransmit = 0.05;  // of --comm-timeout: resend an unacknowledged transfer after this
  std::int64_t maxInflightBytes = 0;  // bound on unacknowledged bytes; 0: estimated
  double gamma = 0;  // with --compress: a difference carries gamma alpha_i / 2; 0: the codec's
  std::string end = "steps";  // or "budget": algorithms/shared_end.h

  template <typename Bind>
  void bind(Bind& b) {
    b("p", p,
      "probability of sending (w, alpha/2) to a random peer after a step, in (0, 1]; auto: what "
      "keeps this peer's links 80% busy at most, from its measured step time and bandwidth");
    b("retransmit", retransmit,
      "an unacknowledged transfer is sent again after this fraction of --comm-timeout");
    b("max_inflight_bytes", maxInflightBytes,
      "bound on the bytes of unacknowledged transfers (a gossip draw that would exceed it is "
      "skipped; one transfer always may go); 0: the bandwidth-delay product estimated from the "
      "acks' round trips and rate");
    b("gamma", gamma,
      "with --compress: the share of alpha_i / 2 (and of the mass) a compressed transfer moves, "
      "in (0, 1] (0: 1 for fp16, bf16, int8 and int4, twice the fraction for top-k, the fraction "
      "for random-k); anchors move alpha_i / 2");
    b("end", end,
      "steps (every peer takes the run's steps) or budget (the cluster takes the run's steps x "
      "the members, each peer training until about the same moment: peers of uneven speed)");
  }
  void validate() const;
  // gamma, or its default for `codec` when gamma is 0.
  double gammaFor(const kernels::Codec& codec) const;
};

class Gosgd final : public engine::Algorithm {
 public:
  explicit Gosgd(GosgdOptions options);
  std::string name() const override { return "gosgd"; }
  void setup(engine::PeerContext& ctx) override;
  void beforeStep(engine::PeerContext& ctx) override;
  void afterStep(engine::PeerContext& ctx) override;
  void finish(engine::PeerContext& ctx) override;
  void join(engine::PeerContext& ctx) override;
  void leave(engine::PeerContext& ctx) override;
  // A checkpoint keeps this peer's weight with its model (escrow included: unacknowledged
  // transfers are not known to have arrived). A whole cluster resumed together keeps its mass;
  // a single peer restarted after a crash drops it (resumedLate). A weight of 0 is restored as
  // such (see "Weight 0").
  void saveState(engine::AlgorithmState& state) const override;
  void loadState(const engine::AlgorithmState& state) override;
  // A peer restored alone, into a cluster that went on without it, comes back with weight 0:
  // the others counted its weight as lost when it was declared failed, and its checkpoint may
  // hold more than it had left when it died (it gave weight away since). So no weight is
  // created by a restart ("gosgd.restored_weight_dropped" says how much the checkpoint held).
  void resumedLate(engine::PeerContext& ctx) override;
  // What every run keeps, faults included (engine/invariants.h): the survivors that settled (no
  // "gosgd.unsettled": they heard every member of their view settle, the premise of the
  // agreement) agree on the weight the dead took with them ("gosgd.dead_weight"), and their
  // weights ("gosgd.alpha") plus it make at most 1: weight is never created, restarts included.
  // A survivor that did not settle was usually dropped by the others near the end (a false
  // failure) and counted dead by them: its weight is in theirs.
  engine::Invariants invariants() const override;
  std::optional<double> runProgress() const override { return end_.progress(); }

  // This peer's weight, not counting its escrow.
  double alpha() const { return alpha_; }
  // Weight sent and not acknowledged yet (still this peer's mass).
  double escrowed() const { return delivery_.escrowed(); }
  // Escrow toward peers that left the view before they acknowledged it.
  double lost() const { return delivery_.lost(); }

  // The whole ledger with its counterparts, for observers that see both sides of a transfer
  // (tests): cumulative weights merged from and acknowledged by each peer (in its current life),
  // and the escrow and the lost weight toward each.
  struct Ledger {
    double alpha = 0;
    std::map<engine::PeerId, double> mergedFrom, ackedBy, escrowTo, lostTo;
  };
  Ledger ledger() const;

  // The weight ended lives held, as peer `self` with `members` in its view knows it (see "Lives
  // and the weight of the dead").
  double deadWeight(const std::vector<engine::PeerId>& members, engine::PeerId self) const;

  // Message kinds, all to the receiver's inbox. Every message begins with the header: integers
  // {life, addressee's life or 0, seq, k} and k relayed reports {peer, life, seq}, scalars
  // {alpha} and the k relayed weights (headerIntegers, headerScalars; at least kHeaderIntegers
  // and kHeaderScalars); after it: kTransfer: payload w, scalars {weight}, integers {id, floor}
  // (every id below floor toward the receiver was acknowledged), compressed {id, floor, form,
  // number} with payload w (an anchor) or the encoded difference (see "Compressed"); kAck: integers
  // = the ids; kSettled: the sender owes the receiver nothing and will send it nothing new, with
  // the records of ended lives as kDead; kLeaving: the sender is leaving (choose someone else);
  // kMissed: integers = the ids of differences the receiver could not decode (resend them as
  // anchors); kDead: records of ended lives, integers {peer, life, seq}... and scalars {alpha}...
  // (the report).
  static constexpr std::uint32_t kTransfer = 1;
  static constexpr std::uint32_t kAck = 2;
  static constexpr std::uint32_t kSettled = 3;
  static constexpr std::uint32_t kLeaving = 4;
  static constexpr std::uint32_t kMissed = 5;
  static constexpr std::uint32_t kDead = 6;
  static constexpr std::size_t kHeaderIntegers = 4;
  static constexpr std::size_t kHeaderScalars = 1;
  // The header's length in a message with `integers` (kHeaderIntegers + 3k, kHeaderScalars + k).
  static std::size_t headerIntegers(const std::vector<std::uint64_t>& integers);
  static std::size_t headerScalars(const std::vector<std::uint64_t>& integers);

 private:
  // A peer's report: its weight when it sent message `seq` of its life.
  struct Report {
    std::uint64_t seq = 0;
    double alpha = 0;
  };
  using Life = std::pair<engine::PeerId, std::uint64_t>;

  // A message of `kind` to `to` with the header (this life, to's, the next seq, `alpha`).
  engine::Message stamped(engine::PeerContext& ctx, std::uint32_t kind, engine::PeerId to,
                          double alpha);
  engine::Message stamped(engine::PeerContext& ctx, std::uint32_t kind, engine::PeerId to) {
    return stamped(ctx, kind, to, alpha_);
  }
  // Reads and strips the header of `m`, and applies "Lives": false when `m` is to be dropped
  // (malformed header, stale, or addressed to a previous life of this peer).
  bool admit(engine::PeerContext& ctx, engine::Incoming& m);
  // The current life of `peer` ended (it left the view, or `restarted`: a later life spoke).
  void endLife(engine::PeerContext& ctx, engine::PeerId peer, bool restarted);
  // A report of `life`, from itself or relayed: the latest of its peer's current life, and of its
  // record if it ended.
  void hear(const Life& life, const Report& report);
  // Keeps the report of the ended life `life` if it is later than the one held.
  void noteDead(const Life& life, const Report& report);
  // Reads records of ended lives (kDead, kSettled) after the header.
  void readDead(engine::PeerContext& ctx, const engine::Incoming& m);
  // Appends every record of an ended life to `message`.
  void appendDead(engine::Message& message) const;

  // Acks, merges (acknowledged) and retransmissions: what every step boundary and wait does.
  void exchange(engine::PeerContext& ctx);
  // Whether a transfer fits (acceptMessage, weight in [0, 1]); else refused and counted.
  bool acceptTransfer(engine::PeerContext& ctx, const engine::Incoming& m);
  bool refuse(engine::PeerContext& ctx, const engine::Incoming& m, const std::string& why);
  void merge(engine::PeerContext& ctx, std::vector<engine::Incoming>& transfers);
  // Moves weight into escrow with the model `to` will merge, and sends it: alpha_i / 2 (or, as a
  // compressed difference, gamma alpha_i / 2), or all of alpha_i when `whole` (leave()).
  void transfer(engine::PeerContext& ctx, engine::PeerId to, bool whole);
  // Sends the escrowed transfer `id` again (or a plain one the first time): its model in float32,
  // on a stream of estimates as the anchor of its number; nothing once the buffers are released.
  void sendEscrow(engine::PeerContext& ctx, std::uint64_t id);
  // `to` reported transfers it could not decode (kMissed), the last of them `upTo`: the next
  // transfer to it anchors, and every unacknowledged one up to `upTo` is resent now.
  void resendAnchors(engine::PeerContext& ctx, engine::PeerId to, std::uint64_t upTo);
  void broadcast(engine::PeerContext& ctx, std::uint32_t kind,
                 const std::vector<engine::PeerId>& to);
  // Loops on exchange() until `done()` or the deadline (finish and leave); `announce` is sent
  // every tick to the members that have not settled.
  template <typename Done>
  bool waitUntil(engine::PeerContext& ctx, std::uint32_t announce, Done done);
  std::vector<engine::PeerId> unsettledOthers(engine::PeerContext& ctx) const;
  void publish(engine::PeerContext& ctx);
  // Whether a gossip may go to `peer`: not a leaver, and not one whose ack is overdue (it may be
  // dead; the mass sent there would be lost with it).
  bool choosable(engine::PeerId peer) const;
  engine::Clock::duration retransmitAfter(engine::PeerContext& ctx) const;
  std::size_t transferBytes(engine::PeerContext& ctx) const;
  // Auto p from this peer's own step time and paths (when measured).
  void fitP(engine::PeerContext& ctx);

  GosgdOptions options_;
  std::optional<double> chosenP_;  // auto p, once this peer measured enough
  StepClock stepClock_;            // auto p: this peer's step before its speed report
  SharedEnd end_;
  // Everything runs on the compute thread.
  double alpha_ = 0;
  bool started_ = false;
  // Escrow, acks, retransmissions, exactly-once merges and the bound on bytes in flight.
  ReliableDelivery delivery_{options_.maxInflightBytes};
  std::size_t inflightPeak_ = 0;      // the most bytes in escrow after a gossip draw
  std::uint64_t throttled_ = 0;       // for finish()'s summary line ("gosgd.throttled")
  std::set<engine::PeerId> leavers_;  // announced LEAVING: never chosen again
  std::set<engine::PeerId> settled_;  // announced SETTLED
  std::map<engine::PeerId, engine::Clock::time_point> settledSent_;
  PairEstimates estimates_{"gosgd"};
  // Lives (see "Lives and the weight of the dead").
  std::uint64_t life_ = 0;  // drawn at the first setup, from the context's wall clock
  std::uint64_t seq_ = 0;   // messages sent by this life (stamped)
  std::map<engine::PeerId, std::uint64_t> lives_;  // the latest life heard from each peer
  std::map<engine::PeerId, Report> reports_;       // its latest report in that life
  std::map<Life, Report> dead_;                    // ended lives and their last reports
  // Peers whose transfers this life merged, and when last: their reports go with every message
  // for a comm timeout after (see "Lives").
  std::map<engine::PeerId, engine::Clock::time_point> mergedFrom_;
};

}  // namespace gossamer::algorithms
