// One life of a peer, the same for a real peer (runtime::Peer) and a simulated one (engine/sim's
// SimPeer): how it starts (with the others, late, from its checkpoint, or not at all), each step
// at its boundary, and how it ends (leaving, or finishing with the others through the finished and
// released barriers).
//
// A state machine without I/O of its own, as SWIM is in net/membership/protocol.h: the start
// rule's answers, the member view, the data shard, the graph, the checkpoint store, evaluation
// points and the barriers reach it through a LifeEnvironment. The runtime's environment blocks its
// compute thread on the cluster-control protocol and the mesh; the simulator's blocks a fiber in
// virtual time. A fault schedule swept in simulation thus runs the code real peers run.
//
//   waiting ──start()──> training ──finish()──> finishing ──release()──> released
//      │                    │ ↺ step(); realign when a lockstep peer fell behind a member
//      │                    └──leave()──> left
//      └──(joined no one, or the cluster is done)──> notStarted
//
// Threading: the driver's one thread (the compute thread, or the simulated peer's fiber). The
// step counters are atomics that other threads may read.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <set>
#include <vector>

#include "engine/algorithm.h"
#include "engine/life/start_rule.h"
#include "engine/runtime/config.h"
#include "engine/train/checkpoint.h"
#include "engine/train/learner.h"
#include "topology/graph.h"

namespace gossamer::engine::life {

enum class Phase { waiting, training, finishing, released, left, notStarted };
const char* name(Phase phase);

// The members in training as the algorithm sees them (PeerContext::members, epoch, graph): fixed
// between step boundaries.
struct Roster {
  std::vector<PeerId> members;                      // sorted, self included
  std::uint64_t epoch = 0;                          // of the membership view they come from
  std::shared_ptr<const topology::Graph> graph;     // the topology's, members placed
  std::shared_ptr<const topology::Graph> unplaced;  // the topology's over the sorted ids
  std::vector<PeerId> placement;                    // PeerContext::placeMembers (empty: ids)
  // Past the finish barrier, where finish() runs its last rounds: a wait ends early for a peer
  // that released the others, no longer for one that finished training (they all have).
  bool finishing = false;
  std::size_t shardCount = 0, shardRank = 0;
};

// The end-of-run barriers: "my training loop is over" and "I have what I need from the others".
enum class Barrier { finished, released };

// Everything a life reaches outside itself. Blocking calls block the driver's thread (or fiber).
class LifeEnvironment {
 public:
  virtual ~LifeEnvironment() = default;
  // Waits until the start rule (start_rule.h) gives a plan, asking the members as the driver
  // does; throws gossamer::Error when its start timeout passes.
  virtual StartPlan awaitStart() = 0;
  // The members this life starts training with: a status reply counts exactly these lives as
  // expected (a later life of one of them is a newcomer).
  virtual void startedWith(const std::vector<PeerId>& members) = 0;
  // The membership view now: its members (sorted, self included) and its epoch.
  virtual std::vector<PeerId> members() = 0;
  virtual std::uint64_t epoch() = 0;
  // The algorithm's context over the life's roster and learner (made at the first call, once the
  // learner exists).
  virtual PeerContext& context() = 0;
  // The learner over shard `rank` of `count` of the training set (made at the first call; the
  // data moves at later calls with another shard).
  virtual train::Learner& takeShard(std::size_t count, std::size_t rank) = 0;
  virtual std::shared_ptr<const topology::Graph> graph(const std::vector<PeerId>& members,
                                                       std::uint64_t step) = 0;
  virtual bool timeVaryingGraph() const = 0;
  // The step `member` is training at (its status), or nullopt when it is not training or does
  // not answer.
  virtual std::optional<std::uint64_t> trainingStep(PeerId member) = 0;
  // The latest step of an algorithm message heard from `member` (nullopt: none yet).
  virtual std::optional<std::uint64_t> heardStep(PeerId member) = 0;
  // The algorithm's gathers and requests that reached their deadline incomplete, so far.
  virtual std::uint64_t expiredWaits() = 0;
  // The run's step count when the plan has none (an initial member): from the shard count.
  virtual std::uint64_t totalSteps(std::size_t shards) = 0;
  // The checkpoint this life resumes from (null: none), and how a resume is reported.
  virtual const train::Checkpoint* resumeFrom() = 0;
  virtual void resumed(std::uint64_t /*step*/) {}
  // After step `step` was counted: the sample of evaluation point `point`.
  virtual void atEvalPoint(std::uint64_t step, std::uint64_t point) = 0;
  // The checkpoint store: whether one is due after `step`, and keeping one.
  virtual bool checkpointDue(std::uint64_t step) = 0;
  virtual void keepCheckpoint(train::Checkpoint checkpoint) = 0;
  // The barriers: this life's marks to the members (and later to members that enter the view),
  // and waiting for every other live member's (false: timed out).
  virtual void announce(Barrier barrier) = 0;
  virtual bool awaitOthers(Barrier barrier) = 0;
};

// The step counters others read (the runtime's status, the simulator's world).
struct StepCounters {
  std::atomic<std::uint64_t>& step;
  std::atomic<std::uint64_t>& totalSteps;
  std::atomic<std::uint64_t>& runSteps;  // totalSteps as the plan set it, never moved after
};

class PeerLife {
 public:
  PeerLife(PeerId self, const runtime::TrainingConfig& config, Algorithm& algorithm,
           kernels::Compute& compute, LifeEnvironment& environment, StepCounters counters);

  Phase phase() const { return phase_; }
  const Roster& roster() const { return roster_; }
  bool hasLearner() const { return learner_ != nullptr; }
  train::Learner& learner() { return *learner_; }
  const StartPlan& plan() const { return plan_; }
  std::uint64_t startStep() const { return startStep_; }

  // waiting -> training (true), or notStarted (false: plan().cannotJoin or clusterDone). The
  // members, the shard, the step count, the model (a checkpoint's, a live peer's for a late
  // joiner, or the initial), then the algorithm's setup.
  bool start();
  // PeerContext::placeMembers: the graph from now on, with the members in `order`.
  void placeMembers(std::span<const PeerId> order);
  // One step at a step boundary: a changed view adopted, the learning rate of the schedule, the
  // algorithm's step, the step counted. Returns the loss; nullopt when no step is left after the
  // view (a realign took the model of a member that had trained them all).
  std::optional<double> step();
  // Then, once the driver has taken the step's figures: its evaluation point and checkpoint.
  void afterStep();
  // training -> left: hands over what must not leave with this peer and tells the others.
  void leave();
  // training -> finishing: tells the others, waits for them (or the finish timeout), adopts the
  // view as it is then and runs the algorithm's finish().
  void finish();
  // finishing -> released: tells the others it needs nothing more from them and waits until
  // they say the same (the final models may still be pulled from it until then).
  void release();

 private:
  // Adopts the view when its epoch changed, or when `force`: members, shard, graph, setup();
  // then realigns with members back after a partition.
  void adoptView(bool force);
  void takeShard();
  // The topology's graph for the members and step, placed as last asked while the members are
  // the same (a view change returns to the sorted ids).
  void buildGraph();
  // Members of an earlier roster of this life, gone, and now back in `members` (a partition
  // healed, or a restart): the one training furthest ahead of this peer, if any, is the one whose
  // model and step this side takes (Algorithm::realign). A restart that joined late is never
  // ahead (it took the cluster's step), so only the side behind moves, and both sides agree.
  void realignWithReturned(const std::vector<PeerId>& before);
  // Lockstep algorithms, at a step boundary: when one of this peer's waits expired since the last
  // look and a member was heard at least two rounds ahead (one is the ordinary skew of a
  // lockstep round), this peer fell behind (rounds that timed out apart, a partition too short
  // for the failure detector): it takes the model and step of the member furthest ahead.
  void realignIfBehind();
  // The schedule's rate for the step about to run (Algorithm::runProgress when it says).
  float learningRate() const;

  const PeerId self_;
  const runtime::TrainingConfig& config_;
  Algorithm& algorithm_;
  kernels::Compute& compute_;
  LifeEnvironment& env_;
  StepCounters counters_;
  train::Learner* learner_ = nullptr;
  Roster roster_;
  StartPlan plan_;
  std::set<PeerId> known_;          // every member of a roster of this life
  std::uint64_t expiredWaits_ = 0;  // as of the last realignIfBehind()
  Phase phase_ = Phase::waiting;
  std::uint64_t startStep_ = 0;
};

}  // namespace gossamer::engine::life
