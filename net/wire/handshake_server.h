// The accepting side of a peer: takes raw links from a listening Transport, runs the server
// handshake on each, and hands on the links that pass. It is what bounds pending handshakes
// (Limits::maxPendingHandshakes, 128 by default): at the bound it stops accepting, so further
// connects wait in the kernel's listen backlog (sized by the same limit) and are then refused,
// instead of costing memory or a coroutine each; and one source address may hold at most
// Limits::maxPendingHandshakesPerSource of them. Refused handshakes are logged with their cause,
// rate-limited (net/wire/refusals.h).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <system_error>

#include <asio/awaitable.hpp>

#include "net/transport.h"
#include "net/wire/handshake.h"
#include "net/wire/refusals.h"

namespace gossamer::net::wire {

struct AuthenticatedLink {
  std::unique_ptr<Link> link;  // open, ready for traffic
  HandshakeResult hello;       // who the remote is (its peer id, listen endpoint, model)
};

// Called on the io thread for every link whose handshake succeeded.
using OnAuthenticatedLink = std::function<void(AuthenticatedLink)>;

// What serveHandshakes reports, for metrics and tests.
struct HandshakeServerStats {
  std::size_t pending = 0;      // handshakes running now
  std::size_t maxPending = 0;   // the most that ever ran at once
  std::size_t accepted = 0;     // links that passed
  std::size_t refused = 0;      // links whose handshake failed, or that were closed at once
  std::array<std::uint64_t, kRefusalKinds> refusedBy{};  // the same, per cause
};

// Accepts on `transport` (already listening) until it is closed, running at most
// transport.limits().maxPendingHandshakes server handshakes at once (maxPendingHandshakesPerSource
// from one address). Failed handshakes are logged (RefusalLog) and their links closed; a transient accept error (out of file descriptors) is logged
// and retried after a short pause. Completes when accept fails with operation_aborted (the
// transport was closed). `stats`, if given, is updated on the io thread and must outlive the
// returned awaitable and every handshake it started.
asio::awaitable<void> serveHandshakes(Transport& transport, HandshakeConfig config,
                                      OnAuthenticatedLink onLink,
                                      std::shared_ptr<HandshakeServerStats> stats = nullptr);

}  // namespace gossamer::net::wire
