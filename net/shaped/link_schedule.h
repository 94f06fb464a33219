// LinkSchedule: the timing of one shaped link direction (profile.h has the LinkProfile it
// applies), and SharedCapacity, the pipe the flows of one pair share.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <utility>
#include <vector>

#include "net/shaped/profile.h"

namespace gossamer::net::shaped {

// A busy-until clock kept to fractions of a nanosecond, so that many short reservations add up to
// the time of one long one.
struct Timeline {
  using Clock = std::chrono::steady_clock;
  Clock::time_point busyUntil{};
  double fractionNs = 0;  // sub-nanosecond remainder of busyUntil, [0, 1)

  // Reserves `ns` from max(from, busyUntil) on; returns (start, end).
  std::pair<Clock::time_point, Clock::time_point> reserve(Clock::time_point from, double ns);
};

// The capacity of one pair, shared by the flows (links) from one sender to one remote: reserve
// hands out its time first come, first served. Thread-safe.
class SharedCapacity {
 public:
  using Clock = std::chrono::steady_clock;
  // Throws gossamer::Error unless `bitsPerSecond` is finite and > 0.
  explicit SharedCapacity(double bitsPerSecond);
  double bitsPerSecond() const { return bitsPerSecond_; }
  // The pipe carries `bytes` from max(from, the end of the previous reservation) on; returns
  // (start, end).
  std::pair<Clock::time_point, Clock::time_point> reserve(Clock::time_point from,
                                                          std::size_t bytes);

 private:
  const double bitsPerSecond_;
  std::mutex mutex_;
  Timeline pipe_;
};

// The pipes of one sender's pairs, by remote: of(remote, rate) hands every link to one remote
// the same SharedCapacity while any of them holds it (a new one if the rate differs); null for
// an unlimited rate. Thread-safe.
class CapacityRegistry {
 public:
  std::shared_ptr<SharedCapacity> of(std::uint64_t remote, double bitsPerSecond);

 private:
  std::mutex mutex_;
  std::map<std::uint64_t, std::weak_ptr<SharedCapacity>> pipes_;
};

// The timing arithmetic of one shaped link direction, separate from clocks and timers so that it
// can be checked exactly: the shaped transport asks it, for each frame in send order, when the
// frame starts and ends serializing and when it reaches the receiver. Not thread-safe (one per
// link, used on the link's io thread); the SharedCapacity it may share with other links is.
//
// A link is one flow (one TCP connection) of a pair. The pair's capacity is the profile's
// bandwidth, a pipe that all the pair's flows from this sender share (SharedCapacity; a schedule
// given none has a pipe of its own). Without a per-flow window (LinkProfile::flowWindowBytes 0,
// as in `geo`) a flow sends at the pipe's rate:
//   start      = max(now, pipe's end of the previous frame of any flow)      (FIFO on the pipe)
//   serialized = start + bytes * 8 / bandwidth
// so that K flows of a pair together get what one gets. With a window W, a flow is held to
// W / RTT as TCP is (RTT = 2 x latency, the reverse direction taken to look like this one), and
// the flows share the pipe:
//   start      = max(now, serialized of this flow's previous frame)
//   flowEnd    = start + bytes * 8 / (W * 8 / RTT)
//   pipeEnd    = max(start, pipe's end of the previous frame of any flow) + bytes * 8 / bandwidth
//   serialized = max(flowEnd, pipeEnd)
// K flows sending at once then move min(K x W / RTT, bandwidth) together: the fluid model of
// window-limited TCP flows on a shared bottleneck. A frame shorter than a window is held to
// W / RTT too, where a real flow would send it in one burst: on the slow side for small frames.
// After serialization:
//   delay      = latency + U[-jitter, +jitter], clamped to >= 0
//   arrival    = serialized + delay
//   deliverAt  = max(arrival, previous deliverAt)                     (order is preserved)
// Loss, with probability p = the profile's lossRate combined with admit's extra rate
// (1 - (1 - lossRate)(1 - extra)):
//   stream     the frame is n = ceil(bytes / kSegmentBytes) segments (at least one). Segment i
//              is lost k times with probability p^k (1 - p) (k capped at kMaxRetransmissions);
//              unlost, it arrives at start + sent(i) + delay, where sent(i) is the serialization
//              time of the frame's first (i + 1) x kSegmentBytes bytes. A lost one arrives later
//              by
//                fast retransmit, when i < n - kDupAckThreshold and fast < RTO:
//                  fast + timeouts(k - 1), where fast = sent(i + kDupAckThreshold) - sent(i) +
//                  2 x delay (the third duplicate ACK leaves the receiver when segment i + 3
//                  arrives and takes `delay` back, the reverse direction taken to look like this
//                  one, and the retransmission takes `delay` again), and a retransmission lost
//                  again waits for the timeout;
//                otherwise (a tail loss: too few segments follow it for duplicate ACKs):
//                  timeouts(k) = RTO + 2 RTO + ... + 2^(k-1) RTO, each term capped at
//                  kMaxRetransmissionTimeout (RTO = LinkProfile::retransmissionTimeout(),
//                  >= 200 ms).
//              The frame's arrival is the latest arrival of its segments; never dropped.
//              Retransmissions add no serialization time, and a loss does not slow the link's
//              later frames (no congestion window): what the model adds is TCP's waiting for
//              duplicate ACKs and for its timer. Two simplifications, both on the slow side: a
//              tail loss waits for the full RTO, not a tail loss probe (~2 RTT, RFC 8985), and
//              the frames queued behind a frame do not trigger fast retransmit of its tail.
//   datagram   dropped with probability p; a lost frame still occupied the link while it was
//              serialized, as on a real wire, and does not hold the frames after it.
// Serialization times are kept to fractions of a nanosecond across frames, so many small frames
// add up to the same time as one large one. Draws come from a seeded std::mt19937_64, so a seed
// and a sequence of (now, bytes, extra) calls give the same slots on every machine.
class LinkSchedule {
 public:
  using Clock = std::chrono::steady_clock;

  struct Slot {
    bool dropped = false;             // datagram mode only
    std::size_t segmentLosses = 0;    // stream mode: losses of the frame's segments (all resent)
    std::size_t fastRetransmits = 0;  // stream mode: segments of those resent by fast retransmit
    Clock::time_point start;          // serialization starts: the sender's send completes here
    Clock::time_point serialized;     // serialization ends
    Clock::time_point deliverAt;      // the receiver gets the frame (meaningless if dropped)
  };

  // Throws gossamer::Error when `profile` is invalid. `capacity`: the pipe this link shares with
  // the other flows of its pair; null: a pipe of its own at the profile's bandwidth. A shared
  // pipe's rate must be the profile's bandwidth (checked).
  LinkSchedule(const LinkProfile& profile, std::uint64_t seed,
               std::shared_ptr<SharedCapacity> capacity = nullptr);

  // The slot of the next frame of `bytes` bytes, whose send starts at `now` (non-decreasing
  // from call to call). `extraLossRate` in [0, 1] (checked) is lost on top of the profile's, in
  // the profile's loss mode (the shaped transport's run-time loss, Partitions::setLoss).
  Slot admit(Clock::time_point now, std::size_t bytes, double extraLossRate = 0);

  // timeouts(losses) above: the sum of the backed-off retransmission timeouts of a segment whose
  // `losses` losses are all recovered by the timer (0 for none), the extra delay of a tail
  // segment. `losses` in [0, kMaxRetransmissions] (checked).
  Clock::duration retransmissionDelay(int losses) const;

  // Exact serialization time of `bytes` bytes on an idle pipe: bytes * 8 over the lower of the
  // bandwidth and the flow's W / RTT (zero when both are unlimited).
  std::chrono::duration<double> serializationTime(std::size_t bytes) const;

  const LinkProfile& profile() const { return profile_; }

 private:
  double uniform();  // [0, 1)
  // Stream mode: the latest arrival of the segments of a frame of `bytes` bytes that started
  // serializing at `start` and arrives whole at `arrival` unless a segment is lost; `delay` is
  // its one-way delay.
  Clock::time_point streamArrival(Clock::time_point start, Clock::time_point arrival,
                                  Clock::duration delay, std::size_t bytes, double bitsPerSecond,
                                  double lossRate, Slot& slot);

  LinkProfile profile_;
  std::mt19937_64 rng_;
  // retransmissionDelay(k) for k = 0 .. kMaxRetransmissions.
  std::vector<Clock::duration> backoff_;
  std::shared_ptr<SharedCapacity> capacity_;  // null: unlimited bandwidth
  double flowBitsPerSecond_ = 0;              // W / RTT; 0: no per-flow limit
  Timeline flow_;                             // this flow's serialization, with a window
  Clock::time_point lastDelivery_{};          // deliverAt of the last frame not dropped
};

}  // namespace gossamer::net::shaped
