// The algorithms that exchange through the non-blocking all-reduce with compression on
// (allreduce-sgd's gradients, dts's windows, diloco's outer gradients, local-sgd's changes): the members stay
// bit-identical where the algorithm keeps them so, the convex optimum is still reached with
// every codec (error feedback on), and the bytes on the wire shrink as the codec says.
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include "kernels/codec.h"
#include "tests/algorithms/compression_testing.h"
#include "tests/support/watchdog.h"

namespace gossamer::algorithms {
namespace {

using namespace std::chrono_literals;

struct Outcome {
  double error = 0;      // relative distance of the average model to the convex optimum
  double distance = 0;   // the consensus distance at the end
  double bytesSent = 0;  // per peer
};

Outcome convexRun(const std::string& algorithm, engine::OptionValues options,
                  const std::string& codec, std::uint64_t steps, double lr) {
  const auto result =
      test::runCompressed(test::convexCluster(algorithm, 4, steps, lr, std::move(options)), codec);
  return {test::relativeError(test::meanOf(result.finals),
                              test::convexOptimum(test::kConvexWeightDecay)),
          result.consensus.distance, test::bytesPerPeer(result)};
}

TEST_CASE("compression: allreduce-sgd reaches the convex optimum with every codec, peers identical") {
  test::Watchdog watchdog(240s);
  const Outcome plain = convexRun("allreduce-sgd", {}, "none", 400, 0.1);
  for (const char* codec : {"fp16", "bf16", "int8", "int4", "topk:0.1", "randk:0.25"}) {
    const Outcome got = convexRun("allreduce-sgd", {}, codec, 400, 0.1);
    INFO(std::string(codec) << ": distance to the optimum " << got.error << " (float32: " << plain.error << ")");
    CHECK(got.error < 0.05);
    CHECK(got.distance == 0);  // every member applies the same decoded mean
  }
}

// Bytes per peer of 50 allreduce-sgd steps on an MLP of ~43k parameters (headers are a small
// part of the traffic there, unlike with the 68 parameters of the convex problem).
double mlpBytes(const std::string& codec) {
  auto config = test::algorithmCluster("allreduce-sgd", 4, 50, 0.1);
  test::useMlp(config);
  const auto result = test::runCompressed(config, codec);
  CHECK(result.consensus.distance == 0);
  return test::bytesPerPeer(result);
}

TEST_CASE("compression: each codec sends the share of float32's bytes its layout says") {
  test::Watchdog watchdog(180s);
  const double plain = mlpBytes("none");
  // Payload bytes per element against float32's 4, with headers on top: fp16 2, int8 1 + a
  // 4-byte scale per 256, int4 0.5 + the same, top-k 1% 8 bytes per kept element.
  const std::vector<std::pair<const char*, double>> expected = {
      {"fp16", 0.5}, {"int8", 0.254}, {"int4", 0.129}, {"topk:0.01", 0.02}};
  for (const auto& [codec, share] : expected) {
    const double ratio = mlpBytes(codec) / plain;
    INFO(std::string(codec) << ": " << ratio << " of float32's bytes, expected " << share << " + headers");
    CHECK(ratio >= share);
    CHECK(ratio < share + 0.03);
  }
}

TEST_CASE("compression: local-sgd averages compressed changes and ends with identical models") {
  test::Watchdog watchdog(180s);
  for (const char* codec : {"int8", "topk:0.1"}) {
    const Outcome got = convexRun("local-sgd", {{"tau", "4"}}, codec, 400, 0.1);
    INFO("local-sgd " << std::string(codec) << ": " << got.error);
    CHECK(got.error < 0.05);
    CHECK(got.distance == 0);  // the last round's mean is the same bits everywhere
  }
}

TEST_CASE("compression: dts and diloco reach the convex optimum's neighbourhood with int8 and top-k") {
  test::Watchdog watchdog(240s);
  for (const char* codec : {"int8", "topk:0.1"}) {
    const Outcome dts = convexRun("dts", {{"delay", "2"}, {"period", "2"}}, codec, 400, 0.1);
    INFO("dts " << std::string(codec) << ": " << dts.error);
    CHECK(dts.error < 0.05);
    const Outcome diloco =
        convexRun("diloco", {{"h", "10"}, {"outer-lr", "1"}, {"outer-momentum", "0"}}, codec,
                  400, 0.1);
    INFO("diloco " << std::string(codec) << ": " << diloco.error);
    CHECK(diloco.error < 0.05);
  }
}

}  // namespace
}  // namespace gossamer::algorithms
