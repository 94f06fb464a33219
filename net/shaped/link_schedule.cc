#include "net/shaped/link_schedule.h"

#include <algorithm>
#include <cmath>
#include <tuple>

#include "engine/base/enforce.h"

namespace gossamer::net::shaped {

std::pair<Timeline::Clock::time_point, Timeline::Clock::time_point> Timeline::reserve(
    Clock::time_point from, double ns) {
  if (from > busyUntil) {
    busyUntil = from;
    fractionNs = 0;
  }
  const Clock::time_point start = busyUntil;
  const double total = ns + fractionNs;
  const double whole = std::floor(total);
  fractionNs = total - whole;
  busyUntil += Clock::duration(static_cast<Clock::rep>(whole));
  return {start, busyUntil};
}

SharedCapacity::SharedCapacity(double bitsPerSecond) : bitsPerSecond_(bitsPerSecond) {
  GOSSAMER_ENFORCE(std::isfinite(bitsPerSecond) && bitsPerSecond > 0,
                   "a shared capacity needs a finite rate > 0 bit/s (got {})", bitsPerSecond);
}

std::pair<SharedCapacity::Clock::time_point, SharedCapacity::Clock::time_point>
SharedCapacity::reserve(Clock::time_point from, std::size_t bytes) {
  std::lock_guard lock(mutex_);
  return pipe_.reserve(from, static_cast<double>(bytes) * 8e9 / bitsPerSecond_);
}

std::shared_ptr<SharedCapacity> CapacityRegistry::of(std::uint64_t remote, double bitsPerSecond) {
  if (bitsPerSecond <= 0) return nullptr;
  std::lock_guard lock(mutex_);
  std::erase_if(pipes_, [](const auto& entry) { return entry.second.expired(); });
  std::shared_ptr<SharedCapacity> pipe = pipes_[remote].lock();
  if (!pipe || pipe->bitsPerSecond() != bitsPerSecond) {
    pipe = std::make_shared<SharedCapacity>(bitsPerSecond);
    pipes_[remote] = pipe;
  }
  return pipe;
}

LinkSchedule::LinkSchedule(const LinkProfile& profile, std::uint64_t seed,
                           std::shared_ptr<SharedCapacity> capacity)
    : profile_(profile),
      rng_(mixSeed(seed, 0)),
      capacity_(std::move(capacity)),
      flowBitsPerSecond_(profile.flowBitsPerSecond()) {
  validateLinkProfile(profile_, "shaped link");
  if (capacity_) {
    GOSSAMER_ENFORCE(capacity_->bitsPerSecond() == profile_.bandwidthBitsPerSecond,
                     "a shaped link shares a pipe of {} bit/s, but its profile says {} bit/s",
                     capacity_->bitsPerSecond(), profile_.bandwidthBitsPerSecond);
  } else if (profile_.bandwidthBitsPerSecond > 0) {
    capacity_ = std::make_shared<SharedCapacity>(profile_.bandwidthBitsPerSecond);
  }
  const Clock::duration first = profile_.retransmissionTimeout();
  const Clock::duration cap = kMaxRetransmissionTimeout;
  backoff_.push_back(Clock::duration::zero());
  Clock::duration timeout = first;
  for (int losses = 1; losses <= kMaxRetransmissions; ++losses) {
    backoff_.push_back(backoff_.back() + timeout);
    timeout = std::min(cap, 2 * timeout);
  }
}

LinkSchedule::Clock::duration LinkSchedule::retransmissionDelay(int losses) const {
  GOSSAMER_ENFORCE(losses >= 0 && losses <= kMaxRetransmissions,
                   "a segment is lost 0 to {} times, not {}", kMaxRetransmissions, losses);
  return backoff_[static_cast<std::size_t>(losses)];
}

double LinkSchedule::uniform() { return static_cast<double>(rng_() >> 11) * 0x1.0p-53; }

std::chrono::duration<double> LinkSchedule::serializationTime(std::size_t bytes) const {
  double seconds = 0;
  for (const double rate : {profile_.bandwidthBitsPerSecond, flowBitsPerSecond_}) {
    if (rate > 0) seconds = std::max(seconds, static_cast<double>(bytes) * 8.0 / rate);
  }
  return std::chrono::duration<double>(seconds);
}

LinkSchedule::Clock::time_point LinkSchedule::streamArrival(Clock::time_point start,
                                                            Clock::time_point arrival,
                                                            Clock::duration delay,
                                                            std::size_t bytes, double bitsPerSecond,
                                                            double lossRate, Slot& slot) {
  const std::size_t segments =
      std::max<std::size_t>(1, (bytes + kSegmentBytes - 1) / kSegmentBytes);
  // When segment `segment` has gone out whole: once the frame's first (segment + 1) have.
  const auto sent = [&](std::size_t segment) {
    if (bitsPerSecond == 0) return Clock::duration::zero();
    const std::size_t through = std::min(bytes, (segment + 1) * kSegmentBytes);
    return Clock::duration(
        static_cast<Clock::rep>(std::llround(static_cast<double>(through) * 8e9 / bitsPerSecond)));
  };
  const Clock::duration timeout = backoff_[1];
  for (std::size_t segment = 0; segment < segments; ++segment) {
    int lost = 0;
    while (lost < kMaxRetransmissions && uniform() < lossRate) ++lost;
    if (lost == 0) continue;
    slot.segmentLosses += static_cast<std::size_t>(lost);
    Clock::duration wait = backoff_[static_cast<std::size_t>(lost)];
    if (segments - segment > kDupAckThreshold) {
      // Fast retransmit: resent when the duplicate ACK of segment + kDupAckThreshold is back,
      // unless the timer fires first; a loss of the retransmission waits for the timer.
      const Clock::duration fast = sent(segment + kDupAckThreshold) - sent(segment) + 2 * delay;
      if (fast < timeout) {
        wait = fast + backoff_[static_cast<std::size_t>(lost - 1)];
        ++slot.fastRetransmits;
      }
    }
    arrival = std::max(arrival, start + sent(segment) + delay + wait);
  }
  return arrival;
}

LinkSchedule::Slot LinkSchedule::admit(Clock::time_point now, std::size_t bytes,
                                       double extraLossRate) {
  GOSSAMER_ENFORCE(extraLossRate >= 0 && extraLossRate <= 1,
                   "an extra loss rate must be in [0, 1] (got {})", extraLossRate);
  const double lossRate =
      extraLossRate == 0 ? profile_.lossRate : 1 - (1 - profile_.lossRate) * (1 - extraLossRate);
  Slot slot;
  // The rate the frame's segments go out at, for the stream mode's loss arithmetic.
  double bitsPerSecond = profile_.bandwidthBitsPerSecond;
  if (flowBitsPerSecond_ == 0) {
    // One pipe: the flow sends at the pair's capacity, FIFO with the pair's other flows.
    std::tie(slot.start, slot.serialized) =
        capacity_ ? capacity_->reserve(now, bytes) : std::pair{now, now};
  } else {
    const auto [start, flowEnd] =
        flow_.reserve(now, static_cast<double>(bytes) * 8e9 / flowBitsPerSecond_);
    const Clock::time_point pipeEnd = capacity_ ? capacity_->reserve(start, bytes).second : start;
    slot.start = start;
    slot.serialized = std::max(flowEnd, pipeEnd);
    if (pipeEnd > flowEnd) {
      flow_.busyUntil = pipeEnd;
      flow_.fractionNs = 0;
    } else {
      bitsPerSecond = flowBitsPerSecond_;
    }
  }
  const bool datagram = profile_.lossMode == LossMode::datagram;
  if (datagram && lossRate > 0 && uniform() < lossRate) {
    slot.dropped = true;
    slot.deliverAt = slot.serialized;
    return slot;
  }
  Clock::duration delay = profile_.latency;
  if (profile_.jitter.count() > 0) {
    const double offsetNs =
        (2.0 * uniform() - 1.0) * static_cast<double>(Clock::duration(profile_.jitter).count());
    delay += Clock::duration(static_cast<Clock::rep>(std::llround(offsetNs)));
    if (delay < Clock::duration::zero()) delay = Clock::duration::zero();
  }
  Clock::time_point arrival = slot.serialized + delay;
  if (!datagram && lossRate > 0) {
    arrival = streamArrival(slot.start, arrival, delay, bytes, bitsPerSecond, lossRate, slot);
  }
  slot.deliverAt = std::max(arrival, lastDelivery_);
  lastDelivery_ = slot.deliverAt;
  return slot;
}

}  // namespace gossamer::net::shaped
