// The contexts an algorithm sees (engine/algorithm.h), as adapters over the peer's parts:
// ComputeContext on the compute thread (PeerContext) and ServeContext on the io thread
// (ServiceContext), plus the gate that holds serve() requests back until the algorithm is set up.
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <optional>
#include <random>
#include <span>
#include <vector>

#include "engine/algorithm.h"
#include "engine/life/peer_life.h"
#include "engine/runtime/config.h"
#include "engine/runtime/control.h"
#include "engine/runtime/local_step.h"
#include "engine/runtime/messenger.h"
#include "engine/runtime/peer_state.h"
#include "engine/runtime/staging.h"
#include "engine/train/learner.h"
#include "topology/graph.h"

namespace gossamer::engine::runtime {

// The members in training as the compute thread sees them (the life's, engine/life).
using Roster = life::Roster;

// What a ComputeContext works with; every reference outlives it.
struct ComputeParts {
  PeerId self;
  const TrainingConfig& config;
  kernels::Compute& compute;
  train::Learner& learner;
  const Roster& roster;
  PeerNetwork& network;
  Messenger& messenger;
  MessageQueue& inbox;
  ClusterControl& control;
  Staging& staging;
  LoopStatus& status;
  MetricsMap& metrics;
  std::function<void(std::span<const PeerId>)> place;  // PeerLife::placeMembers
};

// The inbox as an algorithm sees it: the peer's queue, its waits counted as communication time.
class TimedInbox final : public Inbox {
 public:
  TimedInbox(MessageQueue& queue, LoopStatus& status) : queue_(queue), status_(status) {}
  std::vector<Incoming> drain(std::optional<std::uint32_t> kind) override {
    return queue_.drain(kind);
  }
  std::size_t discardBefore(std::uint64_t step) override { return queue_.discardBefore(step); }
  std::size_t size() const override { return queue_.size(); }
  bool wait(std::optional<std::uint32_t> kind, Clock::time_point deadline) override;

 private:
  MessageQueue& queue_;
  LoopStatus& status_;
};

class ComputeContext final : public PeerContext {
 public:
  explicit ComputeContext(ComputeParts parts);

  PeerId self() const override { return p_.self; }
  const std::vector<PeerId>& members() const override { return p_.roster.members; }
  std::uint64_t epoch() const override { return p_.roster.epoch; }
  const topology::Graph& graph() const override { return *p_.roster.graph; }
  void placeMembers(std::span<const PeerId> order) override { p_.place(order); }
  std::uint64_t step() const override { return p_.status.step; }
  std::uint64_t totalSteps() const override { return p_.status.totalSteps; }
  std::uint64_t runSteps() const override { return p_.status.runSteps; }
  std::optional<PeerSpeed> speedOf(PeerId peer) const override {
    return p_.control.speeds().of(peer);
  }
  std::map<PeerId, PathEstimate> measuredPaths() const override {
    return p_.network.measuredPaths();
  }

  kernels::Compute& compute() override { return p_.compute; }
  std::span<float> params() override { return p_.learner.params(); }
  std::span<float> grads() override { return p_.learner.grads(); }
  train::Optimizer& optimizer() override { return p_.learner.optimizer(); }
  // Both count as compute (utilization); computeGradients also takes the emulated step time.
  // During a step of the externally driven loop they are the caller's (setLocalStep).
  double computeGradients() override;
  void applyOptimizer() override;
  // The caller's local step for the step about to run (Peer::step), or null: the peer's learner.
  // `local` must outlive the step.
  void setLocalStep(const LocalStep* local) { local_ = local; }

  void send(std::span<const PeerId> to, const Message& message) override;
  using PeerContext::send;
  void notify(PeerId to, const Message& message) override;
  std::optional<Incoming> request(PeerId to, const Message& message,
                                  Clock::duration timeout) override;
  GatherResult gather(std::span<const PeerId> from, std::uint64_t tag,
                      Clock::duration timeout) override;
  Inbox& inbox() override { return inbox_; }
  bool doneSending(PeerId peer) const override;
  void waitExpired(std::span<const PeerId> missing) override {
    logExpiry(true, std::vector<PeerId>(missing.begin(), missing.end()), Clock::now());
  }
  Tags& tags() override { return tags_; }
  DeviceView upload(std::span<const float> host) override { return p_.staging.upload(host); }
  Clock::duration commTimeout() const override { return p_.config.commTimeout; }
  const PayloadCompression& compression() const override { return p_.config.compression; }
  NormBound normBound() const override { return p_.config.normBound; }

  std::optional<Incoming> pullModel(PeerId from, Clock::duration timeout) override;
  std::optional<CaughtUpModel> catchUp(std::span<const PeerId> candidates, ModelHolders holders,
                                       Clock::duration timeout) override;
  std::optional<CaughtUpModel> catchUpState(std::span<const PeerId> candidates, std::size_t floats,
                                            Clock::duration timeout) override;
  void adoptStep(std::uint64_t step) override { p_.status.step = step; }
  void setTotalSteps(std::uint64_t steps) override {
    p_.status.totalSteps = std::max<std::uint64_t>(steps, p_.status.step);
  }

  std::mt19937_64& rng() override { return rng_; }
  Metrics& metrics() override { return p_.metrics; }
  void roundMerged(std::uint64_t round, std::span<const float> model) override;

  // Gathers and requests that reached their deadline incomplete, since the start.
  std::uint64_t expiredWaits() const { return expiredWaits_; }

 private:
  // Sends staged from the Compute, counting a wait for a send slot as communication time.
  void sendOn(std::span<const PeerId> to, const Message& message, Route route,
              Clock::duration wait);
  // gather() with what ends a wait for a peer early: it left the view, or (`whileStepping`,
  // messages its compute thread sends) it will send nothing more: it finished training (or, in
  // finish(), released the others). Replies from serve() come from its io thread, which serves
  // until it leaves: request() waits for those while it is a member.
  GatherResult gatherFrom(std::span<const PeerId> from, std::uint64_t tag, Clock::duration timeout,
                          bool whileStepping);
  // A gather or request that reached its deadline without `missing`: logged, at most one line
  // every 10 s (with the count since the last).
  void logExpiry(bool gather, const std::vector<PeerId>& missing, Clock::time_point now);

  ComputeParts p_;
  TimedInbox inbox_;
  const LocalStep* local_ = nullptr;
  TagSource tags_;
  std::mt19937_64 rng_;
  Clock::time_point lastExpiryLog_{};
  std::uint64_t expiries_ = 0;      // since the last log line
  std::uint64_t expiredWaits_ = 0;  // since the start
};

// What serve() sees on the io thread.
class ServeContext final : public ServiceContext {
 public:
  ServeContext(PeerId self, kernels::Compute& hostCompute, Messenger& messenger,
               MetricsMap& metrics, NormBound normBound)
      : self_(self),
        hostCompute_(hostCompute),
        messenger_(messenger),
        metrics_(metrics),
        normBound_(normBound) {}
  PeerId self() const override { return self_; }
  kernels::Compute& hostCompute() override { return hostCompute_; }
  void reply(const Incoming& request, const Message& message) override;
  Metrics& metrics() override { return metrics_; }
  NormBound normBound() const override { return normBound_; }

 private:
  PeerId self_;
  kernels::Compute& hostCompute_;
  Messenger& messenger_;
  MetricsMap& metrics_;
  NormBound normBound_;
};

// Holds serve() requests back until the algorithm is set up, then hands each to serve(),
// catching what it throws (a bug in serve() must not end the io thread). Io thread only.
class ServeGate {
 public:
  ServeGate(Algorithm& algorithm, ServiceContext& context)
      : algorithm_(algorithm), context_(context) {}
  void deliver(Incoming request);
  // From now on requests go straight to serve(); those held back go first.
  void open();

 private:
  void serve(const Incoming& request);

  Algorithm& algorithm_;
  ServiceContext& context_;
  bool open_ = false;
  std::vector<Incoming> early_;
};

}  // namespace gossamer::engine::runtime
