// How a peer's life starts, decided from what the members say about themselves (the runtime's
// status exchange, engine/runtime/control.h; the simulator reads the same facts off its world):
// with the others, late at the cluster's step, or not at all. A pure function, so that the
// runtime and the simulator decide alike and a test can walk every case.
#pragma once

#include <cstdint>
#include <optional>
#include <span>

namespace gossamer::engine::life {

// How a peer starts: with the others (late false; totalSteps 0: its own count, else the count the
// cluster already training with it uses), or late, joining a cluster at `step` of `totalSteps`;
// or not at all, because it joined no one by its join deadline (cannotJoin; nothing else set) or
// because the cluster it found has trained all its steps (clusterDone, at `step` of `totalSteps`).
struct StartPlan {
  bool late = false;
  std::uint64_t totalSteps = 0;
  std::uint64_t runSteps = 0;  // the cluster's count as planned (totalSteps before a move), or 0
  std::uint64_t step = 0;
  bool cannotJoin = false;
  bool clusterDone = false;
};

// One member's answer about itself.
struct MemberStatus {
  bool training = false;  // in its training loop
  bool done = false;      // trained all its steps
  // It started training with this very life of the asker (a restart is a new life: not expected).
  bool expected = false;
  std::uint64_t step = 0, totalSteps = 0;
  // The run's steps as planned, before an algorithm moved the end (time-boxed rounds raise
  // totalSteps to the cluster's budget); 0 from an older peer, which means totalSteps.
  std::uint64_t runSteps = 0;
  std::size_t members = 0;  // in its view
};

struct StartFacts {
  std::span<const MemberStatus> statuses;  // the other members' answers
  std::size_t members = 1;                 // in this peer's view, itself included
  std::size_t minPeers = 1;
  bool resumed = false;  // from its own checkpoint
  bool joined = false;   // admitted by the membership (or started the cluster)
};

// The plan, or nullopt while there is none yet (wait for a change of the view or of a member's
// status and ask again):
//   - a member done that did not count on this life: the cluster is done (clusterDone);
//   - members training that counted on it (and it is not resumed): start from step 0 with their
//     step count once this peer sees as many members as they do;
//   - other members training: join late at the latest of their steps;
//   - nobody training: start with the others once minPeers are members.
std::optional<StartPlan> planStart(const StartFacts& facts);

}  // namespace gossamer::engine::life
