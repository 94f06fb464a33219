// Every built-in algorithm checks what another peer sent before using it (engine::acceptMessage):
// in a small local cluster, one peer (the liar) sends every payload one value too long, or with a
// NaN in it; the honest peers refuse those messages (counted in "<algorithm>.refused"), go on
// without them, and end with finite models, equal to the closed form of a run without the liar's
// contributions where there is one (learning rate 0, from distinct initial models).
#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include "engine/train/optimizer.h"
#include "tests/algorithms/algorithm_testing.h"
#include "tests/algorithms/forwarding_context.h"
#include "tests/support/watchdog.h"

namespace gossamer::algorithms {
namespace {

using namespace std::chrono_literals;
using engine::PeerId;

enum class Lie { kWrongSize, kNonFinite };

// `message` with each payload copied into `storage` and spoiled: one value more, or a NaN in the
// middle. Staged as a copy (no owner), so `storage` need only outlive the send.
engine::Message spoil(const engine::Message& message, Lie lie,
                      std::vector<std::vector<float>>& storage) {
  engine::Message out = message;
  out.owner = nullptr;
  out.payloads.clear();
  storage.clear();
  storage.reserve(message.payloads.size());
  for (std::span<const float> payload : message.payloads) {
    std::vector<float>& copy = storage.emplace_back(payload.begin(), payload.end());
    if (lie == Lie::kWrongSize) {
      copy.push_back(0.5f);
    } else if (!copy.empty()) {
      copy[copy.size() / 2] = std::numeric_limits<float>::quiet_NaN();
    }
  }
  for (const std::vector<float>& copy : storage) out.payloads.emplace_back(copy);
  return out;
}

class LyingContext final : public test::ForwardingContext {
 public:
  LyingContext(engine::PeerContext& inner, Lie lie) : ForwardingContext(inner), lie_(lie) {}
  void send(std::span<const PeerId> to, const engine::Message& message) override {
    std::vector<std::vector<float>> storage;
    ForwardingContext::send(to, spoil(message, lie_, storage));
  }
  using ForwardingContext::send;
  void notify(PeerId to, const engine::Message& message) override {
    std::vector<std::vector<float>> storage;
    ForwardingContext::notify(to, spoil(message, lie_, storage));
  }
  std::optional<engine::Incoming> request(PeerId to, const engine::Message& message,
                                          engine::Clock::duration timeout) override {
    std::vector<std::vector<float>> storage;
    return ForwardingContext::request(to, spoil(message, lie_, storage), timeout);
  }

 private:
  Lie lie_;
};

class LyingService final : public test::ForwardingServiceContext {
 public:
  LyingService(engine::ServiceContext& inner, Lie lie)
      : ForwardingServiceContext(inner), lie_(lie) {}
  void reply(const engine::Incoming& request, const engine::Message& message) override {
    std::vector<std::vector<float>> storage;
    ForwardingServiceContext::reply(request, spoil(message, lie_, storage));
  }

 private:
  Lie lie_;
};

// The algorithm as the registry makes it, lying on peer `liar` only.
class Liar final : public test::AlgorithmShell {
 public:
  Liar(std::unique_ptr<engine::Algorithm> inner, PeerId liar, Lie lie)
      : AlgorithmShell(std::move(inner)), liar_(liar), lie_(lie) {}

 protected:
  std::unique_ptr<engine::PeerContext> wrap(engine::PeerContext& ctx) override {
    if (ctx.self() != liar_) return AlgorithmShell::wrap(ctx);
    return std::make_unique<LyingContext>(ctx, lie_);
  }
  std::unique_ptr<engine::ServiceContext> wrapService(engine::ServiceContext& ctx) override {
    if (ctx.self() != liar_) return AlgorithmShell::wrapService(ctx);
    return std::make_unique<LyingService>(ctx, lie_);
  }

 private:
  PeerId liar_;
  Lie lie_;
};

// The built-ins plus "liar": `algorithm` (with its options and default topology) lying on `liar`.
engine::Registry liarRegistry(const std::string& algorithm, PeerId liar, Lie lie) {
  engine::Registry registry = makeRegistry();
  engine::AlgorithmSpec spec = registry.algorithms.get(algorithm);
  spec.make = [make = spec.make, liar, lie](const engine::OptionValues& values) {
    return std::unique_ptr<engine::Algorithm>(std::make_unique<Liar>(make(values), liar, lie));
  };
  registry.algorithms.add("liar", algorithm + ", lying on one peer", std::move(spec));
  return registry;
}

struct Run {
  engine::runtime::ClusterConfig config;
  std::string algorithm;
  PeerId liar = 0;
};

// `peers` peers of `algorithm` with learning rate 0 from distinctParams; deadlines of 5 s, which
// every message of the liar meets (it is refused, not missing).
Run lyingRun(const std::string& algorithm, std::size_t peers, std::uint64_t steps, PeerId liar,
             engine::OptionValues options = {}) {
  Run run{test::algorithmCluster("liar", peers, steps, 0.0, std::move(options)), algorithm, liar};
  run.config.peer.training.initialParams = test::distinctParams;
  run.config.peer.training.commTimeout = 5s;
  run.config.peer.training.finishTimeout = 10s;
  return run;
}

engine::runtime::ClusterResult execute(const Run& run, Lie lie) {
  const engine::Registry registry = liarRegistry(run.algorithm, run.liar, lie);
  return engine::runtime::runLocalCluster(run.config, registry, test::smallData());
}

double metric(const engine::runtime::PeerResult& r, const std::string& name) {
  const auto it = r.metrics.find(name);
  return it == r.metrics.end() ? 0.0 : it->second;
}

bool allFinite(std::span<const float> values) {
  return std::all_of(values.begin(), values.end(), [](float v) { return std::isfinite(v); });
}

// Every element of `w` lies between those of the initial models of ranks `a` and `b` (a convex
// combination of the two honest models, nothing of the liar's).
bool betweenInitial(std::span<const float> w, std::size_t a, std::size_t b) {
  const std::vector<float> x = test::distinctParams(a, w.size());
  const std::vector<float> y = test::distinctParams(b, w.size());
  for (std::size_t k = 0; k < w.size(); ++k)
    if (w[k] < std::min(x[k], y[k]) - 1e-5f || w[k] > std::max(x[k], y[k]) + 1e-5f) return false;
  return true;
}

std::vector<float> meanOfInitial(std::size_t a, std::size_t b, std::size_t count) {
  const std::vector<float> x = test::distinctParams(a, count);
  const std::vector<float> y = test::distinctParams(b, count);
  std::vector<float> out(count);
  for (std::size_t k = 0; k < count; ++k) out[k] = (x[k] + y[k]) / 2;
  return out;
}

const char* lieName(Lie lie) {
  return lie == Lie::kWrongSize ? "a payload one value too long" : "a payload with a NaN";
}

// Each case runs once per lie (a loop, not subcases: some cases have subcases of their own, and
// doctest 2.4.9 runs nested subcases incompletely).
constexpr Lie kLies[] = {Lie::kWrongSize, Lie::kNonFinite};

TEST_CASE("refusal: dpsgd leaves a refused model out of its round") {
  test::Watchdog watchdog(120s);
  for (const Lie lie : kLies) {
    CAPTURE(lieName(lie));
    // A ring of 3 (W_ij = 1/3), peer 3 lying: peers 1 and 2 mix with each other only (the row
    // renormalised over the models accepted), so after one step both hold (w_1 + w_2) / 2.
    const Run run = lyingRun("dpsgd", 3, 5, 3);
    const auto result = execute(run, lie);
    const std::size_t n = result.finals[0].params.size();
    for (std::size_t i : {0, 1}) {
      CAPTURE(i);
      CHECK(result.peers[i].steps == 5);
      CHECK(metric(result.peers[i], "dpsgd.refused") == 5);
      CHECK(test::maxAbsDiff(result.finals[i].params, meanOfInitial(0, 1, n)) < 1e-6);
    }
  }
}

TEST_CASE("refusal: gosgd merges no refused transfer") {
  test::Watchdog watchdog(120s);
  for (const Lie lie : kLies) {
    CAPTURE(lieName(lie));
    Run run = lyingRun("gosgd", 3, 100, 3, {{"p", "1"}});
    run.config.peer.training.minStepTime = 1ms;
    // The liar's transfers are never acknowledged, so finish() waits for it until this deadline.
    run.config.peer.training.commTimeout = 1s;
    const auto result = execute(run, lie);
    for (std::size_t i : {0, 1}) {
      CAPTURE(i);
      CHECK(result.peers[i].steps == 100);
      CHECK(metric(result.peers[i], "gosgd.refused") > 0);
      CHECK(metric(result.peers[i], "gosgd.merged") > 0);  // the honest transfers were merged
      CHECK(allFinite(result.finals[i].params));
      CHECK(betweenInitial(result.finals[i].params, 0, 1));
    }
  }
}

TEST_CASE("refusal: ad-psgd applies no refused answer") {
  test::Watchdog watchdog(120s);
  for (const Lie lie : kLies) {
    CAPTURE(lieName(lie));
    // A ring of 4: ids 1 and 3 active, 2 and 4 passive; 4 lies in its answers. With one offer in
    // flight and learning rate 0 an applied answer makes the offerer the average of two models,
    // so the honest models stay convex combinations of the honest initial ones. Offers to the
    // liar expire after 20 ms (an honest answer later than that is dropped: the offerer stays as
    // it was, the passive peer holds an average, both still convex).
    Run run = lyingRun("ad-psgd", 4, 400, 4, {{"outstanding", "1"}, {"timeout", "0.02"}});
    run.config.peer.training.minStepTime = 1ms;
    const auto result = execute(run, lie);
    for (std::size_t i : {0, 1, 2}) {
      CAPTURE(i);
      CHECK(result.peers[i].steps == 400);
      const std::vector<float>& w = result.finals[i].params;
      CHECK(allFinite(w));
      std::vector<std::vector<float>> honest;
      for (std::size_t rank : {0, 1, 2}) honest.push_back(test::distinctParams(rank, w.size()));
      bool inside = true;
      for (std::size_t k = 0; k < w.size(); ++k) {
        float lo = INFINITY, hi = -INFINITY;
        for (const std::vector<float>& h : honest) {
          lo = std::min(lo, h[k]);
          hi = std::max(hi, h[k]);
        }
        inside = inside && w[k] >= lo - 1e-5f && w[k] <= hi + 1e-5f;
      }
      CHECK(inside);
    }
    for (std::size_t i : {0, 2}) {  // the active peers
      CAPTURE(i);
      CHECK(metric(result.peers[i], "ad-psgd.refused") > 0);
      CHECK(metric(result.peers[i], "ad-psgd.merged") > 0);   // the honest answers were applied
      CHECK(metric(result.peers[i], "ad-psgd.expired") > 0);  // the offers to the liar
    }
  }
}

TEST_CASE("refusal: tree-easgd pulls toward no refused model") {
  test::Watchdog watchdog(120s);
  for (const Lie lie : kLies) {
    CAPTURE(lieName(lie));
    // The binary tree of 3: peer 1 the root, peers 2 and 3 its children; peer 3 lies to the root.
    Run run = lyingRun("tree-easgd", 3, 50, 3, {{"tau_up", "1"}, {"tau_down", "1"}});
    run.config.peer.training.minStepTime = 1ms;
    const auto result = execute(run, lie);
    CHECK(metric(result.peers[0], "tree-easgd.refused") > 0);
    for (std::size_t i : {0, 1}) {
      CAPTURE(i);
      CHECK(result.peers[i].steps == 50);
      CHECK(metric(result.peers[i], "tree-easgd.merged") > 0);
      CHECK(allFinite(result.finals[i].params));
      CHECK(betweenInitial(result.finals[i].params, 0, 1));
    }
  }
}

// easgd and eamsgd (--optimizer nesterov): a lying worker's deltas are refused by the center's
// serve(); a lying center's w~ is refused by every worker, which then keeps its own model.
void checkElastic(const std::string& name) {
  test::Watchdog watchdog(120s);
  const engine::train::OptimizerKind optimizer = name == "eamsgd"
                                                     ? engine::train::OptimizerKind::kNesterov
                                                     : engine::train::OptimizerKind::kSgd;
  SUBCASE("a lying worker") {
    for (const Lie lie : kLies) {
      CAPTURE(lieName(lie));
      Run run = lyingRun(name, 3, 50, 3, {{"tau", "1"}, {"final_center", "false"}});
      run.config.peer.training.optimizer.kind = optimizer;
      run.config.peer.training.minStepTime = 1ms;
      const auto result = execute(run, lie);
      CHECK(metric(result.peers[0], name + ".refused") > 0);  // the center, peer 1
      CHECK(metric(result.peers[0], name + ".center_updates") > 0);
      for (std::size_t i : {0, 1}) {
        CAPTURE(i);
        CHECK(result.peers[i].steps == 50);
        CHECK(allFinite(result.finals[i].params));
        CHECK(betweenInitial(result.finals[i].params, 0, 1));
      }
    }
  }
  SUBCASE("a lying center") {
    for (const Lie lie : kLies) {
      CAPTURE(lieName(lie));
      Run run = lyingRun(name, 3, 20, 1, {{"tau", "1"}});
      run.config.peer.training.optimizer.kind = optimizer;
      const auto result = execute(run, lie);
      for (std::size_t i : {1, 2}) {
        CAPTURE(i);
        CHECK(result.peers[i].steps == 20);
        // Every pull of w~ was refused (20 exchanges and the final one), so nothing moved.
        CHECK(metric(result.peers[i], name + ".refused") > 0);
        CHECK(metric(result.peers[i], name + ".missed") == 21);
        CHECK(result.finals[i].params == test::distinctParams(i, result.finals[i].params.size()));
      }
    }
  }
}

TEST_CASE("refusal: easgd refuses a wrong delta or center variable") { checkElastic("easgd"); }

TEST_CASE("refusal: eamsgd refuses a wrong delta or center variable") { checkElastic("eamsgd"); }

TEST_CASE("refusal: sparknet averages no refused model and adopts no refused average") {
  test::Watchdog watchdog(120s);
  SUBCASE("a lying worker: the master averages the two honest models") {
    for (const Lie lie : kLies) {
      CAPTURE(lieName(lie));
      const Run run = lyingRun("sparknet", 3, 5, 3, {{"tau", "1"}});
      const auto result = execute(run, lie);
      CHECK(metric(result.peers[0], "sparknet.refused") == 5);  // one per round, at the master
      const std::size_t n = result.finals[0].params.size();
      for (std::size_t i : {0, 1}) {
        CAPTURE(i);
        CHECK(test::maxAbsDiff(result.finals[i].params, meanOfInitial(0, 1, n)) < 1e-6);
      }
    }
  }
  SUBCASE("a lying master: every worker keeps its own model") {
    for (const Lie lie : kLies) {
      CAPTURE(lieName(lie));
      const Run run = lyingRun("sparknet", 3, 5, 1, {{"tau", "1"}});
      const auto result = execute(run, lie);
      for (std::size_t i : {1, 2}) {
        CAPTURE(i);
        CHECK(metric(result.peers[i], "sparknet.refused") == 5);
        CHECK(result.finals[i].params == test::distinctParams(i, result.finals[i].params.size()));
      }
    }
  }
}

TEST_CASE("refusal: local-sgd fails the all-reduce round on a refused chunk") {
  test::Watchdog watchdog(120s);
  for (const Lie lie : kLies) {
    CAPTURE(lieName(lie));
    // The ring 1 -> 2 -> 3 -> 1: peer 1 receives from the liar, refuses, and aborts the round
    // downstream; nobody completes one, so every honest peer keeps its own model.
    const Run run = lyingRun("local-sgd", 3, 5, 3, {{"tau", "1"}});
    const auto result = execute(run, lie);
    CHECK(metric(result.peers[0], "local-sgd.refused") == 5);
    CHECK(metric(result.peers[0], "local-sgd.invalid") == 5);
    for (std::size_t i : {0, 1}) {
      CAPTURE(i);
      CHECK(result.peers[i].steps == 5);
      CHECK(metric(result.peers[i], "local-sgd.fallbacks") == 5);
      CHECK(result.finals[i].params == test::distinctParams(i, result.finals[i].params.size()));
    }
  }
}

TEST_CASE("refusal: allreduce-sgd steps with the local gradient when a chunk is refused") {
  test::Watchdog watchdog(120s);
  for (const Lie lie : kLies) {
    CAPTURE(lieName(lie));
    Run run = lyingRun("allreduce-sgd", 3, 5, 3);
    run.config.peer.training.optimizer.lr = 0.05f;
    const auto result = execute(run, lie);
    CHECK(metric(result.peers[0], "allreduce-sgd.refused") == 5);
    for (std::size_t i : {0, 1}) {
      CAPTURE(i);
      CHECK(result.peers[i].steps == 5);
      CHECK(metric(result.peers[i], "allreduce-sgd.fallbacks") == 5);
      CHECK(allFinite(result.finals[i].params));
      // It trained (on its own gradients): not the initial model any more.
      CHECK(test::maxAbsDiff(result.finals[i].params,
                             test::distinctParams(i, result.finals[i].params.size())) > 0);
    }
  }
}

TEST_CASE("refusal: dts compensates no window with a refused part") {
  test::Watchdog watchdog(120s);
  for (const Lie lie : kLies) {
    CAPTURE(lieName(lie));
    // Every round holds the liar's contributions and its reduced chunk: the first honest peer to
    // see one refuses it and fails the round, the others fail it on the abort marker. Every
    // window keeps its local updates.
    Run run = lyingRun("dts", 3, 6, 3, {{"delay", "1"}, {"period", "1"}});
    run.config.peer.training.optimizer.lr = 0.05f;
    const auto result = execute(run, lie);
    CHECK(metric(result.peers[0], "dts.refused") + metric(result.peers[1], "dts.refused") >= 6);
    for (std::size_t i : {0, 1}) {
      CAPTURE(i);
      CHECK(result.peers[i].steps == 6);
      CHECK(metric(result.peers[i], "dts.fallbacks") == 6);
      CHECK(metric(result.peers[i], "dts.rounds") == 0);
      CHECK(allFinite(result.finals[i].params));
      CHECK(test::maxAbsDiff(result.finals[i].params,
                             test::distinctParams(i, result.finals[i].params.size())) > 0);
    }
  }
}

}  // namespace
}  // namespace gossamer::algorithms
