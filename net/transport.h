// net::Transport / net::Link: the interfaces every backend (tcp/, inproc/, shaped/, later
// ibverbs/) implements. They move frames of bytes and registered memory only; they know
// nothing of training, algorithms or handshakes (net/wire/ does the handshake over a Link).
//
// Threading: a Transport and its Links belong to one asio::io_context (the peer's io thread),
// given to the backend's factory. Every awaitable must be co_awaited on that io_context, and
// every other method called from it, unless stated otherwise.
// Errors: I/O failures are std::error_code values (asio::error::*, or net::Errc from
// net/errors.h), never exceptions. Misuse (a frame beyond the limits, a second concurrent
// receive) is a std::error_code too, so a peer's bad input cannot throw through the io loop.
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <system_error>
#include <utility>

#include <asio/awaitable.hpp>
#include <asio/error.hpp>

#include "net/endpoint.h"
#include "net/frame.h"
#include "net/limits.h"

namespace gossamer::net {

class Link {
 public:
  virtual ~Link() = default;

  // Sends one frame. Completes once the frame is handed to the layer below (the kernel for TCP,
  // the peer's queue in-process); frames on one link arrive in the order their sends started.
  // At most Limits::maxInFlightSends sends may be outstanding; the next one waits
  // (back-pressure). A frame beyond the limits fails with Errc::frameTooLarge, sending nothing.
  virtual asio::awaitable<std::error_code> send(OutFrame frame) = 0;

  // Receives the next frame into `frame` (replacing its contents). One receive at a time per
  // link (a second fails with Errc::receiveInProgress). Payloads land where the PayloadTarget
  // says, or in the pool. Errors: asio::error::eof when the remote closed between frames; a
  // connection error (connection_reset, eof mid-frame) when it vanished; Errc::frameTooLarge or
  // tooManyPayloads for a frame beyond the limits, before anything is allocated for it;
  // Errc::malformedFrame for bytes that are not a frame; Errc::invalidPayloadTarget when the
  // PayloadTarget returned a span of the wrong size. Every error but receiveInProgress closes
  // the link (the byte stream cannot be trusted any more), and every later operation on it
  // returns the error that closed it. Cancelling a receive in the middle of a frame closes the link too.
  virtual asio::awaitable<std::error_code> receive(InFrame& frame) = 0;

  // Installs the hook that chooses receive buffers (see PayloadTarget); empty: always the pool.
  virtual void setPayloadTarget(PayloadTarget target) = 0;

  // Closes the link; pending and later operations complete with asio::error::operation_aborted
  // or a connection error. Idempotent. Callable from any thread.
  virtual void close() = 0;

  // The remote side as the transport sees it (for TCP the socket's peer address, which for an
  // accepted link is an ephemeral port, not the remote's listen endpoint).
  virtual std::string remoteAddress() const = 0;

  // Counters since the link opened, for metrics.
  virtual std::uint64_t bytesSent() const = 0;
  virtual std::uint64_t bytesReceived() const = 0;
};

// What a transport needs to know about device (CUDA) memory that payloads may live in, supplied
// by the engine (net/ knows no CUDA). Empty `isDevice`: all memory is host memory. A transport
// that can reach device memory (RDMA: GPUDirect, or staged through registered host memory) uses
// it; the others never see device pointers.
struct DeviceMemory {
  // True when `pointer` is device memory.
  std::function<bool(const void* pointer)> isDevice;
  // Blocking copies between device and host memory.
  std::function<void(void* hostDst, const void* deviceSrc, std::size_t bytes)> copyToHost;
  std::function<void(void* deviceDst, const void* hostSrc, std::size_t bytes)> copyToDevice;
};

// What connect and accept return: an error, or an open link.
struct LinkResult {
  std::error_code error;
  std::unique_ptr<Link> link;
};

class Transport {
 public:
  virtual ~Transport() = default;

  // "tcp", "inproc", "shaped(tcp)".
  virtual std::string name() const = 0;

  // Binds and listens. Port 0 picks a free port; localEndpoint() tells which.
  virtual std::error_code listen(const Endpoint& local) = 0;
  virtual Endpoint localEndpoint() const = 0;

  // The next inbound link, raw (no handshake yet). Fails with operation_aborted after close().
  virtual asio::awaitable<LinkResult> accept() = 0;

  // Opens a link to `remote`, retrying refused connections with exponential backoff until
  // `timeout` has passed; then fails with asio::error::timed_out (or the last error). Resolving
  // a host name is not bounded by the timeout (getaddrinfo cannot be interrupted).
  virtual asio::awaitable<LinkResult> connect(const Endpoint& remote,
                                              std::chrono::milliseconds timeout) = 0;

  // Hole punching: opens a link to `remote` from this transport's listen port (a NAT that keeps
  // ports maps it to that port of its own address, where the remote aims) while the remote does
  // the same toward this one. The connection opens by a simultaneous open, or by one side's
  // connect reaching the other's listener: a connection that accept() gets from `remote`
  // meanwhile is handed to this call instead. Both ends connect, so the caller says which end
  // this one plays in the transport's own handshake (TLS): `asServer`, opposite to the remote's.
  // `remote` is a numeric address. Retries until `timeout`, like connect. Backends that cannot:
  // asio::error::operation_not_supported.
  virtual asio::awaitable<LinkResult> punch(const Endpoint& remote,
                                            std::chrono::milliseconds timeout, bool asServer);

  // Announces memory that payloads will be sent from or received into, so that an RDMA
  // backend registers it once. A no-op for tcp and inproc.
  virtual void registerMemory(std::span<std::byte> memory) = 0;

  // Stops listening and closes every link made by this transport. Idempotent.
  virtual void close() = 0;

  virtual const Limits& limits() const = 0;
};

inline asio::awaitable<LinkResult> Transport::punch(const Endpoint& /*remote*/,
                                                   std::chrono::milliseconds /*timeout*/,
                                                   bool /*asServer*/) {
  co_return LinkResult{asio::error::operation_not_supported, nullptr};
}

}  // namespace gossamer::net
