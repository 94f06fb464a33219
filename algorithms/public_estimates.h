// CHOCO-SGD's public estimates (Koloskova, Stich and Jaggi, "Decentralized Stochastic Optimization
// and Gossip Algorithms with Compressed Communication", ICML 2019, algorithm 2): how a model
// travels compressed between neighbours that exchange it at every step. algorithms/README.md,
// "Compression with error feedback", has the rule; dpsgd.h uses it.
//
//   state        x^_i, the estimate of this peer's model that its neighbours hold, and x^_j, this
//                peer's copy of the estimate of each neighbour j (the same bits as j's own x^_j)
//   a message    q_i = C(w_i - x^_i), the codec's encoding of the difference; both sides then
//                add the decoded q_i to their x^_i (the runtime hands the sender the decoded
//                values through Compressible::sent, so the bits agree)
//   an anchor    w_i itself, in float32: x^_i = w_i on both sides. Sent at the first exchange after
//                reset() (the start, a membership change) and when a neighbour asks for it
//   invariant    while nothing is lost, every neighbour's x^_i equals this peer's, bit for bit
//
// What C leaves out of a difference stays in w_i - x^_i and travels in the next ones: the
// estimates are the error feedback, and no residual is kept (--error-feedback does not apply).
//
// Losses heal by anchors. Messages are numbered; a peer that misses a message of neighbour j (it
// did not come by the deadline, was refused, or a difference came whose number does not follow
// the last one seen) forgets x^_j and asks j for an anchor in each of its next messages until
// one comes; j answers at its next message, with one anchor to every receiver, unless it sent one
// after the last message the asker had seen from it (that one is still on its way). So the requests reach j only if j receives this peer's
// messages: every edge must be used both ways (dpsgd checks that the graph is undirected).
// Messages of one sender arrive in order (one link each); a peer that takes messages from one
// stream only misses nothing else.
//
// Under the run's NormBound (engine/algorithm.h), a message whose estimate x^_j is far from this
// peer's model is dropped like a lost one (counted in "<who>.outliers"): it asks for an anchor, and an anchor
// far from x^_i is dropped too.
//
// Messages carry integers {form, number, then (asked peer, the last number seen from it)...};
// the payload is the difference or the model. A message without integers is a plain model (a
// peer that does not compress), taken as an anchor.
// Memory: |w| x 4 bytes for x^_i, as much for each neighbour's x^_j, and two scratch buffers of
// |w| (the difference, and the decoded copy), in the Compute's memory. Compute thread only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "engine/algorithm.h"
#include "kernels/compute.h"

namespace gossamer::algorithms {

class PublicEstimates {
 public:
  // The forms of a message (its integer 0).
  static constexpr std::uint64_t kAnchor = 1;
  static constexpr std::uint64_t kDifference = 2;

  // `who` names the algorithm in warnings and metrics ("<who>.anchors", "<who>.estimate_misses").
  explicit PublicEstimates(std::string who) : who_(std::move(who)) {}

  // Forgets every estimate: the next message is an anchor, and every neighbour's estimate is
  // unknown until its anchor comes. Estimates of peers not in `neighbours` are freed.
  void reset(std::span<const engine::PeerId> neighbours);

  // Sends w (this peer's model) to `to` as an anchor or a compressed difference (see above), and
  // updates x^_i as the receivers will. `message` gives the kind, step and tag; its payloads,
  // integers and compressible marks are set here.
  void send(engine::PeerContext& ctx, std::span<const engine::PeerId> to,
            std::span<const float> w, engine::Message message);

  // A message of neighbour `from` (already accepted: one payload of the model's size): updates
  // x^_from (a plain model is an anchor), or forgets it on a difference that does not follow the
  // last message seen from `from` (and asks for an anchor). Reads the requests for this peer's
  // anchor.
  void receive(engine::PeerContext& ctx, const engine::Incoming& message);
  // Neighbour `from` sent nothing usable this round: x^_from is unknown until its anchor.
  void missed(engine::PeerId from);

  // x^_i, and x^_j (nullopt while unknown here).
  std::span<const float> own() const { return own_.span(); }
  std::optional<std::span<const float>> of(engine::PeerId j) const;

 private:
  struct Estimate {
    kernels::Buffer<float> x;
    bool known = false;
    std::uint64_t seq = 0;  // the number of the last message seen from this neighbour
  };

  std::string who_;
  kernels::Buffer<float> own_, difference_, sent_;
  bool ownShared_ = false;  // the neighbours hold x^_i (false: the next message is an anchor)
  bool anchorAsked_ = false;                // a neighbour asked for an anchor
  std::uint64_t sequence_ = 0;                // messages sent
  std::optional<std::uint64_t> lastAnchor_;  // the sequence number of the last anchor sent
  std::map<engine::PeerId, Estimate> neighbours_;
};

// CHOCO-SGD's default consensus step size for `codec` (dpsgd.gamma, gosgd.gamma = 0): 1 for the
// dense codecs, about the share a sparse codec sends (larger ones diverge; see dpsgd.cc).
double chocoGamma(const kernels::Codec& codec);

// Public estimates kept per PAIR of peers, for algorithms whose partner changes at every exchange
// (gosgd, ad-psgd): one stream per ordered pair, i -> j carrying C(w_i - x^_i->j), where x^_i->j
// is the estimate of i's model that j holds, both ends in the same bits (Compressible::sent).
//
//   state        per partner j: x^_i->j (out: what j holds of this peer, and whether it holds it)
//                and x^_j->i (in: this peer's copy of what j sent, and whether it is known)
//   a message    integers {form, number} (appended by send()), payload w (kAnchor, float32) or
//                the difference from x^_i->j (kDifference, compressed on the wire); numbers count
//                the messages of one stream, from 1
//   an anchor    x^ = w on both sides. Sent on first contact, after reset() (a membership change),
//                after unshare() (the partner reported a miss), and always without a codec
//   invariant    whenever the receiver's x^_j->i is known, it is the sender's x^_j->i as it was
//                after the message of that number, bit for bit
//
// receive() applies a difference only to the estimate of the number just before it; any other
// difference is a miss (the caller reports it to the sender, which unshares and anchors). An
// anchor carries its own number and sets the estimate unless a later one is held: a resent old
// message (gosgd's retransmissions are anchors of the model first sent) never moves the estimate
// back. Memory: two buffers of |w| per partner, and two scratch buffers of |w|, in the Compute.
// Compute thread only.
class PairEstimates {
 public:
  explicit PairEstimates(std::string who) : who_(std::move(who)) {}

  // Forgets every estimate (a membership change): every partner gets an anchor next, and every
  // partner's estimate here is unknown until its anchor. Frees the partners not in `members`.
  void reset(std::span<const engine::PeerId> members);

  // What send() sent: its form and number, and x^_i->to after it (the model the receiver will
  // take, valid until the next send to `to`).
  struct Sent {
    std::uint64_t form = 0;
    std::uint64_t number = 0;
    std::span<const float> estimate;
  };
  // Sends w to `to` on its stream: an anchor when `anchor`, when `to` does not hold x^_i->to, or
  // without a codec (payload w, with message.owner as given), else the difference (compressed;
  // owner cleared). Appends {form, number} to message.integers and sets the payload and the
  // compressible mark; updates x^_i->to as the receiver will.
  Sent send(engine::PeerContext& ctx, engine::PeerId to, std::span<const float> w,
            engine::Message message, bool anchor = false);
  // Whether `to` holds x^_i->to: the next send() to it may be a difference.
  bool shares(engine::PeerId to) const {
    const auto it = out_.find(to);
    return it != out_.end() && it->second.shared;
  }
  // Forgets both streams with `peer` (it restarted: its numbers begin again): an anchor each way
  // comes first.
  void forget(engine::PeerId peer) {
    out_.erase(peer);
    in_.erase(peer);
  }
  // `to` lost x^_i->to (it reported a miss, or a message to it may have been lost unseen): the
  // next message to it is an anchor.
  void unshare(engine::PeerId to);

  // The model that message `number` of form `form` from `from` stands for: an anchor's payload
  // (x^_from->i set from it unless a later one is held), or x^_from->i plus a difference that
  // follows the last number seen (valid until the next receive from `from`); nullopt for any
  // other difference (a miss: x^_from->i is unknown until an anchor, counted in
  // "<who>.estimate_misses"). `payload` has the model's size (the caller accepted it).
  std::optional<engine::DeviceView> receive(engine::PeerContext& ctx, engine::PeerId from,
                                            std::uint64_t form, std::uint64_t number,
                                            std::span<const float> payload);

 private:
  struct Out {
    kernels::Buffer<float> x;
    bool shared = false;
    std::uint64_t number = 0;  // messages sent on this stream
  };
  struct In {
    kernels::Buffer<float> x;
    bool known = false;
    std::uint64_t number = 0;  // the message x is the estimate after
  };

  std::string who_;
  kernels::Buffer<float> difference_, sent_;
  std::map<engine::PeerId, Out> out_;
  std::map<engine::PeerId, In> in_;
};

}  // namespace gossamer::algorithms
