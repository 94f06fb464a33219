// The ring all-reduce (algorithms/ring_allreduce.h): the chunking arithmetic, then in-process
// clusters whose peers all-reduce rank-dependent values in setup() and compare them with the
// closed-form sum, for n in {1, 2, 3, 5} and buffer sizes that n does not divide.
#include "algorithms/ring_allreduce.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <set>
#include <vector>

#include <doctest/doctest.h>

#include "tests/algorithms/algorithm_testing.h"
#include "tests/support/watchdog.h"

namespace gossamer::algorithms {
namespace {

using namespace std::chrono_literals;

TEST_CASE("ring-allreduce: slices tile the buffer in near-equal parts, the larger ones first") {
  for (std::size_t size = 0; size <= 40; ++size) {
    for (std::size_t parts = 1; parts <= 9; ++parts) {
      std::size_t next = 0;
      for (std::size_t i = 0; i < parts; ++i) {
        const Slice s = ringSlice(size, parts, i);
        CHECK(s.offset == next);
        CHECK(s.count == size / parts + (i < size % parts ? 1 : 0));
        next += s.count;
      }
      CHECK(next == size);
    }
  }
  CHECK(ringSlice(10, 3, 0) == Slice{0, 4});
  CHECK(ringSlice(10, 3, 1) == Slice{4, 3});
  CHECK(ringSlice(10, 3, 2) == Slice{7, 3});
  CHECK(ringSlice(2, 5, 4) == Slice{2, 0});
  CHECK_THROWS_AS(ringSlice(10, 3, 3), gossamer::Error);
}

TEST_CASE("ring-allreduce: a chunk is sent in min(pipeline, size) sub-chunks, none empty") {
  CHECK(ringPieces(0, 4) == 0);
  CHECK(ringPieces(3, 4) == 3);
  CHECK(ringPieces(4, 4) == 4);
  CHECK(ringPieces(1001, 4) == 4);
  for (std::size_t count = 1; count <= 30; ++count)
    for (std::size_t pipeline = 1; pipeline <= kMaxRingPipeline; ++pipeline)
      for (std::size_t k = 0; k < ringPieces(count, pipeline); ++k)
        CHECK(ringSlice(count, ringPieces(count, pipeline), k).count >= 1);
}

TEST_CASE("ring-allreduce: the round tags of a ring are all distinct") {
  // Tags::forRound(kind, step, phase x pipeline + sub-chunk) must name one message of one round.
  std::set<std::uint64_t> tags;
  std::size_t count = 0;
  for (std::uint32_t kind = 1; kind <= 3; ++kind)
    for (std::uint64_t step = 0; step <= 200; ++step)
      for (std::uint32_t round = 0; round < 2 * 8 * kMaxRingPipeline; ++round, ++count)
        tags.insert(engine::Tags::forRound(kind, step, round));
  CHECK(tags.size() == count);
  CHECK(engine::Tags::forRound(1, 0, 0) != engine::Tags::forRound(1, 0, 2));
}

// One all-reduce the check algorithm runs.
struct RingCase {
  std::size_t size;
  std::size_t pipeline;
  ReduceOp op;
  bool inPlace;
};

// The cases every cluster runs: sizes below, at and above n, not divisible by 2, 3 or 5.
std::vector<RingCase> ringCases() {
  std::vector<RingCase> cases;
  for (std::size_t size : {1, 2, 4, 7, 1001, 20011})
    for (std::size_t pipeline : {1, 3, 16})
      cases.push_back({size, pipeline, size % 2 ? ReduceOp::kSum : ReduceOp::kMean, pipeline == 3});
  return cases;
}

// Peer of rank r contributes (r + 1) (i mod 97 + 1) at index i: small integers, so the sum
// (i mod 97 + 1) n (n + 1) / 2 is exact in float whatever the order of the additions.
float contribution(std::size_t rank, std::size_t i) {
  return static_cast<float>((rank + 1) * (i % 97 + 1));
}

// A test algorithm: in its first setup() it runs every ringCases() all-reduce over the members
// and records, per case c, "ring.<c>.error" (the largest relative error against the closed form,
// or -1 when the all-reduce failed) and "ring.<c>.bits" (a hash of the result's bits). A peer of
// rank `absentRank` takes no part; the others record "ring.outcome" and "ring.seconds" of one
// all-reduce with a deadline of `timeout` at the absent peer's right neighbour and ten times that
// at the others.
class RingCheck final : public engine::Algorithm {
 public:
  RingCheck(std::size_t absentRank, engine::Clock::duration timeout)
      : absentRank_(absentRank), timeout_(timeout) {}
  std::string name() const override { return "ring-check"; }

  void setup(engine::PeerContext& ctx) override {
    if (done_) return;  // a later membership change must not start unmatched all-reduces
    done_ = true;
    const std::size_t n = ctx.members().size();
    const auto rank = static_cast<std::size_t>(
        std::find(ctx.members().begin(), ctx.members().end(), ctx.self()) - ctx.members().begin());
    if (absentRank_ < n) {
      if (rank == absentRank_) return;
      kernels::Buffer<float> in = ctx.compute().allocate<float>(1000);
      kernels::Buffer<float> out = ctx.compute().allocate<float>(1000);
      ctx.compute().fill(in, 1.0f);
      const engine::Clock::time_point start = engine::Clock::now();
      const bool waitsForAbsent = (absentRank_ + 1) % n == rank;
      const RingOutcome outcome = ringAllReduce(
          ctx, in, out,
          {.kind = 1, .pipeline = 2, .timeout = waitsForAbsent ? timeout_ : 10 * timeout_});
      ctx.metrics().set("ring.seconds",
                        std::chrono::duration<double>(engine::Clock::now() - start).count());
      ctx.metrics().set("ring.outcome", static_cast<double>(outcome));
      return;
    }
    const std::vector<RingCase> cases = ringCases();
    for (std::size_t c = 0; c < cases.size(); ++c) {
      const RingCase& rc = cases[c];
      std::vector<float> host(rc.size);
      for (std::size_t i = 0; i < rc.size; ++i) host[i] = contribution(rank, i);
      kernels::Buffer<float> in = ctx.compute().allocate<float>(rc.size);
      kernels::Buffer<float> separate = ctx.compute().allocate<float>(rc.size);
      ctx.compute().upload(in.span(), host);
      const std::span<float> out = rc.inPlace ? in.span() : separate.span();
      const RingOutcome outcome = ringAllReduce(
          ctx, in, out,
          {.kind = static_cast<std::uint32_t>(c + 1), .op = rc.op, .pipeline = rc.pipeline});
      std::vector<float> result(rc.size);
      ctx.compute().download(std::span<float>(result), std::span<const float>(out));
      double error = 0;
      std::uint64_t bits = 14695981039346656037ull;
      for (std::size_t i = 0; i < rc.size; ++i) {
        double expected = static_cast<double>(i % 97 + 1) * static_cast<double>(n * (n + 1) / 2);
        if (rc.op == ReduceOp::kMean) expected /= static_cast<double>(n);
        error = std::max(error, std::abs(result[i] - expected) / expected);
        std::uint32_t word = 0;
        std::memcpy(&word, &result[i], sizeof(word));
        bits = (bits ^ word) * 1099511628211ull;
      }
      const std::string key = "ring." + std::to_string(c);
      ctx.metrics().set(key + ".error", outcome == RingOutcome::kComplete ? error : -1.0);
      ctx.metrics().set(key + ".bits", static_cast<double>(bits >> 12));
    }
  }

 private:
  std::size_t absentRank_;
  engine::Clock::duration timeout_;
  bool done_ = false;
};

engine::Registry ringRegistry(std::size_t absentRank, engine::Clock::duration timeout) {
  engine::Registry r = algorithms::makeRegistry();
  r.algorithms.add(
      "ring-check", "ring all-reduce checks",
      engine::AlgorithmSpec{
          "ring all-reduce checks", "ring", {}, [absentRank, timeout](const engine::OptionValues&) {
            return std::make_unique<RingCheck>(absentRank, timeout);
          }});
  return r;
}

TEST_CASE("ring-allreduce: n in {1, 2, 3, 5} peers get the closed-form sum and mean, bit-equal") {
  test::Watchdog watchdog(120s);
  const engine::Registry registry = ringRegistry(SIZE_MAX, {});
  for (std::size_t peers : {1, 2, 3, 5}) {
    CAPTURE(peers);
    auto config = test::algorithmCluster("ring-check", peers, 1);
    const auto result = engine::runtime::runLocalCluster(config, registry, test::smallData());
    const std::vector<RingCase> cases = ringCases();
    for (std::size_t c = 0; c < cases.size(); ++c) {
      CAPTURE(c);
      CAPTURE(cases[c].size);
      CAPTURE(cases[c].pipeline);
      const std::string key = "ring." + std::to_string(c);
      for (const auto& p : result.peers) {
        const double error = p.metrics.at(key + ".error");
        CHECK(error >= 0);  // the all-reduce completed
        // Sums of small integers are exact; a mean is one rounding of the last addition away.
        CHECK(error <= (cases[c].op == ReduceOp::kSum ? 0 : 5e-7));
        CHECK(p.metrics.at(key + ".bits") == result.peers[0].metrics.at(key + ".bits"));
      }
    }
    if (peers == 1) CHECK(result.peers[0].bytesSent == 0);
  }
}

TEST_CASE(
    "ring-allreduce: a member that takes no part fails the round everywhere within a deadline") {
  test::Watchdog watchdog(60s);
  const auto timeout = 300ms;
  const engine::Registry registry = ringRegistry(2, timeout);
  auto config = test::algorithmCluster("ring-check", 4, 1);
  const auto result = engine::runtime::runLocalCluster(config, registry, test::smallData());
  for (std::size_t rank : {0, 1, 3}) {
    CAPTURE(rank);
    const auto& metrics = result.peers[rank].metrics;
    // Rank 3 waits 300 ms for rank 2 (missing); its abort marker and rank 0's then travel
    // 3 -> 0 -> 1, so ranks 0 and 1 end right after it, long before their own 3 s deadlines.
    CHECK(metrics.at("ring.outcome") ==
          static_cast<double>(rank == 3 ? RingOutcome::kMissing : RingOutcome::kAborted));
    CHECK(metrics.at("ring.seconds") < 5 * std::chrono::duration<double>(timeout).count());
  }
}

}  // namespace
}  // namespace gossamer::algorithms
