// libFuzzer target: net::wire::decodeHeader on arbitrary bytes (body: tests/net/wire_fuzz.h).
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "tests/net/wire_fuzz.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string problem = gossamer::net::testing::fuzzFrameDecoder(data, size);
  if (!problem.empty()) {
    std::fprintf(stderr, "fuzz_frame_decoder: %s\n", problem.c_str());
    std::abort();
  }
  return 0;
}
