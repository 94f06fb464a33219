// A simulated world: N peers running the unchanged Algorithm classes (the registry's), the same
// topologies and the same shaped network profiles as real peers, in one process and in virtual
// time. Replayable: the same config and seed give the same run, bit for bit.
//
// How it runs. Every peer's compute thread is a Fiber (fiber.h) on the caller's thread, and one
// scheduler runs them one at a time: an event queue ordered by (virtual time, insertion number)
// holds message deliveries, wake-ups (the end of a step's compute time, a wait's deadline),
// membership view changes, faults and evaluations. The scheduler takes the earliest event, sets
// the virtual clock to its time and runs it; a fiber it resumes runs until it blocks again (in
// gather, request, Inbox::wait, pullModel or its step time) and yields. Virtual time therefore
// jumps from event to event and nothing depends on the host's speed or threads. A peer's
// PeerContext::now() and wallNow() read the virtual clock, so algorithms that keep time
// themselves (gosgd's retransmissions, ad-psgd's offers) run in it unchanged.
//
// What each part stands for:
//   compute     a peer's step runs the real forward/backward and optimizer on its own params and
//               grads (one CPU Compute and one model shared by all peers, which never run at the
//               same time), and then takes `minStepTime` of virtual time (the real compute is
//               free); a straggler fault multiplies it.
//   network     each ordered pair of peers is one net::shaped::LinkSchedule of the profile's link
//               between their sites (peer i at site i % sites, as in a local cluster): the same
//               serialization, latency, jitter, stream/datagram loss and in-order delivery
//               arithmetic as the shaped transport, seeded per pair from the run seed. Payloads
//               travel as on the real wire: the runtime's PayloadCodec (payload_codec.h) encodes
//               those a message marks compressible with the run's codec (--compress; error
//               feedback updating the residuals, decoded values written to the `sent` spans,
//               random-k seeded from the run seed and the peer's id), and receivers read what it
//               decodes. A frame is its payload bytes as sent (encoded or float32) plus
//               kFrameHeaderBytes, 8 bytes per scalar and integer and kEncodingBytes per encoded
//               payload. Sends never block (no back-pressure from the staging pools).
//   membership  the SWIM protocol of real peers (net/membership/protocol.h), unchanged: each life
//               runs its own Protocol with virtual time for its clock and timers (the event
//               queue) and its frames on the pair's control link, a LinkSchedule apart from the
//               data link's (a mesh's control channel is a link of its own), so probes, acks,
//               gossip and push-pull see the profile's latency, jitter, loss and partitions. The
//               initial peers start as a formed cluster (each knows all of them, as the runtime's
//               start waits for); a late peer (a join, a restart) joins through the initial
//               peers as seeds, a dead seed refusing after a round trip. A kill stops its
//               protocol silently; the survivors' probes find out. Each life's view is its
//               protocol's (events set it); the compute side adopts it at its next step boundary
//               (setup() again), as the runtime does. Opening a link takes one round trip;
//               links are otherwise not modelled (no connection set-up on a first frame).
//   life        each life runs the peer's life of real peers (engine/life/peer_life.h), the same
//               object runtime::Peer drives: its start rule (a late life asks the live members'
//               status, read off their lives: it joins late at their step, starts from step 0
//               when they counted on it, or finds the cluster done and leaves at once), its
//               steps, its checkpoints and evaluation points, its leave and its finish and
//               released barriers. The simulator adds only virtual time: a gather ends early for
//               a peer that left the view or finished training (or, in finish(), released the
//               others), as seen after the profile's longest one-way delay (the runtime's
//               finished and released marks) and once everything it sent while training has
//               arrived; serve() runs on delivery (in the scheduler, never in a fiber), held back
//               until the peer's first setup(); pullModel answers on arrival with the target's
//               current params and step. Nobody pulls final models, so the released barrier
//               waits for nothing.
//   faults      the chaos benchmark's kinds and rules, drawn from a seed (drawFaults): kill (the
//               fiber is unwound at once and never steps again; skipped unless more than half
//               the peers, and at least 3, would remain), restart (the first killed peer comes
//               back as a new life at the same address: from its last checkpoint when it has
//               one, as with --resume, else from nothing), restart-fresh (the same without its
//               checkpoint, as without --resume), join of a new peer (up to twice the starting
//               peers), leave (SIGTERM: the peer leaves at its next step boundary through
//               Algorithm::leave; skipped as a kill is), partition of one peer from all others
//               (frames dropped both ways), loss added to one peer's links, a straggler.
//   checkpoints every checkpointEvery steps a peer's checkpoint (runtime::PeerCheckpoints::capture:
//               learner, optimizer state, place in the data, the algorithm's saveState, the step)
//               replaces its last one, in memory; a restart restores it as a resumed peer does
//               (the life's start: PeerCheckpoints::restore, the step of the peers in training
//               when that is later, Algorithm::resumedLate).
//               Algorithms that number lives by the wall clock (gosgd) read virtual time
//               (PeerContext::wallNow), so a restart is a later life and nothing of the host leaks.
//
// Memory: the datasets are shared (one DatasetPair), every peer holds one Learner (params,
// grads, optimizer state, one batch), its algorithm's buffers, its codec's scratch (the encoded
// size of one message) and, with checkpointEvery, its last checkpoint; messages in flight hold
// one copy of their decoded payloads shared by all their recipients.
//
// Threading: simulate() runs everything on the calling thread and returns when the run ends.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "engine/registry.h"
#include "engine/runtime/cluster.h"
#include "engine/runtime/config.h"
#include "engine/sim/faults.h"
#include "net/membership/membership.h"
#include "net/shaped/profile.h"

namespace gossamer::engine::sim {

struct SimConfig {
  std::size_t peers = 4;
  // Model, algorithm and options, topology, optimizer and schedule, batch, steps (maxSteps, else
  // epochs), split, seed, commTimeout, finishTimeout, minStepTime (the step time),
  // initialParams, compression and checkpointEvery (checkpoints kept in memory, whatever the
  // checkpoint file or directory) as for a real peer. Device, resume, metrics files and progress
  // are not used.
  runtime::TrainingConfig training;
  net::shaped::NetworkProfile network;
  // The SWIM options of every life (stretched for the profile's longest round trip, as a real
  // peer does).
  net::membership::Options membership;
  std::vector<Fault> faults;
  // Evaluation points every this many steps (runtime/eval_points.h): each peer's model as it
  // completes the step, the point's time the slowest peer's virtual training time there; 0: none.
  std::uint64_t evalEverySteps = 0;
  // Also virtual seconds between consensus evaluations of the models as they are then; 0: none.
  double evalSeconds = 0;
  std::size_t evalSamples = 2000;  // test samples of those (the final one uses all)
  // Test samples of each peer's own final evaluation (min and mean peer accuracy); 0: none.
  std::size_t finalPeerSamples = 1000;
  // A run still going at this virtual time is stopped and reported as a violation (a deadlock
  // in virtual time); 0: 100 x the steps' compute time + 600 s.
  double maxVirtualSeconds = 0;
  std::size_t stackBytes = 512 * 1024;  // per fiber
  // Extra invariants, checked on the finals at the end; each returns a violation or nullopt.
  std::function<std::optional<std::string>(std::span<const runtime::Snapshot> finals)> invariant;
  std::function<void(const runtime::EvalPoint&)> onEval;
  // Every membership event of every life: who saw it (`observer`), at which virtual second
  // since the start.
  std::function<void(PeerId observer, double at, const net::membership::Event&)> onMembership;
};

// The bytes a frame adds to its payloads (and 8 per scalar and integer): a dpsgd model message
// on the real transport is its payload plus 136 bytes (measured with `convergence`; the size of
// its Cap'n Proto header, net/messages.capnp's Envelope).
inline constexpr std::size_t kFrameHeaderBytes = 136;
// What an encoded payload's descriptor adds to the header: its PayloadEncoding (two words).
inline constexpr std::size_t kEncodingBytes = 16;

struct SimPeerResult {
  PeerId id = 0;
  std::uint64_t steps = 0;
  // The step its last life began training at: 0, a joiner's adopted step, or a restart's
  // checkpoint step (the others' step when later).
  std::uint64_t startStep = 0;
  bool alive = true;      // its last life was not killed
  bool finished = false;  // it ran finish()
  // Its last life left the cluster: a graceful leave, or it came when the cluster was done.
  bool left = false;
  std::uint64_t bytesSent = 0;
  double commWaitSeconds = 0;
  // Its last life's virtual time in training and in finishing (to the end of its finish()), and
  // the fraction of both it waited on others, as a real peer's (runtime::PeerResult); 0 for a
  // life that was killed.
  double trainSeconds = 0;
  double finishSeconds = 0;
  double commWaitFraction = 0;
  std::map<std::string, double> metrics;
  std::string error;         // what its fiber threw, if anything
  std::vector<PeerId> view;  // the membership view its last life ended with
};

struct Violation {
  double at = 0;  // virtual seconds
  std::string what;
};

struct SimResult {
  std::string topology;  // the topology's name
  double spectralGap = 0;
  std::vector<runtime::EvalPoint> curve;  // wallSeconds: virtual seconds since training started
  runtime::ConsensusResult consensus;     // final, over the live peers
  double virtualSeconds = 0;              // until the last peer ended
  std::vector<SimPeerResult> peers;       // by id (1..), every slot's last life
  std::vector<runtime::Snapshot> finals;  // the live peers' final params, by id
  std::vector<std::string> faultLog;      // what each fault did, with its virtual time and target
  std::vector<Violation> violations;
  std::uint64_t events = 0;
  std::uint64_t messages = 0;  // frames sent
  std::uint64_t dropped = 0;   // of those, lost (datagram loss, partitions, dead receivers)
  std::uint64_t membershipMessages = 0;  // SWIM frames sent (to live lives)
  std::uint64_t membershipBytes = 0;     // their bytes as on a real link
};

// Runs the world to its end. Throws gossamer::Error on a bad configuration (unknown names, a
// profile without sites); what goes wrong in the run (a peer's exception, a deadlock, a broken
// invariant) is reported in the result's violations.
SimResult simulate(const SimConfig& config, const Registry& registry,
                   std::shared_ptr<const DatasetPair> data);

// The result as text, every figure with fixed formatting and nothing of the host (no wall time):
// the same seed and config give the same text, byte for byte.
std::string format(const SimResult& result);

}  // namespace gossamer::engine::sim
