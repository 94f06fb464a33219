#include "engine/data/sharding.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "engine/base/enforce.h"
#include "engine/data/random.h"

namespace gossamer::engine::data {
namespace {

constexpr std::uint64_t kShardStream = 0x7368617264;  // "shard"

std::vector<std::vector<std::size_t>> iidShards(std::size_t count, std::size_t shards,
                                                detail::Rng& rng) {
  std::vector<std::size_t> order(count);
  std::iota(order.begin(), order.end(), std::size_t{0});
  detail::shuffle(std::span<std::size_t>(order), rng);
  std::vector<std::vector<std::size_t>> out(shards);
  const std::size_t base = count / shards;
  const std::size_t extra = count % shards;  // the first `extra` shards get one more
  std::size_t begin = 0;
  for (std::size_t s = 0; s < shards; ++s) {
    const std::size_t size = base + (s < extra ? 1 : 0);
    out[s].assign(order.begin() + begin, order.begin() + begin + size);
    begin += size;
  }
  return out;
}

std::vector<std::vector<std::size_t>> dirichletShards(std::span<const std::int32_t> labels,
                                                      std::size_t classes, std::size_t shards,
                                                      double alpha, detail::Rng& rng) {
  std::vector<std::vector<std::size_t>> byClass(classes);
  for (std::size_t i = 0; i < labels.size(); ++i) {
    byClass[static_cast<std::size_t>(labels[i])].push_back(i);
  }
  std::vector<std::vector<std::size_t>> out(shards);
  std::vector<double> logWeights(shards);
  for (std::vector<std::size_t>& members : byClass) {
    detail::shuffle(std::span<std::size_t>(members), rng);
    // Dirichlet(alpha) proportions as normalised gamma variates, computed from their logarithms
    // (small alpha underflows the variates themselves).
    for (double& w : logWeights) w = detail::logGammaVariate(rng, alpha);
    const double top = *std::max_element(logWeights.begin(), logWeights.end());
    double total = 0.0;
    for (double& w : logWeights) {
      w = std::exp(w - top);
      total += w;
    }
    // Cut the class at the rounded cumulative proportions; the last cut is exactly the end.
    const auto n = static_cast<double>(members.size());
    double cumulative = 0.0;
    std::size_t begin = 0;
    for (std::size_t s = 0; s < shards; ++s) {
      cumulative += logWeights[s] / total;
      std::size_t end =
          s + 1 == shards ? members.size() : static_cast<std::size_t>(std::llround(cumulative * n));
      end = std::clamp(end, begin, members.size());
      out[s].insert(out[s].end(), members.begin() + begin, members.begin() + end);
      begin = end;
    }
  }
  // No peer may be left without data: refill each empty shard from the currently largest one
  // (lowest index on ties). Since shards <= count, the largest holds >= 2 samples whenever some
  // shard is empty. Its last element is a random member of that shard (classes were shuffled).
  for (std::size_t s = 0; s < shards; ++s) {
    if (!out[s].empty()) continue;
    auto largest = std::max_element(
        out.begin(), out.end(), [](const auto& a, const auto& b) { return a.size() < b.size(); });
    out[s].push_back(largest->back());
    largest->pop_back();
  }
  return out;
}

}  // namespace

std::vector<std::vector<std::size_t>> shardIndices(std::span<const std::int32_t> labels,
                                                   std::size_t classes,
                                                   const ShardOptions& options) {
  GOSSAMER_ENFORCE_GE(options.shards, 1u, "number of shards");
  GOSSAMER_ENFORCE_LE(options.shards, labels.size(),
                      "cannot split {} samples into {} non-empty shards", labels.size(),
                      options.shards);
  GOSSAMER_ENFORCE_GE(classes, 1u, "number of classes");
  for (std::size_t i = 0; i < labels.size(); ++i) {
    GOSSAMER_ENFORCE(labels[i] >= 0 && static_cast<std::size_t>(labels[i]) < classes,
                     "label {} of sample {} is outside [0, {})", labels[i], i, classes);
  }

  detail::Rng rng = detail::makeRng(options.seed, kShardStream);
  std::vector<std::vector<std::size_t>> out;
  switch (options.kind) {
    case SplitKind::kIid:
      out = iidShards(labels.size(), options.shards, rng);
      break;
    case SplitKind::kDirichlet:
      GOSSAMER_ENFORCE(std::isfinite(options.dirichletAlpha) && options.dirichletAlpha > 0.0,
                       "Dirichlet alpha must be finite and > 0 (got {})", options.dirichletAlpha);
      out = dirichletShards(labels, classes, options.shards, options.dirichletAlpha, rng);
      break;
  }
  GOSSAMER_ENFORCE_EQ(out.size(), options.shards, "invalid SplitKind value {}",
                      static_cast<int>(options.kind));
  for (auto& shard : out) std::sort(shard.begin(), shard.end());
  return out;
}

SplitKind parseSplitKind(const std::string& name) {
  if (name == "iid") return SplitKind::kIid;
  if (name == "dirichlet") return SplitKind::kDirichlet;
  GOSSAMER_THROW("unknown data split '{}' (valid: iid, dirichlet)", name);
}

const char* splitKindName(SplitKind kind) {
  switch (kind) {
    case SplitKind::kIid:
      return "iid";
    case SplitKind::kDirichlet:
      return "dirichlet";
  }
  GOSSAMER_THROW("invalid SplitKind value {}", static_cast<int>(kind));
}

}  // namespace gossamer::engine::data
