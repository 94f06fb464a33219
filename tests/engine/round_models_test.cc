// Evaluations of runs whose peers hold one merged model only at round boundaries
// (PeerContext::roundMerged), in the simulator and in a local cluster: from the first report on,
// each evaluation on the clock evaluates the latest merged model, not the mean of the peers'
// models in between, while the spread is still the peers'. The oracle: a "merged" model of
// zeros, whose softmax is uniform, so its loss is ln(classes) exactly.
#include <cmath>
#include <memory>
#include <vector>

#include <doctest/doctest.h>

#include "algorithms/builtin.h"
#include "engine/runtime/cluster.h"
#include "engine/sim/world.h"
#include "tests/algorithms/algorithm_testing.h"
#include "tests/engine/sim/sim_testing.h"
#include "tests/support/watchdog.h"

namespace gossamer::engine::sim {
namespace {

using namespace std::chrono_literals;

// Local SGD on each peer; after step 10 every peer reports round 1's merged model: zeros.
class ZeroMerge final : public Algorithm {
 public:
  std::string name() const override { return "zero-merge"; }
  void setup(PeerContext& /*ctx*/) override {}
  double step(PeerContext& ctx) override {
    const double loss = ctx.computeGradients();
    ctx.applyOptimizer();
    if (ctx.step() == 9) {
      const std::vector<float> zeros(ctx.params().size(), 0.0f);
      ctx.roundMerged(1, zeros);
    }
    return loss;
  }
};

Registry zeroMergeRegistry() {
  Registry registry = algorithms::makeRegistry();
  registry.algorithms.add("zero-merge", "reports a merged model of zeros after step 10",
                          AlgorithmSpec{"zero-merge", "mesh", {}, [](const OptionValues&) {
                                          return std::make_unique<ZeroMerge>();
                                        }});
  return registry;
}

TEST_CASE("sim: evaluations at round boundaries take the latest merged model") {
  const Registry registry = zeroMergeRegistry();
  SimConfig c = testing::baseConfig(2, "zero-merge", 30);
  c.training.minStepTime = 100ms;
  c.evalSeconds = 0.5;
  const auto data = testing::smallData(registry);
  const SimResult result = simulate(c, registry, data);
  CHECK(result.violations.empty());
  const double uniform = std::log(static_cast<double>(data->test.classes));
  std::size_t before = 0, after = 0;
  for (std::size_t i = 0; i + 1 < result.curve.size(); ++i) {  // the last: the final models
    const runtime::EvalPoint& pt = result.curve[i];
    CAPTURE(pt.wallSeconds);
    if (pt.wallSeconds < 0.95) {  // before step 10 ended (at 1.0 s)
      ++before;
      CHECK(pt.consensus.loss < uniform - 0.01);  // the peers' mean, trained a little
    } else if (pt.wallSeconds > 1.05) {
      ++after;
      CHECK(pt.consensus.loss == doctest::Approx(uniform).epsilon(1e-6));
      CHECK(pt.consensus.distance > 0);  // the peers' own models still differ
    }
  }
  CHECK(before >= 1);
  CHECK(after >= 3);
  // The final evaluation is of the peers' own models.
  CHECK(result.curve.back().consensus.loss < uniform - 0.01);
}

TEST_CASE("local cluster: evaluations at round boundaries take the latest merged model") {
  test::Watchdog watchdog(60s);
  const Registry registry = zeroMergeRegistry();
  auto config = test::algorithmCluster("zero-merge", 2, 40);
  config.peer.training.minStepTime = 30ms;
  config.evalInterval = 100ms;
  const runtime::ClusterResult result =
      runtime::runLocalCluster(config, registry, test::smallData());
  const double uniform = std::log(static_cast<double>(test::smallData()->test.classes));
  std::size_t after = 0;
  for (const runtime::EvalPoint& pt : result.curve) {
    CAPTURE(pt.minStep);
    // Before step 10 a peer may not have reported yet; the last point is the final models'.
    if (pt.minStep < 10 || pt.minStep == 40) continue;
    ++after;
    CHECK(pt.consensus.loss == doctest::Approx(uniform).epsilon(1e-6));
  }
  CHECK(after >= 1);
}

}  // namespace
}  // namespace gossamer::engine::sim
