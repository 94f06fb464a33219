#include "engine/runtime/peer.h"

#include <algorithm>
#include <cmath>
#include <random>

#include <asio/post.hpp>
#include <fmt/format.h>

#include "engine/base/enforce.h"
#include "engine/base/log.h"
#include "engine/runtime/membership_rules.h"
#include "engine/runtime/peer_impl.h"

namespace gossamer::engine::runtime {

const std::shared_ptr<spdlog::logger>& peerLogger() {
  static const auto l = log::get("peer");
  return l;
}

std::vector<PeerId> without(std::vector<PeerId> ids, PeerId self) {
  std::erase(ids, self);
  return ids;
}

namespace {

const auto& logger() { return peerLogger(); }

PeerId chooseId(const NetworkConfig& n) {
  if (n.peerId != 0) return n.peerId;
  if (n.listen.port != 0) return peerIdFor(n.advertise.host.empty() ? n.listen : n.advertise);
  std::random_device random;
  return random() | (std::uint64_t{random()} << 32);
}

std::string seedList(const NetworkConfig& n) {
  std::string seeds;
  for (const auto& seed : n.seeds) {
    if (!seeds.empty()) seeds += ',';
    seeds += seed.str();
  }
  return seeds.empty() ? "none (this peer started the cluster)" : seeds;
}

// The model of an externally driven peer: only the layout of the flat buffers; the caller computes
// the gradients and evaluates (engine/runtime/peer.h).
class LayoutModel final : public Model {
 public:
  LayoutModel(kernels::Compute& compute, ParamLayout layout)
      : compute_(compute), layout_(std::move(layout)) {}
  std::string name() const override { return "external"; }
  const ParamLayout& layout() const override { return layout_; }
  std::size_t inputFeatures() const override { return 0; }
  std::size_t classes() const override { return 0; }
  std::size_t maxBatch() const override { return 0; }
  void initialize(std::span<float> params, std::uint64_t) override { compute_.fill(params, 0.0f); }
  double forwardBackward(const DeviceBatch&, std::span<const float>, std::span<float>) override {
    GOSSAMER_THROW("an externally driven peer's caller computes the gradients");
  }
  EvalResult evaluate(const DeviceBatch&, std::span<const float>) override {
    GOSSAMER_THROW("an externally driven peer's caller evaluates its model");
  }

 private:
  kernels::Compute& compute_;
  ParamLayout layout_;
};

}  // namespace

std::uint64_t peerIdFor(const net::Endpoint& listen) {
  std::uint64_t hash = 14695981039346656037ull;
  for (char c : listen.str()) {
    hash ^= static_cast<unsigned char>(c);
    hash *= 1099511628211ull;
  }
  return hash == 0 ? 1 : hash;
}

// ---- construction ----------------------------------------------------------------------------

Peer::Impl::Impl(PeerConfig c, const Registry& r, std::shared_ptr<const DatasetPair> d,
                 std::optional<ExternalModel> e)
    : config(std::move(c)),
      registry(r),
      data(std::move(d)),
      external(std::move(e)),
      self(chooseId(config.network)),
      checkpoints(config.training, self) {
  GOSSAMER_ENFORCE(data != nullptr || external, "a peer needs its data");
  TrainingConfig& t = config.training;
  if (external) {
    GOSSAMER_ENFORCE(external->layout.parameterCount() > 0,
                     "an externally driven peer needs a model with parameters");
    GOSSAMER_ENFORCE(t.maxSteps > 0,
                     "an externally driven peer needs the number of steps of its run (maxSteps)");
  }
  GOSSAMER_ENFORCE(t.minPeers >= 1, "--min-peers must be at least 1");
  status.stepTimeUs = t.minStepTime.count();
  GOSSAMER_ENFORCE(t.batch >= 1, "the batch size must be at least 1");
  GOSSAMER_ENFORCE(t.shards == 0 || t.shardIndex < t.shards,
                   "--shard-index {} must be below --shards {}", t.shardIndex, t.shards);
  const AlgorithmSpec& spec = registry.algorithms.get(t.algorithm);
  algorithm = spec.make(t.algorithmOptions);
  topology = registry.topologies.get(t.topology.empty() ? spec.defaultTopology
                                                        : t.topology)(t.topologyOptions);
  compute = makeCompute(t.device);
  compute->setMemoryMeter(&memory);
  if (external) {
    model = std::make_unique<LayoutModel>(*compute, external->layout);
    // The buffers exist from the start: the caller lays its tensors out over them.
    training.learner = std::make_unique<train::Learner>(*compute, *model, t.optimizer, t.seed);
  } else {
    t.modelConfig.inputs = data->train.features;
    t.modelConfig.classes = data->train.classes;
    t.modelConfig.maxBatch = std::max<std::size_t>(t.modelConfig.maxBatch, t.batch);
    model = registry.models.get(t.model)(*compute, t.modelConfig);
  }
  if (t.resume) {
    GOSSAMER_ENFORCE(checkpoints.enabled(), "--resume needs a checkpoint (--checkpoint-dir)");
    resumeFrom = checkpoints.load(*model, *algorithm);
  }

  prepareTransport(config.network, registry);
  comms = std::make_unique<Comms>(config.network, self, *compute, *algorithm,
                                  model->parameterCount() * sizeof(float), t, status, metrics);
  comms->hostCompute->setMemoryMeter(&memory);
  comms->messenger.setRoutes(Routes{
      .inbox = &comms->inbox,
      .serve = [this](Incoming request) { comms->serveGate.deliver(std::move(request)); },
      .runtime =
          [this](Incoming message, std::vector<std::byte> bytes) {
            comms->control.onMessage(std::move(message), std::move(bytes));
          },
  });
  Messenger& messenger = comms->messenger;
  comms->network.start(
      PeerNetwork::Handlers{
          .target = [&messenger](const net::Remote&, const net::wire::EnvelopeHeader&, std::size_t,
                                 std::size_t size) { return messenger.receiveTarget(size); },
          .envelope =
              [&messenger](const net::Remote& from, net::wire::EnvelopeHeader header,
                           std::vector<net::Payload> payloads) {
                messenger.onEnvelope(from, std::move(header), std::move(payloads));
              },
          .membershipChanged = [this](const net::membership::Event& e) { onMembershipEvent(e); },
          .registerMemory = [this](net::Transport& t) { comms->staging.registerWith(t); },
          .deviceMemory = deviceMemoryOf(*compute),
      },
      net::wire::ModelFingerprint{model->parameterCount(), "f32", model->layout().fingerprint()},
      t.seed);
  if (t.joinTimeout.count() > 0 && !config.network.seeds.empty())
    joinDeadline = Clock::now() + t.joinTimeout;
}

void Peer::Impl::onMembershipEvent(const net::membership::Event& event) {
  // Every change, in every phase, with the rule that applies (engine/runtime/README.md).
  logger()->info(describeChange(self, event, phaseOf(status), comms->network.members().size()));
  events.add(event);
  comms->inbox.wake();
  comms->control.onViewChanged();
}

void Peer::Impl::kill() {
  requests.killed = true;
  comms->control.stop();
  comms->inbox.close();
  comms->staging.close();
  comms->network.stop(false);
}

// ---- data, members, graph (compute thread) ----------------------------------------------------

std::vector<std::size_t> Peer::Impl::shardOf(std::size_t count, std::size_t rank) const {
  const TrainingConfig& t = config.training;
  return data::shardIndices(
      data->train.labels, data->train.classes,
      {.shards = count, .kind = t.split, .dirichletAlpha = t.dirichletAlpha, .seed = t.seed})[rank];
}

// The training set split over the current members, this peer taking the shard of its rank: every
// peer computes the same partition from the same member list, so the data of a peer that left is
// covered again, and a newcomer gets its share. A fixed shard never moves.
void Peer::Impl::takeShard() {
  const TrainingConfig& t = config.training;
  const std::vector<PeerId>& members = training.roster.members;
  const std::size_t count = t.shards > 0 ? t.shards : members.size();
  const std::size_t rank =
      t.shards > 0 ? t.shardIndex
                   : static_cast<std::size_t>(std::find(members.begin(), members.end(), self) -
                                              members.begin());
  if (training.learner && count == training.shardCount && rank == training.shardRank) return;
  training.shardCount = count;
  training.shardRank = rank;
  if (external) return;  // the caller takes its part of its data (Peer::shard)
  if (!training.learner) {
    training.learner = std::make_unique<train::Learner>(*compute, *model, t.optimizer, data->train,
                                                        shardOf(count, rank), t.batch, t.seed);
    return;
  }
  training.learner->setShard(shardOf(count, rank));
  logger()->debug("peer {:016x}: data rebalanced to shard {} of {}", self, rank, count);
}

void Peer::Impl::rebuildGraph() {
  training.roster.graph = topology->build(training.roster.members, status.step);
}

// Adopts the current view (the members in training) when it changed, or when `force`.
void Peer::Impl::refreshMembers(bool force) {
  const std::uint64_t current = comms->network.epoch();
  if (!force && current == training.roster.epoch) return;
  training.roster.members = comms->network.members();
  training.roster.epoch = current;
  takeShard();
  rebuildGraph();
  algorithm->setup(*training.context);
}

std::uint64_t Peer::Impl::totalSteps(const StartPlan& plan) const {
  const TrainingConfig& t = config.training;
  if (plan.totalSteps > 0) return plan.totalSteps;  // the cluster's, already training
  if (t.maxSteps > 0) return t.maxSteps;            // always, for an externally driven peer
  // The same on every peer: passes of the whole cluster over the training set.
  const std::size_t shards = std::max(training.shardCount, t.minPeers);
  const std::size_t perPass = (data->train.count() + shards * t.batch - 1) / (shards * t.batch);
  return static_cast<std::uint64_t>(std::ceil(t.epochs * static_cast<double>(perPass)));
}

// The model and step to start from: a checkpoint, a live peer's (joining late), or the initial.
void Peer::Impl::startFrom(const StartPlan& plan) {
  const TrainingConfig& t = config.training;
  if (resumeFrom) {
    status.step = PeerCheckpoints::restore(*resumeFrom, *training.learner, *algorithm);
    if (plan.late) {
      status.step = std::max(status.step.load(), plan.step);
      algorithm->resumedLate(*training.context);
    }
    logger()->info("peer {:016x}: resumed from {} at step {}", self, checkpoints.path(),
                   status.step.load());
  } else if (plan.late) {
    algorithm->join(*training.context);
  } else if (t.initialParams) {
    const std::vector<float> initial =
        t.initialParams(training.shardRank, training.learner->params().size());
    GOSSAMER_ENFORCE_EQ(initial.size(), training.learner->params().size(),
                        "initialParams returned the wrong size");
    compute->upload(training.learner->params(), std::span<const float>(initial));
  }
}

void Peer::Impl::publishSnapshot(bool final) {
  std::vector<float> params(training.learner->params().size());
  compute->download(std::span<float>(params), std::span<const float>(training.learner->params()));
  const std::vector<Incoming> pulls =
      comms->snapshots.publish(status.step, std::move(params), final);
  if (!pulls.empty()) comms->control.answerPulls(pulls, comms->snapshots.latest());
}

// ---- the loop's driver (compute thread) --------------------------------------------------------

double Peer::Impl::step() {
  refreshMembers(false);
  if (topology->timeVarying()) rebuildGraph();
  return algorithm->step(*training.context);
}

void Peer::Impl::afterStep() {
  if (comms->snapshots.wanted()) publishSnapshot(false);
  // Training alone (--min-peers 1) while the seeds keep refusing: the join timeout still holds.
  if (Clock::now() >= joinDeadline && !comms->network.joined()) training.cannotJoin = true;
}

void Peer::Impl::atEvalPoint(std::uint64_t point, const StepFigures& figures) {
  const PointSink& sink = config.training.onEvalPoint;
  if (!sink) return;
  PointSample sample{
      .point = point,
      .model = {self, status.step, std::vector<float>(training.learner->params().size())},
      .figures = figures,
      .samples = training.learner->samples(),
      .bytesSent = bytesSent()};
  compute->download(std::span<float>(sample.model.params),
                    std::span<const float>(training.learner->params()));
  sink(std::move(sample));
}

bool Peer::Impl::stopping() const {
  return requests.stop || requests.leave || requests.killed || training.cannotJoin ||
         training.clusterDone;
}

void Peer::Impl::checkpointIfDue(std::uint64_t step) {
  if (checkpoints.dueAfter(step))
    checkpoints.save(*training.learner, *algorithm, step, status.totalSteps);
}

std::uint64_t Peer::Impl::bytesSent() const {
  return comms->network.traffic(net::Traffic::algorithm).bytesSent;
}

// ---- run (compute thread) ----------------------------------------------------------------------

PeerResult Peer::Impl::run() {
  if (!start()) return notStartedResult();
  const LoopFigures figures = training.loop->run(*this);
  return finish(figures);
}

EvaluateFn Peer::Impl::evaluation() {
  if (external) return external->evaluate;
  // Made at the first evaluation: a peer that never evaluates (a local cluster's, whose monitor
  // evaluates the consensus) holds no copy of the test set.
  auto evaluator = std::make_shared<std::unique_ptr<train::Evaluator>>();
  return [this, evaluator](std::span<const float> params, std::size_t samples) {
    if (!*evaluator) *evaluator = std::make_unique<train::Evaluator>(*compute, *model, data->test);
    return (*evaluator)->run(params, samples);
  };
}

bool Peer::Impl::start() {
  const TrainingConfig& t = config.training;
  const StartPlan plan = comms->control.awaitStart(
      t.minPeers, resumeFrom.has_value(), t.startTimeout, joinDeadline, seedList(config.network));
  if (plan.cannotJoin) return false;
  if (plan.clusterDone) {
    training.clusterDone = true;
    logger()->info(
        "peer {:016x}: the cluster has trained all its steps ({} of {}): nothing to join", self,
        plan.step, plan.totalSteps);
    return false;
  }
  Roster& roster = training.roster;
  roster.members = comms->network.members();
  roster.epoch = comms->network.epoch();
  comms->control.startedWith(roster.members);
  takeShard();
  status.totalSteps = totalSteps(plan);
  rebuildGraph();
  training.context = std::make_unique<ComputeContext>(
      ComputeParts{self, t, *compute, *training.learner, roster, comms->network, comms->messenger,
                   comms->inbox, comms->control, comms->staging, status, metrics});
  startFrom(plan);
  logger()->info(
      "peer {:016x}: {} with {} on {} (gap {:.3f}); {} members{}; shard {} of {} ({}); "
      "steps {} to {}",
      self, algorithm->name(), topology->name(),
      // The CPU's BLAS is the process's, logged once (engine::makeCompute); a GPU is the peer's.
      compute->device() == kernels::Device::kCpu ? std::string("cpu") : compute->describe(),
      roster.graph->spectralGap(), roster.members.size(), plan.late ? ", joined late" : "",
      training.shardRank, training.shardCount,
      external ? std::string("the caller's data")
               : fmt::format("{} samples", training.learner->sampler().size()),
      status.step.load(), status.totalSteps.load());
  algorithm->setup(*training.context);
  asio::post(comms->network.io(), [this] { comms->serveGate.open(); });
  status.commWaitNs = 0;  // waiting for the others to show up is not communication cost

  training.stepsPerEpoch = !external ? training.learner->sampler().batchesPerEpoch()
                           : external->stepsPerEpoch > 0
                               ? external->stepsPerEpoch
                               : std::max<std::uint64_t>(status.totalSteps, 1);
  training.loop = std::make_unique<TrainingLoop>(t, self, *training.learner, evaluation(), status,
                                                 training.stepsPerEpoch);
  training.stallWatch = std::make_unique<StallWatch>(
      self, status, t.stallTimeout, t.commTimeout,
      StallWatch::Actions{.recheck =
                              [this] {
                                comms->inbox.wake();
                                comms->control.wake();
                              },
                          .giveUp = [this](const std::string&) { kill(); }});
  return true;
}

// ---- Peer ----------------------------------------------------------------------------------

Peer::Peer(PeerConfig config, const Registry& registry, std::shared_ptr<const DatasetPair> data)
    : impl_(std::make_unique<Impl>(std::move(config), registry, std::move(data), std::nullopt)) {}

Peer::Peer(PeerConfig config, const Registry& registry, ExternalModel model)
    : impl_(std::make_unique<Impl>(std::move(config), registry, nullptr, std::move(model))) {}

Peer::~Peer() { impl_->comms->network.stop(impl_->status.finished && !impl_->requests.killed); }

PeerId Peer::id() const { return impl_->self; }
net::Endpoint Peer::endpoint() const { return impl_->comms->network.endpoint(); }

PeerResult Peer::run() {
  GOSSAMER_ENFORCE(!impl_->external,
                   "this peer's caller drives its loop: use start(), step() and finish()");
  GOSSAMER_ENFORCE(impl_->phase == Impl::Phase::constructed, "Peer::run() is called once");
  impl_->phase = Impl::Phase::finished;
  PeerResult result = impl_->run();
  impl_->comms->network.stop(!impl_->requests.killed);
  return result;
}

bool Peer::start() {
  GOSSAMER_ENFORCE(impl_->external,
                   "Peer::start() is for a peer whose caller drives the loop (ExternalModel); "
                   "this one trains its own model with run()");
  GOSSAMER_ENFORCE(impl_->phase == Impl::Phase::constructed, "Peer::start() is called once");
  impl_->phase = Impl::Phase::started;
  if (!impl_->start()) {
    impl_->training.cannotJoin = !impl_->training.clusterDone;
    return false;
  }
  impl_->training.loop->begin();
  return true;
}

bool Peer::step(const LocalStep& local) {
  GOSSAMER_ENFORCE(impl_->phase == Impl::Phase::started, "Peer::step() {}",
                   impl_->phase == Impl::Phase::constructed ? "before start()" : "after finish()");
  if (impl_->training.cannotJoin || impl_->training.clusterDone) return false;
  ComputeContext& context = *impl_->training.context;
  context.setLocalStep(&local);
  struct Reset {
    ComputeContext& context;
    ~Reset() { context.setLocalStep(nullptr); }
  } reset{context};
  return impl_->training.loop->next(impl_->driver());
}

PeerResult Peer::finish() {
  GOSSAMER_ENFORCE(impl_->phase == Impl::Phase::started, "Peer::finish() {}",
                   impl_->phase == Impl::Phase::constructed ? "before start()" : "is called once");
  impl_->phase = Impl::Phase::finished;
  PeerResult result = impl_->training.loop ? impl_->finish(impl_->training.loop->end())
                                           : impl_->finish(LoopFigures{});
  impl_->comms->network.stop(!impl_->requests.killed);
  return result;
}

std::span<float> Peer::params() {
  GOSSAMER_ENFORCE(impl_->training.learner != nullptr, "the params exist once the peer started");
  return impl_->training.learner->params();
}

std::span<float> Peer::grads() {
  GOSSAMER_ENFORCE(impl_->training.learner != nullptr, "the grads exist once the peer started");
  return impl_->training.learner->grads();
}

DataShard Peer::shard() const {
  return DataShard{impl_->training.shardRank, std::max<std::size_t>(impl_->training.shardCount, 1)};
}

std::size_t Peer::parameterCount() const { return impl_->model->parameterCount(); }

void Peer::requestStop() { impl_->requests.stop = true; }
void Peer::requestLeave() { impl_->requests.leave = true; }
void Peer::kill() { impl_->kill(); }

void Peer::setMinStepTime(std::chrono::microseconds time) {
  impl_->status.stepTimeUs = std::max(impl_->config.training.minStepTime, time).count();
}

std::optional<Snapshot> Peer::snapshot(Clock::duration timeout) {
  return impl_->comms->snapshots.take(timeout, !impl_->status.training);
}

PeerStatus Peer::status() const {
  const LoopStatus& s = impl_->status;
  const net::TrafficCounters traffic = impl_->comms->network.traffic(net::Traffic::algorithm);
  return PeerStatus{.step = s.step,
                    .totalSteps = s.totalSteps,
                    .loss = s.loss,
                    .bytesSent = traffic.bytesSent,
                    .bytesReceived = traffic.bytesReceived,
                    .commWaitSeconds = s.commWaitSeconds(),
                    .computeSeconds = s.computeSeconds(),
                    .trainSeconds = s.trainSeconds,
                    .lastStep = s.lastStep(),
                    .training = s.training,
                    .loopEnded = s.loopEnded,
                    .finished = s.finished,
                    .waitingFor = describeWait(s.waits.current().value_or(WaitBoard::Wait{}))};
}

net::membership::View Peer::view() const { return impl_->comms->network.view(); }

std::vector<net::membership::Event> Peer::takeEvents() { return impl_->events.take(); }

}  // namespace gossamer::engine::runtime
