// The figures of uneven peers (bench/uneven_figures.h) against their closed forms: the ideal time
// from the cluster's throughput, the fast peers' least utilization, and the even reference's
// settings.
#include "bench/uneven_figures.h"

#include <cmath>
#include <vector>

#include <doctest/doctest.h>

namespace gossamer::bench {
namespace {

const std::vector<double> kTimes{300, 300, 600, 1200};

TEST_CASE("uneven figures: step times repeat in peer order") {
  CHECK(peerStepTime(kTimes, 0) == 300);
  CHECK(peerStepTime(kTimes, 3) == 1200);
  CHECK(peerStepTime(kTimes, 6) == 600);
  CHECK(std::isnan(peerStepTime({}, 0)));
}

TEST_CASE("uneven figures: time_vs_ideal divides by the reference's samples over the throughput") {
  // Throughput 2/300 + 1/600 + 1/1200 = 11/1200 steps per ms against 4/300 for the reference:
  // the ideal is 16/11 of the reference's 22 s, 32 s.
  CHECK(timeVsIdeal(32, 22, kTimes, 4) == doctest::Approx(1.0));
  CHECK(timeVsIdeal(48, 22, kTimes, 4) == doctest::Approx(1.5));
  // Eight peers repeat the four step times: the same ratio.
  CHECK(timeVsIdeal(32, 22, kTimes, 8) == doctest::Approx(1.0));
  // Even peers: the run against its reference.
  CHECK(timeVsIdeal(30, 20, std::vector<double>{100, 100}, 2) == doctest::Approx(1.5));
  // Nothing to divide: no target reached, no reference, no step times.
  CHECK(std::isnan(timeVsIdeal(NAN, 22, kTimes, 4)));
  CHECK(std::isnan(timeVsIdeal(32, NAN, kTimes, 4)));
  CHECK(std::isnan(timeVsIdeal(32, 22, {}, 4)));
}

TEST_CASE("uneven figures: the fast peers' least utilization is 1 minus their largest wait") {
  CHECK(minFastPeerUtilization(kTimes, std::vector<double>{0.10, 0.05, 0.5, 0.0}) ==
        doctest::Approx(0.90));
  // The slow peers' waits never count; eight peers repeat the step times.
  CHECK(minFastPeerUtilization(kTimes, std::vector<double>{0, 0, 0.9, 0.9, 0.2, 0, 0.9, 0.9}) ==
        doctest::Approx(0.80));
  CHECK(std::isnan(minFastPeerUtilization({}, std::vector<double>{0.1})));
  CHECK(std::isnan(minFastPeerUtilization(kTimes, {})));
}

TEST_CASE("uneven figures: the even reference runs every peer at the fastest step time") {
  RunSettings run;
  run.peerStepTimes = {600, 300, 1200};
  run.stepTime = 50;
  Experiment e;
  e.algorithm = "diloco";
  e.stepTime = 50;
  const auto [even, reference] = evenReference(run, e);
  CHECK(even.peerStepTimes.empty());
  CHECK(even.stepTime == 300);
  CHECK(reference.stepTime == 300);
  CHECK(reference.algorithm == "diloco");
  UnevenFigures figures;
  figures.timeVsIdeal = 1.25;
  figures.referenceTimeToTarget = 20;
  figures.minFastPeerUtilization = 0.5;
  CHECK(describeUneven(figures, run.peerStepTimes) ==
        "uneven peers (600, 300, 1200 ms): time_vs_ideal 1.250 (the even reference at 300 ms "
        "reached the target at 20.0 s), min_fast_peer_utilization 0.500");
  // Many peers: the range.
  const std::vector<double> many{400, 200, 300, 300, 300, 300, 300, 300, 900};
  CHECK(describeUneven(figures, many, "virtual s") ==
        "uneven peers (9 step times, 200 to 900 ms): time_vs_ideal 1.250 (the even reference at "
        "200 ms reached the target at 20.0 virtual s), min_fast_peer_utilization 0.500");
}

}  // namespace
}  // namespace gossamer::bench
