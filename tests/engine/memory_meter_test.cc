// A peer's tracked memory (kernels/memory_meter.h): a Compute's Buffers and the staging pools,
// counted while they live, their peak kept; a peer's result reports that peak.
#include "kernels/memory_meter.h"

#include <chrono>
#include <cstddef>
#include <memory>
#include <vector>

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

using engine::runtime::HostBufferPool;

std::shared_ptr<HostBufferPool> mallocPool(std::size_t slots, std::size_t slotBytes,
                                           kernels::MemoryMeter& meter,
                                           HostBufferPool::Slots mode) {
  return HostBufferPool::make(
      slots, slotBytes, [](std::size_t n) { return std::malloc(n); }, [](void* p) { std::free(p); },
      &meter, mode);
}

TEST_CASE("memory: a preallocated staging pool counts its slots and its oversize buffer") {
  kernels::MemoryMeter meter;
  {
    auto pool = mallocPool(3, 64, meter, HostBufferPool::Slots::kPreallocated);
    CHECK(meter.current() == 192);
    CHECK(pool->slots().size() == 3);
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

TEST_CASE("memory: a slot's size class rounds a request up by at most an eighth") {
  const std::size_t slot = 1 << 30;
  CHECK(HostBufferPool::sizeClass(1, slot) == 4096);
  CHECK(HostBufferPool::sizeClass(4096, slot) == 4096);
  CHECK(HostBufferPool::sizeClass(4097, slot) == 4608);        // steps of 2^12 / 8 = 512
  CHECK(HostBufferPool::sizeClass(100000, slot) == 106496);    // 13 steps of 8192
  CHECK(HostBufferPool::sizeClass(200000, slot) == 212992);    // 13 steps of 16384
  CHECK(HostBufferPool::sizeClass(1 << 20, slot) == 1 << 20);  // a power of two stays
  CHECK(HostBufferPool::sizeClass(100000, 100001) == 100001);  // never above a slot
  CHECK(HostBufferPool::sizeClass(10, 100) == 100);
}

TEST_CASE("memory: an on-demand pool holds what its payloads needed, kept for reuse") {
  kernels::MemoryMeter meter;
  auto pool = mallocPool(3, 1 << 20, meter, HostBufferPool::Slots::kOnDemand);
  CHECK(meter.current() == 0);  // nothing until a payload needs it
  CHECK(pool->slots().empty());
  {
    auto small = pool->tryAcquire(1000);
    REQUIRE(small != nullptr);
    CHECK(small->size() == 1000);
    CHECK(small->capacity() == 4096);
  }
  CHECK(meter.current() == 4096);  // kept
  {
    auto again = pool->tryAcquire(3000);  // fits the kept slot: no allocation
    CHECK(again != nullptr);
    CHECK(meter.current() == 4096);
  }
  std::vector<std::shared_ptr<engine::runtime::HostBuffer>> held;
  held.push_back(pool->tryAcquire(100000));
  held.push_back(pool->tryAcquire(100000));
  CHECK(meter.current() == 4096 + 2 * 106496);
  // Three slots exist; the third request finds the kept 4 KiB slot too small and replaces it.
  held.push_back(pool->tryAcquire(100000));
  CHECK(meter.current() == 3 * 106496);
  CHECK(pool->tryAcquire(10) == nullptr);  // all three out
  held.pop_back();
  auto larger = pool->tryAcquire(200000);  // the free slot is too small: replaced
  REQUIRE(larger != nullptr);
  CHECK(meter.current() == 2 * 106496 + 212992);
  CHECK(meter.peak() == 2 * 106496 + 212992);
  held.clear();
  larger.reset();
  pool.reset();
  CHECK(meter.current() == 0);
}

// A peer alone with plain SGD (no optimizer state): its params and gradients, and the staging
// slots its messages needed, not the 8 send, 4 reply and 16 receive slots that bound them. gosgd
// with 2 peers pushes one model at a time.
TEST_CASE("memory: a peer's result reports its tracked peak against the model") {
  test::Watchdog watchdog(60s);
  auto config = test::algorithmCluster("gosgd", 2, 10);
  const auto result = engine::runtime::runLocalCluster(config, test::registry(), test::smallData());
  for (const auto& peer : result.peers) {
    CAPTURE(peer.peer);
    const std::size_t model = peer.modelBytes();
    CHECK(model == peer.parameters * sizeof(float));
    CHECK(peer.peakBytes >= 2 * model);
    CHECK(peer.peakBytes < 8 * model + (1 << 20));
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
