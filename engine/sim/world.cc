#include "engine/sim/world.h"

#include <algorithm>
#include <cmath>
#include <deque>
#include <queue>
#include <random>
#include <set>
#include <utility>

#include <fmt/format.h>

#include "engine/base/enforce.h"
#include "engine/base/log.h"
#include "engine/data/sharding.h"
#include "engine/runtime/consensus.h"
#include "engine/sim/fiber.h"
#include "engine/train/learner.h"
#include "engine/train/schedule.h"
#include "kernels/cpu/cpu_compute.h"

namespace gossamer::engine::sim {
namespace {

using TimePoint = Clock::time_point;
using Duration = Clock::duration;
using Seconds = std::chrono::duration<double>;

// Virtual time starts a week after a virtual boot, as a steady clock's would be far from 0: an
// algorithm's "long ago" (a default time_point) is then long ago in virtual time too.
constexpr TimePoint kStart{std::chrono::hours(24 * 7)};
constexpr TimePoint kNever = TimePoint::max();

// The runtime's own message kinds (above the algorithms').
constexpr std::uint32_t kPullKind = kMaxAlgorithmKind + 1;
constexpr std::uint32_t kPullReplyKind = kMaxAlgorithmKind + 2;

Duration fromSeconds(double s) {
  return std::chrono::duration_cast<Duration>(Seconds(std::max(0.0, s)));
}

// Thrown at the blocking point of a killed peer's fiber: unwinds its stack (it never steps again).
// Not a std::exception, so that nothing but the fiber's entry catches it.
struct Killed {};

// A message on the wire: one copy of the payloads, shared by every recipient.
struct Wire {
  PeerId from = 0;
  std::uint32_t kind = 0;
  std::uint64_t step = 0;
  std::uint64_t tag = 0;
  std::vector<double> scalars;
  std::vector<std::uint64_t> integers;
  std::vector<std::vector<float>> payloads;
  std::size_t bytes = 0;
  bool serve = false;  // to serve(), else to the inbox
  // Sent while its sender was training: the sender's finished mark follows it on the link, so a
  // receiver counts the sender as finished only once it has arrived.
  bool beforeFinish = false;
};

// The model's shape from the data, its architecture from the user (as a peer makes it).
ModelConfig modelConfig(const runtime::TrainingConfig& t, const DatasetPair& data) {
  ModelConfig m = t.modelConfig;
  m.inputs = data.train.features;
  m.classes = data.train.classes;
  m.maxBatch = std::max(m.maxBatch, t.batch);
  return m;
}

Incoming incomingOf(const std::shared_ptr<const Wire>& wire) {
  Incoming in;
  in.from = wire->from;
  in.kind = wire->kind;
  in.step = wire->step;
  in.tag = wire->tag;
  in.scalars = wire->scalars;
  in.integers = wire->integers;
  for (const std::vector<float>& p : wire->payloads) in.addPayload(std::span<const float>(p), wire);
  return in;
}

enum class Phase { training, finished, released, dead };

class World;
class SimPeer;

class SimInbox final : public Inbox {
 public:
  explicit SimInbox(SimPeer& peer) : peer_(peer) {}
  std::vector<Incoming> drain(std::optional<std::uint32_t> kind) override;
  std::size_t discardBefore(std::uint64_t step) override;
  std::size_t size() const override { return queue_.size(); }
  bool wait(std::optional<std::uint32_t> kind, Clock::time_point deadline) override;

  std::optional<Incoming> take(PeerId from, std::uint64_t tag) {
    for (auto it = queue_.begin(); it != queue_.end(); ++it) {
      if (it->from == from && it->tag == tag) {
        Incoming m = std::move(*it);
        queue_.erase(it);
        return m;
      }
    }
    return std::nullopt;
  }
  void push(Incoming m) { queue_.push_back(std::move(m)); }

 private:
  SimPeer& peer_;
  std::deque<Incoming> queue_;
};

class SimMetrics final : public Metrics {
 public:
  void add(const std::string& name, double value) override { values[name] += value; }
  void set(const std::string& name, double value) override { values[name] = value; }
  std::map<std::string, double> values;
};

class SimTags final : public Tags {
 public:
  std::uint64_t fresh() override { return (std::uint64_t{1} << 63) | ++next_; }

 private:
  std::uint64_t next_ = 0;
};

// What every peer shares: the world's configuration and its derived, immutable parts.
struct Shared {
  const SimConfig& config;
  const Registry& registry;
  std::shared_ptr<const DatasetPair> data;
  std::unique_ptr<kernels::Compute> compute;
  std::unique_ptr<Model> model;
  std::unique_ptr<topology::Topology> topology;
  std::string algorithm;
  std::uint64_t totalSteps = 0;
  Duration detectDelay{};  // a failure until the others' views drop it
  Duration joinDelay{};    // a join until every view has it
};

class SimContext;
class SimServe;

// One life of a peer: its fiber, learner, algorithm and views. A restart is a new life of the
// same id.
class SimPeer {
 public:
  SimPeer(World& world, PeerId id, std::size_t life, bool late);
  ~SimPeer();

  void start();  // makes the fiber; the world resumes it
  // Blocks the fiber until ready() or the deadline (kNever: none); true when ready. Throws
  // Killed when the peer is killed meanwhile. Fiber only.
  bool block(const std::function<bool()>& ready, TimePoint deadline);
  void sleepUntil(TimePoint t) {
    block([] { return false; }, t);
  }

  // Deliveries and state changes elsewhere: resume a blocked fiber so it looks again.
  void poke();

  World& world;
  const PeerId id;
  const std::size_t life;
  const bool late;
  Phase phase = Phase::training;
  bool killed = false;
  bool waiting = false;
  bool serveOpen = false;
  std::uint64_t blockToken = 0;
  TimePoint finishedAt{}, releasedAt{};  // when it finished training, and finish()
  std::uint64_t step = 0;
  std::uint64_t bytesSent = 0;
  Duration commWait{};
  Duration computeTime{};
  double stepFactor = 1;  // a straggler's
  std::string error;

  // The membership view (what isMember reads) and the roster the compute side adopted.
  std::vector<PeerId> view;
  std::uint64_t viewEpoch = 1;
  std::vector<PeerId> members;
  std::uint64_t epoch = 0;
  std::shared_ptr<const topology::Graph> graph;
  bool finishing = false;
  std::size_t shardCount = 0, shardRank = 0;

  // Frames sent before their senders finished training, on their way to this life, by sender.
  std::map<PeerId, std::size_t> inflightFrom;
  SimInbox inbox{*this};
  SimMetrics metrics;
  SimTags tags;
  std::mt19937_64 rng;
  std::unique_ptr<train::Learner> learner;
  std::unique_ptr<Algorithm> algorithm;
  std::unique_ptr<SimContext> context;
  std::unique_ptr<SimServe> serveContext;
  std::unique_ptr<Fiber> fiber;

 private:
  void body();
  void run();
  void adoptView();
  bool othersDone(bool released) const;
};

class World {
 public:
  World(const SimConfig& config, const Registry& registry, std::shared_ptr<const DatasetPair> data);
  SimResult run();

  TimePoint now() const { return now_; }
  const Shared& shared() const { return shared_; }
  Shared& shared() { return shared_; }

  // Runs `action` at virtual time `at` (never before now), after every event already due then.
  void at(TimePoint at, std::function<void()> action) {
    queue_.push(Event{std::max(at, now_), seq_++, std::move(action)});
  }
  SimPeer* current(PeerId id) {
    const auto it = slots_.find(id);
    return it == slots_.end() ? nullptr : it->second.get();
  }
  // Sends `message` from `from` to each of `to` (one copy of the payloads for all).
  // `checkView`: skip recipients outside the sender's view (the algorithm's sends; replies and
  // the runtime's pulls go to whoever asked).
  void send(SimPeer& from, std::span<const PeerId> to, const Message& message, bool serve,
            bool checkView = true);
  void resume(SimPeer& peer);
  // The peers whose fibers wait, looked at again (a peer finished or left a view).
  void pokeAll();
  // The others' views drop `peer` after SWIM's detection time (a kill, or a peer that failed).
  void detectFailure(const SimPeer& peer);
  // When `peer`'s change of phase reaches `observer` (the link's one-way latency, no earlier
  // than the last frame between them): the runtime's finished and released marks.
  bool phaseSeen(const SimPeer& peer, const SimPeer& observer, Phase phase) const;
  const std::vector<std::size_t>& shard(std::size_t count, std::size_t rank);
  std::shared_ptr<const topology::Graph> graph(const std::vector<PeerId>& members,
                                               std::uint64_t step);
  bool inFiber() const { return inFiber_; }

 private:
  struct Event {
    TimePoint at;
    std::uint64_t seq;
    std::function<void()> run;
    bool operator>(const Event& o) const { return at != o.at ? at > o.at : seq > o.seq; }
  };
  struct LinkState {
    std::unique_ptr<net::shaped::LinkSchedule> schedule;
    TimePoint lastDelivery{};
  };

  void deliver(const std::shared_ptr<const Wire>& wire, PeerId to, std::size_t life);
  void applyFault(const Fault& fault);
  void startLife(PeerId id, bool late);
  void kill(SimPeer& peer);
  // Changes views: `change` applied to each live peer's view that `who` selects; every view
  // changed gets a new epoch.
  void changeViews(const std::function<bool(const SimPeer&)>& who,
                   const std::function<void(std::vector<PeerId>&)>& change);
  std::vector<PeerId> liveIds() const;
  void evaluate(bool final);
  runtime::EvalPoint point(std::span<const runtime::Snapshot> snapshots, std::size_t samples,
                           bool perPeer);
  double extraLoss(PeerId a, PeerId b) const;
  bool partitioned(PeerId a, PeerId b) const;
  bool anyActive() const;
  void checkInvariants(SimResult& result);

  const SimConfig& config_;
  Shared shared_;
  TimePoint now_ = kStart;
  std::uint64_t seq_ = 0;
  std::priority_queue<Event, std::vector<Event>, std::greater<Event>> queue_;
  std::map<PeerId, std::unique_ptr<SimPeer>> slots_;  // the current life of every id
  std::vector<std::unique_ptr<SimPeer>> past_;        // ended lives (killed), freed at the end
  std::map<std::pair<PeerId, PeerId>, LinkState> links_;
  std::map<PeerId, std::pair<TimePoint, double>> loss_;  // until, rate
  std::map<PeerId, TimePoint> partitions_;               // until
  std::map<std::size_t, std::vector<std::vector<std::size_t>>> shards_;
  std::deque<std::pair<std::pair<std::uint64_t, std::vector<PeerId>>,
                       std::shared_ptr<const topology::Graph>>>
      graphs_;
  runtime::ConsensusEvaluator evaluator_;
  PeerId nextId_ = 1;
  bool inFiber_ = false;
  SimResult result_;
  Duration markDelay_{};  // the longest one-way delay of the profile (latency + jitter)
};

// ---- the contexts ------------------------------------------------------------------------------

class SimContext final : public PeerContext {
 public:
  explicit SimContext(SimPeer& p) : p_(p) {}

  PeerId self() const override { return p_.id; }
  const std::vector<PeerId>& members() const override { return p_.members; }
  std::uint64_t epoch() const override { return p_.epoch; }
  const topology::Graph& graph() const override { return *p_.graph; }
  std::uint64_t step() const override { return p_.step; }
  std::uint64_t totalSteps() const override { return p_.world.shared().totalSteps; }

  kernels::Compute& compute() override { return *p_.world.shared().compute; }
  std::span<float> params() override { return p_.learner->params(); }
  std::span<float> grads() override { return p_.learner->grads(); }
  train::Optimizer& optimizer() override { return p_.learner->optimizer(); }
  double computeGradients() override {
    const double loss = p_.learner->computeGradients();
    const Duration stepTime = std::chrono::duration_cast<Duration>(
        p_.world.shared().config.training.minStepTime * p_.stepFactor);
    const TimePoint start = p_.world.now();
    if (stepTime.count() > 0) p_.sleepUntil(start + stepTime);
    p_.computeTime += p_.world.now() - start;
    return loss;
  }
  void applyOptimizer() override { p_.learner->applyUpdate(); }

  void send(std::span<const PeerId> to, const Message& message) override {
    p_.world.send(p_, to, message, false);
  }
  using PeerContext::send;
  void notify(PeerId to, const Message& message) override {
    p_.world.send(p_, std::span<const PeerId>(&to, 1), message, true);
  }
  std::optional<Incoming> request(PeerId to, const Message& message,
                                  Clock::duration timeout) override {
    Message tagged = message;
    tagged.tag = p_.tags.fresh();
    p_.world.send(p_, std::span<const PeerId>(&to, 1), tagged, true);
    GatherResult got = gatherFrom(std::span<const PeerId>(&to, 1), tagged.tag, timeout, false);
    if (got.messages.empty()) return std::nullopt;
    return std::move(got.messages.front());
  }
  GatherResult gather(std::span<const PeerId> from, std::uint64_t tag,
                      Clock::duration timeout) override {
    return gatherFrom(from, tag, timeout, true);
  }
  Inbox& inbox() override { return p_.inbox; }
  Tags& tags() override { return p_.tags; }
  DeviceView upload(std::span<const float> host) override { return DeviceView(host, nullptr); }
  Clock::duration commTimeout() const override {
    return p_.world.shared().config.training.commTimeout;
  }
  const PayloadCompression& compression() const override { return compression_; }

  std::optional<Incoming> pullModel(PeerId from, Clock::duration timeout) override {
    Message pull{.kind = kPullKind, .step = p_.step, .tag = p_.tags.fresh()};
    p_.world.send(p_, std::span<const PeerId>(&from, 1), pull, true, false);
    GatherResult got = gatherFrom(std::span<const PeerId>(&from, 1), pull.tag, timeout, false);
    if (got.messages.empty()) return std::nullopt;
    return std::move(got.messages.front());
  }
  void adoptStep(std::uint64_t step) override { p_.step = step; }

  std::mt19937_64& rng() override { return p_.rng; }
  Metrics& metrics() override { return p_.metrics; }

  // The runtime's gather (engine/runtime/message_queue.cc): each message taken as it comes; a
  // peer that left the view, or (`whileStepping`) finished training (in finish(): released the
  // others) is given up once nothing of its is queued.
  GatherResult gatherFrom(std::span<const PeerId> from, std::uint64_t tag, Duration timeout,
                          bool whileStepping) {
    World& world = p_.world;
    const TimePoint start = world.now();
    const TimePoint deadline = timeout == Duration::max() ? kNever : start + timeout;
    std::vector<std::optional<Incoming>> got(from.size());
    std::vector<bool> given(from.size(), false);
    auto gone = [&](PeerId peer) {
      if (peer == p_.id) return false;
      if (!std::binary_search(p_.view.begin(), p_.view.end(), peer)) return true;
      if (!whileStepping) return false;
      const SimPeer* other = world.current(peer);
      if (other == nullptr || other->phase == Phase::dead) return false;  // until the view drops it
      const Phase mark = p_.finishing ? Phase::released : Phase::finished;
      return world.phaseSeen(*other, p_, mark);
    };
    auto settle = [&] {
      bool done = true;
      for (std::size_t i = 0; i < from.size(); ++i) {
        if (got[i] || given[i]) continue;
        if ((got[i] = p_.inbox.take(from[i], tag))) continue;
        if (gone(from[i])) {
          given[i] = true;
          continue;
        }
        done = false;
      }
      return done;
    };
    if (!p_.block(settle, deadline)) {
      for (std::size_t i = 0; i < from.size(); ++i)
        if (!got[i] && !given[i]) got[i] = p_.inbox.take(from[i], tag);
    }
    p_.commWait += world.now() - start;
    GatherResult result;
    for (std::size_t i = 0; i < from.size(); ++i) {
      if (got[i]) {
        result.messages.push_back(std::move(*got[i]));
      } else {
        result.missing.push_back(from[i]);
      }
    }
    return result;
  }

 private:
  SimPeer& p_;
  PayloadCompression compression_;
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
  Metrics& metrics() override { return p_.metrics; }

 private:
  SimPeer& p_;
};

std::vector<Incoming> SimInbox::drain(std::optional<std::uint32_t> kind) {
  // The ones taken to the back, both parts in arrival order.
  const auto taken = std::stable_partition(
      queue_.begin(), queue_.end(), [&](const Incoming& m) { return kind && m.kind != *kind; });
  std::vector<Incoming> out(std::make_move_iterator(taken), std::make_move_iterator(queue_.end()));
  queue_.erase(taken, queue_.end());
  return out;
}

std::size_t SimInbox::discardBefore(std::uint64_t step) {
  const std::size_t before = queue_.size();
  std::erase_if(queue_, [step](const Incoming& m) { return m.step < step; });
  return before - queue_.size();
}

bool SimInbox::wait(std::optional<std::uint32_t> kind, Clock::time_point deadline) {
  const TimePoint start = peer_.world.now();
  const bool queued = peer_.block(
      [&] {
        return std::any_of(queue_.begin(), queue_.end(),
                           [&](const Incoming& m) { return !kind || m.kind == *kind; });
      },
      deadline);
  peer_.commWait += peer_.world.now() - start;
  return queued;
}

// ---- a peer's life -----------------------------------------------------------------------------

SimPeer::SimPeer(World& w, PeerId peerId, std::size_t lifeNumber, bool joinsLate)
    : world(w),
      id(peerId),
      life(lifeNumber),
      late(joinsLate),
      rng(w.shared().config.training.seed * 0x9e3779b97f4a7c15ull ^ peerId) {
  const Shared& s = w.shared();
  algorithm = s.registry.algorithms.get(s.algorithm).make(s.config.training.algorithmOptions);
  context = std::make_unique<SimContext>(*this);
  serveContext = std::make_unique<SimServe>(*this);
}

SimPeer::~SimPeer() = default;

void SimPeer::start() {
  fiber = std::make_unique<Fiber>([this] { body(); }, world.shared().config.stackBytes);
}

bool SimPeer::block(const std::function<bool()>& ready, TimePoint deadline) {
  GOSSAMER_ENFORCE(world.inFiber(), "a simulated peer blocked outside its fiber");
  for (;;) {
    if (ready()) return true;
    if (world.now() >= deadline) return false;
    const std::uint64_t token = ++blockToken;
    if (deadline != kNever) {
      world.at(deadline, [this, token] {
        if (waiting && blockToken == token) world.resume(*this);
      });
    }
    waiting = true;
    fiber->yield();
    waiting = false;
    if (killed) throw Killed{};
  }
}

void SimPeer::poke() {
  if (waiting && !killed) world.resume(*this);
}

void SimPeer::adoptView() {
  members = view;
  epoch = viewEpoch;
  const std::size_t rank =
      static_cast<std::size_t>(std::find(members.begin(), members.end(), id) - members.begin());
  const std::size_t count = members.size();
  const Shared& s = world.shared();
  const runtime::TrainingConfig& t = s.config.training;
  if (!learner) {
    learner = std::make_unique<train::Learner>(*s.compute, *s.model, t.optimizer, s.data->train,
                                               world.shard(count, rank), t.batch, t.seed);
  } else if (count != shardCount || rank != shardRank) {
    learner->setShard(world.shard(count, rank));
  }
  shardCount = count;
  shardRank = rank;
  graph = world.graph(members, step);
}

bool SimPeer::othersDone(bool released) const {
  for (PeerId other : view) {
    if (other == id) continue;
    const SimPeer* p = world.current(other);
    if (p == nullptr || p->phase == Phase::dead) return false;  // until the view drops it
    if (!world.phaseSeen(*p, *this, released ? Phase::released : Phase::finished)) return false;
  }
  return true;
}

void SimPeer::body() {
  if (killed) return;
  try {
    run();
  } catch (const Killed&) {
    // A kill -9: nothing more of this life runs.
  } catch (const std::exception& e) {
    // The process would end: the others notice it as they notice a kill.
    error = e.what();
    phase = Phase::dead;
    serveOpen = false;
    log::get("sim")->warn("peer {} failed: {}", id, e.what());
    world.detectFailure(*this);
  }
}

void SimPeer::run() {
  const Shared& s = world.shared();
  const runtime::TrainingConfig& t = s.config.training;
  adoptView();
  if (late) {
    algorithm->join(*context);
  } else if (t.initialParams) {
    const std::vector<float> initial = t.initialParams(shardRank, learner->params().size());
    GOSSAMER_ENFORCE_EQ(initial.size(), learner->params().size(),
                        "initialParams returned the wrong size");
    s.compute->upload(learner->params(), std::span<const float>(initial));
  }
  algorithm->setup(*context);
  serveOpen = true;
  while (step < s.totalSteps) {
    if (epoch != viewEpoch) {
      adoptView();
      algorithm->setup(*context);
    } else if (s.topology->timeVarying()) {
      graph = world.graph(members, step);
    }
    learner->optimizer().setLearningRate(
        train::scheduledRate(t.optimizer.lr, t.schedule, step, s.totalSteps));
    algorithm->step(*context);
    ++step;
  }
  phase = Phase::finished;
  finishedAt = world.now();
  world.pokeAll();
  const TimePoint start = world.now();
  block([this] { return othersDone(false); }, start + t.finishTimeout);
  commWait += world.now() - start;
  finishing = true;
  if (epoch != viewEpoch) {
    adoptView();
    algorithm->setup(*context);
  }
  algorithm->finish(*context);
  phase = Phase::released;
  releasedAt = world.now();
  world.pokeAll();
}

// ---- the world ---------------------------------------------------------------------------------

World::World(const SimConfig& config, const Registry& registry,
             std::shared_ptr<const DatasetPair> data)
    : config_(config),
      shared_{config, registry, data, nullptr, nullptr, nullptr, config.training.algorithm},
      evaluator_(registry, config.training.model, modelConfig(config.training, *data), data->test) {
  const runtime::TrainingConfig& t = config.training;
  GOSSAMER_ENFORCE(config.peers >= 1, "a simulation needs at least one peer");
  shared_.compute = kernels::cpu::makeCompute({.blasThreads = 1});
  shared_.model = registry.models.get(t.model)(*shared_.compute, modelConfig(t, *data));
  const AlgorithmSpec& spec = registry.algorithms.get(t.algorithm);
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
  const net::membership::Options swim = config.membership.forRoundTrip(roundTrip);
  shared_.detectDelay = std::chrono::duration_cast<Duration>(swim.probeInterval +
                                                             swim.suspicionTimeout(config.peers));
  shared_.joinDelay = std::chrono::duration_cast<Duration>(swim.probeInterval + roundTrip);
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

bool World::phaseSeen(const SimPeer& peer, const SimPeer& observer, Phase phase) const {
  if (peer.phase < phase) return false;
  if (now_ < (phase == Phase::released ? peer.releasedAt : peer.finishedAt) + markDelay_)
    return false;
  const auto it = observer.inflightFrom.find(peer.id);
  return it == observer.inflightFrom.end() || it->second == 0;
}

double World::extraLoss(PeerId a, PeerId b) const {
  double keep = 1;
  for (PeerId p : {a, b}) {
    const auto it = loss_.find(p);
    if (it != loss_.end() && now_ < it->second.first) keep *= 1 - it->second.second;
  }
  return 1 - keep;
}

bool World::partitioned(PeerId a, PeerId b) const {
  for (PeerId p : {a, b}) {
    const auto it = partitions_.find(p);
    if (it != partitions_.end() && now_ < it->second) return true;
  }
  return false;
}

void World::send(SimPeer& from, std::span<const PeerId> to, const Message& message, bool serve,
                 bool checkView) {
  auto wire = std::make_shared<Wire>();
  wire->from = from.id;
  wire->kind = message.kind;
  wire->step = message.step;
  wire->tag = message.tag;
  wire->scalars = message.scalars;
  wire->integers = message.integers;
  wire->serve = serve;
  wire->beforeFinish = from.phase == Phase::training;
  std::size_t bytes = kFrameHeaderBytes + 8 * (message.scalars.size() + message.integers.size());
  for (std::span<const float> p : message.payloads) {
    wire->payloads.emplace_back(p.begin(), p.end());
    bytes += p.size() * sizeof(float);
  }
  wire->bytes = bytes;
  std::shared_ptr<const Wire> frozen = std::move(wire);
  for (PeerId target : to) {
    if (target == from.id) continue;
    if (checkView && !std::binary_search(from.view.begin(), from.view.end(), target)) {
      log::get("sim")->debug("peer {}: send to {} outside its view skipped", from.id, target);
      continue;
    }
    ++result_.messages;
    SimPeer* receiver = current(target);
    if (receiver == nullptr || receiver->phase == Phase::dead || partitioned(from.id, target)) {
      ++result_.dropped;
      continue;
    }
    if (message.kind < kMaxAlgorithmKind) from.bytesSent += bytes;
    LinkState& link = links_[{from.id, target}];
    if (!link.schedule) {
      // Peer id i is profile index i - 1, as in a local cluster.
      link.schedule = std::make_unique<net::shaped::LinkSchedule>(
          config_.network.between(from.id - 1, target - 1),
          net::shaped::mixSeed(config_.training.seed, (from.id << 32) ^ target));
    }
    const net::shaped::LinkSchedule::Slot slot =
        link.schedule->admit(now_, bytes, extraLoss(from.id, target));
    if (slot.dropped) {
      ++result_.dropped;
      continue;
    }
    link.lastDelivery = slot.deliverAt;
    if (frozen->beforeFinish) ++receiver->inflightFrom[from.id];
    const std::size_t life = receiver->life;
    at(slot.deliverAt, [this, frozen, target, life] { deliver(frozen, target, life); });
  }
}

void World::deliver(const std::shared_ptr<const Wire>& wire, PeerId to, std::size_t life) {
  SimPeer* peer = current(to);
  if (peer == nullptr || peer->life != life) {
    ++result_.dropped;  // sent to a life that has ended
    return;
  }
  if (auto it = peer->inflightFrom.find(wire->from);
      wire->beforeFinish && it != peer->inflightFrom.end() && it->second > 0)
    --it->second;
  if (peer->phase == Phase::dead || partitioned(wire->from, to)) {
    ++result_.dropped;
    return;
  }
  if (wire->kind == kPullKind) {
    // The runtime's model pull: answered with the params and step as they are now.
    Message reply{.kind = kPullReplyKind, .step = peer->step, .tag = wire->tag};
    if (peer->learner) reply.payloads = {peer->learner->params()};
    send(*peer, std::span<const PeerId>(&wire->from, 1), reply, false, false);
    return;
  }
  if (wire->serve) {
    if (!peer->serveOpen) {
      // Held back until setup in the runtime; here it comes again shortly (rare: a joiner).
      at(now_ + std::chrono::milliseconds(1), [this, wire, to, life] {
        if (SimPeer* p = current(to); p != nullptr && p->life == life && wire->beforeFinish)
          ++p->inflightFrom[wire->from];
        deliver(wire, to, life);
      });
      return;
    }
    try {
      peer->algorithm->serve(*peer->serveContext, incomingOf(wire));
    } catch (const std::exception& e) {
      log::get("sim")->error("peer {}: {}::serve failed on a message of kind {} from {}: {}", to,
                             peer->algorithm->name(), wire->kind, wire->from, e.what());
    }
    peer->poke();
    return;
  }
  peer->inbox.push(incomingOf(wire));
  peer->poke();
}

void World::resume(SimPeer& peer) {
  GOSSAMER_ENFORCE(!inFiber_, "a fiber resumed another");
  if (!peer.fiber || peer.fiber->done()) return;
  inFiber_ = true;
  peer.fiber->resume();
  inFiber_ = false;
}

void World::pokeAll() {
  // From a fiber: later, from the scheduler (fibers never resume fibers); the marks travel.
  at(now_ + markDelay_, [this] {
    std::vector<SimPeer*> waiting;
    for (auto& [id, p] : slots_)
      if (p->waiting) waiting.push_back(p.get());
    for (SimPeer* p : waiting) p->poke();
  });
}

std::vector<PeerId> World::liveIds() const {
  std::vector<PeerId> ids;
  for (const auto& [id, p] : slots_)
    if (p->phase != Phase::dead) ids.push_back(id);
  return ids;
}

void World::changeViews(const std::function<bool(const SimPeer&)>& who,
                        const std::function<void(std::vector<PeerId>&)>& change) {
  for (auto& [id, p] : slots_) {
    if (p->phase == Phase::dead || !who(*p)) continue;
    std::vector<PeerId> before = p->view;
    change(p->view);
    std::sort(p->view.begin(), p->view.end());
    p->view.erase(std::unique(p->view.begin(), p->view.end()), p->view.end());
    if (p->view != before) ++p->viewEpoch;
  }
  std::vector<SimPeer*> waiting;
  for (auto& [id, p] : slots_)
    if (p->waiting) waiting.push_back(p.get());
  for (SimPeer* p : waiting) p->poke();
}

void World::startLife(PeerId id, bool late) {
  std::size_t life = 0;
  if (auto it = slots_.find(id); it != slots_.end()) {
    life = it->second->life + 1;
    past_.push_back(std::move(it->second));
  }
  auto peer = std::make_unique<SimPeer>(*this, id, life, late);
  SimPeer& p = *peer;
  slots_[id] = std::move(peer);
  // It learns the members from its seed: every live peer, itself included.
  p.view = liveIds();
  p.start();
  if (late) {
    // The others see it after the join's dissemination.
    at(now_ + shared_.joinDelay, [this, id, life] {
      SimPeer* q = current(id);
      if (q == nullptr || q->life != life || q->phase == Phase::dead) return;
      changeViews([id](const SimPeer& other) { return other.id != id; },
                  [id](std::vector<PeerId>& v) { v.push_back(id); });
    });
  }
  at(now_, [this, id, life] {
    if (SimPeer* q = current(id); q != nullptr && q->life == life) resume(*q);
  });
}

void World::kill(SimPeer& peer) {
  peer.killed = true;
  peer.phase = Phase::dead;
  peer.serveOpen = false;
  // Unwind its fiber now (it is blocked: only one fiber runs, and faults run in the scheduler).
  if (peer.fiber && !peer.fiber->done()) {
    inFiber_ = true;
    peer.fiber->resume();
    inFiber_ = false;
  }
  detectFailure(peer);
}

void World::detectFailure(const SimPeer& peer) {
  const PeerId id = peer.id;
  const std::size_t life = peer.life;
  at(now_ + shared_.detectDelay, [this, id, life] {
    SimPeer* q = current(id);
    // Back already (a restart): SWIM's "rejoined"; the views keep it.
    if (q != nullptr && q->life != life && q->phase != Phase::dead) return;
    changeViews([id](const SimPeer& other) { return other.id != id; },
                [id](std::vector<PeerId>& v) { std::erase(v, id); });
  });
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
  if (fault.kind == FaultKind::restart) {
    for (const auto& [id, p] : slots_) {
      if (p->phase != Phase::dead || !p->killed) continue;
      result_.faultLog.push_back(fmt::format("{:.3f} s: {} -> peer {}", t, describe(fault), id));
      startLife(id, true);
      return;
    }
    return skipped("no killed peer");
  }
  std::vector<PeerId> live;
  for (const auto& [id, p] : slots_)
    if (p->phase == Phase::training) live.push_back(id);
  if (live.empty()) return skipped("no peer in training");
  if (fault.kind == FaultKind::kill && live.size() <= std::max<std::size_t>(2, config_.peers / 2))
    return skipped(fmt::format("only {} live", live.size()));
  const PeerId target = live[fault.pick % live.size()];
  SimPeer& peer = *current(target);
  result_.faultLog.push_back(fmt::format("{:.3f} s: {} -> peer {}", t, describe(fault), target));
  const Duration length = fromSeconds(fault.seconds);
  switch (fault.kind) {
    case FaultKind::kill:
      kill(peer);
      break;
    case FaultKind::restart:
    case FaultKind::join:
      break;
    case FaultKind::partition: {
      partitions_[target] = now_ + length;
      if (length > shared_.detectDelay) {
        // Each side declares the other failed; after the partition heals, push-pull merges the
        // views again.
        const std::size_t life = peer.life;
        at(now_ + shared_.detectDelay, [this, target, life] {
          SimPeer* q = current(target);
          if (q == nullptr || q->life != life || q->phase == Phase::dead) return;
          changeViews([target](const SimPeer& other) { return other.id != target; },
                      [target](std::vector<PeerId>& v) { std::erase(v, target); });
          changeViews([target](const SimPeer& other) { return other.id == target; },
                      [target](std::vector<PeerId>& v) { v = {target}; });
        });
        at(now_ + length + shared_.joinDelay, [this, target, life] {
          SimPeer* q = current(target);
          if (q == nullptr || q->life != life || q->phase == Phase::dead) return;
          const std::vector<PeerId> live = liveIds();
          changeViews([](const SimPeer&) { return true; },
                      [&live](std::vector<PeerId>& v) { v = live; });
        });
      }
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
    if (p->fiber && !p->fiber->done() && p->phase != Phase::dead) return true;
  return false;
}

runtime::EvalPoint World::point(std::span<const runtime::Snapshot> snapshots, std::size_t samples,
                                bool perPeer) {
  runtime::EvalPoint pt;
  pt.wallSeconds = Seconds(now_ - kStart).count();
  pt.minStep = std::numeric_limits<std::uint64_t>::max();
  double bytes = 0, wait = 0, compute = 0;
  std::size_t count = 0;
  for (const auto& [id, p] : slots_) {
    if (p->phase == Phase::dead) continue;
    ++count;
    pt.minStep = std::min(pt.minStep, p->step);
    pt.maxStep = std::max(pt.maxStep, p->step);
    pt.meanStep += static_cast<double>(p->step);
    pt.samples += p->learner ? p->learner->samples() : 0;
    bytes += static_cast<double>(p->bytesSent);
    wait += Seconds(p->commWait).count();
    compute += Seconds(p->computeTime).count();
  }
  if (count == 0) pt.minStep = 0;
  const double n = std::max<double>(static_cast<double>(count), 1);
  pt.meanStep /= n;
  pt.bytesSentPerPeer = bytes / n;
  if (pt.wallSeconds > 0) {
    pt.commWaitFraction = wait / n / pt.wallSeconds;
    pt.utilization = compute / n / pt.wallSeconds;
  }
  pt.consensus = evaluator_.evaluate(snapshots, samples, false);
  if (perPeer && config_.finalPeerSamples > 0) {
    const runtime::ConsensusResult own =
        evaluator_.evaluate(snapshots, config_.finalPeerSamples, true);
    pt.consensus.minPeerAccuracy = own.minPeerAccuracy;
    pt.consensus.meanPeerAccuracy = own.meanPeerAccuracy;
  }
  return pt;
}

void World::evaluate(bool final) {
  std::vector<runtime::Snapshot> snapshots;
  for (const auto& [id, p] : slots_) {
    if (p->phase == Phase::dead || !p->learner) continue;
    const std::span<const float> params = p->learner->params();
    snapshots.push_back({id, p->step, std::vector<float>(params.begin(), params.end())});
  }
  if (snapshots.empty()) return;
  runtime::EvalPoint pt = point(snapshots, final ? 0 : config_.evalSamples, final);
  if (config_.onEval) config_.onEval(pt);
  result_.curve.push_back(pt);
  if (final) {
    result_.consensus = pt.consensus;
    result_.finals = std::move(snapshots);
  }
}

void World::checkInvariants(SimResult& r) {
  std::optional<double> deadWeight;
  double mass = 0;
  for (const SimPeerResult& p : r.peers) {
    if (!p.error.empty())
      r.violations.push_back({r.virtualSeconds, fmt::format("peer {} failed: {}", p.id, p.error)});
    if (!p.alive) continue;
    if (p.steps != shared_.totalSteps)
      r.violations.push_back({r.virtualSeconds, fmt::format("peer {} took {} of the {} steps", p.id,
                                                            p.steps, shared_.totalSteps)});
    if (const auto it = p.metrics.find("gosgd.alpha"); it != p.metrics.end()) mass += it->second;
    if (const auto it = p.metrics.find("gosgd.dead_weight"); it != p.metrics.end()) {
      if (deadWeight && *deadWeight != it->second)
        r.violations.push_back(
            {r.virtualSeconds, fmt::format("the survivors disagree on the weight of the dead: "
                                           "{} and {}",
                                           *deadWeight, it->second)});
      deadWeight = it->second;
    }
  }
  if (shared_.algorithm == "gosgd" && mass + deadWeight.value_or(0) > 1 + 1e-6)
    r.violations.push_back(
        {r.virtualSeconds, fmt::format("the survivors' gossip weights sum to {}, plus {} taken "
                                       "by the dead: > 1",
                                       mass, deadWeight.value_or(0))});
  for (const runtime::Snapshot& s : r.finals) {
    if (!std::all_of(s.params.begin(), s.params.end(), [](float v) { return std::isfinite(v); }))
      r.violations.push_back(
          {r.virtualSeconds, fmt::format("peer {}'s final model is not finite", s.peer)});
  }
  if (config_.invariant) {
    if (std::optional<std::string> broken = config_.invariant(r.finals))
      r.violations.push_back({r.virtualSeconds, *broken});
  }
}

SimResult World::run() {
  VirtualClockScope clock(&now_);
  for (std::size_t i = 0; i < config_.peers; ++i) {
    const PeerId id = nextId_++;
    slots_[id] = std::make_unique<SimPeer>(*this, id, 0, false);
  }
  const std::vector<PeerId> all = liveIds();
  for (auto& [id, p] : slots_) {
    p->view = all;
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
  const double computeSeconds =
      static_cast<double>(shared_.totalSteps) * Seconds(config_.training.minStepTime).count();
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
  evaluate(true);
  for (const auto& [id, p] : slots_) {
    SimPeerResult r;
    r.id = id;
    r.steps = p->step;
    r.alive = p->phase != Phase::dead;
    r.finished = p->phase == Phase::released;
    r.bytesSent = p->bytesSent;
    r.commWaitSeconds = Seconds(p->commWait).count();
    r.metrics = p->metrics.values;
    r.error = p->error;
    for (const auto& old : past_)
      if (old->id == id && r.error.empty() && !old->error.empty()) r.error = old->error;
    result_.peers.push_back(std::move(r));
  }
  checkInvariants(result_);
  // Fibers still blocked (a stopped run) are unwound before their peers go away.
  for (auto& [id, p] : slots_) {
    if (p->fiber && !p->fiber->done()) {
      p->killed = true;
      inFiber_ = true;
      p->fiber->resume();
      inFiber_ = false;
    }
  }
  return std::move(result_);
}

}  // namespace

const char* name(FaultKind kind) {
  switch (kind) {
    case FaultKind::kill:
      return "kill";
    case FaultKind::restart:
      return "restart";
    case FaultKind::join:
      return "join";
    case FaultKind::partition:
      return "partition";
    case FaultKind::loss:
      return "loss";
    case FaultKind::straggler:
      return "straggler";
  }
  return "?";
}

std::optional<FaultKind> faultKindNamed(std::string_view text) {
  for (FaultKind k : {FaultKind::kill, FaultKind::restart, FaultKind::join, FaultKind::partition,
                      FaultKind::loss, FaultKind::straggler})
    if (text == name(k)) return k;
  return std::nullopt;
}

std::vector<Fault> drawFaults(std::uint64_t seed, std::size_t count, double windowSeconds,
                              const std::vector<FaultKind>& kinds) {
  constexpr FaultKind kKinds[] = {FaultKind::kill,      FaultKind::restart, FaultKind::join,
                                  FaultKind::partition, FaultKind::loss,    FaultKind::straggler};
  std::vector<double> weights = {0.25, 0.2, 0.1, 0.15, 0.15, 0.15};
  if (!kinds.empty()) {
    for (std::size_t k = 0; k < weights.size(); ++k)
      if (std::find(kinds.begin(), kinds.end(), kKinds[k]) == kinds.end()) weights[k] = 0;
  }
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> unit(0, 1);
  std::discrete_distribution<std::size_t> kind(weights.begin(), weights.end());
  std::vector<Fault> faults;
  for (std::size_t i = 0; i < count; ++i) {
    Fault f;
    f.at = windowSeconds * (0.1 + 0.75 * unit(rng));
    f.kind = kKinds[kind(rng)];
    f.seconds = 2 + 4 * unit(rng);
    f.magnitude = f.kind == FaultKind::loss ? 0.1 + 0.2 * unit(rng) : 3 + 2 * unit(rng);
    f.pick = rng();
    faults.push_back(f);
  }
  std::sort(faults.begin(), faults.end(),
            [](const Fault& a, const Fault& b) { return a.at < b.at; });
  return faults;
}

std::string describe(const Fault& f) {
  switch (f.kind) {
    case FaultKind::kill:
    case FaultKind::join:
    case FaultKind::restart:
      return name(f.kind);
    case FaultKind::partition:
      return fmt::format("partition for {:.2f} s", f.seconds);
    case FaultKind::loss:
      return fmt::format("loss {:.3f} for {:.2f} s", f.magnitude, f.seconds);
    case FaultKind::straggler:
      return fmt::format("straggler x{:.2f} for {:.2f} s", f.magnitude, f.seconds);
  }
  return "?";
}

SimResult simulate(const SimConfig& config, const Registry& registry,
                   std::shared_ptr<const DatasetPair> data) {
  GOSSAMER_ENFORCE(data != nullptr, "simulate needs a dataset");
  World world(config, registry, std::move(data));
  return world.run();
}

std::string format(const SimResult& r) {
  std::string out = fmt::format("topology {} (spectral gap {:.6f})\n", r.topology, r.spectralGap);
  out += "virtual_s,min_step,max_step,mean_step,samples,bytes_per_peer,accuracy,loss,distance\n";
  for (const runtime::EvalPoint& p : r.curve)
    out += fmt::format("{:.6f},{},{},{:.3f},{},{:.0f},{:.6f},{:.6f},{:.9g}\n", p.wallSeconds,
                       p.minStep, p.maxStep, p.meanStep, p.samples, p.bytesSentPerPeer,
                       p.consensus.accuracy, p.consensus.loss, p.consensus.distance);
  out += fmt::format(
      "final accuracy {:.6f} loss {:.6f} distance {:.9g} min peer {:.6f} mean peer "
      "{:.6f} peers {}\n",
      r.consensus.accuracy, r.consensus.loss, r.consensus.distance, r.consensus.minPeerAccuracy,
      r.consensus.meanPeerAccuracy, r.consensus.peers);
  out += fmt::format("virtual seconds {:.6f}, events {}, frames {}, dropped {}\n", r.virtualSeconds,
                     r.events, r.messages, r.dropped);
  for (const std::string& f : r.faultLog) out += "fault " + f + "\n";
  for (const SimPeerResult& p : r.peers)
    out += fmt::format("peer {} steps {} {} bytes {} wait {:.6f}{}\n", p.id, p.steps,
                       p.alive ? (p.finished ? "finished" : "unfinished") : "dead", p.bytesSent,
                       p.commWaitSeconds, p.error.empty() ? "" : " error: " + p.error);
  for (const Violation& v : r.violations)
    out += fmt::format("violation at {:.3f} s: {}\n", v.at, v.what);
  return out;
}

}  // namespace gossamer::engine::sim
