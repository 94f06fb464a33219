// Replays a checked-in libFuzzer seed corpus (tests/fuzz/corpus/NAME) through a fuzz body, so
// that every corpus input is a regression test of the default build.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include <doctest/doctest.h>

namespace gossamer::test {

// A fuzz body: an empty string, or the property the input broke.
using FuzzBody = std::string (*)(const std::uint8_t*, std::size_t);

// Runs `body` on every file of the corpus directory `name`, checking each; returns how many
// there were.
inline std::size_t replayCorpus(const std::string& name, FuzzBody body) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::path(GOSSAMER_SOURCE_DIR) / "tests" / "fuzz" / "corpus" / name;
  REQUIRE_MESSAGE(fs::is_directory(dir), dir.string());
  std::size_t count = 0;
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (!entry.is_regular_file()) continue;
    std::ifstream in(entry.path(), std::ios::binary);
    const std::vector<char> chars((std::istreambuf_iterator<char>(in)),
                                  std::istreambuf_iterator<char>());
    const std::vector<std::uint8_t> bytes(chars.begin(), chars.end());
    const std::string problem = body(bytes.data(), bytes.size());
    CHECK_MESSAGE(problem.empty(), entry.path().filename().string() << ": " << problem);
    ++count;
  }
  return count;
}

}  // namespace gossamer::test
