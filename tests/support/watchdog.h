// A hard deadline for a test case: aborts the test binary with a message naming the case when the
// Watchdog outlives `limit`, so that a hung case fails the run instead of stalling it.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <thread>

#include <doctest/doctest.h>

namespace gossamer::test {

class Watchdog {
 public:
  explicit Watchdog(std::chrono::seconds limit)
      : name_(doctest::getContextOptions()->currentTest != nullptr
                  ? doctest::getContextOptions()->currentTest->m_name
                  : "?"),
        thread_([this, limit] {
          std::unique_lock lock(mutex_);
          if (!done_.wait_for(lock, limit, [this] { return finished_; })) {
            std::fprintf(stderr,
                         "WATCHDOG: test case '%s' exceeded its deadline of %lld s; aborting\n",
                         name_.c_str(), static_cast<long long>(limit.count()));
            std::fflush(stderr);
            std::abort();
          }
        }) {}
  ~Watchdog() {
    {
      std::lock_guard lock(mutex_);
      finished_ = true;
    }
    done_.notify_all();
    thread_.join();
  }
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

 private:
  std::string name_;
  std::mutex mutex_;
  std::condition_variable done_;
  bool finished_ = false;
  std::thread thread_;
};

// Polls `done` every 5 ms until it holds (true) or `timeout` passes (false).
template <typename Predicate>
bool waitUntil(std::chrono::milliseconds timeout, Predicate done) {
  const auto until = std::chrono::steady_clock::now() + timeout;
  while (!done()) {
    if (std::chrono::steady_clock::now() >= until) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return true;
}

}  // namespace gossamer::test
