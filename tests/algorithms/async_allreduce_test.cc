// The non-blocking all-reduce (algorithms/async_allreduce.h): in-process clusters whose peers
// start several rounds of rank-dependent values at once, collect them out of order and compare
// them with the closed-form sum and mean, for n in {1, 2, 3, 5} and sizes that n does not divide;
// a member that starts late; a member that never starts (the round fails within its deadline
// everywhere, and at once when that member finished training); a message of another view
// (refused, the round fails everywhere).
#include "algorithms/async_allreduce.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <thread>
#include <vector>

#include <doctest/doctest.h>

#include "tests/algorithms/algorithm_testing.h"
#include "tests/support/watchdog.h"

namespace gossamer::algorithms {
namespace {

using namespace std::chrono_literals;

// Peer of rank r contributes (r + 1) (i mod 97 + 1) round at index i: small integers, so the sum
// is exact in float whatever the order of the additions.
float contribution(std::size_t rank, std::size_t i, std::uint64_t round) {
  return static_cast<float>((rank + 1) * (i % 97 + 1) * round);
}

struct AsyncCase {
  std::size_t size;
  std::size_t pieces;
  ReduceOp op;
};

std::vector<AsyncCase> asyncCases() {
  std::vector<AsyncCase> cases;
  for (std::size_t size : {1, 2, 4, 7, 1001, 20011})
    for (std::size_t pieces : {1, 3, 16})
      cases.push_back({size, pieces, size % 2 ? ReduceOp::kSum : ReduceOp::kMean});
  return cases;
}

// What a check peer does in its first setup().
enum class Behaviour {
  kAllCases,   // every asyncCases() case, rounds 1..3 started at once, waited for in reverse
  kLateRank0,  // one round; rank 0 starts it 300 ms after the others
  kAbsent2,    // one round; rank 2 never starts it, the others wait 300 ms at most
  kFinished2,  // one round; rank 2 never starts it and trains its step, the others wait 20 s at
               // most
  kForged,     // one round; rank 1 first sends rank 0 a message of another view
};

class AsyncCheck final : public engine::Algorithm {
 public:
  explicit AsyncCheck(Behaviour behaviour) : behaviour_(behaviour) {}
  std::string name() const override { return "async-check"; }

  void setup(engine::PeerContext& ctx) override {
    if (done_) return;  // a later membership change must not start unmatched rounds
    done_ = true;
    const std::size_t n = ctx.members().size();
    rank_ = static_cast<std::size_t>(
        std::find(ctx.members().begin(), ctx.members().end(), ctx.self()) - ctx.members().begin());
    if (behaviour_ == Behaviour::kAllCases) {
      const std::vector<AsyncCase> cases = asyncCases();
      for (std::size_t c = 0; c < cases.size(); ++c) runCase(ctx, c, cases[c], n);
      return;
    }
    AsyncAllReduce reduce({.kind = 1, .op = ReduceOp::kSum, .pieces = 2, .who = "async-check"});
    const bool absent = behaviour_ == Behaviour::kAbsent2 || behaviour_ == Behaviour::kFinished2;
    if (absent && rank_ == 2) return;
    if (behaviour_ == Behaviour::kLateRank0 && rank_ == 0) std::this_thread::sleep_for(300ms);
    if (behaviour_ == Behaviour::kForged && rank_ == 1)
      ctx.send(ctx.members()[0], engine::Message{.kind = 1, .step = 7, .integers = {0, 0, 0, 0}});
    std::vector<float> input(1000, 1.0f);
    const engine::Clock::time_point start = engine::Clock::now();
    reduce.start(ctx, 7, input);
    const RingOutcome outcome = reduce.wait(ctx, 7,
                                            start + (behaviour_ == Behaviour::kAbsent2     ? 300ms
                                                     : behaviour_ == Behaviour::kFinished2 ? 20s
                                                                                           : 10s));
    ctx.metrics().set("async.seconds",
                      std::chrono::duration<double>(engine::Clock::now() - start).count());
    ctx.metrics().set("async.outcome", static_cast<double>(outcome));
    if (outcome == RingOutcome::kComplete) {
      std::vector<float> sum(1000);
      ctx.compute().download(std::span<float>(sum), reduce.result(7));
      ctx.metrics().set("async.sum", sum[999]);
    }
  }

 private:
  void runCase(engine::PeerContext& ctx, std::size_t c, const AsyncCase& ac, std::size_t n) {
    AsyncAllReduce reduce({.kind = static_cast<std::uint32_t>(c + 1),
                           .op = ac.op,
                           .pieces = ac.pieces,
                           .who = "async-check"});
    for (std::uint64_t round = 1; round <= 3; ++round) {
      std::vector<float> input(ac.size);
      for (std::size_t i = 0; i < ac.size; ++i) input[i] = contribution(rank_, i, round);
      reduce.start(ctx, round, input);
      std::fill(input.begin(), input.end(), -1.0f);  // start() copied it
    }
    for (std::uint64_t round = 3; round >= 1; --round) {
      const RingOutcome outcome = reduce.wait(ctx, round, engine::Clock::now() + 20s);
      std::vector<float> result(ac.size);
      if (outcome == RingOutcome::kComplete)
        ctx.compute().download(std::span<float>(result), reduce.result(round));
      double error = 0;
      std::uint64_t bits = 14695981039346656037ull;
      for (std::size_t i = 0; i < ac.size; ++i) {
        double expected =
            static_cast<double>((i % 97 + 1) * round) * static_cast<double>(n * (n + 1) / 2);
        if (ac.op == ReduceOp::kMean) expected /= static_cast<double>(n);
        error = std::max(error, std::abs(result[i] - expected) / expected);
        std::uint32_t word = 0;
        std::memcpy(&word, &result[i], sizeof(word));
        bits = (bits ^ word) * 1099511628211ull;
      }
      const std::string key = "async." + std::to_string(c) + "." + std::to_string(round);
      ctx.metrics().set(key + ".error", outcome == RingOutcome::kComplete ? error : -1.0);
      ctx.metrics().set(key + ".bits", static_cast<double>(bits >> 12));
      reduce.release(ctx, round);
    }
    CHECK(reduce.rounds() == 0);
  }

  Behaviour behaviour_;
  std::size_t rank_ = 0;
  bool done_ = false;
};

engine::Registry asyncRegistry(Behaviour behaviour) {
  engine::Registry r = algorithms::makeRegistry();
  r.algorithms.add(
      "async-check", "non-blocking all-reduce checks",
      engine::AlgorithmSpec{
          "non-blocking all-reduce checks", "mesh", {}, [behaviour](const engine::OptionValues&) {
            return std::make_unique<AsyncCheck>(behaviour);
          }});
  return r;
}

TEST_CASE(
    "async-allreduce: n in {1, 2, 3, 5}, three rounds in flight, closed-form sums, bit-equal") {
  test::Watchdog watchdog(120s);
  const engine::Registry registry = asyncRegistry(Behaviour::kAllCases);
  for (std::size_t peers : {1, 2, 3, 5}) {
    CAPTURE(peers);
    auto config = test::algorithmCluster("async-check", peers, 1);
    const auto result = engine::runtime::runLocalCluster(config, registry, test::smallData());
    const std::vector<AsyncCase> cases = asyncCases();
    for (std::size_t c = 0; c < cases.size(); ++c) {
      for (int round = 1; round <= 3; ++round) {
        CAPTURE(c);
        CAPTURE(round);
        CAPTURE(cases[c].size);
        CAPTURE(cases[c].pieces);
        const std::string key = "async." + std::to_string(c) + "." + std::to_string(round);
        for (const auto& p : result.peers) {
          const double error = p.metrics.at(key + ".error");
          CHECK(error >= 0);  // the round completed
          CHECK(error <= (cases[c].op == ReduceOp::kSum ? 0 : 5e-7));
          CHECK(p.metrics.at(key + ".bits") == result.peers[0].metrics.at(key + ".bits"));
        }
      }
    }
    if (peers == 1) CHECK(result.peers[0].bytesSent == 0);
  }
}

TEST_CASE("async-allreduce: the messages of a member that starts late are kept until it does") {
  test::Watchdog watchdog(60s);
  const engine::Registry registry = asyncRegistry(Behaviour::kLateRank0);
  auto config = test::algorithmCluster("async-check", 4, 1);
  const auto result = engine::runtime::runLocalCluster(config, registry, test::smallData());
  for (const auto& p : result.peers) {
    CHECK(p.metrics.at("async.outcome") == static_cast<double>(RingOutcome::kComplete));
    CHECK(p.metrics.at("async.sum") == 4.0);
  }
}

// A 4-peer run whose rank 2 behaves as `behaviour`: ranks 0, 1 and 3 fail the round (missing or
// aborted) within 5 s, whatever the deadline (`commTimeout`).
void checkRoundFailsFastWithoutRank2(Behaviour behaviour, std::chrono::seconds commTimeout) {
  test::Watchdog watchdog(60s);
  const engine::Registry registry = asyncRegistry(behaviour);
  auto config = test::algorithmCluster("async-check", 4, 1);
  config.peer.training.commTimeout = commTimeout;
  const auto result = engine::runtime::runLocalCluster(config, registry, test::smallData());
  for (std::size_t rank : {0, 1, 3}) {
    CAPTURE(rank);
    const auto& metrics = result.peers[rank].metrics;
    const double outcome = metrics.at("async.outcome");
    CHECK((outcome == static_cast<double>(RingOutcome::kMissing) ||
           outcome == static_cast<double>(RingOutcome::kAborted)));
    CHECK(metrics.at("async.seconds") < 5.0);
  }
}

TEST_CASE("async-allreduce: a member that never starts the round fails it within the deadline") {
  checkRoundFailsFastWithoutRank2(Behaviour::kAbsent2, 10s);  // algorithmCluster's deadline
}

// A member that finished training sends nothing more: the round ends when its finished marks
// come (PeerContext::doneSending), not at the 30 s deadline.
TEST_CASE("async-allreduce: a round short of a member that finished training ends at once") {
  checkRoundFailsFastWithoutRank2(Behaviour::kFinished2, 30s);
}

TEST_CASE("async-allreduce: a message of another view is refused and fails the round everywhere") {
  test::Watchdog watchdog(60s);
  const engine::Registry registry = asyncRegistry(Behaviour::kForged);
  auto config = test::algorithmCluster("async-check", 3, 1);
  const auto result = engine::runtime::runLocalCluster(config, registry, test::smallData());
  // Rank 0 fails the round on the forged message (another view's fingerprint) and aborts it at
  // the others: nobody completes a round that rank 0 left, and nobody waits for the deadline.
  CHECK(result.peers[0].metrics.at("async.outcome") == static_cast<double>(RingOutcome::kMismatch));
  for (const auto& p : result.peers) {
    CHECK(p.metrics.at("async.outcome") != static_cast<double>(RingOutcome::kComplete));
    CHECK(p.metrics.at("async.seconds") < 5.0);
  }
}

}  // namespace
}  // namespace gossamer::algorithms
