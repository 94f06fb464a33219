// The SWIM membership service (net/membership) with many peers in one process, each on its own io
// thread, over inproc, TCP on 127.0.0.1 and shaped(tcp). Every case has a hard deadline (Watchdog)
// and the local profile's T = 200 ms unless it says otherwise.
#include "net/membership/membership.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <doctest/doctest.h>

#include "engine/base/enforce.h"
#include "net/errors.h"
#include "net/inproc/inproc_transport.h"
#include "net/mesh/mesh.h"
#include "net/shaped/shaped_transport.h"
#include "net/tcp/tcp_transport.h"
#include "net/tcp/tls.h"
#include "tests/net/tls_support.h"
#include "tests/support/io_thread.h"
#include "tests/support/watchdog.h"

namespace gossamer::net::membership {
namespace {

using namespace std::chrono_literals;
using test::waitUntil;
using test::Watchdog;

enum class Backend { inproc, tcp, shapedTcp };

const char* name(Backend b) {
  return b == Backend::inproc ? "inproc" : b == Backend::tcp ? "tcp" : "shaped(tcp)";
}

std::vector<std::byte> secretOf(const std::string& text) {
  std::vector<std::byte> out;
  for (char c : text) out.push_back(static_cast<std::byte>(c));
  return out;
}

// What the peers of one test share: the in-process hub, the shaped partitions, and the map from
// listen endpoint to peer index that the shaped transport needs.
struct World {
  Backend backend = Backend::tcp;
  std::shared_ptr<inproc::Hub> hub = inproc::makeHub();
  std::shared_ptr<shaped::Partitions> partitions = std::make_shared<shaped::Partitions>();
  std::mutex mutex;
  std::map<Endpoint, std::size_t> indexOf;
  // tcp backends: the TLS context of peer `id` holding `secret`; empty: plaintext.
  std::function<std::shared_ptr<tcp::TlsContext>(std::uint64_t id, const std::string& secret)> tls;
};

// One peer: its io thread, transport, mesh and membership service, and every event it delivered.
class TestPeer {
 public:
  TestPeer(World& world, std::uint64_t id, std::vector<Endpoint> seeds, const Options& options,
           const std::string& secret = "cluster-secret", Endpoint listen = {})
      : id_(id) {
    io_.call([&] {
      std::unique_ptr<Transport> transport;
      if (world.backend == Backend::inproc) {
        transport = inproc::makeTransport(io_.io(), world.hub);
      } else {
        tcp::Options tcpOptions;
        if (world.tls) tcpOptions.tls = world.tls(id, secret);
        transport = tcp::makeTransport(io_.io(), tcpOptions);
      }
      if (world.backend == Backend::shapedTcp) {
        shaped::Options shaping;  // lan: nothing shaped, only the partitions apply
        shaping.selfIndex = static_cast<std::size_t>(id);
        shaping.indexOf = [&world](const Endpoint& e) -> std::optional<std::size_t> {
          std::lock_guard lock(world.mutex);
          const auto it = world.indexOf.find(e);
          if (it == world.indexOf.end()) return std::nullopt;
          return it->second;
        };
        transport =
            shaped::makeTransport(std::move(transport), std::move(shaping), world.partitions);
      }
      transport_ = std::move(transport);
      MeshOptions meshOptions;
      meshOptions.handshake.clusterId = "membership-test";
      meshOptions.handshake.peerId = id;
      meshOptions.handshake.secret = secretOf(secret);
      meshOptions.handshake.identity = wire::Identity::generate();
      meshOptions.handshake.timeout = 2s;
      mesh_ = std::make_unique<Mesh>(io_.io(), *transport_, meshOptions);
      service_ = makeService(io_.io(), *mesh_, Config{std::move(seeds), options, 100 + id});
      service_->onEvent([this](const Event& e) {
        std::lock_guard lock(mutex_);
        events_.push_back(e);
      });
      if (listen.host.empty())
        listen = Endpoint{world.backend == Backend::inproc ? "inproc" : "127.0.0.1", 0};
      const std::error_code error = mesh_->listen(listen);
      REQUIRE_MESSAGE(!error, "listen: " << error.message());
      endpoint_ = mesh_->localEndpoint();
      {
        std::lock_guard lock(world.mutex);
        world.indexOf[endpoint_] = static_cast<std::size_t>(id);
      }
      service_->start();
    });
  }

  ~TestPeer() {
    kill();
    io_.call([this] {
      service_.reset();
      mesh_.reset();
      transport_.reset();
    });
  }

  // Stops without a word, as kill -9 would: the service stops and every socket closes.
  void kill() {
    if (killed_) return;
    killed_ = true;
    io_.call([this] {
      service_->stop();
      mesh_->close();
    });
  }

  void leave() {
    killed_ = true;
    io_.run([this]() -> asio::awaitable<void> { co_await service_->leave(2s); });
    io_.call([this] { mesh_->close(); });
  }

  // Blocks the peer's io thread for `duration`: it answers nothing meanwhile, then catches up.
  void pause(std::chrono::milliseconds duration) {
    asio::post(io_.io(), [duration] { std::this_thread::sleep_for(duration); });
  }

  std::uint64_t id() const { return id_; }
  const Endpoint& endpoint() const { return endpoint_; }
  View view() const { return service_->view(); }
  bool joined() const { return service_->joined(); }
  std::vector<Event> events() const {
    std::lock_guard lock(mutex_);
    return events_;
  }
  // The kinds of the events about `subject`, in order.
  std::vector<EventKind> eventsAbout(std::uint64_t subject) const {
    std::vector<EventKind> out;
    for (const Event& e : events()) {
      if (e.member.id == subject) out.push_back(e.kind);
    }
    return out;
  }
  std::vector<SeedFailure> seedFailures() {
    return io_.call([this] { return service_->seedFailures(); });
  }
  bool saw(std::uint64_t subject, EventKind kind) const {
    const auto kinds = eventsAbout(subject);
    return std::find(kinds.begin(), kinds.end(), kind) != kinds.end();
  }

 private:
  std::uint64_t id_;
  test::IoThread io_;
  std::unique_ptr<Transport> transport_;
  std::unique_ptr<Mesh> mesh_;
  std::unique_ptr<Service> service_;
  Endpoint endpoint_;
  bool killed_ = false;
  mutable std::mutex mutex_;
  std::vector<Event> events_;
};

using Peers = std::vector<std::unique_ptr<TestPeer>>;

// `n` peers with ids 1..n; peer i > 1 knows only peer i-1 as its seed (a chain).
Peers startChain(World& world, std::size_t n, const Options& options) {
  Peers peers;
  for (std::size_t i = 0; i < n; ++i) {
    std::vector<Endpoint> seeds;
    if (i > 0) seeds.push_back(peers.back()->endpoint());
    peers.push_back(std::make_unique<TestPeer>(world, i + 1, seeds, options));
  }
  return peers;
}

bool allSee(const Peers& peers, std::size_t members) {
  return std::all_of(peers.begin(), peers.end(), [&](const auto& p) {
    return p == nullptr || p->view().members.size() == members;
  });
}

void checkChainJoin(Backend backend) {
  Watchdog watchdog(60s);
  World world;
  world.backend = backend;
  Peers peers = startChain(world, 16, Options::local());
  const bool converged = waitUntil(20s, [&] { return allSee(peers, 16); });
  INFO("backend " << std::string(name(backend)));
  REQUIRE(converged);
  for (const auto& peer : peers) {
    CHECK(peer->joined());
    const std::vector<Event> events = peer->events();
    REQUIRE(!events.empty());
    CHECK(events.front().kind == EventKind::joined);
    CHECK(events.front().member.id == peer->id());
    for (std::size_t i = 0; i < events.size(); ++i) CHECK(events[i].epoch == i + 1);
    CHECK(peer->view().epoch == events.size());
    CHECK(peer->view().ids() ==
          std::vector<std::uint64_t>{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16});
  }
}

TEST_CASE("membership: 16 peers joining by a chain of seeds all see 16 members (inproc)") {
  checkChainJoin(Backend::inproc);
}

TEST_CASE("membership: 16 peers joining by a chain of seeds all see 16 members (tcp)") {
  checkChainJoin(Backend::tcp);
}

void checkKill(Backend backend) {
  Watchdog watchdog(60s);
  World world;
  world.backend = backend;
  Peers peers = startChain(world, 8, Options::local());
  REQUIRE(waitUntil(20s, [&] { return allSee(peers, 8); }));
  peers[3]->kill();
  const std::uint64_t victim = peers[3]->id();
  peers[3].reset();
  const bool detected = waitUntil(20s, [&] {
    return std::all_of(peers.begin(), peers.end(), [&](const auto& p) {
      return p == nullptr || p->saw(victim, EventKind::failed);
    });
  });
  INFO("backend " << std::string(name(backend)));
  REQUIRE(detected);
  CHECK(allSee(peers, 7));
  for (const auto& p : peers) {
    if (p) CHECK(!p->saw(victim, EventKind::left));
  }
}

TEST_CASE("membership: a killed peer is declared failed by every survivor (inproc)") {
  checkKill(Backend::inproc);
}

TEST_CASE("membership: a killed peer is declared failed by every survivor (tcp)") {
  checkKill(Backend::tcp);
}

TEST_CASE(
    "membership: a paused peer that answers within the suspicion window is not declared failed") {
  Watchdog watchdog(60s);
  World world;
  world.backend = Backend::tcp;
  Options options = Options::local();
  // A window of 20 log10(7) T = 17 T = 3.4 s: the refutation has 13 T after the pause ends to
  // arrive, room for a loaded host (with 10, 4.5 T of room, it lost about one full run in ten).
  options.suspicionMultiplier = 20;
  Peers peers = startChain(world, 6, options);
  REQUIRE(waitUntil(20s, [&] { return allSee(peers, 6); }));
  // Paused for 4 T, the peer misses probes and is suspected, then refutes once it runs again.
  const std::uint64_t slow = peers[2]->id();
  peers[2]->pause(4 * options.probeInterval);
  std::this_thread::sleep_for(options.suspicionTimeout(6) + 6 * options.probeInterval);
  for (const auto& p : peers) CHECK_MESSAGE(!p->saw(slow, EventKind::failed), "peer " << p->id());
  CHECK(allSee(peers, 6));
  // It was suspected (not merely lucky): it refuted by raising its incarnation.
  CHECK(peers[0]->view().find(slow)->incarnation >= 1);
}

TEST_CASE("membership: a partition is detected on both sides and heals back to one view") {
  Watchdog watchdog(120s);
  World world;
  world.backend = Backend::shapedTcp;
  Options options = Options::local();
  options.pushPullInterval = 1s;
  Peers peers = startChain(world, 6, options);
  REQUIRE(waitUntil(20s, [&] { return allSee(peers, 6); }));
  const std::vector<std::size_t> left{1, 2, 3}, right{4, 5, 6};  // shaped indices = peer ids
  world.partitions->cut(left, right);
  const bool split = waitUntil(30s, [&] { return allSee(peers, 3); });
  REQUIRE(split);
  for (std::size_t i = 0; i < 3; ++i) {
    CHECK(peers[i]->view().ids() == std::vector<std::uint64_t>{1, 2, 3});
    CHECK(peers[i + 3]->view().ids() == std::vector<std::uint64_t>{4, 5, 6});
    CHECK(peers[i]->saw(5, EventKind::failed));
    CHECK(peers[i + 3]->saw(2, EventKind::failed));
  }
  world.partitions->healAll();
  const bool healed = waitUntil(60s, [&] { return allSee(peers, 6); });
  REQUIRE(healed);
  for (const auto& p : peers) {
    CHECK(p->view().ids() == std::vector<std::uint64_t>{1, 2, 3, 4, 5, 6});
  }
  CHECK(peers[0]->saw(5, EventKind::rejoined));
  CHECK(peers[5]->saw(1, EventKind::rejoined));
}

TEST_CASE("membership: a peer restarting with the same identity goes joined, failed, rejoined") {
  Watchdog watchdog(60s);
  World world;
  world.backend = Backend::tcp;
  const Options options = Options::local();
  Peers peers = startChain(world, 5, options);
  REQUIRE(waitUntil(20s, [&] { return allSee(peers, 5); }));
  const Endpoint address = peers[4]->endpoint();
  peers[4].reset();  // killed
  REQUIRE(waitUntil(20s, [&] { return peers[0]->saw(5, EventKind::failed) && allSee(peers, 4); }));
  peers[4] = std::make_unique<TestPeer>(world, 5, std::vector<Endpoint>{peers[1]->endpoint()},
                                        options, "cluster-secret", address);
  REQUIRE(waitUntil(20s, [&] { return allSee(peers, 5); }));
  for (std::size_t i = 0; i < 4; ++i) {
    CHECK(peers[i]->eventsAbout(5) ==
          std::vector<EventKind>{EventKind::joined, EventKind::failed, EventKind::rejoined});
  }
  // It learned its old incarnation was declared dead and outbid it.
  CHECK(peers[0]->view().find(5)->incarnation >= 1);
}

TEST_CASE(
    "membership: a peer restarting before its failure is detected is recorded failed, then "
    "rejoined") {
  Watchdog watchdog(60s);
  World world;
  world.backend = Backend::tcp;
  const Options options = Options::local();
  Peers peers = startChain(world, 5, options);
  REQUIRE(waitUntil(20s, [&] { return allSee(peers, 5); }));
  const std::uint64_t earlier = peers[0]->view().find(5)->incarnation;
  peers[4].reset();  // killed, and back at once at another address (port 0), by seed 2
  std::this_thread::sleep_for(std::chrono::milliseconds(2));  // a new millisecond: a new life
  peers[4] = std::make_unique<TestPeer>(world, 5, std::vector<Endpoint>{peers[1]->endpoint()},
                                        options, "cluster-secret");
  REQUIRE(waitUntil(20s, [&] {
    for (std::size_t i = 0; i < 4; ++i)
      if (!peers[i]->saw(5, EventKind::rejoined)) return false;
    return allSee(peers, 5);
  }));
  for (std::size_t i = 0; i < 4; ++i) {
    CHECK(peers[i]->eventsAbout(5) ==
          std::vector<EventKind>{EventKind::joined, EventKind::failed, EventKind::rejoined});
    CHECK(peers[i]->view().find(5)->address == peers[4]->endpoint());
  }
  CHECK(peers[0]->view().find(5)->incarnation > earlier);
}

TEST_CASE("membership: a graceful leave is recorded as left, not failed") {
  Watchdog watchdog(60s);
  World world;
  world.backend = Backend::inproc;
  Peers peers = startChain(world, 5, Options::local());
  REQUIRE(waitUntil(20s, [&] { return allSee(peers, 5); }));
  peers[1]->leave();
  peers[1].reset();
  REQUIRE(waitUntil(10s, [&] { return allSee(peers, 4); }));
  std::this_thread::sleep_for(1s);  // any late `failed` would show up by now
  for (const auto& p : peers) {
    if (!p) continue;
    CHECK(p->eventsAbout(2) == std::vector<EventKind>{EventKind::joined, EventKind::left});
  }
}

// Peer 99 with `secret` tries to join a chain of 4 through two seeds: it never gets in, and no
// member ever hears of it.
void checkIntruderStaysOut(World& world, const std::string& secret) {
  Peers peers = startChain(world, 4, Options::local());
  REQUIRE(waitUntil(20s, [&] { return allSee(peers, 4); }));
  TestPeer intruder(world, 99, {peers[0]->endpoint(), peers[2]->endpoint()}, Options::local(),
                    secret);
  std::this_thread::sleep_for(3s);
  CHECK(!intruder.joined());
  CHECK(intruder.view().members.size() == 1);
  CHECK(allSee(peers, 4));
  for (const auto& p : peers) CHECK(p->eventsAbout(99).empty());
}

TEST_CASE("membership: a wrong-secret peer never enters the view") {
  Watchdog watchdog(60s);
  World world;
  world.backend = Backend::tcp;
  checkIntruderStaysOut(world, "not-the-secret");
}

TEST_CASE("membership: over TLS a wrong PSK or an untrusted certificate never enters the view") {
  Watchdog watchdog(60s);
  World world;
  world.backend = Backend::tcp;
  SUBCASE("a key derived from another secret") {
    world.tls = [](std::uint64_t, const std::string& secret) { return test::pskContext(secret); };
    checkIntruderStaysOut(world, "not-the-secret");
  }
  SUBCASE("a certificate of another CA, with the right cluster secret") {
    test::TestCa cluster("cluster");
    test::TestCa stranger("stranger");
    world.tls = [&](std::uint64_t id, const std::string&) {
      const std::string name = "peer-" + std::to_string(id);
      return tcp::makeTlsContext(id == 99 ? stranger.issue(name, cluster.caFile())
                                          : cluster.issue(name, cluster.caFile()));
    };
    checkIntruderStaysOut(world, "cluster-secret");
  }
}

TEST_CASE("membership: a peer no seed admits keeps each seed's last failure as a value") {
  Watchdog watchdog(60s);
  World world;
  world.backend = Backend::tcp;
  Peers peers = startChain(world, 2, Options::local());
  REQUIRE(waitUntil(20s, [&] { return allSee(peers, 2); }));
  // Admitted at the first try: no failure to tell.
  const std::vector<SeedFailure> admitted = peers[1]->seedFailures();
  REQUIRE(admitted.size() == 1);
  CHECK(admitted[0].seed == peers[0]->endpoint());
  CHECK(!admitted[0].error);

  // Nobody at the first seed; the second refuses the handshake (another secret), saying why.
  const Endpoint closed{"127.0.0.1", 1};
  TestPeer intruder(world, 99, {closed, peers[0]->endpoint()}, Options::local(), "not-the-secret");
  REQUIRE(waitUntil(20s, [&] {
    const std::vector<SeedFailure> f = intruder.seedFailures();
    return f.size() == 2 && f[0].error && f[1].error;
  }));
  const std::vector<SeedFailure> failures = intruder.seedFailures();
  CHECK(failures[0].seed == closed);
  CHECK_MESSAGE(failures[0].error == asio::error::timed_out, failures[0].error.message());
  CHECK_FALSE(isRefusal(failures[0].error));
  CHECK(failures[1].seed == peers[0]->endpoint());
  CHECK_MESSAGE(failures[1].error == Errc::authenticationFailed, failures[1].error.message());
  CHECK(isRefusal(failures[1].error));
  CHECK(!failures[1].reason.empty());
  CHECK(!intruder.joined());

  // The seed's own id: its handshake passes, then the seed refuses to admit it, saying why.
  TestPeer twin(world, 2, {peers[1]->endpoint()}, Options::local());
  REQUIRE(waitUntil(20s, [&] {
    const std::vector<SeedFailure> f = twin.seedFailures();
    return f.size() == 1 && f[0].error;
  }));
  const SeedFailure refused = twin.seedFailures().front();
  CHECK_MESSAGE(refused.error == Errc::joinRefused, refused.error.message());
  CHECK(refused.reason.find("is the seed's own") != std::string::npos);
  CHECK(!twin.joined());
}

TEST_CASE("membership: dead seeds are skipped and the first live one admits the peer") {
  Watchdog watchdog(60s);
  World world;
  world.backend = Backend::tcp;
  Peers peers = startChain(world, 2, Options::local());
  REQUIRE(waitUntil(20s, [&] { return allSee(peers, 2); }));
  // 127.0.0.1:1 refuses connections; the peer's own address is dropped from its seeds.
  TestPeer late(world, 3, {Endpoint{"127.0.0.1", 1}, peers[1]->endpoint()}, Options::local());
  CHECK(waitUntil(20s, [&] { return late.view().members.size() == 3 && allSee(peers, 3); }));
}

TEST_CASE("membership: peers started apart with each other as seeds merge into one view") {
  Watchdog watchdog(60s);
  World world;
  world.backend = Backend::tcp;
  Options options = Options::local();
  options.pushPullInterval = 500ms;
  // Two clusters of two form first; the seeds that named the other cluster's peers are retried
  // by push-pull until the four meet.
  Peers peers;
  peers.push_back(std::make_unique<TestPeer>(world, 1, std::vector<Endpoint>{}, options));
  peers.push_back(
      std::make_unique<TestPeer>(world, 2, std::vector<Endpoint>{peers[0]->endpoint()}, options));
  peers.push_back(std::make_unique<TestPeer>(world, 3, std::vector<Endpoint>{}, options));
  peers.push_back(
      std::make_unique<TestPeer>(world, 4, std::vector<Endpoint>{peers[2]->endpoint()}, options));
  REQUIRE(waitUntil(10s, [&] {
    return peers[1]->view().members.size() == 2 && peers[3]->view().members.size() == 2;
  }));
  // Peer 5 knows one peer of each: joining through the first, its push-pull rounds reach the other.
  TestPeer bridge(world, 5, {peers[0]->endpoint(), peers[3]->endpoint()}, options);
  CHECK(waitUntil(30s, [&] { return allSee(peers, 5) && bridge.view().members.size() == 5; }));
}

TEST_CASE("membership: option helpers") {
  const Options local = Options::local();
  CHECK(local.probeInterval == 200ms);
  CHECK(Options::named("lan").probeInterval == 1000ms);
  CHECK_THROWS_WITH_AS(Options::named("wan"), doctest::Contains("use local or lan"),
                       gossamer::Error);
  CHECK(local.suspicionTimeout(1) == 400ms);  // at least 2 T
  CHECK(local.suspicionTimeout(32).count() ==
        doctest::Approx(3 * std::log10(33.0) * 200).epsilon(0.01));
  // Lifeguard's timeout: 6 x the minimum before any confirmation, the minimum after K = 3.
  const double min16 = 3 * std::log10(17.0) * 200;  // 738 ms
  CHECK(local.suspicionTimeout(16, 0).count() == doctest::Approx(6 * min16).epsilon(0.002));
  CHECK(local.suspicionTimeout(16, 1).count() ==
        doctest::Approx(6 * min16 - 5 * min16 * std::log(2.0) / std::log(4.0)).epsilon(0.002));
  CHECK(local.suspicionTimeout(16, 3) == local.suspicionTimeout(16));
  CHECK(local.suspicionTimeout(16, 10) == local.suspicionTimeout(16));
  // K = N - 2 in small clusters: one confirmation suffices with 3 members, none with 2.
  CHECK(local.suspicionTimeout(3, 0).count() ==
        doctest::Approx(6 * local.suspicionTimeout(3).count()).epsilon(0.002));
  CHECK(local.suspicionTimeout(3, 1) == local.suspicionTimeout(3));
  CHECK(local.suspicionTimeout(2, 0) == local.suspicionTimeout(2));
  const Options geo = local.forRoundTrip(std::chrono::microseconds(212000));
  CHECK(geo.probeTimeout == 444ms);
  CHECK(geo.probeInterval == 1110ms);
  CHECK(geo.connectTimeout == 836ms);
  CHECK(local.forRoundTrip(std::chrono::microseconds(1000)).probeInterval == local.probeInterval);
  View view{3, {{1, {"a", 1}, 0, MemberState::alive}, {5, {"b", 2}, 2, MemberState::suspect}}};
  CHECK(view.contains(5));
  CHECK(!view.contains(4));
  CHECK(view.find(5)->incarnation == 2);
  CHECK(view.ids() == std::vector<std::uint64_t>{1, 5});
  CHECK(std::string(name(EventKind::rejoined)) == std::string("rejoined"));
}

}  // namespace
}  // namespace gossamer::net::membership
