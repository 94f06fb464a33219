#include "net/membership/membership.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <utility>
#include <variant>

#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/steady_timer.hpp>

#include "engine/base/enforce.h"
#include "engine/base/log.h"
#include "net/errors.h"
#include "net/link_support.h"

namespace gossamer::net::membership {
namespace {

using Clock = std::chrono::steady_clock;
using detail::kUseTuple;
using std::chrono::milliseconds;

int rank(MemberState state) {
  switch (state) {
    case MemberState::alive:
      return 0;
    case MemberState::suspect:
      return 1;
    case MemberState::dead:
      return 2;
    case MemberState::left:
      return 3;
  }
  return 0;
}

bool isLive(MemberState state) {
  return state == MemberState::alive || state == MemberState::suspect;
}

MemberState fromWire(wire::MemberState state) {
  switch (state) {
    case wire::MemberState::alive:
      return MemberState::alive;
    case wire::MemberState::suspect:
      return MemberState::suspect;
    case wire::MemberState::dead:
      return MemberState::dead;
    case wire::MemberState::left:
      return MemberState::left;
  }
  return MemberState::dead;
}

wire::MemberState toWire(MemberState state) {
  switch (state) {
    case MemberState::alive:
      return wire::MemberState::alive;
    case MemberState::suspect:
      return wire::MemberState::suspect;
    case MemberState::dead:
      return wire::MemberState::dead;
    case MemberState::left:
      return wire::MemberState::left;
  }
  return wire::MemberState::dead;
}

wire::MemberUpdate toUpdate(const Member& m) {
  return wire::MemberUpdate{m.id, m.address, m.incarnation, toWire(m.state)};
}

// Whether a rumour (incarnation, state) about a member supersedes what this peer holds.
bool supersedes(std::uint64_t incarnation, MemberState state, const Member& current) {
  if (incarnation != current.incarnation) return incarnation > current.incarnation;
  return rank(state) > rank(current.state);
}

// How a rumour entered: piggybacked or gossiped (taken as said), or inside a whole table of
// another peer (a join reply or push-pull), whose `dead` claims are only taken as suspicion, as
// memberlist does: after a partition each side's table calls the other side dead, and a live
// member must get the chance to refute that rather than be declared failed at once.
enum class Source { rumour, table };

}  // namespace

const char* name(MemberState state) {
  switch (state) {
    case MemberState::alive:
      return "alive";
    case MemberState::suspect:
      return "suspect";
    case MemberState::dead:
      return "dead";
    case MemberState::left:
      return "left";
  }
  return "?";
}

const char* name(EventKind kind) {
  switch (kind) {
    case EventKind::joined:
      return "joined";
    case EventKind::left:
      return "left";
    case EventKind::failed:
      return "failed";
    case EventKind::rejoined:
      return "rejoined";
  }
  return "?";
}

Options Options::local() {
  Options o;
  o.probeInterval = milliseconds(200);
  o.probeTimeout = milliseconds(80);
  o.suspicionMultiplier = 3.0;
  o.gossipInterval = milliseconds(50);
  o.pushPullInterval = milliseconds(2500);
  o.connectTimeout = milliseconds(500);
  o.joinBackoffInitial = milliseconds(50);
  o.joinBackoffMax = milliseconds(2000);
  return o;
}

Options Options::named(const std::string& name) {
  if (name == "local") return local();
  if (name == "lan") return Options{};
  GOSSAMER_THROW("unknown membership profile '{}' (use local or lan)", name);
}

Options Options::forRoundTrip(std::chrono::microseconds roundTrip) const {
  Options o = *this;
  const auto rtt = std::chrono::ceil<milliseconds>(roundTrip);
  o.probeTimeout = std::max(o.probeTimeout, 2 * rtt + milliseconds(20));
  o.probeInterval = std::max(o.probeInterval, o.probeTimeout * 5 / 2);
  o.connectTimeout = std::max(o.connectTimeout, 3 * rtt + milliseconds(200));
  return o;
}

milliseconds Options::suspicionTimeout(std::size_t members) const {
  const double periods =
      std::max(2.0, suspicionMultiplier * std::log10(static_cast<double>(members) + 1.0));
  return milliseconds(
      static_cast<std::int64_t>(periods * static_cast<double>(probeInterval.count())));
}

milliseconds Options::suspicionTimeout(std::size_t members, std::size_t confirmations) const {
  const milliseconds min = suspicionTimeout(members);
  const auto max = milliseconds(static_cast<std::int64_t>(
      std::max(1.0, suspicionMaxMultiple) * static_cast<double>(min.count())));
  const double expected = static_cast<double>(
      std::min<std::size_t>(indirectProbes, members > 2 ? members - 2 : 0));
  if (expected < 1) return min;
  const double shrink = std::log(static_cast<double>(confirmations) + 1.0) / std::log(expected + 1.0);
  const double timeout =
      static_cast<double>(max.count()) - static_cast<double>((max - min).count()) * shrink;
  return std::max(min, milliseconds(static_cast<std::int64_t>(timeout)));
}

std::vector<std::uint64_t> View::ids() const {
  std::vector<std::uint64_t> out;
  out.reserve(members.size());
  for (const Member& m : members) out.push_back(m.id);
  return out;
}

bool View::contains(std::uint64_t id) const { return find(id) != nullptr; }

const Member* View::find(std::uint64_t id) const {
  const auto it = std::lower_bound(members.begin(), members.end(), id,
                                   [](const Member& m, std::uint64_t v) { return m.id < v; });
  return it != members.end() && it->id == id ? &*it : nullptr;
}

namespace {

// An outstanding probe: the Ack of `target` with our sequence number ends it.
struct AckWaiter {
  AckWaiter(asio::io_context& io, std::uint64_t targetId) : target(targetId), timer(io) {}
  std::uint64_t target;
  bool acked = false;
  asio::steady_timer timer;
};

// The protocol state of one peer. Lives in a shared_ptr so that its coroutines outlive the
// Service object; everything runs on the io thread except what view()/joined() read.
class Core final : public std::enable_shared_from_this<Core> {
 public:
  Core(asio::io_context& io, Mesh& mesh, Config config)
      : io_(io),
        mesh_(mesh),
        config_(std::move(config)),
        options_(config_.options),
        rng_(config_.seed),
        probeTimer_(io),
        gossipTimer_(io),
        pushPullTimer_(io),
        tickTimer_(io),
        joinTimer_(io),
        logger_(log::get("membership")) {
    GOSSAMER_ENFORCE(options_.probeInterval.count() > 0 && options_.probeTimeout.count() > 0,
                     "membership probe interval and timeout must be positive");
    GOSSAMER_ENFORCE(options_.probeTimeout <= options_.probeInterval,
                     "membership probe timeout ({} ms) must not exceed the probe interval ({} ms)",
                     options_.probeTimeout.count(), options_.probeInterval.count());
  }

  void onEvent(std::function<void(const Event&)> handler) { handler_ = std::move(handler); }

  void attach() {
    std::weak_ptr<Core> weak = shared_from_this();
    mesh_.onMembership([weak](const Remote& from, wire::MembershipMessage message) {
      if (const auto self = weak.lock()) self->handle(from, std::move(message));
    });
  }

  void start() {
    GOSSAMER_ENFORCE(!started_, "membership service started twice");
    started_ = true;
    running_ = true;
    // The first incarnation comes from the clock (milliseconds): a restarted process with the
    // same identity outbids its earlier life at once, and the seeds tell the two apart.
    const auto now = std::chrono::duration_cast<milliseconds>(
        std::chrono::system_clock::now().time_since_epoch());
    self_ = Member{mesh_.selfId(), mesh_.localEndpoint(), static_cast<std::uint64_t>(now.count()),
                   MemberState::alive};
    std::erase(config_.seeds, self_.address);
    refreshView();
    const auto self = shared_from_this();
    if (config_.seeds.empty())
      becomeJoined();
    else
      asio::co_spawn(io_, joinLoop(self), asio::detached);
    asio::co_spawn(io_, probeLoop(self), asio::detached);
    asio::co_spawn(io_, tickLoop(self), asio::detached);
    if (options_.gossipInterval.count() > 0) asio::co_spawn(io_, gossipLoop(self), asio::detached);
    asio::co_spawn(io_, pushPullLoop(self), asio::detached);
  }

  void stop() {
    if (!running_) return;
    running_ = false;
    for (asio::steady_timer* t :
         {&probeTimer_, &gossipTimer_, &pushPullTimer_, &tickTimer_, &joinTimer_})
      t->cancel();
    for (auto& [sequence, waiter] : waiters_) waiter->timer.cancel();
    waiters_.clear();
  }

  static asio::awaitable<void> leave(std::shared_ptr<Core> self, milliseconds timeout) {
    if (!self->running_) co_return;
    self->leaving_ = true;
    self->self_.state = MemberState::left;
    const wire::Leave message{self->self_.id, self->self_.incarnation};
    // Everyone we know hears it directly; the first of them to hear also gossips it on.
    auto pending = std::make_shared<std::size_t>(0);
    auto done = std::make_shared<asio::steady_timer>(self->io_, Clock::now() + timeout);
    for (const auto& [id, record] : self->members_) {
      if (!isLive(record.member.state)) continue;
      ++*pending;
      asio::co_spawn(self->io_, self->mesh_.sendMembership(record.member.address, message, timeout),
                     [pending, done](std::exception_ptr, std::error_code) {
                       if (--*pending == 0) done->cancel();
                     });
    }
    if (*pending > 0) co_await done->async_wait(kUseTuple);
    self->logger_->debug("left the cluster (incarnation {})", self->self_.incarnation);
    self->stop();
  }

  View view() const {
    std::lock_guard lock(viewMutex_);
    return view_;
  }
  bool joined() const { return joined_.load(); }

  std::vector<SeedFailure> seedFailures() const {
    std::vector<SeedFailure> out;
    for (const Endpoint& seed : config_.seeds) {
      const auto it = seedFailures_.find(seed);
      out.push_back(it != seedFailures_.end() ? it->second : SeedFailure{seed, {}, {}});
    }
    return out;
  }

 private:
  // ---- message handling ----------------------------------------------------------------------

  void handle(const Remote& from, wire::MembershipMessage message) {
    if (!running_) return;
    std::visit([&](auto& m) { on(from, m); }, message);
  }

  void on(const Remote& from, wire::JoinRequest& request) {
    if (request.peerId == self_.id) {
      send(from.listen,
           wire::JoinReply{false, fmt::format("peer id {:016x} is the seed's own", self_.id), {}});
      return;
    }
    becomeJoined();  // an unjoined peer that admits another forms a cluster with it
    // A live member asks to join again only from a new life (a restarted process: its incarnation
    // starts from the clock, above its earlier life's; a retry of the same life repeats the
    // same one). The earlier life is over: record it failed before the new one rejoins, so that
    // everyone drops its links and its round state even before the failure detector would.
    if (const auto it = members_.find(request.peerId);
        it != members_.end() && isLive(it->second.member.state) &&
        request.incarnation > it->second.member.incarnation) {
      const Member& earlier = it->second.member;
      apply(wire::MemberUpdate{earlier.id, earlier.address, earlier.incarnation,
                               wire::MemberState::dead},
            Source::rumour);
    }
    apply(wire::MemberUpdate{request.peerId, request.address, request.incarnation,
                             wire::MemberState::alive},
          Source::rumour);
    send(from.listen, wire::JoinReply{true, "", table()});
  }

  void on(const Remote& from, wire::JoinReply& reply) {
    if (!reply.accepted) {
      logger_->warn("seed {} refused to admit this peer: {}", from.listen.str(), reply.reason);
      if (joining_ && !joined_) {
        noteFailure(*joining_, Errc::joinRefused, reply.reason);
        joining_.reset();  // answered
      }
      joinTimer_.cancel();
      return;
    }
    const bool first = !joined_;
    becomeJoined();
    merge(reply.members, Source::table);
    if (first)
      logger_->info("joined through {} ({} members)", from.listen.str(), view().members.size());
    joinTimer_.cancel();
  }

  void on(const Remote& from, wire::Ping& ping) {
    merge(ping.updates, Source::rumour);
    send(from.listen, wire::Ack{self_.id, ping.sequence, piggyback()}, options_.probeTimeout);
  }

  void on(const Remote& from, wire::PingReq& request) {
    merge(request.updates, Source::rumour);
    asio::co_spawn(io_,
                   relayProbe(shared_from_this(), from.listen, request.sequence, request.target,
                              request.targetAddress),
                   asio::detached);
  }

  void on(const Remote&, wire::Ack& ack) {
    merge(ack.updates, Source::rumour);
    const auto it = waiters_.find(ack.sequence);
    if (it == waiters_.end() || it->second->target != ack.sender) return;
    it->second->acked = true;
    it->second->timer.cancel();
  }

  void on(const Remote&, wire::Gossip& gossip) { merge(gossip.updates, Source::rumour); }

  void on(const Remote& from, wire::Leave& leave) {
    const auto it = members_.find(leave.peerId);
    const Endpoint address = it != members_.end() ? it->second.member.address : from.listen;
    apply(wire::MemberUpdate{leave.peerId, address, leave.incarnation, wire::MemberState::left},
          Source::rumour);
  }

  void on(const Remote& from, wire::PushPull& pushPull) {
    merge(pushPull.members, Source::table);
    if (!pushPull.reply) send(from.listen, wire::PushPull{self_.id, true, table()});
  }

  // ---- the member table --------------------------------------------------------------------

  struct Record {
    Member member;
    Clock::time_point since;  // when the current state began here
    // Suspect: the members that suspect this incarnation (the first and its confirmations).
    std::set<std::uint64_t> accusers;
  };

  void merge(const std::vector<wire::MemberUpdate>& updates, Source source) {
    for (const wire::MemberUpdate& update : updates) apply(update, source);
  }

  void apply(wire::MemberUpdate update, Source source) {
    MemberState state = fromWire(update.state);
    if (update.peerId == self_.id) {
      aboutSelf(update.incarnation, state);
      return;
    }
    const Clock::time_point now = Clock::now();
    auto it = members_.find(update.peerId);
    if (it == members_.end()) {
      // A stranger: remember it; a dead or left one only as a tombstone, without an event.
      Record record{Member{update.peerId, update.address, update.incarnation, state}, now};
      members_.emplace(update.peerId, record);
      enqueue(update);
      if (isLive(state)) {
        addToProbeOrder(update.peerId);
        deliver(EventKind::joined, record.member);
      }
      return;
    }
    Member& member = it->second.member;
    if (source == Source::table && state == MemberState::dead && isLive(member.state))
      state = MemberState::suspect;
    if (state == MemberState::suspect && member.state == MemberState::suspect &&
        update.incarnation == member.incarnation) {
      // Another accuser of the same suspicion: a confirmation (shortens the timeout), passed on.
      if (it->second.accusers.insert(update.accuser).second) enqueue(update);
      return;
    }
    if (!supersedes(update.incarnation, state, member)) return;
    MemberState old = member.state;
    if (isLive(old) && isLive(state) && !update.address.host.empty() &&
        update.address != member.address) {
      // The member came back at another address (restarted): its earlier life failed.
      member.state = old = MemberState::dead;
      deliver(EventKind::failed, member);
      mesh_.disconnect(member.address);
    }
    member.incarnation = update.incarnation;
    member.state = state;
    if (!update.address.host.empty()) member.address = update.address;
    if (old != state) it->second.since = now;
    it->second.accusers.clear();
    wire::MemberUpdate passed = toUpdate(member);
    if (state == MemberState::suspect) {
      it->second.accusers.insert(update.accuser);
      passed.accuser = update.accuser;
    }
    enqueue(passed);
    if (!isLive(old) && isLive(state)) {
      addToProbeOrder(member.id);
      deliver(EventKind::rejoined, member);
    } else if (isLive(old) && state == MemberState::dead) {
      deliver(EventKind::failed, member);
      mesh_.disconnect(member.address);
    } else if (isLive(old) && state == MemberState::left) {
      deliver(EventKind::left, member);
      mesh_.disconnect(member.address);
    } else {
      refreshView();  // alive <-> suspect, or a new incarnation
    }
  }

  // A rumour about this peer: refute suspicion or death by outbidding its incarnation.
  void aboutSelf(std::uint64_t incarnation, MemberState state) {
    if (leaving_) return;
    if (state == MemberState::alive) {
      // Our own alive from an earlier life of this identity: continue above it.
      self_.incarnation = std::max(self_.incarnation, incarnation);
      return;
    }
    if (incarnation < self_.incarnation) return;
    self_.incarnation = incarnation + 1;
    logger_->debug("refuting '{}' about this peer: now incarnation {}", name(state),
                   self_.incarnation);
    enqueue(toUpdate(self_));
    refreshView();
  }

  void becomeJoined() {
    if (joined_) return;
    joined_ = true;
    deliver(EventKind::joined, self_);
  }

  void deliver(EventKind kind, const Member& member) {
    ++epoch_;
    refreshView();
    logger_->debug("epoch {}: {:016x} at {} {}", epoch_, member.id, member.address.str(),
                   name(kind));
    if (handler_) handler_(Event{kind, member, epoch_});
  }

  void refreshView() {
    View view;
    view.epoch = epoch_;
    view.members.push_back(self_);
    for (const auto& [id, record] : members_) {
      if (isLive(record.member.state)) view.members.push_back(record.member);
    }
    std::sort(view.members.begin(), view.members.end(),
              [](const Member& a, const Member& b) { return a.id < b.id; });
    std::lock_guard lock(viewMutex_);
    view_ = std::move(view);
  }

  std::vector<wire::MemberUpdate> table() const {
    std::vector<wire::MemberUpdate> out;
    out.reserve(members_.size() + 1);
    out.push_back(toUpdate(self_));
    for (const auto& [id, record] : members_) out.push_back(toUpdate(record.member));
    return out;
  }

  std::vector<const Member*> liveMembers() const {
    std::vector<const Member*> out;
    for (const auto& [id, record] : members_) {
      if (isLive(record.member.state)) out.push_back(&record.member);
    }
    return out;
  }

  std::size_t clusterSize() const { return liveMembers().size() + 1; }

  // ---- dissemination -----------------------------------------------------------------------

  void enqueue(const wire::MemberUpdate& update) {
    std::erase_if(broadcasts_,
                  [&](const Broadcast& b) { return b.update.peerId == update.peerId; });
    broadcasts_.push_back(Broadcast{update, 0});
  }

  // Up to maxPiggybackUpdates pending updates, least sent (then newest) first; each goes out
  // about retransmitMultiplier x log10(N+1) times in all.
  std::vector<wire::MemberUpdate> piggyback() {
    const auto limit = static_cast<std::size_t>(
        std::max(1.0, std::ceil(options_.retransmitMultiplier *
                                std::log10(static_cast<double>(clusterSize()) + 1.0))));
    std::stable_sort(
        broadcasts_.begin(), broadcasts_.end(),
        [](const Broadcast& a, const Broadcast& b) { return a.transmits < b.transmits; });
    std::vector<wire::MemberUpdate> out;
    for (Broadcast& b : broadcasts_) {
      if (out.size() >= options_.maxPiggybackUpdates) break;
      out.push_back(b.update);
      ++b.transmits;
    }
    std::erase_if(broadcasts_, [&](const Broadcast& b) { return b.transmits >= limit; });
    return out;
  }

  void send(const Endpoint& to, wire::MembershipMessage message) {
    send(to, std::move(message), options_.connectTimeout);
  }
  void send(const Endpoint& to, wire::MembershipMessage message, milliseconds connectTimeout) {
    if (!running_) return;
    asio::co_spawn(io_, mesh_.sendMembership(to, std::move(message), connectTimeout),
                   asio::detached);
  }

  // ---- probing -----------------------------------------------------------------------------

  void addToProbeOrder(std::uint64_t id) {
    // At a random place after the cursor, so that a newcomer is probed within this round.
    std::uniform_int_distribution<std::size_t> at(probeCursor_, probeOrder_.size());
    probeOrder_.insert(probeOrder_.begin() + static_cast<std::ptrdiff_t>(at(rng_)), id);
  }

  // The next live member to probe, round-robin over an order reshuffled every round.
  const Member* nextProbeTarget() {
    for (int pass = 0; pass < 2; ++pass) {
      while (probeCursor_ < probeOrder_.size()) {
        const auto it = members_.find(probeOrder_[probeCursor_++]);
        if (it != members_.end() && isLive(it->second.member.state)) return &it->second.member;
      }
      probeOrder_.clear();
      for (const Member* m : liveMembers()) probeOrder_.push_back(m->id);
      std::shuffle(probeOrder_.begin(), probeOrder_.end(), rng_);
      probeCursor_ = 0;
    }
    return nullptr;
  }

  std::shared_ptr<AckWaiter> expectAck(std::uint64_t sequence, std::uint64_t target) {
    auto waiter = std::make_shared<AckWaiter>(io_, target);
    waiters_[sequence] = waiter;
    return waiter;
  }

  // Waits until the ack arrived or `deadline`; true if it did.
  static asio::awaitable<bool> awaitAck(std::shared_ptr<AckWaiter> waiter,
                                        Clock::time_point deadline) {
    if (!waiter->acked) {
      waiter->timer.expires_at(deadline);
      co_await waiter->timer.async_wait(kUseTuple);
    }
    co_return waiter->acked;
  }

  static asio::awaitable<void> probe(std::shared_ptr<Core> self, Member target) {
    const Clock::time_point start = Clock::now();
    const Options& o = self->options_;
    const std::uint64_t sequence = ++self->sequence_;
    auto waiter = self->expectAck(sequence, target.id);
    self->send(target.address, wire::Ping{self->self_.id, sequence, self->piggyback()},
               o.probeTimeout);
    bool acked = co_await awaitAck(waiter, start + o.probeTimeout);
    if (!acked && self->running_) {
      std::vector<const Member*> helpers;
      for (const Member* m : self->liveMembers()) {
        if (m->id != target.id) helpers.push_back(m);
      }
      std::shuffle(helpers.begin(), helpers.end(), self->rng_);
      helpers.resize(std::min(helpers.size(), o.indirectProbes));
      for (const Member* helper : helpers) {
        self->send(
            helper->address,
            wire::PingReq{self->self_.id, sequence, target.id, target.address, self->piggyback()},
            o.probeTimeout);
      }
      acked = co_await awaitAck(waiter, start + o.probeInterval);
    }
    self->waiters_.erase(sequence);
    if (!acked && self->running_) self->suspect(target.id);
  }

  // Probes `targetId` for a member that asked us to (PingReq) and relays the Ack.
  static asio::awaitable<void> relayProbe(std::shared_ptr<Core> self, Endpoint requester,
                                          std::uint64_t requestSequence, std::uint64_t targetId,
                                          Endpoint targetAddress) {
    if (!self->running_) co_return;
    const std::uint64_t sequence = ++self->sequence_;
    auto waiter = self->expectAck(sequence, targetId);
    self->send(targetAddress, wire::Ping{self->self_.id, sequence, self->piggyback()},
               self->options_.probeTimeout);
    const bool acked = co_await awaitAck(waiter, Clock::now() + self->options_.probeTimeout);
    self->waiters_.erase(sequence);
    if (acked && self->running_)
      self->send(requester, wire::Ack{targetId, requestSequence, self->piggyback()},
                 self->options_.probeTimeout);
  }

  void suspect(std::uint64_t id) {
    const auto it = members_.find(id);
    // A member already suspect is suspected again by this one: a confirmation (see Lifeguard).
    if (it == members_.end() || !isLive(it->second.member.state)) return;
    Member rumour = it->second.member;
    rumour.state = MemberState::suspect;
    wire::MemberUpdate update = toUpdate(rumour);
    update.accuser = self_.id;
    apply(update, Source::rumour);
    // Tell the suspect itself, so that a live one refutes at once.
    send(rumour.address, wire::Gossip{self_.id, {update}}, options_.probeTimeout);
  }

  // Declares suspects whose timeout ran out dead, and forgets old tombstones.
  void expire() {
    const Clock::time_point now = Clock::now();
    std::vector<Member> expired;
    for (const auto& [id, record] : members_) {
      if (record.member.state != MemberState::suspect) continue;
      const std::size_t confirmations = record.accusers.empty() ? 0 : record.accusers.size() - 1;
      if (now - record.since >= options_.suspicionTimeout(clusterSize(), confirmations))
        expired.push_back(record.member);
    }
    for (Member m : expired) {
      m.state = MemberState::dead;
      apply(toUpdate(m), Source::rumour);
    }
    std::erase_if(members_, [&](const auto& entry) {
      return !isLive(entry.second.member.state) &&
             now - entry.second.since > options_.tombstoneRetention;
    });
  }

  // ---- the loops ---------------------------------------------------------------------------

  static asio::awaitable<void> probeLoop(std::shared_ptr<Core> self) {
    while (self->running_) {
      const Clock::time_point start = Clock::now();
      if (const Member* target = self->nextProbeTarget()) co_await probe(self, *target);
      if (!self->running_) co_return;
      self->probeTimer_.expires_at(start + self->options_.probeInterval);
      co_await self->probeTimer_.async_wait(kUseTuple);
    }
  }

  static asio::awaitable<void> tickLoop(std::shared_ptr<Core> self) {
    const milliseconds period = std::max(milliseconds(5), self->options_.probeInterval / 10);
    while (self->running_) {
      self->expire();
      self->tickTimer_.expires_after(period);
      co_await self->tickTimer_.async_wait(kUseTuple);
    }
  }

  static asio::awaitable<void> gossipLoop(std::shared_ptr<Core> self) {
    while (self->running_) {
      self->gossipTimer_.expires_after(self->options_.gossipInterval);
      co_await self->gossipTimer_.async_wait(kUseTuple);
      if (!self->running_ || self->broadcasts_.empty()) continue;
      std::vector<const Member*> targets = self->liveMembers();
      std::shuffle(targets.begin(), targets.end(), self->rng_);
      targets.resize(std::min(targets.size(), self->options_.gossipFanout));
      for (const Member* target : targets) {
        std::vector<wire::MemberUpdate> updates = self->piggyback();
        if (updates.empty()) break;
        self->send(target->address, wire::Gossip{self->self_.id, std::move(updates)});
      }
    }
  }

  static asio::awaitable<void> pushPullLoop(std::shared_ptr<Core> self) {
    for (std::uint64_t round = 0; self->running_; ++round) {
      const double scale = std::max(1.0, static_cast<double>(self->clusterSize()) / 8.0);
      self->pushPullTimer_.expires_after(
          std::chrono::duration_cast<milliseconds>(self->options_.pushPullInterval * scale));
      co_await self->pushPullTimer_.async_wait(kUseTuple);
      if (!self->running_ || !self->joined_) continue;
      const std::optional<Endpoint> target = self->pushPullTarget(round % 2 == 1);
      if (!target) continue;
      if (self->isSeed(*target) && self->seedIds_.count(*target) == 0) {
        // A seed never reached (a host name, say): who answers there first; it may be this peer.
        const LinkOutcome link =
            co_await self->mesh_.open(*target, Channel::control, self->options_.connectTimeout);
        if (!self->running_ || !link.ok() || self->learnSeed(*target, link)) continue;
      }
      self->send(*target, wire::PushPull{self->self_.id, false, self->table()});
    }
  }

  // A random live member; or, for a reconnect round, a random member believed failed or a seed
  // not in the view (falling back to a live member when there is none).
  std::optional<Endpoint> pushPullTarget(bool reconnect) {
    std::vector<Endpoint> candidates;
    if (reconnect) {
      for (const auto& [id, record] : members_) {
        if (record.member.state == MemberState::dead) candidates.push_back(record.member.address);
      }
      for (const Endpoint& seed : config_.seeds) {
        const auto id = seedIds_.find(seed);
        const bool known = std::any_of(members_.begin(), members_.end(), [&](const auto& entry) {
          const Member& m = entry.second.member;
          return isLive(m.state) &&
                 (m.address == seed || (id != seedIds_.end() && m.id == id->second));
        });
        if (!known) candidates.push_back(seed);
      }
    }
    if (candidates.empty()) {
      for (const Member* m : liveMembers()) candidates.push_back(m->address);
    }
    if (candidates.empty()) return std::nullopt;
    std::uniform_int_distribution<std::size_t> pick(0, candidates.size() - 1);
    return candidates[pick(rng_)];
  }

  bool isSeed(const Endpoint& to) const {
    return std::find(config_.seeds.begin(), config_.seeds.end(), to) != config_.seeds.end();
  }

  // Records who the handshake on an open link to `seed` authenticated. A seed that turns out to be
  // this peer under another name (a host name or another of its addresses; its own advertised
  // address was dropped at start) is dropped from the seed list: returns true then. This peer is
  // the one with its id that advertises its address; another process with its id elsewhere is a
  // twin, which the seed's join reply refuses as before.
  bool learnSeed(const Endpoint& seed, const LinkOutcome& link) {
    if (link.remote.peerId != self_.id || link.remote.listen != self_.address) {
      seedIds_[seed] = link.remote.peerId;
      return false;
    }
    logger_->debug("seed {} is this peer itself; dropping it from the seed list", seed.str());
    std::erase(config_.seeds, seed);
    seedFailures_.erase(seed);
    mesh_.disconnect(seed);
    return true;
  }

  // A failed join attempt through `seed`, remembered until the next one replaces it.
  void noteFailure(const Endpoint& seed, std::error_code error, std::string reason) {
    seedFailures_[seed] = SeedFailure{seed, error, std::move(reason)};
  }

  static asio::awaitable<void> joinLoop(std::shared_ptr<Core> self) {
    const Options& o = self->options_;
    milliseconds backoff = o.joinBackoffInitial;
    std::map<Endpoint, int> failures;
    while (self->running_ && !self->joined_) {
      const std::vector<Endpoint> seeds = self->config_.seeds;  // learnSeed may drop one
      for (const Endpoint& seed : seeds) {
        if (!self->running_ || self->joined_) co_return;
        // The link first, for the reason of a refused handshake; then the request on it.
        const LinkOutcome link =
            co_await self->mesh_.open(seed, Channel::control, o.connectTimeout);
        if (!self->running_ || self->joined_) co_return;
        if (link.ok() && self->learnSeed(seed, link)) {
          if (self->config_.seeds.empty()) {  // it was its only seed: the first member, as at start
            self->becomeJoined();
            co_return;
          }
          continue;
        }
        std::error_code error = link.error;
        if (!error) {
          // (A named message: GCC 12 destroys an aggregate temporary inside co_await twice.)
          wire::MembershipMessage request =
              wire::JoinRequest{self->self_.id, self->self_.address, self->self_.incarnation};
          error = co_await self->mesh_.sendMembership(seed, std::move(request), o.connectTimeout);
          if (!self->running_ || self->joined_) co_return;
        }
        if (error) {
          self->noteFailure(seed, error, link.reason);
          // The first failure of each seed is a warning; the retries are not worth one each.
          if (failures[seed]++ == 0) {
            if (isRefusal(error))
              self->logger_->warn("seed {} refused this peer ({}); will retry", seed.str(),
                                  link.reason.empty() ? error.message() : link.reason);
            else
              self->logger_->warn("seed {} is unreachable ({}); skipping it, will retry",
                                  seed.str(), error.message());
          }
          continue;
        }
        self->joining_ = seed;
        self->joinTimer_.expires_after(o.connectTimeout);
        co_await self->joinTimer_.async_wait(kUseTuple);  // cancelled by the reply
        if (!self->running_ || self->joined_) co_return;
        if (self->joining_) {  // no reply, neither admitted nor refused
          self->noteFailure(
              seed, asio::error::timed_out,
              fmt::format("no reply to the join request within {} ms", o.connectTimeout.count()));
          self->joining_.reset();
        }
      }
      if (!self->running_ || self->joined_) co_return;
      self->logger_->debug("no seed admitted this peer yet; retrying in {} ms", backoff.count());
      self->joinTimer_.expires_after(backoff);
      co_await self->joinTimer_.async_wait(kUseTuple);
      backoff = std::min(backoff * 2, o.joinBackoffMax);
    }
  }

  struct Broadcast {
    wire::MemberUpdate update;
    std::size_t transmits = 0;
  };

  asio::io_context& io_;
  Mesh& mesh_;
  Config config_;
  const Options options_;
  std::mt19937_64 rng_;
  std::function<void(const Event&)> handler_;

  bool started_ = false;
  bool running_ = false;
  bool leaving_ = false;
  std::atomic<bool> joined_{false};
  Member self_;
  std::map<std::uint64_t, Record> members_;  // every other member we know of, tombstones too
  std::uint64_t epoch_ = 0;
  std::vector<Broadcast> broadcasts_;
  std::vector<std::uint64_t> probeOrder_;
  std::size_t probeCursor_ = 0;
  std::uint64_t sequence_ = 0;
  std::map<std::uint64_t, std::shared_ptr<AckWaiter>> waiters_;
  std::optional<Endpoint> joining_;  // the seed whose reply to a join request is awaited
  std::map<Endpoint, SeedFailure> seedFailures_;  // at most one per seed
  std::map<Endpoint, std::uint64_t> seedIds_;     // who answered at a seed (learnSeed)

  asio::steady_timer probeTimer_, gossipTimer_, pushPullTimer_, tickTimer_, joinTimer_;
  std::shared_ptr<spdlog::logger> logger_;

  mutable std::mutex viewMutex_;
  View view_;
};

class ServiceImpl final : public Service {
 public:
  ServiceImpl(asio::io_context& io, Mesh& mesh, Config config)
      : mesh_(mesh), core_(std::make_shared<Core>(io, mesh, std::move(config))) {
    core_->attach();
  }
  ~ServiceImpl() override { core_->stop(); }

  void start() override { core_->start(); }
  asio::awaitable<void> leave(milliseconds timeout) override { return Core::leave(core_, timeout); }
  void stop() override { core_->stop(); }
  View view() const override { return core_->view(); }
  bool joined() const override { return core_->joined(); }
  Traffic traffic() const override { return mesh_.counters(net::Traffic::membership); }
  std::vector<SeedFailure> seedFailures() const override { return core_->seedFailures(); }
  void onEvent(std::function<void(const Event&)> handler) override {
    core_->onEvent(std::move(handler));
  }

 private:
  Mesh& mesh_;
  std::shared_ptr<Core> core_;
};

}  // namespace

std::unique_ptr<Service> makeService(asio::io_context& io, Mesh& mesh, Config config) {
  return std::make_unique<ServiceImpl>(io, mesh, std::move(config));
}

}  // namespace gossamer::net::membership
