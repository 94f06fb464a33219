// The SWIM protocol of membership.h as a state machine without I/O of its own: it reads the time,
// sets timers, sends and opens links only through an Environment. makeService (membership.cc)
// runs it on a Mesh and an io_context; the simulator (engine/sim) runs the same code in virtual
// time over simulated links, so that what it simulates is this protocol, not a model of it.
//
// Threading: a Protocol and its Environment live on one thread (the io thread, or the
// simulator's). Every call into the Protocol, and every callback the Environment makes, happens
// there; view(), joined() are also safe from other threads.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <system_error>
#include <vector>

#include "net/membership/membership.h"
#include "net/mesh/mesh.h"
#include "net/wire/codec.h"

namespace gossamer::net::membership {

// What the protocol needs from the world it runs in. Callbacks are never made from inside the
// call that asked for them (always later, from the environment's own loop).
class Environment {
 public:
  using Clock = std::chrono::steady_clock;
  using TimerId = std::uint64_t;

  virtual ~Environment() = default;

  virtual Clock::time_point now() const = 0;
  // The first incarnation of a life of this peer: above any an earlier life of the same identity
  // reached in practice (the real one reads the wall clock in milliseconds).
  virtual std::uint64_t firstIncarnation() const = 0;
  virtual std::uint64_t selfId() const = 0;
  virtual Endpoint selfAddress() const = 0;

  // Runs `action` at `when` (at once, later, when that has passed) unless cancel()ed before.
  virtual TimerId at(Clock::time_point when, std::function<void()> action) = 0;
  // Idempotent; an unknown or fired id is ignored.
  virtual void cancel(TimerId timer) = 0;

  // Sends `message` to the member listening at `to`, opening a control link within
  // `connectTimeout` when there is none. `done` (may be empty) gets the outcome of the send: an
  // error when no link could be opened or the link broke, not whether the message arrived.
  virtual void send(const Endpoint& to, wire::MembershipMessage message,
                    std::chrono::milliseconds connectTimeout,
                    std::function<void(std::error_code)> done) = 0;
  // Opens (or finds) the control link to `to`; `done` gets the outcome and who answered there.
  virtual void open(const Endpoint& to, std::chrono::milliseconds timeout,
                    std::function<void(LinkOutcome)> done) = 0;
  // Closes the links to `to` (a member that failed or left).
  virtual void disconnect(const Endpoint& to) = 0;

  // Identity keys (net/wire/identity.h): the key bound to `id` (this peer's own for selfId()),
  // empty when none is; and binding `id` to the key a member record carries: false when `id` is
  // bound to another key (the record is refused). By default none are kept (the simulator).
  virtual std::vector<std::byte> identityKeyOf(std::uint64_t /*id*/) const { return {}; }
  // Opens a fresh link to `to` only to learn whether peer `expected` answers there within
  // `timeout` (net::Mesh's dialBack); `done` gets the outcome: an error when the link did not
  // open, or Errc::identityMismatch when another peer answered. By default every address can be
  // dialed (the simulator).
  virtual void dialBack(const Endpoint& /*to*/, std::uint64_t /*expected*/,
                        std::chrono::milliseconds /*timeout*/,
                        std::function<void(std::error_code)> done) {
    at(now(), [done = std::move(done)] { done({}); });
  }
  virtual bool bindIdentity(std::uint64_t /*id*/, std::span<const std::byte> /*key*/) {
    return true;
  }

  // Connection reversal. Whether a link to `to` for `channel` is open (this peer's or the
  // remote's; a send there needs no dial). By default none is (the simulator has no dial-out-only
  // members).
  virtual bool linked(const Endpoint& /*to*/, Channel /*channel*/) const { return false; }
  // Opens this peer's own link to `to` for `channel`, which the peer there asked for because it
  // cannot dial this one. By default the control link (open()).
  virtual void openFor(const Endpoint& to, Channel /*channel*/, std::chrono::milliseconds timeout,
                       std::function<void(LinkOutcome)> done) {
    open(to, timeout, std::move(done));
  }

  // Hole punching. Where the open link to `to` comes from as this peer sees it ("host:port"; a
  // NAT's address for a member behind one), empty when none is open. By default: empty.
  virtual std::string observedAt(const Endpoint& /*to*/) const { return {}; }
  // Opens a link for `channel` to member `expected` listening at `member` by connecting from this
  // peer's listen port to `at` while it connects to this one (net::Mesh::punch); the `lead` runs
  // the client handshake. By default it cannot (operation_not_supported).
  virtual void punch(const Endpoint& /*member*/, std::uint64_t /*expected*/, const Endpoint& /*at*/,
                     Channel /*channel*/, bool /*lead*/, std::chrono::milliseconds /*timeout*/,
                     std::function<void(LinkOutcome)> done) {
    at(now(), [done = std::move(done)] {
      done(LinkOutcome{std::make_error_code(std::errc::operation_not_supported), {}, {}});
    });
  }
  // Relays. Opens a link for `channel` to member `expected` listening at `member` through the
  // member listening at `via` (net::Mesh::relay). By default it cannot (operation_not_supported).
  virtual void relay(const Endpoint& /*via*/, const Endpoint& /*member*/,
                     std::uint64_t /*expected*/, Channel /*channel*/,
                     std::chrono::milliseconds /*timeout*/, std::function<void(LinkOutcome)> done) {
    at(now(), [done = std::move(done)] {
      done(LinkOutcome{std::make_error_code(std::errc::operation_not_supported), {}, {}});
    });
  }
};

class Core;

// One peer's SWIM protocol (membership.h states it). Not copyable; destroying it stops it.
class Protocol {
 public:
  // `environment` must outlive the protocol. Throws gossamer::Error on invalid options.
  Protocol(Environment& environment, Config config);
  ~Protocol();
  Protocol(const Protocol&) = delete;
  Protocol& operator=(const Protocol&) = delete;

  // Set before start(). Called in order, for every event.
  void onEvent(std::function<void(const Event&)> handler);
  // Service::start.
  void start();
  // A membership message that arrived from `from`.
  void handle(const Remote& from, wire::MembershipMessage message);
  // Connection reversal (the mesh's Reverser): this peer needs a link to the member at `to` for
  // `channel` and has none. When that member is dial-out only (and this peer is not), asks it to
  // open the link itself: on this peer's control link to it when one is open, else through up to
  // kReversalForwarders members, which pass the request on when they are linked to it. When both
  // are dial-out only, asks up to kReversalForwarders members to introduce the two for a hole
  // punch (protocol_punch.cc); once punching failed, opens the link through a relay
  // (protocol_relay.cc). Returns whether it asked (then the caller waits for the link instead of
  // dialing).
  bool requestReversal(const Endpoint& to, Channel channel);
  // Service::leave: `done` runs once the announcements went out, or at `timeout`; then stopped.
  // Not running (never started, or stopped): `done` runs at once, inside the call.
  void leave(std::chrono::milliseconds timeout, std::function<void()> done);
  // Service::stop: at once, silently; every pending timer and callback comes to nothing.
  void stop();

  View view() const;
  bool joined() const;
  std::vector<SeedFailure> seedFailures() const;
  // The round trip of this peer's direct probes to each member it measured (a moving average of
  // the probes' Ack times, 7/8 old + 1/8 new), by member id. On the protocol's thread.
  std::map<std::uint64_t, std::chrono::microseconds> roundTrips() const;

 private:
  std::shared_ptr<Core> core_;
};

}  // namespace gossamer::net::membership
