// The peer's life (engine/life): the start rule case by case, and the life's sequence of calls
// into its environment and its algorithm, with a recording environment and algorithm (no
// network, no threads). The runtime and the simulator drive this same object; their own tests
// (runtime_test, late_arrival_test, the world tests and the sweep) cover it with real I/O.
#include <cmath>
#include <functional>
#include <map>
#include <numbers>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include "engine/base/enforce.h"
#include "engine/data/synthetic.h"
#include "engine/life/peer_life.h"
#include "engine/models/softmax_regression.h"
#include "engine/runtime/checkpoints.h"
#include "kernels/cpu/cpu_compute.h"

namespace gossamer::engine::life {
namespace {

// ---- the start rule ----------------------------------------------------------------------------

std::optional<StartPlan> plan(std::vector<MemberStatus> statuses, std::size_t members,
                              std::size_t minPeers, bool resumed = false, bool joined = true) {
  return planStart({.statuses = statuses,
                    .members = members,
                    .minPeers = minPeers,
                    .resumed = resumed,
                    .joined = joined});
}

MemberStatus training(std::uint64_t step, bool expected = false, std::size_t members = 3) {
  return {
      .training = true, .expected = expected, .step = step, .totalSteps = 100, .members = members};
}

MemberStatus done(bool expected = false) {
  return {.done = true, .expected = expected, .step = 100, .totalSteps = 100, .members = 3};
}

TEST_CASE("life: the start rule: nobody training, the cluster starts once minPeers are members") {
  CHECK_FALSE(plan({}, 3, 3, false, /*joined=*/false));  // not admitted yet
  CHECK_FALSE(plan({{}, {}}, 2, 3));                     // 2 of 3
  const std::optional<StartPlan> p = plan({{}, {}}, 3, 3);
  REQUIRE(p);
  CHECK_FALSE(p->late);
  CHECK(p->totalSteps == 0);  // its own count
  CHECK(plan({}, 1, 1));      // alone, as a single peer
}

TEST_CASE("life: the start rule: a cluster in training is joined late, at its latest step") {
  const std::optional<StartPlan> p = plan({training(40), training(42), {}}, 4, 2);
  REQUIRE(p);
  CHECK(p->late);
  CHECK(p->step == 42);
  CHECK(p->totalSteps == 100);
  CHECK_FALSE(p->clusterDone);
}

TEST_CASE("life: the start rule: members that counted on this life start it from step 0") {
  // They see 3 members: it waits until it sees as many, then trains their step count from 0.
  CHECK_FALSE(plan({training(0, true, 3)}, 2, 3));
  const std::optional<StartPlan> p = plan({training(5, true, 3), training(5, true, 3)}, 3, 3);
  REQUIRE(p);
  CHECK_FALSE(p->late);
  CHECK(p->step == 0);
  CHECK(p->totalSteps == 100);
  // Resumed from its checkpoint, the same life catches up like a newcomer.
  const std::optional<StartPlan> resumed = plan({training(5, true, 3)}, 3, 3, true);
  REQUIRE(resumed);
  CHECK(resumed->late);
  CHECK(resumed->step == 5);
}

TEST_CASE("life: the start rule: the plan carries the run's planned steps beside a moved end") {
  // Members whose time-boxed rounds raised their end to the budget (3 x 100) say so, and say the
  // count the run planned; a newcomer's plan carries both.
  MemberStatus raised = training(5, true, 3);
  raised.totalSteps = 300;
  raised.runSteps = 100;
  const std::optional<StartPlan> expected = plan({raised, raised}, 3, 3);
  REQUIRE(expected);
  CHECK(expected->totalSteps == 300);
  CHECK(expected->runSteps == 100);
  raised.expected = false;
  const std::optional<StartPlan> late = plan({raised}, 3, 1);
  REQUIRE(late);
  CHECK(late->late);
  CHECK(late->runSteps == 100);
  // An older peer sends no planned count (0): its totalSteps is the plan.
  const std::optional<StartPlan> older = plan({training(5)}, 3, 1);
  REQUIRE(older);
  CHECK(older->runSteps == 100);
}

TEST_CASE("life: the start rule: a member done that did not count on this life ends it") {
  const std::optional<StartPlan> p = plan({training(99), done()}, 3, 1);
  REQUIRE(p);
  CHECK(p->clusterDone);
  CHECK(p->step == 100);
  // One that counted on it from the start waits for its steps: not done for it.
  const std::optional<StartPlan> expected = plan({done(true), training(7, true, 2)}, 2, 2);
  REQUIRE(expected);
  CHECK_FALSE(expected->clusterDone);
  CHECK(expected->totalSteps == 100);
}

// ---- the life ----------------------------------------------------------------------------------

// An algorithm that records what the life asks of it.
class Recorder final : public Algorithm {
 public:
  explicit Recorder(std::vector<std::string>& log) : log_(log) {}
  std::string name() const override { return "recorder"; }
  bool lockstep() const override { return true; }
  void setup(PeerContext&) override { log_.push_back("setup"); }
  double step(PeerContext&) override {
    log_.push_back("step");
    return 0.5;
  }
  void finish(PeerContext&) override { log_.push_back("finish"); }
  void join(PeerContext&) override { log_.push_back("join"); }
  void leave(PeerContext&) override { log_.push_back("leave"); }
  void resumedLate(PeerContext&) override { log_.push_back("resumedLate"); }
  void realign(PeerContext&, PeerId ahead) override {
    log_.push_back("realign " + std::to_string(ahead));
    if (onRealign) onRealign();
  }
  std::optional<double> runProgress() const override { return progress; }
  std::function<void()> onRealign;  // what taking the model of `ahead` does to the step
  std::optional<double> progress;   // the run's share done, as a budget's algorithm reports it

 private:
  std::vector<std::string>& log_;
};

// A PeerContext the recorder never touches (the life only hands it over).
class UnusedContext final : public PeerContext {
 public:
  [[noreturn]] static void unused() { GOSSAMER_THROW("not used by this test"); }
  PeerId self() const override { unused(); }
  const std::vector<PeerId>& members() const override { unused(); }
  std::uint64_t epoch() const override { unused(); }
  const topology::Graph& graph() const override { unused(); }
  void placeMembers(std::span<const PeerId>) override { unused(); }
  std::uint64_t step() const override { unused(); }
  std::uint64_t totalSteps() const override { unused(); }
  std::uint64_t runSteps() const override { unused(); }
  kernels::Compute& compute() override { unused(); }
  std::span<float> params() override { unused(); }
  std::span<float> grads() override { unused(); }
  train::Optimizer& optimizer() override { unused(); }
  double computeGradients() override { unused(); }
  void applyOptimizer() override { unused(); }
  void send(std::span<const PeerId>, const Message&) override { unused(); }
  void notify(PeerId, const Message&) override { unused(); }
  std::optional<Incoming> request(PeerId, const Message&, Clock::duration) override { unused(); }
  GatherResult gather(std::span<const PeerId>, std::uint64_t, Clock::duration) override {
    unused();
  }
  Inbox& inbox() override { unused(); }
  bool doneSending(PeerId) const override { unused(); }
  Tags& tags() override { unused(); }
  DeviceView upload(std::span<const float>) override { unused(); }
  Clock::duration commTimeout() const override { unused(); }
  const PayloadCompression& compression() const override { unused(); }
  std::optional<Incoming> pullModel(PeerId, Clock::duration) override { unused(); }
  void adoptStep(std::uint64_t) override { unused(); }
  void setTotalSteps(std::uint64_t) override { unused(); }
  std::mt19937_64& rng() override { unused(); }
  Metrics& metrics() override { unused(); }
};

// An environment whose view, plan and checkpoint the test sets, recording every call.
class FakeEnvironment final : public LifeEnvironment {
 public:
  explicit FakeEnvironment(std::vector<std::string>& log)
      : log_(log),
        compute_(kernels::cpu::makeCompute({.blasThreads = 1})),
        model_(*compute_, 4, 2, 8),
        data_(data::makeSynthetic({.count = 64, .features = 4, .classes = 2})) {}

  StartPlan awaitStart() override { return plan; }
  void startedWith(const std::vector<PeerId>& m) override {
    log_.push_back("startedWith " + std::to_string(m.size()));
  }
  std::vector<PeerId> members() override { return view; }
  std::uint64_t epoch() override { return viewEpoch; }
  PeerContext& context() override { return context_; }
  train::Learner& takeShard(std::size_t count, std::size_t rank) override {
    log_.push_back("shard " + std::to_string(rank) + "/" + std::to_string(count));
    if (!learner_) {
      std::vector<std::size_t> all(data_.count());
      for (std::size_t i = 0; i < all.size(); ++i) all[i] = i;
      learner_ = std::make_unique<train::Learner>(*compute_, model_, train::OptimizerOptions{},
                                                  data_, all, 8, 1);
    }
    return *learner_;
  }
  std::shared_ptr<const topology::Graph> graph(const std::vector<PeerId>& m,
                                               std::uint64_t) override {
    const double w = 1.0 / static_cast<double>(m.size());  // everyone mixes everyone
    return std::make_shared<const topology::Graph>(m, std::vector<double>(m.size() * m.size(), w));
  }
  bool timeVaryingGraph() const override { return false; }
  std::optional<std::uint64_t> heardStep(PeerId member) override {
    const auto it = heard.find(member);
    if (it == heard.end()) return std::nullopt;
    return it->second;
  }
  std::uint64_t expiredWaits() override { return expired; }
  std::optional<std::uint64_t> trainingStep(PeerId member) override {
    const auto it = steps.find(member);
    if (it == steps.end()) return std::nullopt;
    return it->second;
  }
  std::uint64_t totalSteps(std::size_t shards) override {
    log_.push_back("totalSteps " + std::to_string(shards));
    return 6;
  }
  const train::Checkpoint* resumeFrom() override { return checkpoint ? &*checkpoint : nullptr; }
  void resumed(std::uint64_t step) override { log_.push_back("resumed " + std::to_string(step)); }
  void atEvalPoint(std::uint64_t step, std::uint64_t point) override {
    log_.push_back("point " + std::to_string(point) + " at " + std::to_string(step));
  }
  bool checkpointDue(std::uint64_t step) override { return step % 4 == 0; }
  void keepCheckpoint(train::Checkpoint c) override {
    log_.push_back("checkpoint " + std::to_string(c.metaInt("runtime.step")));
    checkpoint = std::move(c);
  }
  void announce(Barrier b) override {
    log_.push_back(b == Barrier::finished ? "announce finished" : "announce released");
  }
  bool awaitOthers(Barrier b) override {
    log_.push_back(b == Barrier::finished ? "await finished" : "await released");
    if (b == Barrier::finished && viewAfterFinish) {
      view = *viewAfterFinish;
      ++viewEpoch;
    }
    return true;
  }

  StartPlan plan;
  std::vector<PeerId> view = {1, 2, 3};
  std::uint64_t viewEpoch = 1;
  std::optional<std::vector<PeerId>> viewAfterFinish;
  std::optional<train::Checkpoint> checkpoint;
  std::map<PeerId, std::uint64_t> steps;  // the members' steps in training (trainingStep)
  std::map<PeerId, std::uint64_t> heard;  // the latest step heard from each (heardStep)
  std::uint64_t expired = 0;              // expiredWaits

 private:
  std::vector<std::string>& log_;
  std::unique_ptr<kernels::Compute> compute_;
  models::SoftmaxRegression model_;
  data::Dataset data_;
  std::unique_ptr<train::Learner> learner_;
  UnusedContext context_;
};

struct LifeUnderTest {
  LifeUnderTest() : env(log), algorithm(log), compute(kernels::cpu::makeCompute({})) {
    config.evalPoints = runtime::EvalSchedule{.everySteps = 3};
  }
  PeerLife make(PeerId self) {
    return PeerLife(self, config, algorithm, *compute, env, StepCounters{step, total, planned});
  }
  std::vector<std::string> log;
  FakeEnvironment env;
  Recorder algorithm;
  std::unique_ptr<kernels::Compute> compute;
  runtime::TrainingConfig config;
  std::atomic<std::uint64_t> step{0}, total{0}, planned{0};
};

TEST_CASE("life: an initial member starts, steps, finishes and releases in the runtime's order") {
  LifeUnderTest t;
  PeerLife life = t.make(2);
  REQUIRE(life.start());
  CHECK(life.phase() == Phase::training);
  CHECK(life.roster().members == std::vector<PeerId>{1, 2, 3});
  CHECK(life.roster().shardRank == 1);
  while (t.step < t.total) {
    life.step();
    life.afterStep();
  }
  // A member leaves during the finish barrier: finish() runs with the view as it is then.
  t.env.viewAfterFinish = std::vector<PeerId>{1, 2};
  life.finish();
  CHECK(life.roster().finishing);
  CHECK(life.roster().members == std::vector<PeerId>{1, 2});
  life.release();
  CHECK(life.phase() == Phase::released);
  const std::vector<std::string> expected = {"startedWith 3",
                                             "shard 1/3",
                                             "totalSteps 3",
                                             "setup",  // start
                                             "step",
                                             "step",
                                             "step",
                                             "point 1 at 3",  // steps 1-3
                                             "step",
                                             "checkpoint 4",
                                             "step",
                                             "step",
                                             "point 2 at 6",  // steps 4-6
                                             "announce finished",
                                             "await finished",
                                             "shard 1/2",
                                             "setup",
                                             "finish",  // finish
                                             "announce released",
                                             "await released"};
  CHECK(t.log == expected);
  CHECK(t.step == 6);
}

TEST_CASE(
    "life: the learning-rate schedule follows the run's progress where the algorithm has one") {
  LifeUnderTest t;
  t.config.optimizer.lr = 0.1f;
  t.config.schedule = {.kind = train::LrSchedule::kCosine, .warmupSteps = 2};
  PeerLife life = t.make(2);
  REQUIRE(life.start());
  REQUIRE(t.total == 6);
  t.total = 24;  // an end raised to a budget (the cap of a time-boxed run), planned 6
  const auto rate = [&] { return life.learner().optimizer().options().lr; };
  t.algorithm.progress = 0.5;
  life.step();  // warm-up is the peer's own: step 0 of 2
  CHECK(rate() == doctest::Approx(0.05));
  life.step();
  life.step();
  // Step 2, the cluster half done: where an even run of 6 steps is at step 3, (3 - 2) / (6 - 2)
  // of its cosine.
  CHECK(rate() == doctest::Approx(0.1 * 0.5 * (1 + std::cos(std::numbers::pi * 0.25))));
  t.algorithm.progress.reset();
  life.step();  // by its own steps: 3 - 2 of 24 - 2
  CHECK(rate() == doctest::Approx(0.1 * 0.5 * (1 + std::cos(std::numbers::pi / 22))));
}

TEST_CASE("life: a late joiner joins at the cluster's step and adopts a changed view") {
  LifeUnderTest t;
  t.env.plan = StartPlan{.late = true, .totalSteps = 10, .step = 7};
  PeerLife life = t.make(3);
  REQUIRE(life.start());
  CHECK(t.total == 10);
  CHECK(t.planned == 10);  // an older member sent no planned count: its total is the plan
  t.env.view = {1, 3};     // member 2 failed
  ++t.env.viewEpoch;
  life.step();
  const std::vector<std::string> expected = {"startedWith 3", "shard 2/3", "join", "setup",
                                             "shard 1/2",     "setup",     "step"};
  CHECK(t.log == expected);
}

TEST_CASE("life: back after a partition, the side behind takes the model of the one ahead") {
  LifeUnderTest t;
  t.env.view = {1, 2, 3, 4};
  PeerLife life = t.make(2);
  REQUIRE(life.start());
  t.log.clear();
  // Cut off: peer 2 alone trains two steps.
  t.env.view = {2};
  ++t.env.viewEpoch;
  life.step();
  life.step();
  // Healed: 1 and 3 come back (4 does not yet), with a newcomer 5 far ahead, which was never a
  // member of this life's rosters: the member of an earlier roster furthest ahead is taken.
  t.env.view = {1, 2, 3, 5};
  ++t.env.viewEpoch;
  t.env.steps = {{1, 6}, {3, 9}, {5, 40}};
  life.step();
  // 4 comes back behind this peer: nothing to take.
  t.env.view = {1, 2, 3, 4, 5};
  ++t.env.viewEpoch;
  t.env.steps[4] = 1;
  life.step();
  const std::vector<std::string> expected = {
      "shard 0/1", "setup", "step",      "step",  // alone
      "shard 1/4", "setup", "realign 3", "step",  // 1 and 3 back, 3 ahead
      "shard 1/5", "setup", "step"};              // 4 back, behind
  CHECK(t.log == expected);
}

TEST_CASE(
    "life: a lockstep peer whose wait expired and that hears a member rounds ahead realigns") {
  LifeUnderTest t;
  PeerLife life = t.make(2);
  REQUIRE(life.start());
  life.step();  // step 1 done
  t.log.clear();
  // Member 3 a round ahead is the ordinary skew; without an expired wait nothing is asked.
  t.env.heard = {{1, 1}, {3, 2}};
  life.step();  // step 2 done
  t.env.heard = {{1, 9}, {3, 2}};
  life.step();  // no wait expired since the last look: nothing
  // A wait expired, and member 1 is heard rounds ahead: this peer fell behind.
  t.env.expired = 1;
  life.step();
  // The same expiry is not looked at twice.
  life.step();
  const std::vector<std::string> expected = {"step", "step", "realign 1", "step", "step"};
  CHECK(t.log == expected);
}

// A realign may take the model of a member that trained every step: no step is left to take.
TEST_CASE("life: a realign to a member at the last step takes no step beyond the total") {
  LifeUnderTest t;
  PeerLife life = t.make(2);
  REQUIRE(life.start());
  REQUIRE(life.step().has_value());
  t.log.clear();
  t.algorithm.onRealign = [&] { t.step = t.total.load(); };
  t.env.heard = {{1, t.total.load()}};
  t.env.expired = 1;
  CHECK_FALSE(life.step().has_value());
  CHECK(t.log == std::vector<std::string>{"realign 1"});
  CHECK(t.step == t.total);
}

TEST_CASE("life: a restart from its checkpoint goes on from the cluster's later step") {
  LifeUnderTest t;
  {
    PeerLife first = t.make(1);
    REQUIRE(first.start());
    for (int i = 0; i < 4; ++i) {
      first.step();
      first.afterStep();
    }
  }
  REQUIRE(t.env.checkpoint);
  t.log.clear();
  t.step = 0;
  t.env.plan = StartPlan{.late = true, .totalSteps = 6, .step = 5};
  PeerLife second = t.make(1);
  REQUIRE(second.start());
  CHECK(t.step == 5);
  CHECK(second.startStep() == 5);
  const std::vector<std::string> expected = {"startedWith 3", "shard 0/3", "resumedLate",
                                             "resumed 5", "setup"};
  CHECK(t.log == expected);
}

TEST_CASE("life: a life that finds the cluster done does not start, a leaver hands over") {
  LifeUnderTest t;
  t.env.plan = StartPlan{.totalSteps = 6, .step = 6, .clusterDone = true};
  PeerLife late = t.make(4);
  CHECK_FALSE(late.start());
  CHECK(late.phase() == Phase::notStarted);
  CHECK(t.log.empty());
  CHECK_THROWS_AS(late.step(), Error);

  LifeUnderTest u;
  PeerLife leaver = u.make(1);
  REQUIRE(leaver.start());
  leaver.step();
  leaver.leave();
  CHECK(leaver.phase() == Phase::left);
  CHECK(u.log.back() == "announce finished");
  CHECK(u.log[u.log.size() - 2] == "leave");
  CHECK_THROWS_AS(leaver.finish(), Error);
}

}  // namespace
}  // namespace gossamer::engine::life
