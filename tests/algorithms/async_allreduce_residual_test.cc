// The non-blocking all-reduce's error feedback per stream (algorithms/async_allreduce.h,
// "Compression"): three peers run interleaved compressed rounds of three streams, two of the same
// size and one smaller, with top-k 10% (most of every input left in the residuals). Each stream
// must conserve its own mass: per element, the sum of its decoded means plus the owners' reduced
// residual plus the mean of the members' contribution residuals equals the mean of the sums of its
// inputs. Residuals shared between streams (mass leaking from one stream into another) or reset
// when a stream of another size comes between (mass lost) break that identity.
#include "algorithms/async_allreduce.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include <doctest/doctest.h>

#include "kernels/codec.h"
#include "tests/algorithms/algorithm_testing.h"
#include "tests/support/watchdog.h"

namespace gossamer::algorithms {
namespace {

using namespace std::chrono_literals;

constexpr std::size_t kStreams = 3;
constexpr std::uint64_t kRounds = 6;  // per stream

std::size_t streamSize(std::size_t stream) { return stream == 2 ? 700 : 1000; }

// A different, deterministic input per peer, stream, round and element, of magnitude about 1.
float inputValue(std::size_t rank, std::size_t stream, std::uint64_t round, std::size_t i) {
  return static_cast<float>(
      std::sin(0.37 * static_cast<double>(i + 1) * static_cast<double>(stream + 2) +
               1.3 * static_cast<double>(rank) + 0.71 * static_cast<double>(round)) *
      (1.0 + 0.5 * static_cast<double>(stream)));
}

// What each peer saw of one stream.
struct StreamRecord {
  std::vector<double> inputs;                 // the sum of its inputs over the rounds
  std::vector<double> results;                // the sum of the decoded means over the rounds
  std::vector<float> contributions, reduced;  // its residuals at the end
  std::vector<float> lastResult;              // the last round's mean, for bit-equality
};

struct Records {
  std::mutex mutex;
  std::map<std::size_t, std::vector<StreamRecord>> byRank;  // rank -> stream -> record
};

class ResidualCheck final : public engine::Algorithm {
 public:
  explicit ResidualCheck(std::shared_ptr<Records> records) : records_(std::move(records)) {}
  std::string name() const override { return "residual-check"; }

  void setup(engine::PeerContext& ctx) override {
    if (done_) return;  // a later membership change must not start unmatched rounds
    done_ = true;
    const auto rank = static_cast<std::size_t>(
        std::find(ctx.members().begin(), ctx.members().end(), ctx.self()) - ctx.members().begin());
    AsyncAllReduce reduce(
        {.kind = 1, .op = ReduceOp::kMean, .pieces = 2, .who = "residual-check", .compress = true});
    std::vector<StreamRecord> records(kStreams);
    for (std::size_t s = 0; s < kStreams; ++s) {
      records[s].inputs.assign(streamSize(s), 0.0);
      records[s].results.assign(streamSize(s), 0.0);
    }
    // Rounds r = 1, 2, ... go to the streams in turn: 0, 1, 2, 0, 1, 2, ...
    for (std::uint64_t r = 1; r <= kRounds * kStreams; ++r) {
      const std::size_t s = (r - 1) % kStreams;
      std::vector<float> input(streamSize(s));
      for (std::size_t i = 0; i < input.size(); ++i) {
        input[i] = inputValue(rank, s, r, i);
        records[s].inputs[i] += input[i];
      }
      reduce.start(ctx, r, input, s);
      if (reduce.wait(ctx, r, engine::Clock::now() + 20s) != RingOutcome::kComplete) {
        ctx.metrics().set("residual.failed", 1);
        return;
      }
      std::vector<float> result(input.size());
      ctx.compute().download(std::span<float>(result), reduce.result(r));
      for (std::size_t i = 0; i < result.size(); ++i) records[s].results[i] += result[i];
      records[s].lastResult = std::move(result);
      reduce.release(ctx, r);
    }
    for (std::size_t s = 0; s < kStreams; ++s) {
      const AsyncAllReduce::Residuals residuals = reduce.residuals(s);
      records[s].contributions.resize(residuals.contributions.size());
      records[s].reduced.resize(residuals.reduced.size());
      ctx.compute().download(std::span<float>(records[s].contributions), residuals.contributions);
      ctx.compute().download(std::span<float>(records[s].reduced), residuals.reduced);
    }
    std::lock_guard lock(records_->mutex);
    records_->byRank[rank] = std::move(records);
  }

 private:
  std::shared_ptr<Records> records_;
  bool done_ = false;
};

TEST_CASE("async-allreduce: interleaved compressed streams keep their error feedback apart") {
  test::Watchdog watchdog(60s);
  auto records = std::make_shared<Records>();
  engine::Registry registry = algorithms::makeRegistry();
  registry.algorithms.add(
      "residual-check", "per-stream error feedback checks",
      engine::AlgorithmSpec{
          "per-stream error feedback checks", "mesh", {}, [records](const engine::OptionValues&) {
            return std::make_unique<ResidualCheck>(records);
          }});
  const std::size_t n = 3;
  auto config = test::algorithmCluster("residual-check", n, 1);
  config.peer.training.compression = {kernels::parseCodec("topk:0.1"), true};
  const auto result = engine::runtime::runLocalCluster(config, registry, test::smallData());
  for (const auto& p : result.peers) CHECK(p.metrics.count("residual.failed") == 0);
  REQUIRE(records->byRank.size() == n);

  for (std::size_t s = 0; s < kStreams; ++s) {
    CAPTURE(s);
    const std::size_t size = streamSize(s);
    double worst = 0, leftOut = 0;
    for (std::size_t rank = 0; rank < n; ++rank) {
      const StreamRecord& got = records->byRank[rank][s];
      REQUIRE(got.contributions.size() == size);
      REQUIRE(got.reduced.size() == size);
      CHECK(got.lastResult == records->byRank[0][s].lastResult);  // the same decoded bits
    }
    for (std::size_t i = 0; i < size; ++i) {
      double inputs = 0, contributions = 0, reduced = 0;
      for (std::size_t rank = 0; rank < n; ++rank) {
        const StreamRecord& got = records->byRank[rank][s];
        inputs += got.inputs[i];
        contributions += got.contributions[i];
        reduced += got.reduced[i];  // non-zero only on the owner's chunk
      }
      const double sent = records->byRank[0][s].results[i];
      const double expected = inputs / static_cast<double>(n);
      worst = std::max(
          worst, std::abs(sent + reduced + contributions / static_cast<double>(n) - expected));
      leftOut = std::max(leftOut, std::abs(reduced) + std::abs(contributions));
    }
    INFO("stream " << s << ": largest mass defect " << worst << ", largest residual " << leftOut);
    CHECK(leftOut > 0.1);  // top-k left much of the inputs in the residuals: the check has teeth
    CHECK(worst < 1e-4);   // float32 rounding of a few additions of values about 1
  }
}

}  // namespace
}  // namespace gossamer::algorithms
