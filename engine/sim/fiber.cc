#include "engine/sim/fiber.h"

#include <cstdint>

#include <sys/mman.h>
#include <unistd.h>

#include "engine/base/enforce.h"

namespace gossamer::engine::sim {

Fiber::Fiber(std::function<void()> body, std::size_t stackBytes) : body_(std::move(body)) {
  const std::size_t page = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
  const std::size_t stack = (stackBytes + page - 1) / page * page;
  mapped_ = stack + page;
  stack_ = mmap(nullptr, mapped_, PROT_READ | PROT_WRITE,
                MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  GOSSAMER_ENFORCE(stack_ != MAP_FAILED, "fiber: cannot map a stack of {} bytes", mapped_);
  // The lowest page is the guard: an overflow faults instead of writing over another stack.
  GOSSAMER_ENFORCE(mprotect(stack_, page, PROT_NONE) == 0, "fiber: cannot protect the guard page");
  GOSSAMER_ENFORCE(getcontext(&context_) == 0, "fiber: getcontext failed");
  context_.uc_stack.ss_sp = static_cast<char*>(stack_) + page;
  context_.uc_stack.ss_size = stack;
  context_.uc_link = &caller_;
  const auto self = reinterpret_cast<std::uintptr_t>(this);
  makecontext(&context_, reinterpret_cast<void (*)()>(&Fiber::entry), 2,
              static_cast<unsigned>(self & 0xffffffffu), static_cast<unsigned>(self >> 32));
}

Fiber::~Fiber() {
  if (stack_ != nullptr && stack_ != MAP_FAILED) munmap(stack_, mapped_);
}

void Fiber::entry(unsigned low, unsigned high) {
  auto* fiber = reinterpret_cast<Fiber*>((static_cast<std::uintptr_t>(high) << 32) | low);
  fiber->body_();
  fiber->done_ = true;
  // Returning switches to uc_link: the resume() that ran us.
}

void Fiber::resume() {
  GOSSAMER_ENFORCE(!done_ && !running_, "fiber: resumed while {}", done_ ? "done" : "running");
  running_ = true;
  swapcontext(&caller_, &context_);
  running_ = false;
}

void Fiber::yield() {
  GOSSAMER_ENFORCE(running_, "fiber: yield outside the fiber");
  swapcontext(&context_, &caller_);
}

}  // namespace gossamer::engine::sim
