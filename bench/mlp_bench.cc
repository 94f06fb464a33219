// `gossamer-bench mlp`: training throughput of the built-in MLP (forwardBackward + sgdStep) next
// to the bare GEMMs of the same shapes in the same run. GEMMs are nearly all of an MLP step's
// work, so the ratio of achieved GFLOP/s says what the model's glue (bias, ReLU, softmax,
// optimizer step, views) costs: target >= 0.6 of the bare sgemm.
#include <cmath>
#include <cstdio>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <cblas.h>
#include <fmt/format.h>

#include "bench/bench_util.h"
#include "bench/benchmarks.h"
#include "engine/base/json.h"
#include "engine/models/mlp.h"

namespace gossamer::bench {
namespace {

using kernels::Transpose;

constexpr std::size_t kInputs = 784;
constexpr std::size_t kClasses = 10;
constexpr double kTargetRatio = 0.6;
constexpr std::uint64_t kSeed = 1;
// Bound on --hidden widths and --batch, so that a typo fails at parse time, not in allocation.
constexpr std::size_t kMaxWidth = std::size_t{1} << 16;

struct MlpBenchOptions {
  CommonOptions common;
  std::vector<std::size_t> hidden = {256, 256};
  std::size_t batch = 64;
  double minTime = 2.0;
};

// One row-major GEMM, C = op(A) op(B) with beta = 0, as Compute::gemm defines it.
struct GemmCall {
  Transpose transA;
  Transpose transB;
  std::size_t m, n, k;
  std::span<const float> a, b;
  std::span<float> c;
};

// The GEMMs of one MLP training step, in the order Mlp::forwardBackward issues them: Y = X W for
// every layer, then from the last layer down dW = X^T dY and, for every layer but the first,
// dX = dY W^T. Operands come from `allocate(count)` and are shared the way the model shares them
// (a layer's output is the next layer's input; its input gradient is the previous layer's dY).
std::vector<GemmCall> trainingGemms(const std::vector<std::size_t>& widths, std::size_t rows,
                                    const std::function<std::span<float>(std::size_t)>& allocate) {
  const std::size_t layers = widths.size() - 1;
  std::vector<std::span<float>> activation, delta, weight, weightGrad;
  for (std::size_t l = 0; l <= layers; ++l) {
    activation.push_back(allocate(rows * widths[l]));
    delta.push_back(l > 0 ? allocate(rows * widths[l]) : std::span<float>());
  }
  for (std::size_t l = 0; l < layers; ++l) {
    weight.push_back(allocate(widths[l] * widths[l + 1]));
    weightGrad.push_back(allocate(widths[l] * widths[l + 1]));
  }
  std::vector<GemmCall> calls;
  for (std::size_t l = 0; l < layers; ++l) {
    calls.push_back({Transpose::kNo, Transpose::kNo, rows, widths[l + 1], widths[l], activation[l],
                     weight[l], activation[l + 1]});
  }
  for (std::size_t l = layers; l-- > 0;) {
    calls.push_back({Transpose::kYes, Transpose::kNo, widths[l], widths[l + 1], rows, activation[l],
                     delta[l + 1], weightGrad[l]});
    if (l > 0) {
      calls.push_back({Transpose::kNo, Transpose::kYes, rows, widths[l], widths[l + 1],
                       delta[l + 1], weight[l], delta[l]});
    }
  }
  return calls;
}

double flopsOf(const std::vector<GemmCall>& calls) {
  double flops = 0;
  for (const GemmCall& call : calls) {
    flops += 2.0 * static_cast<double>(call.m) * static_cast<double>(call.n) *
             static_cast<double>(call.k);
  }
  return flops;
}

void hostSgemm(const GemmCall& call) {
  const bool transA = call.transA == Transpose::kYes;
  const bool transB = call.transB == Transpose::kYes;
  const auto m = static_cast<blasint>(call.m);
  const auto n = static_cast<blasint>(call.n);
  const auto k = static_cast<blasint>(call.k);
  cblas_sgemm(CblasRowMajor, transA ? CblasTrans : CblasNoTrans, transB ? CblasTrans : CblasNoTrans,
              m, n, k, 1.0f, call.a.data(), transA ? m : k, call.b.data(), transB ? k : n, 0.0f,
              call.c.data(), n);
}

std::vector<float> uniformFloats(std::size_t count, float low, float high, std::mt19937_64& rng) {
  std::uniform_real_distribution<float> uniform(low, high);
  std::vector<float> values(count);
  for (float& value : values) value = uniform(rng);
  return values;
}

void runMlp(const MlpBenchOptions& options) {
  std::string fallbackReason;
  std::unique_ptr<kernels::Compute> compute =
      makeBenchCompute(options.common.device, &fallbackReason);
  const bool gpu = compute->device() == kernels::Device::kCuda;
  if (!gpu) openblas_set_num_threads(1);

  engine::models::Mlp model(*compute, {.inputs = kInputs,
                                       .hidden = options.hidden,
                                       .classes = kClasses,
                                       .maxBatch = options.batch});
  std::mt19937_64 rng(kSeed);

  // The model: parameters, gradients and one random batch, uploaded once.
  kernels::Buffer<float> params = compute->allocate<float>(model.parameterCount());
  kernels::Buffer<float> grads = compute->allocate<float>(model.parameterCount());
  model.initialize(params, kSeed);
  kernels::Buffer<float> inputs = compute->allocate<float>(options.batch * kInputs);
  kernels::Buffer<std::int32_t> labels = compute->allocate<std::int32_t>(options.batch);
  compute->upload(inputs.span(),
                  std::span<const float>(uniformFloats(inputs.size(), 0.0f, 1.0f, rng)));
  std::vector<std::int32_t> hostLabels(options.batch);
  std::uniform_int_distribution<std::int32_t> label(0, static_cast<std::int32_t>(kClasses) - 1);
  for (std::int32_t& value : hostLabels) value = label(rng);
  compute->upload(labels.span(), std::span<const std::int32_t>(hostLabels));
  const engine::DeviceBatch batch{inputs, labels, options.batch};
  auto trainStep = [&] {
    model.forwardBackward(batch, params, grads);
    compute->sgdStep(params, grads, {.lr = 0.01f});
  };

  // The baseline: the same GEMM shapes, bare. Host buffers and cblas_sgemm on the CPU; device
  // buffers and compute.gemm (cuBLAS) on a GPU.
  std::vector<std::size_t> widths = {kInputs};
  widths.insert(widths.end(), options.hidden.begin(), options.hidden.end());
  widths.push_back(kClasses);
  std::vector<std::vector<float>> hostOperands;
  std::vector<kernels::Buffer<float>> deviceOperands;
  const std::vector<GemmCall> gemms =
      trainingGemms(widths, options.batch, [&](std::size_t count) -> std::span<float> {
        std::vector<float> values = uniformFloats(count, -1.0f, 1.0f, rng);
        if (!gpu) return hostOperands.emplace_back(std::move(values));
        kernels::Buffer<float>& buffer =
            deviceOperands.emplace_back(compute->allocate<float>(count));
        compute->upload(buffer.span(), std::span<const float>(values));
        return buffer;
      });
  auto baselineStep = [&] {
    for (const GemmCall& call : gemms) {
      if (gpu) {
        compute->gemm(call.transA, call.transB, call.m, call.n, call.k, 1.0f, call.a, call.b, 0.0f,
                      call.c);
      } else {
        hostSgemm(call);
      }
    }
  };
  const double gemmFlops = flopsOf(gemms);
  const double modelFlops = model.trainingFlops(options.batch);
  if (std::abs(modelFlops - gemmFlops) > 1e-9 * gemmFlops) {
    fmt::print(stderr,
               "gossamer-bench: warning: Mlp::trainingFlops ({}) differs from the baseline's GEMM "
               "flops ({}); the ratio compares unlike work\n",
               modelFlops, gemmFlops);
  }

  fmt::print("mlp {} on {}, batch {}, training step = forwardBackward + sgdStep\n", model.name(),
             compute->describe(), options.batch);
  if (!fallbackReason.empty()) {
    fmt::print("note: --device cuda unavailable ({}); measured on the cpu\n", fallbackReason);
  }
  if (gpu) {
    fmt::print("baseline: the same {} GEMM shapes through compute.gemm (cuBLAS) on device buffers",
               gemms.size());
  } else {
    fmt::print(
        "baseline: bare cblas_sgemm ({}, {} thread) of the same {} GEMM shapes on host buffers",
        openblas_get_config(), openblas_get_num_threads(), gemms.size());
  }
  fmt::print(
      ": X W per layer, dW = X^T dY per layer, dX = dY W^T for layers > 0; timed interleaved with "
      "the training step; ratio = GFLOP/s / baseline GFLOP/s, target >= {}\n"
      "GFLOP/s = {:.1f} MFLOP of GEMM per step / p50 step time\n\n",
      kTargetRatio, modelFlops / 1e6);
  std::fflush(stdout);

  const std::vector<std::function<void()>> steps = {trainStep, baselineStep};
  const std::vector<Stats> stats =
      measureInterleaved(steps, options.minTime, [&] { compute->synchronize(); });
  const double samplesPerSecond = static_cast<double>(options.batch) / stats[0].p50;
  const double gflops = modelFlops / stats[0].p50 / 1e9;
  const double baselineGflops = gemmFlops / stats[1].p50 / 1e9;
  const double ratio = gflops / baselineGflops;

  Table table({{"step"},
               {"batch"},
               {"samples/s", 0},
               {"GFLOP/s", 2},
               {"p50 us", 2},
               {"p99 us", 2},
               {"calls"},
               {"baseline GFLOP/s", 2},
               {"ratio", 3}});
  const auto rows = static_cast<std::int64_t>(options.batch);
  table.addRow({"mlp train step", rows, samplesPerSecond, gflops, stats[0].p50 * 1e6,
                stats[0].p99 * 1e6, static_cast<std::int64_t>(stats[0].iterations), baselineGflops,
                ratio});
  table.addRow({gpu ? "cublas gemm sequence" : "sgemm sequence", rows,
                static_cast<double>(options.batch) / stats[1].p50, baselineGflops,
                stats[1].p50 * 1e6, stats[1].p99 * 1e6,
                static_cast<std::int64_t>(stats[1].iterations), baselineGflops, 1.0});
  fmt::print("{}\n", table.format());
  fmt::print("mlp training at {:.3f} of the bare GEMMs' GFLOP/s (target >= {}): {}\n", ratio,
             kTargetRatio, ratio >= kTargetRatio ? "met" : "NOT met");
  if (!options.common.csvPath.empty()) table.writeCsv(options.common.csvPath);

  if (options.common.json) {
    JsonObject json;
    json.add("benchmark", "mlp");
    json.add("device", kernels::deviceName(compute->device()));
    if (!fallbackReason.empty()) json.add("fallback_reason", fallbackReason);
    json.add("samples_per_s", samplesPerSecond);
    json.add("gflops", gflops);
    json.add("sgemm_gflops", baselineGflops);
    json.add("ratio_vs_sgemm", ratio);
    json.add("batch", static_cast<std::uint64_t>(options.batch));
    json.addRaw("hidden", fmt::format("[{}]", fmt::join(options.hidden, ",")));
    json.add("target_ratio", kTargetRatio);
    fmt::print("{}\n", json.str());
  }
}

}  // namespace

void addMlpCommand(CLI::App& app) {
  auto options = std::make_shared<MlpBenchOptions>();
  CLI::App* command = app.add_subcommand(
      "mlp", "MLP 784-hidden-10 training samples/s and GFLOP/s next to bare sgemm of its shapes");
  addCommonOptions(*command, options->common);
  command->add_option("--hidden", options->hidden, "Hidden layer widths, comma-separated")
      ->delimiter(',')
      ->check(CLI::Range(std::size_t{1}, kMaxWidth))
      ->capture_default_str();
  command->add_option("--batch", options->batch, "Samples per training step")
      ->check(CLI::Range(std::size_t{1}, kMaxWidth))
      ->capture_default_str();
  command->add_option("--min-time", options->minTime, "Seconds each of step and baseline is timed")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  command->callback([options] { runMlp(*options); });
}

}  // namespace gossamer::bench
