// A user-written decentralized algorithm, registered next to the built-ins and run as a local
// cluster of 4 peers on the synthetic dataset. Copy this file to start your own.
//
// The algorithm, pairwise averaging with a random neighbour (pull gossip): every `every` local
// steps, peer i publishes a copy of its model, asks a random out-neighbour j of the topology for
// j's latest copy and sets w_i = (w_i + w_j) / 2, unless that copy is more than `max-lag` steps
// behind w_i (peers run at their own pace; averaging with a far older model would undo training).
// It shows each part of the API once: an options struct, setup(), afterStep() on the compute
// thread, request() with a deadline, acceptMessage() checking what another peer sent before it is
// used, and serve() answering on the io thread from shared state.
#include <cstdio>
#include <memory>
#include <mutex>
#include <vector>

#include "algorithms/builtin.h"
#include "engine/algorithm.h"
#include "engine/base/enforce.h"
#include "engine/base/log.h"
#include "engine/runtime/cluster.h"

using namespace gossamer;

// Every option has a name, a default and a help text (gossamer-peer: --pair-average.every 4).
struct PairAverageOptions {
  std::int64_t every = 2;
  std::int64_t maxLag = 4;

  template <typename Bind>
  void bind(Bind& b) {
    b("every", every, "local steps between two averagings with a random neighbour");
    b("max-lag", maxLag, "skip a neighbour's copy that is more than this many steps behind");
  }
  void validate() const {
    GOSSAMER_ENFORCE(every >= 1, "pair-average.every must be at least 1, not {}", every);
    GOSSAMER_ENFORCE(maxLag >= 0, "pair-average.max-lag must be >= 0, not {}", maxLag);
  }
};

class PairAverage final : public engine::Algorithm {
 public:
  explicit PairAverage(PairAverageOptions options) : options_(options) {}
  std::string name() const override { return "pair-average"; }

  // Compute thread, before the first step and after membership changes: have a copy to serve.
  void setup(engine::PeerContext& ctx) override { publish(ctx); }

  // Compute thread, after each local SGD step (the default step() ran it).
  void afterStep(engine::PeerContext& ctx) override {
    if ((ctx.step() + 1) % static_cast<std::uint64_t>(options_.every) != 0) return;
    publish(ctx);
    const std::optional<engine::PeerId> partner = ctx.graph().randomPartner(ctx.self(), ctx.rng());
    if (!partner) return;  // alone in the cluster
    // Waits at most the deadline; a slow or departed partner just means no averaging this time.
    const std::optional<engine::Incoming> reply = ctx.request(
        *partner, engine::Message{.kind = kPull, .step = ctx.step()}, ctx.commTimeout());
    // Another peer's message is untrusted input: one model of our size, every value finite, or
    // it is refused (a warning naming the sender, counted in "pair-average.refused").
    if (!reply ||
        !engine::acceptMessage(*reply, {.payloads = {ctx.params().size()}}, ctx.metrics(),
                               name()) ||
        reply->step + static_cast<std::uint64_t>(options_.maxLag) < ctx.step()) {
      ctx.metrics().add("pair-average.skipped", 1);
      return;
    }
    // w = (w + w_j) / 2 in one pass; upload() is a no-copy view of the host payload on the CPU.
    const engine::DeviceView theirs = ctx.upload(reply->payload(0));
    ctx.compute().weightedSum(ctx.params(), {{0.5f, ctx.params()}, {0.5f, theirs}});
    ctx.metrics().add("pair-average.averaged", 1);
  }

  // IO thread, concurrently with the steps: answer a pull with the latest copy (the runtime calls
  // serve() only after the first setup(), so there is one). Never block and never touch params()
  // here; reply() copies the payload before it returns.
  void serve(engine::ServiceContext& ctx, const engine::Incoming& request) override {
    if (request.kind != kPull) return;
    std::shared_ptr<const Copy> copy;
    {
      std::lock_guard lock(mutex_);
      copy = published_;
    }
    ctx.reply(request, engine::Message{.kind = kModel, .step = copy->step, .payloads = {copy->w}});
  }

 private:
  static constexpr std::uint32_t kPull = 1;
  static constexpr std::uint32_t kModel = 2;
  struct Copy {
    std::uint64_t step;
    std::vector<float> w;
  };

  // A fresh copy of params for serve(), swapped in under the lock (serve() never waits on a copy).
  void publish(engine::PeerContext& ctx) {
    auto copy = std::make_shared<Copy>(Copy{ctx.step(), std::vector<float>(ctx.params().size())});
    ctx.compute().download(std::span<float>(copy->w), std::span<const float>(ctx.params()));
    std::lock_guard lock(mutex_);
    published_ = std::move(copy);
  }

  PairAverageOptions options_;
  std::mutex mutex_;  // guards published_ (compute thread writes, io thread reads)
  std::shared_ptr<const Copy> published_;
};

int main() {
  log::setLevel("warn");  // just the result line
  // The built-ins, plus ours under its own name with "ring" as its default topology.
  engine::Registry registry = algorithms::makeRegistry();
  engine::AlgorithmSpec spec = engine::algorithmSpec<PairAverage, PairAverageOptions>(
      "example: average with a random neighbour every k steps", "ring");
  registry.algorithms.add("pair-average", spec.description, spec);

  // 4 peers in this process (threads, in-process transport), an MLP on the synthetic dataset.
  engine::runtime::ClusterConfig config;
  config.peers = 4;
  config.progress = false;
  config.peer.network.transport = "inproc";
  engine::runtime::TrainingConfig& t = config.peer.training;
  t.algorithm = "pair-average";
  t.algorithmOptions = {{"every", "2"}};
  t.model = "mlp";
  t.modelConfig.hidden = {32};
  t.optimizer = {.kind = engine::train::OptimizerKind::kMomentum, .lr = 0.05f};
  t.batch = 32;
  t.epochs = 2;
  const auto data = std::make_shared<const engine::DatasetPair>(
      registry.datasets.get("synthetic")({.trainSamples = 8000, .testSamples = 2000}));

  const engine::runtime::ClusterResult result =
      engine::runtime::runLocalCluster(config, registry, data);
  double averaged = 0;
  for (const engine::runtime::PeerResult& peer : result.peers)
    averaged +=
        peer.metrics.count("pair-average.averaged") ? peer.metrics.at("pair-average.averaged") : 0;
  std::printf(
      "custom algorithm: consensus accuracy %.2f%% (worst peer %.2f%%), %llu steps, %.0f "
      "averagings\n",
      100 * result.consensus.accuracy, 100 * result.consensus.minPeerAccuracy,
      static_cast<unsigned long long>(result.peers.front().steps), averaged);
  return result.consensus.accuracy > 0.5 ? 0 : 1;
}
