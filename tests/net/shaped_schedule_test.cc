// The timing math of the shaped transport (net/shaped/), checked exactly through LinkSchedule,
// without sleeping: latency and serialization delay, jitter, datagram loss, the retransmission
// timeout and the delays of stream loss against their closed form; and the partition set and
// run-time loss rates the transport reads.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <map>
#include <vector>

#include <doctest/doctest.h>

#include "engine/base/enforce.h"
#include "net/shaped/link_schedule.h"
#include "net/shaped/profile.h"
#include "net/shaped/shaped_transport.h"

namespace gossamer::net::shaped {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using std::chrono::microseconds;

// ---- helpers ----

// The stream mode's extra delay of a frame of `segments` segments on a link without jitter or a
// bandwidth cap, as a distribution: value -> probability. A segment lost k times (probability
// p^k (1 - p), k capped at kMaxRetransmissions) waits retransmissionDelay(k) when it is one of
// the frame's last kDupAckThreshold (a tail loss), else roundTrip + retransmissionDelay(k - 1)
// (fast retransmit, then timeouts); the frame waits for the slowest segment. P(max <= v) is
// the product of the segments' P(wait <= v).
std::map<Clock::duration, double> streamExtraDelay(const LinkSchedule& schedule,
                                                   std::size_t segments, double p,
                                                   Clock::duration roundTrip) {
  std::map<Clock::duration, double> tail, fast;  // one segment's wait -> probability
  double probability = 1;
  for (int k = 0; k <= kMaxRetransmissions; ++k) {
    const double pk = k < kMaxRetransmissions ? probability * (1 - p) : probability;
    tail[schedule.retransmissionDelay(k)] += pk;
    fast[k == 0 ? Clock::duration::zero() : roundTrip + schedule.retransmissionDelay(k - 1)] += pk;
    probability *= p;
  }
  const std::size_t tails = std::min(segments, kDupAckThreshold);
  const auto atMost = [](const std::map<Clock::duration, double>& wait, Clock::duration v) {
    double sum = 0;
    for (const auto& [value, pv] : wait) {
      if (value <= v) sum += pv;
    }
    return sum;
  };
  std::map<Clock::duration, double> frame;
  double below = 0;  // P(max < v)
  std::map<Clock::duration, double> values = tail;
  values.insert(fast.begin(), fast.end());
  for (const auto& [v, ignored] : values) {
    const double upTo = std::pow(atMost(tail, v), static_cast<double>(tails)) *
                        std::pow(atMost(fast, v), static_cast<double>(segments - tails));
    if (upTo > below) frame[v] = upTo - below;
    below = upTo;
  }
  return frame;
}

// ---- the schedule: exact timing math, no clocks ----

TEST_CASE("net shaped: schedule adds latency and serialization delay exactly") {
  const Clock::time_point t0{};
  SUBCASE("latency only: delivered latency after the send, sends complete at once") {
    LinkSchedule schedule(LinkProfile{.latency = 20ms}, 1);
    for (int i = 0; i < 100; ++i) {
      const Clock::time_point now = t0 + i * 1us;
      const LinkSchedule::Slot slot = schedule.admit(now, 1 << 20);
      CHECK_FALSE(slot.dropped);
      CHECK(slot.start == now);
      CHECK(slot.serialized == now);
      CHECK(slot.deliverAt == now + 20ms);
    }
  }
  SUBCASE("bandwidth: back-to-back frames queue FIFO on the link") {
    LinkSchedule schedule(LinkProfile{.latency = 1ms, .bandwidthBitsPerSecond = 1e9}, 1);
    // 1250 bytes at 1 Gbit/s = 10 us each; all offered at t0.
    for (int i = 1; i <= 1000; ++i) {
      const LinkSchedule::Slot slot = schedule.admit(t0, 1250);
      CHECK(slot.start == t0 + (i - 1) * 10us);
      CHECK(slot.serialized == t0 + i * 10us);
      CHECK(slot.deliverAt == slot.serialized + 1ms);
    }
    // After an idle gap the link starts at the offer time.
    const LinkSchedule::Slot late = schedule.admit(t0 + 1s, 125'000);
    CHECK(late.start == t0 + 1s);
    CHECK(late.serialized == t0 + 1s + 1ms);
  }
  SUBCASE("caps from 10 Mbit/s to 10 Gbit/s: one second of data takes one second") {
    for (const double bitsPerSecond : {10e6, 100e6, 1e9, 10e9}) {
      CAPTURE(bitsPerSecond);
      LinkSchedule schedule(LinkProfile{.bandwidthBitsPerSecond = bitsPerSecond}, 1);
      const auto bytesPerSecond = static_cast<std::size_t>(bitsPerSecond / 8);
      LinkSchedule::Slot slot;
      for (int i = 0; i < 8; ++i) slot = schedule.admit(t0, bytesPerSecond / 8);
      CHECK(slot.serialized == t0 + 1s);
    }
  }
  SUBCASE("sub-nanosecond serialization times add up") {
    // 1 byte at 10 Gbit/s = 0.8 ns; 10000 of them = 8 us exactly, not 10000 rounded times.
    LinkSchedule schedule(LinkProfile{.bandwidthBitsPerSecond = 10e9}, 1);
    LinkSchedule::Slot slot;
    for (int i = 0; i < 10000; ++i) slot = schedule.admit(t0, 1);
    CHECK(slot.serialized == t0 + 8us);
    CHECK(schedule.serializationTime(1000).count() == doctest::Approx(800e-9));
  }
}

TEST_CASE("net shaped: flows of a pair share its capacity, each held to window over RTT") {
  const Clock::time_point t0{};
  // 40 ms one-way: RTT 80 ms; a 1 MiB window gives one flow 8 Mibit / 0.08 s = 104.9 Mbit/s.
  const LinkProfile windowed{
      .latency = 40ms, .bandwidthBitsPerSecond = 400e6, .flowWindowBytes = std::uint64_t{1} << 20};
  const double flow = 8.0 * (1 << 20) / 0.08;
  CHECK(windowed.flowBitsPerSecond() == doctest::Approx(flow));
  const std::size_t chunk = 10'000'000;
  // K flows each sending `frames` chunks back to back from t0: the last serialization ends at
  // frames x K x chunk x 8 / min(K x flow, capacity), the fluid closed form, to within one
  // chunk of the pipe.
  for (const std::size_t flows : {1, 2, 3, 4, 8}) {
    CAPTURE(flows);
    auto capacity = std::make_shared<SharedCapacity>(windowed.bandwidthBitsPerSecond);
    std::vector<LinkSchedule> schedules;
    for (std::size_t i = 0; i < flows; ++i) schedules.emplace_back(windowed, i + 1, capacity);
    const int frames = 6;
    std::vector<Clock::time_point> next(flows, t0);
    Clock::time_point last = t0;
    for (int f = 0; f < frames; ++f) {
      for (std::size_t i = 0; i < flows; ++i) {
        const LinkSchedule::Slot slot = schedules[i].admit(next[i], chunk);
        CHECK(slot.deliverAt >= slot.serialized + 40ms);
        next[i] = slot.serialized;  // the next send as soon as this one is through
        last = std::max(last, slot.serialized);
      }
    }
    const double rate = std::min(static_cast<double>(flows) * flow, 400e6);
    const double expected = frames * static_cast<double>(flows * chunk) * 8 / rate;
    const double measured = std::chrono::duration<double>(last - t0).count();
    CHECK(measured >= expected - 1e-9);
    CHECK(measured <= expected + static_cast<double>(chunk) * 8 / 400e6 + 1e-9);
  }
  SUBCASE("without a window, a second flow of the pair gains nothing") {
    const LinkProfile pipe{.latency = 40ms, .bandwidthBitsPerSecond = 400e6};
    auto capacity = std::make_shared<SharedCapacity>(400e6);
    LinkSchedule a(pipe, 1, capacity);
    LinkSchedule b(pipe, 2, capacity);
    CHECK(a.admit(t0, 5'000'000).serialized == t0 + 100ms);
    const LinkSchedule::Slot second = b.admit(t0, 5'000'000);
    CHECK(second.start == t0 + 100ms);  // FIFO behind a's frame on the one pipe
    CHECK(second.serialized == t0 + 200ms);
    // A flow with its own pipe is the old one-link schedule exactly.
    LinkSchedule alone(pipe, 3);
    CHECK(alone.admit(t0, 5'000'000).serialized == t0 + 100ms);
    CHECK(alone.admit(t0, 5'000'000).serialized == t0 + 200ms);
  }
  SUBCASE("a frame is held to the slower of the flow and an idle pipe") {
    LinkSchedule schedule(windowed, 1);
    CHECK(schedule.serializationTime(1'000'000).count() == doctest::Approx(8e6 / flow));
    const LinkProfile fast{
        .latency = 40ms, .bandwidthBitsPerSecond = 50e6, .flowWindowBytes = std::uint64_t{1} << 20};
    CHECK(LinkSchedule(fast, 1).serializationTime(1'000'000).count() ==
          doctest::Approx(8e6 / 50e6));
  }
  CHECK_THROWS_AS(LinkSchedule(windowed, 1, std::make_shared<SharedCapacity>(1e9)), Error);
  CHECK_THROWS_AS(SharedCapacity(0), Error);
}

TEST_CASE("net shaped: schedule jitter stays in bounds and keeps order") {
  const Clock::time_point t0{};
  LinkSchedule schedule(LinkProfile{.latency = 10ms, .jitter = 2ms}, 42);
  // Frames far apart: each delay is latency + U[-jitter, jitter], mean = latency.
  double sum = 0;
  const int n = 2000;
  for (int i = 0; i < n; ++i) {
    const Clock::time_point now = t0 + i * 100ms;
    const LinkSchedule::Slot slot = schedule.admit(now, 100);
    const auto delay = slot.deliverAt - now;
    CHECK(delay >= 8ms);
    CHECK(delay <= 12ms);
    sum += std::chrono::duration<double, std::milli>(delay).count();
  }
  CHECK(sum / n == doctest::Approx(10.0).epsilon(0.01));
  // Frames closer than the jitter: deliveries never overtake each other.
  Clock::time_point previous{};
  bool clamped = false;
  for (int i = 0; i < 2000; ++i) {
    const Clock::time_point now = t0 + 1000s + i * 100us;
    const LinkSchedule::Slot slot = schedule.admit(now, 100);
    CHECK(slot.deliverAt >= previous);
    CHECK(slot.deliverAt <= now + 12ms);
    if (slot.deliverAt == previous) clamped = true;
    previous = slot.deliverAt;
  }
  CHECK(clamped);  // the order rule did act
}

TEST_CASE("net shaped: schedule datagram loss rate matches with a seed") {
  const Clock::time_point t0{};
  const int frames = 5000;
  const double rate = 0.2;
  const auto drops = [&](std::uint64_t seed) {
    LinkSchedule schedule(LinkProfile{.lossRate = rate, .lossMode = LossMode::datagram}, seed);
    std::vector<bool> dropped;
    for (int i = 0; i < frames; ++i) dropped.push_back(schedule.admit(t0, 100).dropped);
    return dropped;
  };
  const double sigma = std::sqrt(frames * rate * (1 - rate));
  for (std::uint64_t seed : {1, 2, 3}) {
    const std::vector<bool> dropped = drops(seed);
    const auto count = static_cast<double>(std::count(dropped.begin(), dropped.end(), true));
    CAPTURE(seed);
    CHECK(std::abs(count - frames * rate) <= 3 * sigma);
    CHECK(drops(seed) == dropped);  // the same seed drops the same frames
  }
  CHECK(drops(1) != drops(2));
  LinkSchedule all(LinkProfile{.lossRate = 1, .lossMode = LossMode::datagram}, 1);
  LinkSchedule none(LinkProfile{.lossRate = 0, .lossMode = LossMode::datagram}, 1);
  CHECK(all.admit(t0, 1).dropped);
  CHECK_FALSE(none.admit(t0, 1).dropped);
  CHECK(none.admit(t0, 1, 1.0).dropped);  // run-time loss on top of the profile's
  CHECK_THROWS_AS(LinkSchedule(LinkProfile{.lossRate = 2}, 1), Error);
}

TEST_CASE("net shaped: the retransmission timeout is max(200 ms, RTT + 4 RTTVAR), doubling") {
  // RTT = 2 x latency; RTTVAR = 2/3 x jitter, the mean deviation of the sum of two U[-j, j].
  CHECK(LinkProfile{}.retransmissionTimeout() == 200ms);
  CHECK(LinkProfile{.latency = 50ms, .jitter = 30ms}.retransmissionTimeout() == 200ms);  // 180
  CHECK(LinkProfile{.latency = 100ms, .jitter = 3ms}.retransmissionTimeout() == 208ms);
  CHECK(LinkProfile{.latency = 106ms, .jitter = 1060us}.retransmissionTimeout() ==
        microseconds(214'827));  // geo's Tokyo-London: 212 + 8 x 1.06 / 3 ms
  // A segment lost k times waits RTO + 2 RTO + ... + 2^(k-1) RTO, each capped at 120 s.
  const LinkSchedule schedule(LinkProfile{.lossRate = 0.1}, 1);
  CHECK(schedule.retransmissionDelay(0) == 0ms);
  CHECK(schedule.retransmissionDelay(1) == 200ms);
  CHECK(schedule.retransmissionDelay(2) == 600ms);
  CHECK(schedule.retransmissionDelay(3) == 1400ms);
  CHECK(schedule.retransmissionDelay(10) == 204'600ms);  // the 10th RTO is 102.4 s
  CHECK(schedule.retransmissionDelay(11) == 324'600ms);  // the 11th is capped at 120 s
  CHECK(schedule.retransmissionDelay(kMaxRetransmissions) == 804'600ms);
  CHECK_THROWS_AS(static_cast<void>(schedule.retransmissionDelay(kMaxRetransmissions + 1)), Error);
  const LinkSchedule far(LinkProfile{.latency = 100ms, .jitter = 3ms, .lossRate = 0.1}, 1);
  CHECK(far.retransmissionDelay(2) == 3 * 208ms);
}

TEST_CASE("net shaped: schedule stream loss delays frames by their retransmissions, drops none") {
  const Clock::time_point t0{};
  const auto latency = 10ms;
  SUBCASE("frames of n segments: the mean delay is the closed form") {
    // Frames 1000 s apart (more than any retransmission delay: no head-of-line waits). One
    // segment: every loss is a tail loss and costs timeouts; 3: still all tail losses; 4: the
    // first can be fast-retransmitted; 50 with a partial last segment; 141: a 200 KB model
    // frame at 5% loss, which fast retransmit spares the RTO unless one of its last 3
    // segments, or a retransmission, is lost: 1 - 0.95^3 x (1 - 0.05^2)^138 = 39% of frames.
    struct Case {
      std::size_t segments;
      double p;
      int frames;
    };
    for (const Case c : {Case{1, 0.2, 20000}, Case{3, 0.1, 10000}, Case{4, 0.1, 10000},
                         Case{50, 0.01, 10000}, Case{141, 0.05, 4000}}) {
      CAPTURE(c.segments);
      LinkSchedule schedule(LinkProfile{.latency = latency, .lossRate = c.p}, 3 + c.segments);
      const std::map<Clock::duration, double> closed =
          streamExtraDelay(schedule, c.segments, c.p, 2 * latency);
      double expected = 0, expectedSquare = 0, rto = 0;
      for (const auto& [v, pv] : closed) {
        const double d = std::chrono::duration<double>(v).count();
        expected += pv * d;
        expectedSquare += pv * d * d;
        if (v >= 200ms) rto += pv;
      }
      // The last segment is 1 byte: the frame is still `segments` segments.
      const std::size_t bytes = (c.segments - 1) * kSegmentBytes + 1;
      double sum = 0;
      int waitedRto = 0;
      for (int i = 0; i < c.frames; ++i) {
        const Clock::time_point now = t0 + i * 1000s;
        const LinkSchedule::Slot slot = schedule.admit(now, bytes);
        REQUIRE_FALSE(slot.dropped);
        const auto extra = slot.deliverAt - now - latency;
        CHECK(closed.contains(extra));  // one of the closed form's values
        CHECK(slot.fastRetransmits <= slot.segmentLosses);
        if (slot.segmentLosses == 0) CHECK(extra == 0ms);
        if (slot.segmentLosses > 0) CHECK(extra >= 2 * latency);  // at least a round trip
        if (slot.fastRetransmits < slot.segmentLosses) CHECK(extra >= 200ms);  // a timeout
        if (c.segments <= kDupAckThreshold) CHECK(slot.fastRetransmits == 0);
        if (c.segments == 1) {
          CHECK(extra == schedule.retransmissionDelay(static_cast<int>(slot.segmentLosses)));
        }
        if (extra >= 200ms) ++waitedRto;
        sum += std::chrono::duration<double>(extra).count();
      }
      const double sigma = std::sqrt((expectedSquare - expected * expected) / c.frames);
      CHECK(std::abs(sum / c.frames - expected) <= 4 * sigma);
      CHECK(std::abs(waitedRto - rto * c.frames) <= 4 * std::sqrt(c.frames * rto * (1 - rto)) + 1);
      if (c.segments == 141) CHECK(rto == doctest::Approx(0.393).epsilon(0.01));
    }
  }
  SUBCASE("a mid-frame loss waits one round trip, a tail loss the RTO, a lost resend the RTO") {
    // 10 segments: a loss of the first 7 is fast-retransmitted, of the last 3 waits the RTO.
    const double p = 0.01;
    const int frames = 20000;
    LinkSchedule schedule(LinkProfile{.latency = latency, .lossRate = p}, 7);
    int fast = 0, tail = 0;
    for (int i = 0; i < frames; ++i) {
      const Clock::time_point now = t0 + i * 1000s;
      const LinkSchedule::Slot slot = schedule.admit(now, 10 * kSegmentBytes);
      const auto extra = slot.deliverAt - now - latency;
      if (slot.segmentLosses == 1 && slot.fastRetransmits == 1) {
        ++fast;
        CHECK(extra == 2 * latency);  // one round trip
      } else if (slot.segmentLosses == 1) {
        ++tail;
        CHECK(extra == 200ms);
      } else if (slot.segmentLosses == 2 && slot.fastRetransmits == 1) {
        // One segment lost twice (a round trip, then the RTO), or a mid and a tail loss.
        CHECK((extra == 2 * latency + 200ms || extra == 200ms));
      }
    }
    // Single losses: 7 in 10 mid-frame.
    const double q = 0.7;
    const int single = fast + tail;
    CHECK(single > 1000);
    CHECK(std::abs(fast - q * single) <= 4 * std::sqrt(single * q * (1 - q)));
  }
  SUBCASE("fast retransmit waits for 3 more segments to go out, and jitter") {
    // 8 Mbit/s: a segment takes 1.448 ms to serialize. A lost segment i of 10 is resent when the
    // duplicate ACK of segment i + 3 is back: it arrives at start + sent(i + 3) + 3 x delay,
    // delay in [latency - jitter, latency + jitter], no later than serialized + 3 x delay.
    const auto jitter = 1ms;
    LinkSchedule schedule(
        LinkProfile{
            .latency = latency, .jitter = jitter, .bandwidthBitsPerSecond = 8e6, .lossRate = 0.01},
        8);
    int checked = 0;
    for (int i = 0; i < 20000; ++i) {
      const Clock::time_point now = t0 + i * 1000s;
      const LinkSchedule::Slot slot = schedule.admit(now, 10 * kSegmentBytes);
      if (slot.segmentLosses != 1 || slot.fastRetransmits != 1) continue;
      ++checked;
      const auto fourSegments = microseconds(4 * 1448);
      CHECK(slot.deliverAt >= slot.start + fourSegments + 3 * (latency - jitter));
      CHECK(slot.deliverAt <= slot.serialized + 3 * (latency + jitter));
    }
    CHECK(checked > 500);
  }
  SUBCASE("loss 1: every segment is resent kMaxRetransmissions times, the frame still arrives") {
    // 1 MB at 8 Mbit/s: the last segment leaves at `serialized`, one second after the start.
    LinkSchedule schedule(
        LinkProfile{.latency = latency, .bandwidthBitsPerSecond = 8e6, .lossRate = 1}, 5);
    const LinkSchedule::Slot slot = schedule.admit(t0, 1'000'000);
    CHECK_FALSE(slot.dropped);
    CHECK(slot.serialized == t0 + 1s);
    CHECK(slot.segmentLosses ==
          kMaxRetransmissions * ((1'000'000 + kSegmentBytes - 1) / kSegmentBytes));
    CHECK(slot.deliverAt ==
          slot.serialized + latency + schedule.retransmissionDelay(kMaxRetransmissions));
    // The same through run-time loss on a loss-free profile.
    LinkSchedule clean(LinkProfile{.latency = latency}, 5);
    CHECK(clean.admit(t0, 100, 1.0).deliverAt ==
          t0 + latency + clean.retransmissionDelay(kMaxRetransmissions));
    CHECK_THROWS_AS(clean.admit(t0, 100, 1.5), Error);
  }
  SUBCASE("head-of-line blocking: no frame overtakes a delayed one") {
    // Frames 1 ms apart, 20 ms of latency: a 200 ms retransmission holds the next ~200 frames.
    LinkSchedule schedule(LinkProfile{.latency = 20ms, .lossRate = 0.05}, 6);
    Clock::time_point previous{};
    int held = 0;
    for (int i = 0; i < 5000; ++i) {
      const Clock::time_point now = t0 + i * 1ms;
      const LinkSchedule::Slot slot = schedule.admit(now, 100);
      CHECK(slot.deliverAt >= previous);
      CHECK(slot.deliverAt >= now + 20ms);
      if (slot.segmentLosses == 0 && slot.deliverAt > now + 20ms) ++held;
      previous = slot.deliverAt;
    }
    CHECK(held > 1000);  // unlost frames that waited behind a lost one
  }
  SUBCASE("the same seed gives the same delays") {
    const auto delays = [&](std::uint64_t seed) {
      LinkSchedule schedule(LinkProfile{.jitter = 1ms, .lossRate = 0.1}, seed);
      std::vector<Clock::time_point> out;
      for (int i = 0; i < 1000; ++i) out.push_back(schedule.admit(t0 + i * 1s, 5000).deliverAt);
      return out;
    };
    CHECK(delays(1) == delays(1));
    CHECK(delays(1) != delays(2));
  }
}

TEST_CASE("net shaped: partition set") {
  Partitions partitions;
  CHECK_FALSE(partitions.blocked(0, 1));
  partitions.cut(0, 1);
  CHECK(partitions.blocked(0, 1));
  CHECK(partitions.blocked(1, 0));
  CHECK_FALSE(partitions.blocked(0, 2));
  const std::vector<std::size_t> left = {0, 1}, right = {2, 3};
  partitions.cut(left, right);
  CHECK(partitions.size() == 5);
  CHECK(partitions.blocked(3, 1));
  partitions.heal(left, right);
  CHECK_FALSE(partitions.blocked(3, 1));
  partitions.heal(1, 0);
  CHECK(partitions.size() == 0);
  partitions.cut(4, 5);
  partitions.healAll();
  CHECK_FALSE(partitions.blocked(4, 5));
}

TEST_CASE("net shaped: run-time loss rates are per direction and validated") {
  Partitions partitions;
  CHECK(partitions.loss(0, 1) == 0);
  partitions.setLoss(0, 1, 0.25);
  CHECK(partitions.loss(0, 1) == 0.25);
  CHECK(partitions.loss(1, 0) == 0);
  partitions.setLoss(0, 1, 0);
  CHECK(partitions.loss(0, 1) == 0);
  partitions.setLoss(2, 3, 1);
  partitions.clearLoss();
  CHECK(partitions.loss(2, 3) == 0);
  CHECK_THROWS_WITH_AS(partitions.setLoss(0, 1, 1.5), doctest::Contains("[0, 1]"), Error);
}

}  // namespace
}  // namespace gossamer::net::shaped
