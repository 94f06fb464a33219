#include "net/mesh/mesh.h"

#include <algorithm>
#include <array>
#include <exception>
#include <map>
#include <set>
#include <utility>
#include <variant>

#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/experimental/awaitable_operators.hpp>
#include <asio/steady_timer.hpp>

#include "engine/base/log.h"
#include "net/link_support.h"
#include "net/mesh/mesh_links.h"
#include "net/wire/handshake_server.h"

namespace gossamer::net {
namespace {

using Clock = std::chrono::steady_clock;
using detail::kUseTuple;
using detail::LinkEntry;
using detail::Reversal;
using detail::SendOrder;
using namespace asio::experimental::awaitable_operators;

struct AtomicCounters {
  std::atomic<std::uint64_t> framesSent{0};
  std::atomic<std::uint64_t> bytesSent{0};
  std::atomic<std::uint64_t> framesReceived{0};
  std::atomic<std::uint64_t> bytesReceived{0};
};

std::size_t payloadBytes(const std::vector<std::span<const std::byte>>& payloads) {
  std::size_t total = 0;
  for (const auto& payload : payloads) total += payload.size();
  return total;
}

// Runs a user handler; an exception from it is a bug in the handler, logged, never allowed to
// unwind through the receive loop (and so terminate the io thread).
template <typename F>
void guarded(const char* what, F&& f) {
  try {
    f();
  } catch (const std::exception& e) {
    log::get("net")->error("{} handler threw: {}", what, e.what());
  }
}

Traffic trafficOf(const wire::EnvelopeHeader& header) {
  return header.route == wire::Route::runtime ? Traffic::runtime : Traffic::algorithm;
}

}  // namespace

struct Mesh::State : std::enable_shared_from_this<Mesh::State> {
  State(asio::io_context& ioContext, Transport& t, MeshOptions o)
      : io(ioContext), transport(t), options(std::move(o)) {}

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
  std::atomic<std::uint64_t> linksReversed{0};
  std::atomic<std::uint64_t> reversalsTimedOut{0};
  std::atomic<std::uint64_t> linksPunched{0};
  // One per (to, channel) with sends outstanding.
  std::map<std::pair<Endpoint, Channel>, std::shared_ptr<SendOrder>> sendOrders;
  bool closed = false;
  std::array<AtomicCounters, kTrafficKinds> counters;

  AtomicCounters& countersOf(Traffic traffic) {
    return counters[static_cast<std::size_t>(traffic)];
  }

  // The open inbound link from the peer listening at `to` for `channel`, if any.
  std::shared_ptr<LinkEntry> openInbound(const Endpoint& to, Channel channel) const {
    for (const auto& entry : inbound)
      if (entry->open && entry->usable && entry->channel == channel && entry->remote.listen == to)
        return entry;
    return nullptr;
  }

  // The open punched link with the peer listening at `to`, if any (it serves both channels).
  std::shared_ptr<LinkEntry> punchedWith(const Endpoint& to) const {
    for (const auto& [key, entry] : outbound)
      if (entry->punched && entry->open && key.first == to) return entry;
    for (const auto& entry : inbound)
      if (entry->punched && entry->open && entry->remote.listen == to) return entry;
    return nullptr;
  }

  void drop(const std::shared_ptr<LinkEntry>& entry) {
    if (entry->link) entry->link->close();
    if (entry->outbound) {
      const auto it = outbound.find({entry->dialed, entry->channel});
      if (it != outbound.end() && it->second == entry) outbound.erase(it);
    } else {
      inbound.erase(entry);
    }
  }

  // Installs the payload target and starts the receive loop of an open link.
  void start(const std::shared_ptr<LinkEntry>& entry) {
    entry->open = true;
    std::weak_ptr<State> weakSelf = shared_from_this();
    std::weak_ptr<LinkEntry> weakEntry = entry;
    entry->link->setPayloadTarget([weakSelf, weakEntry](std::span<const std::byte> header,
                                                        std::size_t index, std::size_t size) {
      const auto self = weakSelf.lock();
      const auto e = weakEntry.lock();
      if (!self || !e || !self->envelopeTarget) return std::span<std::byte>{};
      if (index == 0) {
        e->targets.clear();
        e->headerError = wire::decodeHeader(header, e->header);
        e->headerDecoded = true;
      }
      const auto* envelope = std::get_if<wire::EnvelopeHeader>(&e->header);
      if (e->headerError || envelope == nullptr) return std::span<std::byte>{};
      Payload target;
      guarded("envelope target",
              [&] { target = self->envelopeTarget(e->remote, *envelope, index, size); });
      if (target.size() != size) return std::span<std::byte>{};  // the pool takes it
      if (e->targets.size() <= index) e->targets.resize(index + 1);
      e->targets[index] = target;
      return target.bytes();
    });
    asio::co_spawn(io, receiveLoop(shared_from_this(), entry), asio::detached);
  }

  static asio::awaitable<void> receiveLoop(std::shared_ptr<State> self,
                                           std::shared_ptr<LinkEntry> entry) {
    auto logger = log::get("net");
    for (;;) {
      InFrame frame;
      const std::error_code error = co_await entry->link->receive(frame);
      if (error) {
        entry->targets.clear();
        entry->headerDecoded = false;
        if (!self->closed && error != asio::error::eof && error != asio::error::operation_aborted)
          logger->debug("link with peer {:016x} ({}) ended: {}", entry->remote.peerId,
                        entry->remote.listen.str(), error.message());
        self->drop(entry);
        co_return;
      }
      // Payloads that landed in target buffers keep their owners alive in the frame.
      for (std::size_t i = 0; i < std::min(entry->targets.size(), frame.payloads.size()); ++i) {
        if (entry->targets[i].size() > 0) frame.payloads[i] = std::move(entry->targets[i]);
      }
      entry->targets.clear();

      // Decoded once: by the payload target when the frame has payloads, else here.
      wire::Header header;
      std::error_code bad;
      if (entry->headerDecoded) {
        header = std::move(entry->header);
        bad = entry->headerError;
        entry->headerDecoded = false;
      } else {
        bad = wire::decodeHeader(frame.header, header);
      }
      if (bad) {
        logger->warn("closing the link with peer {:016x} ({}): undecodable frame header ({})",
                     entry->remote.peerId, entry->remote.listen.str(), bad.message());
        self->drop(entry);
        co_return;
      }
      std::size_t bytes = frame.header.size();
      for (const Payload& payload : frame.payloads) bytes += payload.size();
      if (auto* membership = std::get_if<wire::MembershipMessage>(&header)) {
        AtomicCounters& c = self->countersOf(Traffic::membership);
        ++c.framesReceived;
        c.bytesReceived += bytes;
        if (self->membershipHandler)
          guarded("membership",
                  [&] { self->membershipHandler(entry->remote, std::move(*membership)); });
      } else if (auto* envelope = std::get_if<wire::EnvelopeHeader>(&header)) {
        if (!descriptorsMatch(*envelope, frame.payloads)) {
          logger->warn(
              "closing the link with peer {:016x} ({}): envelope describes {} payloads, "
              "frame carries {} of other sizes",
              entry->remote.peerId, entry->remote.listen.str(), envelope->payloads.size(),
              frame.payloads.size());
          self->drop(entry);
          co_return;
        }
        AtomicCounters& c = self->countersOf(trafficOf(*envelope));
        ++c.framesReceived;
        c.bytesReceived += bytes;
        if (self->envelopeHandler)
          guarded("envelope", [&] {
            self->envelopeHandler(entry->remote, std::move(*envelope), std::move(frame.payloads));
          });
      } else {
        logger->warn(
            "closing the link with peer {:016x} ({}): handshake message after the "
            "handshake",
            entry->remote.peerId, entry->remote.listen.str());
        self->drop(entry);
        co_return;
      }
    }
  }

  static bool descriptorsMatch(const wire::EnvelopeHeader& header,
                               const std::vector<Payload>& payloads) {
    if (header.payloads.size() != payloads.size()) return false;
    for (std::size_t i = 0; i < payloads.size(); ++i) {
      if (header.payloads[i].size != payloads[i].size()) return false;
    }
    return true;
  }

  // This peer's open outbound link to (to, channel), connecting and authenticating it first if
  // needed; null with `outcome` saying why when that fails within `timeout`.
  static asio::awaitable<std::shared_ptr<LinkEntry>> linkTo(std::shared_ptr<State> self,
                                                            Endpoint to, Channel channel,
                                                            std::chrono::milliseconds timeout,
                                                            LinkOutcome& outcome) {
    const Clock::time_point deadline = Clock::now() + timeout;
    if (self->closed) {
      outcome.error = asio::error::operation_aborted;
      co_return nullptr;
    }
    // A link, once open, carries traffic both ways: the remote's link to this peer for the same
    // channel serves when this peer has none of its own (and keeps serving while it is open:
    // one link per pair and channel keeps the frames in order).
    if (!self->outbound.count({to, channel})) {
      if (std::shared_ptr<LinkEntry> in = self->openInbound(to, channel)) co_return in;
      if (std::shared_ptr<LinkEntry> punched = self->punchedWith(to)) co_return punched;
    }
    if (const auto it = self->outbound.find({to, channel}); it != self->outbound.end()) {
      std::shared_ptr<LinkEntry> entry = it->second;
      if (!entry->finished) {  // someone else is connecting: wait for the outcome
        asio::steady_timer timer(self->io, deadline);
        co_await (entry->settled.async_wait(kUseTuple) || timer.async_wait(kUseTuple));
      }
      if (entry->open) co_return entry;
      if (entry->finished) {
        outcome = LinkOutcome{entry->failure, entry->failureReason};
      } else {
        outcome.error = asio::error::timed_out;
      }
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
      outcome = LinkOutcome{entry->failure, entry->failureReason};
      co_return nullptr;
    }
    self->start(entry);
    co_return entry;
  }

  // Waits for the link the remote was asked to open (linkTo) until `deadline`.
  static asio::awaitable<std::shared_ptr<LinkEntry>> awaitReversed(
      std::shared_ptr<State> self, std::pair<Endpoint, Channel> key,
      std::shared_ptr<Reversal> reversal, Clock::time_point deadline, LinkOutcome& outcome) {
    ++reversal->waiters;
    asio::steady_timer timer(self->io, deadline);
    co_await (reversal->arrived.async_wait(kUseTuple) || timer.async_wait(kUseTuple));
    --reversal->waiters;
    if (std::shared_ptr<LinkEntry> in = self->openInbound(key.first, key.second)) co_return in;
    if (std::shared_ptr<LinkEntry> punched = self->punchedWith(key.first)) co_return punched;
    // The last waiter gives up the request: the next send asks again.
    const auto it = self->reversals.find(key);
    if (reversal->waiters == 0 && it != self->reversals.end() && it->second == reversal &&
        !self->closed) {
      self->reversals.erase(it);
      ++self->reversalsTimedOut;
    }
    outcome.error = self->closed ? asio::error::operation_aborted : asio::error::timed_out;
    outcome.reason = fmt::format(
        "{} cannot be dialed and did not open the link it was asked for in time", key.first.str());
    co_return nullptr;
  }

  // An inbound link opened for `channel`: the senders waiting for it (awaitReversed) go on.
  void reversed(const Endpoint& from, Channel channel) {
    const auto it = reversals.find({from, channel});
    if (it == reversals.end()) return;
    it->second->arrived.expires_at(Clock::time_point::min());
    reversals.erase(it);
    ++linksReversed;
  }

  // Keeps a link whose server handshake passed as the remote's, and starts it.
  void adoptInbound(wire::AuthenticatedLink authenticated, bool punched = false) {
    auto entry = std::make_shared<LinkEntry>(io.get_executor(), false);
    entry->link = std::move(authenticated.link);
    entry->remote = Remote{authenticated.hello.remotePeerId, authenticated.hello.remoteListen,
                           entry->link->remoteAddress()};
    entry->usable = authenticated.hello.remoteChannel < kChannels;
    if (entry->usable) entry->channel = static_cast<Channel>(authenticated.hello.remoteChannel);
    entry->punched = punched;
    inbound.insert(entry);
    start(entry);
    if (punched) return reversedBoth(entry->remote.listen);
    if (entry->usable) reversed(entry->remote.listen, entry->channel);
  }

  // Keeps the link a punch opened with this peer as the lead as this peer's own for the
  // channel, and starts it.
  void adoptPunched(const Endpoint& member, Channel channel, std::unique_ptr<Link> link,
                    const Remote& remote) {
    const auto it = outbound.find({member, channel});
    if (it != outbound.end()) drop(it->second);
    auto entry = std::make_shared<LinkEntry>(io.get_executor(), true);
    entry->link = std::move(link);
    entry->dialed = member;
    entry->channel = channel;
    entry->remote = remote;
    entry->finished = true;
    entry->punched = true;
    outbound[{member, channel}] = entry;
    start(entry);
    reversedBoth(member);
  }

  void reversedBoth(const Endpoint& from) {
    for (std::size_t c = 0; c < kChannels; ++c) reversed(from, static_cast<Channel>(c));
  }

  static asio::awaitable<LinkOutcome> punch(std::shared_ptr<State> self, Endpoint member,
                                            std::uint64_t expected, Endpoint at, Channel channel,
                                            bool lead, std::chrono::milliseconds timeout) {
    if (self->closed) co_return LinkOutcome{asio::error::operation_aborted, {}, {}};
    if (const std::shared_ptr<LinkEntry> open = self->punchedWith(member))
      co_return LinkOutcome{{}, {}, open->remote};  // one per pair: it carries both channels
    std::unique_ptr<Link> link;
    wire::HandshakeResult hello;
    LinkOutcome outcome = co_await detail::punch(self->transport, self->options.handshake, member,
                                                 expected, at, channel, lead, timeout, link, hello);
    if (!outcome.ok() || self->closed) {
      if (link) link->close();
      if (outcome.ok()) outcome.error = asio::error::operation_aborted;
      co_return outcome;
    }
    ++self->linksPunched;
    if (lead)
      self->adoptPunched(member, channel, std::move(link), outcome.remote);
    else
      self->adoptInbound(wire::AuthenticatedLink{std::move(link), hello}, true);
    co_return outcome;
  }

  static asio::awaitable<LinkOutcome> open(std::shared_ptr<State> self, Endpoint to,
                                           Channel channel, std::chrono::milliseconds timeout) {
    LinkOutcome outcome;
    const std::shared_ptr<LinkEntry> entry =
        co_await linkTo(std::move(self), std::move(to), channel, timeout, outcome);
    if (entry) outcome.remote = entry->remote;
    co_return outcome;
  }

  static asio::awaitable<std::error_code> sendMembership(std::shared_ptr<State> self, Endpoint to,
                                                         wire::MembershipMessage message,
                                                         std::chrono::milliseconds timeout) {
    const std::vector<std::byte> header = wire::encodeMembership(message);
    // (A named empty vector: GCC 12 destroys a braced temporary inside co_await twice.)
    std::vector<std::span<const std::byte>> noPayloads;
    co_return co_await send(std::move(self), std::move(to), Channel::control, Traffic::membership,
                            header, std::move(noPayloads), timeout);
  }

  static asio::awaitable<std::error_code> sendEnvelope(
      std::shared_ptr<State> self, Endpoint to, Channel channel,
      std::shared_ptr<const EncodedEnvelope> envelope,
      std::vector<std::span<const std::byte>> payloads, std::chrono::milliseconds timeout) {
    co_return co_await send(std::move(self), std::move(to), channel, envelope->traffic,
                            envelope->bytes, std::move(payloads), timeout);
  }

  static asio::awaitable<std::error_code> send(std::shared_ptr<State> self, Endpoint to,
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
    AtomicCounters& c = self->countersOf(traffic);
    ++c.framesSent;
    c.bytesSent += bytes;
    co_return std::error_code{};
  }
};

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
    if (self && !self->closed) self->adoptInbound(std::move(authenticated));
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
      EncodedEnvelope{wire::encodeEnvelope(header), trafficOf(header)});
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
  // The link a send would take (linkTo's order): this peer's own when it has one, opening or
  // not; else the remote's, or a punched one.
  const auto it = state_->outbound.find({to, channel});
  if (it != state_->outbound.end()) return it->second->open;
  return state_->openInbound(to, channel) != nullptr || state_->punchedWith(to) != nullptr;
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
}

std::uint64_t Mesh::linksReversed() const { return state_->linksReversed.load(); }
std::uint64_t Mesh::reversalsTimedOut() const { return state_->reversalsTimedOut.load(); }
std::uint64_t Mesh::linksPunched() const { return state_->linksPunched.load(); }

TrafficCounters Mesh::counters(Traffic traffic) const {
  const AtomicCounters& c = state_->counters[static_cast<std::size_t>(traffic)];
  return TrafficCounters{c.framesSent.load(), c.bytesSent.load(), c.framesReceived.load(),
                         c.bytesReceived.load()};
}

}  // namespace gossamer::net
