// The link of the tcp backend (tcp_transport.cc makes them): one connection, plaintext or TLS,
// that sends and receives the frames of tcp_transport.h's wire format. Internal to net/tcp.
#pragma once

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <asio/co_spawn.hpp>
#include <asio/completion_condition.hpp>
#include <asio/detached.hpp>
#include <asio/dispatch.hpp>
#include <asio/ip/tcp.hpp>
#include <asio/read.hpp>
#include <asio/steady_timer.hpp>
#include <asio/write.hpp>

#include "engine/base/log.h"
#include "net/errors.h"
#include "net/link_support.h"
#include "net/tcp/tls_stream.h"

namespace gossamer::net::tcp::detail {

using Tcp = asio::ip::tcp;
using Clock = std::chrono::steady_clock;
using net::detail::kUseTuple;
using net::detail::loadLe;
using net::detail::storeLe;

constexpr std::uint32_t kMagic = 0x314d5347;   // the bytes "GSM1"
// The first byte of a TLS record that opens a connection: a handshake (a ClientHello) or an
// alert (a TLS listener refusing a plaintext remote, tls.cc); the second is the major version 3.
constexpr std::uint8_t kTlsHandshake = 0x16;
constexpr std::uint8_t kTlsAlert = 0x15;
constexpr std::uint8_t kTlsMajorVersion = 0x03;
constexpr std::size_t kFixedPrefixBytes = 12;  // magic, header bytes, payload count
// Reads of less than this go through the read-ahead buffer; larger ones go straight to their
// destination.
constexpr std::size_t kReadAheadBytes = 64 * 1024;

// Asio's transfer_all() hands at most 64 KiB to each read_some/write_some, which costs a
// syscall (and often a reactor round) per 64 KiB of a bulk payload. This one lets each call move
// as much as the kernel takes, like a plain blocking send()/recv() loop.
inline std::size_t transferAllUnchunked(const std::error_code& ec, std::size_t /*transferred*/) {
  return ec ? 0 : std::size_t(1) << 40;
}

inline std::string endpointText(const Tcp::endpoint& endpoint) {
  return Endpoint{endpoint.address().to_string(), endpoint.port()}.str();
}

// Errors after which connect tries again (the listener may not be up yet, or be overloaded).
inline bool retryable(const std::error_code& ec) {
  return ec == asio::error::connection_refused || ec == asio::error::connection_reset ||
         ec == asio::error::connection_aborted || ec == asio::error::try_again ||
         ec == asio::error::timed_out || ec == asio::error::host_unreachable ||
         ec == asio::error::network_unreachable;
}

// Which end of the connection a link is (the TLS handshake's roles).
enum class Role { client, server };

// The byte stream under a link: the socket itself, or a TLS stream over it.
template <bool kTls>
using StreamOf = std::conditional_t<kTls, tls::Stream, Tcp::socket>;

// One connection (over TLS when kTls). Lives in a shared_ptr so that a close() posted from another
// thread, and the coroutines of send and receive, keep it alive; all members are used on the io
// thread only, except the byte counters. A TLS link starts its handshake in the background as
// soon as it is made (accept() and connect() never wait on it), and its first send or receive
// waits for it to end; a failed handshake closes the link with its error.
template <bool kTls>
class LinkState final : public std::enable_shared_from_this<LinkState<kTls>>,
                        public net::detail::FrameReceiver<LinkState<kTls>> {
 public:
  using Stream = StreamOf<kTls>;

  LinkState(Tcp::socket socket, const Limits& limits, std::string remote, Role role,
            std::shared_ptr<TlsContext> tlsContext)
      : stream_(open(std::move(socket), tlsContext)),
        limits_(limits),
        remote_(std::move(remote)),
        role_(role),
        tlsContext_(std::move(tlsContext)),
        secured_(stream_.get_executor(), asio::steady_timer::time_point::max()),
        pool_(std::make_shared<net::detail::BufferPool>(limits.maxBufferedBytes)),
        readAhead_(kReadAheadBytes) {}

  static asio::awaitable<std::error_code> send(std::shared_ptr<LinkState> self, OutFrame frame) {
    if (auto ec = net::detail::checkFrameShape(frame, self->limits_)) co_return ec;
    if (frame.header.size() > UINT32_MAX) co_return Errc::frameTooLarge;  // the prefix's u32
    if (frame.payloads.size() > UINT32_MAX) co_return Errc::tooManyPayloads;
    if (self->closed_) co_return self->closeError_;
    if (auto ec = co_await self->secure()) co_return ec;
    if (auto ec = co_await self->sendTurn_.enter())
      co_return self->closed_ ? self->closeError_ : ec;
    net::detail::FifoGate::Turn turn(self->sendTurn_);
    if (self->closed_) co_return self->closeError_;

    std::vector<std::byte>& prefix = self->txPrefix_;
    prefix.resize(kFixedPrefixBytes + 8 * frame.payloads.size());
    storeLe(prefix.data(), kMagic, 4);
    storeLe(prefix.data() + 4, frame.header.size(), 4);
    storeLe(prefix.data() + 8, frame.payloads.size(), 4);
    std::vector<asio::const_buffer>& buffers = self->txBuffers_;
    buffers.clear();
    buffers.emplace_back(prefix.data(), prefix.size());
    buffers.emplace_back(frame.header.data(), frame.header.size());
    for (std::size_t i = 0; i < frame.payloads.size(); ++i) {
      storeLe(prefix.data() + kFixedPrefixBytes + 8 * i, frame.payloads[i].size(), 8);
      buffers.emplace_back(frame.payloads[i].data(), frame.payloads[i].size());
    }
    // Over TLS the prefix, the header and small payloads are gathered into one record, and large
    // payloads are encrypted straight from the caller's buffers.
    auto [ec, written] = co_await self->writeAll(std::span<const asio::const_buffer>(buffers));
    self->bytesSent_ += written;
    // Part of the frame may be out: the stream is unusable. When the link was closed meanwhile,
    // the write's own error (operation_aborted, or bad_descriptor between two writes of the
    // composed operation) says less than why it was closed.
    if (ec) ec = self->failWith(ec);
    co_return ec;
  }

  // Io thread: runs the TLS handshake now, on its own (see the class comment).
  static void startHandshake(std::shared_ptr<LinkState> self) {
    auto executor = self->stream_.get_executor();
    asio::co_spawn(
        executor,
        [self = std::move(self)]() -> asio::awaitable<void> { co_await self->secure(); },
        asio::detached);
  }

  void setPayloadTarget(PayloadTarget target) { target_ = std::move(target); }

  // Any thread; runs inline on the io thread.
  void close() {
    asio::dispatch(stream_.get_executor(), [self = this->shared_from_this()] {
      self->closeWith(asio::error::operation_aborted);
    });
  }

  // Io thread. The first call closes the socket (aborting pending reads and writes and a TLS
  // handshake; no TLS close_notify is sent, the remote reads eof) and fails later operations
  // with `reason`.
  void closeWith(std::error_code reason) {
    if (closed_) return;
    closed_ = true;
    closeError_ = reason;
    std::error_code ignored;
    socket().shutdown(Tcp::socket::shutdown_both, ignored);
    socket().close(ignored);
    secured_.cancel();
    sendTurn_.close();
    pool_->close();
  }

  // Io thread. Closes the link after an operation failed with `ec`; returns what the operation
  // reports: `ec`, or why the link was closed if that happened first.
  std::error_code failWith(std::error_code ec) {
    if (closed_) return closeError_;
    closeWith(ec);
    return ec;
  }

  const std::string& remoteAddress() const { return remote_; }
  std::uint64_t bytesSent() const { return bytesSent_; }
  std::uint64_t bytesReceived() const { return bytesReceived_; }

 private:
  friend class net::detail::FrameReceiver<LinkState>;

  static Stream open(Tcp::socket socket, const std::shared_ptr<TlsContext>& tlsContext) {
    if constexpr (kTls) {
      return Stream(std::move(socket), *tlsContext);
    } else {
      return socket;
    }
  }

  Tcp::socket& socket() {
    if constexpr (kTls) {
      return stream_.socket();
    } else {
      return stream_;
    }
  }

  // Runs the TLS handshake on first use, once; a plaintext link is always ready. Returns why the
  // link cannot carry frames (after closing it), or nothing.
  asio::awaitable<std::error_code> secure() {
    if constexpr (kTls) {
      while (!handshakeDone_) {
        if (closed_) co_return closeError_;
        if (handshakeRunning_) {
          co_await secured_.async_wait(kUseTuple);  // cancelled when it ends
          continue;
        }
        handshakeRunning_ = true;
        const std::error_code ec = co_await tls::handshake(stream_, role_ == Role::client, remote_);
        handshakeRunning_ = false;
        handshakeDone_ = !ec;
        secured_.cancel();
        if (ec) co_return failWith(ec);
      }
      if (closed_) co_return closeError_;
    }
    co_return std::error_code{};
  }

  // Why a prefix whose magic is wrong is not a frame.
  // True, with a warning, when the first bytes a remote sent to this plaintext link are a TLS
  // record (its ClientHello, or a TLS listener's alert: tls.cc).
  bool speaksTls(std::span<const std::byte> opening) const {
    if (kTls || opening.size() < 2) return false;
    const auto first = static_cast<std::uint8_t>(opening[0]);
    if ((first != kTlsHandshake && first != kTlsAlert) ||
        static_cast<std::uint8_t>(opening[1]) != kTlsMajorVersion)
      return false;
    log::get("net")->warn(
        "the peer at {} speaks TLS; start both with or without --insecure-plaintext", remote_);
    return true;
  }

  asio::awaitable<std::error_code> readFrame(InFrame& frame) {
    if (auto ec = co_await secure()) co_return ec;
    std::array<std::byte, kFixedPrefixBytes> fixed;
    const bool opening = bytesReceived_ == 0;
    if (auto ec = co_await readExact(fixed)) {
      // A TLS listener's alert is shorter than a prefix; readExact left it in the read-ahead.
      if (opening && speaksTls(std::span(readAhead_).first(aheadEnd_))) co_return Errc::peerSpeaksTls;
      co_return ec;
    }
    if (loadLe(fixed.data(), 4) != kMagic)
      co_return opening && speaksTls(fixed) ? Errc::peerSpeaksTls : Errc::malformedFrame;
    const std::size_t headerBytes = loadLe(fixed.data() + 4, 4);
    const std::size_t count = loadLe(fixed.data() + 8, 4);
    // Bound the length table and the header before reading (and allocating) them.
    if (count > limits_.maxPayloads) co_return Errc::tooManyPayloads;
    if (headerBytes > limits_.maxHeaderBytes || headerBytes > limits_.maxFrameBytes)
      co_return Errc::frameTooLarge;
    lengthBytes_.resize(8 * count);
    if (auto ec = co_await readExact(lengthBytes_)) co_return ec;
    sizes_.resize(count);
    for (std::size_t i = 0; i < count; ++i) sizes_[i] = loadLe(lengthBytes_.data() + 8 * i, 8);
    if (auto ec = net::detail::checkFrameShape(
            headerBytes, count, [&](std::size_t i) { return sizes_[i]; }, limits_))
      co_return ec;

    frame.header.resize(headerBytes);
    if (auto ec = co_await readExact(frame.header)) co_return ec;

    // Where each payload goes: the caller's buffer, or the pool (waiting, reading nothing, while
    // the receiver holds the pool's bound).
    if (auto ec = co_await net::detail::placePayloads(target_, *pool_, sizes_, frame, placement_))
      co_return ec;
    for (const Payload& payload : frame.payloads) {
      if (auto ec = co_await readExact(payload.bytes())) co_return ec;
    }
    co_return std::error_code{};
  }

  // Reads at least `atLeast` bytes into `into` (the TLS stream or the socket); returns the error
  // that stopped it short and the bytes read.
  asio::awaitable<std::pair<std::error_code, std::size_t>> readAtLeast(std::span<std::byte> into,
                                                                       std::size_t atLeast) {
    if constexpr (kTls) {
      auto [ec, read] = co_await stream_.read(into, atLeast);
      co_return std::pair{tls::afterHandshake(ec), read};
    } else {
      auto [ec, read] =
          atLeast == into.size()
              ? co_await asio::async_read(stream_, asio::buffer(into.data(), into.size()),
                                          transferAllUnchunked, kUseTuple)
              : co_await asio::async_read(stream_, asio::buffer(into.data(), into.size()),
                                          asio::transfer_at_least(atLeast), kUseTuple);
      co_return std::pair{ec, read};
    }
  }

  // Writes all of `buffers` (the TLS stream encrypts them); returns the error and the bytes
  // taken.
  asio::awaitable<std::pair<std::error_code, std::size_t>> writeAll(
      std::span<const asio::const_buffer> buffers) {
    if constexpr (kTls) {
      auto [ec, written] = co_await stream_.write(buffers);
      co_return std::pair{tls::afterHandshake(ec), written};
    } else {
      auto [ec, written] =
          co_await asio::async_write(stream_, buffers, transferAllUnchunked, kUseTuple);
      co_return std::pair{ec, written};
    }
  }

  // Fills `out` from the read-ahead buffer, then from the socket.
  asio::awaitable<std::error_code> readExact(std::span<std::byte> out) {
    const std::size_t buffered = std::min(out.size(), aheadEnd_ - aheadBegin_);
    if (buffered > 0) {
      std::memcpy(out.data(), readAhead_.data() + aheadBegin_, buffered);
      aheadBegin_ += buffered;
      out = out.subspan(buffered);
    }
    if (out.empty()) co_return std::error_code{};
    if (out.size() >= readAhead_.size()) {
      auto [ec, read] = co_await readAtLeast(out, out.size());
      bytesReceived_ += read;
      co_return ec;
    }
    aheadBegin_ = aheadEnd_ = 0;
    auto [ec, read] = co_await readAtLeast(readAhead_, out.size());
    bytesReceived_ += read;
    aheadEnd_ = read;
    if (read < out.size()) co_return ec ? ec : asio::error::eof;
    std::memcpy(out.data(), readAhead_.data(), out.size());
    aheadBegin_ = out.size();
    co_return std::error_code{};
  }

  Stream stream_;
  const Limits limits_;
  const std::string remote_;
  const Role role_;
  // Keeps the SSL context the stream was made with alive (null for a plaintext link).
  const std::shared_ptr<TlsContext> tlsContext_;
  bool handshakeRunning_ = false;
  bool handshakeDone_ = false;
  asio::steady_timer secured_;  // waited on by operations while the handshake runs
  std::shared_ptr<net::detail::BufferPool> pool_;
  PayloadTarget target_;
  bool closed_ = false;
  std::error_code closeError_;

  // Send side: the turn holder alone uses the buffers, so they are reused without allocating.
  net::detail::FifoGate sendTurn_;
  std::vector<std::byte> txPrefix_;
  std::vector<asio::const_buffer> txBuffers_;

  // Receive side (one receive at a time).
  std::vector<std::byte> readAhead_;
  std::size_t aheadBegin_ = 0;
  std::size_t aheadEnd_ = 0;
  std::vector<std::byte> lengthBytes_;
  std::vector<std::uint64_t> sizes_;
  net::detail::PayloadPlacement placement_;

  std::atomic<std::uint64_t> bytesSent_{0};
  std::atomic<std::uint64_t> bytesReceived_{0};
};

using PlainLinkState = LinkState<false>;
using TlsLinkState = LinkState<true>;
}  // namespace gossamer::net::tcp::detail
