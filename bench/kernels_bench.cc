// `gossamer-bench kernels`: memory bandwidth of the fused element-wise kernels that every
// optimizer step and averaging rule runs, next to a plain memcpy of the same Compute in the same
// run. These kernels are memory bound, so GB/s relative to memcpy says how close each one comes
// to the machine's limit: target >= 1.0 for weightedSum of 2 inputs on one CPU thread (the median
// of 3 passes), >= 0.85 on a GPU. On the CPU a STREAM triad (a = b + s * c, a plain loop with the
// same run-time dispatch as the kernels) is measured beside memcpy as a second reference: what a
// loop of that arithmetic reaches on this machine.
#include <algorithm>
#include <array>
#include <cstdio>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "bench/bench_util.h"
#include "bench/benchmarks.h"
#include "engine/base/json.h"
#include "kernels/codec.h"
#include "kernels/cpu/dispatch.h"

namespace gossamer::bench {
namespace {

constexpr double kCpuTargetRatio = 1.0;
constexpr double kGpuTargetRatio = 0.85;

struct KernelsOptions {
  CommonOptions common;
  std::vector<std::string> sizes = {"1M", "16M", "64M"};
  double minTime = 0.5;
  int repeat = 3;
};

// The buffers of every measured operation at one size, in the Compute's memory. Each operation
// has its own outputs so that none feeds another; the values stay bounded however often the
// operations run (the elastic pull converges, the momentum step moves w by ~1e-5 per call).
struct KernelBuffers {
  KernelBuffers(kernels::Compute& compute, std::size_t n) {
    out = compute.allocate<float>(n);
    compute.fill(out, 0.0f);
    for (std::size_t i = 0; i < in.size(); ++i) {
      in[i] = compute.allocate<float>(n);
      compute.fill(in[i], static_cast<float>(i + 1));
    }
    x = compute.allocate<float>(n);
    center = compute.allocate<float>(n);
    w = compute.allocate<float>(n);
    g = compute.allocate<float>(n);
    v = compute.allocate<float>(n);
    compute.fill(x, 1.0f);
    compute.fill(center, 2.0f);
    compute.fill(w, 1.0f);
    compute.fill(g, 1e-3f);
    compute.fill(v, 0.0f);
    std::vector<float> values(n);
    std::mt19937 rng(1);
    std::normal_distribution<float> normal;
    for (float& value : values) value = normal(rng);
    codecInput = compute.allocate<float>(n);
    compute.upload(codecInput.span(), values);
    residual = compute.allocate<float>(n);
    compute.fill(residual, 0.0f);
    decoded = compute.allocate<float>(n);
    payload = compute.allocate<std::byte>(n * sizeof(float) + 64);
    compute.synchronize();
  }

  kernels::Buffer<float> out;
  std::array<kernels::Buffer<float>, 4> in;
  // Codecs: the input (random values, so quantization and selection do real work), the residual
  // of error feedback, the payload, and the decoded output.
  kernels::Buffer<float> codecInput, residual, decoded;
  kernels::Buffer<std::byte> payload;
  kernels::Buffer<float> x, center;  // elasticPull
  kernels::Buffer<float> w, g, v;    // momentumStep
};

// STREAM's triad on host memory, the reference loop of "what the memory allows".
GOSSAMER_CPU_CLONES void streamTriad(float* a, const float* b, const float* c, float s,
                                     std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) a[i] = b[i] + s * c[i];
}

// One measured operation: its name, the bytes one call reads plus writes, and the call.
struct KernelOp {
  std::string name;
  double bytes;
  std::function<void()> run;
};

// The measured operations at n floats. memcpy comes first: it is the baseline every row is divided
// by; weightedSum2 second: it is the headline figure. The triad (host memory only) comes last.
std::vector<KernelOp> makeOps(kernels::Compute& compute, KernelBuffers& b, std::size_t n) {
  const double floatBytes = static_cast<double>(n) * sizeof(float);
  auto in = [&b](std::size_t i) { return std::span<const float>(b.in[i]); };
  std::vector<KernelOp> ops = {
      {"memcpy", 2 * floatBytes, [&compute, &b, in] { compute.copy(b.out, in(0)); }},
      {"weightedSum2", 3 * floatBytes,
       [&compute, &b, in] {
         compute.weightedSum(b.out, {{0.5f, in(0)}, {0.5f, in(1)}});
       }},
      {"weightedSum4", 5 * floatBytes,
       [&compute, &b, in] {
         compute.weightedSum(b.out,
                             {{0.25f, in(0)}, {0.25f, in(1)}, {0.25f, in(2)}, {0.25f, in(3)}});
       }},
      {"elasticPull", 4 * floatBytes,
       [&compute, &b] { compute.elasticPull(b.x, b.center, 0.1f, 0.1f); }},
      {"momentumStep", 5 * floatBytes,
       [&compute, &b] { compute.momentumStep(b.w, b.g, b.v, {.lr = 1e-3f, .momentum = 0.9f}); }},
  };
  if (compute.device() == kernels::Device::kCpu) {
    ops.push_back({"triad", 3 * floatBytes, [&b, n] {
                     streamTriad(b.out.data(), b.in[0].data(), b.in[1].data(), 0.5f, n);
                   }});
  }
  // Encode with error feedback, then decode: what one compressed exchange costs the sender and
  // the receiver. Counted as memcpy counts its bytes (2 x the float32 input), so the ratio is the
  // speed of compressing a buffer against copying it.
  for (const char* text : {"int8", "int4", "fp16", "topk:0.01", "topk:0.01:sampled"}) {
    const kernels::Codec codec = kernels::parseCodec(text);
    ops.push_back({std::string("codec ") + text, 2 * floatBytes, [&compute, &b, codec, n] {
                     const std::span<std::byte> out =
                         b.payload.span().first(kernels::encodedBytes(codec, n));
                     const std::size_t used = compute.encode(codec, b.codecInput, b.residual, out, 1);
                     compute.decode(codec, out.first(used), b.decoded,
                                    kernels::DecodeMode::kOverwrite);
                   }});
  }
  return ops;
}

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const std::size_t mid = values.size() / 2;
  return values.size() % 2 == 1 ? values[mid] : 0.5 * (values[mid - 1] + values[mid]);
}

// JSON keys of the operations' ratios at the largest size, headline first.
constexpr std::pair<const char*, const char*> kRatioKeys[] = {
    {"weightedSum2", "ratio_vs_memcpy"},
    {"weightedSum4", "ratio_weighted_sum4"},
    {"elasticPull", "ratio_elastic_pull"},
    {"momentumStep", "ratio_momentum"},
    {"triad", "ratio_triad_vs_memcpy"},
    {"codec int8", "codec_int8_ratio_vs_memcpy"},
    {"codec int4", "codec_int4_ratio_vs_memcpy"},
    {"codec fp16", "codec_fp16_ratio_vs_memcpy"},
    {"codec topk:0.01:sampled", "codec_topk_ratio_vs_memcpy"},
    {"codec topk:0.01", "codec_topk_exact_ratio_vs_memcpy"},
};

void runKernels(const KernelsOptions& options) {
  std::vector<std::size_t> sizes;
  for (const std::string& text : options.sizes) sizes.push_back(*parseCount(text));
  std::sort(sizes.begin(), sizes.end());
  sizes.erase(std::unique(sizes.begin(), sizes.end()), sizes.end());

  std::string fallbackReason;
  std::unique_ptr<kernels::Compute> compute =
      makeBenchCompute(options.common.device, &fallbackReason);
  const bool gpu = compute->device() == kernels::Device::kCuda;
  const double target = gpu ? kGpuTargetRatio : kCpuTargetRatio;

  fmt::print("kernels on {}\n", compute->describe());
  if (!fallbackReason.empty()) {
    fmt::print("note: --device cuda unavailable ({}); measured on the cpu\n", fallbackReason);
  }
  fmt::print(
      "baseline: memcpy = compute.copy(dst, src) ({}), timed interleaved with the ops at each "
      "size; ratio = op GB/s / memcpy GB/s, target >= {}\n",
      gpu ? "cudaMemcpyAsync device-to-device" : "std::memcpy, one thread", target);
  fmt::print(
      "GB/s = (bytes read + written) / p50 time per call; bytes for n floats: memcpy 2n*4, "
      "weightedSum-k (k+1)n*4, elasticPull 4n*4, momentumStep 5n*4, triad 3n*4 (STREAM's "
      "count), codec X (encode with error feedback + decode) 2n*4 like memcpy, target >= 0.8{}\n\n",
      gpu ? "; no triad on a GPU (host loop)" : "");
  std::fflush(stdout);

  Table table({{"op"},
               {"floats"},
               {"pass"},
               {"GB/s", 2},
               {"p50 us", 2},
               {"p99 us", 2},
               {"calls"},
               {"memcpy GB/s", 2},
               {"ratio", 3}});
  // Per-pass figures at the largest size, for the headline.
  std::map<std::string, std::vector<double>> headlineRatios;
  std::vector<double> headlineMemcpy;
  std::vector<double> headlineGbps;  // weightedSum2

  for (std::size_t n : sizes) {
    KernelBuffers buffers(*compute, n);
    const std::vector<KernelOp> ops = makeOps(*compute, buffers, n);
    std::vector<std::function<void()>> calls;
    for (const KernelOp& op : ops) calls.push_back(op.run);
    for (int pass = 1; pass <= options.repeat; ++pass) {
      fmt::print(stderr, "measuring {} floats, pass {}/{}\n", formatCount(n), pass, options.repeat);
      const std::vector<Stats> stats =
          measureInterleaved(calls, options.minTime, [&] { compute->synchronize(); });
      const double memcpyGbps = ops[0].bytes / stats[0].p50 / 1e9;
      for (std::size_t i = 0; i < ops.size(); ++i) {
        const double gbps = ops[i].bytes / stats[i].p50 / 1e9;
        table.addRow({ops[i].name, Count{n}, std::int64_t{pass}, gbps, stats[i].p50 * 1e6,
                      stats[i].p99 * 1e6, static_cast<std::int64_t>(stats[i].iterations),
                      memcpyGbps, gbps / memcpyGbps});
        if (n == sizes.back() && i > 0) headlineRatios[ops[i].name].push_back(gbps / memcpyGbps);
      }
      if (n == sizes.back()) {
        headlineMemcpy.push_back(memcpyGbps);
        headlineGbps.push_back(ops[1].bytes / stats[1].p50 / 1e9);
      }
    }
  }

  fmt::print("{}\n", table.format());
  const double headline = median(headlineRatios["weightedSum2"]);
  fmt::print("weightedSum2 at {} floats: {:.3f} of memcpy{} (target >= {}): {}\n",
             formatCount(sizes.back()), headline,
             options.repeat > 1 ? fmt::format(", median of {} passes", options.repeat) : "", target,
             headline >= target ? "met" : "NOT met");
  if (!options.common.csvPath.empty()) table.writeCsv(options.common.csvPath);

  if (options.common.json) {
    JsonObject json;
    json.add("benchmark", "kernels");
    json.add("device", kernels::deviceName(compute->device()));
    if (!fallbackReason.empty()) json.add("fallback_reason", fallbackReason);
    json.add("floats", static_cast<std::uint64_t>(sizes.back()));
    for (const auto& [op, key] : kRatioKeys) {
      if (headlineRatios.count(op) > 0) json.add(key, median(headlineRatios[op]));
    }
    json.add("memcpy_gbps", median(headlineMemcpy));
    json.add("weighted_sum2_gbps", median(headlineGbps));
    json.add("target_ratio", target);
    json.add("passes", options.repeat);
    fmt::print("{}\n", json.str());
  }
}

}  // namespace

void addKernelsCommand(CLI::App& app) {
  auto options = std::make_shared<KernelsOptions>();
  CLI::App* command = app.add_subcommand(
      "kernels",
      "GB/s of weightedSum (2 and 4 inputs), elasticPull and momentumStep next to memcpy and a "
      "STREAM triad");
  addCommonOptions(*command, options->common);
  command
      ->add_option("--sizes", options->sizes,
                   "Buffer sizes in floats, comma-separated, K/M/G = 2^10/2^20/2^30")
      ->delimiter(',')
      ->check(CLI::Validator(
          [](std::string& text) {
            return parseCount(text) ? std::string() : "not a positive count like 4096 or 16M";
          },
          "COUNT", "count"))
      ->capture_default_str();
  command->add_option("--min-time", options->minTime, "Seconds each op is timed per size and pass")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  command->add_option("--repeat", options->repeat, "Passes over each size; headline = median")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  command->callback([options] { runKernels(*options); });
}

}  // namespace gossamer::bench
