// How fast each peer trains (uneven peers: an H100 beside an A10, a busy node beside an idle one).
//
// Every peer measures itself: a SpeedReporter (a thread of its own while the training loop runs)
// reads the loop's figures (LoopStatus) every `period`, and over the window since its last
// reading takes the compute per step (gradients and optimizer, emulated compute included: what
// the peer's hardware costs a step) and the samples trained on per second of the loop (waits
// included: what the peer contributes as the cluster runs). It records them in this peer's
// SpeedBoard and sends them to the other members as a runtime control message (control::Speed,
// not SWIM's member records: they change every second and only the training needs them). A
// window without a step reports nothing (the last report stands).
//
// The SpeedBoard keeps the last report of each peer, this one's included; PeerContext::speedOf
// reads it, so every algorithm can read its neighbours' speeds.
#pragma once

#include <condition_variable>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <thread>

#include "engine/algorithm.h"
#include "engine/runtime/peer_state.h"

namespace gossamer::engine::runtime {

// How often a peer measures and shares its speed.
inline constexpr Clock::duration kSpeedReportPeriod = std::chrono::seconds(1);

// Any thread.
class SpeedBoard {
 public:
  void record(PeerId peer, const PeerSpeed& speed);
  std::optional<PeerSpeed> of(PeerId peer) const;

 private:
  mutable std::mutex mutex_;  // leaf
  std::map<PeerId, PeerSpeed> speeds_;
};

// The figures of one window of the loop, from two readings of its status: none when no step
// was taken between them.
struct LoopReading {
  std::uint64_t step = 0;
  std::uint64_t samples = 0;
  double computeSeconds = 0;
  double loopSeconds = 0;
};
std::optional<PeerSpeed> speedBetween(const LoopReading& before, const LoopReading& after);
LoopReading readLoop(const LoopStatus& status);

class SpeedReporter {
 public:
  // Every `period`, the window's speed goes to `report` (from the reporter's thread).
  SpeedReporter(const LoopStatus& status, Clock::duration period,
                std::function<void(const PeerSpeed&)> report);
  // stop().
  ~SpeedReporter();
  SpeedReporter(const SpeedReporter&) = delete;
  SpeedReporter& operator=(const SpeedReporter&) = delete;
  // Ends the thread (idempotent).
  void stop();

 private:
  void run();
  void reportWindow();

  const LoopStatus& status_;
  Clock::duration period_;
  std::function<void(const PeerSpeed&)> report_;
  LoopReading last_;  // reporter thread
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stopping_ = false;  // guarded by mutex_
  std::thread thread_;     // last: started when the rest is ready
};

}  // namespace gossamer::engine::runtime
