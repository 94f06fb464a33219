// Defaults that fit the network: the knobs that trade communication against staleness, chosen so
// that communication hides behind computation (algorithms/README.md, "Defaults that fit the
// network", has the derivations).
//
// The inputs are what a survey gathered (network_survey.h; the same bits on every member): every
// member's seconds per step, the round trips and bandwidths between members, and the model's
// bytes. From them, the time of each kind of exchange on the slowest pair of the cluster, with
// latency L(i, j) = RTT(i, j) / 2 and bandwidth bw(i, j):
//   direct all-reduce   2 max (L + (bytes / n) / bw)         both phases, every link at once
//   ring all-reduce     2 (n - 1) max (L + (bytes / n) / bw)  2 (n - 1) hops, the slowest pair's
//   through a master    2 max (L + bytes / bw)                the models in, the average out
// and the rules:
//   a blocking round    lasts R = E (1 - c) / c of compute, c = kBlockingShare: the exchange E
//                       then takes at most c of the time; h (tau) = ceil(R / s), s the slowest
//                       member's step (the round waits for it). Time-boxed rounds with `auto`
//                       last R seconds: the same rule.
//   an overlapped one   takes at most kLinkShare of the link's time: a window of p steps sends
//                       its bytes in p s kLinkShare; dts awaits a window t >= E / s steps later.
//   gossip              p = kLinkShare s bw / bytes: one model per 1 / p steps fills kLinkShare
//                       of the link.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace gossamer::algorithms {

// Calibration (NetworkFacts::calibrate): the paths' bandwidths are their capacities, and a busy
// machine moves less; an algorithm that has run an exchange before its survey (diloco's,
// local-sgd's and sparknet's provisional round) scales every estimate by what the members waited
// for it over what the model says, when that is more than kCalibrationDeadBand (a quarter more:
// frame headers and a little step skew stay within it), at most kMaxSlowdown.
inline constexpr double kCalibrationDeadBand = 1.25;
inline constexpr double kMaxSlowdown = 8;

// A blocking exchange may take this share of a round (utilization 1 - c).
inline constexpr double kBlockingShare = 0.05;
// An overlapped exchange may keep the slowest link busy this share of the time.
inline constexpr double kLinkShare = 0.8;

enum class Exchange { kDirect, kRing, kMaster };

// What the members measured, the same on every member of a complete survey.
class NetworkFacts {
 public:
  // `stepSeconds`: per member, its seconds per step (compute, emulated included); `roundTrips`
  // and `bandwidths`: n x n, as member i measured its path to member j (round trip < 0: not
  // measured; bandwidth <= 0: unlimited). None when some member's step is unknown or some pair
  // is measured by neither side.
  static std::optional<NetworkFacts> from(std::span<const float> stepSeconds,
                                          std::span<const float> roundTrips,
                                          std::span<const float> bandwidths);

  std::size_t members() const { return n_; }
  // The slowest member's seconds per step, and the members' mean.
  double slowestStepSeconds() const { return slowestStep_; }
  double meanStepSeconds() const { return meanStep_; }
  // The seconds of one exchange of `bytes` (each member's contribution), on the slowest pair.
  double exchangeSeconds(Exchange kind, double bytes) const;
  // Of it, the time on the wire alone (no latency): what keeps a link busy.
  double wireSeconds(Exchange kind, double bytes) const;
  // The largest one-way latency between two members.
  double maxLatencySeconds() const;
  // Scales exchangeSeconds and wireSeconds by `measuredSeconds`, what an exchange of `bytes` by
  // `kind` took, over the model's estimate of it (see kCalibrationDeadBand); 1 when not more.
  void calibrate(Exchange kind, double bytes, double measuredSeconds);
  double slowdown() const { return slowdown_; }

 private:
  std::size_t n_ = 0;
  double slowestStep_ = 0, meanStep_ = 0;
  double slowdown_ = 1;
  std::vector<double> latency_, bandwidth_;  // n x n; bandwidth 0: unlimited
};

// ---- the rules -----------------------------------------------------------------------------

// A blocking round's length in seconds of compute for an exchange of `exchangeSeconds`.
double blockingRoundSeconds(double exchangeSeconds);
// Steps per blocking round (diloco's h, local-sgd's and sparknet's tau), within [low, high].
std::uint64_t blockingRoundSteps(const NetworkFacts& facts, Exchange kind, double modelBytes,
                                 std::uint64_t low, std::uint64_t high);

// dts: the period p and the delay t (a multiple of p, at most 64 p). `gradientBytes`: what a
// window of one step sends (the gradient); `windowBytes`: what a longer window sends (the state's
// response: twice the gradient's bytes with momentum). A fixed value stays: with t fixed, p is
// the smallest divisor of t at least the rule's p (t itself when none).
struct DtsChoice {
  std::uint64_t delay = 0, period = 1;
};
DtsChoice chooseDts(const NetworkFacts& facts, double gradientBytes, double windowBytes,
                    std::optional<std::uint64_t> fixedDelay = std::nullopt,
                    std::optional<std::uint64_t> fixedPeriod = std::nullopt);

// streaming-diloco: the fragments F (1 to min(h, kMaxFragments)) and the overlap tau, for rounds of
// one fragment every h / F steps: the smallest tau that covers a fragment's exchange, with tau <
// h / F and the rounds' bytes within kLinkShare of the link over h steps; fewer fragments first.
// A fixed value stays (a fixed tau: the fewest fragments whose exchange it covers).
struct StreamingChoice {
  std::uint64_t fragments = 1, tau = 1;
};
inline constexpr std::uint64_t kMaxFragments = 8;
StreamingChoice chooseStreaming(const NetworkFacts& facts, double modelBytes, std::uint64_t h,
                                std::optional<std::uint64_t> fixedFragments = std::nullopt,
                                std::optional<std::uint64_t> fixedTau = std::nullopt);

// gosgd: the probability of a transfer after a step, from this peer's own step and the mean
// seconds a model takes on its links (no agreement needed: push-sum stays exact with any p_i),
// within [kMinGossip, 1].
inline constexpr double kMinGossip = 0.01;
double chooseGossipProbability(double stepSeconds, double modelWireSeconds);

// "chosen.<algorithm>.<knob>": the metric that carries a chosen value to --json's "chosen", and
// the log line that says why.
std::string chosenMetric(const std::string& algorithm, const std::string& knob);

}  // namespace gossamer::algorithms
