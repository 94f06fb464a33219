#include "engine/runtime/peer.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <functional>
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

// Where a peer keeps its identity key when it has no checkpoints to keep it beside: the state
// directory ($GOSSAMER_STATE_DIR, else $XDG_STATE_HOME/gossamer, else ~/.local/state/gossamer),
// per cluster id and peer id, so that a process restarted under its id is the same peer. Empty
// for a random id (it never comes back) or without a home.
std::string stateKeyPath(const NetworkConfig& n, PeerId self) {
  if (n.peerId == 0 && n.listen.port == 0) return {};
  std::filesystem::path dir;
  if (const char* state = std::getenv("GOSSAMER_STATE_DIR"); state && *state) {
    dir = state;
  } else if (const char* xdg = std::getenv("XDG_STATE_HOME"); xdg && *xdg) {
    dir = std::filesystem::path(xdg) / "gossamer";
  } else if (const char* home = std::getenv("HOME"); home && *home) {
    dir = std::filesystem::path(home) / ".local" / "state" / "gossamer";
  } else {
    return {};
  }
  std::string cluster;  // the cluster id as a file name: its safe characters, else its hash
  for (char c : n.clusterId)
    cluster +=
        std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.' ? c : '_';
  if (cluster.empty() || cluster.front() == '.' || cluster.size() > 64)
    cluster = fmt::format("{:016x}", std::hash<std::string>{}(n.clusterId));
  return (dir / cluster / fmt::format("peer-{:016x}.key", self)).string();
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

std::pair<std::span<float>, std::span<float>> Peer::Impl::callerSpans(
    const CallerBuffers& b) const {
  GOSSAMER_ENFORCE(b.params != nullptr && b.grads != nullptr, "the caller's buffers are null");
  GOSSAMER_ENFORCE(reinterpret_cast<std::uintptr_t>(b.params) % alignof(float) == 0 &&
                       reinterpret_cast<std::uintptr_t>(b.grads) % alignof(float) == 0,
                   "the caller's buffers are not aligned to floats");
  GOSSAMER_ENFORCE(compute->device() == b.place.device,
                   "the caller's buffers are on {} but the peer computes on {}", b.place.describe(),
                   compute->describe());
  // Host memory is host memory to every Compute; device memory must be this one's device's.
  const bool onDevice = b.place.device != kernels::Device::kCpu;
  for (const float* buffer : {b.params, b.grads})
    GOSSAMER_ENFORCE(compute->isDeviceMemory(buffer) == onDevice,
                     "the caller's {} buffer is not {} memory",
                     buffer == b.params ? "params" : "grads",
                     onDevice ? b.place.describe() + " device" : std::string("host"));
  return {std::span<float>(b.params, b.count), std::span<float>(b.grads, b.count)};
}

void* Peer::Impl::callerStream() const {
  return external && external->buffers ? external->buffers->place.stream : nullptr;
}

EvaluateFn Peer::Impl::inCallerOrder(EvaluateFn evaluate) {
  return
      [this, evaluate = std::move(evaluate)](std::span<const float> params, std::size_t samples) {
        auto call = [&] { return evaluate(params, samples); };
        return inCallerTurn(*compute, callerStream(), call);
      };
}

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
  const CallerBuffers* buffers = external && external->buffers ? &*external->buffers : nullptr;
  compute = t.makeCompute ? t.makeCompute()
            : buffers     ? makeCompute(buffers->place)
                          : makeCompute(t.device);
  compute->setMemoryMeter(&memory);
  if (external) {
    model = std::make_unique<LayoutModel>(*compute, external->layout);
    // The buffers exist from the start: the caller lays its tensors out over them, or gave them.
    if (buffers) {
      const auto [params, grads] = callerSpans(*buffers);
      training.learner =
          std::make_unique<train::Learner>(*compute, *model, t.optimizer, params, grads);
    } else {
      training.learner = std::make_unique<train::Learner>(*compute, *model, t.optimizer, t.seed);
    }
    if (external->evaluate) external->evaluate = inCallerOrder(std::move(external->evaluate));
  } else {
    t.modelConfig.inputs = data->train.features;
    t.modelConfig.classes = data->train.classes;
    t.modelConfig.maxBatch = std::max<std::size_t>(t.modelConfig.maxBatch, t.batch);
    model = registry.models.get(t.model)(*compute, t.modelConfig);
  }
  if (t.resume) {
    GOSSAMER_ENFORCE(checkpoints.enabled(), "--resume needs a checkpoint (--checkpoint-dir)");
    resumeCheckpoint = checkpoints.load(*model, *algorithm);
  }

  // The identity outlives a restart (the others bound this id to it): beside the checkpoints,
  // else in the state directory; a random id's is this process's own (PeerNetwork makes it).
  if (!config.network.identity) {
    const std::string path =
        checkpoints.enabled() ? checkpoints.identityPath() : stateKeyPath(config.network, self);
    if (!path.empty()) config.network.identity = net::wire::Identity::loadOrCreate(path);
  }
  config.network.linkWaitLimit = std::max<std::size_t>(t.sendBuffers / 2, 1);
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

void Peer::Impl::publishSnapshot(bool final) {
  std::vector<float> params(training.learner->params().size());
  compute->download(std::span<float>(params), std::span<const float>(training.learner->params()));
  const std::vector<Incoming> pulls =
      comms->snapshots.publish(status.step, std::move(params), final);
  if (!pulls.empty()) comms->control.answerPulls(pulls, comms->snapshots.latest());
}

// ---- the loop's driver (compute thread) --------------------------------------------------------

std::optional<double> Peer::Impl::step() { return training.life->step(); }

void Peer::Impl::afterStep() {
  training.life->afterStep();
  if (comms->snapshots.wanted()) publishSnapshot(false);
  // Training alone (--min-peers 1) while the seeds keep refusing: the join timeout still holds.
  if (Clock::now() >= joinDeadline && !comms->network.joined()) training.cannotJoin = true;
}

bool Peer::Impl::stopping() const {
  return requests.stop || requests.leave || requests.killed || training.cannotJoin ||
         training.clusterDone;
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
  training.life = std::make_unique<life::PeerLife>(
      self, t, *algorithm, *compute, static_cast<life::LifeEnvironment&>(*this),
      life::StepCounters{status.step, status.totalSteps, status.runSteps});
  if (!training.life->start()) {
    const StartPlan& plan = training.life->plan();
    if (plan.cannotJoin) return false;
    training.clusterDone = true;
    logger()->info(
        "peer {:016x}: the cluster has trained all its steps ({} of {}): nothing to join", self,
        plan.step, plan.totalSteps);
    return false;
  }
  const life::Roster& roster = training.life->roster();
  logger()->info(
      "peer {:016x}: {} with {} on {} (gap {:.3f}); {} members{}; shard {} of {} ({}); "
      "steps {} to {}",
      self, algorithm->name(), topology->name(),
      // The CPU's BLAS is the process's, logged once (engine::makeCompute); a GPU is the peer's.
      compute->device() == kernels::Device::kCpu ? std::string("cpu") : compute->describe(),
      roster.graph->spectralGap(), roster.members.size(),
      training.life->plan().late ? ", joined late" : "", roster.shardRank, roster.shardCount,
      external ? std::string("the caller's data")
               : fmt::format("{} samples", training.learner->sampler().size()),
      status.step.load(), status.totalSteps.load());
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
  training.speeds = std::make_unique<SpeedReporter>(
      status, kSpeedReportPeriod,
      [this](const PeerSpeed& speed) { comms->control.reportSpeed(speed); });
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
  impl_->compute->waitForStream(impl_->callerStream());  // the caller's initial model
  const bool started = impl_->start();
  // What start() wrote (a checkpoint restored, a late joiner's model) before the caller's next use.
  impl_->compute->orderStreamAfter(impl_->callerStream());
  if (!started) {
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
  std::optional<CallerBuffers>& buffers = impl_->external->buffers;
  if (local.stream && buffers) buffers->place.stream = *local.stream;
  // With the caller's buffers, its callbacks run in its turn on its stream (inCallerTurn), the
  // rest in the peer's; without them there is nothing to order (no copy of `local` either).
  LocalStep ordered;
  void* const stream = impl_->callerStream();
  kernels::Compute& compute = *impl_->compute;
  if (buffers) ordered = local;
  if (ordered.gradients)
    ordered.gradients = [&compute, stream, &local] {
      return inCallerTurn(compute, stream, local.gradients);
    };
  if (ordered.update)
    ordered.update = [&compute, stream, &local] { inCallerTurn(compute, stream, local.update); };
  compute.waitForStream(stream);  // the caller's gradients and writes since the last step
  ComputeContext& context = *impl_->training.context;
  context.setLocalStep(buffers ? &ordered : &local);
  struct Reset {
    ComputeContext& context;
    kernels::Compute& compute;
    void* stream;
    ~Reset() {
      context.setLocalStep(nullptr);
      compute.orderStreamAfter(stream);  // the caller's next forward reads the merged params
    }
  } reset{context, compute, stream};
  return impl_->training.loop->next(impl_->driver());
}

PeerResult Peer::finish() {
  GOSSAMER_ENFORCE(impl_->phase == Impl::Phase::started, "Peer::finish() {}",
                   impl_->phase == Impl::Phase::constructed ? "before start()" : "is called once");
  impl_->phase = Impl::Phase::finished;
  PeerResult result = impl_->training.loop ? impl_->finish(impl_->training.loop->end())
                                           : impl_->finish(LoopFigures{});
  impl_->compute->orderStreamAfter(impl_->callerStream());  // the final model, to the caller
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
  if (!impl_->training.life) return DataShard{0, 1};
  const life::Roster& roster = impl_->training.life->roster();
  return DataShard{roster.shardRank, std::max<std::size_t>(roster.shardCount, 1)};
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
