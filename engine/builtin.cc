// The one file that names every built-in component, and the one place in the engine that
// branches on the optional backends of this build.
#include "engine/builtin.h"

#include <cmath>
#include <mutex>
#include <numeric>
#include <tuple>

#include "engine/base/config.h"
#include "engine/base/enforce.h"
#include "engine/base/log.h"
#include "engine/data/idx.h"
#include "engine/data/synthetic.h"
#include "engine/models/conv_net.h"
#include "engine/models/mlp.h"
#include "engine/models/softmax_regression.h"
#include "kernels/cpu/cpu_compute.h"
#if GOSSAMER_HAVE_CUDA
#include "kernels/cuda/cuda_compute.h"
#endif
#include "net/ibverbs/ibverbs_transport.h"  // its Options; the transport itself when built
#include "net/inproc/inproc_transport.h"
#include "net/limits.h"
#include "net/tcp/tcp_transport.h"
#include "net/transport.h"

namespace gossamer::engine {
namespace {

// The first `limit` samples of `dataset` (all when limit is 0 or larger than the set).
data::Dataset firstSamples(data::Dataset dataset, std::size_t limit) {
  if (limit == 0 || limit >= dataset.count()) return dataset;
  std::vector<std::size_t> indices(limit);
  std::iota(indices.begin(), indices.end(), std::size_t{0});
  return dataset.subset(indices);
}

// The side of the square single-channel images of `config.inputs` features (28 for
// Fashion-MNIST's 784), which the convolutional models need.
std::size_t imageSide(const ModelConfig& config, const std::string& model) {
  auto side = static_cast<std::size_t>(std::llround(std::sqrt(static_cast<double>(config.inputs))));
  GOSSAMER_ENFORCE(side * side == config.inputs,
                   "model {} takes square single-channel images, but the dataset has {} features "
                   "(not a square number)",
                   model, config.inputs);
  return side;
}

void addModels(Registry& registry) {
  using ConvPreset =
      models::ConvNetOptions (*)(std::size_t, std::size_t, std::size_t, std::size_t, std::size_t);
  const std::tuple<const char*, const char*, ConvPreset> convNets[] = {
      {"cnn",
       "2 conv layers 32@3x3 and 64@3x3, each with 2x2 max pooling, dense 128 (--hidden is "
       "ignored)",
       &models::cnnOptions},
      {"lenet",
       "LeNet-5 style: conv 6@5x5 and 16@5x5 with 2x2 max pooling, dense 120-84 (--hidden is "
       "ignored)",
       &models::lenetOptions}};
  for (const auto& [name, description, preset] : convNets) {
    registry.models.add(
        name, description,
        [name = std::string(name), preset](kernels::Compute& compute, const ModelConfig& config) {
          const std::size_t side = imageSide(config, name);
          return std::make_unique<models::ConvNet>(
              compute, preset(1, side, side, config.classes, config.maxBatch));
        });
  }
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
  registry.datasets.add("synthetic",
                        "Gaussian class clusters, 64 features, 10 classes (no files needed)",
                        [](const DatasetConfig& config) {
                          data::SyntheticOptions options{
                              .count = config.trainSamples == 0 ? 20000 : config.trainSamples,
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

// ---- transports: one line each; a new backend adds its own ----

TransportMaker tcpTransport(const net::tcp::Options& options) {
  return [options](const TransportEnvironment& env) {
    net::tcp::Options withTls = options;
    withTls.tls = env.tls;
    return net::tcp::makeTransport(env.io, withTls);
  };
}

// One hub per maker: the peers given this maker reach each other, nobody else.
TransportMaker inprocTransport(const net::inproc::Options& options) {
  return [options, hub = net::inproc::makeHub()](const TransportEnvironment& env) {
    return net::inproc::makeTransport(env.io, hub, options);
  };
}

#if GOSSAMER_HAVE_IBVERBS
// A CUDA peer's device memory is registered with the RDMA device (GPUDirect) or staged through
// registered host memory, as the transport finds the driver able.
TransportMaker ibverbsTransport(const net::ibverbs::Options& options) {
  return [options](const TransportEnvironment& env) {
    net::ibverbs::Options withMemory = options;
    withMemory.deviceMemory = env.deviceMemory;
    withMemory.controlTls = env.tls;
    return net::ibverbs::makeTransport(env.io, withMemory);
  };
}
bool ibverbsViable(const net::ibverbs::Options& options, std::string* reason) {
  return net::ibverbs::isViable(reason, options);
}
#else
constexpr const char* kNoIbverbs =
    "this build has no RDMA transport (configured with GOSSAMER_WITH_IBVERBS=OFF, or "
    "libibverbs-dev was missing)";
// Registered all the same, so that --transport ibverbs names the reason instead of "unknown".
TransportMaker ibverbsTransport(const net::ibverbs::Options&) {
  return [](const TransportEnvironment&) -> std::unique_ptr<net::Transport> {
    GOSSAMER_THROW("the RDMA transport is unavailable: {}", kNoIbverbs);
  };
}
bool ibverbsViable(const net::ibverbs::Options&, std::string* reason) {
  if (reason != nullptr) *reason = kNoIbverbs;
  return false;
}
#endif

void addTransports(Registry& registry) {
  registry.transports.add("tcp", "TCP, between processes and machines",
                          transportSpec<net::tcp::Options>({"127.0.0.1", 0}, tcpTransport));
  registry.transports.add("inproc", "in-process, between the peers of one process",
                          transportSpec<net::inproc::Options>({"inproc", 0}, inprocTransport));
  registry.transports.add(
      "ibverbs", "RDMA (libibverbs), between machines with an RDMA device",
      transportSpec<net::ibverbs::Options>({"127.0.0.1", 0}, ibverbsTransport, ibverbsViable));
}

}  // namespace

Registry makeBuiltinRegistry() {
  Registry registry;
  addModels(registry);
  addDatasets(registry);
  addTopologies(registry);
  addTransports(registry);
  return registry;
}

DeviceChoice parseDevice(const std::string& name) {
  if (name == "auto") return DeviceChoice::kAuto;
  if (name == "cpu") return DeviceChoice::kCpu;
  if (name == "cuda") return DeviceChoice::kCuda;
  GOSSAMER_THROW("unknown device '{}' (use auto, cpu or cuda)", name);
}

bool cudaUsable(std::string* reason) {
#if GOSSAMER_HAVE_CUDA
  return kernels::cuda::isViable(reason);
#else
  if (reason != nullptr)
    *reason = "this build has no CUDA backend (configured with GOSSAMER_WITH_CUDA=OFF or no nvcc)";
  return false;
#endif
}

std::unique_ptr<kernels::Compute> makeCompute(DeviceChoice choice, std::string* fallbackReason) {
  if (fallbackReason != nullptr) fallbackReason->clear();
  std::string reason;
  if (choice != DeviceChoice::kCpu) {
    if (cudaUsable(&reason)) {
#if GOSSAMER_HAVE_CUDA
      return kernels::cuda::makeCompute();
#endif
    }
    GOSSAMER_ENFORCE(choice != DeviceChoice::kCuda, "--device cuda: no usable GPU: {}", reason);
    if (fallbackReason != nullptr) *fallbackReason = reason;
  }
  auto compute = kernels::cpu::makeCompute({.blasThreads = 1});
  // Facts about the process (the GPU, the BLAS), not the peer: said once, however many peers
  // the process runs.
  static std::once_flag said;
  std::call_once(said, [&] {
    log::get("kernels")->info("{}computing on the {}",
                              reason.empty() ? "" : fmt::format("no usable GPU ({}); ", reason),
                              compute->describe());
  });
  return compute;
}

std::unique_ptr<kernels::Compute> makeCompute(const kernels::MemoryPlace& place) {
  if (place.device == kernels::Device::kCpu) return makeCompute(DeviceChoice::kCpu);
  std::string reason;
  GOSSAMER_ENFORCE(cudaUsable(&reason), "buffers on {}: no usable GPU: {}", place.describe(),
                   reason);
#if GOSSAMER_HAVE_CUDA
  return kernels::cuda::makeCompute({.deviceIndex = place.index});
#else
  GOSSAMER_THROW("buffers on {}: this build has no CUDA backend", place.describe());
#endif
}

net::DeviceMemory deviceMemoryOf(kernels::Compute& compute) {
  if (compute.device() == kernels::Device::kCpu) return {};
  kernels::Compute* c = &compute;
  return net::DeviceMemory{
      .isDevice = [c](const void* pointer) { return c->isDeviceMemory(pointer); },
      .copyToHost = [c](void* dst, const void* src, std::size_t n) { c->copyToHost(dst, src, n); },
      .copyToDevice = [c](void* dst, const void* src,
                          std::size_t n) { c->copyToDevice(dst, src, n); },
  };
}

}  // namespace gossamer::engine
