// Backup workers in the non-blocking all-reduce (algorithms/async_allreduce.h, "Backup workers"):
// four in-process members, one backup (each piece reduced from the first 3 contributions). A member
// that starts only after the others finished takes the mean of the three as its result, its own
// contribution dropped; an owner that listens without an input reduces its chunk from the three;
// two members with one backup each make each piece of one input alone (the first to reach its
// owner). Closed forms, the same bits on every member.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <thread>
#include <vector>

#include <doctest/doctest.h>

#include "algorithms/async_allreduce.h"
#include "tests/algorithms/algorithm_testing.h"
#include "tests/support/watchdog.h"

namespace gossamer::algorithms {
namespace {

using namespace std::chrono_literals;

constexpr std::size_t kSize = 1001;
constexpr std::uint64_t kRound = 7;
constexpr std::uint32_t kDone = 9;  // "I completed the round", to the member that waits for it

// Rank r's input at index i: (r + 1) (i mod 97 + 1), small integers (sums exact in float).
float input(std::size_t rank, std::size_t i) {
  return static_cast<float>((rank + 1) * (i % 97 + 1));
}

enum class Behaviour {
  kLateContributor,  // owners ranks 0-2; rank 3 contributes once the others completed the round
  kOwnerListens,     // every member owns a chunk; rank 3 listens, 200 ms after the others start
  kPairOfOne,        // two members, one backup: a quorum of one
};

class BackupCheck final : public engine::Algorithm {
 public:
  explicit BackupCheck(Behaviour behaviour) : behaviour_(behaviour) {}
  std::string name() const override { return "backup-check"; }

  void setup(engine::PeerContext& ctx) override {
    if (done_) return;
    done_ = true;
    const std::vector<engine::PeerId>& members = ctx.members();
    const auto rank = static_cast<std::size_t>(
        std::find(members.begin(), members.end(), ctx.self()) - members.begin());
    AsyncAllReduce reduce({.kind = 1, .op = ReduceOp::kMean, .pieces = 3, .backups = 1});
    std::vector<float> mine(kSize);
    for (std::size_t i = 0; i < kSize; ++i) mine[i] = input(rank, i);
    const bool late = rank == 3 && behaviour_ != Behaviour::kPairOfOne;
    if (behaviour_ == Behaviour::kLateContributor) {
      reduce.setOwners({members[0], members[1], members[2]});
      if (late) {  // until the three completed the round and released it
        for (int heard = 0; heard < 3;) {
          REQUIRE(ctx.inbox().wait(kDone, engine::Clock::now() + 20s));
          heard += static_cast<int>(ctx.inbox().drain(kDone).size());
        }
      }
    }
    if (late && behaviour_ == Behaviour::kOwnerListens) {
      std::this_thread::sleep_for(200ms);
      reduce.listen(ctx, kRound, kSize);
    } else {
      reduce.start(ctx, kRound, mine);
    }
    const RingOutcome outcome = reduce.wait(ctx, kRound, engine::Clock::now() + 20s);
    ctx.metrics().set("check.outcome", static_cast<double>(outcome));
    if (outcome != RingOutcome::kComplete) return;
    std::vector<float> result(kSize);
    ctx.compute().download(std::span<float>(result), reduce.result(kRound));
    std::uint64_t bits = 14695981039346656037ull;
    for (float value : result) {
      std::uint32_t word = 0;
      std::memcpy(&word, &value, sizeof(word));
      bits = (bits ^ word) * 1099511628211ull;
    }
    ctx.metrics().set("check.bits", static_cast<double>(bits >> 12));
    ctx.metrics().set("check.error", error(result, members.size()));
    reduce.release(ctx, kRound);
    if (behaviour_ == Behaviour::kLateContributor && rank < 3)
      ctx.send(members[3], engine::Message{.kind = kDone, .step = kRound});
  }

 private:
  // The largest difference from the closed form: the mean of ranks 0-2 (four members); with two,
  // each piece one member's input (whichever reached the piece's owner first).
  static double error(const std::vector<float>& result, std::size_t n) {
    if (n != 2) {
      double worst = 0;
      for (std::size_t i = 0; i < kSize; ++i)
        worst = std::max(worst, std::abs(result[i] - 2.0 * static_cast<double>(i % 97 + 1)));
      return worst;
    }
    double worst = 0;
    for (std::size_t chunk = 0; chunk < 2; ++chunk) {
      const Slice c = ringSlice(kSize, 2, chunk);
      for (std::size_t k = 0; k < ringPieces(c.count, 3); ++k) {
        const Slice p = ringSlice(c.count, ringPieces(c.count, 3), k);
        double best = 1e30;
        for (std::size_t rank = 0; rank < 2; ++rank) {
          double off = 0;
          for (std::size_t i = c.offset + p.offset; i < c.offset + p.offset + p.count; ++i)
            off = std::max(off, std::abs(static_cast<double>(result[i]) - input(rank, i)));
          best = std::min(best, off);
        }
        worst = std::max(worst, best);
      }
    }
    return worst;
  }

  Behaviour behaviour_;
  bool done_ = false;
};

engine::runtime::ClusterResult runChecks(Behaviour behaviour, std::size_t peers) {
  engine::Registry registry = algorithms::makeRegistry();
  registry.algorithms.add(
      "backup-check", "backup worker checks",
      engine::AlgorithmSpec{"backup worker checks", "mesh", {}, [behaviour](const auto&) {
                              return std::make_unique<BackupCheck>(behaviour);
                            }});
  auto config = test::algorithmCluster("backup-check", peers, 1);
  return engine::runtime::runLocalCluster(config, registry, test::smallData());
}

void checkClosedFormEverywhere(const engine::runtime::ClusterResult& result) {
  for (const auto& p : result.peers) {
    REQUIRE(p.metrics.at("check.outcome") == static_cast<double>(RingOutcome::kComplete));
    CHECK(p.metrics.at("check.error") == 0);
    CHECK(p.metrics.at("check.bits") == result.peers[0].metrics.at("check.bits"));
  }
}

TEST_CASE(
    "async-allreduce backups: a member later than the quorum takes its mean, its part dropped") {
  test::Watchdog watchdog(60s);
  checkClosedFormEverywhere(runChecks(Behaviour::kLateContributor, 4));
}

TEST_CASE("async-allreduce backups: an owner without an input reduces its chunk from the others") {
  test::Watchdog watchdog(60s);
  checkClosedFormEverywhere(runChecks(Behaviour::kOwnerListens, 4));
}

TEST_CASE("async-allreduce backups: with two members and one backup, each piece is one input") {
  test::Watchdog watchdog(60s);
  checkClosedFormEverywhere(runChecks(Behaviour::kPairOfOne, 2));
}

}  // namespace
}  // namespace gossamer::algorithms
