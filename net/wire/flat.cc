#include "net/wire/flat.h"

#include <array>
#include <cstring>

#include <capnp/serialize.h>

namespace gossamer::net::wire {
namespace {

std::uint32_t loadLe32(const std::byte* p) {
  return static_cast<std::uint32_t>(p[0]) | static_cast<std::uint32_t>(p[1]) << 8 |
         static_cast<std::uint32_t>(p[2]) << 16 | static_cast<std::uint32_t>(p[3]) << 24;
}

void storeLe32(std::byte* p, std::uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<std::byte>(v >> (8 * i));
}

}  // namespace

std::uint64_t traversalLimitWords(std::size_t bytes) {
  return 4 * static_cast<std::uint64_t>(bytes / sizeof(capnp::word)) + 1024;
}

std::error_code detail::loadSegments(std::span<const std::byte> bytes, FlatSegments& out) {
  constexpr std::size_t kWord = sizeof(capnp::word);
  // The segment table, read from the raw bytes before anything is allocated: a whole number of
  // words, a bounded segment count, and claimed sizes adding up exactly to what is here.
  if (bytes.size() < 2 * kWord || bytes.size() % kWord != 0) return Errc::malformedMessage;
  const std::uint64_t segmentCount = std::uint64_t{loadLe32(bytes.data())} + 1;
  if (segmentCount > kMaxSegments) return Errc::malformedMessage;
  const std::size_t tableBytes = (4 + 4 * segmentCount + 7) & ~std::size_t{7};
  if (tableBytes >= bytes.size()) return Errc::malformedMessage;
  std::array<std::uint32_t, kMaxSegments> sizes{};
  std::uint64_t claimedWords = 0;
  for (std::size_t i = 0; i < segmentCount; ++i) {
    sizes[i] = loadLe32(bytes.data() + 4 + 4 * i);
    claimedWords += sizes[i];  // at most 64 * (2^32 - 1): no overflow
  }
  if (sizes[0] == 0 || claimedWords != (bytes.size() - tableBytes) / kWord)
    return Errc::malformedMessage;

  // An aligned copy of exactly the claimed words (the input may sit at any address).
  out.words = kj::heapArray<capnp::word>(claimedWords);
  std::memcpy(out.words.begin(), bytes.data() + tableBytes, claimedWords * kWord);
  out.segments.clear();
  std::size_t offset = 0;
  for (std::size_t i = 0; i < segmentCount; ++i) {
    out.segments.push_back(kj::arrayPtr(out.words.begin() + offset, sizes[i]));
    offset += sizes[i];
  }
  return {};
}

std::vector<std::byte> flatten(capnp::MessageBuilder& builder) {
  auto segments = builder.getSegmentsForOutput();
  const std::size_t tableBytes = (4 + 4 * segments.size() + 7) & ~std::size_t{7};
  std::size_t total = tableBytes;
  for (auto s : segments) total += s.size() * sizeof(capnp::word);
  std::vector<std::byte> out(total);
  storeLe32(out.data(), static_cast<std::uint32_t>(segments.size() - 1));
  std::size_t offset = tableBytes;
  for (std::size_t i = 0; i < segments.size(); ++i) {
    storeLe32(out.data() + 4 + 4 * i, static_cast<std::uint32_t>(segments[i].size()));
    std::memcpy(out.data() + offset, segments[i].begin(), segments[i].size() * sizeof(capnp::word));
    offset += segments[i].size() * sizeof(capnp::word);
  }
  return out;
}

}  // namespace gossamer::net::wire
