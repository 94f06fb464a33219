// The runtime over a device-like Compute whose memory faults on host access
// (tests/support/guarded_compute.h): every path a peer takes with its parameters, gradients,
// sends, receives, merges and snapshots must reach device memory through the Compute, as it must
// on a GPU. A host dereference kills the test with SIGSEGV.
#include <cmath>
#include <string>

#include <doctest/doctest.h>

#include "engine/runtime/cluster.h"
#include "tests/algorithms/algorithm_testing.h"
#include "tests/support/guarded_compute.h"

namespace gossamer::test {
namespace {

engine::runtime::ClusterResult runGuarded(engine::runtime::ClusterConfig config) {
  config.peer.training.makeCompute = [] { return std::make_unique<GuardedCompute>(); };
  return engine::runtime::runLocalCluster(config, registry(), smallData());
}

bool finite(const engine::runtime::ClusterResult& result) {
  for (const auto& s : result.finals)
    for (float v : s.params)
      if (!std::isfinite(v)) return false;
  return true;
}

TEST_CASE("guarded runtime: every algorithm trains over device memory the host cannot touch") {
  for (const char* algorithm : {"allreduce-sgd", "dpsgd", "gosgd", "easgd", "ad-psgd", "diloco",
                                "streaming-diloco", "local-sgd", "sparknet", "dts", "tree-easgd"}) {
    CAPTURE(algorithm);
    const auto result = runGuarded(algorithmCluster(algorithm, 3, 20));
    REQUIRE(result.finals.size() == 3);
    CHECK(finite(result));
    for (const auto& peer : result.peers) CHECK(peer.steps == 20);
  }
}

// A lockstep algorithm does the same arithmetic in the same order on either Compute: the guarded
// run ends with the CPU run's models, bit for bit.
TEST_CASE("guarded runtime: allreduce-sgd ends with the CPU backend's models") {
  const auto config = algorithmCluster("allreduce-sgd", 3, 20);
  const auto cpu = engine::runtime::runLocalCluster(config, registry(), smallData());
  const auto guarded = runGuarded(config);
  REQUIRE(cpu.finals.size() == guarded.finals.size());
  for (std::size_t i = 0; i < cpu.finals.size(); ++i)
    CHECK(cpu.finals[i].params == guarded.finals[i].params);
}

}  // namespace
}  // namespace gossamer::test
