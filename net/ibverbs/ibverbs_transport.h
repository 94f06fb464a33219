// The RDMA backend of net::Transport, over libibverbs (InfiniBand or RoCE), reliable-connected
// queue pairs. Same Link semantics as tcp/: frames arrive in the order their sends started,
// PayloadTarget, a bounded pool (a receiver that holds its payloads stalls its senders), Limits
// checked before anything is allocated, errors as std::error_code, close semantics.
//
// Connection: every link starts as a TCP connection (the control connection, made by an inner
// tcp transport: listen/accept/connect are its). Over it both ends exchange a BootstrapInfo
// (QP number, LID/GID, PSN, MTU and where their receive slots are: protocol.h), move their QP
// RESET -> INIT -> RTR, tell each other they are ready to receive, move to RTS, and only then is
// the Link returned. The control connection stays open for the life of the link: its end is how
// a peer's disconnect is noticed at once (an RC QP only learns it from a retry timeout), and
// closing a link closes it.
// Authentication: net/wire's handshake runs over the returned Link, that is AFTER the bootstrap.
// Before it, an unauthenticated remote that connects to our listener learns our QP number, LID,
// GID and the address and rkey of ITS OWN link's receive slots, and can write into those slots
// (they are registered for remote write, nothing else is; registerMemory regions are local
// only) and make us hold one QP with its buffers (about slotCount * slotBytes + receive buffers)
// until the handshake fails and the link is closed. accept() bounds a silent remote by
// Options::bootstrapTimeout (and serves one bootstrap at a time), the control connection takes
// frames of at most 256 bytes, and net/wire's handshake server bounds the links pending a
// handshake. With Options::controlTls the control connection is TLS 1.3 (net/tcp/tls.h): only a
// remote that holds the cluster secret (or a trusted certificate) gets through the bootstrap,
// and the bootstrap itself cannot be read or altered on the path. Frames and payloads, the wire
// handshake among them, travel by RDMA and are NOT encrypted or integrity-protected by TLS.
//
// Data path (protocol.h): headers by SEND, payloads by RDMA WRITE with immediate into the
// receiver's slots, chunked by slot, with credits so that a sender never overruns a slot or a
// receive. A receive copies each chunk out of its slot into the PayloadTarget's buffer or a pool
// buffer, then returns the slot. A send completes when the HCA reports its last work request
// complete (the remote acknowledged it). Payloads in registered memory (registerMemory) are
// written from where they lie, others are staged through registered buffers of the link.
// Completions are taken on the io_context through the completion channel's file descriptor; with
// Options::busyPoll the io thread polls the completion queues instead (lower latency, one busy
// core). CUDA device memory: see DeviceMemory.
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>

#include <asio/io_context.hpp>

#include "net/limits.h"
#include "net/tcp/tls.h"
#include "net/transport.h"

namespace gossamer::net::ibverbs {

class Verbs;

enum class GpuDirect {
  kAuto,  // register device memory directly when the driver supports it (peer memory module)
  kOff,   // always stage device memory through registered host memory
};

struct Options {
  Limits limits;
  // The RDMA device ("mlx5_0"); empty: the first device with an active port.
  std::string device;
  // Its port (1-based); 0: the first active port.
  int port = 0;
  // The GID index for addressing; -1: none on InfiniBand (LID routing), on RoCE the first
  // non-zero GID of the port.
  int gidIndex = -1;
  // Poll the completion queues from the io thread instead of waiting on the completion channel.
  bool busyPoll = false;
  // Receive side of every link (announced to the remote): payload slots, and the receives kept
  // posted for frame messages. Memory per link: slotCount * slotBytes for the slots, as much for
  // the send staging buffers, and (slotCount + headerDepth + creditWindow) * receiveBytes.
  std::size_t slotBytes = 256 * 1024;
  std::size_t slotCount = 16;
  std::size_t headerDepth = 16;     // frame messages the remote may send ahead of our receives
  std::size_t receiveBytes = 4096;  // the largest SEND (frame meta beyond it goes in chunks)
  DeviceMemory deviceMemory;
  GpuDirect gpuDirect = GpuDirect::kAuto;
  // The bootstrap over the control connection must finish within this (connect and accept).
  std::chrono::milliseconds bootstrapTimeout{5000};
  // QP retry settings (ibv_modify_qp: timeout exponent, retry count, RNR retry; 7 = forever).
  int ackTimeout = 14;
  int retryCount = 7;
  int rnrRetry = 7;
  // The verbs to use; empty: libibverbs. Tests pass a fake (tests/net/fake_verbs.h).
  std::shared_ptr<Verbs> verbs;
  // TLS 1.3 on the control connections (tcp::Options::tls); null: plaintext. It protects the
  // bootstrap and the close signal only: frames and payloads travel by RDMA, unencrypted.
  std::shared_ptr<tcp::TlsContext> controlTls;

  // The user's knobs by name (engine/options.h reads them from `--transport-option` and the
  // `--rdma-*` flags).
  template <typename Bind>
  void bind(Bind& b) {
    b("device", device, "RDMA device (mlx5_0); empty: the first with an active port");
    b("port", port, "its port (1-based); 0: the first active one");
    b("gid-index", gidIndex, "GID index; -1: LID on InfiniBand, the first GID in use on RoCE");
    b("busy-poll", busyPoll, "poll completions on the io thread (a busy core, lower latency)");
    b("slot-bytes", slotBytes, "bytes per receive slot");
    b("slot-count", slotCount, "receive slots per link");
  }
};

// True when `options` name a usable device and port (the default: any device with an active
// port); otherwise false with the reason in *reason: no RDMA device at all, the named device
// missing (with the ones present), or no active port.
bool isViable(std::string* reason, const Options& options = {});

// An RDMA transport on `io` (which must outlive it and every link it makes). Opens the device at
// once: throws gossamer::Error naming what is missing (no RDMA device, device or port not found
// or not active) or what failed, so that a misconfigured peer fails at start, never later.
// Destroying the transport closes it (transport.h, Transport::close).
std::unique_ptr<Transport> makeTransport(asio::io_context& io, const Options& options = {});

}  // namespace gossamer::net::ibverbs
