// A non-blocking all-reduce over a PeerContext: the sum or the mean of one flat float buffer
// across ctx.members(), started at one step and collected at a later one, so that training goes on
// while it travels (DTS's delayed update, streaming DiLoCo's overlapped fragments). Several rounds
// may be in flight at once.
//
//   communication    direct reduce-scatter, then all-gather, over the full mesh of members:
//                    member r owns chunk r (ringSlice(size, n, r)); every member sends chunk r of
//                    its input to r, r adds the n-1 contributions to its own and sends the reduced
//                    chunk to every other member
//   messages         2 (n-1) x pieces per round and peer
//   bytes on wire    2 (n-1)/n x |buffer| x 4 per round and peer (the ring's), spread over n-1
//                    links at once instead of one
//   latency          2 one-way latencies per round (the ring: 2 (n-1) in sequence)
//   staleness        none within a round: it completes with every member's data, or fails
//
// Progress. Nothing runs in the background: every call (poll, wait, start) takes this
// all-reduce's messages out of the inbox and advances the rounds in flight with them, on the
// compute thread. An algorithm that polls once per step makes a round take at least two steps
// (contributions arrive, reduced chunks arrive); one that waits makes it take two latencies.
// Messages of a round this peer has not started yet (a faster member's) are kept until it does.
//
// Bits. Each reduced chunk is computed once, by its owner, and copied to the others, so every
// member of a complete round holds the same bits. The owner adds the contributions in arrival
// order (floating-point addition is not associative: two runs may differ in the last bits).
//
// Failures. A round fails (and every member is told with an abort marker, so they fail at message
// speed) when the members are no longer those it started with (someone left, died or joined: the
// next round uses the new view), when a message of another view arrives (the members' views
// differ), when a payload is refused (engine::acceptMessage: a warning naming its sender, counted
// in "<who>.refused"; or, under the run's NormBound, a contribution or a mean far from this
// peer's own input there, a sum by n: counted in "<who>.outliers"), or when wait() reaches its
// deadline. The caller falls back for that round.
//
// Compression. With `compress` set and a codec in the run, contributions travel encoded and the
// owner sends each reduced piece encoded to every member, itself included, taking its own decoded
// copy like the others do: every member still ends with the same bits. The owner sums in float32
// (its own contribution exactly, the others' decoded). With error feedback on, both directions
// keep a residual, as DoubleSqueeze does (Tang et al., ICML 2019): each member one for what its
// contributions left out, each owner one for what its reduced pieces left out, both of the
// input's size and kept by this all-reduce per stream (start()'s `stream`): the rounds of one
// stream are the successive values of one quantity (the gradients; one fragment of the model), so
// what one round left out is added to the next round of the same stream and never to another's.
// An algorithm that all-reduces one quantity uses the one default stream. Without the owner's
// residual, a sparsifying codec would drop most of every mean for good.
//
// Backup workers (`backups` = k > 0, allreduce-sgd's; Chen et al. 2016, "Revisiting distributed
// synchronous SGD"). Each piece of a chunk is reduced from the first n - k contributions that reach
// its owner (its own counted once it started the round), the mean divided by that count; a later
// contribution is dropped ("<who>.late"). The owner still sends the same bits to every member, so
// the members of a complete round agree even where two pieces counted different contributors.
// Only owners hold a round up, so the caller names them (setOwners: members known to be quick,
// the same list on every member); a member that fell behind listen()s to a round without
// contributing, to take its result. A member done sending then owes only its reduced chunk.
//
// Memory. A round holds two buffers of the input's size in the Compute's memory (what this peer
// sends, and the result), kept for reuse by release(). Sends leave without a staging copy on host
// memory. Compressed with error feedback, each stream keeps its two residuals (2 x its input's
// size) for the life of the all-reduce.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "algorithms/ring_allreduce.h"
#include "algorithms/spare_buffers.h"
#include "engine/algorithm.h"

namespace gossamer::algorithms {

struct AsyncAllReduceOptions {
  // The message kind of this all-reduce (the algorithm's own, < kMaxAlgorithmKind): an algorithm
  // with two independent all-reduces gives them two kinds.
  std::uint32_t kind = 0;
  ReduceOp op = ReduceOp::kMean;
  // Messages each chunk is cut into, in [1, kMaxRingPipeline]: pieces reduced as they arrive, so
  // the owner's additions overlap the transfer of the next pieces.
  std::size_t pieces = 4;
  // The calling algorithm's name, for warnings and the "<who>.refused" count.
  std::string who = "async-allreduce";
  // Future rounds (started by faster members, not yet by this peer) whose messages are kept; the
  // oldest are dropped beyond that, counted in "<who>.dropped".
  std::size_t maxFutureRounds = 4;
  // Let contributions and reduced chunks travel compressed when the run has a codec
  // (PeerContext::compression()); see "Compression" above.
  bool compress = false;
  // Backup workers: contributions a piece may go without (see "Backup workers"); at most n - 1
  // are used in a round of n members.
  std::size_t backups = 0;
};

enum class RoundStatus { kPending, kComplete, kFailed, kUnknown };

// Backup workers' flags (allreduce-sgd's and dts's rounds): one float per member after the
// contribution, 1 at the sender's index. writePresence() writes this peer's into `flags` (the
// Compute's memory, ctx.members().size() floats); presentMembers() reads a complete round's mean
// of them: the members whose contribution made it (the next rounds' owners).
void writePresence(engine::PeerContext& ctx, std::span<float> flags);
std::vector<engine::PeerId> presentMembers(engine::PeerContext& ctx, std::span<const float> flags);

class AsyncAllReduce {
 public:
  explicit AsyncAllReduce(AsyncAllReduceOptions options);
  ~AsyncAllReduce();
  AsyncAllReduce(const AsyncAllReduce&) = delete;
  AsyncAllReduce& operator=(const AsyncAllReduce&) = delete;

  // Starts round `round` of `input` (the Compute's memory) over ctx.members() as they are now.
  // `round` names the round on every member (a step count, say): each member starts the same
  // rounds, in increasing order. Copies `input` first, so the caller may change it as soon as
  // start() returns; sends this peer's contributions and returns without waiting. With one member
  // the round is complete at once. `stream` names the error feedback's residuals the round uses
  // when compressed (see "Compression"); the same on every member, and every round of a stream of
  // the same size (a stream whose size changes starts its residuals again at 0). Compute thread.
  // Throws gossamer::Error on misuse (a round not above the last one started, a kind out of range).
  void start(engine::PeerContext& ctx, std::uint64_t round, std::span<const float> input,
             std::uint64_t stream = 0);
  // The same without the copy: the round keeps `input` and sends from it in place, so the caller
  // must not write it until the round is released (input(round) reads it back meanwhile).
  void start(engine::PeerContext& ctx, std::uint64_t round,
             std::shared_ptr<kernels::Buffer<float>> input, std::uint64_t stream = 0);

  // Round `round` without an input of this peer (`size` floats, as the members' inputs): it takes
  // the round's result, and reduces its chunk from the others' contributions if it owns one. For
  // a member that fell behind a round the others went on with (backups). Compute thread.
  void listen(engine::PeerContext& ctx, std::uint64_t round, std::size_t size);
  // The members that own chunks in the rounds started from now on (the default: every member, also
  // when the list is empty or names one that is not a member of the round's view). Must be the
  // same on every member of a round: a round whose members disagree fails as kMismatch.
  void setOwners(std::vector<engine::PeerId> owners) {
    owners_ = std::move(owners);
    contributors_ = 0;
  }
  // Only `contributors` contribute to the rounds started from now on, and own their chunks; each
  // piece is reduced from exactly their contributions (a mean divides by their count), and the
  // other members listen(). The same list on every member of a round (time-boxed rounds' quorum,
  // round_quorum.h); empty: every member contributes.
  void setContributors(std::vector<engine::PeerId> contributors) {
    contributors_ = contributors.size();
    owners_ = std::move(contributors);
  }

  // Takes every queued message of this all-reduce out of the inbox and advances the rounds in
  // flight; fails those whose members changed. Never waits. Compute thread.
  void poll(engine::PeerContext& ctx);

  // Polls until `round` is complete or failed, or `deadline` passes (the round then fails as
  // kMissing). Returns how it ended (kComplete for a round complete before the call).
  RingOutcome wait(engine::PeerContext& ctx, std::uint64_t round,
                   engine::Clock::time_point deadline);

  RoundStatus status(std::uint64_t round) const;
  // How a failed round failed (kComplete when it did not fail).
  RingOutcome outcome(std::uint64_t round) const;
  // The reduction of a complete round, in the Compute's memory; valid until release(round).
  std::span<const float> result(std::uint64_t round) const;
  // What this peer put into a round it started (its copy, or the buffer it handed over).
  std::span<const float> input(std::uint64_t round) const;
  // A buffer of `size` floats in ctx's Compute: a released round's, once the transport is done
  // with it, or a new one. For callers that build the next input in place.
  std::shared_ptr<kernels::Buffer<float>> buffer(engine::PeerContext& ctx, std::size_t size);
  // Forgets a complete or failed round and frees its buffers. A round still pending is failed
  // first (the members are told).
  void release(engine::PeerContext& ctx, std::uint64_t round);
  // Fails and forgets every round (e.g. when the algorithm resets after a membership change).
  void releaseAll(engine::PeerContext& ctx);

  // Rounds started and not released.
  std::size_t rounds() const { return rounds_.size(); }
  // The latest round whose messages arrived before this peer started it (0: none): where the
  // members are, for a peer that numbers its rounds itself and may have fallen behind (a joiner
  // of time-boxed rounds, algorithms/time_box.h). As of the last poll.
  std::uint64_t latestHeard() const { return future_.empty() ? 0 : future_.rbegin()->first; }
  // The latest such round of which a reduced chunk arrived (0: none): a round that is complete
  // at its owner already, without this peer's contribution (backups). As of the last poll.
  std::uint64_t latestReducedHeard() const;

  // The error feedback of `stream` (the Compute's memory): what this peer's contributions left out
  // so far, and what its reduced pieces (as an owner, on its own chunk) left out; both empty
  // before the stream's first compressed round with error feedback. For tests and diagnostics.
  struct Residuals {
    std::span<const float> contributions, reduced;
  };
  Residuals residuals(std::uint64_t stream) const;

 private:
  struct Round;
  struct Feedback {
    kernels::Buffer<float> contributions, reduced;
  };
  // `input` null: listen().
  void begin(engine::PeerContext& ctx, std::uint64_t round,
             std::shared_ptr<kernels::Buffer<float>> input, std::size_t size, std::uint64_t stream);
  void contribute(engine::PeerContext& ctx, Round& r, std::span<float> residual);
  Round& find(std::uint64_t round);
  const Round* lookup(std::uint64_t round) const;
  void absorb(engine::PeerContext& ctx, engine::Incoming message);
  void absorbInbox(engine::PeerContext& ctx);  // every queued message of this all-reduce
  void handle(engine::PeerContext& ctx, Round& r, const engine::Incoming& message);
  void fail(engine::PeerContext& ctx, Round& r, RingOutcome why);
  void sendReduced(engine::PeerContext& ctx, Round& r, std::size_t piece);
  void completeIfDone(Round& r);
  // Whether the round still waits for something from the member of rank `sender`: its
  // contribution to this peer's chunk, or a piece of its reduced chunk.
  bool owes(const Round& r, std::size_t sender) const;

  AsyncAllReduceOptions options_;
  std::map<std::uint64_t, std::unique_ptr<Round>> rounds_;
  // Messages of rounds not started here yet, by round.
  std::map<std::uint64_t, std::vector<engine::Incoming>> future_;
  // Buffers of released rounds, reused once the transport is done with them: enough for the
  // rounds of a few windows in flight.
  SpareBuffers spare_{8};
  // Per stream: the error feedback of compressed contributions and of compressed reduced pieces
  // (none until a round of the stream needs them).
  std::map<std::uint64_t, Feedback> feedback_;
  std::vector<engine::PeerId> owners_;  // setOwners()'s or setContributors()'s
  std::size_t contributors_ = 0;        // setContributors()'s count (0: n - backups contribute)
  std::uint64_t lastStarted_ = 0;
  bool started_ = false;
};

}  // namespace gossamer::algorithms
