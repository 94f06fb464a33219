#include "net/shaped/shaped_transport.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <cstring>
#include <deque>
#include <map>
#include <string>
#include <vector>

#include <asio/any_io_executor.hpp>
#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/error.hpp>
#include <asio/post.hpp>
#include <asio/redirect_error.hpp>
#include <asio/steady_timer.hpp>
#include <asio/this_coro.hpp>
#include <asio/use_awaitable.hpp>

#include "engine/base/enforce.h"
#include "net/errors.h"
#include "net/link_support.h"

namespace gossamer::net::shaped {
namespace {

using asio::awaitable;
using Clock = LinkSchedule::Clock;

// The preface a shaped connector sends first on every inner link: "GSHP", a version byte, a
// reserved byte, the connector's site (uint16, kNoSite when unknown) and its peer index (uint64),
// little-endian, as the header of a frame without payloads.
constexpr std::array<std::byte, 4> kPrefaceMagic = {std::byte{'G'}, std::byte{'S'}, std::byte{'H'},
                                                    std::byte{'P'}};
constexpr std::byte kPrefaceVersion{1};
constexpr std::size_t kPrefaceBytes = 16;
constexpr std::uint16_t kNoSite = 0xFFFF;

using PrefaceBytes = std::array<std::byte, kPrefaceBytes>;

struct Preface {
  std::uint64_t index = 0;
  std::optional<std::size_t> site;
};

PrefaceBytes encodePreface(std::uint64_t index, std::optional<std::size_t> site) {
  PrefaceBytes bytes{};
  std::copy(kPrefaceMagic.begin(), kPrefaceMagic.end(), bytes.begin());
  bytes[4] = kPrefaceVersion;
  const std::uint16_t siteValue =
      site && *site < kNoSite ? static_cast<std::uint16_t>(*site) : kNoSite;
  detail::storeLe(&bytes[6], siteValue, 2);
  detail::storeLe(&bytes[8], index, 8);
  return bytes;
}

std::optional<Preface> decodePreface(const InFrame& frame) {
  if (frame.header.size() != kPrefaceBytes || !frame.payloads.empty() ||
      !std::equal(kPrefaceMagic.begin(), kPrefaceMagic.end(), frame.header.begin()) ||
      frame.header[4] != kPrefaceVersion) {
    return std::nullopt;
  }
  Preface preface{.index = detail::loadLe(&frame.header[8], 8)};
  const auto site = static_cast<std::uint16_t>(detail::loadLe(&frame.header[6], 2));
  if (site != kNoSite) preface.site = site;
  return preface;
}

// Freed frame buffers kept per link for reuse.
constexpr std::size_t kMaxPooledBuffers = 16;
// How often connect re-checks a partition while it waits for it to heal.
constexpr std::chrono::milliseconds kPartitionPoll{10};

// A frame copied at admission, waiting out its latency.
struct DelayedFrame {
  Clock::time_point deliverAt;
  std::unique_ptr<std::byte[]> buffer;
  std::size_t capacity = 0;
  std::size_t headerBytes = 0;
  std::vector<std::size_t> payloadBytes;
  std::size_t bytes = 0;
};

// Everything one shaped link owns. Shared by the ShapedLink handed to the user, its pump
// coroutine and its pending sends, so that destroying the Link while they are suspended is safe:
// the destructor closes the state and the last of them to finish frees it. Except close() and
// the counters, every member is used on the link's io thread only.
// What a link's LinkSchedule is made of: its profile, its seed and the pipe it shares with the
// other links to the same remote.
struct ScheduleSpec {
  LinkProfile profile;
  std::uint64_t seed = 0;
  std::shared_ptr<SharedCapacity> capacity;
};

class LinkState final : public std::enable_shared_from_this<LinkState> {
 public:
  LinkState(asio::any_io_executor executor, std::unique_ptr<Link> inner, ScheduleSpec spec,
            std::shared_ptr<Partitions> partitions, std::size_t selfIndex,
            std::optional<std::size_t> remoteIndex, const Limits& limits,
            std::size_t maxDelayedBytes, Clock::duration timerLead)
      : executor_(std::move(executor)),
        inner_(std::move(inner)),
        partitions_(std::move(partitions)),
        selfIndex_(selfIndex),
        remoteIndex_(remoteIndex),
        limits_(limits),
        maxInFlight_(std::max<std::size_t>(1, limits.maxInFlightSends)),
        maxDelayedBytes_(maxDelayedBytes),
        timerLead_(timerLead),
        pumpTimer_(executor_),
        spec_(std::move(spec)) {
    validateLinkProfile(spec_.profile, "shaped link");
  }

  // Callable from any thread.
  bool shaping() const { return shaping_.load(); }
  // From now on, frames go through the schedule and the delay line, delivered by the pump. Frames
  // passed straight through before still arrive first: the inner link delivers in the order its
  // sends started. On the link's io thread (or before its first use); idempotent.
  void startShaping() {
    if (shaping()) return;
    schedule_.emplace(spec_.profile, spec_.seed, spec_.capacity);
    shaping_ = true;
    asio::co_spawn(executor_, pump(shared_from_this()), asio::detached);
  }
  Link& inner() { return *inner_; }
  std::uint64_t bytesSent() const { return bytesSent_.load(std::memory_order_relaxed); }
  std::uint64_t bytesReceived() const { return bytesReceived_.load(std::memory_order_relaxed); }

  static awaitable<std::error_code> send(std::shared_ptr<LinkState> self, OutFrame frame);
  static awaitable<std::error_code> receive(std::shared_ptr<LinkState> self, InFrame& frame);
  // Hands delayed frames to the inner link when their time comes; runs while the link is open.
  static awaitable<void> pump(std::shared_ptr<LinkState> self);

  // Callable from any thread; idempotent.
  void close() {
    if (closed_.exchange(true)) return;
    inner_->close();
    // A pass-through link has no timers or queue to wake; a shaping one is woken on its thread.
    if (shaping()) asio::post(executor_, [self = shared_from_this()] { self->shutdown(); });
  }

 private:
  struct Waiter {
    asio::steady_timer* timer;
    std::size_t bytes;
  };

  bool done() const { return closed_.load() || error_; }
  std::error_code failure() const {
    return closed_.load() ? std::error_code(asio::error::operation_aborted) : error_;
  }
  bool blocked() const {
    return partitions_ != nullptr && remoteIndex_.has_value() &&
           partitions_->blocked(selfIndex_, *remoteIndex_);
  }
  // The partitions' run-time loss on this link, on top of the profile's.
  double runtimeLoss() const {
    if (partitions_ == nullptr || !remoteIndex_) return 0;
    return partitions_->loss(selfIndex_, *remoteIndex_);
  }
  bool admissible(std::size_t bytes) const {
    return sending_ < maxInFlight_ &&
           (delayedBytes_ == 0 || delayedBytes_ + bytes <= maxDelayedBytes_);
  }
  // Lets the first waiting send in once it fits.
  void wakeNextWaiter() {
    if (!waiters_.empty() && admissible(waiters_.front().bytes)) waiters_.front().timer->cancel();
  }
  // Wakes every suspended operation so that it sees done().
  void wakeAll() {
    for (Waiter& waiter : waiters_) waiter.timer->cancel();
    for (asio::steady_timer* timer : sleepers_) timer->cancel();
    pumpTimer_.cancel();
  }
  void shutdown() {
    wakeAll();
    for (DelayedFrame& frame : line_) release(std::move(frame));
    line_.clear();
    delayedBytes_ = 0;
  }

  awaitable<bool> waitForAdmission(std::size_t bytes);
  awaitable<void> sleepUntil(Clock::time_point until);
  void enqueue(const OutFrame& frame, std::size_t bytes, Clock::time_point deliverAt);
  void release(DelayedFrame&& frame);

  asio::any_io_executor executor_;
  std::unique_ptr<Link> inner_;
  std::optional<LinkSchedule> schedule_;  // empty: pass-through
  std::shared_ptr<Partitions> partitions_;
  std::size_t selfIndex_;
  std::optional<std::size_t> remoteIndex_;
  Limits limits_;
  std::size_t maxInFlight_;
  std::size_t maxDelayedBytes_;
  Clock::duration timerLead_;

  std::atomic<bool> closed_{false};
  std::error_code error_;  // the inner link's send failure, reported to every later send
  std::atomic<std::uint64_t> bytesSent_{0};
  std::atomic<std::uint64_t> bytesReceived_{0};

  std::size_t sending_ = 0;                    // admitted sends not yet completed
  std::deque<Waiter> waiters_;                 // sends waiting for admission, in start order
  std::vector<asio::steady_timer*> sleepers_;  // sends waiting for their serialization to start
  std::deque<DelayedFrame> line_;              // copied frames, in send order
  std::size_t delayedBytes_ = 0;               // bytes in line_ plus the frame the pump is sending
  asio::steady_timer pumpTimer_;
  std::vector<DelayedFrame> pool_;  // freed buffers
  ScheduleSpec spec_;
  std::atomic<bool> shaping_{false};  // schedule_ is set; stays set
};

awaitable<std::error_code> LinkState::send(std::shared_ptr<LinkState> self, OutFrame frame) {
  if (self->done()) co_return self->failure();
  const Limits& limits = self->limits_;
  if (frame.payloads.size() > limits.maxPayloads) co_return make_error_code(Errc::tooManyPayloads);
  if (frame.header.size() > limits.maxHeaderBytes) co_return make_error_code(Errc::frameTooLarge);
  std::size_t bytes = frame.header.size();
  for (const auto& payload : frame.payloads) bytes += payload.size();
  if (bytes > limits.maxFrameBytes) co_return make_error_code(Errc::frameTooLarge);

  if (!self->shaping()) {
    if (self->blocked()) {
      // Dropped by the partition; yield once so that a sender looping on a cut link cannot
      // starve the io thread.
      co_await asio::post(self->executor_, asio::use_awaitable);
      self->bytesSent_ += bytes;
      co_return std::error_code();
    }
    if (self->runtimeLoss() == 0) {
      const std::error_code error = co_await self->inner_->send(std::move(frame));
      if (!error) self->bytesSent_ += bytes;
      co_return error;
    }
    // Run-time loss needs the schedule (retransmission delays, or drops): shape from now on.
    self->startShaping();
  }

  if (!self->waiters_.empty() || !self->admissible(bytes)) {
    if (!co_await self->waitForAdmission(bytes)) co_return self->failure();
  }
  ++self->sending_;
  const LinkSchedule::Slot slot = self->schedule_->admit(Clock::now(), bytes, self->runtimeLoss());
  if (!slot.dropped && !self->blocked()) self->enqueue(frame, bytes, slot.deliverAt);
  self->wakeNextWaiter();
  // The send completes when its frame starts serializing: the sender is held to the link's
  // rate, yet back-to-back sends never leave the link idle (a transmit queue one frame deep).
  // Always waits on a timer, even when the slot is already due, so that every send yields.
  co_await self->sleepUntil(slot.start);
  --self->sending_;
  self->wakeNextWaiter();
  if (self->done()) co_return self->failure();
  self->bytesSent_ += bytes;
  co_return std::error_code();
}

awaitable<std::error_code> LinkState::receive(std::shared_ptr<LinkState> self, InFrame& frame) {
  const std::error_code error = co_await self->inner_->receive(frame);
  if (!error) {
    std::uint64_t bytes = frame.header.size();
    for (const Payload& payload : frame.payloads) bytes += payload.size();
    self->bytesReceived_ += bytes;
  }
  co_return error;
}

awaitable<void> LinkState::pump(std::shared_ptr<LinkState> self) {
  while (!self->done()) {
    const Clock::time_point now = Clock::now();
    if (self->line_.empty() || self->line_.front().deliverAt - self->timerLead_ > now) {
      // Sleep until the head is due, or until a frame comes; the timer wakes `timerLead_`
      // early, since a timer wake-up is late by tens of microseconds on a loaded machine.
      self->pumpTimer_.expires_at(self->line_.empty()
                                      ? Clock::time_point::max()
                                      : self->line_.front().deliverAt - self->timerLead_);
      std::error_code ignored;
      co_await self->pumpTimer_.async_wait(asio::redirect_error(asio::use_awaitable, ignored));
      continue;
    }
    if (self->line_.front().deliverAt > now) {
      // Within the lead: yield to the io loop until the head is due (never deliver early).
      co_await asio::post(self->executor_, asio::use_awaitable);
      continue;
    }
    DelayedFrame frame = std::move(self->line_.front());
    self->line_.pop_front();
    if (!self->blocked()) {
      OutFrame out;
      const std::byte* cursor = frame.buffer.get();
      out.header = std::span<const std::byte>(cursor, frame.headerBytes);
      cursor += frame.headerBytes;
      out.payloads.reserve(frame.payloadBytes.size());
      for (std::size_t size : frame.payloadBytes) {
        out.payloads.emplace_back(cursor, size);
        cursor += size;
      }
      const std::error_code error = co_await self->inner_->send(std::move(out));
      if (error && !self->error_) {
        self->error_ = error;
        self->wakeAll();
      }
    }
    if (!self->closed_.load()) self->delayedBytes_ -= frame.bytes;  // shutdown() zeroed it
    self->release(std::move(frame));
    self->wakeNextWaiter();
  }
}

awaitable<bool> LinkState::waitForAdmission(std::size_t bytes) {
  asio::steady_timer timer(executor_, Clock::time_point::max());
  waiters_.push_back(Waiter{&timer, bytes});
  for (;;) {
    if (done()) break;
    if (waiters_.front().timer == &timer && admissible(bytes)) {
      waiters_.pop_front();
      co_return true;
    }
    std::error_code ignored;
    co_await timer.async_wait(asio::redirect_error(asio::use_awaitable, ignored));
  }
  waiters_.erase(std::find_if(waiters_.begin(), waiters_.end(),
                              [&timer](const Waiter& waiter) { return waiter.timer == &timer; }));
  wakeNextWaiter();
  co_return false;
}

awaitable<void> LinkState::sleepUntil(Clock::time_point until) {
  asio::steady_timer timer(executor_, until);
  sleepers_.push_back(&timer);
  if (!done()) {
    std::error_code ignored;
    co_await timer.async_wait(asio::redirect_error(asio::use_awaitable, ignored));
  }
  sleepers_.erase(std::find(sleepers_.begin(), sleepers_.end(), &timer));
}

void LinkState::enqueue(const OutFrame& frame, std::size_t bytes, Clock::time_point deliverAt) {
  DelayedFrame delayed;
  // The smallest pooled buffer that fits, else a new one (not zero-filled: it is overwritten).
  auto best = pool_.end();
  for (auto it = pool_.begin(); it != pool_.end(); ++it) {
    if (it->capacity >= bytes && (best == pool_.end() || it->capacity < best->capacity)) best = it;
  }
  if (best != pool_.end()) {
    delayed.buffer = std::move(best->buffer);
    delayed.capacity = best->capacity;
    pool_.erase(best);
  } else {
    delayed.capacity = std::max<std::size_t>(bytes, 1);
    delayed.buffer = std::make_unique_for_overwrite<std::byte[]>(delayed.capacity);
  }
  std::byte* cursor = delayed.buffer.get();
  if (!frame.header.empty()) std::memcpy(cursor, frame.header.data(), frame.header.size());
  cursor += frame.header.size();
  delayed.headerBytes = frame.header.size();
  delayed.payloadBytes.reserve(frame.payloads.size());
  for (const auto& payload : frame.payloads) {
    if (!payload.empty()) std::memcpy(cursor, payload.data(), payload.size());
    cursor += payload.size();
    delayed.payloadBytes.push_back(payload.size());
  }
  delayed.bytes = bytes;
  delayed.deliverAt = deliverAt;
  const bool wasEmpty = line_.empty();
  line_.push_back(std::move(delayed));
  delayedBytes_ += bytes;
  if (wasEmpty) pumpTimer_.cancel();  // the pump sleeps until a frame comes
}

void LinkState::release(DelayedFrame&& frame) {
  if (frame.buffer == nullptr || closed_.load()) return;
  std::size_t pooledBytes = frame.capacity;
  for (const DelayedFrame& pooled : pool_) pooledBytes += pooled.capacity;
  if (pooledBytes > maxDelayedBytes_) return;
  if (pool_.size() == kMaxPooledBuffers) {
    // Keep the larger buffers: they are the expensive ones to allocate.
    auto smallest = std::min_element(
        pool_.begin(), pool_.end(),
        [](const DelayedFrame& a, const DelayedFrame& b) { return a.capacity < b.capacity; });
    if (smallest->capacity >= frame.capacity) return;
    pool_.erase(smallest);
  }
  frame.payloadBytes.clear();
  pool_.push_back(std::move(frame));
}

class ShapedLink final : public Link {
 public:
  explicit ShapedLink(std::shared_ptr<LinkState> state) : state_(std::move(state)) {}
  ~ShapedLink() override { state_->close(); }
  ShapedLink(const ShapedLink&) = delete;
  ShapedLink& operator=(const ShapedLink&) = delete;

  awaitable<std::error_code> send(OutFrame frame) override {
    return LinkState::send(state_, std::move(frame));
  }
  awaitable<std::error_code> receive(InFrame& frame) override {
    return LinkState::receive(state_, frame);
  }
  void setPayloadTarget(PayloadTarget target) override {
    state_->inner().setPayloadTarget(std::move(target));
  }
  void close() override { state_->close(); }
  std::string remoteAddress() const override { return state_->inner().remoteAddress(); }
  std::uint64_t bytesSent() const override { return state_->bytesSent(); }
  std::uint64_t bytesReceived() const override { return state_->bytesReceived(); }

 private:
  std::shared_ptr<LinkState> state_;
};

class ShapedTransport final : public Transport {
 public:
  ShapedTransport(std::unique_ptr<Transport> inner, Options options,
                  std::shared_ptr<Partitions> partitions)
      : inner_(std::move(inner)), options_(std::move(options)), partitions_(std::move(partitions)) {
    GOSSAMER_ENFORCE(inner_ != nullptr, "shaped::makeTransport needs an inner transport");
  }
  ~ShapedTransport() override { close(); }

  std::string name() const override { return "shaped(" + inner_->name() + ")"; }

  std::error_code listen(const Endpoint& local) override {
    const std::error_code error = inner_->listen(local);
    if (!error) listening_ = true;
    return error;
  }
  Endpoint localEndpoint() const override { return inner_->localEndpoint(); }

  awaitable<LinkResult> accept() override;
  awaitable<LinkResult> connect(const Endpoint& remote, std::chrono::milliseconds timeout) override;

  void registerMemory(std::span<std::byte> memory) override { inner_->registerMemory(memory); }

  void close() override {
    if (closed_.exchange(true)) return;
    inner_->close();
    std::vector<std::weak_ptr<LinkState>> links;
    {
      std::lock_guard lock(mutex_);
      links.swap(links_);
    }
    for (const auto& weak : links) {
      if (const std::shared_ptr<LinkState> link = weak.lock()) link->close();
    }
  }

  const Limits& limits() const override { return inner_->limits(); }

 private:
  // This peer's site: its endpoint's assignment once listening, else its index's.
  std::size_t selfSite() const {
    if (listening_) {
      if (auto site = options_.profile.siteOfEndpoint(inner_->localEndpoint())) return *site;
    }
    return options_.profile.siteOfPeer(options_.selfIndex);
  }

  std::unique_ptr<Link> wrap(const asio::any_io_executor& executor, std::unique_ptr<Link> inner,
                             std::optional<std::size_t> remoteIndex,
                             std::optional<std::size_t> remoteSite, bool accepted);

  std::unique_ptr<Transport> inner_;
  Options options_;
  std::shared_ptr<Partitions> partitions_;
  bool listening_ = false;
  std::atomic<bool> closed_{false};
  std::mutex mutex_;
  std::vector<std::weak_ptr<LinkState>> links_;  // to close them with the transport
  std::map<std::pair<std::uint64_t, bool>, std::uint64_t> linkOrdinals_;  // per-link seeds
  CapacityRegistry capacities_;  // the pipe of each remote, by index
};

std::unique_ptr<Link> ShapedTransport::wrap(const asio::any_io_executor& executor,
                                            std::unique_ptr<Link> inner,
                                            std::optional<std::size_t> remoteIndex,
                                            std::optional<std::size_t> remoteSite, bool accepted) {
  const LinkProfile profile = remoteSite && *remoteSite < options_.profile.siteCount()
                                  ? options_.profile.link(selfSite(), *remoteSite)
                                  : LinkProfile{};
  const std::uint64_t remoteKey = remoteIndex ? *remoteIndex : ~std::uint64_t{0};
  std::uint64_t seed = 0;
  std::shared_ptr<LinkState> state;
  {
    std::lock_guard lock(mutex_);
    const std::uint64_t ordinal = linkOrdinals_[{remoteKey, accepted}]++;
    seed = mixSeed(mixSeed(mixSeed(options_.seed, options_.selfIndex), remoteKey),
                   ordinal * 2 + (accepted ? 1 : 0));
    // Unknown remotes get a pipe per link.
    std::shared_ptr<SharedCapacity> capacity =
        remoteIndex ? capacities_.of(remoteKey, profile.bandwidthBitsPerSecond)
                    : CapacityRegistry().of(0, profile.bandwidthBitsPerSecond);
    state = std::make_shared<LinkState>(
        executor, std::move(inner), ScheduleSpec{profile, seed, std::move(capacity)}, partitions_,
        options_.selfIndex, remoteIndex, inner_->limits(), options_.maxDelayedBytes,
        options_.timerLead);
    std::erase_if(links_, [](const std::weak_ptr<LinkState>& weak) { return weak.expired(); });
    links_.push_back(state);
  }
  if (profile.shapes()) state->startShaping();
  if (closed_.load()) state->close();
  return std::make_unique<ShapedLink>(std::move(state));
}

awaitable<LinkResult> ShapedTransport::accept() {
  const asio::any_io_executor executor = co_await asio::this_coro::executor;
  LinkResult result = co_await inner_->accept();
  if (result.error) co_return result;

  // Read the preface; a connector that stays silent is cut off after prefaceTimeout by closing
  // its link, which completes the pending receive (no reliance on per-operation cancellation).
  struct Watch {
    bool done = false;
    bool fired = false;
    Link* link = nullptr;
  };
  auto watch = std::make_shared<Watch>();
  watch->link = result.link.get();
  asio::steady_timer timer(executor, options_.prefaceTimeout);
  timer.async_wait([watch](std::error_code error) {
    if (!error && !watch->done) {
      watch->fired = true;
      watch->link->close();
    }
  });
  InFrame frame;
  std::error_code error = co_await result.link->receive(frame);
  watch->done = true;
  timer.cancel();
  if (watch->fired) error = make_error_code(Errc::handshakeTimeout);
  std::optional<Preface> preface;
  if (!error) {
    preface = decodePreface(frame);
    if (!preface) error = make_error_code(Errc::malformedFrame);
  }
  if (error) {
    result.link->close();
    co_return LinkResult{error, nullptr};
  }
  const std::size_t remoteIndex = static_cast<std::size_t>(preface->index);
  const std::size_t remoteSite = preface->site && *preface->site < options_.profile.siteCount()
                                     ? *preface->site
                                     : options_.profile.siteOfPeer(remoteIndex);
  co_return LinkResult{{}, wrap(executor, std::move(result.link), remoteIndex, remoteSite, true)};
}

awaitable<LinkResult> ShapedTransport::connect(const Endpoint& remote,
                                               std::chrono::milliseconds timeout) {
  const Endpoint target = remote;
  const asio::any_io_executor executor = co_await asio::this_coro::executor;
  const Clock::time_point deadline = Clock::now() + timeout;
  const std::optional<std::size_t> remoteIndex =
      options_.indexOf ? options_.indexOf(target) : std::nullopt;

  // A partitioned pair behaves like a black hole: connect gets no answer until its timeout, and
  // goes ahead if the partition heals in time.
  if (remoteIndex && partitions_) {
    asio::steady_timer timer(executor);
    while (partitions_->blocked(options_.selfIndex, *remoteIndex)) {
      const Clock::time_point now = Clock::now();
      if (now >= deadline) co_return LinkResult{make_error_code(Errc::partitioned), nullptr};
      timer.expires_at(std::min(deadline, now + Clock::duration(kPartitionPoll)));
      std::error_code ignored;
      co_await timer.async_wait(asio::redirect_error(asio::use_awaitable, ignored));
      if (closed_.load()) co_return LinkResult{asio::error::operation_aborted, nullptr};
    }
  }

  const auto remaining =
      std::max(std::chrono::milliseconds(0),
               std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()));
  LinkResult result = co_await inner_->connect(target, remaining);
  if (result.error) co_return result;

  const PrefaceBytes preface = encodePreface(options_.selfIndex, selfSite());
  const std::error_code error = co_await result.link->send(OutFrame(preface));
  if (error) {
    result.link->close();
    co_return LinkResult{error, nullptr};
  }
  std::optional<std::size_t> remoteSite = options_.profile.siteOfEndpoint(target);
  if (!remoteSite && remoteIndex) remoteSite = options_.profile.siteOfPeer(*remoteIndex);
  co_return LinkResult{{}, wrap(executor, std::move(result.link), remoteIndex, remoteSite, false)};
}

}  // namespace

std::unique_ptr<Transport> makeTransport(std::unique_ptr<Transport> inner, Options options,
                                         std::shared_ptr<Partitions> partitions) {
  return std::make_unique<ShapedTransport>(std::move(inner), std::move(options),
                                           std::move(partitions));
}

}  // namespace gossamer::net::shaped
