// libFuzzer target: the client and server handshakes against fuzzer-made frames, and a real
// client/server pair with a fuzzer-driven man in the middle (body: tests/net/wire_fuzz.h).
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "tests/net/wire_fuzz.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string problem = gossamer::net::testing::fuzzHandshake(data, size);
  if (!problem.empty()) {
    std::fprintf(stderr, "fuzz_handshake: %s\n", problem.c_str());
    std::abort();
  }
  return 0;
}
