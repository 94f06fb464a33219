#include "algorithms/builtin.h"

#include "algorithms/adpsgd.h"
#include "algorithms/allreduce_sgd.h"
#include "algorithms/diloco.h"
#include "algorithms/dpsgd.h"
#include "algorithms/dts.h"
#include "algorithms/easgd.h"
#include "algorithms/gosgd.h"
#include "algorithms/local_sgd.h"
#include "algorithms/none.h"
#include "algorithms/sparknet.h"
#include "algorithms/streaming_diloco.h"
#include "algorithms/tree_easgd.h"
#include "engine/builtin.h"

namespace gossamer::algorithms {

void addBuiltinAlgorithms(engine::Registry& registry) {
  auto add = [&](const std::string& name, engine::AlgorithmSpec spec) {
    const std::string description = spec.description;
    registry.algorithms.add(name, description, std::move(spec));
  };
  add("dpsgd", engine::algorithmSpec<Dpsgd, DpsgdOptions>(
                   "decentralized parallel SGD: send w to the neighbours, await theirs, mix "
                   "w = sum_j W_ij w_j (W doubly stochastic), then step with --optimizer; "
                   "dpsgd.plain: the paper's fused w = sum_j W_ij w_j - lr g (Lian et al. 2017)",
                   "ring"));
  add("gosgd",
      engine::algorithmSpec<Gosgd, GosgdOptions>(
          "sum-weighted gossip: merge received (w, alpha), push (w, alpha/2) with probability p "
          "(Blot et al. 2016)",
          "mesh"));
  add("ad-psgd",
      engine::algorithmSpec<AdPsgd, AdPsgdOptions>(
          "asynchronous decentralized SGD: gradient at w, then pairwise averaging "
          "w_i = w_j = (w_i + w_j) / 2 with a random passive neighbour (offer and answer, never "
          "waited for), then the step (Lian et al. 2018)",
          "ring"));
  add("easgd",
      engine::algorithmSpec<Easgd, EasgdOptions>(
          "asynchronous elastic averaging with a center variable on the star's center: "
          "every tau steps pull w~, w -= alpha (w - w~), push the delta (Zhang et al. 2015)",
          "star"));
  add("eamsgd",
      engine::algorithmSpec<Eamsgd, EamsgdOptions>(
          "easgd whose local steps are the local optimizer's momentum steps: --optimizer "
          "nesterov (the paper's) or momentum, not sgd or adam (Zhang et al. 2015)",
          "star"));
  add("tree-easgd",
      engine::algorithmSpec<TreeEasgd, TreeEasgdOptions>(
          "elastic averaging along a tree: send w up every tau_up and down every tau_down steps "
          "by depth, pull toward every received model (Zhang 2016)",
          "tree"));
  add("allreduce-sgd",
      engine::algorithmSpec<AllreduceSgd, AllreduceSgdOptions>(
          "synchronous SGD on the gradient averaged by a pipelined ring all-reduce every step "
          "(the centralized synchronous baseline)",
          "ring"));
  add("sparknet", engine::algorithmSpec<Sparknet, SparknetOptions>(
                      "every tau steps the master (star center) averages the workers' models and "
                      "sends the average back (Moritz et al. 2016)",
                      "star"));
  add("none", engine::algorithmSpec<NoExchange, NoExchangeOptions>(
                  "no exchange: every peer trains alone on its shard (a single peer; the floor of "
                  "every comparison)",
                  "mesh"));
  add("local-sgd", engine::algorithmSpec<LocalSgd, LocalSgdOptions>(
                       "every tau steps the models are averaged by a ring all-reduce, no master "
                       "(SparkNet's rule without a master)",
                       "ring"));
  add("dts", engine::algorithmSpec<Dts, DtsOptions>(
                 "all-reduce of gradients awaited t steps later (delayed update), one per p steps "
                 "(temporally sparse update), with the exact error compensation for sgd, momentum "
                 "and nesterov (Zhu et al. 2019)",
                 "mesh"));
  add("diloco", engine::algorithmSpec<Diloco, DilocoOptions>(
                    "every H inner steps the models are averaged by an all-reduce and an outer "
                    "Nesterov step moves the shared model by the average progress (Douillard et al. "
                    "2023)",
                    "ring"));
  add("streaming-diloco",
      engine::algorithmSpec<StreamingDiloco, StreamingDilocoOptions>(
          "diloco one fragment of the model at a time, H/F steps apart, each fragment's "
          "all-reduce overlapped with tau inner steps and merged with mixing factor alpha "
          "(Douillard et al. 2025)",
          "ring"));
}

engine::Registry makeRegistry() {
  engine::Registry registry = engine::makeBuiltinRegistry();
  addBuiltinAlgorithms(registry);
  return registry;
}

}  // namespace gossamer::algorithms
