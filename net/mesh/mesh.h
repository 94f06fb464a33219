// net::Mesh: the authenticated links of one peer to the others, shared by the membership service
// and the engine's algorithm traffic. It is the only part of a peer that accepts and connects:
//
// - listen() binds the transport and runs every inbound link through the server handshake of
//   net/wire (mutual HMAC over the cluster secret, version, cluster id and model fingerprint;
//   at most Limits::maxPendingHandshakes at once).
// - send(to, channel, frame) sends on the link between this peer and the peer listening at `to`
//   for that channel: this peer's own outbound link when it has one (open or opening); else the
//   remote's open link to this peer for that channel (its client named the channel in the
//   handshake), so that a link, once open, carries traffic both ways and a peer that cannot be
//   dialed is reached on the link it opened; else, when the Reverser says the peer there cannot
//   be dialed and was asked to open the link itself (connection reversal), that link once it
//   opens; else a new outbound link, connecting and running the client handshake first. A pair
//   and channel keeps the link it sends on while it is open, so frames from one sender to one
//   receiver on one channel arrive in the order their sends started. Two channels keep small
//   control frames (membership probes, requests) from queueing behind bulk parameter transfers.
// - Every link runs a receive loop that decodes each header once (net/wire/codec.h: bounded,
//   hostile input safe) and hands membership messages and algorithm envelopes to their handlers,
//   tagged with the sender's identity as its handshake authenticated it. A malformed frame or a
//   handshake message after the handshake closes the link with a warning; nothing throws.
// - Envelope payloads land where the envelope target says (the engine's preallocated receive
//   buffers), else in the link's bounded pool, so a slow consumer slows its senders down.
//
// Threading: a Mesh lives on the io_context of its transport (the peer's io thread): construct,
// call and destroy it there, except counters(), which any thread may read. Handlers run on the io
// thread and must not block. Destroying the Mesh closes every link; coroutines still running keep
// what they use alive until they end.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <system_error>
#include <vector>

#include <asio/awaitable.hpp>
#include <asio/io_context.hpp>

#include "net/endpoint.h"
#include "net/frame.h"
#include "net/relay/relay_options.h"
#include "net/transport.h"
#include "net/wire/codec.h"
#include "net/wire/handshake.h"

namespace gossamer::net {

// Which of the two links to a peer a frame travels on.
enum class Channel : std::uint8_t { control = 0, data = 1 };
inline constexpr std::size_t kChannels = 2;
// What a dial-back's client names as its channel: none (the link carries no traffic).
inline constexpr std::uint8_t kDialBackChannel = 0xff;

// The sender of a received frame, as its link's handshake authenticated it.
struct Remote {
  std::uint64_t peerId = 0;
  Endpoint listen;  // where the sender accepts links: the address to reply to
  // Where the link's other end is, as the transport sees it (e.g. "203.0.113.9:51234" behind a
  // NAT, where `listen` is the address the peer advertises); empty where not known.
  std::string observed;
};

// What a mesh carries: SWIM membership messages, and envelopes (with their payloads), counted
// apart by their route: the algorithm's (inbox, serve) and the peer runtime's own.
// `relay`: the frames of relayed links (net/relay) on this peer's links to and from a relay, as
// an end or as the relay (a relayed link's own frames are counted as what they carry).
enum class Traffic : std::uint8_t { membership = 0, algorithm = 1, runtime = 2, relay = 3 };
inline constexpr std::size_t kTrafficKinds = 4;

// An envelope header encoded once, for any number of sends (one message to several peers).
struct EncodedEnvelope {
  std::vector<std::byte> bytes;
  Traffic traffic = Traffic::algorithm;
  // Encodes `header` (its payload descriptors must describe the payloads it is sent with).
  static std::shared_ptr<const EncodedEnvelope> of(const wire::EnvelopeHeader& header);
};

// Frames and bytes (header + payloads) of one kind of traffic since the mesh started.
struct TrafficCounters {
  std::uint64_t framesSent = 0;
  std::uint64_t bytesSent = 0;
  std::uint64_t framesReceived = 0;
  std::uint64_t bytesReceived = 0;
};

// The outcome of opening a link: an empty error when it is open; otherwise the connect error
// (asio::error::timed_out, host_not_found, ...) or the handshake's (Errc::authenticationFailed,
// modelMismatch, ...), and for a failed handshake its reason (wire::HandshakeResult::reason:
// which field differs, with both values). An open link says who its handshake authenticated at the
// other end: a seed given by host name (or any alias of an address) is known by id from then on.
struct LinkOutcome {
  std::error_code error;
  std::string reason;
  Remote remote;  // when ok
  bool ok() const { return !error; }
};

struct MeshOptions {
  // This peer's introduction and the cluster secret. `listen` is overwritten with the bound
  // endpoint (or `advertise`, when set) by listen().
  wire::HandshakeConfig handshake;
  // The address other peers reach this one at, when it differs from the bound one (listening
  // on 0.0.0.0, or behind NAT). Empty host: the bound endpoint.
  Endpoint advertise;
  // What this peer lends to relayed links between others (--relay, --relay-budget).
  relay::RelayOptions relay;
};

using MembershipHandler = std::function<void(const Remote& from, wire::MembershipMessage message)>;
using EnvelopeHandler = std::function<void(const Remote& from, wire::EnvelopeHeader header,
                                           std::vector<Payload> payloads)>;
// Chooses where payload `index` (of `size` bytes) of an envelope lands: a Payload of exactly
// `size` bytes whose owner keeps the memory reserved until the Payload is released (the envelope
// handler receives it; if the frame fails first, it is released unfilled), or an empty Payload
// for the link's pool. Called on the io thread before the payload bytes are read.
using EnvelopeTarget = std::function<Payload(const Remote& from, const wire::EnvelopeHeader& header,
                                             std::size_t index, std::size_t size)>;
// Asked, on the io thread, when this peer needs a link to `to` for `channel` and has none:
// returns true when the peer there cannot be dialed and was asked to open the link to this peer
// itself (connection reversal; net/membership asks); then the send waits for that link, up to its
// connect timeout, instead of dialing. False: dial.
using Reverser = std::function<bool(const Endpoint& to, Channel channel)>;

class Mesh final {
 public:
  // `transport` must be fresh (not listening) and outlive the mesh; it belongs to `io`.
  Mesh(asio::io_context& io, Transport& transport, MeshOptions options);
  ~Mesh();
  Mesh(const Mesh&) = delete;
  Mesh& operator=(const Mesh&) = delete;

  // Handlers; set them before listen(). Empty handlers drop what they would have received.
  void onMembership(MembershipHandler handler);
  void onEnvelope(EnvelopeHandler handler);
  void setEnvelopeTarget(EnvelopeTarget target);
  // May be set or cleared at any time (on the io thread).
  void setReverser(Reverser reverser);

  // Binds `local` (port 0 picks one) and starts accepting. Returns the transport's error.
  std::error_code listen(const Endpoint& local);
  // Where other peers reach this one (the advertised or bound endpoint), after listen().
  Endpoint localEndpoint() const;
  std::uint64_t selfId() const;
  // This peer's identity key, and the book binding ids to keys its handshakes use (null when the
  // options gave none). Any thread.
  const wire::IdentityKey& identityKey() const;
  const std::shared_ptr<wire::IdentityBook>& identityBook() const;

  // Opens this peer's own link to the peer listening at `to` for `channel` (connect and client
  // handshake) unless it is open already, within `connectTimeout`; the next send there uses it.
  // Unlike a send's error alone, the outcome of a failed handshake says why (its reason). An
  // outcome shared with a send that was opening the same link meanwhile is that attempt's.
  asio::awaitable<LinkOutcome> open(Endpoint to, Channel channel,
                                    std::chrono::milliseconds connectTimeout);

  // Both sends go to the peer listening at `to` on this peer's own link for the channel (see the
  // header comment). Opening a link may take up to `connectTimeout` (connect + handshake).
  // Buffers must stay valid until the returned awaitable completes. Errors: the connect or
  // handshake error (asio::error::timed_out, Errc::authenticationFailed, ...), or the link's send
  // error; after a send error the link is dropped and the next send reconnects.
  //
  // Encodes and sends a membership message on the control channel.
  // Arguments are taken by value: the returned awaitable may start after the caller's objects are
  // gone (co_spawn), and it keeps the mesh's state alive, not the Mesh object.
  asio::awaitable<std::error_code> sendMembership(Endpoint to, wire::MembershipMessage message,
                                                  std::chrono::milliseconds connectTimeout);
  // Sends an envelope encoded once (encodeEnvelope) with its payloads.
  asio::awaitable<std::error_code> sendEnvelope(Endpoint to, Channel channel,
                                                std::shared_ptr<const EncodedEnvelope> envelope,
                                                std::vector<std::span<const std::byte>> payloads,
                                                std::chrono::milliseconds connectTimeout);
  // The same for one header: its payload descriptors are filled from `payloads`' sizes when
  // empty.
  asio::awaitable<std::error_code> sendEnvelope(Endpoint to, Channel channel,
                                                wire::EnvelopeHeader header,
                                                std::vector<std::span<const std::byte>> payloads,
                                                std::chrono::milliseconds connectTimeout);

  // A dial-back: opens a fresh link to `to` (connect and handshake, within `timeout`) only to
  // learn whether it opens, and closes it. The link is for no channel: the remote only receives
  // on it, and nothing is sent there. Never reuses a link, so it proves `to` can be dialed.
  asio::awaitable<LinkOutcome> dialBack(Endpoint to, std::chrono::milliseconds timeout);

  // Hole punching: opens a link for `channel` to the peer `expected` listening at `member` by
  // connecting from this peer's listen port to `at` (where that peer's NAT maps its listen port)
  // while that peer connects to this one (Transport::punch). Both ends connect, so the `lead`
  // (one of the two, agreed beforehand) runs the client handshake and keeps the link as its own
  // for the channel; the other runs the server handshake and keeps it as the remote's. Outcome as
  // open(); Errc::identityMismatch when another peer answered. A pair has one punched link (its
  // two listen ports make one connection), which carries both channels: a punch while it is open
  // returns it. Senders waiting for a reversed link to `member` go on when it opens.
  asio::awaitable<LinkOutcome> punch(Endpoint member, std::uint64_t expected, Endpoint at,
                                     Channel channel, bool lead, std::chrono::milliseconds timeout);

  // A relayed link: opens a link for `channel` to peer `expected` listening at `member` through
  // the member listening at `via` (a relay; net/relay/relay_hub.h), with TLS between the two
  // ends' identity keys inside, then the handshake. Like a punched link it carries both
  // channels, and this peer keeps it as its own. Outcome as open(); connection_refused with the
  // relay's reason when it refused; Errc::identityMismatch when no key is bound to `expected`
  // yet or another peer answered. Senders waiting for a reversed link to `member` go on.
  asio::awaitable<LinkOutcome> relay(Endpoint via, Endpoint member, std::uint64_t expected,
                                     Channel channel, std::chrono::milliseconds timeout);

  // Where the open link to the peer at `to` (on either channel) comes from as the transport sees
  // it (Link::remoteAddress): for a peer behind a NAT, the NAT's address. Empty without one.
  std::string observedAddress(const Endpoint& to) const;

  // Whether a link to the peer at `to` for `channel` is open, this peer's own or the remote's (a
  // send there needs no connect).
  bool hasOpenLink(const Endpoint& to, Channel channel) const;
  // Closes this peer's links to and from the peer at `to` (one that failed or left); later sends
  // reconnect.
  void disconnect(const Endpoint& to);
  // Stops accepting and closes every link. Idempotent.
  void close();

  // Any thread.
  TrafficCounters counters(Traffic traffic) const;
  // Links the remote opened at this peer's request (connection reversal), and waits for one
  // that ended without it. Any thread.
  std::uint64_t linksReversed() const;
  std::uint64_t reversalsTimedOut() const;
  // Links opened by hole punching. Any thread.
  std::uint64_t linksPunched() const;
  // Links this peer opened through a relay; and as a relay, the streams it carried and the
  // bytes it forwarded for others. Any thread.
  std::uint64_t linksRelayed() const;
  std::uint64_t streamsRelayed() const;
  std::uint64_t bytesRelayed() const;

 private:
  struct State;
  std::shared_ptr<State> state_;
};

}  // namespace gossamer::net
