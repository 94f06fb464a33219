// `gossamer-bench models`: training throughput of the built-in models (forwardBackward +
// sgdStep) next to the bare GEMMs of the same shapes, in the same run. GEMMs are nearly all of
// a step's arithmetic (a convolution is one im2col GEMM over the whole batch), so the ratio of
// achieved GFLOP/s says what the model's glue costs: bias, ReLU, pooling, im2col and col2im,
// layout changes, softmax, the optimizer step. Target: >= 0.6 of the bare GEMMs.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include <CLI/CLI.hpp>
#include <cblas.h>
#include <fmt/format.h>

#include "bench/bench_util.h"
#include "bench/benchmarks.h"
#include "engine/base/enforce.h"
#include "engine/base/json.h"
#include "engine/models/conv_net.h"
#include "engine/models/mlp.h"

namespace gossamer::bench {
namespace {

using engine::models::GemmShape;
using kernels::Transpose;

constexpr std::size_t kSide = 28;  // Fashion-MNIST's images
constexpr std::size_t kInputs = kSide * kSide;
constexpr std::size_t kClasses = 10;
constexpr double kTargetRatio = 0.6;
constexpr std::uint64_t kSeed = 1;
// Bound on --hidden widths and --batch, so that a typo fails at parse time, not in allocation.
constexpr std::size_t kMaxWidth = std::size_t{1} << 16;

struct ModelsBenchOptions {
  CommonOptions common;
  std::vector<std::string> models = {"mlp", "lenet", "cnn"};
  std::vector<std::size_t> hidden = {256, 256};
  std::size_t batch = 64;
  double minTime = 2.0;
};

// A model under test and the GEMMs of its training step.
struct BenchModel {
  std::unique_ptr<engine::Model> model;
  std::vector<GemmShape> gemms;
  std::string describe;
};

BenchModel makeModel(const std::string& name, kernels::Compute& compute,
                     const ModelsBenchOptions& options) {
  BenchModel made;
  if (name == "mlp") {
    auto mlp = std::make_unique<engine::models::Mlp>(
        compute, engine::models::MlpOptions{.inputs = kInputs,
                                            .hidden = options.hidden,
                                            .classes = kClasses,
                                            .maxBatch = options.batch});
    made.gemms = mlp->trainingGemms(options.batch);
    made.describe = mlp->name();
    made.model = std::move(mlp);
    return made;
  }
  engine::models::ConvNetOptions convOptions;
  if (name == "lenet") {
    convOptions = engine::models::lenetOptions(1, kSide, kSide, kClasses, options.batch);
  } else if (name == "cnn") {
    convOptions = engine::models::cnnOptions(1, kSide, kSide, kClasses, options.batch);
  } else {
    GOSSAMER_THROW("unknown model '{}' (models: mlp, lenet, cnn)", name);
  }
  auto net = std::make_unique<engine::models::ConvNet>(compute, convOptions);
  made.gemms = net->trainingGemms(options.batch);
  made.describe = fmt::format("{} ({})", net->name(), net->layout().describe());
  made.model = std::move(net);
  return made;
}

std::vector<float> uniformFloats(std::size_t count, float low, float high, std::mt19937_64& rng) {
  std::uniform_real_distribution<float> uniform(low, high);
  std::vector<float> values(count);
  for (float& value : values) value = uniform(rng);
  return values;
}

// The baseline: every GEMM of a step, bare, on operands allocated once and shared by all of them
// (A, B and C each as large as the largest of its kind), so the baseline gets at least the cache
// reuse the model gets. Host buffers and cblas_sgemm on the CPU; device buffers and
// compute.gemm (cuBLAS) on a GPU.
class GemmBaseline {
 public:
  GemmBaseline(kernels::Compute& compute, const std::vector<GemmShape>& gemms, bool gpu,
               std::mt19937_64& rng)
      : compute_(compute), gemms_(gemms), gpu_(gpu) {
    std::size_t a = 0, b = 0, c = 0;
    for (const GemmShape& g : gemms) {
      a = std::max(a, g.m * g.k);
      b = std::max(b, g.k * g.n);
      c = std::max(c, g.m * g.n);
    }
    for (auto [host, device, count] : {std::tuple{&a_, &aDevice_, a}, std::tuple{&b_, &bDevice_, b},
                                       std::tuple{&c_, &cDevice_, c}}) {
      *host = uniformFloats(count, -1.0f, 1.0f, rng);
      if (gpu_) {
        *device = compute.allocate<float>(count);
        compute.upload(device->span(), std::span<const float>(*host));
      }
    }
  }

  void run() {
    for (const GemmShape& g : gemms_) {
      if (gpu_) {
        compute_.gemm(g.transA, g.transB, g.m, g.n, g.k, 1.0f,
                      aDevice_.span().first(g.m * g.k), bDevice_.span().first(g.k * g.n), 0.0f,
                      cDevice_.span().first(g.m * g.n));
        continue;
      }
      const bool transA = g.transA == Transpose::kYes;
      const bool transB = g.transB == Transpose::kYes;
      const auto m = static_cast<blasint>(g.m);
      const auto n = static_cast<blasint>(g.n);
      const auto k = static_cast<blasint>(g.k);
      cblas_sgemm(CblasRowMajor, transA ? CblasTrans : CblasNoTrans,
                  transB ? CblasTrans : CblasNoTrans, m, n, k, 1.0f, a_.data(), transA ? m : k,
                  b_.data(), transB ? k : n, 0.0f, c_.data(), n);
    }
  }

 private:
  kernels::Compute& compute_;
  std::vector<GemmShape> gemms_;
  bool gpu_;
  std::vector<float> a_, b_, c_;
  kernels::Buffer<float> aDevice_, bDevice_, cDevice_;
};

struct ModelResult {
  std::string name;
  std::size_t parameters = 0;
  double mflopPerStep = 0;
  Stats step, baseline;
  double gflops = 0, baselineGflops = 0, ratio = 0, samplesPerSecond = 0;
};

ModelResult benchModel(const std::string& name, kernels::Compute& compute, bool gpu,
                       const ModelsBenchOptions& options) {
  BenchModel made = makeModel(name, compute, options);
  engine::Model& model = *made.model;
  std::mt19937_64 rng(kSeed);

  // The model: parameters, gradients and one random batch, uploaded once.
  kernels::Buffer<float> params = compute.allocate<float>(model.parameterCount());
  kernels::Buffer<float> grads = compute.allocate<float>(model.parameterCount());
  model.initialize(params, kSeed);
  kernels::Buffer<float> inputs = compute.allocate<float>(options.batch * kInputs);
  kernels::Buffer<std::int32_t> labels = compute.allocate<std::int32_t>(options.batch);
  compute.upload(inputs.span(),
                 std::span<const float>(uniformFloats(inputs.size(), 0.0f, 1.0f, rng)));
  std::vector<std::int32_t> hostLabels(options.batch);
  std::uniform_int_distribution<std::int32_t> label(0, static_cast<std::int32_t>(kClasses) - 1);
  for (std::int32_t& value : hostLabels) value = label(rng);
  compute.upload(labels.span(), std::span<const std::int32_t>(hostLabels));
  const engine::DeviceBatch batch{inputs, labels, options.batch};
  auto trainStep = [&] {
    model.forwardBackward(batch, params, grads);
    compute.sgdStep(params, grads, {.lr = 0.01f});
  };
  GemmBaseline baseline(compute, made.gemms, gpu, rng);

  ModelResult result;
  result.name = name;
  result.parameters = model.parameterCount();
  const double flops = engine::models::gemmFlops(made.gemms);
  result.mflopPerStep = flops / 1e6;
  fmt::print("{}: {} parameters, {:.1f} MFLOP of GEMM per step in {} GEMMs: {}\n", name,
             result.parameters, result.mflopPerStep, made.gemms.size(), made.describe);
  std::fflush(stdout);

  const std::vector<std::function<void()>> steps = {trainStep, [&] { baseline.run(); }};
  const std::vector<Stats> stats =
      measureInterleaved(steps, options.minTime, [&] { compute.synchronize(); });
  result.step = stats[0];
  result.baseline = stats[1];
  result.samplesPerSecond = static_cast<double>(options.batch) / stats[0].p50;
  result.gflops = flops / stats[0].p50 / 1e9;
  result.baselineGflops = flops / stats[1].p50 / 1e9;
  result.ratio = result.gflops / result.baselineGflops;
  return result;
}

void runModels(const ModelsBenchOptions& options) {
  std::string fallbackReason;
  std::unique_ptr<kernels::Compute> compute =
      makeBenchCompute(options.common.device, &fallbackReason);
  const bool gpu = compute->device() == kernels::Device::kCuda;
  if (!gpu) openblas_set_num_threads(1);

  fmt::print("models on {}, batch {}, {}x{} images, {} classes; training step = forwardBackward + "
             "sgdStep\n",
             compute->describe(), options.batch, kSide, kSide, kClasses);
  if (!fallbackReason.empty()) {
    fmt::print("note: --device cuda unavailable ({}); measured on the cpu\n", fallbackReason);
  }
  if (gpu) {
    fmt::print("baseline: the same GEMM shapes through compute.gemm (cuBLAS) on device buffers");
  } else {
    fmt::print("baseline: bare cblas_sgemm ({}, {} thread) of the same GEMM shapes on host buffers",
               openblas_get_config(), openblas_get_num_threads());
  }
  fmt::print(
      ", one after another, timed interleaved with the model's step; ratio = GFLOP/s / baseline "
      "GFLOP/s, target >= {}; GFLOP/s = GEMM FLOP per step / p50 step time\n\n",
      kTargetRatio);
  std::fflush(stdout);

  std::vector<ModelResult> results;
  for (const std::string& name : options.models) {
    results.push_back(benchModel(name, *compute, gpu, options));
  }

  Table table({{"model"},
               {"params"},
               {"MFLOP/step", 1},
               {"samples/s", 0},
               {"GFLOP/s", 2},
               {"p50 us", 1},
               {"p99 us", 1},
               {"GEMM GFLOP/s", 2},
               {"GEMM p50 us", 1},
               {"ratio", 3}});
  for (const ModelResult& r : results) {
    table.addRow({r.name, static_cast<std::int64_t>(r.parameters), r.mflopPerStep,
                  r.samplesPerSecond, r.gflops, r.step.p50 * 1e6, r.step.p99 * 1e6,
                  r.baselineGflops, r.baseline.p50 * 1e6, r.ratio});
  }
  fmt::print("\n{}\n", table.format());
  for (const ModelResult& r : results) {
    fmt::print("{} training at {:.3f} of the bare GEMMs' GFLOP/s (target >= {}): {}\n", r.name,
               r.ratio, kTargetRatio, r.ratio >= kTargetRatio ? "met" : "NOT met");
  }
  if (!options.common.csvPath.empty()) table.writeCsv(options.common.csvPath);

  if (options.common.json) {
    JsonObject json;
    json.add("benchmark", "models");
    json.add("device", kernels::deviceName(compute->device()));
    if (!fallbackReason.empty()) json.add("fallback_reason", fallbackReason);
    json.add("batch", static_cast<std::uint64_t>(options.batch));
    json.add("target_ratio", kTargetRatio);
    for (const ModelResult& r : results) {
      JsonObject model;
      model.add("parameters", static_cast<std::uint64_t>(r.parameters));
      model.add("mflop_per_step", r.mflopPerStep);
      model.add("samples_per_s", r.samplesPerSecond);
      model.add("gflops", r.gflops);
      model.add("gemm_gflops", r.baselineGflops);
      model.add("ratio_vs_gemm", r.ratio);
      model.add("step_p50_us", r.step.p50 * 1e6);
      if (r.name == "mlp") model.addRaw("hidden", fmt::format("[{}]", fmt::join(options.hidden, ",")));
      json.addRaw(r.name, model.str());
    }
    fmt::print("{}\n", json.str());
  }
}

}  // namespace

void addModelsCommand(CLI::App& app) {
  auto options = std::make_shared<ModelsBenchOptions>();
  CLI::App* command = app.add_subcommand(
      "models",
      "training samples/s and GFLOP/s of the built-in models (mlp, lenet, cnn) next to bare GEMM "
      "of their shapes");
  addCommonOptions(*command, options->common);
  command->add_option("--models", options->models, "Models to measure, comma-separated")
      ->delimiter(',')
      ->check(CLI::IsMember({"mlp", "lenet", "cnn"}))
      ->capture_default_str();
  command->add_option("--hidden", options->hidden, "Hidden layer widths of the mlp, comma-separated")
      ->delimiter(',')
      ->check(CLI::Range(std::size_t{1}, kMaxWidth))
      ->capture_default_str();
  command->add_option("--batch", options->batch, "Samples per training step")
      ->check(CLI::Range(std::size_t{1}, kMaxWidth))
      ->capture_default_str();
  command->add_option("--min-time", options->minTime,
                      "Seconds each of a model's step and its baseline is timed")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  command->callback([options] { runModels(*options); });
}

}  // namespace gossamer::bench
