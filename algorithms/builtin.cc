#include "algorithms/builtin.h"

#include "algorithms/dpsgd.h"
#include "algorithms/gosgd.h"
#include "engine/builtin.h"

namespace gossamer::algorithms {

void addBuiltinAlgorithms(engine::Registry& registry) {
  auto add = [&](const std::string& name, engine::AlgorithmSpec spec) {
    const std::string description = spec.description;
    registry.algorithms.add(name, description, std::move(spec));
  };
  add("dpsgd", engine::algorithmSpec<Dpsgd, DpsgdOptions>(
                   "decentralized parallel SGD: send w to the neighbours, await theirs, "
                   "w = sum_j W_ij w_j - lr g in one fused kernel (Lian et al. 2017)",
                   "ring"));
  add("gosgd",
      engine::algorithmSpec<Gosgd, GosgdOptions>(
          "sum-weighted gossip: merge received (w, alpha), push (w, alpha/2) with probability p "
          "(Blot et al. 2016)",
          "mesh"));
}

engine::Registry makeRegistry() {
  engine::Registry registry = engine::makeBuiltinRegistry();
  addBuiltinAlgorithms(registry);
  return registry;
}

}  // namespace gossamer::algorithms
