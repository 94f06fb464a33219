// What a simulated peer's algorithm sees: the PeerContext of its compute side (SimContext) and the
// ServiceContext of serve() (SimServe), with the runtime's rules as world.h states them.
#pragma once

#include <algorithm>

#include "engine/sim/internal.h"

namespace gossamer::engine::sim::detail {

class SimContext final : public PeerContext {
 public:
  explicit SimContext(SimPeer& p) : p_(p) {}

  PeerId self() const override { return p_.id; }
  const std::vector<PeerId>& members() const override { return p_.roster().members; }
  std::uint64_t epoch() const override { return p_.roster().epoch; }
  const topology::Graph& graph() const override { return *p_.roster().graph; }
  void placeMembers(std::span<const PeerId> order) override { p_.lifecycle->placeMembers(order); }
  std::uint64_t step() const override { return p_.step; }
  std::uint64_t totalSteps() const override { return p_.totalSteps; }
  std::uint64_t runSteps() const override { return p_.runSteps; }
  std::optional<PeerSpeed> speedOf(PeerId peer) const override;
  // The round trips of its SWIM protocol's probes; bandwidths of one connection along the
  // profile's links (the simulated network has one data link per pair).
  std::map<PeerId, PathEstimate> measuredPaths() const override;

  kernels::Compute& compute() override { return *p_.world.shared().compute; }
  std::span<float> params() override { return p_.parts.learner->params(); }
  std::span<float> grads() override { return p_.parts.learner->grads(); }
  train::Optimizer& optimizer() override { return p_.parts.learner->optimizer(); }
  double computeGradients() override;
  void applyOptimizer() override { p_.parts.learner->applyUpdate(); }

  void send(std::span<const PeerId> to, const Message& message) override {
    p_.world.send(p_, to, message, false);
  }
  using PeerContext::send;
  void notify(PeerId to, const Message& message) override {
    p_.world.send(p_, std::span<const PeerId>(&to, 1), message, true);
  }
  std::optional<Incoming> request(PeerId to, const Message& message,
                                  Clock::duration timeout) override;
  GatherResult gather(std::span<const PeerId> from, std::uint64_t tag,
                      Clock::duration timeout) override {
    return gatherFrom(from, tag, timeout, true);
  }
  Inbox& inbox() override { return p_.inbox; }
  bool doneSending(PeerId peer) const override;
  void waitExpired(std::span<const PeerId> /*missing*/) override { ++p_.heard.expiredWaits; }
  Tags& tags() override { return p_.parts.tags; }
  DeviceView upload(std::span<const float> host) override { return DeviceView(host, nullptr); }
  Clock::duration commTimeout() const override {
    return p_.world.shared().config.training.commTimeout;
  }
  const PayloadCompression& compression() const override { return p_.parts.codec->compression(); }

  std::optional<Incoming> pullModel(PeerId from, Clock::duration timeout) override;
  void adoptStep(std::uint64_t step) override { p_.step = step; }
  void setTotalSteps(std::uint64_t steps) override {
    p_.totalSteps = std::max<std::uint64_t>(steps, p_.step);
  }

  // Virtual time; the wall clock is virtual time since the epoch (Clock's contract).
  Clock::time_point now() const override { return p_.world.now(); }
  std::chrono::system_clock::time_point wallNow() const override {
    return std::chrono::system_clock::time_point(
        std::chrono::duration_cast<std::chrono::system_clock::duration>(
            p_.world.now().time_since_epoch()));
  }

  void pause(Clock::duration duration) override { p_.sleepUntil(p_.world.now() + duration); }

  std::mt19937_64& rng() override { return p_.parts.rng; }
  Metrics& metrics() override { return p_.parts.metrics; }
  void roundMerged(std::uint64_t round, std::span<const float> model) override {
    p_.world.roundMerged(round, model);
  }

  // The runtime's gather (engine/runtime/message_queue.cc): each message taken as it comes; a
  // peer that left the view, or (`whileStepping`) finished training (in finish(): released the
  // others) is given up once nothing of its is queued.
  GatherResult gatherFrom(std::span<const PeerId> from, std::uint64_t tag, Duration timeout,
                          bool whileStepping);

 private:
  SimPeer& p_;
};

class SimServe final : public ServiceContext {
 public:
  explicit SimServe(SimPeer& p) : p_(p) {}
  PeerId self() const override { return p_.id; }
  kernels::Compute& hostCompute() override { return *p_.world.shared().compute; }
  void reply(const Incoming& request, const Message& message) override {
    Message answer = message;
    answer.tag = request.tag;
    p_.world.send(p_, std::span<const PeerId>(&request.from, 1), answer, false, false);
  }
  Metrics& metrics() override { return p_.parts.metrics; }

 private:
  SimPeer& p_;
};

}  // namespace gossamer::engine::sim::detail
