// engine/base: error macros, the JSON writer, logging levels; and the device fallback of the
// builtin registry.
#include <cmath>
#include <functional>
#include <string>

#include <doctest/doctest.h>

#include "engine/base/enforce.h"
#include "engine/base/json.h"
#include "engine/base/log.h"
#include "engine/builtin.h"

namespace gossamer {
namespace {

// what() is the sentence a user reads; where() the check and file:line a developer needs.
Error thrown(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e;
  }
  FAIL("no gossamer::Error was thrown");
  return Error("");
}

TEST_CASE(
    "base: GOSSAMER_ENFORCE errors: the sentence in what(), the check and file:line in where()") {
  const std::size_t got = 3, want = 4;
  const Error eq = thrown([&] { GOSSAMER_ENFORCE_EQ(got, want, "buffer '{}' size", "params"); });
  CHECK(std::string(eq.what()) == "(3 vs 4) buffer 'params' size");
  CHECK(eq.where().starts_with("(check failed: got == want) ["));
  CHECK(eq.where().find("base_test.cc:") != std::string::npos);
  const Error plain = thrown([] { GOSSAMER_THROW("plain {}", 1); });
  CHECK(std::string(plain.what()) == "plain 1");
  CHECK(plain.where().starts_with("["));
  // A check without a message still says what failed.
  const Error bare = thrown([&] { GOSSAMER_ENFORCE(got > want); });
  CHECK(std::string(bare.what()) == "check failed: got > want");
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
  CHECK(
      json ==
      R"({"name":"a \"quoted\"\nline","steps":42,"ok":true,"nan":null,"ratio":0.5,"list":[1,2]})");
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

TEST_CASE(
    "base: --device auto falls back to the CPU and says why, --device cuda fails without a GPU") {
  std::string reason = "unset";
  auto compute = engine::makeCompute(engine::DeviceChoice::kAuto, &reason);
  REQUIRE(compute != nullptr);
  std::string whyNot;
  const bool gpu = engine::cudaUsable(&whyNot);
  if (!gpu) {
    MESSAGE("no usable GPU: " << whyNot);
    CHECK(compute->device() == kernels::Device::kCpu);
    CHECK(reason == whyNot);
    CHECK_FALSE(reason.empty());
    CHECK_THROWS_WITH_AS(engine::makeCompute(engine::DeviceChoice::kCuda),
                         doctest::Contains(("--device cuda: no usable GPU: " + whyNot).c_str()),
                         Error);
  } else {
    CHECK(compute->device() == kernels::Device::kCuda);
    CHECK(reason.empty());
    CHECK(engine::makeCompute(engine::DeviceChoice::kCuda)->device() == kernels::Device::kCuda);
  }
  CHECK(engine::makeCompute(engine::DeviceChoice::kCpu, &reason)->device() ==
        kernels::Device::kCpu);
  CHECK(reason.empty());
  CHECK(engine::parseDevice("auto") == engine::DeviceChoice::kAuto);
  CHECK_THROWS_WITH_AS(engine::parseDevice("tpu"), doctest::Contains("unknown device 'tpu'"),
                       Error);
}

}  // namespace
}  // namespace gossamer
