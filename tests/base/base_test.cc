// engine/base: error macros, the JSON writer, logging levels; and the device fallback of the
// builtin registry.
#include <doctest/doctest.h>

#include <cmath>

#include "engine/base/enforce.h"
#include "engine/base/json.h"
#include "engine/base/log.h"
#include "engine/builtin.h"

namespace gossamer {
namespace {

TEST_CASE("base: GOSSAMER_ENFORCE messages carry the values, the condition and file:line") {
  const std::size_t got = 3, want = 4;
  CHECK_THROWS_WITH_AS(GOSSAMER_ENFORCE_EQ(got, want, "buffer '{}' size", "params"),
                       doctest::Contains("(3 vs 4) buffer 'params' size (check failed: got == want)"),
                       Error);
  CHECK_THROWS_WITH_AS(GOSSAMER_ENFORCE(got > want, "need more"), doctest::Contains("base_test.cc:"), Error);
  CHECK_THROWS_WITH_AS(GOSSAMER_THROW("plain {}", 1), doctest::Contains("plain 1 ["), Error);
  CHECK_NOTHROW(GOSSAMER_ENFORCE_LT(got, want));
}

TEST_CASE("base: JsonObject writes one flat object with escaping and null for non-finite") {
  const std::string json = JsonObject()
                               .add("name", "a \"quoted\"\nline")
                               .add("steps", std::int64_t{42})
                               .add("ok", true)
                               .add("nan", std::nan(""))
                               .add("ratio", 0.5)
                               .addRaw("list", "[1,2]")
                               .str();
  CHECK(json == R"({"name":"a \"quoted\"\nline","steps":42,"ok":true,"nan":null,"ratio":0.5,"list":[1,2]})");
}

TEST_CASE("base: named loggers share a level and unknown levels are refused") {
  auto a = log::get("test-a");
  CHECK(log::get("test-a") == a);
  log::setLevel("warn");
  CHECK(log::get("test-b")->level() == spdlog::level::warn);
  CHECK(a->level() == spdlog::level::warn);
  CHECK_THROWS_WITH_AS(log::setLevel("loud"), doctest::Contains("unknown log level 'loud'"), Error);
  log::setLevel("info");
}

TEST_CASE("base: asking for CUDA without a usable device falls back to the CPU and says why") {
  std::string reason = "unset";
  auto compute = engine::makeCompute(kernels::Device::kCuda, &reason);
  REQUIRE(compute != nullptr);
  if (compute->device() == kernels::Device::kCpu) {
    MESSAGE("CUDA fallback reason: " << reason);
    CHECK_FALSE(reason.empty());
    CHECK(reason != "unset");
  } else {
    CHECK(reason.empty());
  }
  CHECK(engine::makeCompute(kernels::Device::kCpu, &reason)->device() == kernels::Device::kCpu);
  CHECK(reason.empty());
  CHECK_THROWS_WITH_AS(engine::parseDevice("tpu"), doctest::Contains("unknown device 'tpu'"), Error);
}

}  // namespace
}  // namespace gossamer
