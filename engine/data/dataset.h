// In-memory classification datasets on the host: the IDX reader, the synthetic generator and
// sharding all produce or consume this one shape.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace gossamer::engine::data {

// `count` samples of `features` floats each (row-major, pixel values scaled to [0, 1] for images)
// with labels in [0, classes).
struct Dataset {
  std::string name;
  std::size_t features = 0;
  std::size_t classes = 0;
  std::vector<float> inputs;          // count * features
  std::vector<std::int32_t> labels;   // count

  std::size_t count() const { return labels.size(); }
  std::span<const float> row(std::size_t i) const {
    return {inputs.data() + i * features, features};
  }
  // A new dataset holding the given rows, in that order.
  Dataset subset(std::span<const std::size_t> indices) const;
};

}  // namespace gossamer::engine::data
