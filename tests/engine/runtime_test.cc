// The peer runtime's contract with algorithms (engine/algorithm.h): request/serve/reply, notify,
// gather deadlines and missing peers, messages to self, staging, byte counters, start errors.
#include <atomic>
#include <chrono>
#include <mutex>

#include <doctest/doctest.h>

#include "engine/algorithm.h"
#include "engine/runtime/cluster.h"
#include "net/inproc/inproc_transport.h"
#include "tests/algorithms/algorithm_testing.h"
#include "tests/support/watchdog.h"

namespace gossamer::engine {
namespace {

using namespace std::chrono_literals;

// Exercises the PeerContext once at the first step and records what it saw in metrics.
class Prober final : public Algorithm {
 public:
  static constexpr std::uint32_t kAsk = 1, kAnswer = 2, kTick = 3, kSelf = 4, kSilent = 5;

  std::string name() const override { return "prober"; }
  void setup(PeerContext& ctx) override {
    rank_ = static_cast<std::size_t>(
        std::find(ctx.members().begin(), ctx.members().end(), ctx.self()) - ctx.members().begin());
  }

  double step(PeerContext& ctx) override {
    const double loss = ctx.computeGradients();
    ctx.applyOptimizer();
    const auto& members = ctx.members();
    if (ctx.step() == 0) {
      // request/reply: the successor answers with its rank as a payload and a scalar.
      const PeerId next = members[(rank_ + 1) % members.size()];
      const float mine = static_cast<float>(rank_);
      std::vector<float> ask{mine, mine};
      std::optional<Incoming> answer =
          ctx.request(next, Message{.kind = kAsk, .scalars = {1.5}, .payloads = {ask}}, 5s);
      const float expected = static_cast<float>((rank_ + 1) % members.size());
      const bool good = answer && answer->kind == kAnswer && answer->from == next &&
                        answer->payloadCount() == 1 && answer->payload(0).size() == 3 &&
                        answer->payload(0)[0] == expected && answer->payload(0)[2] == mine &&
                        answer->scalar(0) == 3.0;
      ctx.metrics().set("probe.reply_ok", good ? 1 : 0);

      // A message to self arrives without the network, payload intact.
      std::vector<float> selfPayload{7, 8, 9};
      ctx.send(ctx.self(), Message{.kind = kSelf, .step = 0, .tag = 42, .payloads = {selfPayload}});
      selfPayload[0] = -1;  // staged: the copy in flight must not see this
      const PeerId me = ctx.self();
      GatherResult got = ctx.gather(std::span<const PeerId>(&me, 1), 42, 5s);
      ctx.metrics().set("probe.self_ok",
                        got.complete() && got.messages[0].payload(0)[0] == 7 ? 1 : 0);

      // A peer that is not a member is missing at once, not after the deadline.
      const PeerId stranger = 0xdead;
      const Clock::time_point start = Clock::now();
      got = ctx.gather(std::span<const PeerId>(&stranger, 1), 43, 10s);
      ctx.metrics().set("probe.stranger_ok",
                        got.missing.size() == 1 && Clock::now() - start < 2s ? 1 : 0);

      // A member that never answers: the wait ends at its deadline, no sooner.
      const Clock::time_point before = Clock::now();
      std::optional<Incoming> none = ctx.request(next, Message{.kind = kSilent}, 300ms);
      const auto waited = Clock::now() - before;
      ctx.metrics().set("probe.silent_ok", !none && waited >= 300ms && waited < 3s ? 1 : 0);
    }
    // Everyone tells the first member once per step.
    ctx.notify(members.front(), Message{.kind = kTick, .step = ctx.step()});
    return loss;
  }

  void serve(ServiceContext& ctx, const Incoming& request) override {
    if (request.kind == kAsk) {
      std::vector<float> answer{static_cast<float>(rank_), 0, request.payload(0)[0]};
      ctx.reply(request,
                Message{.kind = kAnswer, .scalars = {2 * request.scalar(0)}, .payloads = {answer}});
    } else if (request.kind == kTick) {
      ctx.metrics().add("probe.ticks", 1);
    }
  }

 private:
  std::size_t rank_ = 0;  // read by serve() only after setup() (the runtime holds serve until then)
};

struct Empty {
  template <typename Bind>
  void bind(Bind&) {}
};

Registry proberRegistry() {
  Registry registry = algorithms::makeRegistry();
  registry.algorithms.add("prober", "test",
                          AlgorithmSpec{"test", "ring", {}, [](const OptionValues&) {
                                          return std::unique_ptr<Algorithm>(new Prober());
                                        }});
  return registry;
}

TEST_CASE("runtime: request, reply, notify, gather and messages to self behave as documented") {
  test::Watchdog watchdog(60s);
  const Registry registry = proberRegistry();
  for (const char* transport : {"inproc", "tcp"}) {
    auto config = test::algorithmCluster("prober", 3, 20);
    config.peer.network.transport = transport;
    // Nobody may finish (which ends waits for it early) while another still probes its silence.
    config.peer.training.minStepTime = 50ms;
    const auto result = runtime::runLocalCluster(config, registry, test::smallData());
    INFO("transport " << transport);
    for (const auto& peer : result.peers) {
      CHECK(peer.metrics.at("probe.reply_ok") == 1);
      CHECK(peer.metrics.at("probe.self_ok") == 1);
      CHECK(peer.metrics.at("probe.stranger_ok") == 1);
      CHECK(peer.metrics.at("probe.silent_ok") == 1);
      CHECK(peer.bytesSent > 0);
      CHECK(peer.commWaitSeconds >= 0.3);  // the silent request was waited for
    }
    // Every notify of every step reached the first member's serve().
    CHECK(result.peers[0].metrics.at("probe.ticks") == 3 * 20);
  }
}

TEST_CASE("runtime: a peer of a different model cannot join, and the start timeout says why") {
  test::Watchdog watchdog(60s);
  const Registry registry = algorithms::makeRegistry();
  auto config = test::algorithmCluster("gosgd", 2, 10);
  config.peer.training.startTimeout = 3s;
  runtime::PeerConfig a = config.peer, b = config.peer;
  a.network.transportMaker = b.network.transportMaker = test::sharedInprocNetwork();
  a.network.secret = b.network.secret = {std::byte{1}, std::byte{2}};
  a.network.peerId = 1;
  b.network.peerId = 2;
  a.training.minPeers = b.training.minPeers = 2;
  b.training.model = "mlp";  // a has softmax regression
  runtime::Peer first(a, registry, test::smallData());
  b.network.seeds = {first.endpoint()};
  runtime::Peer second(b, registry, test::smallData());
  CHECK_THROWS_WITH_AS(second.run(),
                       doctest::Contains("only 1 of the 2 peers (--min-peers) joined"),
                       gossamer::Error);
  CHECK(first.view().members.size() == 1);
}

TEST_CASE("runtime: transports come from the registry: a user's own is used, bad options are refused") {
  test::Watchdog watchdog(60s);
  Registry registry = algorithms::makeRegistry();
  // A transport of the user's: inproc, counting the transports made and what they were given.
  struct Seen {
    std::atomic<int> made{0};
    std::atomic<int> withDeviceMemory{0};
  };
  auto seen = std::make_shared<Seen>();
  registry.transports.add(
      "counted", "inproc, counted",
      transportSpec<net::inproc::Options>(
          {"inproc", 0}, [seen](const net::inproc::Options& options) -> TransportMaker {
            return [seen, options, hub = net::inproc::makeHub()](const TransportEnvironment& env) {
              ++seen->made;
              if (env.deviceMemory.isDevice) ++seen->withDeviceMemory;
              return net::inproc::makeTransport(env.io, hub, options);
            };
          }));
  auto config = test::algorithmCluster("gosgd", 3, 30);
  config.peer.network.transport = "counted";
  const auto result = runtime::runLocalCluster(config, registry, test::smallData());
  CHECK(seen->made == 3);  // one maker for the cluster, one transport per peer
  CHECK(seen->withDeviceMemory == 0);  // CPU peers: host memory only
  for (const auto& peer : result.peers) CHECK(peer.bytesSent > 0);

  // Options are checked when the peer is made, naming the option and the ones known.
  runtime::PeerConfig bad = config.peer;
  bad.network.transport = "tcp";
  bad.network.transportOptions = {{"bogus", "1"}};
  CHECK_THROWS_WITH_AS(runtime::Peer(bad, registry, test::smallData()),
                       doctest::Contains("unknown option 'bogus' (known: keep-alive"), Error);
  bad.network.transport = "carrier-pigeon";
  bad.network.transportOptions.clear();
  CHECK_THROWS_WITH_AS(runtime::Peer(bad, registry, test::smallData()),
                       doctest::Contains("unknown transport 'carrier-pigeon' (known: counted, "
                                         "ibverbs, inproc, tcp)"),
                       Error);
  // RDMA is registered whether or not this build or machine can run it: it says why it cannot.
  std::string reason;
  if (!registry.transports.get("ibverbs").viable({}, &reason)) {
    bad.network.transport = "ibverbs";
    CHECK_THROWS_WITH_AS(runtime::Peer(bad, registry, test::smallData()),
                         doctest::Contains(reason.c_str()), Error);
  }
}

TEST_CASE("runtime: the step time is emulated compute: steps take at least it, and it counts") {
  test::Watchdog watchdog(60s);
  auto config = test::algorithmCluster("gosgd", 2, 20);
  config.peer.training.minStepTime = 10ms;
  const auto result = runtime::runLocalCluster(config, test::registry(), test::smallData());
  for (const auto& peer : result.peers) {
    CHECK(peer.wallSeconds >= 0.2);  // 20 steps of at least 10 ms
    CHECK(peer.computeSeconds >= 0.2);
    CHECK(peer.computeSeconds <= peer.wallSeconds);
    // gosgd never waits in its step: nearly all of it is (emulated) compute.
    CHECK(peer.utilization > 0.5);
    CHECK(peer.utilization <= 1.0);
  }
  CHECK(result.curve.back().utilization > 0.5);
}

// A peer the cluster started with, whose run() comes late, after another member already left:
// it must start at once with the cluster's step count, not wait for a view as large as the one
// the cluster started with (which can never come back).
TEST_CASE("runtime: a peer counted on from the start starts even after a member left") {
  test::Watchdog watchdog(90s);
  // No exchange ("none"): only the start protocol is under test, and a leave is instant.
  auto config = test::algorithmCluster("none", 3, 1000);
  runtime::PeerConfig base = config.peer;
  base.network.transportMaker = test::sharedInprocNetwork();
  base.network.secret = std::vector<std::byte>(32, std::byte{3});
  base.training.minPeers = 3;
  base.training.minStepTime = 2ms;
  base.training.startTimeout = 20s;
  base.training.finalLocalEval = false;
  std::vector<std::unique_ptr<runtime::Peer>> peers;
  for (PeerId id = 1; id <= 3; ++id) {
    runtime::PeerConfig c = base;
    c.network.peerId = id;
    if (id > 1) c.network.seeds = {peers.front()->endpoint()};
    peers.push_back(std::make_unique<runtime::Peer>(c, test::registry(), test::smallData()));
  }
  std::vector<runtime::PeerResult> results(3);
  std::thread first([&] { results[0] = peers[0]->run(); });
  std::thread leaver([&] { results[1] = peers[1]->run(); });
  // Both started with all three; the second leaves at step 20, long before the first is done.
  while (peers[1]->status().step < 20) std::this_thread::sleep_for(1ms);
  peers[1]->requestLeave();
  leaver.join();
  while (peers[0]->view().members.size() != 2) std::this_thread::sleep_for(1ms);
  REQUIRE(peers[0]->status().training);
  const auto start = std::chrono::steady_clock::now();
  std::string error;
  try {
    results[2] = peers[2]->run();  // late, but expected
  } catch (const std::exception& e) {
    error = e.what();
  }
  first.join();
  CHECK(error == "");
  CHECK(results[1].stopped);
  CHECK(results[0].steps == 1000);
  CHECK(results[2].steps == 1000);  // the cluster's count, from step 0
  CHECK(std::chrono::steady_clock::now() - start < 15s);
}

}  // namespace
}  // namespace gossamer::engine
