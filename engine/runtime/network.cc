#include "engine/runtime/network.h"

#include <random>

#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/experimental/as_tuple.hpp>
#include <asio/steady_timer.hpp>
#include <asio/use_awaitable.hpp>
#include <fmt/format.h>

#include "engine/base/enforce.h"
#include "engine/base/log.h"
#include "engine/runtime/tcp_streams.h"
#include "net/shaped/shaped_transport.h"

namespace gossamer::engine::runtime {

void prepareTransport(NetworkConfig& n, const Registry& registry) {
  const TransportSpec& transport = registry.transports.get(n.transport);
  if (n.listen.host.empty()) n.listen = transport.defaultListen;
  if (!n.transportMaker) n.transportMaker = transport.prepare(n.transportOptions);
}

std::shared_ptr<net::tcp::TlsContext> tlsContext(const NetworkConfig& n) {
  if (n.security == NetworkConfig::Security::plaintext) return nullptr;
  net::tcp::TlsConfig tls;
  if (n.security == NetworkConfig::Security::tlsCertificates) {
    tls.mode = net::tcp::TlsConfig::Mode::certificates;
    tls.certFile = n.tlsCert;
    tls.keyFile = n.tlsKey;
    tls.caFile = n.tlsCa;
  } else {
    tls.secret = n.secret;
  }
  return net::tcp::makeTlsContext(tls);
}

std::string describeSecurity(const NetworkConfig& n) {
  switch (n.security) {
    case NetworkConfig::Security::tlsPsk:
      return "TLS 1.3 (AES-GCM, forward secret), both ends authenticated by a key derived from "
             "the cluster secret";
    case NetworkConfig::Security::tlsCertificates:
      return fmt::format(
          "TLS 1.3 (AES-GCM, forward secret), both ends authenticated by certificates of the "
          "CA in '{}'",
          n.tlsCa);
    case NetworkConfig::Security::plaintext:
      break;
  }
  return "PLAINTEXT (--insecure-plaintext): anyone on the path can read and alter the traffic";
}

PeerNetwork::PeerNetwork(NetworkConfig config, PeerId self)
    : config_(std::move(config)), self_(self), work_(asio::make_work_guard(io_)) {
  GOSSAMER_ENFORCE(config_.transportMaker != nullptr, "a peer network needs a transport maker");
  if (config_.secret.empty()) {
    // Nobody outside this process can know it: a cluster of one, or of peers sharing a config.
    std::random_device random;
    for (int i = 0; i < 32; ++i) config_.secret.push_back(static_cast<std::byte>(random()));
  }
  if (!config_.identity) {
    config_.identity = net::wire::Identity::generate();
    log::get("net")->info(
        "peer {:016x}: identity key {} is this process's own (a random id, no key file): after a "
        "restart this peer comes back under a new id",
        self_, config_.identity->fingerprint());
  }
}

PeerNetwork::~PeerNetwork() { shutdown(); }

void PeerNetwork::shutdown() {
  stop(false);
  if (thread_.joinable()) {
    runOn(io_, [this] {
      membership_.reset();
      std::unique_ptr<net::Mesh> mesh;
      {
        std::lock_guard lock(viewMutex_);
        for (std::size_t kind = 0; kind < net::kTrafficKinds; ++kind)
          if (mesh_) finalTraffic_[kind] = mesh_->counters(static_cast<net::Traffic>(kind));
        mesh = std::move(mesh_);
      }
      mesh.reset();
      transport_.reset();
      return 0;
    });
    work_.reset();
    io_.stop();
    thread_.join();
  }
  // Coroutines suspended on the io_context die with it; what they held goes back to its pools.
}

std::unique_ptr<net::Transport> PeerNetwork::makeTransport(const Handlers& handlers,
                                                           std::uint64_t seed) {
  const NetworkConfig& n = config_;
  // Throws naming what is missing (an RDMA device, say): the peer fails at start.
  std::unique_ptr<net::Transport> transport =
      n.transportMaker(TransportEnvironment{io_, handlers.deviceMemory, tlsContext(n)});
  if ((n.profile && n.profile->name() != "lan") || n.partitions) {
    net::shaped::Options shaping;
    if (n.profile) shaping.profile = *n.profile;
    shaping.selfIndex = n.profileIndex;
    shaping.indexOf = n.indexOf;
    shaping.seed = net::shaped::mixSeed(seed, n.profileIndex);
    transport = net::shaped::makeTransport(std::move(transport), std::move(shaping), n.partitions);
  }
  return withTcpStreams(std::move(transport), n);
}

std::error_code PeerNetwork::startOnIo(Handlers& handlers, net::wire::ModelFingerprint model,
                                       std::uint64_t seed) {
  const NetworkConfig& n = config_;
  transport_ = makeTransport(handlers, seed);
  if (handlers.registerMemory) handlers.registerMemory(*transport_);
  net::MeshOptions meshOptions;
  meshOptions.handshake.clusterId = n.clusterId;
  meshOptions.handshake.peerId = self_;
  meshOptions.handshake.secret = n.secret;
  meshOptions.handshake.identity = n.identity;
  meshOptions.handshake.book = std::make_shared<net::wire::IdentityBook>();
  meshOptions.handshake.model = std::move(model);
  meshOptions.advertise = n.advertise;
  meshOptions.relay = n.relay;
  {
    std::lock_guard lock(viewMutex_);
    mesh_ = std::make_unique<net::Mesh>(io_, *transport_, meshOptions);
  }
  mesh_->setEnvelopeTarget(std::move(handlers.target));
  mesh_->onEnvelope([this, handler = std::move(handlers.envelope)](
                        const net::Remote& from, net::wire::EnvelopeHeader header,
                        std::vector<net::Payload> payloads) {
    {
      std::lock_guard lock(viewMutex_);
      heardFrom_[from.peerId] = from.listen;
    }
    handler(from, std::move(header), std::move(payloads));
  });
  // Over an emulated WAN, failure detection must allow for its round trips.
  const net::membership::Options membershipOptions =
      n.profile ? n.membership.forRoundTrip(n.profile->maxRoundTrip()) : n.membership;
  membership_ = net::membership::makeService(io_, *mesh_,
                                             net::membership::Config{.seeds = n.seeds,
                                                                     .options = membershipOptions,
                                                                     .seed = seed ^ self_,
                                                                     .noInbound = n.noInbound});
  membership_->onEvent(
      [this, changed = std::move(handlers.membershipChanged)](const net::membership::Event& event) {
        {
          std::lock_guard lock(viewMutex_);
          view_ = membership_->view();
          // Gone: no reply is owed to it any more (addressOf() no longer finds it).
          if (event.kind == net::membership::EventKind::failed ||
              event.kind == net::membership::EventKind::left)
            heardFrom_.erase(event.member.id);
        }
        epoch_ = event.epoch;
        // This life admitted: its own first event (`rejoined` where the cluster knew the id).
        if ((event.kind == net::membership::EventKind::joined ||
             event.kind == net::membership::EventKind::rejoined) &&
            event.member.id == self_ && !joined_) {
          life_ = event.member.incarnation;
          joined_ = true;
        }
        changed(event);
      });
  if (const std::error_code e = mesh_->listen(n.listen)) return e;
  endpoint_ = mesh_->localEndpoint();
  membership_->start();
  // In order with the membership events (they run on this thread too).
  std::lock_guard lock(viewMutex_);
  view_ = membership_->view();
  return {};
}

void PeerNetwork::start(Handlers handlers, net::wire::ModelFingerprint model, std::uint64_t seed) {
  thread_ = std::thread([this] { io_.run(); });
  std::error_code error;
  try {
    error = runOn(io_, [&] { return startOnIo(handlers, std::move(model), seed); });
  } catch (...) {
    stop(false);
    throw;
  }
  if (error) {
    stop(false);
    GOSSAMER_THROW("cannot listen on {}: {}", config_.listen.str(), error.message());
  }
}

void PeerNetwork::stop(bool graceful) {
  std::call_once(stopped_, [&] {
    if (!thread_.joinable()) return;
    if (graceful && membership_) {
      std::promise<void> left;
      asio::co_spawn(io_, membership_->leave(std::chrono::milliseconds(2000)),
                     [&left](std::exception_ptr) { left.set_value(); });
      left.get_future().wait();
    }
    runOn(io_, [this] {
      if (membership_) membership_->stop();
      if (mesh_) mesh_->close();
      return 0;
    });
  });
}

net::membership::View PeerNetwork::view() const {
  std::lock_guard lock(viewMutex_);
  return view_;
}

net::membership::View PeerNetwork::currentRecords() {
  if (!thread_.joinable()) return {};
  return runOn(io_, [this] { return membership_ ? membership_->view() : net::membership::View{}; });
}

std::vector<PeerId> PeerNetwork::members() const {
  std::lock_guard lock(viewMutex_);
  return view_.ids();
}

bool PeerNetwork::isMember(PeerId peer) const {
  std::lock_guard lock(viewMutex_);
  return view_.contains(peer);
}

std::map<PeerId, PathEstimate> PeerNetwork::measuredPaths() {
  if (!thread_.joinable()) return {};
  const auto roundTrips = runOn(io_, [this] {
    return membership_ ? membership_->roundTrips()
                       : std::map<std::uint64_t, std::chrono::microseconds>{};
  });
  std::map<PeerId, PathEstimate> paths;
  for (const auto& [peer, roundTrip] : roundTrips) {
    if (const std::optional<net::Endpoint> address = addressOf(peer))
      paths[peer] = estimatePath(config_, *address, roundTrip);
  }
  return paths;
}

std::optional<net::Endpoint> PeerNetwork::addressOf(PeerId peer) const {
  std::lock_guard lock(viewMutex_);
  if (const net::membership::Member* m = view_.find(peer)) return m->address;
  if (const auto it = heardFrom_.find(peer); it != heardFrom_.end()) return it->second;
  return std::nullopt;
}

net::TrafficCounters PeerNetwork::traffic(net::Traffic kind) const {
  std::lock_guard lock(viewMutex_);
  return mesh_ ? mesh_->counters(kind) : finalTraffic_[static_cast<std::size_t>(kind)];
}

std::uint64_t PeerNetwork::linksReversed() const {
  std::lock_guard lock(viewMutex_);
  return mesh_ ? mesh_->linksReversed() : 0;
}

std::vector<net::membership::SeedFailure> PeerNetwork::seedFailures() {
  if (!thread_.joinable()) return {};
  return runOn(io_, [this] {
    return membership_ ? membership_->seedFailures() : std::vector<net::membership::SeedFailure>{};
  });
}

asio::awaitable<std::error_code> PeerNetwork::send(
    net::Endpoint to, net::Channel channel, std::shared_ptr<const net::EncodedEnvelope> envelope,
    std::vector<std::span<const std::byte>> payloads) {
  const LinkKey key{to, channel};
  if (!mesh_) co_return asio::error::operation_aborted;
  if (mesh_->hasOpenLink(to, channel)) opened_.insert(key);
  if (!mesh_->hasOpenLink(to, channel) || linkWaits_.count(key) > 0) {
    if (const std::error_code error = co_await awaitLink(key)) co_return error;
    if (!mesh_) co_return asio::error::operation_aborted;
  }
  // On the open link, never reconnecting: if it broke meanwhile (the peer died), this send fails
  // at once and the next one queues for a new link (awaitLink) instead of retrying alone.
  co_return co_await mesh_->sendEnvelope(std::move(to), channel, std::move(envelope),
                                         std::move(payloads), std::chrono::milliseconds(0));
}

asio::awaitable<std::error_code> PeerNetwork::awaitLink(LinkKey key) {
  std::shared_ptr<LinkWait> wait = linkWaits_[key];
  const bool first = wait == nullptr;
  if (first) {
    linkWaits_[key] = wait = std::make_shared<LinkWait>();
    wait->reopening = opened_.count(key) > 0;
  }
  // Only while a link that was open before and broke opens again (the peer likely died): the
  // first sends to a peer whose link opens for the first time may come in a burst and all must
  // go, as must the sends queued behind an attempt that succeeded.
  if (wait->reopening && !wait->opened &&
      wait->queue.size() >= std::max<std::size_t>(config_.linkWaitLimit, 1))
    co_return asio::error::no_buffer_space;
  auto waiter = std::make_shared<LinkWaiter>(io_);
  wait->queue.push_back(waiter);  // before the attempt starts: it may end at once, inline
  if (first) {
    // The attempt holds no payload (the sends waiting for it do).
    asio::co_spawn(io_, mesh_->open(key.first, key.second, config_.connectTimeout),
                   [this, key, wait](std::exception_ptr, net::LinkOutcome outcome) {
                     if (outcome.error) {
                       endLinkWait(key, wait, outcome.error);
                     } else {
                       wait->opened = true;
                       opened_.insert(key);
                       releaseNext(key, wait);
                     }
                   });
    asio::co_spawn(io_, watchSuspicion(key, wait), asio::detached);
  }
  if (!waiter->released)
    co_await waiter->resume.async_wait(asio::experimental::as_tuple(asio::use_awaitable));
  // Released in turn (the sends after this one wait until its send has started) or failed.
  if (!waiter->error) releaseNext(key, wait);
  co_return waiter->error;
}

void PeerNetwork::releaseNext(const LinkKey& key, const std::shared_ptr<LinkWait>& wait) {
  if (wait->queue.empty()) {
    const auto it = linkWaits_.find(key);
    if (it != linkWaits_.end() && it->second == wait) linkWaits_.erase(it);
    return;
  }
  const std::shared_ptr<LinkWaiter> next = wait->queue.front();
  wait->queue.pop_front();
  next->released = true;
  next->resume.cancel();
}

void PeerNetwork::endLinkWait(const LinkKey& key, const std::shared_ptr<LinkWait>& wait,
                              std::error_code error) {
  wait->failed = true;
  for (const std::shared_ptr<LinkWaiter>& waiter : wait->queue) {
    waiter->error = error;
    waiter->released = true;
    waiter->resume.cancel();
  }
  wait->queue.clear();
  const auto it = linkWaits_.find(key);
  if (it != linkWaits_.end() && it->second == wait) linkWaits_.erase(it);
}

asio::awaitable<void> PeerNetwork::watchSuspicion(LinkKey key, std::shared_ptr<LinkWait> wait) {
  asio::steady_timer tick(io_);
  while (!wait->opened && !wait->failed) {
    if (suspected(key.first)) {
      endLinkWait(key, wait, asio::error::host_unreachable);
      co_return;
    }
    tick.expires_after(std::chrono::milliseconds(20));
    co_await tick.async_wait(asio::experimental::as_tuple(asio::use_awaitable));
  }
}

bool PeerNetwork::suspected(const net::Endpoint& address) const {
  if (!membership_) return false;
  for (const net::membership::Member& member : membership_->view().members) {
    if (member.address == address) return member.state != net::membership::MemberState::alive;
  }
  return false;  // not a member (yet): a peer that wrote first, owed a reply
}

}  // namespace gossamer::engine::runtime
