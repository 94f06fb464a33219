// The version of an algorithm's checkpointed state (Algorithm::stateVersion): a checkpoint of an
// older shape the algorithm still reads loads and is converted; one it no longer reads, or one
// newer than it, is refused with both versions named before anything is restored.
#include <string>

#include <doctest/doctest.h>

#include "engine/base/enforce.h"
#include "engine/models/mlp.h"
#include "engine/runtime/checkpoints.h"
#include "kernels/cpu/cpu_compute.h"

namespace gossamer::engine {
namespace {

// Version 2 kept its weight as "w"; version 3 renamed it "weight". Reads 2 and 3.
class Versioned final : public Algorithm {
 public:
  explicit Versioned(std::uint32_t writes) : writes_(writes) {}
  std::string name() const override { return "versioned"; }
  void setup(PeerContext&) override {}
  void saveState(AlgorithmState& state) const override {
    state.values[writes_ >= 3 ? "weight" : "w"] = weight;
  }
  void loadState(const AlgorithmState& state) override {
    loadedVersion = state.version;
    weight = state.values.at(state.version >= 3 ? "weight" : "w");
  }
  std::uint32_t stateVersion() const override { return writes_; }
  std::uint32_t oldestStateVersion() const override { return 2; }

  double weight = 0;
  std::uint32_t loadedVersion = 0;

 private:
  std::uint32_t writes_;
};

struct Fixture {
  std::unique_ptr<kernels::Compute> compute = kernels::cpu::makeCompute();
  models::Mlp model{*compute, {.inputs = 4, .hidden = {3}, .classes = 2, .maxBatch = 8}};
  train::Learner learner{*compute, model, {}, 1};
};

TEST_CASE("checkpoint state version: an older shape loads converted, the current one as is") {
  Fixture f;
  for (const std::uint32_t written : {2u, 3u}) {
    CAPTURE(written);
    Versioned writer(written);
    writer.weight = 0.375;
    const train::Checkpoint c = runtime::PeerCheckpoints::capture(f.learner, writer, 7, 10);
    CHECK(c.metaInt("runtime.algorithm_state_version") == written);
    Versioned reader(3);
    CHECK(runtime::PeerCheckpoints::restore(c, f.learner, reader) == 7);
    CHECK(reader.loadedVersion == written);
    CHECK(reader.weight == 0.375);
  }
}

TEST_CASE("checkpoint state version: too old or too new is refused, naming both versions") {
  Fixture f;
  Versioned reader(3);
  Versioned old(1);
  const train::Checkpoint tooOld = runtime::PeerCheckpoints::capture(f.learner, old, 7, 10);
  CHECK_THROWS_WITH_AS(runtime::PeerCheckpoints::restore(tooOld, f.learner, reader),
                       doctest::Contains("versioned's state in version 1, which this build no "
                                         "longer reads (versions 2 to 3)"),
                       Error);
  CHECK(reader.loadedVersion == 0);  // nothing restored
  Versioned newer(4);
  const train::Checkpoint tooNew = runtime::PeerCheckpoints::capture(f.learner, newer, 7, 10);
  CHECK_THROWS_WITH_AS(runtime::PeerCheckpoints::restore(tooNew, f.learner, reader),
                       doctest::Contains("version 4, newer than this build reads (3)"), Error);
  // A checkpoint written before versions were kept holds version 1.
  train::Checkpoint unversioned = runtime::PeerCheckpoints::capture(f.learner, reader, 7, 10);
  unversioned.meta.erase("runtime.algorithm_state_version");
  CHECK_THROWS_WITH_AS(runtime::PeerCheckpoints::restore(unversioned, f.learner, reader),
                       doctest::Contains("in version 1,"), Error);
}

}  // namespace
}  // namespace gossamer::engine
