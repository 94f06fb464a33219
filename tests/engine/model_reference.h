// Float64 references of the built-in models' dense layers and loss, straight from the
// definitions, shared by the model tests.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace gossamer::engine::test {

// Dense layers of `widths` (widths[0] = a.size()) applied to `a`: per layer the (in x out)
// row-major weight then the bias, read from params at `offset` (advanced past them), with a
// ReLU between layers. Returns the logits.
inline std::vector<double> referenceDense(std::vector<double> a,
                                          const std::vector<std::size_t>& widths,
                                          const std::vector<double>& params, std::size_t& offset) {
  for (std::size_t l = 0; l + 1 < widths.size(); ++l) {
    const std::size_t in = widths[l], out = widths[l + 1];
    std::vector<double> z(out, 0.0);
    for (std::size_t j = 0; j < out; ++j) {
      for (std::size_t i = 0; i < in; ++i) z[j] += a[i] * params[offset + i * out + j];
      z[j] += params[offset + in * out + j];
      if (l + 2 < widths.size()) z[j] = std::max(z[j], 0.0);
    }
    offset += in * out + out;
    a = z;
  }
  return a;
}

// Softmax cross-entropy of one row of logits against its label.
inline double referenceCrossEntropy(const std::vector<double>& logits, std::int32_t label) {
  const double maxLogit = *std::max_element(logits.begin(), logits.end());
  double sum = 0;
  for (double v : logits) sum += std::exp(v - maxLogit);
  return std::log(sum) + maxLogit - logits[static_cast<std::size_t>(label)];
}

}  // namespace gossamer::engine::test
