// Ring all-reduce over a PeerContext: the sum or the mean of one flat float buffer across
// ctx.members(), for any algorithm (allreduce-sgd's gradients, local-sgd's models). Langer et al.
// (seeds/003) section 3.4.1 and footnote 3: the ring algorithm, lower bound delay
// 2 (n-1)/n T_w + (n-1)/n R_w.
//
//   communication    ring over the sorted members: rank r sends to r + 1 and receives from r - 1
//   messages         2 (n-1) x pipeline per all-reduce and peer (fewer when chunks are tiny)
//   bytes on wire    2 (n-1)/n x |buffer| x 4 per peer, plus a header per message
//   staleness        none: every receive waits for this round's data, up to a deadline
//
// The buffer is cut into n near-equal chunks (ringSlice). Reduce-scatter then all-gather, 2 (n-1)
// phases: in phase p rank r sends chunk (r - p) mod n to its right and receives chunk
// (r - p - 1) mod n from its left; in the first n - 1 phases it adds what it receives to its own
// input (after n - 1 of them it owns the reduced chunk r + 1), in the last n - 1 it copies it. The
// chunk received in phase p is the one sent in phase p + 1, and every chunk is cut again into
// `pipeline` sub-chunks, each sent as soon as its part of the previous phase has arrived and been
// reduced: while one sub-chunk is reduced, the next ones are on the wire. Each reduced chunk is
// computed once, on one peer, and copied to the others, so every member ends with the same bits.
// The mean folds 1/n into the last reduction (one fused weightedSum).
//
// Failures. Every receive waits at most `timeout` (and ends early when the left neighbour leaves
// the view). A peer that gives up sends its right neighbour an abort marker in place of the next
// message it owed it, so a failure ends the all-reduce of every member at message speed instead of
// one timeout per hop; messages carry a fingerprint of the member list (in Message::integers), so
// peers whose views differ fail the round instead of mixing unrelated chunks. A chunk of the wrong
// size or with a non-finite value is refused (engine::acceptMessage: a warning naming its sender,
// counted in "<who>.refused") and fails the round like a missing one; so does, under the run's
// NormBound, a chunk far from this peer's own input there (a partial sum of k inputs divided by
// k, the all-gather's sum by n: engine::acceptNearOwn, counted in "<who>.outliers"). The caller
// falls back for that round (e.g. keeps its local value) and the next round uses the new view.
// After a failure `output` holds partial sums; `input` is untouched unless it is `output`.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "engine/algorithm.h"

namespace gossamer::algorithms {

// The elements [offset, offset + count) of a buffer.
struct Slice {
  std::size_t offset = 0;
  std::size_t count = 0;
  friend bool operator==(const Slice&, const Slice&) = default;
};

// Part `index` of `size` elements cut into `parts` contiguous near-equal parts: the first
// size % parts parts hold one element more. Throws gossamer::Error unless index < parts.
Slice ringSlice(std::size_t size, std::size_t parts, std::size_t index);

// How many sub-chunks a chunk of `count` elements is sent in: min(pipeline, count) (none when
// the chunk is empty, so no message is empty).
std::size_t ringPieces(std::size_t count, std::size_t pipeline);

enum class ReduceOp { kSum, kMean };

struct RingAllReduceOptions {
  // The message kind of this all-reduce's messages (the algorithm's own, < kMaxAlgorithmKind) and
  // the round's step: tags are Tags::forRound(kind, step, phase x pipeline + sub-chunk), so every
  // member must call with the same kind, step and pipeline, and one (kind, step) names one
  // all-reduce. Queued messages of earlier steps are discarded
  // unless discardEarlier is false.
  std::uint32_t kind = 0;
  std::uint64_t step = 0;
  ReduceOp op = ReduceOp::kMean;
  std::size_t pipeline = 4;  // sub-chunks per chunk, in [1, kMaxRingPipeline]
  // The deadline of every receive; zero: ctx.commTimeout().
  engine::Clock::duration timeout{};
  // The calling algorithm's name, for the warnings and the "<who>.refused" count of refused
  // chunks.
  std::string who = "ring-allreduce";
  // The ring: a permutation of ctx.members(), the same on every member (network_ring.h); empty:
  // ctx.members() as they are (sorted ids). Members whose orders differ fail the round as
  // kMismatch: the order is part of the messages' fingerprint.
  std::span<const engine::PeerId> order;
  // Drops the queued messages of earlier steps, of every kind, before the round (the caller's
  // earlier rounds are over). False for a collective that runs beside rounds still in flight (a
  // survey beside dpsgd's overlapped rounds, dts's windows, streaming-diloco's fragments).
  bool discardEarlier = true;
};

// The runtime stages every send in a buffer of a small pool and every receive in one of a small
// pool (8 and 16 by default); more sub-chunks in flight than that would only wait.
inline constexpr std::size_t kMaxRingPipeline = 16;

enum class RingOutcome {
  kComplete,  // `output` holds the reduction
  kMissing,   // the left neighbour sent nothing in time, or left the view
  kAborted,   // a peer upstream gave up (its own left neighbour was missing)
  kMismatch,  // the left neighbour sent a message of another view (a membership change)
  kInvalid,   // the left neighbour sent a chunk of the wrong size or with a non-finite value
};

const char* ringOutcomeName(RingOutcome outcome);

// Reduces `input` over ctx.members() into `output` (same size; identical to `input` or disjoint
// from it). Compute thread; blocks until done or failed (see the header comment). With one
// member, output = input and no message is sent. Throws gossamer::Error on misuse (sizes, a
// pipeline out of range, a kind out of range).
RingOutcome ringAllReduce(engine::PeerContext& ctx, std::span<const float> input,
                          std::span<float> output, const RingAllReduceOptions& options);

}  // namespace gossamer::algorithms
