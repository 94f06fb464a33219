#include "engine/runtime/peer.h"

#include <algorithm>
#include <cmath>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <filesystem>
#include <future>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <thread>
#include <utility>

#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/executor_work_guard.hpp>
#include <asio/io_context.hpp>
#include <asio/post.hpp>
#include <fmt/format.h>

#include "engine/base/enforce.h"
#include "engine/base/json.h"
#include "engine/base/log.h"
#include "engine/builtin.h"
#include "engine/runtime/host_buffers.h"
#include "engine/runtime/message_queue.h"
#include "engine/train/checkpoint.h"
#include "engine/train/learner.h"
#include "engine/train/metrics_log.h"
#include "engine/train/progress.h"
#include "kernels/cpu/cpu_compute.h"
#include "net/inproc/inproc_transport.h"
#include "net/mesh/mesh.h"
#include "net/shaped/shaped_transport.h"
#include "net/tcp/tcp_transport.h"

namespace gossamer::engine::runtime {
namespace {

using std::chrono::milliseconds;
using Seconds = std::chrono::duration<double>;

// Where an envelope goes at the receiver, in the top 8 bits of its kind.
enum class Route : std::uint32_t { inbox = 0, serve = 1, runtime = 2 };
constexpr std::uint32_t kKindMask = kMaxAlgorithmKind - 1;

std::uint32_t encodeKind(Route route, std::uint32_t kind) {
  return (static_cast<std::uint32_t>(route) << 24) | (kind & kKindMask);
}

// The runtime's own messages (Route::runtime).
enum RuntimeKind : std::uint32_t {
  kPullSnapshot = 1,  // request: reply with the final (or next published) params
  kSnapshot = 2,      // the reply
  kFinished = 3,      // notify: this peer's training loop is over
  kReleased = 4,      // notify: this peer has what it needs from the others; they may leave
  kStatus = 5,        // request: are you training, at which step, and were you expecting me?
  kStatusReply = 6,   // scalars: training (0/1), step, total steps, expected (0/1), start members
};

std::size_t payloadBytes(const Message& m) {
  std::size_t bytes = 0;
  for (const auto& p : m.payloads) bytes += p.size_bytes();
  return bytes;
}

class MetricsMap final : public Metrics {
 public:
  void add(const std::string& name, double value) override {
    std::lock_guard lock(mutex_);
    values_[name] += value;
  }
  void set(const std::string& name, double value) override {
    std::lock_guard lock(mutex_);
    values_[name] = value;
  }
  std::map<std::string, double> values() const {
    std::lock_guard lock(mutex_);
    return values_;
  }

 private:
  mutable std::mutex mutex_;
  std::map<std::string, double> values_;
};

class TagSource final : public Tags {
 public:
  std::uint64_t fresh() override { return (std::uint64_t{1} << 63) | ++next_; }

 private:
  std::atomic<std::uint64_t> next_{0};
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

struct Peer::Impl {
  Impl(PeerConfig c, const Registry& r, std::shared_ptr<const DatasetPair> d);
  ~Impl();

  // ---- configuration and model (fixed after construction) ----
  PeerConfig config;
  const Registry& registry;
  std::shared_ptr<const DatasetPair> data;
  PeerId self = 0;
  std::string topologyName;
  std::unique_ptr<kernels::Compute> compute;
  std::unique_ptr<kernels::Compute> hostCompute;  // for serve() on the io thread
  std::unique_ptr<Model> model;
  std::unique_ptr<Algorithm> algorithm;
  std::unique_ptr<topology::Topology> topology;
  std::shared_ptr<spdlog::logger> logger = log::get("peer");

  // ---- io thread ----
  asio::io_context io;
  asio::executor_work_guard<asio::io_context::executor_type> work{asio::make_work_guard(io)};
  std::thread ioThread;
  std::unique_ptr<net::Transport> transport;
  std::unique_ptr<net::Mesh> mesh;
  std::unique_ptr<net::membership::Service> membership;
  net::Endpoint endpoint;
  bool servingReady = false;            // io thread: setup() ran once, serve() may be called
  std::vector<Incoming> earlyRequests;  // io thread: serve() messages that came before that

  // ---- shared between threads ----
  std::shared_ptr<HostBufferPool> sendPool, replyPool, receivePool;
  MessageQueue inbox;
  TagSource tags;
  MetricsMap metrics;
  mutable std::mutex viewMutex;
  std::condition_variable viewChanged;
  net::membership::View view;                 // the membership view, updated by its events
  std::map<PeerId, net::Endpoint> heardFrom;  // listen endpoints of authenticated senders
  std::atomic<std::uint64_t> viewEpoch{0};
  std::atomic<std::uint64_t> bytesSent{0}, bytesReceived{0}, sendFailures{0};
  std::atomic<std::int64_t> commWaitNs{0};
  std::atomic<std::uint64_t> stepCount{0}, totalSteps{0};
  std::atomic<double> lossAverage{0};
  std::atomic<double> trainSeconds{0};
  std::atomic<bool> training{false}, finished{false}, stopRequested{false}, killed{false};
  bool stopped = false;  // the network is down (after leave or kill)
  std::mutex stopMutex;

  // Snapshots: the compute thread publishes one at a step boundary when `snapshotWanted` is set
  // (and a final one after training); pulls wait for it.
  std::mutex snapshotMutex;
  std::condition_variable snapshotPublished;
  std::shared_ptr<const Snapshot> latest;
  std::uint64_t snapshotVersion = 0;
  bool finalSnapshot = false;
  std::atomic<bool> snapshotWanted{false};
  std::vector<Incoming> pendingPulls;  // network pulls to answer with the next snapshot

  // The end-of-run barriers: who has finished training, who has released the others.
  std::mutex barrierMutex;
  std::condition_variable barrierChanged;
  std::set<PeerId> finishedPeers, releasedPeers;
  bool inFinish = false;  // past the finished-training barrier (guarded by barrierMutex)

  // Who trained from the start (answers kStatus: a peer in it is expected, not late).
  std::mutex startMutex;
  std::vector<PeerId> startMembers;
  std::atomic<bool> leaveRequested{false};
  std::atomic<std::int64_t> minStepTimeOverride{0};  // microseconds; setMinStepTime()
  std::optional<train::Checkpoint> resumeFrom;       // --resume: loaded and checked at construction

  // ---- compute thread ----
  std::unique_ptr<train::Learner> learner;
  std::size_t shardCount = 0, shardRank = 0;
  std::vector<PeerId> members;
  std::uint64_t epoch = 0;
  std::optional<topology::Graph> graph;
  std::mt19937_64 rng;

  // ---- setup ----
  void startNetwork();
  void stopNetwork(bool graceful);
  std::optional<net::Endpoint> addressOf(PeerId peer) const;
  std::vector<PeerId> liveMembers() const;
  bool isLive(PeerId peer) const;
  // Whether `peer` will send nothing more for the current phase: while training, once it has
  // finished training; in finish() (after the barrier, when the last rounds run), once it has
  // released the others.
  bool hasFinished(PeerId peer) {
    std::lock_guard lock(barrierMutex);
    return (inFinish ? releasedPeers : finishedPeers).count(peer) > 0;
  }

  // ---- messaging ----
  void addCommWait(Clock::duration d) {
    commWaitNs += std::chrono::duration_cast<std::chrono::nanoseconds>(d).count();
  }
  // Stages `message` (payloads copied by `copy`) and sends it to `to` on the route.
  // Where a message's payloads live: the Compute's memory (sends from the compute thread, staged
  // asynchronously by the Compute) or host memory (replies from serve(), copied at once).
  enum class Staging { fromCompute, fromHost };
  void sendMessage(std::span<const PeerId> to, const Message& message, Route route,
                   std::shared_ptr<HostBufferPool>& pool, Clock::duration wait, Staging staging);
  void sendStaged(const std::vector<PeerId>& to, net::wire::EnvelopeHeader header,
                  std::shared_ptr<HostBuffer> buffer);
  asio::awaitable<void> sendOne(net::Endpoint to, net::wire::EnvelopeHeader header,
                                std::shared_ptr<HostBuffer> buffer, bool counted);
  void deliverLocally(const net::wire::EnvelopeHeader& header, std::shared_ptr<HostBuffer> buffer);
  void onEnvelope(
      PeerId from, net::wire::EnvelopeHeader header,
      std::vector<std::pair<std::span<const std::byte>, std::shared_ptr<const void>>> payloads);
  void dispatch(Route route, Incoming message);    // io thread
  void serveOne(const Incoming& message);          // io thread
  void onRuntimeMessage(const Incoming& message);  // io thread
  void replyWithSnapshot(const Incoming& pull,
                         std::shared_ptr<const Snapshot> snapshot);  // io thread
  // Stops waiting for a peer that left the view and, when `whileStepping` (messages its compute
  // thread sends), for one that has finished (hasFinished). Replies from serve() come from the io
  // thread, which serves until the peer leaves: request() waits for those while it is live.
  GatherResult gather(std::span<const PeerId> from, std::uint64_t tag, Clock::duration timeout,
                      bool whileStepping = true);
  void notifyRuntime(const std::vector<PeerId>& to, RuntimeKind kind);

  // ---- compute thread ----
  // How this peer starts training: with the others (fresh), or joining a cluster that is already
  // training (late), whose total steps and current step it then takes.
  struct StartPlan {
    bool late = false;
    std::uint64_t totalSteps = 0;
    std::uint64_t step = 0;
  };
  StartPlan waitForStart();
  std::vector<std::size_t> shardFor(std::size_t count, std::size_t rank) const;
  void rebalance();
  std::string checkpointPath() const;
  void saveCheckpoint();
  void loadResumeCheckpoint();
  void refreshMembers(bool force);
  void rebuildGraph();
  void publishSnapshot(bool final);
  void awaitBarrier(std::set<PeerId>& arrived, const char* what);
  ConsensusResult pullConsensus();
  PeerResult train();

  class Context;
  class ServiceCtx;
  std::unique_ptr<Context> context;
  std::unique_ptr<ServiceCtx> serviceContext;
};

// ---- the PeerContext an algorithm sees --------------------------------------------------------

class Peer::Impl::Context final : public PeerContext {
 public:
  explicit Context(Impl& impl) : impl_(impl) {}

  PeerId self() const override { return impl_.self; }
  const std::vector<PeerId>& members() const override { return impl_.members; }
  std::uint64_t epoch() const override { return impl_.epoch; }
  const topology::Graph& graph() const override { return *impl_.graph; }
  std::uint64_t step() const override { return impl_.stepCount.load(); }
  std::uint64_t totalSteps() const override { return impl_.totalSteps.load(); }

  kernels::Compute& compute() override { return *impl_.compute; }
  std::span<float> params() override { return impl_.learner->params(); }
  std::span<float> grads() override { return impl_.learner->grads(); }
  train::Optimizer& optimizer() override { return impl_.learner->optimizer(); }
  double computeGradients() override { return impl_.learner->computeGradients(); }
  void applyOptimizer() override { impl_.learner->applyUpdate(); }

  void send(std::span<const PeerId> to, const Message& message) override {
    impl_.sendMessage(to, message, Route::inbox, impl_.sendPool, commTimeout(),
                      Impl::Staging::fromCompute);
  }
  using PeerContext::send;

  void notify(PeerId to, const Message& message) override {
    impl_.sendMessage(std::span<const PeerId>(&to, 1), message, Route::serve, impl_.sendPool,
                      commTimeout(), Impl::Staging::fromCompute);
  }

  std::optional<Incoming> request(PeerId to, const Message& message,
                                  Clock::duration timeout) override {
    Message tagged = message;
    tagged.tag = impl_.tags.fresh();
    impl_.sendMessage(std::span<const PeerId>(&to, 1), tagged, Route::serve, impl_.sendPool,
                      timeout, Impl::Staging::fromCompute);
    GatherResult got = impl_.gather(std::span<const PeerId>(&to, 1), tagged.tag, timeout, false);
    if (got.messages.empty()) return std::nullopt;
    return std::move(got.messages.front());
  }

  GatherResult gather(std::span<const PeerId> from, std::uint64_t tag,
                      Clock::duration timeout) override {
    return impl_.gather(from, tag, timeout);
  }

  Inbox& inbox() override { return impl_.inbox; }
  Tags& tags() override { return impl_.tags; }

  DeviceView upload(std::span<const float> host) override {
    if (impl_.compute->device() == kernels::Device::kCpu) return DeviceView(host, {});
    kernels::Buffer<float> copy = impl_.compute->allocate<float>(host.size());
    impl_.compute->upload(copy.span(), host);
    const std::span<const float> view = copy.span();
    return DeviceView(view, std::move(copy));
  }

  std::optional<Incoming> pullModel(PeerId from, Clock::duration timeout) override {
    const std::uint64_t tag = impl_.tags.fresh();
    impl_.sendMessage(std::span<const PeerId>(&from, 1), Message{.kind = kPullSnapshot, .tag = tag},
                      Route::runtime, impl_.sendPool, timeout, Impl::Staging::fromHost);
    GatherResult got = impl_.gather(std::span<const PeerId>(&from, 1), tag, timeout);
    if (got.messages.empty()) return std::nullopt;
    return std::move(got.messages.front());
  }
  void adoptStep(std::uint64_t step) override { impl_.stepCount = step; }

  Clock::duration commTimeout() const override { return impl_.config.training.commTimeout; }
  std::mt19937_64& rng() override { return impl_.rng; }
  Metrics& metrics() override { return impl_.metrics; }

 private:
  Impl& impl_;
};

// ---- the ServiceContext serve() sees (io thread) ----------------------------------------------

class Peer::Impl::ServiceCtx final : public ServiceContext {
 public:
  explicit ServiceCtx(Impl& impl) : impl_(impl) {}
  PeerId self() const override { return impl_.self; }
  kernels::Compute& hostCompute() override { return *impl_.hostCompute; }
  void reply(const Incoming& request, const Message& message) override {
    Message answer = message;
    answer.tag = request.tag;
    // The io thread must not wait: a reply that finds no buffer is dropped (the requester's wait
    // ends at its deadline), with a warning.
    impl_.sendMessage(std::span<const PeerId>(&request.from, 1), answer, Route::inbox,
                      impl_.replyPool, Clock::duration::zero(), Impl::Staging::fromHost);
  }
  Metrics& metrics() override { return impl_.metrics; }

 private:
  Impl& impl_;
};

// ---- construction and the network ------------------------------------------------------------

Peer::Impl::Impl(PeerConfig c, const Registry& r, std::shared_ptr<const DatasetPair> d)
    : config(std::move(c)), registry(r), data(std::move(d)) {
  GOSSAMER_ENFORCE(data != nullptr, "a peer needs its data");
  TrainingConfig& t = config.training;
  GOSSAMER_ENFORCE(t.minPeers >= 1, "--min-peers must be at least 1");
  GOSSAMER_ENFORCE(t.batch >= 1, "the batch size must be at least 1");
  GOSSAMER_ENFORCE(!config.network.secret.empty(),
                   "a networked peer needs a cluster secret (--secret-file)");
  const AlgorithmSpec& spec = registry.algorithms.get(t.algorithm);
  algorithm = spec.make(t.algorithmOptions);
  topologyName = t.topology.empty() ? spec.defaultTopology : t.topology;
  topology = registry.topologies.get(topologyName)(t.topologyOptions);

  compute = makeCompute(t.device);
  hostCompute = kernels::cpu::makeCompute({.blasThreads = 1});
  t.modelConfig.inputs = data->train.features;
  t.modelConfig.classes = data->train.classes;
  t.modelConfig.maxBatch = std::max<std::size_t>(t.modelConfig.maxBatch, t.batch);
  model = registry.models.get(t.model)(*compute, t.modelConfig);

  const net::Endpoint& listen = config.network.listen;
  self = config.network.peerId != 0 ? config.network.peerId
         : listen.port != 0
             ? peerIdFor(config.network.advertise.host.empty() ? listen : config.network.advertise)
             : std::random_device{}() | (std::uint64_t{std::random_device{}()} << 32);
  rng.seed(t.seed * 0x9e3779b97f4a7c15ull ^ self);

  const std::size_t modelBytes = model->parameterCount() * sizeof(float);
  auto allocate = [c = compute.get()](std::size_t bytes) { return c->allocateHost(bytes); };
  auto free = [c = compute.get()](void* p) { c->freeHost(p); };
  sendPool =
      HostBufferPool::make(std::max<std::size_t>(t.sendBuffers, 1), modelBytes, allocate, free);
  replyPool = HostBufferPool::make(4, modelBytes, allocate, free);
  receivePool =
      HostBufferPool::make(std::max<std::size_t>(t.receiveBuffers, 1), modelBytes, allocate, free);

  if (t.resume) {
    GOSSAMER_ENFORCE(!t.checkpointDir.empty(), "--resume needs --checkpoint-dir");
    loadResumeCheckpoint();
  }
  context = std::make_unique<Context>(*this);
  serviceContext = std::make_unique<ServiceCtx>(*this);
  ioThread = std::thread([this] { io.run(); });
  try {
    startNetwork();
  } catch (...) {
    work.reset();
    io.stop();
    ioThread.join();
    throw;
  }
}

Peer::Impl::~Impl() {
  stopNetwork(false);
  work.reset();
  io.stop();
  if (ioThread.joinable()) ioThread.join();
  // Coroutines suspended on the io_context die with it; what they held goes back to the pools.
}

template <typename F>
auto runOn(asio::io_context& io, F f) -> decltype(f()) {
  std::packaged_task<decltype(f())()> task(std::move(f));
  auto result = task.get_future();
  asio::post(io, [&task] { task(); });
  return result.get();
}

void Peer::Impl::startNetwork() {
  const NetworkConfig& n = config.network;
  const std::error_code error = runOn(io, [&]() -> std::error_code {
    if (n.transport == "inproc") {
      GOSSAMER_ENFORCE(n.hub != nullptr, "the inproc transport needs a hub");
      transport = net::inproc::makeTransport(io, n.hub);
    } else if (n.transport == "ibverbs") {
      transport = makeRdmaTransport(io, n.rdma, net::Limits{});  // throws naming what is missing
    } else {
      GOSSAMER_ENFORCE(n.transport == "tcp", "unknown transport '{}' (use tcp, ibverbs or inproc)",
                       n.transport);
      transport = net::tcp::makeTransport(io);
    }
    // The staging buffers every payload is sent from or received into, registered once.
    for (const auto* pool : {&sendPool, &replyPool, &receivePool}) {
      for (std::span<std::byte> slot : (*pool)->slots()) transport->registerMemory(slot);
    }
    if ((n.profile && n.profile->name() != "lan") || n.partitions) {
      net::shaped::Options shaping;
      if (n.profile) shaping.profile = *n.profile;
      shaping.selfIndex = n.profileIndex;
      shaping.indexOf = n.indexOf;
      shaping.seed = net::shaped::mixSeed(config.training.seed, n.profileIndex);
      transport =
          net::shaped::makeTransport(std::move(transport), std::move(shaping), n.partitions);
    }
    net::MeshOptions meshOptions;
    meshOptions.handshake.clusterId = n.clusterId;
    meshOptions.handshake.peerId = self;
    meshOptions.handshake.secret = n.secret;
    meshOptions.handshake.model =
        net::wire::ModelFingerprint{model->parameterCount(), "f32", model->layout().fingerprint()};
    meshOptions.advertise = n.advertise;
    mesh = std::make_unique<net::Mesh>(io, *transport, meshOptions);
    mesh->setEnvelopeTarget([this](const net::Remote&, const net::wire::EnvelopeHeader&,
                                   std::size_t, std::size_t size) -> net::Payload {
      std::shared_ptr<HostBuffer> buffer = receivePool->tryAcquire(size);
      if (!buffer) return {};  // the link's bounded pool takes it
      return net::Payload(buffer->bytes(), buffer);
    });
    mesh->onEnvelope([this](const net::Remote& from, net::wire::EnvelopeHeader header,
                            std::vector<net::Payload> payloads) {
      {
        std::lock_guard lock(viewMutex);
        heardFrom[from.peerId] = from.listen;
      }
      std::vector<std::pair<std::span<const std::byte>, std::shared_ptr<const void>>> held;
      for (net::Payload& p : payloads) {
        auto owner = std::make_shared<net::Payload>(std::move(p));
        held.emplace_back(owner->bytes(), owner);
      }
      onEnvelope(from.peerId, std::move(header), std::move(held));
    });
    // Over an emulated WAN, failure detection must allow for its round trips.
    const net::membership::Options membershipOptions =
        n.profile ? n.membership.forRoundTrip(n.profile->maxRoundTrip()) : n.membership;
    net::membership::Config membershipConfig{n.seeds, membershipOptions,
                                             config.training.seed ^ self};
    membership = net::membership::makeService(io, *mesh, std::move(membershipConfig));
    membership->onEvent([this](const net::membership::Event& event) {
      {
        std::lock_guard lock(viewMutex);
        view = membership->view();
      }
      viewEpoch = event.epoch;
      // Changes while training matter to the user; the cluster forming and dissolving less so.
      logger->log(training ? spdlog::level::info : spdlog::level::debug,
                  "peer {:016x}: epoch {}: {:016x} ({}) {}; {} members", self, event.epoch,
                  event.member.id, event.member.address.str(), net::membership::name(event.kind),
                  view.members.size());
      viewChanged.notify_all();
      inbox.wake();
      barrierChanged.notify_all();
    });
    if (const std::error_code e = mesh->listen(n.listen)) return e;
    endpoint = mesh->localEndpoint();
    membership->start();
    return {};
  });
  if (error) GOSSAMER_THROW("cannot listen on {}: {}", n.listen.str(), error.message());
  // On the io thread, in order with the membership events: holding viewMutex here while waiting
  // for the io thread would deadlock with an event handler waiting for viewMutex there.
  runOn(io, [this] {
    std::lock_guard lock(viewMutex);
    view = membership->view();
    return 0;
  });
}

void Peer::Impl::stopNetwork(bool graceful) {
  std::lock_guard lock(stopMutex);
  if (stopped || !ioThread.joinable()) return;
  stopped = true;
  inbox.close();
  sendPool->close();
  if (graceful) {
    std::promise<void> left;
    asio::co_spawn(io, membership->leave(milliseconds(2000)),
                   [&left](std::exception_ptr) { left.set_value(); });
    left.get_future().wait();
  }
  runOn(io, [this] {
    membership->stop();
    mesh->close();
    membership.reset();
    mesh.reset();
    transport.reset();
    return 0;
  });
}

std::optional<net::Endpoint> Peer::Impl::addressOf(PeerId peer) const {
  std::lock_guard lock(viewMutex);
  if (const net::membership::Member* m = view.find(peer)) return m->address;
  // A peer that wrote to us before its membership reached us (a reply must still find it).
  if (const auto it = heardFrom.find(peer); it != heardFrom.end()) return it->second;
  return std::nullopt;
}

std::vector<PeerId> Peer::Impl::liveMembers() const {
  std::lock_guard lock(viewMutex);
  return view.ids();
}

bool Peer::Impl::isLive(PeerId peer) const {
  std::lock_guard lock(viewMutex);
  return view.contains(peer);
}

// ---- sending -----------------------------------------------------------------------------------

void Peer::Impl::sendMessage(std::span<const PeerId> to, const Message& message, Route route,
                             std::shared_ptr<HostBufferPool>& pool, Clock::duration wait,
                             Staging staging) {
  GOSSAMER_ENFORCE(route == Route::runtime || message.kind < kMaxAlgorithmKind,
                   "message kind {} is reserved (algorithm kinds are below {})", message.kind,
                   kMaxAlgorithmKind);
  if (to.empty()) return;
  net::wire::EnvelopeHeader header;
  header.tag = message.tag;
  header.kind = encodeKind(route, message.kind);
  header.sender = self;
  header.step = message.step;
  header.scalars = message.scalars;
  header.integers = message.integers;
  std::vector<PeerId> recipients(to.begin(), to.end());
  const std::size_t bytes = payloadBytes(message);
  if (bytes == 0) {
    sendStaged(recipients, std::move(header), nullptr);
    return;
  }
  const Clock::time_point start = Clock::now();
  std::shared_ptr<HostBuffer> buffer =
      wait > Clock::duration::zero() ? pool->acquire(bytes, wait) : pool->tryAcquire(bytes);
  if (wait > Clock::duration::zero()) addCommWait(Clock::now() - start);
  if (!buffer) {
    logger->warn("peer {:016x}: no send buffer free{}; message of kind {} dropped", self,
                 stopped ? " (shutting down)" : "", message.kind);
    return;
  }
  for (const auto& payload : message.payloads)
    header.payloads.push_back({payload.size_bytes(), net::wire::Dtype::f32, payload.size()});
  if (staging == Staging::fromHost) {
    std::size_t offset = 0;
    for (const auto& payload : message.payloads) {
      std::memcpy(buffer->data() + offset, payload.data(), payload.size_bytes());
      offset += payload.size_bytes();
    }
    sendStaged(recipients, std::move(header), std::move(buffer));
    return;
  }
  // The Compute copies every payload out, overlapped with the compute that follows; the last
  // copy to land hands the staged message to the io thread.
  struct Staged {
    std::vector<PeerId> to;
    net::wire::EnvelopeHeader header;
    std::shared_ptr<HostBuffer> buffer;
    std::atomic<std::size_t> left;
  };
  auto staged = std::make_shared<Staged>();
  staged->to = std::move(recipients);
  staged->header = std::move(header);
  staged->buffer = buffer;
  staged->left = message.payloads.size();
  std::size_t offset = 0;
  for (const auto& payload : message.payloads) {
    compute->copyToHostAsync(
        buffer->data() + offset, payload.data(), payload.size_bytes(), [this, staged] {
          if (--staged->left == 0)
            sendStaged(staged->to, std::move(staged->header), std::move(staged->buffer));
        });
    offset += payload.size_bytes();
  }
}

void Peer::Impl::sendStaged(const std::vector<PeerId>& to, net::wire::EnvelopeHeader header,
                            std::shared_ptr<HostBuffer> buffer) {
  const bool counted = (header.kind >> 24) != static_cast<std::uint32_t>(Route::runtime);
  for (PeerId peer : to) {
    if (peer == self) {
      deliverLocally(header, buffer);
      continue;
    }
    const std::optional<net::Endpoint> address = addressOf(peer);
    if (!address) {
      logger->debug("peer {:016x}: {:016x} is not a member; message of kind {} not sent", self,
                    peer, header.kind & kKindMask);
      ++sendFailures;
      continue;
    }
    asio::co_spawn(io, sendOne(*address, header, buffer, counted), asio::detached);
  }
}

asio::awaitable<void> Peer::Impl::sendOne(net::Endpoint to, net::wire::EnvelopeHeader header,
                                          std::shared_ptr<HostBuffer> buffer, bool counted) {
  if (!mesh) co_return;
  std::vector<std::span<const std::byte>> payloads;
  std::size_t offset = 0;
  for (const auto& d : header.payloads) {
    payloads.push_back(std::span<const std::byte>(buffer->data() + offset, d.size));
    offset += d.size;
  }
  const std::size_t bytes = offset + net::wire::encodeEnvelope(header).size();
  // Bulk data on the data link, small control messages on the other; kFinished follows the data.
  const bool finishedMark = header.kind == encodeKind(Route::runtime, kFinished);
  const net::Channel channel =
      payloads.empty() && !finishedMark ? net::Channel::control : net::Channel::data;
  const std::error_code error = co_await mesh->sendEnvelope(
      to, channel, std::move(header), std::move(payloads), config.network.connectTimeout);
  if (error) {
    ++sendFailures;
    logger->debug("peer {:016x}: send to {} failed: {}", self, to.str(), error.message());
  } else if (counted) {
    bytesSent += bytes;
  }
}

// A message to self: handed over as if it had arrived, without the network.
void Peer::Impl::deliverLocally(const net::wire::EnvelopeHeader& header,
                                std::shared_ptr<HostBuffer> buffer) {
  std::vector<std::pair<std::span<const std::byte>, std::shared_ptr<const void>>> payloads;
  std::size_t offset = 0;
  for (const auto& d : header.payloads) {
    payloads.emplace_back(std::span<const std::byte>(buffer->data() + offset, d.size), buffer);
    offset += d.size;
  }
  asio::post(io, [this, header, payloads = std::move(payloads)]() mutable {
    onEnvelope(self, header, std::move(payloads));
  });
}

void Peer::Impl::notifyRuntime(const std::vector<PeerId>& to, RuntimeKind kind) {
  Message message;
  message.kind = kind;
  message.step = stepCount;
  sendMessage(to, message, Route::runtime, sendPool, config.training.commTimeout,
              Staging::fromHost);
}

// ---- receiving (io thread) -------------------------------------------------------------------

void Peer::Impl::onEnvelope(
    PeerId from, net::wire::EnvelopeHeader header,
    std::vector<std::pair<std::span<const std::byte>, std::shared_ptr<const void>>> payloads) {
  const auto route = static_cast<Route>(header.kind >> 24);
  Incoming message;
  message.from = from;
  message.kind = header.kind & kKindMask;
  message.step = header.step;
  message.tag = header.tag;
  std::size_t bytes = net::wire::encodeEnvelope(header).size();
  message.scalars = std::move(header.scalars);
  message.integers = std::move(header.integers);
  for (auto& [data, owner] : payloads) {
    if (data.size() % sizeof(float) != 0 ||
        reinterpret_cast<std::uintptr_t>(data.data()) % alignof(float) != 0) {
      logger->warn(
          "peer {:016x}: dropping a message of kind {} from {:016x}: a payload of {} bytes "
          "is not float32 data",
          self, message.kind, from, data.size());
      return;
    }
    message.addPayload(std::span<const float>(reinterpret_cast<const float*>(data.data()),
                                              data.size() / sizeof(float)),
                       std::move(owner));
    bytes += data.size();
  }
  if (route != Route::runtime && from != self) bytesReceived += bytes;
  dispatch(route, std::move(message));
}

void Peer::Impl::dispatch(Route route, Incoming message) {
  switch (route) {
    case Route::inbox:
      inbox.push(std::move(message));
      return;
    case Route::serve:
      if (!servingReady) {
        earlyRequests.push_back(std::move(message));
      } else {
        serveOne(message);
      }
      return;
    case Route::runtime:
      onRuntimeMessage(message);
      return;
  }
  logger->warn("peer {:016x}: dropping a message with unknown route {} from {:016x}", self,
               static_cast<std::uint32_t>(route), message.from);
}

void Peer::Impl::serveOne(const Incoming& message) {
  try {
    algorithm->serve(*serviceContext, message);
  } catch (const std::exception& e) {
    logger->error("peer {:016x}: {}::serve failed on a message of kind {} from {:016x}: {}", self,
                  algorithm->name(), message.kind, message.from, e.what());
  }
}

void Peer::Impl::onRuntimeMessage(const Incoming& message) {
  switch (message.kind) {
    case kPullSnapshot: {
      std::unique_lock lock(snapshotMutex);
      if (finalSnapshot) {
        std::shared_ptr<const Snapshot> snapshot = latest;
        lock.unlock();
        replyWithSnapshot(message, snapshot);
      } else {
        pendingPulls.push_back(message);
        snapshotWanted = true;
      }
      return;
    }
    case kSnapshot:
    case kStatusReply:
      inbox.push(message);
      return;
    case kStatus: {
      bool expected = false;
      std::size_t started = 0;
      {
        std::lock_guard lock(startMutex);
        expected =
            std::find(startMembers.begin(), startMembers.end(), message.from) != startMembers.end();
        started = startMembers.size();
      }
      net::wire::EnvelopeHeader header;
      header.tag = message.tag;
      header.kind = encodeKind(Route::runtime, kStatusReply);
      header.sender = self;
      header.scalars = {training ? 1.0 : 0.0, static_cast<double>(stepCount.load()),
                        static_cast<double>(totalSteps.load()), expected ? 1.0 : 0.0,
                        static_cast<double>(started)};
      sendStaged({message.from}, std::move(header), nullptr);
      return;
    }
    case kFinished:
    case kReleased: {
      {
        std::lock_guard lock(barrierMutex);
        (message.kind == kFinished ? finishedPeers : releasedPeers).insert(message.from);
      }
      barrierChanged.notify_all();
      inbox.wake();  // a gather waiting for a peer that has finished can stop waiting
      return;
    }
    default:
      logger->warn("peer {:016x}: unknown runtime message {} from {:016x}", self, message.kind,
                   message.from);
  }
}

void Peer::Impl::replyWithSnapshot(const Incoming& pull, std::shared_ptr<const Snapshot> snapshot) {
  net::wire::EnvelopeHeader header;
  header.tag = pull.tag;
  header.kind = encodeKind(Route::runtime, kSnapshot);
  header.sender = self;
  header.step = snapshot->step;
  const std::size_t bytes = snapshot->params.size() * sizeof(float);
  header.payloads.push_back({bytes, net::wire::Dtype::f32, snapshot->params.size()});
  // The snapshot's own vector is the send buffer: it is immutable and lives as long as the send.
  auto buffer = std::shared_ptr<HostBuffer>(
      new HostBuffer(
          const_cast<std::byte*>(reinterpret_cast<const std::byte*>(snapshot->params.data())),
          bytes),
      [snapshot](HostBuffer* b) { delete b; });
  sendStaged({pull.from}, std::move(header), std::move(buffer));
}

// ---- waiting (compute thread) ------------------------------------------------------------------

GatherResult Peer::Impl::gather(std::span<const PeerId> from, std::uint64_t tag,
                                Clock::duration timeout, bool whileStepping) {
  const Clock::time_point start = Clock::now();
  std::vector<std::optional<Incoming>> got(from.size());
  std::vector<bool> gone(from.size(), false);
  inbox.waitUntil(start + timeout, [&](std::deque<Incoming>& queue) {
    bool done = true;
    for (std::size_t i = 0; i < from.size(); ++i) {
      if (got[i] || gone[i]) continue;
      const auto it = std::find_if(queue.begin(), queue.end(), [&](const Incoming& m) {
        return m.from == from[i] && m.tag == tag;
      });
      if (it != queue.end()) {
        got[i] = std::move(*it);
        queue.erase(it);
      } else if (from[i] != self && (!isLive(from[i]) || (whileStepping && hasFinished(from[i])))) {
        // It left the view, or stopped stepping (its kFinished came after all it sent): waiting
        // longer is pointless.
        gone[i] = true;
      } else {
        done = false;
      }
    }
    return done;
  });
  addCommWait(Clock::now() - start);
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

// ---- the training loop (compute thread) --------------------------------------------------------

Peer::Impl::StartPlan Peer::Impl::waitForStart() {
  const TrainingConfig& t = config.training;
  const Clock::time_point deadline = Clock::now() + t.startTimeout;
  for (;;) {
    if (killed) GOSSAMER_THROW("peer {:016x} was killed before training started", self);
    const std::vector<PeerId> now = liveMembers();
    std::size_t expectedBy = 0;  // members the cluster started with, when it counted on us
    std::vector<PeerId> others;
    for (PeerId peer : now)
      if (peer != self) others.push_back(peer);
    if (!others.empty()) {
      // Is the cluster already training, and did it count on this peer from the start?
      const std::uint64_t tag = tags.fresh();
      sendMessage(others, Message{.kind = kStatus, .tag = tag}, Route::runtime, sendPool,
                  t.commTimeout, Staging::fromHost);
      const GatherResult replies = gather(others, tag, std::chrono::seconds(1));
      StartPlan plan;
      for (const Incoming& reply : replies.messages) {
        if (reply.scalars.size() < 5 || reply.scalars[0] != 1.0) continue;
        // A peer resumed from its checkpoint was a member, but the others went on without it:
        // it catches up with their step like a newcomer.
        if (reply.scalars[3] == 1.0 && !resumeFrom) {
          expectedBy = std::max(expectedBy, static_cast<std::size_t>(reply.scalars[4]));
          continue;
        }
        plan.late = true;
        plan.totalSteps = static_cast<std::uint64_t>(reply.scalars[2]);
        plan.step = std::max(plan.step, static_cast<std::uint64_t>(reply.scalars[1]));
      }
      // One of the initial members: start with them once this view holds all they started with
      // (the same member list gives the same shards and graph).
      if (expectedBy > 0) {
        if (now.size() >= expectedBy) return StartPlan{};
      } else if (plan.late) {
        return plan;
      }
    }
    if (expectedBy == 0 && now.size() >= t.minPeers) return StartPlan{};
    if (Clock::now() >= deadline) {
      std::string seeds;
      for (const auto& seed : config.network.seeds) {
        if (!seeds.empty()) seeds += ',';
        seeds += seed.str();
      }
      GOSSAMER_THROW("only {} of the {} peers (--min-peers) joined within {} s; seeds: {}",
                     now.size(), t.minPeers,
                     std::chrono::duration_cast<std::chrono::seconds>(t.startTimeout).count(),
                     seeds.empty() ? "none (this peer started the cluster)" : seeds);
    }
    std::unique_lock lock(viewMutex);
    viewChanged.wait_for(lock, std::chrono::milliseconds(200),
                         [&] { return view.members.size() != now.size(); });
  }
}

std::vector<std::size_t> Peer::Impl::shardFor(std::size_t count, std::size_t rank) const {
  const TrainingConfig& t = config.training;
  return data::shardIndices(
      data->train.labels, data->train.classes,
      {.shards = count, .kind = t.split, .dirichletAlpha = t.dirichletAlpha, .seed = t.seed})[rank];
}

// The training set split over the current members, this peer taking the shard of its rank: every
// peer computes the same partition from the same member list, so the data of a peer that left is
// covered again, and a newcomer gets its share.
void Peer::Impl::rebalance() {
  const std::size_t count = members.size();
  const auto rank =
      static_cast<std::size_t>(std::find(members.begin(), members.end(), self) - members.begin());
  if (count == shardCount && rank == shardRank) return;
  learner->setShard(shardFor(count, rank));
  logger->debug("peer {:016x}: data rebalanced to shard {} of {}", self, rank, count);
  shardCount = count;
  shardRank = rank;
}

std::string Peer::Impl::checkpointPath() const {
  return (std::filesystem::path(config.training.checkpointDir) /
          fmt::format("peer-{:016x}.ckpt", self))
      .string();
}

void Peer::Impl::saveCheckpoint() {
  train::Checkpoint c = learner->checkpoint();
  AlgorithmState state;
  algorithm->saveState(state);
  for (auto& [name, tensor] : state.tensors) c.tensors["algorithm." + name] = std::move(tensor);
  for (const auto& [name, value] : state.values)
    c.meta["algorithm.value." + name] = fmt::format("{:.17g}", value);
  c.meta["algorithm"] = algorithm->name();
  c.meta["runtime.step"] = std::to_string(stepCount.load());
  c.meta["runtime.total_steps"] = std::to_string(totalSteps.load());
  train::saveCheckpoint(checkpointPath(), c);
}

// --resume: the checkpoint is read and checked before the peer joins anyone, so that a wrong or
// corrupt file is a clear error at once, and nothing is half-loaded.
void Peer::Impl::loadResumeCheckpoint() {
  const std::string path = checkpointPath();
  GOSSAMER_ENFORCE(std::filesystem::exists(path),
                   "--resume: no checkpoint of peer {:016x} in {} (expected {}); a peer resumes "
                   "under the identity it had (same --listen or --peer-id)",
                   self, config.training.checkpointDir, path);
  train::Checkpoint c = train::loadCheckpoint(path);
  GOSSAMER_ENFORCE(
      c.fingerprint == model->layout().fingerprint(),
      "checkpoint {} is for a different model (layout fingerprint {:016x}, this model {} "
      "has {:016x})",
      path, c.fingerprint, model->name(), model->layout().fingerprint());
  GOSSAMER_ENFORCE(c.metaString("algorithm") == algorithm->name(),
                   "checkpoint {} was written by algorithm '{}' but this peer runs '{}'", path,
                   c.metaString("algorithm"), algorithm->name());
  c.metaInt("runtime.step");
  resumeFrom = std::move(c);
}

void Peer::Impl::rebuildGraph() { graph = topology->build(members, stepCount); }

// Adopts the current view (members in training) when it changed, or when `force`.
void Peer::Impl::refreshMembers(bool force) {
  const std::uint64_t current = viewEpoch;
  if (!force && current == epoch) return;
  members = liveMembers();
  epoch = current;
  rebalance();
  rebuildGraph();
  algorithm->setup(*context);
}

void Peer::Impl::publishSnapshot(bool final) {
  auto snapshot = std::make_shared<Snapshot>();
  snapshot->peer = self;
  snapshot->step = stepCount;
  snapshot->params.resize(learner->params().size());
  compute->download(std::span<float>(snapshot->params), std::span<const float>(learner->params()));
  std::vector<Incoming> pulls;
  {
    std::lock_guard lock(snapshotMutex);
    latest = snapshot;
    ++snapshotVersion;
    finalSnapshot = final;
    snapshotWanted = false;
    pulls.swap(pendingPulls);
  }
  snapshotPublished.notify_all();
  if (!pulls.empty()) {
    asio::post(io, [this, pulls = std::move(pulls), snapshot] {
      for (const Incoming& pull : pulls) replyWithSnapshot(pull, snapshot);
    });
  }
}

// Waits until every live member but self is in `arrived` (or finishTimeout).
void Peer::Impl::awaitBarrier(std::set<PeerId>& arrived, const char* what) {
  std::unique_lock lock(barrierMutex);
  const bool all = barrierChanged.wait_for(lock, config.training.finishTimeout, [&] {
    if (killed) return true;
    for (PeerId peer : liveMembers()) {
      if (peer != self && arrived.count(peer) == 0) return false;
    }
    return true;
  });
  if (!all)
    logger->warn(
        "peer {:016x}: not every member {} within {} s; going on", self, what,
        std::chrono::duration_cast<std::chrono::seconds>(config.training.finishTimeout).count());
}

ConsensusResult Peer::Impl::pullConsensus() {
  const std::vector<PeerId> everyone = liveMembers();
  const std::uint64_t tag = tags.fresh();
  Message pull;
  pull.kind = kPullSnapshot;
  pull.tag = tag;
  sendMessage(everyone, pull, Route::runtime, sendPool, config.training.commTimeout,
              Staging::fromHost);
  GatherResult got = gather(everyone, tag, config.training.finishTimeout);
  std::vector<Snapshot> snapshots;
  for (const Incoming& m : got.messages) {
    const std::span<const float> params = m.payload(0);
    snapshots.push_back(Snapshot{m.from, m.step, std::vector<float>(params.begin(), params.end())});
  }
  if (!got.missing.empty())
    logger->warn("peer {:016x}: {} members sent no final model; the consensus averages {}", self,
                 got.missing.size(), snapshots.size());
  ConsensusEvaluator evaluator(registry, config.training.model, config.training.modelConfig,
                               data->test);
  return evaluator.evaluate(snapshots);
}

PeerResult Peer::Impl::train() {
  const TrainingConfig& t = config.training;
  const StartPlan plan = waitForStart();
  members = liveMembers();
  epoch = viewEpoch;
  {
    std::lock_guard lock(startMutex);
    startMembers = members;
  }
  shardCount = members.size();
  shardRank =
      static_cast<std::size_t>(std::find(members.begin(), members.end(), self) - members.begin());
  learner = std::make_unique<train::Learner>(*compute, *model, t.optimizer, data->train,
                                             shardFor(shardCount, shardRank), t.batch, t.seed);
  const std::size_t shards = std::max(t.minPeers, shardCount);
  const auto stepsPerPass =
      static_cast<std::uint64_t>((data->train.count() + shards * t.batch - 1) / (shards * t.batch));
  totalSteps =
      plan.late ? plan.totalSteps
      : t.maxSteps > 0
          ? t.maxSteps
          : static_cast<std::uint64_t>(std::ceil(t.epochs * static_cast<double>(stepsPerPass)));
  rebuildGraph();
  if (resumeFrom) {
    // Params, optimizer and algorithm state from the checkpoint; the place in the data only when
    // the shard is the one it was written with.
    const train::Checkpoint& c = *resumeFrom;
    learner->restore(c, c.metaInt("epoch") == 0 || static_cast<std::size_t>(c.metaInt("cursor")) <=
                                                       learner->sampler().size());
    AlgorithmState state;
    for (const auto& [name, tensor] : c.tensors) {
      if (name.rfind("algorithm.", 0) == 0) state.tensors[name.substr(10)] = tensor;
    }
    for (const auto& [key, value] : c.meta) {
      if (key.rfind("algorithm.value.", 0) == 0) state.values[key.substr(16)] = std::stod(value);
    }
    algorithm->loadState(state);
    stepCount = static_cast<std::uint64_t>(c.metaInt("runtime.step"));
    if (plan.late) stepCount = std::max(stepCount.load(), plan.step);
    logger->info("peer {:016x}: resumed from {} at step {}", self, checkpointPath(),
                 stepCount.load());
  } else if (plan.late) {
    algorithm->join(*context);
  } else if (t.initialParams) {
    const std::vector<float> initial = t.initialParams(shardRank, learner->params().size());
    GOSSAMER_ENFORCE_EQ(initial.size(), learner->params().size(),
                        "initialParams returned the wrong size");
    compute->upload(learner->params(), std::span<const float>(initial));
  }
  logger->info(
      "peer {:016x}: {} with {} on {} (gap {:.3f}); {} members{}; shard {} of {} ({} samples); "
      "steps {} to {}",
      self, algorithm->name(), topology->name(), compute->describe(), graph->spectralGap(),
      members.size(), plan.late ? ", joined late" : "", shardRank, shardCount,
      learner->sampler().size(), stepCount.load(), totalSteps.load());
  algorithm->setup(*context);
  asio::post(io, [this] {
    servingReady = true;
    for (const Incoming& request : earlyRequests) serveOne(request);
    earlyRequests.clear();
  });
  commWaitNs = 0;  // waiting for the others to show up is not communication cost

  train::MetricsLog metricsLog(t.metricsPath);
  train::Progress progress(static_cast<std::int64_t>(totalSteps), t.progress);
  train::Evaluator evaluator(*compute, *model, data->test);
  std::deque<double> recentLosses;
  const Clock::time_point start = Clock::now();
  training = true;
  PeerResult result;
  while (stepCount < totalSteps && !stopRequested && !leaveRequested && !killed) {
    const Clock::time_point stepStart = Clock::now();
    learner->optimizer().setLearningRate(
        train::scheduledRate(t.optimizer.lr, t.schedule, stepCount, totalSteps));
    refreshMembers(false);
    if (topology->timeVarying()) rebuildGraph();
    const double loss = algorithm->step(*context);
    const auto minStep = std::max<std::chrono::microseconds>(
        t.minStepTime, std::chrono::microseconds(minStepTimeOverride.load()));
    if (minStep.count() > 0) std::this_thread::sleep_until(stepStart + minStep);
    ++stepCount;
    recentLosses.push_back(loss);
    if (recentLosses.size() > 50) recentLosses.pop_front();
    lossAverage = stepCount == 1 ? loss : 0.95 * lossAverage + 0.05 * loss;
    trainSeconds = Seconds(Clock::now() - start).count();
    if (snapshotWanted) publishSnapshot(false);
    const std::uint64_t step = stepCount;
    if (t.evalEvery > 0 && step % static_cast<std::uint64_t>(t.evalEvery) == 0) {
      const EvalResult eval = evaluator.run(learner->params(), t.evalSamples);
      const double accuracy = static_cast<double>(eval.correct) / static_cast<double>(eval.samples);
      metricsLog.write(JsonObject()
                           .add("event", "eval")
                           .add("peer", fmt::format("{:016x}", self))
                           .add("step", step)
                           .add("wall_s", trainSeconds.load())
                           .add("loss", lossAverage.load())
                           .add("test_accuracy", accuracy)
                           .add("bytes_sent", bytesSent.load())
                           .add("comm_wait_s", static_cast<double>(commWaitNs) * 1e-9));
      progress.message(fmt::format("step {:>6}  loss {:.4f}  test acc {:.2f}%", step,
                                   lossAverage.load(), 100 * accuracy));
    }
    if (!t.checkpointDir.empty() && t.checkpointEvery > 0 && step % t.checkpointEvery == 0)
      saveCheckpoint();
    progress.update(static_cast<std::int64_t>(step),
                    fmt::format("loss {:.4f} {:.1f} MB sent", lossAverage.load(), bytesSent / 1e6));
  }
  progress.finish();
  result.stopped = stopRequested || leaveRequested;
  result.wallSeconds = Seconds(Clock::now() - start).count();
  result.commWaitSeconds = static_cast<double>(commWaitNs) * 1e-9;
  training = false;
  std::vector<PeerId> others;
  for (PeerId peer : liveMembers())
    if (peer != self) others.push_back(peer);
  if (leaveRequested && !killed) {
    // Leaving while the others go on: hand over what must not leave with this peer; they stop
    // waiting for it (kFinished), and Peer::run announces the leave to the membership.
    algorithm->leave(*context);
    notifyRuntime(others, kFinished);
  } else if (!killed) {
    // kFinished travels behind this peer's algorithm messages on the data links, so once every
    // member's has arrived, so has everything they sent: finish() can consume all of it.
    notifyRuntime(others, kFinished);
    awaitBarrier(finishedPeers, "finished training");
    {
      std::lock_guard lock(barrierMutex);
      inFinish = true;
    }
    // The barrier may have ended because a member left the view (a crash): finish() works with
    // the members as they are now, like a step would (setup() first when they changed; a new
    // epoch with the same members changes nothing).
    if (liveMembers() != members) refreshMembers(true);
    algorithm->finish(*context);
  }
  if (!t.checkpointDir.empty() && !killed) saveCheckpoint();
  publishSnapshot(true);
  finished = true;
  const bool leaving = leaveRequested;
  result.peer = self;
  result.algorithm = algorithm->name();
  result.topology = topology->name();
  result.peers = shards;
  result.steps = stepCount;
  result.samples = learner->samples();
  for (double l : recentLosses) result.trainLoss += l / static_cast<double>(recentLosses.size());
  if (t.finalLocalEval && !killed) {
    const EvalResult eval = evaluator.run(learner->params());
    result.testAccuracy = static_cast<double>(eval.correct) / static_cast<double>(eval.samples);
    result.testLoss = eval.lossSum / static_cast<double>(eval.samples);
  }
  if (t.finalConsensus && !killed && !leaving) result.consensus = pullConsensus();
  if (!killed && !leaving) {
    others.clear();
    for (PeerId peer : liveMembers())
      if (peer != self) others.push_back(peer);
    notifyRuntime(others, kReleased);
    awaitBarrier(releasedPeers, "released the others");
  }
  result.bytesSent = bytesSent;
  result.bytesReceived = bytesReceived;
  result.commWaitFraction =
      result.wallSeconds > 0 ? result.commWaitSeconds / result.wallSeconds : 0;
  result.metrics = metrics.values();
  metricsLog.write(JsonObject()
                       .add("event", "final")
                       .add("peer", fmt::format("{:016x}", self))
                       .add("steps", result.steps)
                       .add("wall_s", result.wallSeconds)
                       .add("test_accuracy", result.testAccuracy)
                       .add("bytes_sent", result.bytesSent)
                       .add("comm_wait_fraction", result.commWaitFraction));
  return result;
}

// ---- Peer ----------------------------------------------------------------------------------

Peer::Peer(PeerConfig config, const Registry& registry, std::shared_ptr<const DatasetPair> data)
    : impl_(std::make_unique<Impl>(std::move(config), registry, std::move(data))) {}

Peer::~Peer() { impl_->stopNetwork(impl_->finished && !impl_->killed); }

PeerId Peer::id() const { return impl_->self; }
net::Endpoint Peer::endpoint() const { return impl_->endpoint; }

PeerResult Peer::run() {
  PeerResult result = impl_->train();
  impl_->stopNetwork(!impl_->killed);
  return result;
}

void Peer::requestStop() { impl_->stopRequested = true; }
void Peer::requestLeave() { impl_->leaveRequested = true; }

void Peer::setMinStepTime(std::chrono::microseconds time) {
  impl_->minStepTimeOverride = time.count();
}

void Peer::kill() {
  impl_->killed = true;
  impl_->viewChanged.notify_all();
  impl_->barrierChanged.notify_all();
  impl_->stopNetwork(false);
}

std::optional<Snapshot> Peer::snapshot(Clock::duration timeout) {
  Impl& impl = *impl_;
  std::unique_lock lock(impl.snapshotMutex);
  if (impl.finalSnapshot || (!impl.training && impl.latest)) return *impl.latest;
  const std::uint64_t version = impl.snapshotVersion;
  impl.snapshotWanted = true;
  if (!impl.snapshotPublished.wait_for(lock, timeout,
                                       [&] { return impl.snapshotVersion != version; }))
    return std::nullopt;
  return *impl.latest;
}

PeerStatus Peer::status() const {
  const Impl& impl = *impl_;
  return PeerStatus{
      impl.stepCount,    impl.totalSteps,    impl.lossAverage,
      impl.bytesSent,    impl.bytesReceived, static_cast<double>(impl.commWaitNs) * 1e-9,
      impl.trainSeconds, impl.training,      impl.finished};
}

net::membership::View Peer::view() const {
  std::lock_guard lock(impl_->viewMutex);
  return impl_->view;
}

// ---- consensus evaluation ---------------------------------------------------------------------

struct ConsensusEvaluator::Impl {
  std::unique_ptr<kernels::Compute> compute = kernels::cpu::makeCompute({.blasThreads = 1});
  std::unique_ptr<Model> model;
  std::unique_ptr<train::Evaluator> evaluator;
};

ConsensusEvaluator::ConsensusEvaluator(const Registry& registry, const std::string& model,
                                       ModelConfig config, const data::Dataset& test)
    : impl_(std::make_unique<Impl>()) {
  impl_->model = registry.models.get(model)(*impl_->compute, config);
  impl_->evaluator = std::make_unique<train::Evaluator>(*impl_->compute, *impl_->model, test);
}

ConsensusEvaluator::~ConsensusEvaluator() = default;

ConsensusResult ConsensusEvaluator::evaluate(std::span<const Snapshot> snapshots,
                                             std::size_t samples, bool perPeer) {
  ConsensusResult result;
  result.peers = snapshots.size();
  if (snapshots.empty()) return result;
  const std::size_t n = snapshots.front().params.size();
  std::vector<double> sum(n, 0.0);
  for (const Snapshot& s : snapshots) {
    GOSSAMER_ENFORCE_EQ(s.params.size(), n, "snapshots of different models");
    for (std::size_t i = 0; i < n; ++i) sum[i] += s.params[i];
  }
  std::vector<float> mean(n);
  const double count = static_cast<double>(snapshots.size());
  for (std::size_t i = 0; i < n; ++i) mean[i] = static_cast<float>(sum[i] / count);
  for (const Snapshot& s : snapshots) {
    double distance = 0;
    for (std::size_t i = 0; i < n; ++i) {
      const double d = static_cast<double>(s.params[i]) - mean[i];
      distance += d * d;
    }
    result.distance += distance / count;
  }
  auto accuracyOf = [&](const std::vector<float>& params, double* loss) {
    const EvalResult eval = impl_->evaluator->run(params, samples);
    if (loss) *loss = eval.lossSum / static_cast<double>(eval.samples);
    return static_cast<double>(eval.correct) / static_cast<double>(eval.samples);
  };
  result.accuracy = accuracyOf(mean, &result.loss);
  if (perPeer) {
    result.minPeerAccuracy = 1;
    for (const Snapshot& s : snapshots) {
      const double a = accuracyOf(s.params, nullptr);
      result.minPeerAccuracy = std::min(result.minPeerAccuracy, a);
      result.meanPeerAccuracy += a / count;
    }
  }
  return result;
}

}  // namespace gossamer::engine::runtime
