#include "net/inproc/inproc_transport.h"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include <asio/steady_timer.hpp>
#include <asio/this_coro.hpp>

#include "engine/base/enforce.h"
#include "net/errors.h"
#include "net/link_support.h"

namespace gossamer::net::inproc {
namespace {

using Clock = std::chrono::steady_clock;
using detail::kUseTuple;

// connect() polls the Hub for a listener with this backoff (in-process, so much shorter than
// TCP's).
constexpr std::chrono::milliseconds kInitialBackoff{1};
constexpr std::chrono::milliseconds kMaxBackoff{50};

// A frame in a queue. Its payloads live in the receiver's pool.
struct QueuedFrame {
  std::vector<std::byte> header;
  std::vector<Payload> payloads;
  // A frame beyond the receiver's Limits is queued as this error alone (nothing was copied).
  std::error_code error;
};

// One direction of a link: the sender appends, the receiver pops. Guarded by Pipe::mutex.
struct Direction {
  std::deque<QueuedFrame> frames;
  std::size_t capacity = 1;  // the sender's maxInFlightSends
  Limits receiverLimits;
  std::shared_ptr<detail::BufferPool> pool;  // the receiver's
  bool senderClosed = false;
  bool receiverClosed = false;
  detail::AsyncCondition readable;  // a frame was queued, or the sender closed
  detail::AsyncCondition writable;  // a frame was popped, or the receiver closed
};

// A link: end 0 (the connector) sends on directions[0] and receives on directions[1]; end 1
// (the acceptor) the other way round.
struct Pipe {
  std::mutex mutex;
  Direction directions[2];
  bool endClosed[2] = {false, false};
};

// Closes `side` of `pipe`: its own operations fail with operation_aborted, the other end drains
// what was queued for it and then gets eof, and its sends fail with broken_pipe. Any thread.
void closeEnd(Pipe& pipe, int side) {
  std::deque<QueuedFrame> dropped;  // freed outside the lock
  {
    std::lock_guard lock(pipe.mutex);
    if (pipe.endClosed[side]) return;
    pipe.endClosed[side] = true;
    pipe.directions[side].senderClosed = true;
    pipe.directions[1 - side].receiverClosed = true;
    dropped.swap(pipe.directions[1 - side].frames);
  }
  for (Direction& direction : pipe.directions) {
    direction.readable.notifyAll();
    direction.writable.notifyAll();
    // Only the sender of a direction acquires from its pool: this aborts a send waiting for
    // memory, and frames already queued keep their buffers.
    direction.pool->close();
  }
}

class EndState final : public std::enable_shared_from_this<EndState> {
 public:
  EndState(std::shared_ptr<Pipe> pipe, int side, const Limits& limits, std::string remote)
      : pipe_(std::move(pipe)), side_(side), limits_(limits), remote_(std::move(remote)) {}

  static asio::awaitable<std::error_code> send(std::shared_ptr<EndState> self, OutFrame frame) {
    if (auto ec = detail::checkFrameShape(frame, self->limits_)) co_return ec;
    if (auto ec = co_await self->sendTurn_.enter()) co_return ec;
    detail::FifoGate::Turn turn(self->sendTurn_);
    Pipe& pipe = *self->pipe_;
    Direction& out = pipe.directions[self->side_];

    // Wait for room in the receiver's queue.
    std::error_code reject;
    std::unique_lock lock(pipe.mutex);
    for (;;) {
      if (auto ec = self->sendError()) co_return ec;
      if (out.frames.size() < out.capacity) break;
      if (auto ec = co_await out.writable.wait(lock)) co_return ec;
      lock.lock();
    }
    reject = detail::checkFrameShape(frame, out.receiverLimits);
    lock.unlock();

    QueuedFrame queued;
    std::size_t bytes = frame.header.size();
    if (reject) {
      queued.error = reject;
    } else {
      std::vector<std::size_t> sizes;
      sizes.reserve(frame.payloads.size());
      for (const auto& payload : frame.payloads) sizes.push_back(payload.size());
      // Waits while the receiver's pool is full; Errc::frameTooLarge if it never fits.
      std::error_code ec;
      if (!sizes.empty()) ec = co_await out.pool->acquire(sizes, queued.payloads);
      if (ec) {
        if (ec == Errc::frameTooLarge) {
          queued.error = ec;
        } else {
          lock.lock();
          const std::error_code closedError = self->sendError();
          co_return closedError ? closedError : ec;
        }
      }
      if (!queued.error) {
        queued.header.assign(frame.header.begin(), frame.header.end());
        for (std::size_t i = 0; i < frame.payloads.size(); ++i) {
          if (sizes[i] == 0) continue;
          std::memcpy(queued.payloads[i].bytes().data(), frame.payloads[i].data(), sizes[i]);
          bytes += sizes[i];
        }
      }
    }

    lock.lock();
    if (auto ec = self->sendError()) {
      lock.unlock();  // `queued` gives its buffers back without the pipe's lock
      co_return ec;
    }
    out.frames.push_back(std::move(queued));
    lock.unlock();
    out.readable.notifyAll();
    self->bytesSent_ += bytes;
    co_return std::error_code{};
  }

  static asio::awaitable<std::error_code> receive(std::shared_ptr<EndState> self, InFrame& frame) {
    if (self->receiving_) co_return Errc::receiveInProgress;
    frame.payloads.clear();
    frame.header.clear();
    struct Scope {
      EndState& end;
      ~Scope() { end.receiving_ = false; }
    } scope{*self};
    self->receiving_ = true;
    Pipe& pipe = *self->pipe_;
    Direction& in = pipe.directions[1 - self->side_];

    std::unique_lock lock(pipe.mutex);
    for (;;) {
      if (pipe.endClosed[self->side_]) co_return asio::error::operation_aborted;
      if (!in.frames.empty()) break;
      if (in.senderClosed) co_return asio::error::eof;
      if (auto ec = co_await in.readable.wait(lock)) co_return ec;
      lock.lock();
    }
    QueuedFrame queued = std::move(in.frames.front());
    in.frames.pop_front();
    lock.unlock();
    in.writable.notifyAll();

    if (queued.error) {
      self->close();
      co_return queued.error;
    }
    std::size_t bytes = queued.header.size();
    frame.header = std::move(queued.header);
    frame.payloads.reserve(queued.payloads.size());
    for (std::size_t i = 0; i < queued.payloads.size(); ++i) {
      Payload& staged = queued.payloads[i];
      bytes += staged.size();
      std::span<std::byte> target;
      if (self->target_) target = self->target_(frame.header, i, staged.size());
      if (target.empty()) {
        frame.payloads.push_back(std::move(staged));
        continue;
      }
      if (target.size() != staged.size()) {
        frame.payloads.clear();
        self->close();
        co_return Errc::invalidPayloadTarget;
      }
      std::memcpy(target.data(), staged.bytes().data(), target.size());
      staged = Payload();  // back to the pool now, not at the end of the frame
      frame.payloads.emplace_back(target, nullptr);
    }
    self->bytesReceived_ += bytes;
    co_return std::error_code{};
  }

  void setPayloadTarget(PayloadTarget target) { target_ = std::move(target); }
  void close() { closeEnd(*pipe_, side_); }
  const std::string& remoteAddress() const { return remote_; }
  std::uint64_t bytesSent() const { return bytesSent_; }
  std::uint64_t bytesReceived() const { return bytesReceived_; }

 private:
  // With pipe_->mutex held: why a send cannot go on, if it cannot.
  std::error_code sendError() const {
    if (pipe_->endClosed[side_]) return asio::error::operation_aborted;
    if (pipe_->directions[side_].receiverClosed) return asio::error::broken_pipe;
    return {};
  }

  const std::shared_ptr<Pipe> pipe_;
  const int side_;
  const Limits limits_;
  const std::string remote_;
  PayloadTarget target_;
  detail::FifoGate sendTurn_;  // the owner's io thread only
  bool receiving_ = false;     // the owner's io thread only
  std::atomic<std::uint64_t> bytesSent_{0};
  std::atomic<std::uint64_t> bytesReceived_{0};
};

using InprocLink = detail::SharedStateLink<EndState>;

// A listening transport as the Hub sees it: connectors queue new links here for accept().
struct Listener {
  explicit Listener(const Limits& limits) : limits(limits) {}
  const Limits limits;
  std::uint16_t port = 0;
  std::mutex mutex;
  std::deque<std::shared_ptr<EndState>> pending;  // at most limits.maxPendingHandshakes
  bool closed = false;
  detail::AsyncCondition acceptable;
};

}  // namespace

class Hub {
 public:
  // Registers `listener` on `port` (0: the lowest free port from a rotating start) and sets
  // listener->port. address_in_use when taken.
  std::error_code bind(std::uint16_t port, const std::shared_ptr<Listener>& listener) {
    std::lock_guard lock(mutex_);
    std::erase_if(listeners_, [](const auto& entry) { return entry.second.expired(); });
    if (port == 0) {
      for (int tries = 0; tries < 65535 && port == 0; ++tries) {
        const std::uint16_t candidate = nextPort_;
        nextPort_ = nextPort_ == 65535 ? 1 : nextPort_ + 1;
        if (!listeners_.contains(candidate)) port = candidate;
      }
      if (port == 0) return asio::error::address_in_use;
    } else if (listeners_.contains(port)) {
      return asio::error::address_in_use;
    }
    listener->port = port;
    listeners_[port] = listener;
    return {};
  }

  void unbind(const Listener& listener) {
    std::lock_guard lock(mutex_);
    auto it = listeners_.find(listener.port);
    if (it != listeners_.end() && it->second.lock().get() == &listener) listeners_.erase(it);
  }

  std::shared_ptr<Listener> find(std::uint16_t port) {
    std::lock_guard lock(mutex_);
    auto it = listeners_.find(port);
    return it == listeners_.end() ? nullptr : it->second.lock();
  }

  // A label for the connecting end of a new link, as an ephemeral TCP port would be.
  std::string nextConnectorName() {
    std::lock_guard lock(mutex_);
    return "inproc:" + std::to_string(nextConnector_++);
  }

 private:
  std::mutex mutex_;
  std::map<std::uint16_t, std::weak_ptr<Listener>> listeners_;
  std::uint16_t nextPort_ = 1;
  std::uint64_t nextConnector_ = 32768;
};

namespace {

class TransportState final : public std::enable_shared_from_this<TransportState> {
 public:
  TransportState(std::shared_ptr<Hub> hub, const Options& options)
      : hub_(std::move(hub)), options_(options) {}

  std::error_code listen(const Endpoint& local) {
    auto listener = std::make_shared<Listener>(options_.limits);
    std::lock_guard lock(mutex_);
    if (closed_) return asio::error::operation_aborted;
    if (listener_) return asio::error::already_open;
    if (auto ec = hub_->bind(local.port, listener)) return ec;
    listener_ = std::move(listener);
    return {};
  }

  Endpoint localEndpoint() const {
    std::lock_guard lock(mutex_);
    if (!listener_) return Endpoint{};
    return Endpoint{"inproc", listener_->port};
  }

  static asio::awaitable<LinkResult> accept(std::shared_ptr<TransportState> self) {
    std::shared_ptr<Listener> listener;
    {
      std::lock_guard lock(self->mutex_);
      if (self->closed_) co_return LinkResult{asio::error::operation_aborted, nullptr};
      listener = self->listener_;
    }
    if (!listener) co_return LinkResult{asio::error::invalid_argument, nullptr};
    std::unique_lock lock(listener->mutex);
    for (;;) {
      if (listener->closed) co_return LinkResult{asio::error::operation_aborted, nullptr};
      if (!listener->pending.empty()) break;
      if (auto ec = co_await listener->acceptable.wait(lock)) co_return LinkResult{ec, nullptr};
      lock.lock();
    }
    std::shared_ptr<EndState> end = std::move(listener->pending.front());
    listener->pending.pop_front();
    lock.unlock();
    co_return self->adopt(std::move(end));
  }

  static asio::awaitable<LinkResult> connect(std::shared_ptr<TransportState> self, Endpoint remote,
                                             std::chrono::milliseconds timeout) {
    const Clock::time_point deadline = Clock::now() + timeout;
    asio::steady_timer timer(co_await asio::this_coro::executor);
    std::chrono::milliseconds backoff = kInitialBackoff;
    for (;;) {
      {
        std::lock_guard lock(self->mutex_);
        if (self->closed_) co_return LinkResult{asio::error::operation_aborted, nullptr};
      }
      if (std::shared_ptr<Listener> listener = self->hub_->find(remote.port)) {
        std::unique_lock lock(listener->mutex);
        if (!listener->closed &&
            listener->pending.size() <
                std::max<std::size_t>(listener->limits.maxPendingHandshakes, 1)) {
          auto [mine, theirs] = self->makePipe(*listener, remote);
          listener->pending.push_back(std::move(theirs));
          lock.unlock();
          listener->acceptable.notifyAll();
          co_return self->adopt(std::move(mine));
        }
      }
      // Nobody listens there (or its backlog is full): like a refused TCP connect, try again.
      const Clock::time_point now = Clock::now();
      if (now >= deadline) co_return LinkResult{asio::error::timed_out, nullptr};
      timer.expires_after(std::min<Clock::duration>(backoff, deadline - now));
      co_await timer.async_wait(kUseTuple);
      backoff = std::min(backoff * 2, kMaxBackoff);
    }
  }

  // Any thread; idempotent.
  void close() {
    std::shared_ptr<Listener> listener;
    std::vector<std::weak_ptr<EndState>> links;
    {
      std::lock_guard lock(mutex_);
      if (closed_) return;
      closed_ = true;
      listener = listener_;
      links.swap(links_);
    }
    if (listener) {
      hub_->unbind(*listener);
      std::deque<std::shared_ptr<EndState>> pending;
      {
        std::lock_guard lock(listener->mutex);
        listener->closed = true;
        pending.swap(listener->pending);
      }
      listener->acceptable.notifyAll();
      for (const auto& end : pending) end->close();  // their connectors see eof
    }
    for (const auto& weak : links) {
      if (auto end = weak.lock()) end->close();
    }
  }

  std::string name() const { return "inproc"; }
  void registerMemory(std::span<std::byte> /*memory*/) {}  // nothing to register in-process
  const Limits& limits() const { return options_.limits; }

 private:
  // Both ends of a new link from this transport to `listener`; the first is the connector's.
  std::pair<std::shared_ptr<EndState>, std::shared_ptr<EndState>> makePipe(const Listener& listener,
                                                                           const Endpoint& remote) {
    const Limits& mine = options_.limits;
    const Limits& theirs = listener.limits;
    auto pipe = std::make_shared<Pipe>();
    Direction& toThem = pipe->directions[0];
    toThem.capacity = std::max<std::size_t>(mine.maxInFlightSends, 1);
    toThem.receiverLimits = theirs;
    toThem.pool = std::make_shared<detail::BufferPool>(theirs.maxBufferedBytes);
    Direction& toMe = pipe->directions[1];
    toMe.capacity = std::max<std::size_t>(theirs.maxInFlightSends, 1);
    toMe.receiverLimits = mine;
    toMe.pool = std::make_shared<detail::BufferPool>(mine.maxBufferedBytes);
    return {std::make_shared<EndState>(pipe, 0, mine, Endpoint{"inproc", remote.port}.str()),
            std::make_shared<EndState>(pipe, 1, theirs, hub_->nextConnectorName())};
  }

  LinkResult adopt(std::shared_ptr<EndState> end) {
    std::unique_lock lock(mutex_);
    if (closed_) {
      lock.unlock();
      end->close();
      return LinkResult{asio::error::operation_aborted, nullptr};
    }
    std::erase_if(links_, [](const std::weak_ptr<EndState>& weak) { return weak.expired(); });
    links_.push_back(end);
    return LinkResult{{}, std::make_unique<InprocLink>(std::move(end))};
  }

  const std::shared_ptr<Hub> hub_;
  const Options options_;
  mutable std::mutex mutex_;
  bool closed_ = false;
  std::shared_ptr<Listener> listener_;
  std::vector<std::weak_ptr<EndState>> links_;
};

}  // namespace

std::shared_ptr<Hub> makeHub() { return std::make_shared<Hub>(); }

std::unique_ptr<Transport> makeTransport(asio::io_context& /*io*/, std::shared_ptr<Hub> hub,
                                         const Options& options) {
  GOSSAMER_ENFORCE(hub != nullptr, "inproc::makeTransport needs a Hub (inproc::makeHub())");
  return std::make_unique<detail::SharedStateTransport<TransportState>>(
      std::make_shared<TransportState>(std::move(hub), options));
}

}  // namespace gossamer::net::inproc
