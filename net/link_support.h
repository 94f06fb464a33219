// Building blocks shared by the tcp/, inproc/ and ibverbs/ backends; not part of the Transport API
// (a user of net/ never includes this header):
// - FifoGate: sends on one link take turns in the order they started.
// - AsyncCondition: a condition variable for coroutines, notified from any thread.
// - BufferPool: the bounded, recycling pool that received payloads land in when no PayloadTarget
//   claims them; its bound is what makes a slow receiver slow down its senders.
// - checkFrameShape: the Limits check every frame passes before anything is allocated for it.
// - storeLe / loadLe: little-endian integers of the wire formats.
// - placePayloads / FrameReceiver: where a received frame's payloads go, and the receive of a
//   link that reads frames off a stream (tcp, ibverbs).
// - SharedStateLink / SharedStateTransport: the Link and Transport classes of the backends,
//   over their per-link and per-transport state.
//
// Every coroutine here must run on a single-threaded executor (an io_context run by one thread,
// as every peer's is, or a strand): a waiter and the wake-up posted to it never run at once.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <new>
#include <span>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include <asio/any_io_executor.hpp>
#include <asio/awaitable.hpp>
#include <asio/error.hpp>
#include <asio/experimental/as_tuple.hpp>
#include <asio/post.hpp>
#include <asio/steady_timer.hpp>
#include <asio/this_coro.hpp>
#include <asio/use_awaitable.hpp>

#include "net/errors.h"
#include "net/frame.h"
#include "net/limits.h"
#include "net/transport.h"

namespace gossamer::net::detail {

// Completion token of every asynchronous operation in the backends: errors come back as values,
// never as exceptions (transport.h).
inline constexpr auto kUseTuple = asio::experimental::as_tuple(asio::use_awaitable);

// Little-endian integers of `bytes` bytes (1..8) in wire formats.
inline void storeLe(std::byte* out, std::uint64_t value, int bytes) {
  for (int i = 0; i < bytes; ++i) out[i] = static_cast<std::byte>(value >> (8 * i));
}

inline std::uint64_t loadLe(const std::byte* in, int bytes) {
  std::uint64_t value = 0;
  for (int i = 0; i < bytes; ++i)
    value |= std::uint64_t(std::to_integer<std::uint8_t>(in[i])) << (8 * i);
  return value;
}

// The first bound of `limits` that a frame with a header of `headerBytes` and `payloadCount`
// payloads, the i-th of `sizeOf(i)` bytes, breaks: Errc::tooManyPayloads or Errc::frameTooLarge;
// success when it fits. Overflow-safe for hostile 64-bit sizes.
template <typename SizeOf>
std::error_code checkFrameShape(std::size_t headerBytes, std::size_t payloadCount, SizeOf sizeOf,
                                const Limits& limits) {
  if (payloadCount > limits.maxPayloads) return Errc::tooManyPayloads;
  if (headerBytes > limits.maxHeaderBytes || headerBytes > limits.maxFrameBytes)
    return Errc::frameTooLarge;
  std::size_t total = headerBytes;
  for (std::size_t i = 0; i < payloadCount; ++i) {
    const std::uint64_t size = sizeOf(i);
    if (size > limits.maxFrameBytes - total) return Errc::frameTooLarge;
    total += static_cast<std::size_t>(size);
  }
  return {};
}

inline std::error_code checkFrameShape(const OutFrame& frame, const Limits& limits) {
  return checkFrameShape(
      frame.header.size(), frame.payloads.size(),
      [&](std::size_t i) { return frame.payloads[i].size(); }, limits);
}

// A FIFO mutex for the coroutines of ONE single-threaded executor (not thread-safe): the sends of
// a link take turns in the order they called enter(), which is the order they started.
class FifoGate {
 public:
  // Waits for the turn; the caller must leave() when done (see Turn). Fails with
  // operation_aborted after close() or when the wait is cancelled (its place is then given up).
  asio::awaitable<std::error_code> enter() {
    if (closed_) co_return asio::error::operation_aborted;
    if (!busy_) {
      busy_ = true;
      co_return std::error_code{};
    }
    auto waiter = std::make_shared<Waiter>(co_await asio::this_coro::executor);
    waiters_.push_back(waiter);
    co_await waiter->timer.async_wait(kUseTuple);
    if (waiter->granted) co_return std::error_code{};
    std::erase(waiters_, waiter);
    co_return asio::error::operation_aborted;
  }

  // Hands the turn to the longest waiter, or frees the gate.
  void leave() {
    if (waiters_.empty()) {
      busy_ = false;
      return;
    }
    std::shared_ptr<Waiter> next = std::move(waiters_.front());
    waiters_.pop_front();
    next->granted = true;
    next->timer.cancel();
  }

  // Fails every waiter and every later enter() with operation_aborted.
  void close() {
    closed_ = true;
    for (const auto& waiter : waiters_) waiter->timer.cancel();
    waiters_.clear();
  }

  // Leaves the gate when it goes out of scope (also when an exception or cancellation unwinds the
  // coroutine that holds the turn).
  class Turn {
   public:
    explicit Turn(FifoGate& gate) : gate_(gate) {}
    ~Turn() { gate_.leave(); }
    Turn(const Turn&) = delete;
    Turn& operator=(const Turn&) = delete;

   private:
    FifoGate& gate_;
  };

 private:
  struct Waiter {
    explicit Waiter(const asio::any_io_executor& executor)
        : timer(executor, asio::steady_timer::time_point::max()) {}
    asio::steady_timer timer;
    bool granted = false;
  };

  bool busy_ = false;
  bool closed_ = false;
  std::deque<std::shared_ptr<Waiter>> waiters_;
};

// A condition variable for coroutines; the waiter and the notifier may be on different threads
// (an in-process peer on another io_context, or the compute thread releasing a payload). With the
// mutex that guards the predicate:
//   std::unique_lock lock(mutex);
//   while (!predicate) {
//     if (auto ec = co_await condition.wait(lock)) co_return ec;
//     lock.lock();
//   }
class AsyncCondition {
 public:
  AsyncCondition() = default;
  AsyncCondition(const AsyncCondition&) = delete;
  AsyncCondition& operator=(const AsyncCondition&) = delete;

  // Registers the calling coroutine, then unlocks `lock` (so a notify after the caller checked its
  // predicate is never lost) and suspends until the next notifyAll(). Returns with `lock`
  // unlocked; the caller relocks and rechecks. Fails with operation_aborted when the wait is
  // cancelled (for example by awaitable_operators' ||).
  asio::awaitable<std::error_code> wait(std::unique_lock<std::mutex>& lock) {
    auto waiter = std::make_shared<Waiter>(co_await asio::this_coro::executor);
    {
      std::lock_guard guard(mutex_);
      waiters_.push_back(waiter);
    }
    lock.unlock();
    // Deregisters when this frame ends, even when it is destroyed unfinished by the shutdown of
    // its io_context: a later notifyAll() must never post to an executor that is gone.
    struct Deregister {
      AsyncCondition& condition;
      const std::shared_ptr<Waiter>& waiter;
      ~Deregister() {
        std::lock_guard guard(condition.mutex_);
        std::erase(condition.waiters_, waiter);
      }
    } deregister{*this, waiter};
    co_await waiter->timer.async_wait(kUseTuple);
    if (waiter->woken) co_return std::error_code{};
    co_return asio::error::operation_aborted;
  }

  // Wakes every coroutine waiting now. Any thread; cheap when nobody waits.
  void notifyAll() {
    // Posting under mutex_ orders each post before the waiter's deregistration, so the waiter's
    // io_context is still alive when it is posted to.
    std::lock_guard guard(mutex_);
    for (auto& waiter : waiters_) {
      asio::post(waiter->timer.get_executor(), [waiter] {
        waiter->woken = true;
        waiter->timer.cancel();
      });
    }
    waiters_.clear();
  }

 private:
  struct Waiter {
    explicit Waiter(const asio::any_io_executor& executor)
        : timer(executor, asio::steady_timer::time_point::max()) {}
    asio::steady_timer timer;
    bool woken = false;  // set on the waiter's executor, before its timer is cancelled
  };

  std::mutex mutex_;
  std::vector<std::shared_ptr<Waiter>> waiters_;
};

// The pool that received payloads land in when no PayloadTarget claims them. It holds at most
// `maxBytes` of memory: buffers handed out in Payloads that their owners have not released yet,
// plus freed buffers kept for reuse. Whoever fills it (the receiving link for TCP, the sending
// end for inproc) waits in acquire() while the bound is reached, so memory stays bounded and the
// sender is slowed down. A Payload may be released on any thread; the pool outlives the link as
// long as any of its Payloads lives.
class BufferPool final : public std::enable_shared_from_this<BufferPool> {
 public:
  explicit BufferPool(std::size_t maxBytes) : maxBytes_(maxBytes) {}
  BufferPool(const BufferPool&) = delete;
  BufferPool& operator=(const BufferPool&) = delete;
  ~BufferPool() {
    for (const Buffer& buffer : cached_) delete[] buffer.data;
  }

  std::size_t maxBytes() const { return maxBytes_; }

  // Appends to `out` one Payload of exactly sizes[i] bytes (uninitialised) for every i, all at
  // once, waiting on the calling coroutine's executor until they fit under the bound. Fails with
  // Errc::frameTooLarge when they never can (their sum exceeds maxBytes), operation_aborted after
  // close() or when cancelled, and std::errc::not_enough_memory when the allocation fails; a
  // failure appends nothing. A zero-byte size gets an empty Payload.
  asio::awaitable<std::error_code> acquire(std::span<const std::size_t> sizes,
                                           std::vector<Payload>& out) {
    std::size_t total = 0;
    for (const std::size_t size : sizes) {
      if (size > maxBytes_ - total) co_return Errc::frameTooLarge;
      total += size;
    }
    std::vector<Buffer> reused;
    std::vector<Buffer> evicted;
    std::unique_lock lock(mutex_);
    while (!tryReserve(sizes, total, reused, evicted)) {
      if (closed_) co_return asio::error::operation_aborted;
      if (auto ec = co_await spaceFreed_.wait(lock)) co_return ec;
      lock.lock();
    }
    lock.unlock();
    for (const Buffer& buffer : evicted) delete[] buffer.data;

    // `reused` holds a cached buffer per size, or null: allocate one of exactly that size (its
    // bytes are already counted in outstanding_). On failure `got` gives everything back.
    std::shared_ptr<BufferPool> self = shared_from_this();
    std::vector<Payload> got;
    got.reserve(sizes.size());
    for (std::size_t i = 0; i < sizes.size(); ++i) {
      Buffer buffer = reused[i];
      if (sizes[i] == 0) {
        got.emplace_back();
        continue;
      }
      if (buffer.data == nullptr) {
        buffer.data = new (std::nothrow) std::byte[sizes[i]];
        buffer.capacity = sizes[i];
      }
      if (buffer.data == nullptr) {
        for (std::size_t j = i; j < sizes.size(); ++j)
          release(reused[j].data, reused[j].data ? reused[j].capacity : sizes[j]);
        co_return std::make_error_code(std::errc::not_enough_memory);
      }
      got.emplace_back(std::span<std::byte>(buffer.data, sizes[i]),
                       std::shared_ptr<void>(buffer.data, Releaser{self, buffer.capacity}));
    }
    for (Payload& payload : got) out.push_back(std::move(payload));
    co_return std::error_code{};
  }

  // Fails current and later acquires with operation_aborted and frees the cached buffers; memory
  // still held in Payloads is freed as they are released. Any thread; idempotent.
  void close() {
    std::vector<Buffer> cached;
    {
      std::lock_guard guard(mutex_);
      closed_ = true;
      cached.swap(cached_);
      cachedBytes_ = 0;
    }
    for (const Buffer& buffer : cached) delete[] buffer.data;
    spaceFreed_.notifyAll();
  }

 private:
  struct Buffer {
    std::byte* data = nullptr;
    std::size_t capacity = 0;
  };

  // Returns a Payload's buffer to the pool when its last owner goes.
  struct Releaser {
    std::shared_ptr<BufferPool> pool;
    std::size_t capacity;
    void operator()(std::byte* data) const { pool->release(data, capacity); }
  };

  // Freed buffers kept for reuse, at most; more are returned to the system.
  static constexpr std::size_t kMaxCachedBuffers = 32;

  // With mutex_ held: reserves memory for `sizes` (summing to `total`) if it fits, filling
  // `reused` (one entry per size: a cached buffer to reuse, or null to allocate) and `evicted`
  // (cached buffers to free to make room). A cached buffer is reused for a size it holds without
  // wasting more than half of it.
  bool tryReserve(std::span<const std::size_t> sizes, std::size_t total,
                  std::vector<Buffer>& reused, std::vector<Buffer>& evicted) {
    if (closed_ || total > maxBytes_ - outstanding_) return false;
    reused.assign(sizes.size(), Buffer{});
    // Invariant: committed + remaining <= maxBytes_.
    std::size_t committed = outstanding_;
    std::size_t remaining = total;
    for (std::size_t i = 0; i < sizes.size(); ++i) {
      const std::size_t size = sizes[i];
      if (size == 0) continue;
      remaining -= size;
      auto best = cached_.end();
      for (auto it = cached_.begin(); it != cached_.end(); ++it) {
        if (it->capacity >= size && it->capacity / 2 <= size &&
            (best == cached_.end() || it->capacity < best->capacity))
          best = it;
      }
      if (best != cached_.end() && best->capacity <= maxBytes_ - committed - remaining) {
        reused[i] = *best;
        committed += best->capacity;
        cachedBytes_ -= best->capacity;
        cached_.erase(best);
      } else {
        committed += size;
      }
    }
    outstanding_ = committed;
    // Fresh buffers need room next to the cache: evict cached buffers until both fit.
    while (!cached_.empty() && outstanding_ + cachedBytes_ > maxBytes_) {
      evicted.push_back(cached_.back());
      cachedBytes_ -= cached_.back().capacity;
      cached_.pop_back();
    }
    return true;
  }

  // Any thread. `data` null: only gives back `capacity` reserved bytes.
  void release(std::byte* data, std::size_t capacity) {
    bool keep = false;
    {
      std::lock_guard guard(mutex_);
      outstanding_ -= capacity;
      if (data != nullptr && !closed_ && cached_.size() < kMaxCachedBuffers) {
        cached_.push_back(Buffer{data, capacity});
        cachedBytes_ += capacity;
        keep = true;
      }
    }
    if (!keep) delete[] data;
    spaceFreed_.notifyAll();
  }

  const std::size_t maxBytes_;
  std::mutex mutex_;
  std::size_t outstanding_ = 0;  // bytes in Payloads not yet released (and reserved ones)
  std::size_t cachedBytes_ = 0;  // outstanding_ + cachedBytes_ <= maxBytes_
  std::vector<Buffer> cached_;
  bool closed_ = false;
  AsyncCondition spaceFreed_;
};

// Where the payloads of a received frame go, once its header is in `frame` and the sizes of its
// payloads are known: for each, the buffer `target` returns (frame.h), or a buffer of `pool`
// (all pooled ones at once, waiting while the pool is at its bound). Fills frame.payloads, in
// order. Errc::invalidPayloadTarget when the target returns a span of the wrong size; the pool's
// errors. `scratch` is reused from frame to frame.
struct PayloadPlacement {
  std::vector<std::span<std::byte>> targets;
  std::vector<std::size_t> pooledSizes;
};

inline asio::awaitable<std::error_code> placePayloads(const PayloadTarget& target, BufferPool& pool,
                                                      std::span<const std::uint64_t> sizes,
                                                      InFrame& frame, PayloadPlacement& scratch) {
  const std::size_t count = sizes.size();
  scratch.targets.assign(count, {});
  scratch.pooledSizes.clear();
  for (std::size_t i = 0; i < count; ++i) {
    if (target) scratch.targets[i] = target(frame.header, i, sizes[i]);
    if (!scratch.targets[i].empty() && scratch.targets[i].size() != sizes[i])
      co_return Errc::invalidPayloadTarget;
    if (scratch.targets[i].empty()) scratch.pooledSizes.push_back(sizes[i]);
  }
  std::vector<Payload> pooled;
  if (!scratch.pooledSizes.empty()) {
    // Waits here, reading nothing, while the receiver holds the pool's bound.
    if (auto ec = co_await pool.acquire(scratch.pooledSizes, pooled)) co_return ec;
  }
  frame.payloads.reserve(count);
  std::size_t nextPooled = 0;
  for (std::size_t i = 0; i < count; ++i) {
    if (scratch.targets[i].empty()) {
      frame.payloads.push_back(std::move(pooled[nextPooled++]));
    } else {
      frame.payloads.emplace_back(scratch.targets[i], nullptr);
    }
  }
  co_return std::error_code{};
}

// The receive of a link that reads its frames off a stream (tcp's socket, ibverbs' slots), as a
// base of its State: one receive at a time (a second fails with Errc::receiveInProgress); the
// frame is emptied first (its pooled payloads may be what the pool waits for); an error closes
// the link, and so does a receive that ends unfinished (cancelled, or an exception from the
// PayloadTarget): the stream stops mid-frame and cannot be read on. State befriends this class
// and provides readFrame(InFrame&) -> awaitable<std::error_code>, closeWith(ec), failWith(ec)
// (closes with ec, returns the error to report), closed_ and closeError_.
template <typename State>
class FrameReceiver {
 public:
  static asio::awaitable<std::error_code> receive(std::shared_ptr<State> self, InFrame& frame) {
    FrameReceiver& receiver = *self;
    if (receiver.receiving_) co_return Errc::receiveInProgress;
    frame.payloads.clear();
    frame.header.clear();
    if (self->closed_) co_return self->closeError_;
    struct Scope {
      State& link;
      bool finished = false;
      ~Scope() {
        static_cast<FrameReceiver&>(link).receiving_ = false;
        if (!finished) link.closeWith(asio::error::operation_aborted);
      }
    } scope{*self};
    receiver.receiving_ = true;
    std::error_code ec = co_await self->readFrame(frame);
    scope.finished = true;
    if (ec) {
      frame.payloads.clear();
      ec = self->failWith(ec);
    }
    co_return ec;
  }

 private:
  bool receiving_ = false;
};

// The Link a backend hands out: forwards every call to the backend's per-link State, held in a
// shared_ptr so that the coroutines of send and receive and a close() posted from another thread
// keep it alive after the Link is dropped. Dropping the Link closes it.
template <typename State>
class SharedStateLink final : public Link {
 public:
  explicit SharedStateLink(std::shared_ptr<State> state) : state_(std::move(state)) {}
  ~SharedStateLink() override { state_->close(); }

  asio::awaitable<std::error_code> send(OutFrame frame) override {
    return State::send(state_, std::move(frame));
  }
  asio::awaitable<std::error_code> receive(InFrame& frame) override {
    return State::receive(state_, frame);
  }
  void setPayloadTarget(PayloadTarget target) override {
    state_->setPayloadTarget(std::move(target));
  }
  void close() override { state_->close(); }
  std::string remoteAddress() const override { return state_->remoteAddress(); }
  std::uint64_t bytesSent() const override { return state_->bytesSent(); }
  std::uint64_t bytesReceived() const override { return state_->bytesReceived(); }

 private:
  std::shared_ptr<State> state_;
};

// The Transport a backend hands out: forwards every call to the backend's per-transport State,
// held in a shared_ptr so that the coroutines of accept and connect keep it alive after the
// Transport is dropped. Destroying the Transport closes it.
template <typename State>
class SharedStateTransport final : public Transport {
 public:
  explicit SharedStateTransport(std::shared_ptr<State> state) : state_(std::move(state)) {}
  ~SharedStateTransport() override { state_->close(); }

  std::string name() const override { return state_->name(); }
  std::error_code listen(const Endpoint& local) override { return state_->listen(local); }
  Endpoint localEndpoint() const override { return state_->localEndpoint(); }
  asio::awaitable<LinkResult> accept() override { return State::accept(state_); }
  asio::awaitable<LinkResult> connect(const Endpoint& remote,
                                      std::chrono::milliseconds timeout) override {
    return State::connect(state_, remote, timeout);
  }
  asio::awaitable<LinkResult> punch(const Endpoint& remote, std::chrono::milliseconds timeout,
                                    bool asServer) override {
    if constexpr (requires { State::punch(state_, remote, timeout, asServer); })
      return State::punch(state_, remote, timeout, asServer);
    else
      return Transport::punch(remote, timeout, asServer);
  }
  void registerMemory(std::span<std::byte> memory) override { state_->registerMemory(memory); }
  void close() override { state_->close(); }
  const Limits& limits() const override { return state_->limits(); }

 private:
  std::shared_ptr<State> state_;
};

}  // namespace gossamer::net::detail
