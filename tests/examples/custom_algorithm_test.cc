// examples/custom_algorithm end to end: the user-written algorithm registers, runs as a local
// cluster and learns.
#include <cstdlib>
#include <string>

#include <doctest/doctest.h>

#include "tests/process_util.h"

namespace gossamer {
namespace {

TEST_CASE("examples: custom_algorithm trains a local cluster with a user-written algorithm") {
  const test::ProcessResult r = test::runCommand(GOSSAMER_CUSTOM_ALGORITHM_BINARY, 120);
  INFO(r.output);
  REQUIRE(r.exitCode == 0);
  const std::string line = test::lastLine(r.output);
  const std::string prefix = "custom algorithm: consensus accuracy ";
  REQUIRE(line.rfind(prefix, 0) == 0);
  CHECK(std::strtod(line.c_str() + prefix.size(), nullptr) > 80.0);
  CHECK(line.find(" 0 averagings") == std::string::npos);
}

}  // namespace
}  // namespace gossamer
