#include "engine/model.h"

#include <fmt/format.h>

#include "engine/base/enforce.h"

namespace gossamer::engine {

std::size_t TensorSlot::size() const {
  std::size_t n = 1;
  for (std::size_t d : shape) n *= d;
  return n;
}

const TensorSlot& ParamLayout::add(std::string name, std::vector<std::size_t> shape) {
  GOSSAMER_ENFORCE(!shape.empty(), "tensor '{}' needs a shape", name);
  TensorSlot slot{std::move(name), std::move(shape), count_};
  count_ += slot.size();
  tensors_.push_back(std::move(slot));
  return tensors_.back();
}

std::uint64_t ParamLayout::fingerprint() const {
  std::uint64_t hash = 1469598103934665603ull;  // FNV-1a offset basis
  auto mix = [&hash](const void* data, std::size_t bytes) {
    const auto* p = static_cast<const unsigned char*>(data);
    for (std::size_t i = 0; i < bytes; ++i) {
      hash ^= p[i];
      hash *= 1099511628211ull;  // FNV prime
    }
  };
  for (const TensorSlot& t : tensors_) {
    mix(t.name.data(), t.name.size());
    for (std::uint64_t d : t.shape) mix(&d, sizeof d);
    const char separator = ';';
    mix(&separator, 1);
  }
  return hash;
}

std::string ParamLayout::describe() const {
  std::string text;
  for (const TensorSlot& t : tensors_) {
    if (!text.empty()) text += ' ';
    text += fmt::format("{}[{}]", t.name, fmt::join(t.shape, "x"));
  }
  return text;
}

}  // namespace gossamer::engine
