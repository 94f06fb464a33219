// The TCP backend of net::Transport (Asio, C++20 coroutines, one io_context thread per peer).
//
// Wire format of one frame, all integers little-endian:
//   u32 magic 0x314d5347 ("GSM1") | u32 header bytes | u32 payload count
//   | u64 payload bytes, one per payload | header bytes | payload 0 bytes | payload 1 bytes | ...
// A send is ONE scatter-gather write of [prefix, header, payloads...] straight from the caller's
// buffers. Sends on a link are written one at a time in the order they started; the next ones
// wait in FIFO order (a send completes once the kernel has its bytes).
// A receive reads the prefix and checks it against the receiver's Limits before allocating
// anything (Errc::malformedFrame, tooManyPayloads or frameTooLarge, then the link is closed),
// reads the header, asks the PayloadTarget where each payload goes (or takes pool buffers), and
// reads the payloads into those buffers; only a payload remainder smaller than a 64 KiB
// read-ahead buffer passes through it (so small frames cost one system call, not three).
// The pool of a link holds at most Limits::maxBufferedBytes; while the Payloads the receiver
// holds fill it, the link reads nothing more, so TCP flow control slows the sender down.
// Sockets get TCP_NODELAY, the buffer sizes of Options and SO_KEEPALIVE.
// With Options::tls the same frames travel inside TLS 1.3 (net/tcp/tls.h): the TLS handshake
// starts when a link is made and its first send or receive waits for it; a plaintext listener
// names a TLS client (Errc::peerSpeaksTls) and a TLS one a plaintext client
// (Errc::peerSpeaksPlaintext).
#pragma once

#include <chrono>
#include <memory>

#include <asio/io_context.hpp>

#include "net/limits.h"
#include "net/tcp/tls.h"
#include "net/transport.h"

namespace gossamer::net::tcp {

struct Options {
  Limits limits;
  // SO_SNDBUF / SO_RCVBUF of every socket (the receive size is set on the listening socket too,
  // so that accepted connections negotiate a matching window scale). Linux doubles the value and
  // caps it at net.core.wmem_max / rmem_max; 0 keeps the kernel's default and its autotuning.
  int sendBufferBytes = 4 << 20;
  int receiveBufferBytes = 4 << 20;
  // SO_KEEPALIVE: the kernel eventually notices a peer that vanished without closing.
  bool keepAlive = true;
  // connect() retries refused connections after initialBackoff, doubling the wait up to
  // maxBackoff, until its timeout.
  std::chrono::milliseconds initialBackoff{20};
  std::chrono::milliseconds maxBackoff{1000};
  // TLS 1.3 on every link (makeTlsContext); null: plaintext. Both ends must agree.
  std::shared_ptr<TlsContext> tls;

  // The user's knobs by name (engine/options.h reads them from `--transport-option`).
  template <typename Bind>
  void bind(Bind& b) {
    b("send-buffer-bytes", sendBufferBytes, "SO_SNDBUF of every socket; 0: the kernel's default");
    b("receive-buffer-bytes", receiveBufferBytes,
      "SO_RCVBUF of every socket; 0: the kernel's default");
    b("keep-alive", keepAlive, "SO_KEEPALIVE on every socket");
  }
};

// A TCP transport whose sockets, links and timers live on `io`, which must outlive it and every
// link it makes. Destroying the transport closes it (transport.h, Transport::close).
std::unique_ptr<Transport> makeTransport(asio::io_context& io, const Options& options = {});

}  // namespace gossamer::net::tcp
