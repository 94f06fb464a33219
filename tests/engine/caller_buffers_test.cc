// A peer of the externally driven loop over buffers its caller owns (CallerBuffers,
// engine/runtime/peer.h): trained in place, from the caller's values, with no copy of the model;
// over device memory the host cannot touch (tests/support/guarded_compute.h), ordered with the
// caller's stream around each step and each call into the caller's code; refused with a sentence
// when the buffers do not fit.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <chrono>
#include <mutex>
#include <vector>

#include <doctest/doctest.h>

#include "engine/base/enforce.h"
#include "engine/builtin.h"
#include "tests/engine/external_cluster.h"
#include "tests/support/guarded_compute.h"
#include "tests/support/watchdog.h"

namespace gossamer::engine::runtime {
namespace {

using namespace std::chrono_literals;
using test::GuardedCompute;
using test::StreamOrdering;

constexpr std::size_t kPeers = 3, kCount = 1000, kSteps = 20;

ExternalModel withBuffers(float* params, float* grads, kernels::MemoryPlace place,
                          std::size_t count = kCount) {
  ExternalModel model{flatLayout(count), {}};
  model.buffers = CallerBuffers{.params = params, .grads = grads, .count = count, .place = place};
  return model;
}

PeerConfig sgdPeer(const std::string& algorithm) {
  PeerConfig config = clusterPeer(algorithm, kSteps);
  config.training.optimizer = {.kind = train::OptimizerKind::kSgd, .lr = 0.5f};
  return config;
}

TEST_CASE("caller buffers: host memory is trained in place, from the caller's values") {
  test::Watchdog watchdog(60s);
  std::vector<std::vector<float>> params, grads;
  for (std::size_t r = 0; r < kPeers; ++r) {
    params.emplace_back(kCount, static_cast<float>(r));  // distinct initial models, kept
    grads.emplace_back(kCount, 0.0f);
  }
  const auto results = runExternalCluster(
      sgdPeer("allreduce-sgd"), kPeers,
      [&](std::size_t r) { return withBuffers(params[r].data(), grads[r].data(), {}); },
      [&](Peer& peer, std::size_t rank) {
        CHECK(peer.params().data() == params[rank].data());  // the caller's memory, no copy
        CHECK(peer.grads().data() == grads[rank].data());
        REQUIRE(peer.start());
        CHECK(params[rank][0] == static_cast<float>(rank));  // start() initialised nothing
        while (true) {
          // Rank r's gradient is r + 1 everywhere, written into its own vector: their mean is 2.
          std::fill(grads[rank].begin(), grads[rank].end(), static_cast<float>(rank + 1));
          if (!peer.step({.loss = 1.0, .samples = 4})) break;
        }
        return peer.finish();
      });
  for (std::size_t r = 0; r < kPeers; ++r) {
    CHECK(results[r].steps == kSteps);
    // The peer's SGD (rate 0.5) on the averaged gradient wrote into the caller's vector.
    for (float w : params[r]) CHECK(w == doctest::Approx(r - 0.5 * 2.0 * kSteps));
  }
}

// Each peer's "device" buffers come from a framework's allocator on the same guarded device as
// the peer's Compute: any host access to them on the way faults.
struct GuardedFramework {
  std::shared_ptr<test::GuardedDevice> device = std::make_shared<test::GuardedDevice>();
  GuardedCompute allocator{device};
  std::vector<kernels::Buffer<float>> params, grads;
  std::mutex mutex;
  std::vector<GuardedCompute*> computes;  // the peers', in construction order

  GuardedFramework() {
    for (std::size_t r = 0; r < kPeers; ++r) {
      params.push_back(allocator.allocate<float>(kCount));
      grads.push_back(allocator.allocate<float>(kCount));
      allocator.fill(params.back(), static_cast<float>(r));
    }
  }
  PeerConfig config(const std::string& algorithm) {
    PeerConfig c = sgdPeer(algorithm);
    c.training.makeCompute = [this] {
      auto compute = std::make_unique<GuardedCompute>(device);
      std::lock_guard lock(mutex);
      computes.push_back(compute.get());
      return compute;
    };
    return c;
  }
  std::vector<float> read(kernels::Buffer<float>& buffer) {
    std::vector<float> host(buffer.size());
    allocator.download(std::span<float>(host), std::span<const float>(buffer));
    return host;
  }
};

void* streamOf(std::size_t rank) { return reinterpret_cast<void*>(0x1000 + rank); }

TEST_CASE("caller buffers: device memory, ordered with the caller's stream, no host access") {
  test::Watchdog watchdog(60s);
  GuardedFramework framework;
  const kernels::MemoryPlace device{.device = kernels::Device::kCuda, .index = 0};
  std::atomic<int> misordered{0};
  const auto results = runExternalCluster(
      framework.config("allreduce-sgd"), kPeers,
      [&](std::size_t r) {
        kernels::MemoryPlace place = device;
        place.stream = streamOf(r);
        return withBuffers(framework.params[r].data(), framework.grads[r].data(), place);
      },
      [&](Peer& peer, std::size_t rank) {
        GuardedCompute& compute = *framework.computes[rank];
        REQUIRE(peer.start());
        void* stream = streamOf(rank);
        // The caller's optimizer: SGD of rate 0.5 on the averaged gradient, on the "device".
        LocalStep local{.loss = 1.0, .samples = 4};
        local.update = [&] {
          // In the caller's turn: the peer's work so far comes first on the caller's stream.
          const auto before = compute.takeOrderings();
          if (before.empty() || before.back().kind != StreamOrdering::kOrderStreamAfter ||
              before.back().stream != stream)
            ++misordered;
          framework.allocator.sgdStep(framework.params[rank], framework.grads[rank], {.lr = 0.5f});
        };
        while (true) {
          if (peer.status().step == kSteps / 2) {  // the caller moved to another stream
            stream = streamOf(rank + 100);
            local.stream = stream;
          }
          framework.allocator.fill(framework.grads[rank], static_cast<float>(rank + 1));
          if (!peer.step(local)) break;
          // The caller's turn ended in the peer's waiting for it; the step ends in the caller's
          // stream waiting for the peer's merges.
          const auto after = compute.takeOrderings();
          if (after.size() < 2 || after.front().kind != StreamOrdering::kWaitForStream ||
              after.back().kind != StreamOrdering::kOrderStreamAfter ||
              after.back().stream != stream)
            ++misordered;
        }
        return peer.finish();
      });
  CHECK(misordered == 0);
  for (std::size_t r = 0; r < kPeers; ++r) {
    CHECK(results[r].steps == kSteps);
    CHECK(results[r].device.find("guarded") != std::string::npos);
    for (float w : framework.read(framework.params[r]))
      CHECK(w == doctest::Approx(r - 0.5 * 2.0 * kSteps));
  }
}

TEST_CASE("caller buffers: every algorithm trains over a framework's device memory") {
  test::Watchdog watchdog(120s);
  for (const char* algorithm : {"dpsgd", "gosgd", "easgd", "diloco", "dts", "ad-psgd"}) {
    CAPTURE(algorithm);
    GuardedFramework framework;
    const kernels::MemoryPlace device{.device = kernels::Device::kCuda};
    const auto results = runExternalCluster(
        framework.config(algorithm), kPeers,
        [&](std::size_t r) {
          return withBuffers(framework.params[r].data(), framework.grads[r].data(), device);
        },
        [&](Peer& peer, std::size_t rank) {
          REQUIRE(peer.start());
          do {
            // A gradient pulling every peer toward 0: w - 0 (the gradient of w^2 / 2).
            framework.allocator.copy(framework.grads[rank], framework.params[rank]);
          } while (peer.step({.loss = 1.0, .samples = 4}));
          return peer.finish();
        });
    for (std::size_t r = 0; r < kPeers; ++r) {
      CHECK(results[r].steps == kSteps);
      for (float w : framework.read(framework.params[r])) {
        CHECK(std::isfinite(w));
        CHECK(std::abs(w) < 2.0f);  // moved from the initial 0, 1, 2 toward 0, never away
      }
    }
  }
}

TEST_CASE("caller buffers: buffers that do not fit are refused with a sentence") {
  test::Watchdog watchdog(30s);
  const Registry& registry = test::registry();
  std::vector<float> host(2 * kCount);
  float* params = host.data();
  float* grads = host.data() + kCount;
  const kernels::MemoryPlace cpu{};
  const kernels::MemoryPlace cuda{.device = kernels::Device::kCuda, .index = 0};
  auto refuse = [&](PeerConfig config, ExternalModel model, const char* says) {
    CHECK_THROWS_WITH_AS(Peer(std::move(config), registry, std::move(model)),
                         doctest::Contains(says), Error);
  };
  const PeerConfig plain = sgdPeer("none");
  ExternalModel tooShort = withBuffers(params, grads, cpu);
  tooShort.buffers->count = kCount - 1;
  refuse(plain, std::move(tooShort), "the model has 1000 parameters");
  refuse(plain, withBuffers(params, params + 1, cpu), "overlap");
  refuse(plain, withBuffers(nullptr, grads, cpu), "are null");
  refuse(plain, withBuffers(params + 0, reinterpret_cast<float*>(
                                            reinterpret_cast<char*>(grads) + 1), cpu),
         "not aligned");

  GuardedFramework framework;
  PeerConfig guarded = framework.config("none");
  refuse(guarded, withBuffers(params, grads, cuda), "the caller's params buffer is not cuda:0");
  refuse(guarded, withBuffers(framework.params[0].data(), framework.grads[0].data(), cpu),
         "are on cpu but the peer computes on guarded");
  std::string reason;  // without a GPU (everywhere but a GPU machine)
  if (!cudaUsable(&reason))
    refuse(plain, withBuffers(params, grads, cuda), "buffers on cuda:0: no usable GPU");
}

}  // namespace
}  // namespace gossamer::engine::runtime
