// libFuzzer target: a received compressed payload, checked and decoded (body:
// tests/kernels/codec_fuzz.h).
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "tests/kernels/codec_fuzz.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string problem = gossamer::kernels::testing::fuzzPayloadDecoder(data, size);
  if (!problem.empty()) {
    std::fprintf(stderr, "fuzz_payload_decoder: %s\n", problem.c_str());
    std::abort();
  }
  return 0;
}
