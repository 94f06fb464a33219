// A fiber: a function with its own stack that runs on the thread that resumes it, until it
// yields back or returns. The simulator runs every simulated peer's compute thread as one, so
// exactly one simulated activity runs at a time and the order is the scheduler's alone.
//
// Threading: resume() and yield() on one thread (the simulated world's). A fiber's body must not
// let an exception escape: the caller's body catches what it throws. Not copyable or movable.
#pragma once

#include <cstddef>
#include <functional>

#include <ucontext.h>

namespace gossamer::engine::sim {

class Fiber {
 public:
  // `stackBytes` of stack (mmap'd with a guard page below it; pages are touched on use only).
  Fiber(std::function<void()> body, std::size_t stackBytes);
  ~Fiber();
  Fiber(const Fiber&) = delete;
  Fiber& operator=(const Fiber&) = delete;

  // Runs the fiber until it yields or its body returns. Not from inside a fiber.
  void resume();
  // From inside this fiber: back to the resume() that runs it.
  void yield();
  bool done() const { return done_; }

 private:
  static void entry(unsigned low, unsigned high);

  std::function<void()> body_;
  void* stack_ = nullptr;
  std::size_t mapped_ = 0;
  ucontext_t context_{};
  ucontext_t caller_{};
  bool done_ = false;
  bool running_ = false;
};

}  // namespace gossamer::engine::sim
