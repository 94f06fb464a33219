#include "algorithms/builtin.h"

#include "algorithms/easgd.h"
#include "algorithms/gosgd.h"
#include "algorithms/tree_easgd.h"
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
  add("easgd",
      engine::algorithmSpec<Easgd, EasgdOptions>(
          "asynchronous elastic averaging with a center variable on the star's center: "
          "every tau steps pull w~, w -= alpha (w - w~), push the delta (Zhang et al. 2015)",
          "star"));
  add("eamsgd",
      engine::algorithmSpec<Eamsgd, EamsgdOptions>(
          "easgd whose local steps are Nesterov momentum steps (Zhang et al. 2015)", "star"));
  add("tree-easgd",
      engine::algorithmSpec<TreeEasgd, TreeEasgdOptions>(
          "elastic averaging along a tree: send w up every tau_up and down every tau_down steps "
          "by depth, pull toward every received model (Zhang 2016)",
          "tree"));
}

engine::Registry makeRegistry() {
  engine::Registry registry = engine::makeBuiltinRegistry();
  addBuiltinAlgorithms(registry);
  return registry;
}

}  // namespace gossamer::algorithms
