// A peer's watch over its own progress (a thread of its own, while the training loop runs).
//
// A stall: the step has not moved for the stall timeout while the compute thread waits on the
// others (WaitBoard), every sample of the watch in between finding it waiting. Time the compute
// thread spends computing, evaluating, or (externally driven loop) in the caller's hands between
// steps never counts. At the timeout the watch logs the peer's state (step, phase, what it waits
// for and from whom) and re-checks: every wait wakes and looks at the view again, so that members
// that left are no longer waited for. At twice the timeout it gives up: it logs the verdict
// naming the peers it still waits for and calls giveUp (the peer ends as if killed; gossamer-peer
// exits non-zero with that line).
//
// The timeout: TrainingConfig::stallTimeout, or when that is zero, three comm timeouts and at
// least ten times the mean step so far (a slow peer's steps are not a stall).
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "engine/runtime/peer_state.h"

namespace gossamer::engine::runtime {

// "a gather from 0000000000000002, 0000000000000003"; empty for no wait.
std::string describeWait(const WaitBoard::Wait& wait);

class StallWatch {
 public:
  struct Actions {
    std::function<void()> recheck;                   // wake every wait
    std::function<void(const std::string&)> giveUp;  // the verdict; end the peer
  };
  StallWatch(PeerId self, const LoopStatus& status, Clock::duration stallTimeout,
             Clock::duration commTimeout, Actions actions);
  // stop().
  ~StallWatch();
  StallWatch(const StallWatch&) = delete;
  StallWatch& operator=(const StallWatch&) = delete;

  // Ends the watch (idempotent); the verdict stays readable.
  void stop();
  // Why the watch gave up on this peer, if it did.
  std::optional<std::string> verdict() const;
  // The timeout in force now (it grows with the mean step when not configured).
  Clock::duration timeout() const;

  // How often the watch samples the wait board.
  static constexpr std::chrono::milliseconds kSampleEvery{100};

 private:
  void run();
  // The peer's state for the log: step, phase, the wait and its peers.
  std::string describe(const WaitBoard::Wait& wait, Clock::duration stalled) const;

  const PeerId self_;
  const LoopStatus& status_;
  const Clock::duration configured_, commTimeout_;
  const Actions actions_;
  mutable std::mutex mutex_;  // leaf
  std::condition_variable stopping_;
  bool stopped_ = false;
  std::optional<std::string> verdict_;
  std::thread thread_;  // last: it reads the above
};

}  // namespace gossamer::engine::runtime
