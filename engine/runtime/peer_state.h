// Small pieces of a peer's state that several parts share, each thread-safe on its own:
// LoopStatus (what any thread may read about the training loop), MetricsMap (the algorithm's
// counters) and TagSource (fresh request tags).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "engine/algorithm.h"

namespace gossamer::engine::runtime {

// The training loop's clock and waits as of the end of one step, taken together so that their
// ratios hold (the waits and the compute lie within the loop's time: never above 1).
struct StepFigures {
  double trainSeconds = 0;  // the loop's time on the clock (evaluations are off it)
  double commWaitSeconds = 0;
  double computeSeconds = 0;
  std::uint64_t step = 0;     // the step just taken
  std::uint64_t samples = 0;  // trained on in this run so far
};

// "0000000000000002, 0000000000000003": peer ids as the log writes them.
inline std::string peerList(std::span<const PeerId> peers) {
  std::string out;
  for (PeerId peer : peers) out += fmt::format("{}{:016x}", out.empty() ? "" : ", ", peer);
  return out;
}

// What the compute thread waits for on the others now, if anything: the stall watch reads it to
// say what a stalled peer waits for and from whom. The compute thread writes it (a Scope around
// each wait), any thread reads it.
class WaitBoard {
 public:
  struct Wait {
    const char* what = "";     // "a gather", "a message in the inbox", ...
    std::vector<PeerId> from;  // the peers it waits for, when the wait names them
    Clock::time_point since{};
  };
  class Scope {
   public:
    Scope(WaitBoard& board, const char* what, std::vector<PeerId> from = {}) : board_(board) {
      std::lock_guard lock(board_.mutex_);
      board_.wait_ = Wait{what, std::move(from), Clock::now()};
    }
    ~Scope() {
      std::lock_guard lock(board_.mutex_);
      board_.wait_.reset();
    }
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    WaitBoard& board_;
  };
  std::optional<Wait> current() const {
    std::lock_guard lock(mutex_);
    return wait_;
  }

 private:
  mutable std::mutex mutex_;  // leaf
  std::optional<Wait> wait_;
};

// Written by the compute thread, read by any thread (Peer::status, the control protocol).
//
// Comm wait is every wait of the compute thread on others while it trains and finishes: sends
// waiting for a slot, gathers, requests, model pulls, the algorithm's Inbox::wait, and the finish
// barrier. Waiting for the others to start is not part of it (the clock starts with the loop),
// nor is the evaluation at the end (the consensus pull, the release barrier).
struct LoopStatus {
  std::atomic<std::uint64_t> step{0};
  std::atomic<std::uint64_t> totalSteps{0};
  std::atomic<std::uint64_t> runSteps{0};  // totalSteps as planned, before an algorithm moved it
  std::atomic<double> loss{0};             // exponential moving average of the step losses
  std::atomic<double> trainSeconds{0};     // the loop's time on the clock so far
  std::atomic<std::int64_t> commWaitNs{0};
  std::atomic<std::int64_t> computeNs{0};   // in the step's compute (gradients, optimizer)
  std::atomic<std::int64_t> stepTimeUs{0};  // emulated compute per step (--step-time)
  std::atomic<bool> training{false};        // in the training loop
  std::atomic<bool> loopEnded{false};       // the training loop is over (done, stopped or killed)
  std::atomic<bool> finished{false};        // past it, with the final snapshot published
  std::atomic<bool> released{false};        // it released the others: it is leaving
  WaitBoard waits;                          // what the compute thread waits for now

  void addCommWait(Clock::duration d) {
    commWaitNs += std::chrono::duration_cast<std::chrono::nanoseconds>(d).count();
  }
  double commWaitSeconds() const { return static_cast<double>(commWaitNs) * 1e-9; }
  void addCompute(Clock::duration d) {
    computeNs += std::chrono::duration_cast<std::chrono::nanoseconds>(d).count();
  }
  double computeSeconds() const { return static_cast<double>(computeNs) * 1e-9; }

  // The compute thread, at the end of each step: the figures as they are now, with the loop's
  // time on the clock.
  void recordStep(double onClockSeconds, std::uint64_t samples) {
    std::lock_guard lock(stepMutex_);
    trainSeconds = onClockSeconds;
    lastStep_ = {onClockSeconds, commWaitSeconds(), computeSeconds(), step.load(), samples};
  }
  StepFigures lastStep() const {
    std::lock_guard lock(stepMutex_);
    return lastStep_;
  }

 private:
  mutable std::mutex stepMutex_;  // leaf
  StepFigures lastStep_;
};

class MetricsMap final : public Metrics {
 public:
  void add(const std::string& name, double value) override {
    std::lock_guard lock(mutex_);
    values_[name] += value;
  }
  void set(const std::string& name, double value) override {
    std::lock_guard lock(mutex_);
    values_[name] = value;
  }
  std::map<std::string, double> values() const {
    std::lock_guard lock(mutex_);
    return values_;
  }

 private:
  mutable std::mutex mutex_;  // leaf
  std::map<std::string, double> values_;
};

class TagSource final : public Tags {
 public:
  std::uint64_t fresh() override { return (std::uint64_t{1} << 63) | ++next_; }

 private:
  std::atomic<std::uint64_t> next_{0};
};

}  // namespace gossamer::engine::runtime
