// Relayed links in the mesh: the RelayHost its RelayHub sends through, and Mesh::relay (mesh.h
// states the contracts; net/relay/relay_hub.h the protocol).
#include <utility>

#include "net/mesh/mesh_state.h"

namespace gossamer::net {

asio::awaitable<std::error_code> Mesh::State::sendOnLink(Endpoint at, std::uint64_t peer,
                                                         std::vector<std::byte> header,
                                                         std::span<const std::byte> payload,
                                                         bool mayOpen) {
  const std::shared_ptr<State> self = shared_from_this();
  if (mayOpen) {
    // Half the handshake timeout: the source's relayed handshake waits that long in all, so a
    // refusal sent after a failed dial must reach it with time to spare (a closed port is
    // retried until the deadline, as for a peer still starting).
    const LinkOutcome opened =
        co_await open(self, at, Channel::data, options.handshake.timeout / 2);
    if (!opened.ok()) co_return opened.error;
  }
  const std::shared_ptr<LinkEntry> link = openLinkTo(at, Channel::data);
  if (!link || link->remote.peerId != peer) co_return asio::error::not_connected;
  std::vector<std::span<const std::byte>> payloads;
  if (!payload.empty()) payloads.push_back(payload);
  // The link is open: the send takes it without connecting.
  co_return co_await send(self, std::move(at), Channel::data, Traffic::relay, header,
                          std::move(payloads), options.handshake.timeout);
}

asio::awaitable<std::error_code> Mesh::State::sendTo(Endpoint to, std::vector<std::byte> header,
                                                     std::span<const std::byte> payload) {
  const std::shared_ptr<State> self = shared_from_this();
  std::vector<std::span<const std::byte>> payloads;
  if (!payload.empty()) payloads.push_back(payload);
  co_return co_await send(self, std::move(to), Channel::data, Traffic::relay, header,
                          std::move(payloads), options.handshake.timeout);
}

void Mesh::State::adopt(wire::AuthenticatedLink link, Endpoint /*via*/) {
  if (closed) return link.link->close();
  ++tallies.relayed;
  adoptInbound(std::move(link), false, true);
}

asio::awaitable<LinkOutcome> Mesh::State::relay(std::shared_ptr<State> self, Endpoint via,
                                                Endpoint member, std::uint64_t expected,
                                                Channel channel,
                                                std::chrono::milliseconds timeout) {
  if (self->closed) co_return LinkOutcome{asio::error::operation_aborted, {}, {}};
  if (const std::shared_ptr<LinkEntry> open = self->pairLinkWith(member))
    co_return LinkOutcome{{}, {}, open->remote};  // it carries both channels
  relay::RelayedLinkResult result = co_await self->relays->open(
      self->options.handshake, std::move(via), member, expected, channel, timeout);
  if (!result.outcome.ok() || self->closed) {
    if (result.link) result.link->close();
    if (result.outcome.ok()) result.outcome.error = asio::error::operation_aborted;
    co_return result.outcome;
  }
  ++self->tallies.relayed;
  self->adoptPair(member, channel, std::move(result.link), result.outcome.remote, true);
  co_return result.outcome;
}

asio::awaitable<LinkOutcome> Mesh::relay(Endpoint via, Endpoint member, std::uint64_t expected,
                                         Channel channel, std::chrono::milliseconds timeout) {
  return State::relay(state_, std::move(via), std::move(member), expected, channel, timeout);
}

std::uint64_t Mesh::linksRelayed() const { return state_->tallies.relayed.load(); }
std::uint64_t Mesh::streamsRelayed() const { return state_->relays->streamsRelayed(); }
std::uint64_t Mesh::bytesRelayed() const { return state_->relays->bytesRelayed(); }

}  // namespace gossamer::net
