// The simulated world (engine/sim) with compressed payloads: a frame's header bytes are the real
// wire's, dpsgd's bytes per message against the codecs' closed forms, receivers read the decoded
// payloads and error feedback updates the residuals, the simulated models equal the real peers'
// bit for bit, and compressed runs are deterministic and still converge.
#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include <doctest/doctest.h>

#include "algorithms/builtin.h"
#include "engine/base/enforce.h"
#include "engine/runtime/payload_codec.h"
#include "engine/sim/world.h"
#include "kernels/codec.h"
#include "kernels/cpu/cpu_compute.h"
#include "net/mesh/mesh.h"
#include "tests/algorithms/algorithm_testing.h"
#include "tests/engine/sim/sim_testing.h"
#include "tests/support/watchdog.h"

namespace gossamer::engine::sim::testing {
namespace {

// ---- compression --------------------------------------------------------------------------------

PayloadCompression compressionOf(const std::string& codec, bool errorFeedback = true) {
  return {kernels::parseCodec(codec), errorFeedback};
}

// The simulator counts a frame's header as the real transport does: the size of its Cap'n Proto
// envelope (net::EncodedEnvelope, what the mesh counts in bytesSent besides the payloads).
TEST_CASE("sim: a frame's header bytes are the real wire's") {
  net::wire::EnvelopeHeader header;
  header.tag = 77;
  header.kind = 1;
  header.sender = 0x1234567890abcdefull;
  header.step = 12;
  header.payloads = {{4 * 650, net::wire::Dtype::f32, 650, {}}};
  CHECK(net::EncodedEnvelope::of(header)->bytes.size() == kFrameHeaderBytes);
  header.scalars = {0.5};
  header.integers = {1, 2};
  CHECK(net::EncodedEnvelope::of(header)->bytes.size() == kFrameHeaderBytes + 8 * 3);
  header.payloads[0] = {662, net::wire::Dtype::bytes, 650,
                        runtime::encodingOf(kernels::parseCodec("int8:256"))};
  CHECK(net::EncodedEnvelope::of(header)->bytes.size() ==
        kFrameHeaderBytes + 8 * 3 + kEncodingBytes);
}

// dpsgd compressed (CHOCO-SGD) on a ring: the first message of each peer to each neighbour is an
// anchor (float32, with the integers {form, seq} and a request {j, seq} for each neighbour's
// estimate), every later one the codec's encoding of a difference with {form, seq}. Their bytes
// follow from kernels/codec.h's layouts.
TEST_CASE("sim: dpsgd's bytes per message with fp16 and int8 equal their closed form") {
  const Registry registry = algorithms::makeRegistry();
  const std::size_t params = 64 * 10 + 10, steps = 12;
  const double latency = 0.1, bandwidth = 1e6;
  for (const auto& [codec, encoded] : std::vector<std::pair<std::string, std::size_t>>{
           {"none", 4 * params},
           {"fp16", 2 * params},
           {"int8:256", 4 * ((params + 255) / 256) + params}}) {
    CAPTURE(codec);
    SimConfig c = baseConfig(4, "dpsgd", steps);
    c.training.topology = "ring";
    c.training.algorithmOptions["ring-order"] = "id";  // the rule alone: no ring surveys
    c.training.compression = compressionOf(codec);
    c.network = uniform(std::chrono::milliseconds(100), bandwidth);
    const SimResult r = simulate(c, registry, smallData(registry));
    REQUIRE(r.violations.empty());
    const bool compressed = codec != "none";
    const std::size_t integers = compressed ? 2 : 0;
    const double anchor =
        static_cast<double>(kFrameHeaderBytes + 8 * (integers + 2 * integers) + 4 * params);
    const double later = static_cast<double>(kFrameHeaderBytes + 8 * integers +
                                             (compressed ? kEncodingBytes : 0) + encoded);
    for (const SimPeerResult& p : r.peers)
      CHECK(p.bytesSent == static_cast<std::uint64_t>(2 * (anchor + (steps - 1) * later)));
    // Each step waits for the later of its compute and a frame's latency plus serialization.
    const auto stepTime = [&](double bytes) {
      return std::max(0.3, latency + bytes * 8 / bandwidth);
    };
    CHECK(
        r.virtualSeconds ==
        doctest::Approx(stepTime(anchor) + (steps - 1) * stepTime(later) + latency).epsilon(1e-6));
  }
}

// A test-only exchange around the ring 1 -> 2 -> ... -> n -> 1: each step a peer sends its model,
// marked compressible with its residual and `sent` span, and replaces its model with the one it
// receives. The first value it sent last is its metric "sent0".
class RingPass final : public Algorithm {
 public:
  std::string name() const override { return "ring-pass"; }
  void setup(PeerContext& ctx) override {
    residual_.assign(ctx.params().size(), 0.0f);
    sent_.assign(ctx.params().size(), 0.0f);
  }
  double step(PeerContext& ctx) override {
    const std::size_t n = ctx.members().size();
    const PeerId next = ctx.self() % n + 1, previous = (ctx.self() + n - 2) % n + 1;
    const std::uint64_t tag = Tags::forRound(1, ctx.step());
    Message m{.kind = 1, .step = ctx.step(), .tag = tag, .payloads = {ctx.params()}};
    m.compressible = {{.payload = 0, .residual = residual_, .sent = sent_}};
    ctx.send(std::span<const PeerId>(&next, 1), m);
    GatherResult got = ctx.gather(std::span<const PeerId>(&previous, 1), tag, ctx.commTimeout());
    GOSSAMER_ENFORCE_EQ(got.messages.size(), 1u, "ring-pass: no model from peer {}", previous);
    const std::span<const float> received = got.messages[0].payload(0);
    std::copy(received.begin(), received.end(), ctx.params().begin());
    ctx.metrics().set("sent0", sent_[0]);
    return 0;
  }

 private:
  std::vector<float> residual_, sent_;
};

// Two steps of RingPass with int8: peer i ends with C(C(x_i-2) + e_i-1), where C is the codec's
// encode and decode and e_j = x_j - C(x_j) the residual of its first send (0 without error
// feedback), x_j the initial models: what the kernels' codec gives, bit for bit.
TEST_CASE("sim: receivers read the decoded payloads, and error feedback updates the residuals") {
  Registry registry = algorithms::makeRegistry();
  registry.algorithms.add("ring-pass", "test only",
                          AlgorithmSpec{"test only", "ring", {}, [](const OptionValues&) {
                                          return std::make_unique<RingPass>();
                                        }});
  const kernels::Codec codec = kernels::parseCodec("int8:64");
  auto compute = kernels::cpu::makeCompute({.blasThreads = 1});
  const auto roundTrip = [&](const std::vector<float>& x) {
    std::vector<std::byte> bytes(kernels::encodedBytes(codec, x.size()));
    const std::size_t used = compute->encode(codec, x, {}, bytes, 0);
    std::vector<float> out(x.size());
    compute->decode(codec, std::span<const std::byte>(bytes).first(used), out,
                    kernels::DecodeMode::kOverwrite);
    return out;
  };
  const std::size_t n = 4;
  for (const bool feedback : {true, false}) {
    CAPTURE(feedback);
    SimConfig c = baseConfig(n, "ring-pass", 2);
    c.training.initialParams = test::distinctParams;
    c.training.compression = compressionOf("int8:64", feedback);
    c.network = uniform(std::chrono::milliseconds(10));
    const SimResult r = simulate(c, registry, smallData(registry));
    REQUIRE(r.violations.empty());
    REQUIRE(r.finals.size() == n);
    const std::size_t count = r.finals[0].params.size();
    for (std::size_t i = 0; i < n; ++i) {
      const std::vector<float> from = test::distinctParams((i + n - 1) % n, count);
      const std::vector<float> before = test::distinctParams((i + n - 2) % n, count);
      std::vector<float> second = roundTrip(before);  // what peer i-1 holds after step 1
      if (feedback) {
        const std::vector<float> first = roundTrip(from);
        for (std::size_t q = 0; q < count; ++q) second[q] += from[q] - first[q];
      }
      const std::vector<float> expected = roundTrip(second);
      CAPTURE(i);
      CHECK(r.finals[i].params == expected);
      CHECK(r.peers[(i + n - 1) % n].metrics.at("sent0") == expected[0]);
      CHECK((r.finals[i].params != roundTrip(roundTrip(before))) == feedback);
    }
  }
}

// Real peers of a local cluster (ids 1..N, as the simulator's) whose dpsgd rounds are
// synchronous end with models that depend on nothing but the data and the codec: the simulated
// ones must be the same bits, random-k's draws included.
TEST_CASE("sim: compressed dpsgd ends with the real peers' models, bit for bit") {
  test::Watchdog watchdog(120s);
  for (const std::string codec : {"int8", "randk:0.25"}) {
    CAPTURE(codec);
    runtime::ClusterConfig real = test::algorithmCluster("dpsgd", 4, 20);
    real.peer.training.topology = "ring";
    real.peer.training.compression = compressionOf(codec);
    const runtime::ClusterResult got =
        runtime::runLocalCluster(real, test::registry(), test::smallData());
    SimConfig c;
    c.peers = 4;
    c.training = real.peer.training;
    c.network = net::shaped::NetworkProfile::lan();
    const SimResult simulated = simulate(c, test::registry(), test::smallData());
    REQUIRE(simulated.violations.empty());
    REQUIRE(got.finals.size() == 4);
    REQUIRE(simulated.finals.size() == 4);
    for (std::size_t i = 0; i < 4; ++i) {
      CAPTURE(i);
      CHECK(simulated.finals[i].params == got.finals[i].params);
      CHECK(simulated.peers[i].bytesSent == got.peers[i].bytesSent);
    }
  }
}

TEST_CASE("sim: a compressed run is deterministic, random-k draws from the seed") {
  const Registry registry = algorithms::makeRegistry();
  for (const std::string algorithm : {"dpsgd", "gosgd"}) {
    CAPTURE(algorithm);
    auto run = [&](std::uint64_t seed, const std::string& codec) {
      SimConfig c = chaosConfig(seed, algorithm);
      c.training.compression = compressionOf(codec);
      return format(simulate(c, registry, smallData(registry)));
    };
    const std::string a = run(7, "randk:0.1");
    CHECK(a == run(7, "randk:0.1"));
    CHECK(a != run(7, "int8"));
    CHECK(a != run(7, "none"));
  }
}

TEST_CASE("sim: compressed dpsgd and gosgd still converge") {
  const Registry registry = algorithms::makeRegistry();
  for (const std::string algorithm : {"dpsgd", "gosgd"}) {
    for (const std::string codec : {"int8", "topk:0.1"}) {
      CAPTURE(algorithm);
      CAPTURE(codec);
      auto run = [&](const std::string& with) {
        SimConfig c = baseConfig(8, algorithm, 150);
        c.training.compression = compressionOf(with);
        c.network = net::shaped::NetworkProfile::lan();
        return simulate(c, registry, smallData(registry));
      };
      const SimResult plain = run("none");
      const SimResult compressed = run(codec);
      REQUIRE(compressed.violations.empty());
      MESSAGE(algorithm, " ", codec, ": ", compressed.consensus.accuracy, " (float32 ",
              plain.consensus.accuracy, ")");
      CHECK(compressed.consensus.accuracy > plain.consensus.accuracy - 0.05);
      // gosgd's few transfers (p = 0.1) are mostly anchors to new partners, in float32.
      if (algorithm == "dpsgd") CHECK(compressed.peers[0].bytesSent < plain.peers[0].bytesSent / 2);
    }
  }
}

}  // namespace
}  // namespace gossamer::engine::sim::testing
