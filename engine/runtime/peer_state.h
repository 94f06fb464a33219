// Small pieces of a peer's state that several parts share, each thread-safe on its own:
// LoopStatus (what any thread may read about the training loop), MetricsMap (the algorithm's
// counters) and TagSource (fresh request tags).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>

#include "engine/algorithm.h"

namespace gossamer::engine::runtime {

// Written by the compute thread, read by any thread (Peer::status, the control protocol).
struct LoopStatus {
  std::atomic<std::uint64_t> step{0};
  std::atomic<std::uint64_t> totalSteps{0};
  std::atomic<double> loss{0};          // exponential moving average of the step losses
  std::atomic<double> trainSeconds{0};  // in the training loop so far
  std::atomic<std::int64_t> commWaitNs{0};
  std::atomic<std::int64_t> computeNs{0};   // in the step's compute (gradients, optimizer)
  std::atomic<std::int64_t> stepTimeUs{0};  // emulated compute per step (--step-time)
  std::atomic<bool> training{false};  // in the training loop
  std::atomic<bool> finished{false};  // past it, with the final snapshot published

  void addCommWait(Clock::duration d) {
    commWaitNs += std::chrono::duration_cast<std::chrono::nanoseconds>(d).count();
  }
  double commWaitSeconds() const { return static_cast<double>(commWaitNs) * 1e-9; }
  void addCompute(Clock::duration d) {
    computeNs += std::chrono::duration_cast<std::chrono::nanoseconds>(d).count();
  }
  double computeSeconds() const { return static_cast<double>(computeNs) * 1e-9; }
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
