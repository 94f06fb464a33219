// The in-process backend of net::Transport: peers in one process, each on its own io_context and
// thread (or sharing one), for tests and local clusters. Same semantics as tcp/:
// - Endpoints: a Hub is the registry of listening transports; listen() takes a port (the host is
//   not interpreted; 0 picks a free port) and localEndpoint() is {"inproc", port}. connect()
//   looks only at the port and retries with backoff until its timeout while nobody listens there
//   (asio::error::timed_out), like a refused TCP connect.
// - A link is a pair of bounded queues, one per direction. send() copies the header and payload
//   bytes (the caller's buffers are only valid until send completes) into buffers of the
//   RECEIVER's pool, and completes when the frame is queued. The sender waits (back-pressure)
//   while the queue holds its Limits::maxInFlightSends frames, or while the receiver's pool is at
//   the receiver's Limits::maxBufferedBytes (queued frames plus payloads the receiver has not
//   released). Frames arrive in the order their sends started.
// - receive() hands the pooled buffer over as the Payload, or, when the PayloadTarget claims the
//   payload, copies it into the target buffer then. The target is called in receive(), on the
//   receiver's io thread (frame.h), never at send time: a sender must not write into a buffer the
//   receiver may still be reading.
// - A frame beyond the receiver's Limits is not copied: the receiver's receive fails with
//   Errc::frameTooLarge or tooManyPayloads and the link closes, as over TCP.
// - close() of one end: its pending and later operations fail with operation_aborted; the other
//   end receives the frames already queued, then asio::error::eof; its sends fail with
//   asio::error::broken_pipe.
// All shared state is guarded by mutexes; a waiter is woken by a post to its own io_context.
#pragma once

#include <memory>

#include <asio/io_context.hpp>

#include "net/limits.h"
#include "net/transport.h"

namespace gossamer::net::inproc {

// The registry of listening in-process transports. Make one per test or process and hand it to
// every transport that should reach the others (there is no global one). Thread-safe.
class Hub;

struct Options {
  Limits limits;

  template <typename Bind>
  void bind(Bind& /*b*/) {}  // no user knobs
};

std::shared_ptr<Hub> makeHub();

// An in-process transport on `io` (which must outlive it and its links), reachable through `hub`.
// Destroying the transport closes it (transport.h, Transport::close).
std::unique_ptr<Transport> makeTransport(asio::io_context& io, std::shared_ptr<Hub> hub,
                                         const Options& options = {});

}  // namespace gossamer::net::inproc
