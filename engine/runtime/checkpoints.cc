#include "engine/runtime/checkpoints.h"

#include <filesystem>

#include <fmt/format.h>

#include "engine/base/enforce.h"

namespace gossamer::engine::runtime {
namespace {

constexpr const char* kAlgorithmTensor = "algorithm.";
constexpr const char* kAlgorithmValue = "algorithm.value.";
constexpr const char* kStateVersion = "runtime.algorithm_state_version";

// The version of the algorithm's state in `c`: 1 where the writer kept none.
std::uint32_t stateVersionOf(const train::Checkpoint& c) {
  return c.meta.count(kStateVersion) ? static_cast<std::uint32_t>(c.metaInt(kStateVersion)) : 1;
}

bool startsWith(const std::string& s, const std::string& prefix) { return s.rfind(prefix, 0) == 0; }

}  // namespace

PeerCheckpoints::PeerCheckpoints(const TrainingConfig& config, PeerId self)
    : every_(config.checkpointEvery), self_(self) {
  if (!config.checkpointFile.empty()) {
    path_ = config.checkpointFile;
  } else if (!config.checkpointDir.empty()) {
    path_ = (std::filesystem::path(config.checkpointDir) / fmt::format("peer-{:016x}.ckpt", self))
                .string();
  }
}

std::string PeerCheckpoints::identityPath() const {
  if (path_.empty()) return {};
  const std::filesystem::path checkpoint(path_);
  if (checkpoint.extension() == ".ckpt" && checkpoint.stem() == fmt::format("peer-{:016x}", self_))
    return (checkpoint.parent_path() / fmt::format("peer-{:016x}.key", self_)).string();
  return path_ + ".key";
}

bool PeerCheckpoints::dueAfter(std::uint64_t step) const {
  return enabled() && dueEvery(every_, step);
}

train::Checkpoint PeerCheckpoints::capture(const train::Learner& learner,
                                           const Algorithm& algorithm, std::uint64_t step,
                                           std::uint64_t totalSteps) {
  train::Checkpoint c = learner.checkpoint();
  AlgorithmState state;
  algorithm.saveState(state);
  for (auto& [name, tensor] : state.tensors) c.tensors[kAlgorithmTensor + name] = std::move(tensor);
  for (const auto& [name, value] : state.values)
    c.meta[kAlgorithmValue + name] = fmt::format("{:.17g}", value);
  c.meta["algorithm"] = algorithm.name();
  c.meta[kStateVersion] = std::to_string(algorithm.stateVersion());
  c.meta["runtime.step"] = std::to_string(step);
  c.meta["runtime.total_steps"] = std::to_string(totalSteps);
  return c;
}

void PeerCheckpoints::write(const train::Checkpoint& checkpoint) const {
  train::saveCheckpoint(path_, checkpoint);
}

void PeerCheckpoints::save(const train::Learner& learner, const Algorithm& algorithm,
                           std::uint64_t step, std::uint64_t totalSteps) const {
  train::saveCheckpoint(path_, capture(learner, algorithm, step, totalSteps));
}

train::Checkpoint PeerCheckpoints::load(const Model& model, const Algorithm& algorithm) const {
  GOSSAMER_ENFORCE(std::filesystem::exists(path_),
                   "--resume: no checkpoint of peer {:016x} at {}; a peer resumes under the "
                   "identity it had (same --listen or --peer-id) and the same checkpoint path",
                   self_, path_);
  train::Checkpoint c = train::loadCheckpoint(path_);
  GOSSAMER_ENFORCE(
      c.fingerprint == model.layout().fingerprint(),
      "checkpoint {} is for a different model (layout fingerprint {:016x}, this model {} "
      "has {:016x})",
      path_, c.fingerprint, model.name(), model.layout().fingerprint());
  // A checkpoint of a single peer written before the runtime kept its own keys trained alone.
  const std::string writer = c.meta.count("algorithm") ? c.metaString("algorithm") : "none";
  GOSSAMER_ENFORCE(writer == algorithm.name(),
                   "checkpoint {} was written by algorithm '{}' but this peer runs '{}'", path_,
                   writer, algorithm.name());
  c.metaInt(c.meta.count("runtime.step") ? "runtime.step" : "step");  // present and well formed
  checkStateVersion(c, algorithm, path_);
  return c;
}

void PeerCheckpoints::checkStateVersion(const train::Checkpoint& c, const Algorithm& algorithm,
                                        const std::string& path) {
  const std::uint32_t version = stateVersionOf(c);
  const std::uint32_t newest = algorithm.stateVersion();
  const std::uint32_t oldest = algorithm.oldestStateVersion();
  GOSSAMER_ENFORCE(version <= newest,
                   "checkpoint {} holds {}'s state in version {}, newer than this build reads "
                   "({}): resume it with the build that wrote it, or start without --resume",
                   path, algorithm.name(), version, newest);
  GOSSAMER_ENFORCE(version >= oldest,
                   "checkpoint {} holds {}'s state in version {}, which this build no longer "
                   "reads (versions {} to {}): start without --resume, or resume it with an "
                   "older build",
                   path, algorithm.name(), version, oldest, newest);
}

std::uint64_t PeerCheckpoints::restore(const train::Checkpoint& c, train::Learner& learner,
                                       Algorithm& algorithm) {
  checkStateVersion(c, algorithm, "in memory");
  // The place in the data only where it fits the shard this peer has now: a restart into a
  // cluster that grew since (a smaller shard) starts its shard afresh rather than failing.
  learner.restore(c, !learner.hasData() ||
                         static_cast<std::size_t>(c.metaInt("cursor")) <= learner.sampler().size());
  AlgorithmState state;
  for (const auto& [name, tensor] : c.tensors) {
    if (startsWith(name, kAlgorithmTensor) && !startsWith(name, kAlgorithmValue))
      state.tensors[name.substr(std::string(kAlgorithmTensor).size())] = tensor;
  }
  for (const auto& [key, value] : c.meta) {
    if (startsWith(key, kAlgorithmValue))
      state.values[key.substr(std::string(kAlgorithmValue).size())] = std::stod(value);
  }
  state.version = stateVersionOf(c);
  algorithm.loadState(state);
  return static_cast<std::uint64_t>(
      c.metaInt(c.meta.count("runtime.step") ? "runtime.step" : "step"));
}

}  // namespace gossamer::engine::runtime
