// The simulated world's parts, shared by its files (internal to engine/sim; see world.h for how
// the world runs):
//   world.cc     the World: the scheduler, lives, views, faults, the run
//   network.cc   World's links: sends, deliveries, partitions, loss, the runtime's marks
//   report.cc    World's evaluations, invariants, and the result as text
//   sim_peer.cc  one life of a peer (SimPeer) on its fiber, and its inbox
//   context.cc   the PeerContext and ServiceContext its algorithm sees (context.h)
//   membership.cc  a life's SWIM protocol in virtual time (SimMembership), its control links
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <queue>
#include <random>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "engine/algorithm.h"
#include "engine/life/peer_life.h"
#include "engine/runtime/consensus.h"
#include "engine/runtime/eval_points.h"
#include "engine/runtime/payload_codec.h"
#include "engine/sim/fiber.h"
#include "engine/sim/world.h"
#include "engine/train/checkpoint.h"
#include "engine/train/learner.h"
#include "net/membership/protocol.h"
#include "net/shaped/link_schedule.h"

namespace gossamer::engine::sim::detail {

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

inline Duration fromSeconds(double s) {
  return std::chrono::duration_cast<Duration>(Seconds(std::max(0.0, s)));
}

// Thrown at the blocking point of a killed peer's fiber: unwinds its stack (it never steps again).
// Not a std::exception, so that nothing but the fiber's entry catches it.
struct Killed {};

// A message on the wire: one copy of the payloads as every recipient decodes them (float32, lossy
// where they travelled compressed), shared by all of them.
struct Wire {
  Incoming header;  // from, kind, step, tag, scalars, integers; no payloads (those are below)
  std::vector<std::vector<float>> payloads;
  std::size_t bytes = 0;  // on the wire: the header and the payloads as they travel
  bool serve = false;     // to serve(), else to the inbox
  // Sent while its sender was training: the sender's finished mark follows it on the link, so a
  // receiver counts the sender as finished only once it has arrived.
  bool beforeFinish = false;
};

// A life's phase as the world sees it: waiting to start, training, finished training (its
// finished mark sent), released the others, left the cluster (a graceful leave, or it found the
// cluster done), dead (killed, or failed).
enum class Phase { waiting, training, finished, released, left, dead };

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
  runtime::TrainingConfig training;  // the configuration's, with the evaluation points set
  std::uint64_t totalSteps = 0;
  Invariants invariants;  // the algorithm's, checked at the end
  // The run's SWIM options, stretched for the profile's longest round trip as a real peer's are.
  net::membership::Options swim;
};

// Where peer `id` listens in the simulated world ("sim:<id>").
net::Endpoint addressOf(PeerId id);

// The Environment of one life's membership protocol: virtual time, the world's event queue as
// its timers, and the pair's control link (a LinkSchedule apart from the data link's, as a
// mesh's control channel is a link of its own) for its frames. Lives as long as its SimPeer.
class SimMembership final : public net::membership::Environment {
 public:
  explicit SimMembership(SimPeer& peer) : peer_(peer) {}

  Clock::time_point now() const override;
  // Virtual milliseconds: a later life of the same id outbids an earlier one, as with the wall
  // clock, and the run stays replayable.
  std::uint64_t firstIncarnation() const override;
  std::uint64_t selfId() const override;
  net::Endpoint selfAddress() const override;
  TimerId at(Clock::time_point when, std::function<void()> action) override;
  void cancel(TimerId timer) override { pending_.erase(timer); }
  void send(const net::Endpoint& to, net::wire::MembershipMessage message,
            std::chrono::milliseconds connectTimeout,
            std::function<void(std::error_code)> done) override;
  void open(const net::Endpoint& to, std::chrono::milliseconds timeout,
            std::function<void(net::LinkOutcome)> done) override;
  void disconnect(const net::Endpoint&) override {}  // links are not modelled

 private:
  SimPeer& peer_;
  TimerId next_ = 0;
  std::set<TimerId> pending_;
};

class SimContext;
class SimServe;
class SimPeer;

// A simulated peer as the environment of its life (engine/life/peer_life.h): the start rule over
// what the world's other lives would answer, its membership view, the world's shards and graphs,
// the checkpoints the world keeps, the evaluation board, and the barriers in virtual time.
class SimLife final : public life::LifeEnvironment {
 public:
  explicit SimLife(SimPeer& peer) : p_(peer) {}
  life::StartPlan awaitStart() override;
  void startedWith(const std::vector<PeerId>& members) override;
  std::vector<PeerId> members() override;
  std::uint64_t epoch() override;
  PeerContext& context() override;
  train::Learner& takeShard(std::size_t count, std::size_t rank) override;
  std::shared_ptr<const topology::Graph> graph(const std::vector<PeerId>& members,
                                               std::uint64_t step) override;
  bool timeVaryingGraph() const override;
  std::optional<std::uint64_t> trainingStep(PeerId member) override;
  std::optional<std::uint64_t> heardStep(PeerId member) override;
  std::uint64_t expiredWaits() override;
  std::uint64_t totalSteps(std::size_t shards) override;
  const train::Checkpoint* resumeFrom() override { return resumeFrom_; }
  void atEvalPoint(std::uint64_t step, std::uint64_t point) override;
  bool checkpointDue(std::uint64_t step) override;
  void keepCheckpoint(train::Checkpoint checkpoint) override;
  void announce(life::Barrier barrier) override;
  bool awaitOthers(life::Barrier barrier) override;

  // A restart from its checkpoint (null: a new life without one).
  void resumeFrom(const train::Checkpoint* checkpoint) { resumeFrom_ = checkpoint; }
  // Whether this life started training with life `life` of `id` (a status reply's `expected`).
  bool expects(PeerId id, std::size_t life) const;

 private:
  // What `other` would answer to this life's status request.
  life::MemberStatus statusOf(const SimPeer& other) const;

  SimPeer& p_;
  const train::Checkpoint* resumeFrom_ = nullptr;
  std::map<PeerId, std::size_t> startLives_;
};

// One life of a peer: its fiber, learner, algorithm, membership and what the world measures of
// it; its rules are its PeerLife's, the same as a real peer's. A restart is a new life of the
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
  // Its membership protocol delivered an event: the view follows, and the fiber looks again.
  void viewChanged();
  // Whether every other member of the view has `mark`'s phase as this life sees it.
  bool othersDone(Phase mark) const;
  const life::Roster& roster() const { return lifecycle->roster(); }

  World& world;
  const PeerId id;
  const std::size_t life;
  const bool late;
  Phase phase = Phase::waiting;
  bool killed = false;
  bool leaveRequested = false;  // a graceful leave at its next step boundary
  bool serveOpen = false;
  std::atomic<std::uint64_t> step{0}, totalSteps{0}, runSteps{0};
  double stepFactor = 1;  // a straggler's
  std::string error;

  // What its life measured, as a real peer's status does.
  struct Figures {
    // When it began training (after setup), finished training, and ended finish() or died.
    TimePoint trainStart{}, finishedAt{}, releasedAt{};
    std::uint64_t bytesSent = 0;
    Duration commWait{};
    Duration computeTime{};
  } figures;

  // Its speed (PeerContext::speedOf), measured as a real peer's SpeedReporter does, over windows
  // of at least kSpeedReportPeriod of virtual time; the others read it at once (the simulator
  // does not model the reports' messages).
  struct Speeds {
    bool open = false;  // a window has started
    TimePoint start{};
    std::uint64_t step = 0, samples = 0;
    Duration compute{};
    std::optional<PeerSpeed> last;
  } speeds;
  // After each step's compute: closes a speed window that is long enough.
  void noteSpeed();

  // What reached it from the others: the latest step of an algorithm message delivered to its
  // inbox, by sender, and its waits that reached their deadline incomplete (the life's
  // realignIfBehind reads both); frames sent before their senders finished training, on their
  // way to this life, by sender.
  struct Heard {
    std::map<PeerId, std::uint64_t> steps;
    std::uint64_t expiredWaits = 0;
    // Messages from a peer not delivered yet: those it sent before its finished mark (which
    // trails them), and all of them (its released mark trails those it sent while finishing too).
    std::map<PeerId, std::size_t> inflightFrom, inflightAllFrom;
  } heard;

  // Its fiber, and whether (and in which wait) it is blocked.
  struct Blocked {
    std::unique_ptr<Fiber> fiber;
    bool waiting = false;
    std::uint64_t token = 0;
  } blocked;

  SimInbox inbox{*this};
  // Its algorithm and what the contexts hand it.
  struct Parts {
    SimMetrics metrics;
    SimTags tags;
    std::mt19937_64 rng;
    std::unique_ptr<train::Learner> learner;
    // The runtime's codec of this life's payloads (seeded as a real peer's: the run seed ^ id).
    std::unique_ptr<runtime::PayloadCodec> codec;
    std::unique_ptr<Algorithm> algorithm;
    std::unique_ptr<SimContext> context;
    std::unique_ptr<SimServe> serveContext;
  } parts;

  SimLife environment{*this};
  std::unique_ptr<life::PeerLife> lifecycle;  // its rules (engine/life)

  // Its membership: the view (what isMember reads: its protocol's, updated at each of its
  // events), and the SWIM protocol of real peers over the simulated environment.
  struct Swim {
    explicit Swim(SimPeer& peer) : environment(peer) {}
    std::vector<PeerId> view;
    std::uint64_t viewEpoch = 0;
    SimMembership environment;
    std::unique_ptr<net::membership::Protocol> protocol;
  } swim{*this};

 private:
  void body();
  void run();
  // Leaves the cluster gracefully (the others record `left`), ending this life.
  void leaveCluster();
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
  // The membership frame `message` from `from` to whoever listens at `to`, on their control link
  // (partitions and loss apply; nothing arrives at a dead life). `done` gets the send's outcome
  // when it leaves: refused when nobody lives at `to`.
  void sendMembership(SimPeer& from, const net::Endpoint& to, net::wire::MembershipMessage message,
                      std::function<void(std::error_code)> done);
  // A control link to `to` for `from`'s protocol: open after a round trip when a life is there
  // and not partitioned away; refused after a round trip when none is; Errc::partitioned at
  // `timeout` across a partition.
  void openMembership(SimPeer& from, const net::Endpoint& to, Duration timeout,
                      std::function<void(net::LinkOutcome)> done);
  // When `peer`'s change of phase reaches `observer` (the link's one-way latency, no earlier
  // than the last frame between them): the runtime's finished and released marks.
  bool phaseSeen(const SimPeer& peer, const SimPeer& observer, Phase phase) const;
  const std::vector<std::size_t>& shard(std::size_t count, std::size_t rank);
  std::shared_ptr<const topology::Graph> graph(const std::vector<PeerId>& members,
                                               std::uint64_t step);
  bool inFiber() const { return inFiber_; }
  // `peer` completed the step of evaluation point `point`: its sample joins the board, and the
  // points every peer has passed (or will not) are evaluated.
  void samplePoint(const SimPeer& peer, std::uint64_t point);
  // A merged model of time-boxed rounds (PeerContext::roundMerged): the latest round's is what
  // the evaluations on the clock evaluate from now on, in place of the peers' mean.
  void roundMerged(std::uint64_t round, std::span<const float> model) {
    if (merged_ && merged_->round >= round) return;  // a later member of the same round
    merged_ = RoundModel{round, std::vector<float>(model.begin(), model.end())};
  }
  // The lives of `id` (the current one, then the ended ones).
  std::vector<const SimPeer*> livesOf(PeerId id) const;
  // The last checkpoint of each peer id (TrainingConfig::checkpointEvery), kept in memory as a
  // real peer keeps it in its file; null when it has none.
  void keepCheckpoint(PeerId id, train::Checkpoint checkpoint) {
    checkpoints_[id] = std::move(checkpoint);
  }
  const train::Checkpoint* checkpointOf(PeerId id) const {
    const auto it = checkpoints_.find(id);
    return it == checkpoints_.end() ? nullptr : &it->second;
  }

 private:
  struct Event {
    TimePoint at;
    std::uint64_t seq;
    std::function<void()> run;
    bool operator>(const Event& o) const { return at != o.at ? at > o.at : seq > o.seq; }
  };
  struct RoundModel {
    std::uint64_t round = 0;
    std::vector<float> params;
  };
  struct LinkState {
    std::unique_ptr<net::shaped::LinkSchedule> schedule;
    TimePoint lastDelivery{};
  };

  void deliver(const std::shared_ptr<const Wire>& wire, PeerId to, std::size_t life);
  void applyFault(const Fault& fault);
  // A new life of `id`: an initial one, or one that comes late (a joiner; a restart from
  // `checkpoint`, or without one).
  void startLife(PeerId id, bool late, const train::Checkpoint* checkpoint = nullptr);
  void kill(SimPeer& peer);
  // Makes the membership protocol of a new life: an initial peer starts in the formed cluster
  // of the initial peers; a late one joins through them as seeds.
  void startMembership(SimPeer& peer);
  // The one-way delay of the pair's link without jitter or queueing (open's round trip).
  Duration latency(PeerId a, PeerId b) const;
  std::vector<PeerId> liveIds() const;
  void evaluate(bool final);
  void evaluatePoints();
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
  std::map<std::pair<PeerId, PeerId>, LinkState> controlLinks_;
  std::map<PeerId, std::pair<TimePoint, double>> loss_;  // until, rate
  std::map<PeerId, TimePoint> partitions_;               // until
  std::map<PeerId, train::Checkpoint> checkpoints_;
  std::map<std::size_t, std::vector<std::vector<std::size_t>>> shards_;
  std::deque<std::pair<std::pair<std::uint64_t, std::vector<PeerId>>,
                       std::shared_ptr<const topology::Graph>>>
      graphs_;
  runtime::ConsensusEvaluator evaluator_;
  runtime::EvalPointBoard points_;
  PeerId nextId_ = 1;
  bool inFiber_ = false;
  SimResult result_;
  Duration markDelay_{};              // the longest one-way delay of the profile (latency + jitter)
  std::optional<RoundModel> merged_;  // roundMerged()'s latest
};

}  // namespace gossamer::engine::sim::detail
