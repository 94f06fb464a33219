#include "net/membership/membership.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <utility>

#include <asio/co_spawn.hpp>
#include <asio/steady_timer.hpp>

#include "engine/base/enforce.h"
#include "net/errors.h"
#include "net/link_support.h"
#include "net/membership/protocol.h"

namespace gossamer::net::membership {

using std::chrono::milliseconds;

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
  const auto max = milliseconds(static_cast<std::int64_t>(std::max(1.0, suspicionMaxMultiple) *
                                                          static_cast<double>(min.count())));
  const double expected =
      static_cast<double>(std::min<std::size_t>(indirectProbes, members > 2 ? members - 2 : 0));
  if (expected < 1) return min;
  const double shrink =
      std::log(static_cast<double>(confirmations) + 1.0) / std::log(expected + 1.0);
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

// The protocol's world on a Mesh and its io_context: steady timers, the mesh's membership
// channel, the wall clock for incarnations.
class MeshEnvironment final : public Environment {
 public:
  MeshEnvironment(asio::io_context& io, Mesh& mesh)
      : io_(io), mesh_(mesh), timers_(std::make_shared<Timers>()) {}
  ~MeshEnvironment() override {
    for (auto& [id, timer] : timers_->pending) timer->cancel();
  }

  Clock::time_point now() const override { return Clock::now(); }
  std::uint64_t firstIncarnation() const override {
    // The wall clock in milliseconds: a restarted process with the same identity outbids its
    // earlier life at once, and the seeds tell the two apart.
    return static_cast<std::uint64_t>(std::chrono::duration_cast<milliseconds>(
                                          std::chrono::system_clock::now().time_since_epoch())
                                          .count());
  }
  std::uint64_t selfId() const override { return mesh_.selfId(); }
  Endpoint selfAddress() const override { return mesh_.localEndpoint(); }

  TimerId at(Clock::time_point when, std::function<void()> action) override {
    const TimerId id = ++timers_->next;
    auto timer = std::make_unique<asio::steady_timer>(io_, when);
    timer->async_wait(
        [weak = std::weak_ptr<Timers>(timers_), id, action = std::move(action)](std::error_code) {
          // A cancelled timer may have expired already (its handler queued): the table decides.
          const auto timers = weak.lock();
          if (!timers || timers->pending.erase(id) == 0) return;
          action();
        });
    timers_->pending.emplace(id, std::move(timer));
    return id;
  }
  void cancel(TimerId timer) override {
    const auto it = timers_->pending.find(timer);
    if (it == timers_->pending.end()) return;
    it->second->cancel();
    timers_->pending.erase(it);
  }

  void send(const Endpoint& to, wire::MembershipMessage message, milliseconds connectTimeout,
            std::function<void(std::error_code)> done) override {
    asio::co_spawn(io_, mesh_.sendMembership(to, std::move(message), connectTimeout),
                   [done = std::move(done)](std::exception_ptr, std::error_code error) {
                     if (done) done(error);
                   });
  }
  void open(const Endpoint& to, milliseconds timeout,
            std::function<void(LinkOutcome)> done) override {
    openFor(to, Channel::control, timeout, std::move(done));
  }
  void disconnect(const Endpoint& to) override { mesh_.disconnect(to); }
  bool linked(const Endpoint& to, Channel channel) const override {
    return mesh_.hasOpenLink(to, channel);
  }
  void openFor(const Endpoint& to, Channel channel, milliseconds timeout,
               std::function<void(LinkOutcome)> done) override {
    asio::co_spawn(io_, mesh_.open(to, channel, timeout),
                   [done = std::move(done)](std::exception_ptr failure, LinkOutcome link) {
                     if (failure) link.error = std::make_error_code(std::errc::io_error);
                     done(std::move(link));
                   });
  }
  std::string observedAt(const Endpoint& to) const override { return mesh_.observedAddress(to); }
  void punch(const Endpoint& member, std::uint64_t expected, const Endpoint& at, Channel channel,
             bool lead, milliseconds timeout, std::function<void(LinkOutcome)> done) override {
    asio::co_spawn(io_, mesh_.punch(member, expected, at, channel, lead, timeout),
                   [done = std::move(done)](std::exception_ptr failure, LinkOutcome link) {
                     if (failure) link.error = std::make_error_code(std::errc::io_error);
                     done(std::move(link));
                   });
  }
  void relay(const Endpoint& via, const Endpoint& member, std::uint64_t expected, Channel channel,
             milliseconds timeout, std::function<void(LinkOutcome)> done) override {
    asio::co_spawn(io_, mesh_.relay(via, member, expected, channel, timeout),
                   [done = std::move(done)](std::exception_ptr failure, LinkOutcome link) {
                     if (failure) link.error = std::make_error_code(std::errc::io_error);
                     done(std::move(link));
                   });
  }
  void dialBack(const Endpoint& to, std::uint64_t expected, milliseconds timeout,
                std::function<void(std::error_code)> done) override {
    asio::co_spawn(
        io_, mesh_.dialBack(to, timeout),
        [expected, done = std::move(done)](std::exception_ptr failure, LinkOutcome link) {
          if (failure) return done(std::make_error_code(std::errc::io_error));
          if (link.ok() && link.remote.peerId != expected)  // someone else is there
            return done(make_error_code(Errc::identityMismatch));
          done(link.error);
        });
  }

  std::vector<std::byte> identityKeyOf(std::uint64_t id) const override {
    if (id == mesh_.selfId()) {
      const wire::IdentityKey& own = mesh_.identityKey();
      return {own.begin(), own.end()};
    }
    if (!mesh_.identityBook()) return {};
    const std::optional<wire::IdentityKey> key = mesh_.identityBook()->keyOf(id);
    if (!key) return {};
    return {key->begin(), key->end()};
  }
  bool bindIdentity(std::uint64_t id, std::span<const std::byte> bytes) override {
    const std::optional<wire::IdentityKey> key = wire::identityKeyFrom(bytes);
    if (!key) return false;  // not a key at all
    return !mesh_.identityBook() ||
           mesh_.identityBook()->bind(id, *key) != wire::IdentityBook::Verdict::conflict;
  }

 private:
  struct Timers {
    TimerId next = 0;
    std::map<TimerId, std::unique_ptr<asio::steady_timer>> pending;
  };

  asio::io_context& io_;
  Mesh& mesh_;
  std::shared_ptr<Timers> timers_;
};

class ServiceImpl final : public Service {
 public:
  ServiceImpl(asio::io_context& io, Mesh& mesh, Config config)
      : io_(io), mesh_(mesh), environment_(io, mesh), protocol_(environment_, std::move(config)) {
    // The handler outlives nothing: the mesh drops it when the service goes (below).
    mesh_.onMembership([this](const Remote& from, wire::MembershipMessage message) {
      protocol_.handle(from, std::move(message));
    });
    mesh_.setReverser([this](const Endpoint& to, Channel channel) {
      return protocol_.requestReversal(to, channel);
    });
  }
  ~ServiceImpl() override {
    protocol_.stop();
    mesh_.onMembership(nullptr);
    mesh_.setReverser(nullptr);
  }

  void start() override { protocol_.start(); }
  asio::awaitable<void> leave(milliseconds timeout) override {
    struct Wait {
      bool over = false;
      asio::steady_timer timer;
    };
    // The protocol reports by its timeout; the timer's own is a backstop one second later.
    auto wait = std::make_shared<Wait>(
        Wait{false, asio::steady_timer(io_, timeout + std::chrono::seconds(1))});
    protocol_.leave(timeout, [wait] {
      wait->over = true;
      wait->timer.cancel();
    });
    if (!wait->over) co_await wait->timer.async_wait(detail::kUseTuple);
  }
  void stop() override { protocol_.stop(); }
  View view() const override { return protocol_.view(); }
  bool joined() const override { return protocol_.joined(); }
  Traffic traffic() const override { return mesh_.counters(net::Traffic::membership); }
  std::vector<SeedFailure> seedFailures() const override { return protocol_.seedFailures(); }
  std::map<std::uint64_t, std::chrono::microseconds> roundTrips() const override {
    return protocol_.roundTrips();
  }
  void onEvent(std::function<void(const Event&)> handler) override {
    protocol_.onEvent(std::move(handler));
  }

 private:
  asio::io_context& io_;
  Mesh& mesh_;
  MeshEnvironment environment_;
  Protocol protocol_;
};

}  // namespace

std::unique_ptr<Service> makeService(asio::io_context& io, Mesh& mesh, Config config) {
  return std::make_unique<ServiceImpl>(io, mesh, std::move(config));
}

}  // namespace gossamer::net::membership
