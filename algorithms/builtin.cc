#include "algorithms/builtin.h"

#include "algorithms/allreduce_sgd.h"
#include "algorithms/gosgd.h"
#include "engine/builtin.h"

namespace gossamer::algorithms {

void addBuiltinAlgorithms(engine::Registry& registry) {
  auto add = [&](const std::string& name, engine::AlgorithmSpec spec) {
    const std::string description = spec.description;
    registry.algorithms.add(name, description, std::move(spec));
  };
  add("gosgd",
      engine::algorithmSpec<Gosgd, GosgdOptions>(
          "sum-weighted gossip: merge received (w, alpha), push (w, alpha/2) with probability p "
          "(Blot et al. 2016)",
          "mesh"));
  add("allreduce-sgd",
      engine::algorithmSpec<AllreduceSgd, AllreduceSgdOptions>(
          "synchronous SGD on the gradient averaged by a pipelined ring all-reduce every step "
          "(the centralized synchronous baseline)",
          "ring"));
}

engine::Registry makeRegistry() {
  engine::Registry registry = engine::makeBuiltinRegistry();
  addBuiltinAlgorithms(registry);
  return registry;
}

}  // namespace gossamer::algorithms
