#include "engine/data/synthetic.h"

#include <cmath>
#include <span>
#include <vector>

#include "engine/base/enforce.h"
#include "engine/data/random.h"

namespace gossamer::engine::data {
namespace {

// Stream ids, so that one seed used for both purposes still gives unrelated draws.
constexpr std::uint64_t kMeansStream = 0x6D65616E;    // "mean"
constexpr std::uint64_t kSamplesStream = 0x73616D70;  // "samp"

}  // namespace

Dataset makeSynthetic(const SyntheticOptions& options) {
  GOSSAMER_ENFORCE_GE(options.count, 1u, "synthetic dataset: count");
  GOSSAMER_ENFORCE_GE(options.features, 1u, "synthetic dataset: features");
  GOSSAMER_ENFORCE_GE(options.classes, 2u, "synthetic dataset: classes");
  GOSSAMER_ENFORCE(std::isfinite(options.separation) && options.separation >= 0.0,
                   "synthetic dataset: separation must be finite and >= 0 (got {})",
                   options.separation);
  GOSSAMER_ENFORCE(std::isfinite(options.noise) && options.noise >= 0.0,
                   "synthetic dataset: noise must be finite and >= 0 (got {})", options.noise);
  GOSSAMER_ENFORCE(options.count <= (std::size_t{1} << 31) / options.features,
                   "synthetic dataset: {} x {} values is too large", options.count,
                   options.features);

  const std::size_t features = options.features;
  detail::Rng meansRng = detail::makeRng(options.distributionSeed, kMeansStream);
  std::vector<double> means(options.classes * features);
  for (std::size_t c = 0; c < options.classes; ++c) {
    const std::span<double> mean(means.data() + c * features, features);
    double norm2 = 0.0;
    while (norm2 == 0.0) {  // a zero direction has probability ~0; redraw rather than divide by 0
      norm2 = 0.0;
      for (double& m : mean) {
        m = detail::standardNormal(meansRng);
        norm2 += m * m;
      }
    }
    const double scale = options.separation / std::sqrt(norm2);
    for (double& m : mean) m *= scale;
  }

  Dataset out;
  out.name = "synthetic";
  out.features = features;
  out.classes = options.classes;
  out.labels.resize(options.count);
  for (std::size_t i = 0; i < options.count; ++i) {
    out.labels[i] = static_cast<std::int32_t>(i % options.classes);
  }
  detail::Rng samplesRng = detail::makeRng(options.sampleSeed, kSamplesStream);
  detail::shuffle(std::span<std::int32_t>(out.labels), samplesRng);
  out.inputs.resize(options.count * features);
  for (std::size_t i = 0; i < options.count; ++i) {
    const double* mean = means.data() + static_cast<std::size_t>(out.labels[i]) * features;
    float* x = out.inputs.data() + i * features;
    for (std::size_t f = 0; f < features; ++f) {
      x[f] = static_cast<float>(mean[f] + options.noise * detail::standardNormal(samplesRng));
    }
  }
  return out;
}

}  // namespace gossamer::engine::data
