// The verified catch-up over real runtime parts (engine/runtime/catch_up.h): members serve their
// final snapshot (ControlNode::serve), a joiner fetches it in chunks from one or several of them
// over the in-process transport, with the runtime's own messages, and must end with exactly the
// state the honest members hold.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include <doctest/doctest.h>

#include "engine/runtime/control_node.h"
#include "tests/engine/control_nodes.h"
#include "tests/support/watchdog.h"

namespace gossamer::engine::runtime {
namespace {

using namespace std::chrono_literals;

constexpr std::size_t kFloats = 100'003;       // not a multiple of the chunk
constexpr std::size_t kChunkBytes = 64 << 10;  // 16384 floats: 7 chunks

NetworkConfig makeConfig(std::optional<net::Endpoint> seed) {
  return test::controlNodeConfig(seed, std::byte{9});
}

std::vector<float> model(float seed) {
  std::vector<float> out(kFloats);
  for (std::size_t i = 0; i < kFloats; ++i) out[i] = seed + static_cast<float>(i % 977) * 0.25f;
  return out;
}

// A joiner and `sources` members, each serving the params it is given at step 40.
struct Cluster {
  explicit Cluster(const std::vector<std::vector<float>>& held) {
    joiner = std::make_unique<ControlNode>(1, makeConfig(std::nullopt), fingerprint(), kChunkBytes);
    joiner->control.setCatchUpOptions({.chunkBytes = kChunkBytes, .window = 2, .maxSources = 8});
    for (std::size_t i = 0; i < held.size(); ++i) {
      sources.push_back(std::make_unique<ControlNode>(
          10 + i, makeConfig(joiner->network.endpoint()), fingerprint(), kChunkBytes));
      sources.back()->serve(40, held[i]);
      ids.push_back(10 + i);
    }
    REQUIRE(joiner->waitForMembers(held.size() + 1, 20s));
  }
  static net::wire::ModelFingerprint fingerprint() { return {kFloats, "f32", 0xca7c}; }

  std::optional<CaughtUpModel> fetch(ModelHolders holders, std::vector<PeerId> from) {
    return joiner->control.catchUp(from, holders, kFloats, 10s);
  }

  std::unique_ptr<ControlNode> joiner;
  std::vector<std::unique_ptr<ControlNode>> sources;
  std::vector<PeerId> ids;
};

TEST_CASE("catch-up: the model of identical members comes from all of them, every chunk checked") {
  test::Watchdog watchdog(60s);
  const std::vector<float> truth = model(1.0f);
  Cluster cluster({truth, truth, truth});
  const std::optional<CaughtUpModel> got = cluster.fetch(ModelHolders::identical, cluster.ids);
  REQUIRE(got.has_value());
  CHECK(std::ranges::equal(got->params(), truth));
  CHECK(got->step == 40);
  CHECK(got->from.size() == 3);
  std::uint64_t chunks = 0, digests = 0;
  for (const auto& source : cluster.sources) {
    CHECK(source->control.catchUpServer().chunksSent() >= 2);  // the window spread the load
    chunks += source->control.catchUpServer().chunksSent();
    digests += source->control.catchUpServer().digestsComputed();
  }
  CHECK(chunks == 7);   // each chunk sent once
  CHECK(digests == 7);  // and hashed once, by a member other than its sender
}

TEST_CASE(
    "catch-up: a member holding other bytes is outvoted, and nothing of its state is merged") {
  test::Watchdog watchdog(60s);
  const std::vector<float> truth = model(1.0f);
  std::vector<float> corrupt = truth;
  for (std::size_t i = 0; i < kFloats; i += 4096) corrupt[i] += 1.0f;  // in every chunk
  Cluster cluster({truth, corrupt, truth});
  const std::optional<CaughtUpModel> got = cluster.fetch(ModelHolders::identical, cluster.ids);
  REQUIRE(got.has_value());
  CHECK(std::ranges::equal(got->params(), truth));
  // It served or checked a share of the chunks (the load is spread): each of those was rejected
  // and asked again, and none of its chunks was merged.
  CHECK(cluster.sources[1]->control.catchUpServer().chunksSent() +
            cluster.sources[1]->control.catchUpServer().digestsComputed() >=
        1);
  CHECK(std::find(got->from.begin(), got->from.end(), PeerId{11}) == got->from.end());
}

TEST_CASE("catch-up: two members that disagree on one chunk: the first candidate's own state") {
  test::Watchdog watchdog(60s);
  const std::vector<float> first = model(1.0f);
  std::vector<float> second = first;
  second[3 * 16384 + 5] = -1.0f;  // chunk 3 only
  Cluster cluster({first, second});
  const std::optional<CaughtUpModel> got = cluster.fetch(ModelHolders::identical, cluster.ids);
  REQUIRE(got.has_value());
  CHECK(std::ranges::equal(got->params(), first));
  CHECK(got->from == std::vector<PeerId>{10});
}

TEST_CASE("catch-up: a gossip model is one peer's own, fetched from the first that answers") {
  test::Watchdog watchdog(60s);
  Cluster cluster({model(1.0f), model(2.0f)});
  const std::optional<CaughtUpModel> got = cluster.fetch(ModelHolders::one, {11, 10});
  REQUIRE(got.has_value());
  CHECK(std::ranges::equal(got->params(), model(2.0f)));
  CHECK(got->from == std::vector<PeerId>{11});
  CHECK(cluster.sources[0]->control.catchUpServer().chunksSent() == 0);
  CHECK(cluster.sources[1]->control.catchUpServer().chunksSent() == 7);
}

TEST_CASE("catch-up: an algorithm's shared state comes from its holders, grouped by version") {
  test::Watchdog watchdog(60s);
  const std::vector<float> outer = model(3.0f);
  Cluster cluster({model(1.0f), model(1.0f), model(1.0f)});
  // Two members at outer round 5 hold one state; the third, a round behind, another. The first
  // asked is busy (a round half merged) twice before it has one to give.
  auto busy = std::make_shared<std::atomic<int>>(2);
  for (std::size_t i = 0; i < 3; ++i) {
    const std::uint64_t rounds = i == 2 ? 4 : 5;
    cluster.sources[i]->control.setSharedState([=]() -> std::optional<SharedState> {
      if (i == 0 && busy->fetch_sub(1) > 0) return std::nullopt;
      return SharedState{.step = 100 + i,
                         .version = rounds,
                         .integers = {rounds},
                         .floats = rounds == 5 ? outer : model(9.0f)};
    });
  }
  const std::optional<CaughtUpModel> got = cluster.joiner->control.catchUp(
      cluster.ids, ModelHolders::identical, kFloats, 10s, StateKind::algorithm);
  REQUIRE(got.has_value());
  CHECK(std::ranges::equal(got->params(), outer));
  CHECK(got->integers == std::vector<std::uint64_t>{5});
  CHECK(got->from.size() == 2);
  CHECK(busy->load() < 0);  // asked again while it had nothing to give
  // A member without a provider has nothing to give: no state, no wait beyond the timeout.
  Cluster bare({model(1.0f)});
  CHECK_FALSE(bare.joiner->control
                  .catchUp(bare.ids, ModelHolders::identical, kFloats, 1s, StateKind::algorithm)
                  .has_value());
}

TEST_CASE("catch-up: members that are gone or hold another model give nothing") {
  test::Watchdog watchdog(60s);
  Cluster cluster({model(1.0f)});
  // A peer that is not a member: nothing to wait for.
  CHECK_FALSE(cluster.fetch(ModelHolders::identical, {77}).has_value());
  // The size asked for differs from what the member holds (another model): refused.
  CHECK_FALSE(
      cluster.joiner->control.catchUp(cluster.ids, ModelHolders::one, kFloats - 1, 2s).has_value());
}

}  // namespace
}  // namespace gossamer::engine::runtime
