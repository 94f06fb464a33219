#include "engine/algorithm.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>

#include <fmt/format.h>
#include <sys/mman.h>

#include "engine/base/enforce.h"
#include "engine/base/log.h"
#include "engine/train/optimizer.h"
#include "kernels/compute.h"

namespace gossamer::engine {

std::span<const float> Incoming::payload(std::size_t index) const {
  GOSSAMER_ENFORCE(index < payloads_.size(),
                   "message of kind {} from peer {:016x} has {} payloads, not {}", kind, from,
                   payloads_.size(), index + 1);
  return payloads_[index].data;
}

double Incoming::scalar(std::size_t index) const {
  GOSSAMER_ENFORCE(index < scalars.size(),
                   "message of kind {} from peer {:016x} has {} scalars, not {}", kind, from,
                   scalars.size(), index + 1);
  return scalars[index];
}

std::uint64_t Incoming::integer(std::size_t index) const {
  GOSSAMER_ENFORCE(index < integers.size(),
                   "message of kind {} from peer {:016x} has {} integers, not {}", kind, from,
                   integers.size(), index + 1);
  return integers[index];
}

namespace {

// The index of the first value that is not finite (NaN or infinite), or data.size(). Compares
// exponent bits so that the loop vectorises (all-ones exponent <=> not finite).
std::size_t firstNonFinite(std::span<const float> data) {
  constexpr std::size_t kBlock = 1024;
  for (std::size_t begin = 0; begin < data.size(); begin += kBlock) {
    const std::size_t end = std::min(data.size(), begin + kBlock);
    std::uint32_t bad = 0;
    for (std::size_t i = begin; i < end; ++i) {
      std::uint32_t bits;
      std::memcpy(&bits, &data[i], sizeof(bits));
      bad |= static_cast<std::uint32_t>((bits & 0x7f800000u) == 0x7f800000u);
    }
    if (bad != 0) {
      for (std::size_t i = begin; i < end; ++i)
        if (!std::isfinite(data[i])) return i;
    }
  }
  return data.size();
}

// What is wrong with `message` against `expected`, or empty.
std::string defect(const Incoming& message, const Expected& expected) {
  if (message.scalars.size() < expected.scalars)
    return fmt::format("{} scalars where {} are needed", message.scalars.size(), expected.scalars);
  if (message.integers.size() < expected.integers)
    return fmt::format("{} integers where {} are needed", message.integers.size(),
                       expected.integers);
  if (message.payloadCount() != expected.payloads.size())
    return fmt::format("{} payloads where {} are needed", message.payloadCount(),
                       expected.payloads.size());
  for (std::size_t i = 0; i < expected.payloads.size(); ++i) {
    const std::span<const float> data = message.payload(i);
    if (data.size() != expected.payloads[i])
      return fmt::format("payload {} has {} values where {} are needed", i, data.size(),
                         expected.payloads[i]);
    if (const std::size_t bad = firstNonFinite(data); bad < data.size())
      return fmt::format("payload {} holds a non-finite value ({} at index {})", i, data[bad], bad);
  }
  for (std::size_t i = 0; i < message.scalars.size(); ++i)
    if (!std::isfinite(message.scalars[i]))
      return fmt::format("scalar {} is not finite ({})", i, message.scalars[i]);
  return {};
}

}  // namespace

bool acceptMessage(const Incoming& message, const Expected& expected, Metrics& metrics,
                   const std::string& who) {
  const std::string problem = defect(message, expected);
  if (problem.empty()) return true;
  log::get("algorithms")
      ->warn("{}: refused a message of kind {} from peer {:016x}: {}", who, message.kind,
             message.from, problem);
  metrics.add(who + ".refused", 1);
  return false;
}

double distanceFromOwn(kernels::Compute& compute, std::span<const float> x,
                       std::span<const float> own, double share) {
  GOSSAMER_ENFORCE(x.size() == own.size() && share > 0,
                   "distanceFromOwn: {} values against {}, share {}", x.size(), own.size(), share);
  // ||x/s - o||^2 = ||x||^2/s^2 - 2 x.o/s + ||o||^2: three reductions, no scratch buffer. The
  // cancellation error is ~1e-16 of ||o||^2 in double, far below any bound worth setting.
  const double xx = compute.norm2(x), oo = compute.norm2(own), xo = compute.dot(x, own);
  const double squared = xx * xx / (share * share) - 2 * xo / share + oo * oo;
  return std::sqrt(std::max(0.0, squared));
}

namespace {

bool refuseOutlier(const Incoming& message, double norm, double ownNorm, const NormBound& bound,
                   Metrics& metrics, const std::string& who, const char* what) {
  log::get("algorithms")
      ->warn(
          "{}: refused an outlier of kind {} from peer {:016x}: {} {:.4g} exceeds {} x {:.4g} "
          "(--max-norm-ratio)",
          who, message.kind, message.from, what, norm, bound.ratio, ownNorm);
  metrics.add(who + ".outliers", 1);
  return false;
}

}  // namespace

bool acceptDistance(const Incoming& message, double distance, double ownNorm,
                    const NormBound& bound, Metrics& metrics, const std::string& who) {
  if (!bound.enabled() || distance <= bound.ratio * ownNorm) return true;
  return refuseOutlier(message, distance, ownNorm, bound, metrics, who,
                       "its distance from this peer's own");
}

bool acceptNearOwn(kernels::Compute& compute, const Incoming& message, std::span<const float> x,
                   std::span<const float> own, const NormBound& bound, Metrics& metrics,
                   const std::string& who, double share) {
  if (!bound.enabled()) return true;
  return acceptDistance(message, distanceFromOwn(compute, x, own, share), compute.norm2(own), bound,
                        metrics, who);
}

bool acceptNormWithin(kernels::Compute& compute, const Incoming& message, std::span<const float> x,
                      std::span<const float> reference, const NormBound& bound, Metrics& metrics,
                      const std::string& who) {
  if (!bound.enabled()) return true;
  const double referenceNorm = compute.norm2(reference);
  const double norm = compute.norm2(x);
  if (norm <= bound.ratio * referenceNorm) return true;
  return refuseOutlier(message, norm, referenceNorm, bound, metrics, who, "its norm");
}

void Incoming::addPayload(std::span<const float> data, std::shared_ptr<const void> owner) {
  payloads_.push_back(Held{data, std::move(owner)});
}

std::uint64_t Tags::forRound(std::uint32_t kind, std::uint64_t step, std::uint32_t round) {
  // splitmix64 over the three values; the top bit is left clear (fresh() tags set it). Each
  // round is a bijection of x for a fixed v and of v for a fixed x, so two tags that differ in one
  // value collide only if their mixes differ in the top bit alone (starting from x = key instead
  // made x ^ (x + c), which maps rounds 0 and 2 alike).
  const std::uint64_t key = (static_cast<std::uint64_t>(kind) << 32) ^ round;
  std::uint64_t x = 0;
  for (std::uint64_t v : {key, step}) {
    x ^= v + 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    x ^= x >> 31;
  }
  return x & ~(std::uint64_t{1} << 63);
}

double Algorithm::step(PeerContext& ctx) {
  beforeStep(ctx);
  const double loss = ctx.computeGradients();
  ctx.applyOptimizer();
  afterStep(ctx);
  return loss;
}

CaughtUpModel::CaughtUpModel(std::uint64_t step, std::vector<PeerId> from, std::size_t floats)
    : step(step), from(std::move(from)), size_(floats) {
  // In 2 MiB pages where the kernel allows it (transparent huge pages on madvise), which the
  // catch-up maps in ahead of the chunks (catch_up.cc): 512 times fewer faults than 4 KiB pages.
  constexpr std::size_t kHuge = std::size_t{2} << 20;
  const std::size_t bytes =
      std::max<std::size_t>((floats * sizeof(float) + kHuge - 1) / kHuge * kHuge, kHuge);
  void* memory = std::aligned_alloc(kHuge, bytes);
  GOSSAMER_ENFORCE(memory != nullptr, "cannot allocate {} bytes for a model", bytes);
  madvise(memory, bytes, MADV_HUGEPAGE);  // advice: without it, 4 KiB pages
  data_.reset(static_cast<float*>(memory));
}

void CaughtUpModel::Free::operator()(float* p) const { std::free(p); }

std::optional<CaughtUpModel> PeerContext::catchUp(std::span<const PeerId> candidates,
                                                  ModelHolders /*holders*/,
                                                  Clock::duration timeout) {
  for (PeerId from : candidates) {
    if (from == self()) continue;
    std::optional<Incoming> model = pullModel(from, timeout);
    if (!model || model->payloadCount() != 1 || model->payload(0).size() != params().size())
      continue;
    CaughtUpModel out(model->step, {from}, params().size());
    std::copy(model->payload(0).begin(), model->payload(0).end(), out.params().begin());
    return out;
  }
  return std::nullopt;
}

namespace {

std::string peerList(const std::vector<PeerId>& peers) {
  std::string out;
  for (PeerId p : peers) out += fmt::format("{}{:016x}", out.empty() ? "" : ", ", p);
  return out;
}

// Takes a caught-up model: params, step, a fresh optimizer state.
void adopt(PeerContext& ctx, const CaughtUpModel& model) {
  ctx.compute().upload(ctx.params(), model.params());
  ctx.optimizer().resetState();
  ctx.adoptStep(model.step);
}

}  // namespace

void Algorithm::join(PeerContext& ctx) {
  std::vector<PeerId> candidates;
  for (const topology::WeightedPeer& n : ctx.graph().inNeighbors(ctx.self()))
    candidates.push_back(n.id);
  for (PeerId member : ctx.members()) {
    if (member != ctx.self() &&
        std::find(candidates.begin(), candidates.end(), member) == candidates.end())
      candidates.push_back(member);
  }
  // A member answers at its next step boundary, and a step of a synchronous algorithm may itself
  // wait a whole comm timeout (for this very joiner, among others): a pull waits twice that, or
  // a loaded machine's joiner would start alone from the initial model at step 0. The members of
  // a lockstep algorithm hold one model: it comes from several of them at once.
  const ModelHolders holders = lockstep() ? ModelHolders::identical : ModelHolders::one;
  if (std::optional<CaughtUpModel> model = ctx.catchUp(candidates, holders, 2 * ctx.commTimeout())) {
    adopt(ctx, *model);
    log::get("peer")->info("peer {:016x} joined at step {} with the model of {}", ctx.self(),
                           ctx.step(), peerList(model->from));
    return;
  }
  log::get("peer")->warn("peer {:016x}: no member sent its model; starting from the initial one",
                         ctx.self());
}

bool Algorithm::adoptModelOf(PeerContext& ctx, PeerId from) {
  std::optional<CaughtUpModel> model =
      ctx.catchUp(std::span<const PeerId>(&from, 1), ModelHolders::one, 2 * ctx.commTimeout());
  if (!model) return false;
  adopt(ctx, *model);
  return true;
}

void Algorithm::realign(PeerContext& ctx, PeerId ahead) {
  const std::uint64_t before = ctx.step();
  if (adoptModelOf(ctx, ahead))
    log::get("peer")->info(
        "peer {:016x}: back with {:016x} after a partition: from step {} to its step {} and model",
        ctx.self(), ahead, before, ctx.step());
  else
    log::get("peer")->warn("peer {:016x}: {:016x} sent no model; this side stays at step {}",
                           ctx.self(), ahead, before);
}

GatherResult GatherResult::of(std::span<const PeerId> from,
                              std::vector<std::optional<Incoming>>& got) {
  GatherResult result;
  for (std::size_t i = 0; i < from.size(); ++i) {
    if (got[i]) {
      result.messages.push_back(std::move(*got[i]));
    } else {
      result.missing.push_back(from[i]);
    }
  }
  return result;
}

}  // namespace gossamer::engine
