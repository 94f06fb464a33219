// A peer's params as copies taken at its step boundaries, for whoever asks without stopping
// training: the local cluster's monitor (Peer::snapshot), a joiner pulling a model, the final
// consensus. The compute thread publishes a copy at the next step boundary once someone waits
// (wanted()), and a final one after training; pulls that come before are answered then.
//
// Threading: publish() and wanted() on the compute thread; take() on any thread; pull() on the
// io thread. One leaf lock.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "engine/algorithm.h"

namespace gossamer::engine::runtime {

// A copy of a peer's params at one of its step boundaries.
struct Snapshot {
  PeerId peer = 0;
  std::uint64_t step = 0;
  std::vector<float> params;
  // For a catch-up (catch_up.h): what members holding one state agree on (the step for params; an
  // algorithm's own count for its state, Algorithm::sharedState), and the integers that travel
  // with the floats.
  std::uint64_t version = 0;
  std::vector<std::uint64_t> integers;
};

class SnapshotBoard {
 public:
  explicit SnapshotBoard(PeerId self) : self_(self) {}

  // Whether someone waits for a snapshot (cheap; checked at every step boundary).
  bool wanted() const { return wanted_.load(std::memory_order_relaxed); }
  // Publishes `params` taken at `step` (`final` after training: later requests get it at once)
  // and returns the pulls that waited for it, to be answered with it.
  std::vector<Incoming> publish(std::uint64_t step, std::vector<float> params, bool final);
  std::shared_ptr<const Snapshot> latest() const;

  // The next published snapshot (at once when training is over and one exists), or nullopt
  // after `timeout`. `trainingOver` says whether the compute thread still publishes on demand.
  std::optional<Snapshot> take(Clock::duration timeout, bool trainingOver);
  // A pull from another peer: the final snapshot at once when there is one, else nullopt and the
  // pull waits for the next publish().
  std::shared_ptr<const Snapshot> pull(const Incoming& request);

 private:
  const PeerId self_;
  mutable std::mutex mutex_;
  std::condition_variable published_;
  std::shared_ptr<const Snapshot> latest_;
  std::uint64_t version_ = 0;
  bool final_ = false;
  std::atomic<bool> wanted_{false};
  std::vector<Incoming> pending_;  // pulls to answer at the next publish
};

}  // namespace gossamer::engine::runtime
