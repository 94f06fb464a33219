#include "engine/runtime/stall_watch.h"

#include <algorithm>

#include <fmt/format.h>

#include "engine/base/log.h"

namespace gossamer::engine::runtime {
namespace {

double seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

}  // namespace

std::string describeWait(const WaitBoard::Wait& wait) {
  return wait.from.empty() ? std::string(wait.what)
                           : fmt::format("{} from {}", wait.what, peerList(wait.from));
}

StallWatch::StallWatch(PeerId self, const LoopStatus& status, Clock::duration stallTimeout,
                       Clock::duration commTimeout, Actions actions)
    : self_(self),
      status_(status),
      configured_(stallTimeout),
      commTimeout_(commTimeout),
      actions_(std::move(actions)),
      thread_([this] { run(); }) {}

StallWatch::~StallWatch() { stop(); }

void StallWatch::stop() {
  {
    std::lock_guard lock(mutex_);
    stopped_ = true;
  }
  stopping_.notify_all();
  if (thread_.joinable() && thread_.get_id() != std::this_thread::get_id()) thread_.join();
}

std::optional<std::string> StallWatch::verdict() const {
  std::lock_guard lock(mutex_);
  return verdict_;
}

Clock::duration StallWatch::timeout() const {
  if (configured_ > Clock::duration::zero()) return configured_;
  const std::uint64_t steps = status_.step;
  const double meanStep = steps > 0 ? status_.trainSeconds / static_cast<double>(steps) : 0;
  return std::max<Clock::duration>(
      3 * commTimeout_,
      std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(10 * meanStep)));
}

std::string StallWatch::describe(const WaitBoard::Wait& wait, Clock::duration stalled) const {
  return fmt::format("no step for {:.1f} s (step {} of {}, training), waiting for {}",
                     seconds(stalled), status_.step.load(), status_.totalSteps.load(),
                     describeWait(wait));
}

void StallWatch::run() {
  std::uint64_t step = status_.step;
  Clock::time_point progress = Clock::now();  // the last sample that saw progress or no wait
  int stage = 0;                              // 1: re-checked, 2: gave up
  std::unique_lock lock(mutex_);
  while (!stopping_.wait_for(lock, kSampleEvery, [&] { return stopped_; })) {
    const Clock::time_point now = Clock::now();
    const std::optional<WaitBoard::Wait> wait = status_.waits.current();
    if (status_.step != step || !status_.training || status_.loopEnded || !wait) {
      step = status_.step;
      progress = now;
      stage = 0;
      continue;
    }
    const Clock::duration stalled = now - progress;
    const Clock::duration limit = timeout();
    if (stage == 0 && stalled >= limit) {
      stage = 1;
      log::get("peer")->warn("peer {:016x}: stalled: {}; re-checking the view", self_,
                             describe(*wait, stalled));
      lock.unlock();
      actions_.recheck();
      lock.lock();
    } else if (stage == 1 && stalled >= 2 * limit) {
      stage = 2;
      verdict_ = fmt::format("stalled: {}; giving up (--stall-timeout {:.0f} s)",
                             describe(*wait, stalled), seconds(limit));
      const std::string verdict = *verdict_;
      log::get("peer")->error("peer {:016x}: {}", self_, verdict);
      lock.unlock();
      actions_.giveUp(verdict);
      lock.lock();
    }
  }
}

}  // namespace gossamer::engine::runtime
