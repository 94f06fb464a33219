// Reader for the IDX format of MNIST and Fashion-MNIST (LeCun et al.):
// a big-endian header (magic 0x00000803 + count, rows, cols for uint8 images; magic 0x00000801 +
// count for uint8 labels) followed by the raw bytes. Files may be gzip'd or plain.
#pragma once

#include <string>

#include "engine/data/dataset.h"

namespace gossamer::engine::data {

enum class Split { kTrain, kTest };

// Where Debian's dataset-fashion-mnist package installs the four .gz files.
inline constexpr const char* kFashionMnistDir = "/usr/share/datasets/fashion-mnist";

// Reads an images/labels pair into a Dataset named `name`: features = rows * cols, pixels scaled
// from [0, 255] to [0, 1], classes = max label + 1. Both headers are validated (magic, dimensions
// bounded before any allocation, equal counts) before the payloads are read, so a bad pair fails
// fast. Throws gossamer::Error naming the offending file on a missing or unreadable file, bad
// magic, absurd or zero dimensions, truncated data (expected vs read bytes), corrupt gzip data
// (zlib's message) and count mismatch.
Dataset loadIdx(const std::string& imagesPath, const std::string& labelsPath, std::string name);

// Fashion-MNIST's train (60000) or test (10000) split of 28x28 images in 10 classes, from the
// files under `dir` (normally kFashionMnistDir). A missing file's error says how to install them.
Dataset loadFashionMnist(const std::string& dir, Split split);

}  // namespace gossamer::engine::data
