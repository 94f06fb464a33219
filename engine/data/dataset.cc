#include "engine/data/dataset.h"

#include <algorithm>

#include "engine/base/enforce.h"

namespace gossamer::engine::data {

Dataset Dataset::subset(std::span<const std::size_t> indices) const {
  Dataset out;
  out.name = name;
  out.features = features;
  out.classes = classes;
  out.inputs.resize(indices.size() * features);
  out.labels.resize(indices.size());
  for (std::size_t i = 0; i < indices.size(); ++i) {
    const std::size_t index = indices[i];
    GOSSAMER_ENFORCE_LT(index, count(), "subset row {} of dataset '{}'", i, name);
    const std::span<const float> source = row(index);
    std::copy(source.begin(), source.end(), out.inputs.begin() + i * features);
    out.labels[i] = labels[index];
  }
  return out;
}

}  // namespace gossamer::engine::data
