// A peer's tracked memory (kernels/memory_meter.h): a Compute's Buffers and the staging pools,
// counted while they live, their peak kept; a peer's result reports that peak.
#include "kernels/memory_meter.h"

#include <chrono>
#include <cstddef>

#include <doctest/doctest.h>

#include "engine/base/process_memory.h"
#include "engine/runtime/cluster.h"
#include "engine/runtime/host_buffers.h"
#include "kernels/cpu/cpu_compute.h"
#include "tests/algorithms/algorithm_testing.h"
#include "tests/support/watchdog.h"

namespace gossamer {
namespace {

using namespace std::chrono_literals;

TEST_CASE("memory: a Compute's buffers are counted while they live, the peak kept") {
  kernels::MemoryMeter meter;
  auto compute = kernels::cpu::makeCompute();
  auto before = compute->allocate<float>(10);  // made before the meter: never counted
  compute->setMemoryMeter(&meter);
  {
    auto a = compute->allocate<float>(100);
    auto b = compute->allocate<std::int32_t>(50);
    CHECK(meter.current() == 600);
    a.reset();
    CHECK(meter.current() == 200);
    auto c = compute->allocate<float>(10);
    kernels::Buffer<float> moved = std::move(c);  // counted once, wherever it moves
    CHECK(meter.current() == 240);
    CHECK(meter.peak() == 600);
  }
  before.reset();
  CHECK(meter.current() == 0);
  CHECK(meter.peak() == 600);
}

TEST_CASE("memory: a staging pool counts its slots and its oversize buffer") {
  kernels::MemoryMeter meter;
  {
    auto pool = engine::runtime::HostBufferPool::make(
        3, 64, [](std::size_t n) { return std::malloc(n); }, [](void* p) { std::free(p); }, &meter);
    CHECK(meter.current() == 192);
    {
      auto big = pool->tryAcquire(1000);
      REQUIRE(big != nullptr);
      CHECK(meter.current() == 1192);
    }
    CHECK(meter.current() == 192);
    CHECK(meter.peak() == 1192);
  }
  CHECK(meter.current() == 0);
}

// A peer alone with plain SGD (no optimizer state): at least its params and gradients and the
// staging pools' slots, one model each (8 send, 4 reply and 16 receive slots by default).
TEST_CASE("memory: a peer's result reports its tracked peak against the model") {
  test::Watchdog watchdog(60s);
  auto config = test::algorithmCluster("gosgd", 2, 10);
  const auto result = engine::runtime::runLocalCluster(config, test::registry(), test::smallData());
  for (const auto& peer : result.peers) {
    CAPTURE(peer.peer);
    const std::size_t model = peer.modelBytes();
    CHECK(model == peer.parameters * sizeof(float));
    CHECK(peer.peakBytes >= (2 + 8 + 4 + 16) * model);
    CHECK(peer.peakBytes < (2 + 8 + 4 + 16) * model + (64 << 20));
  }
}

TEST_CASE("memory: the process's peak resident memory, and its reset") {
  const std::size_t before = peakRssBytes();
  CHECK(before > 0);
  std::vector<char> big(64 << 20, 1);
  CHECK(peakRssBytes() >= before + (60 << 20));
  big = {};
  big.shrink_to_fit();
  if (resetPeakRss()) CHECK(peakRssBytes() < before + (60 << 20));
}

}  // namespace
}  // namespace gossamer
