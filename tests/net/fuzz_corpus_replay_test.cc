// Replays the checked-in libFuzzer seed corpora (tests/fuzz/corpus/) through the same fuzz
// bodies as the fuzz targets, so that every corpus input is a regression test of the default
// build.
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include "tests/net/wire_fuzz.h"

namespace {

namespace fs = std::filesystem;

using FuzzBody = std::string (*)(const std::uint8_t*, std::size_t);

// Runs `body` on every file of the corpus directory `name`; returns how many there were.
std::size_t replayCorpus(const std::string& name, FuzzBody body) {
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

}  // namespace

TEST_CASE("net wire: frame decoder fuzz corpus replays cleanly") {
  CHECK(replayCorpus("frame_decoder", &gossamer::net::testing::fuzzFrameDecoder) >= 10);
}

TEST_CASE("net wire: handshake fuzz corpus replays cleanly") {
  CHECK(replayCorpus("handshake", &gossamer::net::testing::fuzzHandshake) >= 10);
}
