// The simulated world (world.h): the scheduler's loop, the lives of peers, membership views and
// the faults of the schedule. Links are in network.cc, evaluations and the report in report.cc.
#include "engine/sim/world.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "engine/base/enforce.h"
#include "engine/data/sharding.h"
#include "engine/sim/context.h"
#include "kernels/cpu/cpu_compute.h"

namespace gossamer::engine::sim {
namespace detail {
namespace {

// The model's shape from the data, its architecture from the user (as a peer makes it).
ModelConfig modelConfig(const runtime::TrainingConfig& t, const DatasetPair& data) {
  ModelConfig m = t.modelConfig;
  m.inputs = data.train.features;
  m.classes = data.train.classes;
  m.maxBatch = std::max(m.maxBatch, t.batch);
  return m;
}

}  // namespace

World::World(const SimConfig& config, const Registry& registry,
             std::shared_ptr<const DatasetPair> data)
    : config_(config),
      shared_{config, registry, data, nullptr, nullptr, nullptr, config.training.algorithm},
      evaluator_(registry, config.training.model, modelConfig(config.training, *data), data->test) {
  const runtime::TrainingConfig& t = config.training;
  GOSSAMER_ENFORCE(config.peers >= 1, "a simulation needs at least one peer");
  shared_.training = t;
  shared_.training.evalPoints = runtime::EvalSchedule{.everySteps = config.evalEverySteps};
  shared_.compute = kernels::cpu::makeCompute({.blasThreads = 1});
  shared_.model = registry.models.get(t.model)(*shared_.compute, modelConfig(t, *data));
  const AlgorithmSpec& spec = registry.algorithms.get(t.algorithm);
  shared_.invariants = spec.make(t.algorithmOptions)->invariants();
  shared_.topology = registry.topologies.get(t.topology.empty() ? spec.defaultTopology
                                                                : t.topology)(t.topologyOptions);
  if (t.maxSteps > 0) {
    shared_.totalSteps = t.maxSteps;
  } else {
    const std::size_t perPass =
        (data->train.count() + config.peers * t.batch - 1) / (config.peers * t.batch);
    shared_.totalSteps =
        static_cast<std::uint64_t>(std::ceil(t.epochs * static_cast<double>(perPass)));
  }
  const std::chrono::microseconds roundTrip = config.network.maxRoundTrip();
  shared_.swim = config.membership.forRoundTrip(roundTrip);
  markDelay_ = std::chrono::duration_cast<Duration>(roundTrip / 2);
}

const std::vector<std::size_t>& World::shard(std::size_t count, std::size_t rank) {
  auto it = shards_.find(count);
  if (it == shards_.end()) {
    const runtime::TrainingConfig& t = config_.training;
    it = shards_
             .emplace(count,
                      data::shardIndices(shared_.data->train.labels, shared_.data->train.classes,
                                         {.shards = count,
                                          .kind = t.split,
                                          .dirichletAlpha = t.dirichletAlpha,
                                          .seed = t.seed}))
             .first;
  }
  return it->second.at(rank);
}

std::shared_ptr<const topology::Graph> World::graph(const std::vector<PeerId>& members,
                                                    std::uint64_t step) {
  const std::uint64_t key = shared_.topology->timeVarying() ? step : 0;
  for (const auto& [k, g] : graphs_)
    if (k.first == key && k.second == members) return g;
  auto g = std::make_shared<const topology::Graph>(shared_.topology->build(members, step));
  graphs_.emplace_back(std::make_pair(key, members), g);
  if (graphs_.size() > 8) graphs_.pop_front();
  return g;
}

void World::resume(SimPeer& peer) {
  GOSSAMER_ENFORCE(!inFiber_, "a fiber resumed another");
  if (!peer.blocked.fiber || peer.blocked.fiber->done()) return;
  inFiber_ = true;
  peer.blocked.fiber->resume();
  inFiber_ = false;
}

void World::pokeAll() {
  // From a fiber: later, from the scheduler (fibers never resume fibers); the marks travel.
  at(now_ + markDelay_, [this] {
    std::vector<SimPeer*> waiting;
    for (auto& [id, p] : slots_)
      if (p->blocked.waiting) waiting.push_back(p.get());
    for (SimPeer* p : waiting) p->poke();
  });
}

std::vector<PeerId> World::liveIds() const {
  std::vector<PeerId> ids;
  for (const auto& [id, p] : slots_)
    if (p->phase != Phase::dead) ids.push_back(id);
  return ids;
}

std::vector<const SimPeer*> World::livesOf(PeerId id) const {
  std::vector<const SimPeer*> lives;
  if (const auto it = slots_.find(id); it != slots_.end()) lives.push_back(it->second.get());
  for (const auto& old : past_)
    if (old->id == id) lives.push_back(old.get());
  return lives;
}

void World::startLife(PeerId id, bool late, const train::Checkpoint* checkpoint) {
  std::size_t life = 0;
  if (auto it = slots_.find(id); it != slots_.end()) {
    life = it->second->life + 1;
    past_.push_back(std::move(it->second));
  }
  auto peer = std::make_unique<SimPeer>(*this, id, life, late);
  SimPeer& p = *peer;
  p.environment.resumeFrom(checkpoint);
  slots_[id] = std::move(peer);
  startMembership(p);
  p.start();
  at(now_, [this, id, life] {
    if (SimPeer* q = current(id); q != nullptr && q->life == life) resume(*q);
  });
}

void World::kill(SimPeer& peer) {
  peer.killed = true;
  peer.phase = Phase::dead;
  peer.serveOpen = false;
  // Unwind its fiber now (it is blocked: only one fiber runs, and faults run in the scheduler).
  if (peer.blocked.fiber && !peer.blocked.fiber->done()) {
    inFiber_ = true;
    peer.blocked.fiber->resume();
    inFiber_ = false;
  }
  peer.swim.protocol->stop();  // silently, as a process killed: the others' probes find out
}

void World::applyFault(const Fault& fault) {
  const double t = Seconds(now_ - kStart).count();
  auto skipped = [&](const std::string& why) {
    result_.faultLog.push_back(fmt::format("{:.3f} s: {}: skipped ({})", t, describe(fault), why));
  };
  // The chaos benchmark's rules: a kill leaves more than half the peers (and at least 3), a
  // restart brings back the first killed peer, joins stop at twice the starting peers.
  if (fault.kind == FaultKind::join) {
    if (slots_.size() >= 2 * config_.peers)
      return skipped(fmt::format("{} peers so far", slots_.size()));
    const PeerId id = nextId_++;
    result_.faultLog.push_back(fmt::format("{:.3f} s: {} -> peer {}", t, describe(fault), id));
    startLife(id, true);
    return;
  }
  if (fault.kind == FaultKind::restart || fault.kind == FaultKind::restartFresh) {
    // The first killed peer, at the same address, as a new life: from its checkpoint (--resume)
    // when it has one and the fault says so, else from nothing (the others took it for a new
    // member: it joins late at their step).
    for (const auto& [id, p] : slots_) {
      if (p->phase != Phase::dead || !p->killed) continue;
      const train::Checkpoint* saved =
          fault.kind == FaultKind::restart ? checkpointOf(id) : nullptr;
      result_.faultLog.push_back(fmt::format(
          "{:.3f} s: {} -> peer {} {}", t, describe(fault), id,
          saved != nullptr
              ? fmt::format("from its checkpoint of step {}", saved->metaInt("runtime.step"))
              : std::string("without a checkpoint")));
      startLife(id, true, saved);
      return;
    }
    return skipped("no killed peer");
  }
  std::vector<PeerId> live;
  for (const auto& [id, p] : slots_)
    if (p->phase == Phase::waiting || p->phase == Phase::training) live.push_back(id);
  if (live.empty()) return skipped("no peer in training");
  if ((fault.kind == FaultKind::kill || fault.kind == FaultKind::leave) &&
      live.size() <= std::max<std::size_t>(2, config_.peers / 2))
    return skipped(fmt::format("only {} live", live.size()));
  const PeerId target = live[fault.pick % live.size()];
  SimPeer& peer = *current(target);
  result_.faultLog.push_back(fmt::format("{:.3f} s: {} -> peer {}", t, describe(fault), target));
  const Duration length = fromSeconds(fault.seconds);
  switch (fault.kind) {
    case FaultKind::kill:
      kill(peer);
      break;
    case FaultKind::leave:
      // As SIGTERM: it leaves at its next step boundary (one waiting to start leaves once it
      // has started).
      peer.leaveRequested = true;
      break;
    case FaultKind::restart:
    case FaultKind::restartFresh:
    case FaultKind::join:
      break;
    case FaultKind::partition: {
      // Frames between it and the others are dropped; SWIM on each side declares the other
      // failed, and its reconnect rounds merge the views again after the partition heals.
      partitions_[target] = now_ + length;
      break;
    }
    case FaultKind::loss:
      loss_[target] = {now_ + length, std::clamp(fault.magnitude, 0.0, 1.0)};
      break;
    case FaultKind::straggler: {
      peer.stepFactor = std::max(fault.magnitude, 1.0);
      const std::size_t life = peer.life;
      at(now_ + length, [this, target, life] {
        if (SimPeer* q = current(target); q != nullptr && q->life == life) q->stepFactor = 1;
      });
      break;
    }
  }
}

bool World::anyActive() const {
  for (const auto& [id, p] : slots_)
    if (p->blocked.fiber && !p->blocked.fiber->done() && p->phase != Phase::dead) return true;
  return false;
}

SimResult World::run() {
  for (std::size_t i = 0; i < config_.peers; ++i) {
    const PeerId id = nextId_++;
    slots_[id] = std::make_unique<SimPeer>(*this, id, 0, false);
  }
  for (auto& [id, p] : slots_) startMembership(*p);
  for (auto& [id, p] : slots_) {
    p->start();
    SimPeer* peer = p.get();
    at(now_, [this, peer] { resume(*peer); });
  }
  for (const Fault& f : config_.faults)
    at(kStart + fromSeconds(f.at), [this, f] { applyFault(f); });
  std::function<void()> tick;
  if (config_.evalSeconds > 0) {
    const Duration every = fromSeconds(config_.evalSeconds);
    tick = [this, every, &tick] {
      if (!anyActive()) return;
      evaluate(false);
      at(now_ + every, tick);
    };
    at(now_ + every, tick);
  }
  std::chrono::microseconds slowest = config_.training.minStepTime;
  for (std::chrono::microseconds t : config_.training.peerStepTimes) slowest = std::max(slowest, t);
  const double computeSeconds = static_cast<double>(shared_.totalSteps) * Seconds(slowest).count();
  const double limitSeconds =
      config_.maxVirtualSeconds > 0 ? config_.maxVirtualSeconds : 100 * computeSeconds + 600;
  const TimePoint limit = kStart + fromSeconds(limitSeconds);
  // Until every life has ended and no restart or join is pending (faults due after the end do
  // not happen), or nothing is left to happen.
  while (anyActive()) {
    if (queue_.empty()) {
      result_.violations.push_back(
          {Seconds(now_ - kStart).count(),
           "every live peer waits without a deadline and nothing is on its way (a deadlock)"});
      break;
    }
    Event e = queue_.top();
    queue_.pop();
    if (e.at > limit) {
      result_.violations.push_back(
          {limitSeconds, fmt::format("the run did not end by {:.0f} virtual seconds (a deadlock?)",
                                     limitSeconds)});
      now_ = limit;
      break;
    }
    now_ = e.at;
    ++result_.events;
    e.run();
  }
  result_.virtualSeconds = Seconds(now_ - kStart).count();
  result_.topology = shared_.topology->name();
  if (!slots_.empty()) {
    const std::vector<PeerId> ids = liveIds();
    if (!ids.empty()) result_.spectralGap = graph(ids, 0)->spectralGap();
  }
  evaluatePoints();
  evaluate(true);
  for (const auto& [id, p] : slots_) {
    SimPeerResult r;
    r.id = id;
    r.steps = p->step;
    r.startStep = p->lifecycle->startStep();
    r.alive = p->phase != Phase::dead;
    r.finished = p->phase == Phase::released;
    r.left = p->phase == Phase::left;
    r.bytesSent = p->figures.bytesSent;
    r.commWaitSeconds = Seconds(p->figures.commWait).count();
    if (p->figures.trainStart != TimePoint{} && p->phase != Phase::dead) {
      // A life still training or finishing (a stopped run) ends with the run.
      const TimePoint trained = p->phase == Phase::training ? now_ : p->figures.finishedAt;
      const TimePoint ended =
          p->phase == Phase::released || p->phase == Phase::left ? p->figures.releasedAt : now_;
      r.trainSeconds = Seconds(trained - p->figures.trainStart).count();
      r.finishSeconds = Seconds(ended - trained).count();
      const double run = r.trainSeconds + r.finishSeconds;
      r.commWaitFraction = run > 0 ? r.commWaitSeconds / run : 0;
    }
    r.metrics = p->parts.metrics.values;
    r.error = p->error;
    r.view = p->swim.view;
    for (const auto& old : past_)
      if (old->id == id && r.error.empty() && !old->error.empty()) r.error = old->error;
    result_.peers.push_back(std::move(r));
  }
  checkInvariants(result_);
  // Fibers still blocked (a stopped run) are unwound before their peers go away.
  for (auto& [id, p] : slots_) {
    if (p->blocked.fiber && !p->blocked.fiber->done()) {
      p->killed = true;
      inFiber_ = true;
      p->blocked.fiber->resume();
      inFiber_ = false;
    }
  }
  return std::move(result_);
}

}  // namespace detail

SimResult simulate(const SimConfig& config, const Registry& registry,
                   std::shared_ptr<const DatasetPair> data) {
  GOSSAMER_ENFORCE(data != nullptr, "simulate needs a dataset");
  detail::World world(config, registry, std::move(data));
  return world.run();
}

}  // namespace gossamer::engine::sim
