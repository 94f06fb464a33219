// The public C++ API for decentralized optimizers (algorithms/README.md has the built-in ones). An
// Algorithm sees only a PeerContext: who it is, the membership and the topology built on it, the
// Compute with the flat params and grads, messages to and from other peers, and a few services
// (tags, rng, metrics). It never sees Asio, Cap'n Proto or a transport. See algorithms/ for the
// built-ins and examples/custom_algorithm/ for a complete user-written one.
//
// Threads. Everything but serve() runs on the peer's COMPUTE thread, which owns params, grads and
// the Compute: setup(), step() and its hooks, finish(). serve() runs on the peer's IO thread,
// concurrently with step(): it answers requests addressed to this peer (an EASGD center, say)
// without stopping training, so state it shares with step() needs a mutex, and it must neither
// block nor touch params or the compute thread's Compute (it gets a host Compute of its own).
//
// Messages. A Message carries an algorithm-defined kind, the sender's step, a tag, a few scalars
// and float payloads. send() stages the payloads (one copy into a host buffer, pinned for CUDA)
// before it returns, so params may change right after; the transport then sends from that buffer
// without further copies. Received payloads land in preallocated host buffers and are handed over
// in an Incoming, which keeps them until it is destroyed. Nothing is ever merged into params
// behind the algorithm's back: it merges what it received, when it chooses, on the compute thread.
//
// Failures. A peer that is slow, gone or partitioned is never an exception: every wait has a
// deadline and returns what arrived (gather's `missing`, request's nullopt), and a membership
// change calls setup() again at the next step boundary. Misuse (a payload of the wrong size, an
// unknown peer) throws gossamer::Error.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "engine/invariants.h"
#include "engine/options.h"
#include "kernels/compute.h"
#include "topology/topology.h"

namespace gossamer::engine {

namespace train {
class Optimizer;
}

using PeerId = std::uint64_t;
// The clock of the runtime's time points and durations. An algorithm reads the time from its
// context (PeerContext::now, wallNow), never from a clock of its own: a simulated world
// (engine/sim/) gives it virtual time there.
using Clock = std::chrono::steady_clock;

// Message kinds below this are the algorithm's; the runtime uses the ones above.
inline constexpr std::uint32_t kMaxAlgorithmKind = 1u << 24;

// A payload of a Message that the run's codec may compress on the wire (--compress; see
// Message::compressible). `residual` is the payload's error feedback, owned by the algorithm: a
// buffer of the payload's length in the Compute's memory, one per stream of payloads (what one
// encoding leaves out is added to the next payload of the same stream). Empty: no feedback for
// this payload. The runtime uses it only when the run has error feedback on.
// `sent`, when non-empty (the payload's length, in the Compute's memory), receives the float32
// values every receiver will decode, as the message leaves: an algorithm that keeps a copy of
// what its receivers hold (CHOCO-SGD's public estimates, algorithms/dpsgd.h) adds it to that copy
// with the same kernel the receivers use, and both sides keep the same bits. Written only when
// the payload is encoded (a codec other than none).
struct Compressible {
  std::size_t payload = 0;  // index into Message::payloads
  std::span<float> residual;
  std::span<float> sent;
};

// What an algorithm sends. Payloads are spans of the Compute's memory (params, grads, or a buffer
// of the algorithm's own) or of host memory; they are staged when send/request/notify returns.
struct Message {
  std::uint32_t kind = 0;               // < kMaxAlgorithmKind
  std::uint64_t step = 0;               // by convention, the sender's step (or round)
  std::uint64_t tag = 0;                // matched by gather(); requests get a fresh one
  std::vector<double> scalars;          // real numbers (weights, losses)
  std::vector<std::uint64_t> integers;  // exact integers (peer ids, transfer ids, fingerprints)
  std::vector<std::span<const float>> payloads;
  // Set when the payloads stay unchanged for as long as `owner` lives (the sender will not write
  // them again while it holds them): a peer whose Compute uses host memory then sends straight
  // from them, without a staging copy, and keeps `owner` until the transport is done with them.
  // Null: the payloads are staged (copied) before send returns, and may change right after.
  std::shared_ptr<const void> owner;
  // The payloads that may travel compressed: with a codec other than none (PeerContext::
  // compression()), the runtime encodes them as they leave (on the compute thread, before send
  // returns; a residual is updated then) and the receiver decodes them into float32 before anyone
  // sees them. Others travel as float32. A serve() reply's marks are encoded on the io thread
  // with ServiceContext::hostCompute(): its residuals and sent spans are host memory.
  std::vector<Compressible> compressible;
};

// The run's compression of payloads on the wire (gossamer-peer --compress, --error-feedback).
struct PayloadCompression {
  kernels::Codec codec;       // kind none: every payload travels as float32
  bool errorFeedback = true;  // use the residuals that messages name
  bool enabled() const { return codec.kind != kernels::CodecKind::kNone; }
};

// A received message. Its payloads are host memory owned by the Incoming (receive buffers return
// to their pool when it is destroyed); on a CUDA peer, PeerContext::upload() makes device views.
class Incoming {
 public:
  PeerId from = 0;
  std::uint32_t kind = 0;
  std::uint64_t step = 0;
  std::uint64_t tag = 0;
  std::vector<double> scalars;
  std::vector<std::uint64_t> integers;

  std::size_t payloadCount() const { return payloads_.size(); }
  std::span<const float> payload(std::size_t index) const;
  // The scalar (integer) at `index`; throws gossamer::Error naming the message when it is
  // missing. Check what a remote sent with acceptMessage() first: a missing value is then a bug.
  double scalar(std::size_t index) const;
  std::uint64_t integer(std::size_t index) const;

  // For the runtime: a payload and what keeps its memory alive.
  void addPayload(std::span<const float> data, std::shared_ptr<const void> owner);

 private:
  struct Held {
    std::span<const float> data;
    std::shared_ptr<const void> owner;
  };
  std::vector<Held> payloads_;
};

// Which members hold the model a peer catches up with (PeerContext::catchUp): `identical`, the
// one model of a synchronous algorithm that every member holds after a round, fetched from
// several at once; `one`, a model that is one peer's own (gossip), fetched from exactly one.
enum class ModelHolders { one, identical };

// A state of an algorithm that its members hold identically, for a joiner to fetch in verified
// chunks from several of them at once (Algorithm::sharedState, PeerContext::catchUpState): its
// floats, the integers that go with them, the member's step, and `version`, what members holding
// the same state agree on (e.g. the outer rounds done).
struct SharedState {
  std::uint64_t step = 0;
  std::uint64_t version = 0;
  std::vector<std::uint64_t> integers;
  std::vector<float> floats;
};

// A model a peer caught up with: its params, the step it was taken at, and the members that sent
// it (one, or each whose chunks were merged).
struct CaughtUpModel {
  CaughtUpModel() = default;
  CaughtUpModel(std::uint64_t step, std::vector<PeerId> from, std::size_t floats);

  std::uint64_t step = 0;
  std::vector<PeerId> from;
  std::vector<std::uint64_t> integers;  // an algorithm state's (Algorithm::sharedState)
  std::span<float> params() { return {data_.get(), size_}; }
  std::span<const float> params() const { return {data_.get(), size_}; }

 private:
  // Not zeroed: a fresh gigabyte's pages are touched as its chunks land, while the transfer waits
  // on the network, not all at once before it.
  struct Free {
    void operator()(float* p) const;
  };
  std::unique_ptr<float[], Free> data_;
  std::size_t size_ = 0;
};

// What gather() returns: one message per peer that answered in time (in the order of `from`),
// and the peers that did not (or that left the view while it waited).
struct GatherResult {
  std::vector<Incoming> messages;
  std::vector<PeerId> missing;
  bool complete() const { return missing.empty(); }
  // What a gather from `from` returns when got[i] holds what came from from[i] (empty: nothing):
  // the messages in the order of `from`, the others missing. Moves out of `got`.
  static GatherResult of(std::span<const PeerId> from, std::vector<std::optional<Incoming>>& got);
};

// Tags that match replies to requests and messages to rounds.
class Tags {
 public:
  virtual ~Tags() = default;
  // A tag no other request of this peer has used (for request/reply pairs).
  virtual std::uint64_t fresh() = 0;
  // The same value on every peer for the same (kind, step, round): the tag of one round of a
  // synchronous exchange. Never equal to a fresh() tag.
  static std::uint64_t forRound(std::uint32_t kind, std::uint64_t step, std::uint32_t round = 0);
};

// The received messages that nobody has claimed yet, in arrival order. Compute thread.
class Inbox {
 public:
  virtual ~Inbox() = default;
  // Removes and returns every queued message of `kind` (all kinds when nullopt), without waiting.
  virtual std::vector<Incoming> drain(std::optional<std::uint32_t> kind = std::nullopt) = 0;
  // Drops queued messages whose step is below `step` (late answers to rounds that are over).
  virtual std::size_t discardBefore(std::uint64_t step) = 0;
  virtual std::size_t size() const = 0;
  // Blocks until a message of `kind` (any kind when nullopt) is queued, `deadline` passes or the
  // peer shuts down. True when one is queued; it stays queued (drain() takes it).
  virtual bool wait(std::optional<std::uint32_t> kind, Clock::time_point deadline) = 0;
};

// Counters an algorithm may add to; they appear in the peer's metrics (JSON lines, --json).
class Metrics {
 public:
  virtual ~Metrics() = default;
  virtual void add(const std::string& name, double value) = 0;
  virtual void set(const std::string& name, double value) = 0;
};

// What a received message must carry to be used, and whether it does: at least `scalars` scalars
// and `integers` integers, and exactly payloads.size() payloads of those element counts, every
// value finite. A message from another peer is untrusted input: check it before reading it.
struct Expected {
  std::vector<std::size_t> payloads;
  std::size_t scalars = 0;
  std::size_t integers = 0;
};
// True when `message` is as `expected`. Otherwise logs a warning naming the sender, the kind, the
// algorithm (`who`) and what is wrong, adds 1 to the metric "<who>.refused", and returns false: the
// caller drops the message and goes on. Any thread (the payloads are host memory).
bool acceptMessage(const Incoming& message, const Expected& expected, Metrics& metrics,
                   const std::string& who);

// Received values bounded by this peer's own (--max-norm-ratio R; off when R is 0). Beyond the
// shape and finiteness acceptMessage checks, a faulty or hostile peer can send a model, a model
// difference, a delta or a gradient of the right size that drags everyone off. So, where an
// algorithm uses such a value, it compares it with this peer's own counterpart of the same
// quantity (its own model, its own gradient, its own contribution to the same sum): the received
// value x, standing for `share` contributions summed (a partial sum of the ring: the mean of
// them is x / share), is an outlier when
//   || x / share - own || > R || own ||          (float64)
// and for quantities without a counterpart of their own (a delta sent to a center), when
//   || x || > R || reference ||.
// An own value of norm 0 (a model initialised to zeros, before its first step) admits only
// values equal to it: one accepted outlier would make every later one near. An outlier is
// refused like a malformed message: a warning naming the sender, the algorithm
// and both norms, 1 added to "<who>.outliers", and the caller drops it. R around 1-2 leaves
// honest peers alone (models and gradients of the same run differ by far less than their norm
// except in the first steps from distinct initial models); see algorithms/README.md.
struct NormBound {
  double ratio = 0;  // R; 0: every value is accepted
  bool enabled() const { return ratio > 0; }
};
// ||x / share - own||: `x` and `own` in `compute`'s memory (a received payload through
// PeerContext::upload on the compute thread; host memory with the host Compute in serve()).
double distanceFromOwn(kernels::Compute& compute, std::span<const float> x,
                       std::span<const float> own, double share = 1);
// True when `message`'s value `x` is within the bound of `own` (above); otherwise refuses it.
bool acceptNearOwn(kernels::Compute& compute, const Incoming& message, std::span<const float> x,
                   std::span<const float> own, const NormBound& bound, Metrics& metrics,
                   const std::string& who, double share = 1);
// The same test when the caller measured the distance itself (a change from a common anchor
// stands for a model: its distance is the model's).
bool acceptDistance(const Incoming& message, double distance, double ownNorm,
                    const NormBound& bound, Metrics& metrics, const std::string& who);
// True when ||x|| <= R ||reference||; otherwise refuses it.
bool acceptNormWithin(kernels::Compute& compute, const Incoming& message, std::span<const float> x,
                      std::span<const float> reference, const NormBound& bound, Metrics& metrics,
                      const std::string& who);

// A device view of received host data: no copy on the CPU backend; on CUDA, a copy in a pooled
// device buffer that is reserved for as long as this object lives.
class DeviceView {
 public:
  DeviceView() = default;
  // `keep` holds what `data` lives in (null when the caller's memory outlives the view).
  DeviceView(std::span<const float> data, std::shared_ptr<const void> keep)
      : data_(data), keep_(std::move(keep)) {}
  std::span<const float> span() const { return data_; }
  operator std::span<const float>() const { return data_; }

 private:
  std::span<const float> data_;
  std::shared_ptr<const void> keep_;
};

// How fast a peer trains, as it measured itself over its last window of steps (about a second)
// and told the others (engine/runtime/speeds.h).
struct PeerSpeed {
  double stepSeconds = 0;       // compute per step: gradients and optimizer, emulated included
  double samplesPerSecond = 0;  // samples trained on per second of its loop, waits included
  std::uint64_t step = 0;       // its step at the end of that window
};

// The path from this peer to a member, as this peer measured it: the round trip of its membership
// probes, and the bandwidth one of its links there gets from the path's model (net/README.md:
// the emulated profile's link, or the tcp link's connections x window / RTT within the path's
// capacity; +infinity where nothing limits it).
struct PathEstimate {
  double roundTripSeconds = 0;
  double bytesPerSecond = 0;
};

// Everything an algorithm may use on the compute thread.
class PeerContext {
 public:
  virtual ~PeerContext() = default;

  // ---- who and where ----
  virtual PeerId self() const = 0;
  // The members in training, sorted, self included (alive and suspect), and the epoch of the
  // membership view they come from. Fixed between step boundaries.
  virtual const std::vector<PeerId>& members() const = 0;
  virtual std::uint64_t epoch() const = 0;
  // The topology's graph over members() for the current step (time-varying topologies change
  // every step, others only with the members).
  virtual const topology::Graph& graph() const = 0;
  // From now on, places the members around the topology's graph in `order` (a permutation of
  // members(); empty: the sorted ids): the graph keeps its shape, and the peer order[k] takes the
  // place of the k-th sorted id (topology/placement.h). Every member must place alike at the same
  // step (from measurements they agreed on: network_ring.h); a view change returns to the ids.
  virtual void placeMembers(std::span<const PeerId> order) = 0;
  // Local steps completed (0 in setup before the first step).
  virtual std::uint64_t step() const = 0;
  // Local steps this run will make in all.
  virtual std::uint64_t totalSteps() const = 0;
  // The steps each peer makes in this run as planned, the same on every member: totalSteps()
  // before any algorithm moved the end (setTotalSteps). A budget the cluster shares is set from
  // this, so that a peer that starts after another raised its end reads the same base.
  virtual std::uint64_t runSteps() const = 0;
  // How fast `peer` (a member, or this peer itself) trains, as last measured and shared; none
  // before its first report (a second or so into training) or where the runtime shares none.
  virtual std::optional<PeerSpeed> speedOf(PeerId /*peer*/) const { return std::nullopt; }
  // The paths to the members this peer has measured so far (none before its first probes, or
  // where the runtime measures none). Not free: a call may wait for the io thread.
  virtual std::map<PeerId, PathEstimate> measuredPaths() const { return {}; }

  // ---- the model ----
  virtual kernels::Compute& compute() = 0;
  virtual std::span<float> params() = 0;
  virtual std::span<float> grads() = 0;
  virtual train::Optimizer& optimizer() = 0;
  // Forward and backward pass on this peer's next mini-batch: writes grads(), returns the loss.
  virtual double computeGradients() = 0;
  // The local optimizer's update of params() with grads() (advances step() and the schedule).
  virtual void applyOptimizer() = 0;

  // ---- messages ----
  // Sends to each peer in `to` (staged once). Peers outside the view are skipped with a warning.
  // Blocks only while the send buffers are exhausted (back-pressure), at most commTimeout().
  virtual void send(std::span<const PeerId> to, const Message& message) = 0;
  void send(PeerId to, const Message& message) { send(std::span<const PeerId>(&to, 1), message); }
  // Delivers `message` to `to`'s serve() (io thread), its tag as given (see ServiceContext::reply).
  virtual void notify(PeerId to, const Message& message) = 0;
  // Sends `message` with a fresh tag to `to`'s serve() and waits for its reply, at most
  // `timeout`; nullopt when none came (peer gone, slow, or it did not reply).
  virtual std::optional<Incoming> request(PeerId to, const Message& message,
                                          Clock::duration timeout) = 0;
  // Waits until a message with `tag` from every peer in `from` is in the inbox (or `timeout`
  // passes, or one of them leaves the view) and takes them out.
  virtual GatherResult gather(std::span<const PeerId> from, std::uint64_t tag,
                              Clock::duration timeout) = 0;
  virtual Inbox& inbox() = 0;
  // True once `peer` will send nothing more to this peer in the current phase and everything it
  // sent before is in the inbox: it left the view, or it finished training (in finish(): it
  // released the others). gather() ends early for such a peer; an algorithm that waits in the
  // inbox itself (Inbox::wait) asks this to stop waiting for a peer that is done. False for
  // this peer itself.
  virtual bool doneSending(PeerId /*peer*/) const { return false; }
  // An algorithm that waits in the inbox itself tells the peer when such a wait reached its
  // deadline without `missing`, as gather() and request() do on their own: the peer logs it and
  // counts it, and its life looks for a member far ahead after an expiry (a lockstep algorithm
  // cut off by a short partition realigns; engine/life/peer_life.h).
  virtual void waitExpired(std::span<const PeerId> /*missing*/) {}
  virtual Tags& tags() = 0;
  // A device view of a received payload (see DeviceView).
  virtual DeviceView upload(std::span<const float> host) = 0;
  // The default deadline of synchronous exchanges (--comm-timeout).
  virtual Clock::duration commTimeout() const = 0;
  // How payloads marked compressible travel in this run; an algorithm keeps error-feedback
  // residuals only when compression is enabled and errorFeedback is set.
  virtual const PayloadCompression& compression() const = 0;
  // The bound on received values of this run (--max-norm-ratio; see NormBound).
  virtual NormBound normBound() const { return {}; }

  // ---- elasticity ----
  // A copy of `from`'s params as of its next step boundary (it copies them and goes on; nothing
  // pauses), with the step it had reached; nullopt when none came within `timeout`. The message
  // holds the params as payload(0) and the step in `step`.
  virtual std::optional<Incoming> pullModel(PeerId from, Clock::duration timeout) = 0;
  // The params and step of the members, for a peer catching up with them (Algorithm::join,
  // realign), fetched in verified chunks (engine/runtime/catch_up.h): with
  // ModelHolders::identical from several of `candidates` at once, each chunk checked by two of
  // them; with ModelHolders::one from the first candidate that answers, checked against its own
  // digests. nullopt when no complete, verified model came (`timeout` bounds the wait for the
  // holders' copies and any source's silence). The default pulls the whole model from the first
  // candidate that answers pullModel() (the simulator's).
  virtual std::optional<CaughtUpModel> catchUp(std::span<const PeerId> candidates,
                                               ModelHolders holders, Clock::duration timeout);
  // The same for the algorithm's own state of `floats` floats (Algorithm::sharedState), from
  // members holding it identically (grouped by its version); params() holds the state's floats,
  // `integers` its integers. The default (the simulator's) has none: the algorithm falls back
  // to its own request.
  virtual std::optional<CaughtUpModel> catchUpState(std::span<const PeerId> /*candidates*/,
                                                    std::size_t /*floats*/,
                                                    Clock::duration /*timeout*/) {
    return std::nullopt;
  }
  // Moves this peer's step count to `step` (forward or back): a peer joining a cluster that is
  // already training, or one that fell behind, lines its rounds up with the others'. The run
  // still ends at totalSteps().
  virtual void adoptStep(std::uint64_t step) = 0;
  // Moves the end of this peer's run to `steps` (at least step(); the loop ends once step()
  // reaches it): an algorithm whose run ends at a budget the cluster shares rather than at a step
  // count (time-boxed rounds: algorithms/time_box.h) raises the cap at setup and ends the run at
  // the round that spends the budget.
  virtual void setTotalSteps(std::uint64_t steps) = 0;

  // ---- time ----
  // This peer's clock: the steady clock, or a simulated world's virtual time (engine/sim/). Every
  // deadline and timestamp of an algorithm starts here, so that it runs unchanged in both.
  virtual Clock::time_point now() const { return std::chrono::steady_clock::now(); }
  // The wall clock, for what must order across the processes and restarts of a peer (gosgd's
  // lives); in a simulated world, the virtual time as a time since the epoch (a later virtual
  // instant is a later wall instant, and nothing of the host reaches the run).
  virtual std::chrono::system_clock::time_point wallNow() const {
    return std::chrono::system_clock::now();
  }
  // Waits `duration` of this peer's time doing nothing (a retry's back-off): the thread sleeps,
  // or in a simulated world the peer waits in virtual time while the others go on. Never
  // std::this_thread::sleep_for in an algorithm: that would stop a simulated world's clock.
  virtual void pause(Clock::duration duration) { std::this_thread::sleep_for(duration); }

  // ---- services ----
  virtual std::mt19937_64& rng() = 0;  // seeded from the run seed and this peer's id
  virtual Metrics& metrics() = 0;

  // ---- evaluation ----
  // After a complete round of an algorithm whose peers hold one merged model only at round
  // boundaries (time-boxed rounds: diloco's theta, local-sgd's x~): `model` (the Compute's
  // memory) is what every member of round `round` holds after it, the rounds numbered alike on
  // every member and increasing. A harness that evaluates such a run (the simulator) evaluates
  // the latest merged model, as of the time its first member had it, instead of the mean of the
  // peers' models in between. The default ignores it.
  virtual void roundMerged(std::uint64_t /*round*/, std::span<const float> /*model*/) {}
};

// What an algorithm keeps across a checkpoint (and may hand over): named tensors (host copies)
// and named numbers.
struct AlgorithmState {
  std::map<std::string, std::vector<float>> tensors;
  std::map<std::string, double> values;
  // The writer's Algorithm::stateVersion (1 in a checkpoint written before versions were kept).
  std::uint32_t version = 1;
};

// What serve() may use, on the io thread.
class ServiceContext {
 public:
  virtual ~ServiceContext() = default;
  virtual PeerId self() const = 0;
  // A CPU Compute for arithmetic on host buffers in serve() (never the compute thread's).
  virtual kernels::Compute& hostCompute() = 0;
  // Answers `request` (from request(), or from notify(): then to the inbox, with its tag);
  // payloads are host memory, copied before reply returns. At most one reply per request.
  virtual void reply(const Incoming& request, const Message& message) = 0;
  virtual Metrics& metrics() = 0;
  // The run's bound on received values (PeerContext::normBound).
  virtual NormBound normBound() const { return {}; }
};

// A decentralized optimizer. One instance per peer.
class Algorithm {
 public:
  virtual ~Algorithm() = default;
  virtual std::string name() const = 0;

  // Before the first step and at the first step boundary after every membership change: (re)build
  // roles, neighbour lists and buffers from ctx.members() and ctx.graph().
  virtual void setup(PeerContext& ctx) = 0;

  // One training step. The default is the plain local step with the two hooks:
  //   beforeStep(ctx); ctx.computeGradients(); ctx.applyOptimizer(); afterStep(ctx);
  // Algorithms that change the update itself (D-PSGD's fused mixing, all-reduce's averaged
  // gradient) override it. Returns the mini-batch loss.
  virtual double step(PeerContext& ctx);
  virtual void beforeStep(PeerContext& /*ctx*/) {}
  virtual void afterStep(PeerContext& /*ctx*/) {}

  // After the last step, once every member has finished its steps too and everything they sent
  // before that has arrived (the inbox holds all of it); before the final evaluation. E.g. merge
  // what is left, or one last averaging. When the members changed since the last step (a member
  // that died ends the barrier by leaving the view), setup() runs first, so members() is the
  // view the barrier ended with.
  virtual void finish(PeerContext& /*ctx*/) {}

  // A request or notification addressed to this peer; io thread (see the header comment).
  // The default ignores it.
  virtual void serve(ServiceContext& /*ctx*/, const Incoming& /*request*/) {}

  // ---- elasticity: peers joining, leaving and failing mid-run ----
  // Instead of the first setup(), when this peer enters a cluster that is already training
  // (joining late, or restarting without a checkpoint): take what the algorithm needs from a live
  // peer, then setup() runs as usual. The default adopts the model and the step of the first
  // in-neighbour that answers pullModel() within twice the comm timeout (of any member when it
  // has none), and resets the local optimizer's state.
  virtual void join(PeerContext& ctx);
  // The state a joiner fetches with PeerContext::catchUpState (a diloco's outer state), copied
  // now; nullopt while there is none to give (before setup, or a round half merged). Any thread.
  // The default: none.
  virtual std::optional<SharedState> sharedState() const { return std::nullopt; }
  // Whether this algorithm's peers go in lockstep: their rounds are matched by step (a message
  // of step s serves the receiver's step s), so peers whose steps came apart (two sides of a
  // partition that went on apart, rounds that timed out apart) no longer round together and
  // every round waits out the comm timeout. For such an algorithm the peer's life calls
  // realign() on the peer behind. The default, false, suits peers that mix whatever their steps
  // (gossip, elastic averaging).
  virtual bool lockstep() const { return false; }
  // Lockstep algorithms: `ahead`, a member of the view, is training at a later step than this
  // peer: back in the view after a partition, or heard a round ahead while one of this peer's
  // gathers expired. The default takes its model and step (adoptModelOf) and resets the local
  // optimizer's state, as a joiner does; this peer then rounds with the others again. Compute
  // thread, at a step boundary.
  virtual void realign(PeerContext& ctx, PeerId ahead);
  // Takes `from`'s model and step (pullModel within twice the comm timeout) and resets the local
  // optimizer's state; false when no model came.
  static bool adoptModelOf(PeerContext& ctx, PeerId from);
  // Before this peer leaves the cluster on purpose while the others go on (a stop request, a
  // signal): hand over what must not leave with it (gossip weight, a role). Compute thread, at a
  // step boundary; the membership leave follows.
  virtual void leave(PeerContext& /*ctx*/) {}
  // After loadState(), when this peer resumed into a cluster that went on training without it:
  // it was declared failed meanwhile, and the others counted what it held as lost. Drop here
  // what must not come back a second time (gosgd's weight); the default keeps everything. A whole
  // cluster resumed together does not call it.
  virtual void resumedLate(PeerContext& /*ctx*/) {}
  // The algorithm's part of this peer's checkpoint, and its restoration on --resume (before
  // setup(); throw gossamer::Error on a state that does not fit).
  virtual void saveState(AlgorithmState& /*state*/) const {}
  virtual void loadState(const AlgorithmState& /*state*/) {}
  // The shape of what saveState writes: raise it when the tensors or values change. A checkpoint
  // of a version in [oldestStateVersion, stateVersion] loads (loadState reads state.version and
  // converts an older one); any other is refused with both versions named, before anything is
  // restored.
  virtual std::uint32_t stateVersion() const { return 1; }
  virtual std::uint32_t oldestStateVersion() const { return stateVersion(); }

  // What this algorithm keeps at the end of any run, faults included, read from the peers' final
  // metrics (engine/invariants.h). The default: every peer ends at the last step.
  virtual Invariants invariants() const { return {}; }
  // The share of the run done, in [0, 1], for a run that ends at a budget the cluster shares
  // rather than at this peer's step count (time-boxed rounds, a shared end): the learning-rate
  // schedule then follows it as an even run would (a peer's own steps say nothing of where the
  // run is). nullopt (the default, and before the share is known): by this peer's steps.
  virtual std::optional<double> runProgress() const { return std::nullopt; }
};

// How the registry makes an algorithm: its description, its options (name, default, help) and a
// factory taking option values by name (unknown names and bad values throw gossamer::Error).
struct AlgorithmSpec {
  std::string description;
  std::string defaultTopology;  // used when the user names none ("star" for a center, ...)
  std::vector<OptionInfo> options;
  std::function<std::unique_ptr<Algorithm>(const OptionValues& values)> make;
};

// The spec of an algorithm class A with a typed options struct O (which has a
// `template <typename Bind> void bind(Bind& b)` calling b("name", field, "help") per field, and
// A has a constructor taking O).
template <typename A, typename O>
AlgorithmSpec algorithmSpec(std::string description, std::string defaultTopology) {
  return AlgorithmSpec{std::move(description), std::move(defaultTopology), describeOptions<O>(),
                       [](const OptionValues& values) -> std::unique_ptr<Algorithm> {
                         return std::make_unique<A>(parseOptions<O>(values));
                       }};
}

}  // namespace gossamer::engine
