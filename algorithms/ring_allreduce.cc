#include "algorithms/ring_allreduce.h"

#include <algorithm>
#include <vector>

#include "engine/base/enforce.h"

namespace gossamer::algorithms {
namespace {

// A fingerprint of the member list (FNV-1a over the ids).
std::uint64_t membersFingerprint(std::span<const engine::PeerId> members) {
  std::uint64_t hash = 14695981039346656037ull;
  for (engine::PeerId id : members) {
    for (int byte = 0; byte < 8; ++byte) {
      hash ^= (id >> (8 * byte)) & 0xff;
      hash *= 1099511628211ull;
    }
  }
  return hash;
}

// integers of every message: the fingerprint, then kData (payload 0 is the data) or kAbort.
constexpr std::uint64_t kData = 0;
constexpr std::uint64_t kAbort = 1;

}  // namespace

Slice ringSlice(std::size_t size, std::size_t parts, std::size_t index) {
  GOSSAMER_ENFORCE(index < parts, "slice {} of {} parts", index, parts);
  const std::size_t base = size / parts;
  const std::size_t extra = size % parts;
  return Slice{index * base + std::min(index, extra), base + (index < extra ? 1 : 0)};
}

std::size_t ringPieces(std::size_t count, std::size_t pipeline) {
  return std::min(count, pipeline);
}

const char* ringOutcomeName(RingOutcome outcome) {
  switch (outcome) {
    case RingOutcome::kComplete:
      return "complete";
    case RingOutcome::kMissing:
      return "missing";
    case RingOutcome::kAborted:
      return "aborted";
    case RingOutcome::kMismatch:
      return "mismatch";
    case RingOutcome::kInvalid:
      return "invalid";
  }
  return "?";
}

RingOutcome ringAllReduce(engine::PeerContext& ctx, std::span<const float> input,
                          std::span<float> output, const RingAllReduceOptions& options) {
  GOSSAMER_ENFORCE_EQ(input.size(), output.size(), "ring all-reduce: input and output sizes");
  GOSSAMER_ENFORCE(options.pipeline >= 1 && options.pipeline <= kMaxRingPipeline,
                   "ring all-reduce: pipeline must be in [1, {}], not {}", kMaxRingPipeline,
                   options.pipeline);
  GOSSAMER_ENFORCE(options.kind < engine::kMaxAlgorithmKind,
                   "ring all-reduce: message kind {} is reserved", options.kind);
  kernels::Compute& compute = ctx.compute();
  // The ring: the caller's order, else the members as they are (no copy on the step's path).
  const std::span<const engine::PeerId> members =
      options.order.empty() ? std::span<const engine::PeerId>(ctx.members()) : options.order;
  GOSSAMER_ENFORCE(
      options.order.empty() || std::is_permutation(members.begin(), members.end(),
                                                   ctx.members().begin(), ctx.members().end()),
      "ring all-reduce: the order is not a permutation of the members");
  const std::size_t n = members.size();
  if (n == 1) {
    if (output.data() != input.data()) compute.copy(output, input);
    return RingOutcome::kComplete;
  }
  const auto rank = static_cast<std::size_t>(std::find(members.begin(), members.end(), ctx.self()) -
                                             members.begin());
  GOSSAMER_ENFORCE(rank < n, "ring all-reduce: peer {:016x} is not a member", ctx.self());
  const engine::PeerId right = members[(rank + 1) % n];
  const engine::PeerId left = members[(rank + n - 1) % n];
  const std::uint64_t fingerprint = membersFingerprint(members);
  const engine::Clock::duration timeout =
      options.timeout > engine::Clock::duration::zero() ? options.timeout : ctx.commTimeout();
  const std::size_t phases = 2 * (n - 1);
  const auto reducePhases = n - 1;  // then all-gather
  const auto scale = options.op == ReduceOp::kMean ? 1.0f / static_cast<float>(n) : 1.0f;

  // Chunk sent in phase p: (r - p) mod n; received: (r - p - 1) mod n (= sent in phase p + 1).
  auto chunkReceived = [&](std::size_t phase) { return (rank + 2 * n - phase - 1) % n; };
  auto piecesOf = [&](std::size_t chunk) {
    return ringPieces(ringSlice(input.size(), n, chunk).count, options.pipeline);
  };
  auto piece = [&](std::size_t chunk, std::size_t k) {
    const Slice c = ringSlice(input.size(), n, chunk);
    const Slice s = ringSlice(c.count, piecesOf(chunk), k);
    return Slice{c.offset + s.offset, s.count};
  };
  auto tag = [&](std::size_t phase, std::size_t k) {
    return engine::Tags::forRound(options.kind, options.step,
                                  static_cast<std::uint32_t>(phase * options.pipeline + k));
  };
  // A partial sum of the reduce phases holds phase + 1 inputs; the all-gather's is the result.
  auto withinBound = [&](const engine::Incoming& m, std::size_t phase, std::span<const float> own) {
    const engine::NormBound bound = ctx.normBound();
    if (!bound.enabled()) return true;
    const double share = phase < reducePhases            ? static_cast<double>(phase + 1)
                         : options.op == ReduceOp::kMean ? 1.0
                                                         : static_cast<double>(n);
    const engine::DeviceView x = ctx.upload(m.payload(0));
    return engine::acceptNearOwn(compute, m, x, own, bound, ctx.metrics(), options.who, share);
  };
  auto send = [&](std::size_t phase, std::size_t k, std::span<const float> data,
                  std::uint64_t what) {
    engine::Message message{.kind = options.kind,
                            .step = options.step,
                            .tag = tag(phase, k),
                            .integers = {fingerprint, what}};
    if (what == kData) message.payloads.push_back(data);
    ctx.send(right, message);
  };

  if (options.discardEarlier) ctx.inbox().discardBefore(options.step);
  // Phase 0 sends this peer's own chunk, from the input; each later send forwards what the
  // previous phase just produced.
  for (std::size_t k = 0; k < piecesOf(rank); ++k) {
    const Slice s = piece(rank, k);
    send(0, k, input.subspan(s.offset, s.count), kData);
  }
  for (std::size_t phase = 0; phase < phases; ++phase) {
    const std::size_t chunk = chunkReceived(phase);
    for (std::size_t k = 0; k < piecesOf(chunk); ++k) {
      const Slice s = piece(chunk, k);
      engine::GatherResult got =
          ctx.gather(std::span<const engine::PeerId>(&left, 1), tag(phase, k), timeout);
      RingOutcome failure = RingOutcome::kComplete;
      if (got.messages.empty()) {
        failure = RingOutcome::kMissing;
      } else {
        const engine::Incoming& m = got.messages.front();
        if (m.integers.size() != 2 || m.integers[0] != fingerprint) {
          failure = RingOutcome::kMismatch;
        } else if (m.integers[1] != kData) {
          failure = RingOutcome::kAborted;
        } else if (!engine::acceptMessage(m, {.payloads = {s.count}, .integers = 2}, ctx.metrics(),
                                          options.who) ||
                   !withinBound(m, phase, input.subspan(s.offset, s.count))) {
          failure = RingOutcome::kInvalid;
        }
      }
      if (failure != RingOutcome::kComplete) {
        // The right neighbour waits for (phase + 1, k) next: tell it to stop waiting.
        if (phase + 1 < phases) send(phase + 1, k, {}, kAbort);
        return failure;
      }
      const std::span<float> out = output.subspan(s.offset, s.count);
      const std::span<const float> received = got.messages.front().payload(0);
      if (phase < reducePhases) {
        // out = input + partial sum of the previous peers (scaled by 1/n on the last addition).
        const float w = phase + 1 == reducePhases ? scale : 1.0f;
        const engine::DeviceView partial = ctx.upload(received);
        compute.weightedSum(out, {{w, input.subspan(s.offset, s.count)}, {w, partial}});
      } else {
        compute.upload(out, received);
      }
      if (phase + 1 < phases) send(phase + 1, k, out, kData);
    }
  }
  return RingOutcome::kComplete;
}

}  // namespace gossamer::algorithms
