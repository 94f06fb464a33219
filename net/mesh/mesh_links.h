// The link table entries of net::Mesh (mesh.cc), internal to net/mesh: one link, the order of
// the sends to one (peer, channel), and a connection reversal awaited.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <system_error>
#include <vector>

#include <asio/awaitable.hpp>
#include <asio/steady_timer.hpp>
#include <asio/this_coro.hpp>

#include "net/link_support.h"
#include "net/mesh/mesh.h"

namespace gossamer::net::detail {

using MeshClock = std::chrono::steady_clock;

// One link of the mesh: this peer's outbound link to (dialed, channel), or an inbound one (whose
// channel its client named in the handshake).
struct LinkEntry {
  LinkEntry(const asio::any_io_executor& executor, bool isOutbound)
      : outbound(isOutbound), settled(executor, MeshClock::time_point::max()) {}

  const bool outbound;
  std::unique_ptr<Link> link;
  Remote remote;    // authenticated once open
  Endpoint dialed;  // outbound: the key it is kept under, with `channel`
  Channel channel = Channel::control;
  bool usable = true;     // inbound: its channel is one of ours (else it only receives)
  bool open = false;      // the handshake succeeded
  bool finished = false;  // outbound: connecting ended, open or failed
  // Opened by hole punching: it carries both channels, since the two ends' listen ports make the
  // one connection a pair of peers can have that way.
  bool punched = false;
  // Relayed through another member (net/relay): it carries both channels too.
  bool relayed = false;
  bool bothChannels() const { return punched || relayed; }
  std::error_code failure;
  std::string failureReason;   // the handshake's, when it failed
  asio::steady_timer settled;  // cancelled when connecting ends, to wake waiting senders
  // The payload destinations chosen for the frame being received, by payload index; they are
  // released (given back to their owner) if the frame fails.
  std::vector<Payload> targets;
  // The frame's header, decoded once when the payload target first asks for it (before the
  // payloads are read), and then used by the receive loop.
  wire::Header header;
  std::error_code headerError;
  bool headerDecoded = false;
};

// The order in which sends to one (peer, channel) start on its link: the order the mesh's sends
// started. A sender takes a ticket before anything can suspend it and starts its link send once
// every earlier ticket is released. Without it, the senders that waited for the link to open
// resume after senders that arrived once it was open and went straight to the link.
// Single-threaded, like the rest of the mesh.
class SendOrder {
 public:
  std::uint64_t take() {
    const std::uint64_t ticket = next_++;
    waiting_.emplace(ticket, nullptr);
    return ticket;
  }
  // Returns when `ticket` is the oldest one not released.
  asio::awaitable<void> waitTurn(std::uint64_t ticket) {
    while (waiting_.begin()->first != ticket) {
      std::shared_ptr<asio::steady_timer>& wake = waiting_[ticket];
      if (!wake)
        wake = std::make_shared<asio::steady_timer>(co_await asio::this_coro::executor,
                                                    MeshClock::time_point::max());
      const std::shared_ptr<asio::steady_timer> keep = wake;
      co_await keep->async_wait(kUseTuple);
    }
  }
  // Gives `ticket` up (its send started, or it has none) and wakes the next one. The wake-up is
  // posted: a caller that starts its link send right after this, without suspending, keeps its
  // place on the link.
  void release(std::uint64_t ticket) {
    waiting_.erase(ticket);
    if (!waiting_.empty() && waiting_.begin()->second) waiting_.begin()->second->cancel();
  }
  bool idle() const { return waiting_.empty(); }

 private:
  std::uint64_t next_ = 0;
  std::map<std::uint64_t, std::shared_ptr<asio::steady_timer>> waiting_;
};

// A hole punch this peer follows (Mesh::punch), which the lead's connection may reach by this
// peer's listener and handshake server instead (adoptInbound then ends the punch with it).
struct FollowedPunch {
  FollowedPunch(const asio::any_io_executor& executor, Endpoint from, std::uint64_t peer)
      : at(std::move(from)), expected(peer), adopted(executor, MeshClock::time_point::max()) {}
  const Endpoint at;  // where the lead's connection comes from
  const std::uint64_t expected;
  Remote remote;               // set with the link adopted
  asio::steady_timer adopted;  // cancelled when it was
};

// A link this peer asked the remote to open (connection reversal), awaited by the senders to it.
struct Reversal {
  explicit Reversal(const asio::any_io_executor& executor)
      : arrived(executor, MeshClock::time_point::max()) {}
  asio::steady_timer arrived;  // expires (at once, for late waiters too) when the link opens
  int waiters = 0;
};

// Connects to `to` into `link` (where the caller's close() finds it) and runs the client handshake
// naming `channel`, both by `deadline`. The outcome names the remote as the handshake
// authenticated it. (mesh_dial.cc)
asio::awaitable<LinkOutcome> dial(Transport& transport, const wire::HandshakeConfig& handshake,
                                  Endpoint to, std::uint8_t channel, MeshClock::time_point deadline,
                                  std::unique_ptr<Link>& link);

// Mesh::punch's connection and handshake: punches to `at` into `link`, then runs the client
// handshake naming `channel` (the lead) or the server handshake, whose result goes to `hello`.
// Errc::identityMismatch when the peer that answered is not `expected` listening at `member`.
// (mesh_dial.cc)
asio::awaitable<LinkOutcome> punch(Transport& transport, const wire::HandshakeConfig& handshake,
                                   Endpoint member, std::uint64_t expected, Endpoint at,
                                   Channel channel, bool lead, std::chrono::milliseconds timeout,
                                   std::unique_ptr<Link>& link, wire::HandshakeResult& hello);

}  // namespace gossamer::net::detail
