// The state of a net::Mesh, internal to net/mesh: its link table and what it does with it. Its
// parts are defined in mesh.cc (opening links and sending), mesh_receive.cc (the receive loop of
// a link) and mesh_relay.cc (relayed links: the RelayHost the mesh's RelayHub uses).
#pragma once

#include <array>
#include <atomic>
#include <map>
#include <memory>
#include <set>
#include <utility>

#include "net/mesh/mesh.h"
#include "net/mesh/mesh_links.h"
#include "net/relay/relay_hub.h"
#include "net/wire/handshake_server.h"

namespace gossamer::net {

namespace detail {

struct AtomicCounters {
  std::atomic<std::uint64_t> framesSent{0};
  std::atomic<std::uint64_t> bytesSent{0};
  std::atomic<std::uint64_t> framesReceived{0};
  std::atomic<std::uint64_t> bytesReceived{0};
};

// Links the mesh opened other than by a dial, for Mesh's counters.
struct LinkTallies {
  std::atomic<std::uint64_t> reversed{0};
  std::atomic<std::uint64_t> reversalsTimedOut{0};
  std::atomic<std::uint64_t> punched{0};
  std::atomic<std::uint64_t> relayed{0};
};

inline Traffic trafficOf(const wire::EnvelopeHeader& header) {
  return header.route == wire::Route::runtime ? Traffic::runtime : Traffic::algorithm;
}

}  // namespace detail

struct Mesh::State : std::enable_shared_from_this<Mesh::State>, relay::RelayHost {
  using LinkEntry = detail::LinkEntry;
  using Reversal = detail::Reversal;
  using SendOrder = detail::SendOrder;
  using Clock = std::chrono::steady_clock;

  State(asio::io_context& ioContext, Transport& t, MeshOptions o)
      : io(ioContext),
        transport(t),
        options(std::move(o)),
        relays(std::make_unique<relay::RelayHub>(ioContext, *this, options.relay)) {}

  asio::io_context& io;
  Transport& transport;
  MeshOptions options;
  MembershipHandler membershipHandler;
  EnvelopeHandler envelopeHandler;
  EnvelopeTarget envelopeTarget;
  Reverser reverser;
  std::map<std::pair<Endpoint, Channel>, std::shared_ptr<LinkEntry>> outbound;
  std::set<std::shared_ptr<LinkEntry>> inbound;
  std::map<std::pair<Endpoint, Channel>, std::shared_ptr<Reversal>> reversals;
  detail::LinkTallies tallies;
  std::map<Endpoint, std::shared_ptr<detail::FollowedPunch>> following;  // by the lead's address
  // One per (to, channel) with sends outstanding.
  std::map<std::pair<Endpoint, Channel>, std::shared_ptr<SendOrder>> sendOrders;
  bool closed = false;
  std::array<detail::AtomicCounters, kTrafficKinds> counters;
  std::unique_ptr<relay::RelayHub> relays;  // relayed links: this peer as an end or the relay

  detail::AtomicCounters& countersOf(Traffic traffic) {
    return counters[static_cast<std::size_t>(traffic)];
  }

  // The open inbound link from the peer listening at `to` for `channel`, if any.
  std::shared_ptr<LinkEntry> openInbound(const Endpoint& to, Channel channel) const {
    for (const auto& entry : inbound)
      if (entry->open && entry->usable && entry->channel == channel && entry->remote.listen == to)
        return entry;
    return nullptr;
  }

  // The open link with the peer listening at `to` that carries both channels (punched or
  // relayed), if any.
  std::shared_ptr<LinkEntry> pairLinkWith(const Endpoint& to) const {
    for (const auto& [key, entry] : outbound)
      if (entry->bothChannels() && entry->open && key.first == to) return entry;
    for (const auto& entry : inbound)
      if (entry->bothChannels() && entry->open && entry->remote.listen == to) return entry;
    return nullptr;
  }

  // The open link a send to `to` for `channel` takes without connecting (linkTo's order), if any.
  std::shared_ptr<LinkEntry> openLinkTo(const Endpoint& to, Channel channel) const {
    if (auto pair = pairLinkWith(to)) return pair;
    const auto it = outbound.find({to, channel});
    if (it != outbound.end()) return it->second->open ? it->second : nullptr;
    return openInbound(to, channel);
  }

  void reversedBoth(const Endpoint& from) {
    for (std::size_t c = 0; c < kChannels; ++c) reversed(from, static_cast<Channel>(c));
  }

  // ---- links (mesh.cc) ----
  void drop(const std::shared_ptr<LinkEntry>& entry);
  // This peer's open outbound link to (to, channel), connecting and authenticating it first if
  // needed; null with `outcome` saying why when that fails within `timeout`.
  static asio::awaitable<std::shared_ptr<LinkEntry>> linkTo(std::shared_ptr<State> self,
                                                            Endpoint to, Channel channel,
                                                            std::chrono::milliseconds timeout,
                                                            LinkOutcome& outcome);
  // Waits for the link the remote was asked to open (linkTo) until `deadline`.
  static asio::awaitable<std::shared_ptr<LinkEntry>> awaitReversed(
      std::shared_ptr<State> self, std::pair<Endpoint, Channel> key,
      std::shared_ptr<Reversal> reversal, Clock::time_point deadline, LinkOutcome& outcome);
  // An inbound link opened for `channel`: the senders waiting for it (awaitReversed) go on.
  void reversed(const Endpoint& from, Channel channel);
  // Keeps a link whose server handshake passed as the remote's, and starts it. A pair link
  // (punched or relayed) carries both channels.
  void adoptInbound(wire::AuthenticatedLink authenticated, bool punched, bool relayed);
  // Keeps a pair link this peer leads (punched or relayed) as its own for the channel, and
  // starts it.
  void adoptPair(const Endpoint& member, Channel channel, std::unique_ptr<Link> link,
                 const Remote& remote, bool relayed);
  static asio::awaitable<LinkOutcome> punch(std::shared_ptr<State> self, Endpoint member,
                                            std::uint64_t expected, Endpoint at, Channel channel,
                                            bool lead, std::chrono::milliseconds timeout);
  static asio::awaitable<LinkOutcome> open(std::shared_ptr<State> self, Endpoint to,
                                           Channel channel, std::chrono::milliseconds timeout);
  static asio::awaitable<std::error_code> sendMembership(std::shared_ptr<State> self, Endpoint to,
                                                         wire::MembershipMessage message,
                                                         std::chrono::milliseconds timeout);
  static asio::awaitable<std::error_code> sendEnvelope(
      std::shared_ptr<State> self, Endpoint to, Channel channel,
      std::shared_ptr<const EncodedEnvelope> envelope,
      std::vector<std::span<const std::byte>> payloads, std::chrono::milliseconds timeout);
  static asio::awaitable<std::error_code> send(std::shared_ptr<State> self, Endpoint to,
                                               Channel channel, Traffic traffic,
                                               std::span<const std::byte> header,
                                               std::vector<std::span<const std::byte>> payloads,
                                               std::chrono::milliseconds timeout);

  // ---- receiving (mesh_receive.cc) ----
  // Installs the payload target and starts the receive loop of an open link.
  void start(const std::shared_ptr<LinkEntry>& entry);
  static asio::awaitable<void> receiveLoop(std::shared_ptr<State> self,
                                           std::shared_ptr<LinkEntry> entry);
  static bool descriptorsMatch(const wire::EnvelopeHeader& header,
                               const std::vector<Payload>& payloads);

  // ---- relayed links (mesh_relay.cc) ----
  static asio::awaitable<LinkOutcome> relay(std::shared_ptr<State> self, Endpoint via,
                                            Endpoint member, std::uint64_t expected,
                                            Channel channel, std::chrono::milliseconds timeout);
  asio::awaitable<std::error_code> sendOnLink(Endpoint at, std::uint64_t peer,
                                              std::vector<std::byte> header,
                                              std::span<const std::byte> payload,
                                              bool mayOpen) override;
  asio::awaitable<std::error_code> sendTo(Endpoint to, std::vector<std::byte> header,
                                          std::span<const std::byte> payload) override;
  void adopt(wire::AuthenticatedLink link, Endpoint via) override;
};

}  // namespace gossamer::net
