// Partitions a dataset's sample indices over the peers of a run. Every peer computes the same
// partition from the same labels and options, so no coordination is needed: peer r takes
// shardIndices(...)[r].
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace gossamer::engine::data {

enum class SplitKind {
  // Uniformly random, equally sized shards: every shard sees the global label distribution.
  kIid,
  // Label skew as in Hsu, Qi and Brown 2019, "Measuring the effects of non-identical data
  // distribution for federated visual classification": each class is spread over the shards in
  // proportions drawn from Dirichlet(alpha). Small alpha (0.1) gives shards dominated by one or
  // two classes; large alpha (1000) approaches iid. Shard sizes vary.
  kDirichlet,
};

struct ShardOptions {
  std::size_t shards = 1;
  SplitKind kind = SplitKind::kIid;
  double dirichletAlpha = 0.5;  // only for kDirichlet
  std::uint64_t seed = 0;
};

// Returns options.shards lists of indices into `labels`: every index appears in exactly one list,
// each list is sorted ascending and none is empty. kIid shard sizes differ by at most 1; for
// kDirichlet an empty shard is given one sample from the (then) largest shard. A pure function of
// its arguments, identical on every platform. Throws gossamer::Error unless 1 <= shards <=
// labels.size(), classes >= 1, every label is in [0, classes) and, for kDirichlet, alpha is
// finite and > 0.
std::vector<std::vector<std::size_t>> shardIndices(std::span<const std::int32_t> labels,
                                                   std::size_t classes,
                                                   const ShardOptions& options);

// "iid" or "dirichlet"; anything else throws gossamer::Error listing the valid names.
SplitKind parseSplitKind(const std::string& name);
// The inverse of parseSplitKind.
const char* splitKindName(SplitKind kind);

}  // namespace gossamer::engine::data
