// A peer's checkpoints: the learner (params, optimizer state, place in the data), the algorithm's
// state and the runtime's step, in one atomic file (engine/train/checkpoint.h): the configured
// file, or DIR/peer-<id>.ckpt. A resumed peer's checkpoint is read and checked before the peer
// joins anyone, so that a wrong or corrupt file is a clear error at once and nothing is
// half-loaded.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "engine/algorithm.h"
#include "engine/model.h"
#include "engine/runtime/config.h"
#include "engine/train/checkpoint.h"
#include "engine/train/learner.h"

namespace gossamer::engine::runtime {

class PeerCheckpoints {
 public:
  PeerCheckpoints(const TrainingConfig& config, PeerId self);

  bool enabled() const { return !path_.empty(); }
  const std::string& path() const { return path_; }
  // Where this peer's identity key is kept: beside its checkpoint ("<checkpoint>.key" for a
  // checkpoint file, "peer-<id>.key" in the checkpoint directory); empty without checkpoints.
  std::string identityPath() const;
  // Whether one is due after `step` steps (every checkpointEvery steps; the last one is written
  // by the caller).
  bool dueAfter(std::uint64_t step) const;
  // The rule of dueAfter for checkpoints kept elsewhere (the simulator keeps them in memory).
  static bool dueEvery(std::int64_t every, std::uint64_t step) {
    return every > 0 && step % static_cast<std::uint64_t>(every) == 0;
  }

  // What a checkpoint holds after `step` steps of `totalSteps`: the learner's part, the
  // algorithm's state (saveState) and the runtime's step, in memory (the simulator keeps it so).
  static train::Checkpoint capture(const train::Learner& learner, const Algorithm& algorithm,
                                   std::uint64_t step, std::uint64_t totalSteps);
  // Writes `checkpoint` atomically.
  void write(const train::Checkpoint& checkpoint) const;
  // Writes capture() atomically.
  void save(const train::Learner& learner, const Algorithm& algorithm, std::uint64_t step,
            std::uint64_t totalSteps) const;
  // --resume: the checkpoint of this peer, checked against `model` and `algorithm`. Throws
  // gossamer::Error naming the file and the mismatch.
  train::Checkpoint load(const Model& model, const Algorithm& algorithm) const;
  // Puts a loaded (or captured) checkpoint into `learner` and `algorithm`; returns the step to go
  // on from. The place in the data is restored only when it fits the learner's current shard.
  static std::uint64_t restore(const train::Checkpoint& checkpoint, train::Learner& learner,
                               Algorithm& algorithm);
  // Throws gossamer::Error naming `path` and both versions when the checkpoint's algorithm state
  // is outside [algorithm.oldestStateVersion(), algorithm.stateVersion()] (load and restore
  // check it).
  static void checkStateVersion(const train::Checkpoint& checkpoint, const Algorithm& algorithm,
                                const std::string& path);

 private:
  std::string path_;
  std::int64_t every_;
  PeerId self_;
};

}  // namespace gossamer::engine::runtime
