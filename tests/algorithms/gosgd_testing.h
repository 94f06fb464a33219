// gosgd in a test shell (tests/algorithms/forwarding_context.h): messages lost at a given rate,
// and every life's ledger and every report it sent recorded, for observers of both sides of a
// transfer; and the clusters and oracles the gosgd_*_test.cc files share.
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <utility>
#include <vector>

#include "algorithms/gosgd.h"
#include "engine/builtin.h"
#include "tests/algorithms/algorithm_testing.h"
#include "tests/algorithms/compression_testing.h"
#include "tests/algorithms/forwarding_context.h"

namespace gossamer::test {

using algorithms::Gosgd;
using algorithms::GosgdOptions;
using engine::PeerId;

// Every peer's Gosgd ledger as it was when the peer's algorithm was destroyed: after finish() for
// a peer that finished, at its death for a killed one (nothing runs after a kill).
using Ledgers = std::map<PeerId, Gosgd::Ledger>;

struct Shared {
  std::mutex mutex;
  Ledgers ledgers;
  // Every life's ledger, in the order the lives ended (a restarted peer has two).
  std::vector<std::pair<PeerId, Gosgd::Ledger>> lives;
  // The report (header alpha) of every gosgd message each peer sent, in order.
  std::map<PeerId, std::vector<double>> reportsSent;
  double loss = 0;
  std::mt19937_64 rng{7};
};

// An inbox that drops each message it hands out with probability `loss`: message loss, for
// transfers, acks and announcements alike (the runtime's own protocols are left alone).
class LossyInbox final : public ForwardingInbox {
 public:
  LossyInbox(engine::Inbox& inner, Shared& shared, engine::Metrics& metrics)
      : ForwardingInbox(inner), shared_(shared), metrics_(metrics) {}
  std::vector<engine::Incoming> drain(std::optional<std::uint32_t> kind) override {
    std::vector<engine::Incoming> kept;
    for (engine::Incoming& m : inner_.drain(kind)) {
      std::lock_guard lock(shared_.mutex);
      if (std::uniform_real_distribution<double>(0, 1)(shared_.rng) < shared_.loss) {
        metrics_.add("test.dropped", 1);
        continue;
      }
      kept.push_back(std::move(m));
    }
    return kept;
  }

 private:
  Shared& shared_;
  engine::Metrics& metrics_;
};

class LossyContext final : public ForwardingContext {
 public:
  LossyContext(engine::PeerContext& inner, Shared& shared)
      : ForwardingContext(inner), shared_(shared), inbox_(inner.inbox(), shared, inner.metrics()) {}
  engine::Inbox& inbox() override { return inbox_; }
  void send(std::span<const PeerId> to, const engine::Message& message) override {
    {
      std::lock_guard lock(shared_.mutex);
      for (std::size_t k = 0; k < to.size(); ++k)
        shared_.reportsSent[self()].push_back(message.scalars.at(0));
    }
    ForwardingContext::send(to, message);
  }
  using ForwardingContext::send;

 private:
  Shared& shared_;
  LossyInbox inbox_;
};

// Gosgd in a shell that loses messages (LossyInbox) and records the ledger when the peer
// destroys it.
class Shell final : public AlgorithmShell {
 public:
  Shell(std::unique_ptr<Gosgd> inner, std::shared_ptr<Shared> shared)
      : AlgorithmShell(std::move(inner)), shared_(std::move(shared)) {}
  ~Shell() override {
    std::lock_guard lock(shared_->mutex);
    shared_->ledgers[self_] = static_cast<Gosgd&>(inner()).ledger();
    shared_->lives.emplace_back(self_, shared_->ledgers[self_]);
  }
  void setup(engine::PeerContext& ctx) override {
    self_ = ctx.self();
    AlgorithmShell::setup(ctx);
  }

 protected:
  std::unique_ptr<engine::PeerContext> wrap(engine::PeerContext& ctx) override {
    return std::make_unique<LossyContext>(ctx, *shared_);
  }

 private:
  std::shared_ptr<Shared> shared_;
  PeerId self_ = 0;
};

// A registry whose "gosgd" is the Shell: messages lost with probability `loss`, ledgers recorded.
struct ShellRegistry {
  explicit ShellRegistry(double loss = 0) { shared->loss = loss; }
  std::shared_ptr<Shared> shared = std::make_shared<Shared>();
  engine::Registry registry = [this] {
    engine::Registry r = engine::makeBuiltinRegistry();
    engine::AlgorithmSpec spec =
        engine::algorithmSpec<Gosgd, GosgdOptions>("gosgd in a test shell", "mesh");
    spec.make = [shared = shared](const engine::OptionValues& values) {
      return std::unique_ptr<engine::Algorithm>(std::make_unique<Shell>(
          std::make_unique<Gosgd>(engine::parseOptions<GosgdOptions>(values)), shared));
    };
    r.algorithms.add("gosgd", "gosgd in a test shell", std::move(spec));
    return r;
  }();
  Ledgers ledgers() {
    std::lock_guard lock(shared->mutex);
    return shared->ledgers;
  }
  std::vector<std::pair<PeerId, Gosgd::Ledger>> lives() {
    std::lock_guard lock(shared->mutex);
    return shared->lives;
  }
  std::vector<double> reportsSent(PeerId peer) {
    std::lock_guard lock(shared->mutex);
    return shared->reportsSent[peer];
  }
};

// `peers` peers gossiping with p = 0.5 and learning rate 0 from distinct initial models (the
// push-sum oracle: sum alpha_i w_i stays the initial average), steps slow enough for the acks.
inline engine::runtime::ClusterConfig gossipCluster(std::size_t peers, std::uint64_t steps) {
  auto config = algorithmCluster("gosgd", peers, steps, 0.0, {{"p", "0.5"}});
  config.peer.training.minStepTime = std::chrono::milliseconds(1);
  config.peer.training.initialParams = distinctParams;
  return config;
}

// sum_i alpha_i w_i over the peers in `which`, from their final models and alpha metrics.
inline std::vector<float> massOf(const engine::runtime::ClusterResult& result,
                                 const std::vector<std::size_t>& which) {
  std::vector<double> mass(result.finals[0].params.size(), 0.0);
  for (std::size_t i : which) {
    const double alpha = metricOf(result.peers[i], "gosgd.alpha");
    for (std::size_t k = 0; k < mass.size(); ++k) mass[k] += alpha * result.finals[i].params[k];
  }
  return std::vector<float>(mass.begin(), mass.end());
}

}  // namespace gossamer::test
