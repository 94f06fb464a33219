// ChunkPlan, the joiner's rules for a verified catch-up (engine/runtime/chunk_plan.h), driven by
// a small world of sources whose chunks are known, so every outcome has a closed form: which
// bytes end up merged, how often a chunk is asked again, when the plan gives up.
#include "engine/runtime/chunk_plan.h"

#include <algorithm>
#include <cstddef>
#include <map>
#include <string>
#include <vector>

#include <doctest/doctest.h>

namespace gossamer::engine::runtime {
namespace {

Digest digestOf(int value) { return sha256(std::as_bytes(std::span<const int>(&value, 1))); }

// Sources each holding `chunks` chunks whose content is a number (the digest of it stands for
// the chunk's bytes). Runs the plan until done or failed, answering every ask at once, digests
// before data (or data before digests), and returns the content merged per chunk.
struct World {
  std::vector<std::vector<int>> held;  // held[source][chunk]
  bool dataFirst = true;
  std::vector<int> merged;
  std::size_t asksSent = 0;

  std::vector<int> run(ChunkPlan& plan) {
    merged.assign(held.front().size(), -1);
    std::map<std::size_t, int> kept;
    for (int rounds = 0; rounds < 1000 && !plan.done() && !plan.failed(); ++rounds) {
      std::vector<ChunkAsk> asks = plan.asks();
      asksSent += asks.size();
      std::stable_sort(asks.begin(), asks.end(), [&](const ChunkAsk& a, const ChunkAsk& b) {
        return dataFirst ? a.data > b.data : a.data < b.data;
      });
      for (const ChunkAsk& ask : asks) {
        const int content = held[ask.source][ask.chunk];
        ChunkVerdict verdict = ChunkVerdict::stale;
        if (ask.data) verdict = plan.onData(ask.chunk, ask.source, ask.attempt, digestOf(content));
        if (ask.digest && (!ask.data || verdict == ChunkVerdict::waiting))
          verdict = plan.onDigest(ask.chunk, ask.source, ask.attempt, digestOf(content));
        if (verdict == ChunkVerdict::waiting && ask.data) kept[ask.chunk] = content;
        if (verdict == ChunkVerdict::accepted)
          merged[ask.chunk] = ask.data ? content : kept.at(ask.chunk);
        if (verdict != ChunkVerdict::waiting) kept.erase(ask.chunk);
      }
    }
    return merged;
  }
};

std::vector<int> contents(std::size_t chunks) {
  std::vector<int> out(chunks);
  for (std::size_t i = 0; i < chunks; ++i) out[i] = static_cast<int>(100 + i);
  return out;
}

TEST_CASE("chunk plan: each chunk's bytes from one source, its digest from another") {
  ChunkPlan plan(8, 4, 2);
  const std::vector<ChunkAsk> asks = plan.asks();
  REQUIRE(asks.size() == 16);  // 4 sources x window 2 = 8 chunks, each a data and a digest ask
  std::vector<std::size_t> served(4, 0), verified(4, 0);
  for (std::size_t chunk = 0; chunk < 8; ++chunk) {
    const auto data = std::find_if(asks.begin(), asks.end(),
                                   [&](const ChunkAsk& a) { return a.chunk == chunk && a.data; });
    const auto digest = std::find_if(
        asks.begin(), asks.end(), [&](const ChunkAsk& a) { return a.chunk == chunk && a.digest; });
    REQUIRE(data != asks.end());
    REQUIRE(digest != asks.end());
    CHECK(data->source != digest->source);  // two sources must agree
    CHECK_FALSE(data->digest);
    ++served[data->source];
    ++verified[digest->source];
  }
  // The window fills every source, and the hashing is spread as evenly.
  CHECK(served == std::vector<std::size_t>{2, 2, 2, 2});
  CHECK(verified == std::vector<std::size_t>{2, 2, 2, 2});
  CHECK(plan.asks().empty());  // no room until something comes back
}

TEST_CASE("chunk plan: identical sources give the state whichever half of a check comes first") {
  for (bool dataFirst : {true, false}) {
    World world{.held = {contents(13), contents(13), contents(13)}, .dataFirst = dataFirst};
    ChunkPlan plan(13, 3, 4);
    CHECK(world.run(plan) == contents(13));
    CHECK(plan.done());
    CHECK(plan.rejections() == 0);
    CHECK(world.asksSent == 26);  // once per chunk: a data ask and a digest ask
    CHECK(plan.served(0) + plan.served(1) + plan.served(2) == 13);
    for (std::size_t s = 0; s < 3; ++s) CHECK(plan.served(s) >= 4);  // all three sent
  }
}

TEST_CASE(
    "chunk plan: a source holding a corrupt chunk is outvoted and nothing corrupt is merged") {
  for (std::size_t bad = 0; bad < 3; ++bad) {
    for (std::size_t chunk = 0; chunk < 6; ++chunk) {
      World world{.held = {contents(6), contents(6), contents(6)}};
      world.held[bad][chunk] = -7;
      ChunkPlan plan(6, 3, 2);
      CHECK(world.run(plan) == contents(6));
      CHECK(plan.done());
      // The chunk was asked again at most twice: (bad, good) and (good, bad) are the pairs that
      // can disagree before a pair of good sources is chosen.
      CHECK(plan.rejections() <= 2);
      CHECK(plan.disagreements(bad) == plan.rejections());
    }
  }
}

TEST_CASE("chunk plan: two sources that disagree on a chunk fail the plan after both pairs") {
  World world{.held = {contents(4), contents(4)}};
  world.held[1][2] = -1;
  ChunkPlan plan(4, 2, 4);
  world.run(plan);
  CHECK(plan.failed());
  CHECK(plan.failure() == "the sources disagree on chunk 2: every pair was tried");
  CHECK(plan.rejections() == 2);  // (0 serves, 1 checks) and (1 serves, 0 checks)
  CHECK(world.merged[2] == -1);   // never merged
}

TEST_CASE("chunk plan: one source checks itself, and a chunk corrupt in transit is asked again") {
  ChunkPlan plan(3, 1, 4);
  std::vector<ChunkAsk> asks = plan.asks();
  REQUIRE(asks.size() == 3);
  for (const ChunkAsk& a : asks) CHECK((a.data && a.digest && a.source == 0));
  // Chunk 1's bytes arrive altered: they do not hash to the source's digest.
  CHECK(plan.onData(1, 0, asks[1].attempt, digestOf(666)) == ChunkVerdict::waiting);
  CHECK(plan.onDigest(1, 0, asks[1].attempt, digestOf(101)) == ChunkVerdict::rejected);
  const std::vector<ChunkAsk> again = plan.asks();
  REQUIRE(again.size() == 1);
  CHECK(again[0].chunk == 1);
  CHECK(again[0].attempt == asks[1].attempt + 1);
  // The old attempt's late reply is stale; the new one is accepted.
  CHECK(plan.onData(1, 0, asks[1].attempt, digestOf(101)) == ChunkVerdict::stale);
  CHECK(plan.onData(1, 0, again[0].attempt, digestOf(101)) == ChunkVerdict::waiting);
  CHECK(plan.onDigest(1, 0, again[0].attempt, digestOf(101)) == ChunkVerdict::accepted);
  // A chunk that fails every try fails the plan.
  for (std::uint32_t t = 0; t < ChunkPlan::kMaxSingleSourceTries; ++t) {
    const std::vector<ChunkAsk> retry = t == 0 ? std::vector<ChunkAsk>{asks[0]} : plan.asks();
    REQUIRE(retry.size() == 1);
    plan.onData(0, 0, retry[0].attempt, digestOf(1));
    CHECK(plan.onDigest(0, 0, retry[0].attempt, digestOf(100)) == ChunkVerdict::rejected);
  }
  plan.asks();
  CHECK(plan.failed());
  CHECK(plan.failure() == "chunk 0 failed its digest 3 times");
}

TEST_CASE("chunk plan: a lost source's chunks go to the others, and a late reply of its is stale") {
  ChunkPlan plan(4, 3, 1);
  const std::vector<ChunkAsk> asks = plan.asks();
  REQUIRE(asks.size() == 6);  // 3 chunks (window 1 per server), each a data and a digest ask
  const ChunkAsk lostData = *std::find_if(
      asks.begin(), asks.end(), [](const ChunkAsk& a) { return a.data && a.source == 2; });
  // Its bytes came, then it failed before the other half of the check.
  CHECK(plan.onData(lostData.chunk, 2, lostData.attempt, digestOf(7)) == ChunkVerdict::waiting);
  const std::vector<std::size_t> dropped = plan.onSourceLost(2);
  CHECK(std::find(dropped.begin(), dropped.end(), lostData.chunk) != dropped.end());
  CHECK_FALSE(plan.alive(2));
  // Every chunk source 2 served or verified is pending again; none is asked of it.
  for (const ChunkAsk& a : plan.asks()) CHECK(a.source != 2);
  CHECK(plan.onDigest(lostData.chunk, 2, lostData.attempt, digestOf(7)) == ChunkVerdict::stale);
  plan.onSourceLost(0);
  CHECK_FALSE(plan.failed());  // source 1 alone checks itself
  plan.onSourceLost(1);
  CHECK(plan.failed());
  CHECK(plan.failure() == "every source failed");
}

TEST_CASE("chunk plan: a silent source is asked again, and lost after three silences in a row") {
  ChunkPlan plan(2, 2, 1);
  std::vector<ChunkAsk> asks = plan.asks();
  REQUIRE(asks.size() == 4);
  // Its replies were lost: what it owes is pending again, and it stays a source.
  plan.onSourceSilent(0);
  CHECK(plan.alive(0));
  asks = plan.asks();
  CHECK_FALSE(asks.empty());
  // A reply between two silences starts the count again.
  for (const ChunkAsk& a : asks) {
    if (a.source == 0 && a.digest) plan.onDigest(a.chunk, 0, a.attempt, digestOf(1));
  }
  plan.onSourceSilent(0);
  plan.onSourceSilent(0);
  CHECK(plan.alive(0));
  plan.onSourceSilent(0);
  CHECK_FALSE(plan.alive(0));
  CHECK_FALSE(plan.failed());  // source 1 goes on alone
}

TEST_CASE("chunk plan: a state of no chunks is done at once") {
  ChunkPlan plan(0, 2, 4);
  CHECK(plan.done());
  CHECK(plan.asks().empty());
}

}  // namespace
}  // namespace gossamer::engine::runtime
