// The one file that names every built-in component, and the one place in the engine that
// branches on the optional backends of this build (DESIGN.md section 3).
#include "engine/builtin.h"

#include <numeric>

#include "engine/base/config.h"
#include "engine/base/enforce.h"
#include "engine/base/log.h"
#include "engine/data/idx.h"
#include "engine/data/synthetic.h"
#include "engine/models/mlp.h"
#include "engine/models/softmax_regression.h"
#include "kernels/cpu/cpu_compute.h"
#if GOSSAMER_HAVE_CUDA
#include "kernels/cuda/cuda_compute.h"
#endif
#include "net/limits.h"
#include "net/transport.h"
#if GOSSAMER_HAVE_IBVERBS
#include "net/ibverbs/ibverbs_transport.h"
#endif

namespace gossamer::engine {
namespace {

// The first `limit` samples of `dataset` (all when limit is 0 or larger than the set).
data::Dataset firstSamples(data::Dataset dataset, std::size_t limit) {
  if (limit == 0 || limit >= dataset.count()) return dataset;
  std::vector<std::size_t> indices(limit);
  std::iota(indices.begin(), indices.end(), std::size_t{0});
  return dataset.subset(indices);
}

void addModels(Registry& registry) {
  registry.models.add("mlp", "multi-layer perceptron, ReLU hidden layers of --hidden widths",
                      [](kernels::Compute& compute, const ModelConfig& config) {
                        return std::make_unique<models::Mlp>(
                            compute, models::MlpOptions{.inputs = config.inputs,
                                                        .hidden = config.hidden,
                                                        .classes = config.classes,
                                                        .maxBatch = config.maxBatch});
                      });
  registry.models.add("softmax", "softmax regression (convex; --hidden is ignored)",
                      [](kernels::Compute& compute, const ModelConfig& config) {
                        return std::make_unique<models::SoftmaxRegression>(
                            compute, config.inputs, config.classes, config.maxBatch);
                      });
}

void addDatasets(Registry& registry) {
  registry.datasets.add(
      "fashion-mnist",
      "Fashion-MNIST, 60k/10k 28x28 images, 10 classes (Debian package dataset-fashion-mnist)",
      [](const DatasetConfig& config) {
        const std::string dir = config.dataDir.empty() ? data::kFashionMnistDir : config.dataDir;
        return DatasetPair{
            firstSamples(data::loadFashionMnist(dir, data::Split::kTrain), config.trainSamples),
            firstSamples(data::loadFashionMnist(dir, data::Split::kTest), config.testSamples)};
      });
  registry.datasets.add(
      "synthetic", "Gaussian class clusters, 64 features, 10 classes (no files needed)",
      [](const DatasetConfig& config) {
        data::SyntheticOptions options{.count = config.trainSamples == 0 ? 20000 : config.trainSamples,
                                       .features = 64,
                                       .classes = 10,
                                       .separation = 3.0,
                                       .noise = 1.0,
                                       .distributionSeed = config.seed,
                                       .sampleSeed = config.seed + 1};
        DatasetPair pair;
        pair.train = data::makeSynthetic(options);
        options.count = config.testSamples == 0 ? 5000 : config.testSamples;
        options.sampleSeed = config.seed + 2;
        pair.test = data::makeSynthetic(options);
        return pair;
      });
}

void addTopologies(Registry& registry) {
  for (const auto& [name, description] : topology::builtinTopologies()) {
    registry.topologies.add(name, description, [name](const topology::TopologyOptions& options) {
      return topology::makeTopology(name, options);
    });
  }
}

}  // namespace

Registry makeBuiltinRegistry() {
  Registry registry;
  addModels(registry);
  addDatasets(registry);
  addTopologies(registry);
  return registry;
}

kernels::Device parseDevice(const std::string& name) {
  if (name == "cpu") return kernels::Device::kCpu;
  if (name == "cuda") return kernels::Device::kCuda;
  GOSSAMER_THROW("unknown device '{}' (use cpu or cuda)", name);
}

std::unique_ptr<kernels::Compute> makeCompute(kernels::Device device, std::string* fallbackReason) {
  std::string reason;
  if (device == kernels::Device::kCuda) {
#if GOSSAMER_HAVE_CUDA
    if (kernels::cuda::isViable(&reason)) {
      if (fallbackReason != nullptr) fallbackReason->clear();
      return kernels::cuda::makeCompute();
    }
#else
    reason = "this build has no CUDA backend (configured with GOSSAMER_WITH_CUDA=OFF or no nvcc)";
#endif
    log::get("kernels")->warn("CUDA requested but unavailable: {}; falling back to the CPU", reason);
  }
  if (fallbackReason != nullptr) *fallbackReason = reason;
  return kernels::cpu::makeCompute({.blasThreads = 1});
}

// ---- the RDMA transport ----

namespace {

#if GOSSAMER_HAVE_IBVERBS
net::ibverbs::Options ibverbsOptions(const RdmaOptions& rdma, const net::Limits& limits) {
  net::ibverbs::Options options;
  options.limits = limits;
  options.device = rdma.device;
  options.port = rdma.port;
  options.gidIndex = rdma.gidIndex;
  options.busyPoll = rdma.busyPoll;
  if (rdma.isDeviceMemory && rdma.compute != nullptr) {
    kernels::Compute* compute = rdma.compute;
    options.deviceMemory.isDevice = rdma.isDeviceMemory;
    options.deviceMemory.copyToHost = [compute](void* dst, const void* src, std::size_t n) {
      compute->copyToHost(dst, src, n);
    };
    options.deviceMemory.copyToDevice = [compute](void* dst, const void* src, std::size_t n) {
      compute->copyToDevice(dst, src, n);
    };
  }
  return options;
}
#else
constexpr const char* kNoIbverbs =
    "this build has no RDMA transport (configured with GOSSAMER_WITH_IBVERBS=OFF, or "
    "libibverbs-dev was missing)";
#endif

}  // namespace

bool rdmaViable(std::string* reason, const RdmaOptions& options) {
#if GOSSAMER_HAVE_IBVERBS
  return net::ibverbs::isViable(reason, ibverbsOptions(options, net::Limits{}));
#else
  (void)options;
  if (reason != nullptr) *reason = kNoIbverbs;
  return false;
#endif
}

std::unique_ptr<net::Transport> makeRdmaTransport(asio::io_context& io, const RdmaOptions& options,
                                                  const net::Limits& limits) {
#if GOSSAMER_HAVE_IBVERBS
  return net::ibverbs::makeTransport(io, ibverbsOptions(options, limits));
#else
  (void)io;
  (void)options;
  (void)limits;
  GOSSAMER_THROW("the RDMA transport is unavailable: {}", kNoIbverbs);
#endif
}

}  // namespace gossamer::engine
