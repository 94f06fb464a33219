// The minimum quorum of time-boxed rounds (`<algorithm>.quorum`; algorithms/README.md, "Minimum
// quorum"): a member that misses a round's deadline joins the next round instead of holding the
// others. Without a coordinator: each round has a leader, a member every member names the same
// way, who decides the round's contributors and tells every member; the all-reduce then runs over
// those contributors (its fingerprint carries them, so members that disagree fail the round at
// message speed) and the others listen to its result.
//
//   leader       the member that took the most steps in the last complete round this peer saw
//                (the speeds every member of that round received, bit for bit), ties to the
//                lower rank; the first member of the view before one, and after a failed round
//                or a view change (so members that disagreed meet again)
//   ready        a member due for round r sends `ready(r, n_i)` (its steps since it last
//                contributed) to the leader, once; one step early when it sees the round end
//                after its next step (TimedRounds::due), so the decision travels meanwhile
//   closing      the leader decides as soon as every member is ready (all of them contribute),
//                or once the round's length and grace have passed on its clock with at least q
//                members ready (those contribute; grace: TimedRounds::kGrace x the length).
//                It never closes without a member on time
//                when the ready members' steps would spend the run's budget, or leave less than
//                a round like the last one before it (the run's last round merges every member:
//                a round may take more steps than its members said when ready). auto's first round (one step each, no length yet)
//                closes as soon as q members are ready
//   decision     `decided(r, contributors)` to every member; a member takes the first decision
//                of a round from anyone (a joiner does not know the leader yet)
//   left out     a member not among the contributors listens to the round's result and keeps
//                its unmerged steps (it rebases them on the result) for the next round it makes
//
// Messages: kind kKind of the algorithm; step = the round; integers {kReady} with scalar n_i, or
// {kDecided, id...} (at most the members). Anything else, or a decision naming a non-member, is
// refused (a warning, "<who>.refused") and dropped. Compute thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "engine/algorithm.h"

namespace gossamer::algorithms {

// `<algorithm>.quorum`: "all" (every member, the default), a number of members >= 1, or a fraction
// of the members in (0, 1) (rounded up).
struct QuorumSize {
  std::size_t count = 0;
  double fraction = 0;
  bool enabled() const { return count > 0 || fraction > 0; }
  // The contributors a round of `members` needs, in [1, members].
  std::size_t of(std::size_t members) const;
  // Throws gossamer::Error naming `<algorithm>.quorum` for anything else.
  static QuorumSize parse(const std::string& algorithm, const std::string& text);
};

// A member ready for a round, and its steps since it last contributed.
struct ReadyMember {
  engine::PeerId id = 0;
  double steps = 0;
};

// The leader's rule, a pure function (the tests' oracle): the contributors in member order when
// the round closes now, else nullopt.
struct CloseInput {
  std::span<const engine::PeerId> members;
  std::span<const ReadyMember> ready;  // distinct members
  std::size_t quorum = 0;              // QuorumSize::of(members)
  bool pastDeadline = false;           // the round's length and grace passed on the leader's clock
  // Cluster steps this round may take without everyone (TimedRounds: those left before the
  // budget, less one round like the last); nullopt while the leader does not know the spend.
  std::optional<double> stepsToEnd;
};
std::optional<std::vector<engine::PeerId>> closeRound(const CloseInput& input);

class RoundQuorum {
 public:
  // The message kind of the quorum in every algorithm with time-boxed rounds.
  static constexpr std::uint32_t kKind = 7;

  RoundQuorum(std::string who, QuorumSize size);
  bool enabled() const { return size_.enabled(); }

  // This round's leader as this peer knows it.
  engine::PeerId leader(const engine::PeerContext& ctx) const;
  // This peer is ready for `round` with `steps` steps: tells the leader (once per round).
  void ready(engine::PeerContext& ctx, std::uint64_t round, double steps);
  // The contributors of `round` once decided (polls; never waits).
  std::optional<std::vector<engine::PeerId>> decided(engine::PeerContext& ctx, std::uint64_t round);
  // Waits for the decision of `round` (deciding it, when this peer leads, by closeRound with
  // `closeAt` as the deadline and `stepsToEnd`) until `deadline`; nullopt when none came in time
  // or the view changed.
  std::optional<std::vector<engine::PeerId>> await(engine::PeerContext& ctx, std::uint64_t round,
                                                   engine::Clock::time_point closeAt,
                                                   std::optional<double> stepsToEnd,
                                                   engine::Clock::time_point deadline);
  // A round completed with `steps[i]` steps from members()[i] (0: did not contribute): the next
  // leader. Rounds up to `round` are forgotten.
  void completed(const engine::PeerContext& ctx, std::uint64_t round,
                 std::span<const double> steps);
  // A round failed: the next leader is the view's first member.
  void failed(std::uint64_t round);

 private:
  void poll(engine::PeerContext& ctx);
  void absorb(engine::PeerContext& ctx, const engine::Incoming& message);
  void forget(std::uint64_t round);

  std::string who_;
  QuorumSize size_;
  engine::PeerId leader_ = 0;                                     // 0: the view's first member
  std::vector<engine::PeerId> leaderView_;                        // the view leader_ was chosen in
  std::map<std::uint64_t, std::vector<ReadyMember>> ready_;       // by round, as the leader
  std::map<std::uint64_t, std::vector<engine::PeerId>> decided_;  // by round
  std::uint64_t readySent_ = 0;  // the last round this peer said it was ready for
  std::uint64_t forgotten_ = 0;  // rounds up to this one are over
};

}  // namespace gossamer::algorithms
