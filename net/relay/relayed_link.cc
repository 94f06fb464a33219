#include "net/relay/relayed_link.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <utility>

#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/dispatch.hpp>
#include <asio/steady_timer.hpp>

#include "engine/base/log.h"
#include "net/errors.h"
#include "net/link_support.h"
#include "net/relay/secure_stream.h"

namespace gossamer::net::relay {
namespace {

using net::detail::kUseTuple;
using net::detail::loadLe;
using net::detail::storeLe;
using Clock = std::chrono::steady_clock;

constexpr std::uint32_t kMagic = 0x314c5247;   // the bytes "GRL1"
constexpr std::size_t kFixedPrefixBytes = 12;  // magic, header bytes, payload count

}  // namespace

struct RelayedStream::State {
  State(const asio::any_io_executor& executor, RelayedStreamOptions o)
      : options(std::move(o)),
        tls(options.client ? SecureStream::Role::client : SecureStream::Role::server, *options.self,
            options.expected),
        arrived(executor, Clock::time_point::max()),
        drained(executor, Clock::time_point::max()),
        pool(std::make_shared<net::detail::BufferPool>(options.limits.maxBufferedBytes)) {}

  RelayedStreamOptions options;
  SecureStream tls;
  net::detail::FifoGate sendTurn;  // sends and flushes take turns: records leave in order
  asio::steady_timer arrived;      // cancelled when plaintext arrives or the stream closes
  asio::steady_timer drained;      // cancelled when the receiver took plaintext
  std::shared_ptr<net::detail::BufferPool> pool;
  PayloadTarget target;
  net::detail::PayloadPlacement placement;
  std::vector<std::byte> plain;  // received plaintext; bytes before `plainRead` are consumed
  std::size_t plainRead = 0;
  std::vector<std::uint64_t> sizes;
  std::vector<std::byte> prefix;
  bool receiving = false;
  bool closed = false;
  std::error_code closeError;
  std::atomic<std::uint64_t> sent{0};
  std::atomic<std::uint64_t> received{0};

  std::size_t available() const { return plain.size() - plainRead; }

  void closeWith(std::error_code reason) {
    if (closed) return;
    closed = true;
    closeError = reason;
    tls.close();
    sendTurn.close();
    pool->close();
    arrived.cancel();
    drained.cancel();
    if (options.onClosed) std::exchange(options.onClosed, {})(reason);
  }

  // Hands the ciphertext made so far to the sender. The caller holds the send turn.
  asio::awaitable<std::error_code> flushHeld() {
    std::vector<std::byte> chunk = tls.takeOutgoing();
    if (chunk.empty()) co_return std::error_code{};
    sent += chunk.size();
    const std::error_code ec = co_await options.sender(std::move(chunk));
    if (ec) closeWith(ec);
    co_return closed ? closeError : std::error_code{};
  }

  // Encrypts `bytes`, handing ciphertext to the sender every kChunkBytes.
  asio::awaitable<std::error_code> writeHeld(std::span<const std::byte> bytes) {
    while (!bytes.empty()) {
      const std::size_t n = std::min(bytes.size(), kChunkBytes);
      if (auto ec = tls.write(bytes.first(n))) {
        closeWith(ec);
        co_return ec;
      }
      bytes = bytes.subspan(n);
      if (n == kChunkBytes)
        if (auto ec = co_await flushHeld()) co_return ec;
    }
    co_return std::error_code{};
  }

  // Waits until `n` bytes of plaintext are here (or the stream closed).
  asio::awaitable<std::error_code> need(std::size_t n) {
    while (available() < n) {
      if (closed) co_return closeError;
      arrived.expires_at(Clock::time_point::max());
      co_await arrived.async_wait(kUseTuple);
    }
    co_return std::error_code{};
  }

  // Moves the next `into.size()` bytes of plaintext into `into`, as they arrive.
  asio::awaitable<std::error_code> readInto(std::span<std::byte> into) {
    while (!into.empty()) {
      if (auto ec = co_await need(1)) co_return ec;
      const std::size_t n = std::min(into.size(), available());
      std::memcpy(into.data(), plain.data() + plainRead, n);
      consume(n);
      into = into.subspan(n);
    }
    co_return std::error_code{};
  }

  void consume(std::size_t n) {
    plainRead += n;
    received += n;
    if (plainRead == plain.size()) {
      plain.clear();
      plainRead = 0;
    }
    drained.cancel();
  }

  asio::awaitable<std::error_code> readFrame(InFrame& frame) {
    if (auto ec = co_await need(kFixedPrefixBytes)) co_return ec;
    const std::byte* fixed = plain.data() + plainRead;
    if (loadLe(fixed, 4) != kMagic) co_return Errc::malformedFrame;
    const std::size_t headerBytes = loadLe(fixed + 4, 4);
    const std::size_t count = loadLe(fixed + 8, 4);
    const Limits& limits = options.limits;
    if (count > limits.maxPayloads) co_return Errc::tooManyPayloads;
    if (headerBytes > limits.maxHeaderBytes || headerBytes > limits.maxFrameBytes)
      co_return Errc::frameTooLarge;
    consume(kFixedPrefixBytes);
    if (auto ec = co_await need(8 * count)) co_return ec;
    sizes.resize(count);
    for (std::size_t i = 0; i < count; ++i) sizes[i] = loadLe(plain.data() + plainRead + 8 * i, 8);
    consume(8 * count);
    if (auto ec = net::detail::checkFrameShape(
            headerBytes, count, [&](std::size_t i) { return sizes[i]; }, limits))
      co_return ec;
    frame.header.resize(headerBytes);
    if (auto ec = co_await readInto(frame.header)) co_return ec;
    if (auto ec = co_await net::detail::placePayloads(target, *pool, sizes, frame, placement))
      co_return ec;
    for (const Payload& payload : frame.payloads)
      if (auto ec = co_await readInto(payload.bytes())) co_return ec;
    co_return std::error_code{};
  }
};

RelayedStream::RelayedStream(std::unique_ptr<State> state) : state_(std::move(state)) {}
RelayedStream::~RelayedStream() = default;

std::shared_ptr<RelayedStream> RelayedStream::make(const asio::any_io_executor& executor,
                                                   RelayedStreamOptions options) {
  return std::shared_ptr<RelayedStream>(
      new RelayedStream(std::make_unique<State>(executor, std::move(options))));
}

void RelayedStream::start() { flushSoon(); }

void RelayedStream::flushSoon() {
  asio::co_spawn(
      state_->arrived.get_executor(),
      [keep = shared_from_this()]() -> asio::awaitable<void> {
        State& s = *keep->state_;
        if (co_await s.sendTurn.enter()) co_return;
        net::detail::FifoGate::Turn turn(s.sendTurn);
        co_await s.flushHeld();
      },
      asio::detached);
}

const std::string& RelayedStream::tlsReason() const { return state_->tls.reason(); }

std::unique_ptr<Link> RelayedStream::link() {
  return std::make_unique<net::detail::SharedStateLink<RelayedStream>>(shared_from_this());
}

asio::awaitable<std::error_code> RelayedStream::deliver(std::span<const std::byte> ciphertext) {
  const std::shared_ptr<RelayedStream> keep = shared_from_this();
  State& s = *state_;
  if (!s.closed && s.available() > kMaxBacklogBytes)
    log::get("net")->debug(
        "relayed stream of {}: {} bytes wait for its receiver; holding the relay's "
        "link until they are read",
        s.options.remote, s.available());
  while (!s.closed && s.available() > kMaxBacklogBytes) {
    s.drained.expires_at(Clock::time_point::max());
    co_await s.drained.async_wait(kUseTuple);
  }
  if (s.closed) co_return s.closeError;
  if (const std::error_code ec = s.tls.feed(ciphertext)) {
    s.closeWith(ec);
    co_return ec;
  }
  std::vector<std::byte> plaintext = s.tls.takeIncoming();
  if (!plaintext.empty()) {
    if (s.plain.empty())
      s.plain = std::move(plaintext);
    else
      s.plain.insert(s.plain.end(), plaintext.begin(), plaintext.end());
    s.arrived.cancel();
  }
  // The handshake's answers (and plaintext held until it ended) go out now.
  if (!s.tls.established() || s.tls.pendingOutgoing()) flushSoon();
  co_return std::error_code{};
}

void RelayedStream::fail(std::error_code reason) { state_->closeWith(reason); }
bool RelayedStream::closed() const { return state_->closed; }

asio::awaitable<std::error_code> RelayedStream::send(std::shared_ptr<RelayedStream> self,
                                                     OutFrame frame) {
  State& s = *self->state_;
  if (auto ec = net::detail::checkFrameShape(frame, s.options.limits)) co_return ec;
  if (s.closed) co_return s.closeError;
  if (auto ec = co_await s.sendTurn.enter()) co_return s.closed ? s.closeError : ec;
  net::detail::FifoGate::Turn turn(s.sendTurn);
  s.prefix.resize(kFixedPrefixBytes + 8 * frame.payloads.size());
  storeLe(s.prefix.data(), kMagic, 4);
  storeLe(s.prefix.data() + 4, frame.header.size(), 4);
  storeLe(s.prefix.data() + 8, frame.payloads.size(), 4);
  for (std::size_t i = 0; i < frame.payloads.size(); ++i)
    storeLe(s.prefix.data() + kFixedPrefixBytes + 8 * i, frame.payloads[i].size(), 8);
  if (auto ec = co_await s.writeHeld(s.prefix)) co_return ec;
  if (auto ec = co_await s.writeHeld(frame.header)) co_return ec;
  for (const auto& payload : frame.payloads)
    if (auto ec = co_await s.writeHeld(payload)) co_return ec;
  co_return co_await s.flushHeld();
}

asio::awaitable<std::error_code> RelayedStream::receive(std::shared_ptr<RelayedStream> self,
                                                        InFrame& frame) {
  State& s = *self->state_;
  if (s.receiving) co_return Errc::receiveInProgress;
  frame.payloads.clear();
  frame.header.clear();
  if (s.closed) co_return s.closeError;
  // A receive that ends unfinished (cancelled) leaves the stream mid-frame: it closes.
  struct Scope {
    State& s;
    bool finished = false;
    ~Scope() {
      s.receiving = false;
      if (!finished) s.closeWith(asio::error::operation_aborted);
    }
  } scope{s};
  s.receiving = true;
  std::error_code ec = co_await s.readFrame(frame);
  scope.finished = true;
  if (ec) {
    frame.payloads.clear();
    if (!s.closed) s.closeWith(ec);
    ec = s.closeError;
  }
  co_return ec;
}

void RelayedStream::setPayloadTarget(PayloadTarget target) { state_->target = std::move(target); }

void RelayedStream::close() {
  asio::dispatch(state_->arrived.get_executor(), [self = shared_from_this()] {
    self->state_->closeWith(asio::error::operation_aborted);
  });
}

const std::string& RelayedStream::remoteAddress() const { return state_->options.remote; }
std::uint64_t RelayedStream::bytesSent() const { return state_->sent.load(); }
std::uint64_t RelayedStream::bytesReceived() const { return state_->received.load(); }

}  // namespace gossamer::net::relay
