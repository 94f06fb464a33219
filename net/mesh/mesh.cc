#include "net/mesh/mesh.h"

#include <algorithm>
#include <utility>

#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/experimental/awaitable_operators.hpp>
#include <asio/steady_timer.hpp>
#include <fmt/format.h>

#include "engine/base/log.h"
#include "net/link_support.h"
#include "net/mesh/mesh_state.h"

namespace gossamer::net {
namespace {

using Clock = std::chrono::steady_clock;
using detail::kUseTuple;
using detail::LinkEntry;
using detail::Reversal;
using detail::SendOrder;
using namespace asio::experimental::awaitable_operators;

std::size_t payloadBytes(const std::vector<std::span<const std::byte>>& payloads) {
  std::size_t total = 0;
  for (const auto& payload : payloads) total += payload.size();
  return total;
}

}  // namespace

void Mesh::State::drop(const std::shared_ptr<LinkEntry>& entry) {
  if (entry->link) entry->link->close();
  // Relayed streams ride the data link (or a pair link) between a relay and an end.
  if (entry->open && !entry->relayed && entry->usable &&
      (entry->channel == Channel::data || entry->punched))
    relays->linkLost(entry->remote.peerId, entry->remote.listen);
  if (entry->outbound) {
    const auto it = outbound.find({entry->dialed, entry->channel});
    if (it != outbound.end() && it->second == entry) outbound.erase(it);
  } else {
    inbound.erase(entry);
  }
}

asio::awaitable<std::shared_ptr<LinkEntry>> Mesh::State::linkTo(std::shared_ptr<State> self,
                                                                Endpoint to, Channel channel,
                                                                std::chrono::milliseconds timeout,
                                                                LinkOutcome& outcome) {
  const Clock::time_point deadline = Clock::now() + timeout;
  if (self->closed) {
    outcome.error = asio::error::operation_aborted;
    co_return nullptr;
  }
  // A punched or relayed link is the pair's one link for both channels: while it is open it
  // serves, whatever else is being opened (a dial of the member's advertised address, before this
  // peer heard that it is dial-out only, hangs until its deadline).
  if (std::shared_ptr<LinkEntry> pair = self->pairLinkWith(to)) co_return pair;
  // A link, once open, carries traffic both ways: the remote's link to this peer for the same
  // channel serves when this peer has none of its own (and keeps serving while it is open:
  // one link per pair and channel keeps the frames in order).
  if (!self->outbound.count({to, channel})) {
    if (std::shared_ptr<LinkEntry> in = self->openInbound(to, channel)) co_return in;
  }
  if (const auto it = self->outbound.find({to, channel}); it != self->outbound.end()) {
    std::shared_ptr<LinkEntry> entry = it->second;
    if (!entry->finished) {  // someone else is connecting: wait for the outcome
      asio::steady_timer timer(self->io, deadline);
      co_await (entry->settled.async_wait(kUseTuple) || timer.async_wait(kUseTuple));
    }
    if (entry->open) co_return entry;
    // It failed or is still opening, but the remote opened its own link meanwhile: that one
    // serves (as after a failed dial, below).
    if (std::shared_ptr<LinkEntry> in = self->openInbound(to, channel)) co_return in;
    if (entry->finished) {
      outcome = LinkOutcome{entry->failure, entry->failureReason};
    } else {
      outcome.error = asio::error::timed_out;
      outcome.reason = fmt::format("this peer's own {} link to {} was still opening",
                                   channel == Channel::control ? "control" : "data", to.str());
    }
    log::get("net")->debug(
        "no {} link to {}: {}{}{}", channel == Channel::control ? "control" : "data", to.str(),
        outcome.error.message(), outcome.reason.empty() ? "" : ": ", outcome.reason);
    co_return nullptr;
  }

  // Connection reversal: the peer there cannot be dialed; it was asked to open the link.
  const std::pair<Endpoint, Channel> key{to, channel};
  if (!self->reversals.count(key) && self->reverser && self->reverser(to, channel))
    self->reversals.emplace(key, std::make_shared<Reversal>(self->io.get_executor()));
  if (const auto it = self->reversals.find(key); it != self->reversals.end())
    co_return co_await awaitReversed(self, key, it->second, deadline, outcome);

  auto entry = std::make_shared<LinkEntry>(self->io.get_executor(), true);
  entry->dialed = to;
  entry->channel = channel;
  self->outbound[{to, channel}] = entry;
  const LinkOutcome dialed =
      co_await detail::dial(self->transport, self->options.handshake, to,
                            static_cast<std::uint8_t>(channel), deadline, entry->link);
  const std::error_code failure = dialed.error;
  entry->remote = dialed.remote;
  entry->failureReason = dialed.reason;
  entry->finished = true;
  entry->settled.cancel();
  if (failure || self->closed) {
    entry->failure = failure ? failure : std::error_code(asio::error::operation_aborted);
    self->drop(entry);
    // The remote opened its own link meanwhile (a member that cannot be dialed, which this peer
    // had not heard yet, opening the link another member asked it for): that one serves.
    if (!self->closed)
      if (std::shared_ptr<LinkEntry> in = self->openInbound(to, channel)) co_return in;
    outcome = LinkOutcome{entry->failure, entry->failureReason};
    log::get("net")->debug("no {} link to {}: dialing it failed: {}",
                           channel == Channel::control ? "control" : "data", to.str(),
                           entry->failure.message());
    co_return nullptr;
  }
  self->start(entry);
  co_return entry;
}

asio::awaitable<std::shared_ptr<LinkEntry>> Mesh::State::awaitReversed(
    std::shared_ptr<State> self, std::pair<Endpoint, Channel> key,
    std::shared_ptr<Reversal> reversal, Clock::time_point deadline, LinkOutcome& outcome) {
  ++reversal->waiters;
  asio::steady_timer timer(self->io, deadline);
  co_await (reversal->arrived.async_wait(kUseTuple) || timer.async_wait(kUseTuple));
  --reversal->waiters;
  if (std::shared_ptr<LinkEntry> in = self->openInbound(key.first, key.second)) co_return in;
  if (std::shared_ptr<LinkEntry> punched = self->pairLinkWith(key.first)) co_return punched;
  // The last waiter gives up the request: the next send asks again.
  const auto it = self->reversals.find(key);
  if (reversal->waiters == 0 && it != self->reversals.end() && it->second == reversal &&
      !self->closed) {
    self->reversals.erase(it);
    ++self->tallies.reversalsTimedOut;
  }
  outcome.error = self->closed ? asio::error::operation_aborted : asio::error::timed_out;
  outcome.reason = fmt::format(
      "{} cannot be dialed and did not open the link it was asked for in time", key.first.str());
  log::get("net")->debug("no {} link to {}: {}",
                         key.second == Channel::control ? "control" : "data", key.first.str(),
                         outcome.reason);
  co_return nullptr;
}

void Mesh::State::reversed(const Endpoint& from, Channel channel) {
  const auto it = reversals.find({from, channel});
  if (it == reversals.end()) return;
  it->second->arrived.expires_at(Clock::time_point::min());
  reversals.erase(it);
  ++tallies.reversed;
}

void Mesh::State::adoptInbound(wire::AuthenticatedLink authenticated, bool punched, bool relayed) {
  auto entry = std::make_shared<LinkEntry>(io.get_executor(), false);
  entry->link = std::move(authenticated.link);
  entry->remote = Remote{authenticated.hello.remotePeerId, authenticated.hello.remoteListen,
                         entry->link->remoteAddress()};
  entry->usable = authenticated.hello.remoteChannel < kChannels;
  if (entry->usable) entry->channel = static_cast<Channel>(authenticated.hello.remoteChannel);
  entry->punched = punched;
  entry->relayed = relayed;
  // The lead's side of a punch this peer follows, which the handshake server took.
  if (const auto it = following.find(entry->remote.listen);
      !punched && !relayed && it != following.end() &&
      entry->remote.peerId == it->second->expected &&
      entry->link->remoteAddress() == it->second->at.str()) {
    entry->punched = true;
    it->second->remote = entry->remote;
    it->second->adopted.cancel();
    following.erase(it);
  }
  inbound.insert(entry);
  start(entry);
  if (entry->bothChannels()) return reversedBoth(entry->remote.listen);
  if (entry->usable) reversed(entry->remote.listen, entry->channel);
}

void Mesh::State::adoptPair(const Endpoint& member, Channel channel, std::unique_ptr<Link> link,
                            const Remote& remote, bool relayed) {
  const auto it = outbound.find({member, channel});
  if (it != outbound.end()) drop(it->second);
  auto entry = std::make_shared<LinkEntry>(io.get_executor(), true);
  entry->link = std::move(link);
  entry->dialed = member;
  entry->channel = channel;
  entry->remote = remote;
  entry->finished = true;
  entry->punched = !relayed;
  entry->relayed = relayed;
  outbound[{member, channel}] = entry;
  start(entry);
  reversedBoth(member);
}

asio::awaitable<LinkOutcome> Mesh::State::punch(std::shared_ptr<State> self, Endpoint member,
                                                std::uint64_t expected, Endpoint at,
                                                Channel channel, bool lead,
                                                std::chrono::milliseconds timeout) {
  if (self->closed) co_return LinkOutcome{asio::error::operation_aborted, {}, {}};
  if (const std::shared_ptr<LinkEntry> open = self->pairLinkWith(member))
    co_return LinkOutcome{{}, {}, open->remote};  // one per pair: it carries both channels
  std::unique_ptr<Link> link;
  wire::HandshakeResult hello;
  LinkOutcome outcome;
  if (lead) {
    outcome = co_await detail::punch(self->transport, self->options.handshake, member, expected, at,
                                     channel, lead, timeout, link, hello);
  } else {
    // The lead's connect may reach this peer's listener before its punch waits for it there:
    // the handshake server then takes it (adoptInbound), and this punch ends with that link.
    for (const std::shared_ptr<LinkEntry>& entry : self->inbound) {
      if (!entry->open || entry->remote.listen != member || entry->remote.peerId != expected ||
          entry->link->remoteAddress() != at.str())
        continue;
      entry->punched = true;
      ++self->tallies.punched;
      self->reversedBoth(member);
      co_return LinkOutcome{{}, {}, entry->remote};
    }
    auto follow = std::make_shared<detail::FollowedPunch>(self->io.get_executor(), at, expected);
    self->following[member] = follow;
    auto raced = co_await (detail::punch(self->transport, self->options.handshake, member, expected,
                                         at, channel, lead, timeout, link, hello) ||
                           follow->adopted.async_wait(kUseTuple));
    if (const auto it = self->following.find(member);
        it != self->following.end() && it->second == follow)
      self->following.erase(it);
    if (raced.index() == 1) {
      if (link) link->close();
      ++self->tallies.punched;
      co_return LinkOutcome{{}, {}, follow->remote};
    }
    outcome = std::get<0>(std::move(raced));
  }
  if (!outcome.ok() || self->closed) {
    if (link) link->close();
    if (outcome.ok()) outcome.error = asio::error::operation_aborted;
    co_return outcome;
  }
  ++self->tallies.punched;
  if (lead)
    self->adoptPair(member, channel, std::move(link), outcome.remote, false);
  else
    self->adoptInbound(wire::AuthenticatedLink{std::move(link), hello}, true, false);
  co_return outcome;
}

asio::awaitable<LinkOutcome> Mesh::State::open(std::shared_ptr<State> self, Endpoint to,
                                               Channel channel, std::chrono::milliseconds timeout) {
  LinkOutcome outcome;
  const std::shared_ptr<LinkEntry> entry =
      co_await linkTo(std::move(self), std::move(to), channel, timeout, outcome);
  if (entry) outcome.remote = entry->remote;
  co_return outcome;
}

asio::awaitable<std::error_code> Mesh::State::sendMembership(std::shared_ptr<State> self,
                                                             Endpoint to,
                                                             wire::MembershipMessage message,
                                                             std::chrono::milliseconds timeout) {
  const std::vector<std::byte> header = wire::encodeMembership(message);
  // (A named empty vector: GCC 12 destroys a braced temporary inside co_await twice.)
  std::vector<std::span<const std::byte>> noPayloads;
  co_return co_await send(std::move(self), std::move(to), Channel::control, Traffic::membership,
                          header, std::move(noPayloads), timeout);
}

asio::awaitable<std::error_code> Mesh::State::sendEnvelope(
    std::shared_ptr<State> self, Endpoint to, Channel channel,
    std::shared_ptr<const EncodedEnvelope> envelope,
    std::vector<std::span<const std::byte>> payloads, std::chrono::milliseconds timeout) {
  co_return co_await send(std::move(self), std::move(to), channel, envelope->traffic,
                          envelope->bytes, std::move(payloads), timeout);
}

asio::awaitable<std::error_code> Mesh::State::send(std::shared_ptr<State> self, Endpoint to,
                                                   Channel channel, Traffic traffic,
                                                   std::span<const std::byte> header,
                                                   std::vector<std::span<const std::byte>> payloads,
                                                   std::chrono::milliseconds timeout) {
  const std::pair<Endpoint, Channel> key{to, channel};
  std::shared_ptr<SendOrder>& slot = self->sendOrders[key];
  if (!slot) slot = std::make_shared<SendOrder>();
  const std::shared_ptr<SendOrder> order = slot;
  const std::uint64_t ticket = order->take();
  LinkOutcome opened;
  std::shared_ptr<LinkEntry> entry = co_await linkTo(self, to, channel, timeout, opened);
  if (entry) co_await order->waitTurn(ticket);
  order->release(ticket);
  if (order->idle()) self->sendOrders.erase(key);
  if (!entry) co_return opened.error;
  // Nothing suspends between the release and the link send's start: this frame keeps its place.
  const std::size_t bytes = header.size() + payloadBytes(payloads);
  const std::error_code error = co_await entry->link->send(OutFrame(header, std::move(payloads)));
  if (error) {
    self->drop(entry);
    co_return error;
  }
  detail::AtomicCounters& c = self->countersOf(traffic);
  ++c.framesSent;
  c.bytesSent += bytes;
  co_return std::error_code{};
}

Mesh::Mesh(asio::io_context& io, Transport& transport, MeshOptions options)
    : state_(std::make_shared<State>(io, transport, std::move(options))) {}

Mesh::~Mesh() { close(); }

void Mesh::onMembership(MembershipHandler handler) {
  state_->membershipHandler = std::move(handler);
}
void Mesh::onEnvelope(EnvelopeHandler handler) { state_->envelopeHandler = std::move(handler); }
void Mesh::setEnvelopeTarget(EnvelopeTarget target) { state_->envelopeTarget = std::move(target); }
void Mesh::setReverser(Reverser reverser) { state_->reverser = std::move(reverser); }

std::error_code Mesh::listen(const Endpoint& local) {
  if (const std::error_code error = state_->transport.listen(local)) return error;
  Endpoint advertised = state_->transport.localEndpoint();
  if (!state_->options.advertise.host.empty()) {
    advertised.host = state_->options.advertise.host;
    if (state_->options.advertise.port != 0) advertised.port = state_->options.advertise.port;
  }
  state_->options.handshake.listen = advertised;
  std::weak_ptr<State> weak = state_;
  auto onLink = [weak](wire::AuthenticatedLink authenticated) {
    const auto self = weak.lock();
    if (self && !self->closed) self->adoptInbound(std::move(authenticated), false, false);
  };
  asio::co_spawn(state_->io,
                 wire::serveHandshakes(state_->transport, state_->options.handshake, onLink),
                 asio::detached);
  return {};
}

Endpoint Mesh::localEndpoint() const { return state_->options.handshake.listen; }
std::uint64_t Mesh::selfId() const { return state_->options.handshake.peerId; }
const wire::IdentityKey& Mesh::identityKey() const {
  return state_->options.handshake.identity->publicKey();
}
const std::shared_ptr<wire::IdentityBook>& Mesh::identityBook() const {
  return state_->options.handshake.book;
}

asio::awaitable<LinkOutcome> Mesh::open(Endpoint to, Channel channel,
                                        std::chrono::milliseconds connectTimeout) {
  return State::open(state_, std::move(to), channel, connectTimeout);
}

asio::awaitable<std::error_code> Mesh::sendMembership(Endpoint to, wire::MembershipMessage message,
                                                      std::chrono::milliseconds connectTimeout) {
  return State::sendMembership(state_, std::move(to), std::move(message), connectTimeout);
}

asio::awaitable<std::error_code> Mesh::sendEnvelope(
    Endpoint to, Channel channel, std::shared_ptr<const EncodedEnvelope> envelope,
    std::vector<std::span<const std::byte>> payloads, std::chrono::milliseconds connectTimeout) {
  return State::sendEnvelope(state_, std::move(to), channel, std::move(envelope),
                             std::move(payloads), connectTimeout);
}

asio::awaitable<std::error_code> Mesh::sendEnvelope(
    Endpoint to, Channel channel, wire::EnvelopeHeader header,
    std::vector<std::span<const std::byte>> payloads, std::chrono::milliseconds connectTimeout) {
  if (header.payloads.empty()) {
    for (const auto& payload : payloads)
      header.payloads.push_back({payload.size(), wire::Dtype::bytes, payload.size()});
  }
  return State::sendEnvelope(state_, std::move(to), channel, EncodedEnvelope::of(header),
                             std::move(payloads), connectTimeout);
}

std::shared_ptr<const EncodedEnvelope> EncodedEnvelope::of(const wire::EnvelopeHeader& header) {
  return std::make_shared<const EncodedEnvelope>(
      EncodedEnvelope{wire::encodeEnvelope(header), detail::trafficOf(header)});
}

asio::awaitable<LinkOutcome> Mesh::dialBack(Endpoint to, std::chrono::milliseconds timeout) {
  const std::shared_ptr<State> self = state_;  // the awaitable keeps the state alive
  std::unique_ptr<Link> link;
  const LinkOutcome outcome =
      co_await detail::dial(self->transport, self->options.handshake, std::move(to),
                            kDialBackChannel, Clock::now() + timeout, link);
  if (link) link->close();
  co_return outcome;
}

asio::awaitable<LinkOutcome> Mesh::punch(Endpoint member, std::uint64_t expected, Endpoint at,
                                         Channel channel, bool lead,
                                         std::chrono::milliseconds timeout) {
  return State::punch(state_, std::move(member), expected, std::move(at), channel, lead, timeout);
}

std::string Mesh::observedAddress(const Endpoint& to) const {
  for (std::size_t c = 0; c < kChannels; ++c) {
    const auto channel = static_cast<Channel>(c);
    if (const auto in = state_->openInbound(to, channel)) return in->link->remoteAddress();
    const auto it = state_->outbound.find({to, channel});
    if (it != state_->outbound.end() && it->second->open) return it->second->link->remoteAddress();
  }
  return {};
}

bool Mesh::hasOpenLink(const Endpoint& to, Channel channel) const {
  // The link a send would take (linkTo's order): a punched or relayed one; else this peer's own
  // when it has one, opening or not; else the remote's.
  return state_->openLinkTo(to, channel) != nullptr;
}

void Mesh::disconnect(const Endpoint& to) {
  std::vector<std::shared_ptr<LinkEntry>> doomed;
  for (std::size_t c = 0; c < kChannels; ++c) {
    const auto it = state_->outbound.find({to, static_cast<Channel>(c)});
    if (it != state_->outbound.end()) doomed.push_back(it->second);
  }
  for (const auto& entry : state_->inbound) {
    if (entry->remote.listen == to) doomed.push_back(entry);
  }
  for (const auto& entry : doomed) state_->drop(entry);
}

void Mesh::close() {
  if (state_->closed) return;
  state_->closed = true;
  state_->transport.close();
  auto outbound = std::move(state_->outbound);
  auto inbound = std::move(state_->inbound);
  for (auto& [key, entry] : outbound) {
    if (entry->link) entry->link->close();
    entry->settled.cancel();
  }
  for (const auto& entry : inbound) entry->link->close();
  for (auto& [key, reversal] : std::exchange(state_->reversals, {}))
    reversal->arrived.expires_at(Clock::time_point::min());
  state_->relays->close();
}

std::uint64_t Mesh::linksReversed() const { return state_->tallies.reversed.load(); }
std::uint64_t Mesh::reversalsTimedOut() const { return state_->tallies.reversalsTimedOut.load(); }
std::uint64_t Mesh::linksPunched() const { return state_->tallies.punched.load(); }

TrafficCounters Mesh::counters(Traffic traffic) const {
  const detail::AtomicCounters& c = state_->counters[static_cast<std::size_t>(traffic)];
  return TrafficCounters{c.framesSent.load(), c.bytesSent.load(), c.framesReceived.load(),
                         c.bytesReceived.load()};
}

}  // namespace gossamer::net
