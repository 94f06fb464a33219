// Synthetic classification data: Gaussian clusters, one per class. Small, fast and learnable
// (a softmax regression separates them well), so tests and the local cluster run without files.
#pragma once

#include <cstddef>
#include <cstdint>

#include "engine/data/dataset.h"

namespace gossamer::engine::data {

struct SyntheticOptions {
  std::size_t count = 1000;
  std::size_t features = 20;
  std::size_t classes = 4;
  // Distance of every class mean from the origin (means point in uniformly random directions,
  // so two means are about separation * sqrt(2) apart when features is large).
  double separation = 3.0;
  // Standard deviation of the isotropic noise added to a class mean, per feature.
  double noise = 1.0;
  // Seeds the class means: sets made with the same distributionSeed share one distribution.
  std::uint64_t distributionSeed = 1;
  // Seeds which samples are drawn: a train and a test set differ here.
  std::uint64_t sampleSeed = 2;
};

// A dataset named "synthetic" of options.count samples with balanced labels (counts differ by at
// most 1: round-robin, then shuffled). The result is a pure function of the options, identical
// on every platform. Throws gossamer::Error unless count >= 1, features >= 1, classes >= 2,
// separation and noise finite and >= 0.
Dataset makeSynthetic(const SyntheticOptions& options);

}  // namespace gossamer::engine::data
