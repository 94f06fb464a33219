// What the easgd tests share: a wrapper that records the center variable w~ that a peer holds
// when it is torn down, a registry that runs easgd or eamsgd in it, and a run with learning rate
// 0 that reports sum_i w_i + w~ at its start and end.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <doctest/doctest.h>

#include "algorithms/builtin.h"
#include "engine/algorithm.h"
#include "engine/train/optimizer.h"
#include "tests/algorithms/algorithm_testing.h"

namespace gossamer::algorithms {

// Runs an A made by the registry and, when its peer tears it down (after the peer's io thread has
// stopped, so every delta sent to it has been applied), records the center variable w~ it holds.
template <typename A>
class Probe final : public engine::Algorithm {
 public:
  using Centers = std::vector<std::vector<float>>;
  Probe(std::unique_ptr<A> inner, std::shared_ptr<std::mutex> mutex, std::shared_ptr<Centers> out)
      : inner_(std::move(inner)), mutex_(std::move(mutex)), out_(std::move(out)) {}
  ~Probe() override {
    if (std::optional<std::vector<float>> center = inner_->elastic().center()) {
      std::lock_guard lock(*mutex_);
      out_->push_back(std::move(*center));
    }
  }
  std::string name() const override { return inner_->name(); }
  void setup(engine::PeerContext& ctx) override { inner_->setup(ctx); }
  double step(engine::PeerContext& ctx) override { return inner_->step(ctx); }
  void finish(engine::PeerContext& ctx) override { inner_->finish(ctx); }
  void serve(engine::ServiceContext& ctx, const engine::Incoming& request) override {
    inner_->serve(ctx, request);
  }

 private:
  std::unique_ptr<A> inner_;
  std::shared_ptr<std::mutex> mutex_;
  std::shared_ptr<Centers> out_;
};

// The built-in registry plus "probe", which runs `name` (easgd or eamsgd) in a Probe.
template <typename A>
struct ProbedRegistry {
  engine::Registry registry = makeRegistry();
  std::shared_ptr<std::mutex> mutex = std::make_shared<std::mutex>();
  std::shared_ptr<typename Probe<A>::Centers> centers =
      std::make_shared<typename Probe<A>::Centers>();

  explicit ProbedRegistry(const std::string& name) {
    engine::AlgorithmSpec spec = registry.algorithms.get(name);
    spec.make = [make = spec.make, m = mutex, c = centers](const engine::OptionValues& values) {
      std::unique_ptr<A> inner(static_cast<A*>(make(values).release()));
      return std::make_unique<Probe<A>>(std::move(inner), m, c);
    };
    registry.algorithms.add("probe", "records the center of " + name, std::move(spec));
  }

  // w~ at the end of the run (one peer held the center when nobody left).
  std::vector<float> center() const {
    std::lock_guard lock(*mutex);
    REQUIRE(centers->size() == 1);
    return centers->front();
  }
};

// A run of `name` (easgd or eamsgd) with learning rate 0 from test::distinctParams, every worker
// keeping its own model at the end (final_center=false); eamsgd with --optimizer nesterov.
struct ElasticSums {
  engine::runtime::ClusterResult result;
  std::vector<float> center;      // w~ at the end
  std::vector<double> initial;    // sum_i w_i(0) + w~(0); w~(0) is rank 0's model (the star's
                                  // center, the smallest id)
  std::vector<double> final;      // sum_i w_i + w~ at the end
  std::vector<float> fixedPoint;  // initial / (n + 1), where every w_i equals w~
};

template <typename A>
ElasticSums runWithLearningRateZero(const std::string& name, std::size_t peers, std::uint64_t steps,
                                    engine::OptionValues options,
                                    engine::PayloadCompression compression = {}) {
  using namespace std::chrono_literals;
  ProbedRegistry<A> probed(name);
  options["final_center"] = "false";
  auto config = test::algorithmCluster("probe", peers, steps, 0.0, std::move(options));
  if (name == "eamsgd")
    config.peer.training.optimizer.kind = engine::train::OptimizerKind::kNesterov;
  config.peer.training.minStepTime = 1ms;  // exchanges must keep up with the steps
  config.peer.training.initialParams = test::distinctParams;
  config.peer.training.compression = compression;
  ElasticSums out;
  out.result = engine::runtime::runLocalCluster(config, probed.registry, test::smallData());
  REQUIRE(out.result.finals.size() == peers);
  const std::size_t n = out.result.finals[0].params.size();
  out.center = probed.center();
  REQUIRE(out.center.size() == n);

  out.initial.assign(n, 0.0);
  out.final.assign(n, 0.0);
  for (std::size_t r = 0; r < peers; ++r) {
    const std::vector<float> w = test::distinctParams(r, n);
    for (std::size_t k = 0; k < n; ++k) out.initial[k] += w[k];
  }
  const std::vector<float> center0 = test::distinctParams(0, n);
  for (std::size_t k = 0; k < n; ++k) out.initial[k] += center0[k];
  for (const auto& s : out.result.finals)
    for (std::size_t k = 0; k < n; ++k) out.final[k] += s.params[k];
  for (std::size_t k = 0; k < n; ++k) out.final[k] += out.center[k];
  out.fixedPoint.resize(n);
  for (std::size_t k = 0; k < n; ++k)
    out.fixedPoint[k] = static_cast<float>(out.initial[k] / static_cast<double>(peers + 1));
  return out;
}

// How far sum_i w_i + w~ moved between the start and the end of the run.
inline double sumDrift(const ElasticSums& sums) {
  return test::maxAbsDiff(std::vector<float>(sums.final.begin(), sums.final.end()),
                          std::vector<float>(sums.initial.begin(), sums.initial.end()));
}

}  // namespace gossamer::algorithms
