// Test doubles around a running peer: contexts that forward every call to the runtime's own
// (PeerContext, ServiceContext, Inbox) so that a test overrides only what it changes, and an
// algorithm shell that runs a real algorithm through such contexts. Used to lose messages
// (gosgd's tests) and to make one peer of a cluster send wrong-sized or non-finite payloads (the
// refusal tests).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "engine/algorithm.h"
#include "engine/registry.h"

namespace gossamer::test {

class ForwardingInbox : public engine::Inbox {
 public:
  explicit ForwardingInbox(engine::Inbox& inner) : inner_(inner) {}
  std::vector<engine::Incoming> drain(std::optional<std::uint32_t> kind) override {
    return inner_.drain(kind);
  }
  std::size_t discardBefore(std::uint64_t step) override { return inner_.discardBefore(step); }
  std::size_t size() const override { return inner_.size(); }
  bool wait(std::optional<std::uint32_t> kind, engine::Clock::time_point deadline) override {
    return inner_.wait(kind, deadline);
  }

 protected:
  engine::Inbox& inner_;
};

class ForwardingContext : public engine::PeerContext {
 public:
  explicit ForwardingContext(engine::PeerContext& inner) : inner_(inner) {}

  engine::PeerId self() const override { return inner_.self(); }
  const std::vector<engine::PeerId>& members() const override { return inner_.members(); }
  std::uint64_t epoch() const override { return inner_.epoch(); }
  const topology::Graph& graph() const override { return inner_.graph(); }
  void placeMembers(std::span<const engine::PeerId> order) override { inner_.placeMembers(order); }
  std::uint64_t step() const override { return inner_.step(); }
  std::uint64_t totalSteps() const override { return inner_.totalSteps(); }
  std::uint64_t runSteps() const override { return inner_.runSteps(); }
  std::optional<engine::PeerSpeed> speedOf(engine::PeerId peer) const override {
    return inner_.speedOf(peer);
  }

  kernels::Compute& compute() override { return inner_.compute(); }
  std::span<float> params() override { return inner_.params(); }
  std::span<float> grads() override { return inner_.grads(); }
  engine::train::Optimizer& optimizer() override { return inner_.optimizer(); }
  double computeGradients() override { return inner_.computeGradients(); }
  void applyOptimizer() override { inner_.applyOptimizer(); }

  void send(std::span<const engine::PeerId> to, const engine::Message& message) override {
    inner_.send(to, message);
  }
  using engine::PeerContext::send;
  void notify(engine::PeerId to, const engine::Message& message) override {
    inner_.notify(to, message);
  }
  std::optional<engine::Incoming> request(engine::PeerId to, const engine::Message& message,
                                          engine::Clock::duration timeout) override {
    return inner_.request(to, message, timeout);
  }
  engine::GatherResult gather(std::span<const engine::PeerId> from, std::uint64_t tag,
                              engine::Clock::duration timeout) override {
    return inner_.gather(from, tag, timeout);
  }
  engine::Inbox& inbox() override { return inner_.inbox(); }
  bool doneSending(engine::PeerId peer) const override { return inner_.doneSending(peer); }
  void waitExpired(std::span<const engine::PeerId> missing) override {
    inner_.waitExpired(missing);
  }
  engine::Tags& tags() override { return inner_.tags(); }
  engine::DeviceView upload(std::span<const float> host) override { return inner_.upload(host); }
  engine::Clock::duration commTimeout() const override { return inner_.commTimeout(); }
  engine::NormBound normBound() const override { return inner_.normBound(); }
  const engine::PayloadCompression& compression() const override { return inner_.compression(); }

  std::optional<engine::Incoming> pullModel(engine::PeerId from,
                                            engine::Clock::duration timeout) override {
    return inner_.pullModel(from, timeout);
  }
  std::optional<engine::CaughtUpModel> catchUp(std::span<const engine::PeerId> candidates,
                                               engine::ModelHolders holders,
                                               engine::Clock::duration timeout) override {
    return inner_.catchUp(candidates, holders, timeout);
  }
  std::optional<engine::CaughtUpModel> catchUpState(std::span<const engine::PeerId> candidates,
                                                    std::size_t floats,
                                                    engine::Clock::duration timeout) override {
    return inner_.catchUpState(candidates, floats, timeout);
  }
  void adoptStep(std::uint64_t step) override { inner_.adoptStep(step); }
  void setTotalSteps(std::uint64_t steps) override { inner_.setTotalSteps(steps); }

  engine::Clock::time_point now() const override { return inner_.now(); }
  std::chrono::system_clock::time_point wallNow() const override { return inner_.wallNow(); }
  void pause(engine::Clock::duration duration) override { inner_.pause(duration); }

  std::mt19937_64& rng() override { return inner_.rng(); }
  engine::Metrics& metrics() override { return inner_.metrics(); }
  void roundMerged(std::uint64_t round, std::span<const float> model) override {
    inner_.roundMerged(round, model);
  }

 protected:
  engine::PeerContext& inner_;
};

class ForwardingServiceContext : public engine::ServiceContext {
 public:
  explicit ForwardingServiceContext(engine::ServiceContext& inner) : inner_(inner) {}
  engine::PeerId self() const override { return inner_.self(); }
  kernels::Compute& hostCompute() override { return inner_.hostCompute(); }
  void reply(const engine::Incoming& request, const engine::Message& message) override {
    inner_.reply(request, message);
  }
  engine::Metrics& metrics() override { return inner_.metrics(); }
  engine::NormBound normBound() const override { return inner_.normBound(); }

 protected:
  engine::ServiceContext& inner_;
};

// A real algorithm run through the contexts that wrap() and wrapService() make of the runtime's,
// one per call (the algorithm keeps no context between calls). The defaults forward unchanged.
class AlgorithmShell : public engine::Algorithm {
 public:
  explicit AlgorithmShell(std::unique_ptr<engine::Algorithm> inner) : inner_(std::move(inner)) {}

  std::string name() const override { return inner_->name(); }
  void setup(engine::PeerContext& ctx) override { inner_->setup(*wrap(ctx)); }
  double step(engine::PeerContext& ctx) override { return inner_->step(*wrap(ctx)); }
  void beforeStep(engine::PeerContext& ctx) override { inner_->beforeStep(*wrap(ctx)); }
  void afterStep(engine::PeerContext& ctx) override { inner_->afterStep(*wrap(ctx)); }
  void finish(engine::PeerContext& ctx) override { inner_->finish(*wrap(ctx)); }
  void serve(engine::ServiceContext& ctx, const engine::Incoming& request) override {
    inner_->serve(*wrapService(ctx), request);
  }
  void join(engine::PeerContext& ctx) override { inner_->join(*wrap(ctx)); }
  void leave(engine::PeerContext& ctx) override { inner_->leave(*wrap(ctx)); }
  void saveState(engine::AlgorithmState& state) const override { inner_->saveState(state); }
  void loadState(const engine::AlgorithmState& state) override { inner_->loadState(state); }
  void resumedLate(engine::PeerContext& ctx) override { inner_->resumedLate(*wrap(ctx)); }
  std::optional<engine::SharedState> sharedState() const override { return inner_->sharedState(); }
  bool lockstep() const override { return inner_->lockstep(); }
  void realign(engine::PeerContext& ctx, engine::PeerId ahead) override {
    inner_->realign(*wrap(ctx), ahead);
  }
  std::uint32_t stateVersion() const override { return inner_->stateVersion(); }
  std::uint32_t oldestStateVersion() const override { return inner_->oldestStateVersion(); }
  engine::Invariants invariants() const override { return inner_->invariants(); }
  std::optional<double> runProgress() const override { return inner_->runProgress(); }

  engine::Algorithm& inner() { return *inner_; }

 protected:
  virtual std::unique_ptr<engine::PeerContext> wrap(engine::PeerContext& ctx) {
    return std::make_unique<ForwardingContext>(ctx);
  }
  virtual std::unique_ptr<engine::ServiceContext> wrapService(engine::ServiceContext& ctx) {
    return std::make_unique<ForwardingServiceContext>(ctx);
  }

 private:
  std::unique_ptr<engine::Algorithm> inner_;
};

// An AlgorithmShell whose contexts `wrap` makes.
class WrappingShell final : public AlgorithmShell {
 public:
  using Wrap = std::function<std::unique_ptr<engine::PeerContext>(engine::PeerContext&)>;
  WrappingShell(std::unique_ptr<engine::Algorithm> inner, Wrap wrap)
      : AlgorithmShell(std::move(inner)), wrap_(std::move(wrap)) {}

 protected:
  std::unique_ptr<engine::PeerContext> wrap(engine::PeerContext& ctx) override {
    return wrap_(ctx);
  }

 private:
  Wrap wrap_;
};

// `registry` plus the algorithm `as`: its `base` run through the contexts `wrap` makes.
inline engine::Registry withWrapped(engine::Registry registry, const std::string& base,
                                    const std::string& as, WrappingShell::Wrap wrap) {
  engine::AlgorithmSpec spec = registry.algorithms.get(base);
  spec.make = [make = spec.make, wrap = std::move(wrap)](const engine::OptionValues& values) {
    return std::unique_ptr<engine::Algorithm>(std::make_unique<WrappingShell>(make(values), wrap));
  };
  registry.algorithms.add(as, base + " in a test shell", std::move(spec));
  return registry;
}

// A seeded coin that the peers of one test cluster share: lose() is true with probability
// `loss`. Any thread.
class LossCoin {
 public:
  LossCoin(double loss, std::uint64_t seed) : loss_(loss), rng_(seed) {}
  bool lose() {
    std::lock_guard lock(mutex_);
    return std::uniform_real_distribution<double>(0, 1)(rng_) < loss_;
  }

 private:
  double loss_;
  std::mutex mutex_;
  std::mt19937_64 rng_;
};

}  // namespace gossamer::test
