// The runtime's parts alone (engine/runtime/README.md): the control codec, the message queue's
// gather, and staging (sends in place, staging order, pooled device buffers).
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <asio/error.hpp>
#include <doctest/doctest.h>

#include "engine/runtime/control.h"
#include "engine/runtime/control_codec.h"
#include "engine/runtime/join_failure.h"
#include "engine/runtime/membership_rules.h"
#include "engine/runtime/message_queue.h"
#include "engine/runtime/messenger.h"
#include "engine/runtime/network.h"
#include "engine/runtime/peer_state.h"
#include "engine/runtime/snapshots.h"
#include "engine/runtime/staging.h"
#include "engine/runtime/stall_watch.h"
#include "kernels/cpu/cpu_compute.h"
#include "net/errors.h"
#include "tests/support/guarded_compute.h"

namespace gossamer::engine::runtime {
namespace {

using namespace std::chrono_literals;

// ---- join failure ------------------------------------------------------------------------------

TEST_CASE("runtime parts: a join failure names the cause its seeds share, else each seed's") {
  using net::membership::SeedFailure;
  const net::Endpoint a{"10.0.0.1", 7000};
  const net::Endpoint b{"10.0.0.2", 7000};
  const auto of = [](std::vector<SeedFailure> failures) {
    return JoinFailure::of(failures, 2000ms);
  };
  const JoinFailure secret = of({{a, net::Errc::authenticationFailed, "the server's proof failed"},
                                 {b, net::Errc::authenticationFailed, ""}});
  CHECK(secret.commonCause() == JoinCause::authentication);
  CHECK(secret.describe() ==
        "could not join the cluster within 2 s (--join-timeout): every seed refused "
        "authentication (wrong --secret-file?)");
  CHECK(of({{a, asio::error::connection_refused, ""}, {b, asio::error::timed_out, ""}}).cause() ==
        "every seed was unreachable: 10.0.0.1:7000 (connection refused), 10.0.0.2:7000 "
        "(connection timed out)");
  // Not tried yet counts as unreachable.
  CHECK(of({{a, {}, ""}}).cause() == "every seed was unreachable: 10.0.0.1:7000 (no answer yet)");
  const std::string differs = "model fingerprint differs: parameters 10 here vs 20 remote";
  CHECK(of({{a, net::Errc::modelMismatch, differs}, {b, net::Errc::modelMismatch, differs}})
            .cause() == "the cluster's model differs from this peer's (" + differs +
                            "; check --model and --hidden)");
  CHECK(
      of({{a, net::Errc::clusterMismatch, "cluster id differs: 'x' here vs 'y' remote"}}).cause() ==
      "every seed belongs to another cluster (cluster id differs: 'x' here vs "
      "'y' remote; check --cluster-id)");
  CHECK(of({{a, net::Errc::versionMismatch, "protocol version differs: 1 here vs 2 remote"}})
            .commonCause() == JoinCause::version);
  // TLS on one side only, whichever side: named as a TLS disagreement with the link's words.
  const JoinFailure tls = of({{a, net::Errc::peerSpeaksTls, "the peer speaks TLS"},
                              {b, net::Errc::peerSpeaksPlaintext, "the peer speaks plaintext"}});
  CHECK(tls.commonCause() == JoinCause::tls);
  CHECK(tls.cause() == "the seeds and this peer disagree on TLS (the peer speaks TLS)");
  // Seeds that fail differently are named each with its cause; remote text stays on one line.
  const JoinFailure mixed =
      of({{a, asio::error::timed_out, ""}, {b, net::Errc::joinRefused, "no\nroom"}});
  CHECK(!mixed.commonCause());
  CHECK(mixed.cause() ==
        "the seeds failed differently: 10.0.0.1:7000 was unreachable (connection timed out); "
        "10.0.0.2:7000 refused to admit this peer (no?room)");
  CHECK(JoinFailure::of({}, 500ms).describe() ==
        "could not join the cluster within 0.5 s (--join-timeout): it has no seed to join through");
}

// ---- control codec -----------------------------------------------------------------------------

TEST_CASE("runtime parts: every control message survives encode and decode") {
  const std::vector<control::Message> messages = {
      control::StatusRequest{},
      control::StatusRequest{.life = 1'764'000'000'123},
      control::Status{.training = true,
                      .step = 1ull << 40,
                      .totalSteps = 123456789,
                      .expected = true,
                      .members = 7},
      control::Status{.step = 400, .totalSteps = 400, .members = 3, .done = true},
      control::Status{.training = true, .step = 9, .totalSteps = 360, .runSteps = 120},
      control::Finished{0},
      control::Finished{1},
      control::Released{0},
      control::Released{1},
      control::PullModel{},
      control::Model{},
      control::Speed{.stepSeconds = 0.3, .samplesPerSecond = 213.5, .step = 42},
  };
  for (const control::Message& message : messages) {
    control::Message decoded;
    CAPTURE(message.index());
    REQUIRE_FALSE(control::decode(control::encode(message), decoded));
    CHECK(decoded == message);
  }
}

TEST_CASE("runtime parts: malformed control bytes are refused as values, never thrown") {
  control::Message out;
  CHECK(control::decode({}, out) == net::Errc::malformedMessage);
  const std::vector<std::byte> good = control::encode(control::Status{.step = 5});
  for (std::size_t cut = 0; cut < good.size(); ++cut)  // every truncation
    CHECK(control::decode(std::span(good).first(cut), out));
  // A mark on a channel that does not exist.
  for (const control::Message& bad :
       {control::Message{control::Finished{2}}, control::Message{control::Released{7}},
        control::Message{control::Speed{.stepSeconds = -1}},
        control::Message{control::Speed{.samplesPerSecond = std::nan("")}}})
    CHECK(control::decode(control::encode(bad), out) == net::Errc::malformedMessage);
  // Garbage and a segment table claiming more than the bytes hold.
  std::vector<std::byte> garbage(64, std::byte{0xff});
  CHECK(control::decode(garbage, out));
  std::vector<std::byte> huge = good;
  huge[4] = std::byte{0xff};
  huge[5] = std::byte{0xff};
  CHECK(control::decode(huge, out));
}

// ---- cluster control ---------------------------------------------------------------------------

// A peer's `finished` (and `released`) counts only when its mark came on both links: the mark on
// one link can overtake the last data the peer sent on the other (a ring all-reduce then saw
// its left neighbour as finished while its abort or last chunk was still on the way).
TEST_CASE("runtime parts: a peer has finished or released only when both of its marks came") {
  NetworkConfig config;
  config.transportMaker = [](const TransportEnvironment&) -> std::unique_ptr<net::Transport> {
    return nullptr;  // never started
  };
  PeerNetwork network(config, 1);
  auto compute = kernels::cpu::makeCompute({.blasThreads = 1});
  Staging staging(*compute, 16, {});
  PayloadCodec codec(
      *compute, *compute, {}, 1, [](std::size_t) { return net::Payload(); }, 1024);
  Messenger messenger(network, staging, codec);
  SnapshotBoard snapshots(1);
  LoopStatus status;
  ClusterControl control(network, messenger, snapshots, status);
  Incoming from2;
  from2.from = 2;
  control.onMessage(from2, control::encode(control::Finished{1}));  // the data link's
  CHECK_FALSE(control.hasFinished(2));
  control.onMessage(from2, control::encode(control::Released{0}));
  CHECK_FALSE(control.hasReleased(2));
  control.onMessage(from2, control::encode(control::Finished{0}));  // and the control link's
  CHECK(control.hasFinished(2));
  CHECK_FALSE(control.hasReleased(2));
  control.onMessage(from2, control::encode(control::Released{1}));
  CHECK(control.hasReleased(2));
  CHECK_FALSE(control.hasFinished(3));
  // A malformed control message is dropped with a warning; nothing changes.
  Incoming from3;
  from3.from = 3;
  control.onMessage(from3, std::vector<std::byte>(8, std::byte{0xff}));
  CHECK_FALSE(control.hasFinished(3));
}

// ---- membership rules --------------------------------------------------------------------------

TEST_CASE(
    "runtime parts: every change of the view in every phase has its rule, and the log names it") {
  using net::membership::EventKind;
  LoopStatus status;
  CHECK(phaseOf(status) == RunPhase::waiting);
  status.training = true;
  CHECK(phaseOf(status) == RunPhase::training);
  status.loopEnded = true;
  CHECK(phaseOf(status) == RunPhase::finishing);
  status.released = true;
  CHECK(phaseOf(status) == RunPhase::released);
  for (EventKind kind :
       {EventKind::joined, EventKind::rejoined, EventKind::left, EventKind::failed})
    for (RunPhase phase :
         {RunPhase::waiting, RunPhase::training, RunPhase::finishing, RunPhase::released})
      CHECK(std::string(ruleFor(kind, phase)) != "?");
  net::membership::Event failed{.kind = EventKind::failed, .member = {.id = 3}, .epoch = 7};
  const std::string line = describeChange(1, failed, RunPhase::finishing, 2);
  CHECK(line.find("0000000000000003") != std::string::npos);
  CHECK(line.find("failed while this peer is finishing") != std::string::npos);
  CHECK(line.find(ruleFor(EventKind::failed, RunPhase::finishing)) != std::string::npos);
  CHECK(line.find("; 2 members") != std::string::npos);
}

// ---- stall watch -------------------------------------------------------------------------------

// A watch over a status the test drives: the timeout, the recheck at it and the verdict at twice
// it, counted.
struct WatchedStatus {
  LoopStatus status;
  std::atomic<int> rechecks{0}, giveUps{0};
  std::unique_ptr<StallWatch> watch;
  explicit WatchedStatus(std::chrono::milliseconds timeout) {
    status.training = true;
    status.totalSteps = 100;
    watch = std::make_unique<StallWatch>(
        1, status, timeout, 10s,
        StallWatch::Actions{.recheck = [this] { ++rechecks; },
                            .giveUp = [this](const std::string&) { ++giveUps; }});
  }
};

bool eventually(const std::atomic<int>& count, int value) {
  const auto deadline = Clock::now() + 10s;
  while (count < value && Clock::now() < deadline) std::this_thread::sleep_for(5ms);
  return count >= value;
}

TEST_CASE(
    "runtime parts: a step that waits on others past the stall timeout is re-checked, then given "
    "up") {
  WatchedStatus s(300ms);
  s.status.step = 42;
  const Clock::time_point start = Clock::now();
  {
    const WaitBoard::Scope waiting(s.status.waits, "a gather", {2, 3});
    REQUIRE(eventually(s.rechecks, 1));
    const Clock::duration atRecheck = Clock::now() - start;
    CHECK(atRecheck >= 300ms);
    if (atRecheck < 600ms) CHECK(s.giveUps == 0);  // not before twice the timeout
    REQUIRE(eventually(s.giveUps, 1));
    CHECK(Clock::now() - start >= 600ms);
  }
  CHECK(s.rechecks == 1);
  CHECK(s.giveUps == 1);
  const std::optional<std::string> verdict = s.watch->verdict();
  REQUIRE(verdict.has_value());
  CHECK(verdict->find("step 42 of 100") != std::string::npos);
  CHECK(verdict->find("a gather from 0000000000000002, 0000000000000003") != std::string::npos);
}

TEST_CASE("runtime parts: steps that progress, compute and time outside a wait are never a stall") {
  WatchedStatus s(1s);
  // Waiting, but the step moves on well within the timeout each time.
  for (int i = 0; i < 8; ++i) {
    const WaitBoard::Scope waiting(s.status.waits, "a message in the inbox");
    std::this_thread::sleep_for(100ms);
    ++s.status.step;
  }
  // No step for long, but no wait either (the caller's own time, a slow compute).
  std::this_thread::sleep_for(2500ms);
  // A wait after the loop ended (the finish has its own bounds).
  s.status.loopEnded = true;
  {
    const WaitBoard::Scope waiting(s.status.waits, "a gather", {2});
    std::this_thread::sleep_for(2500ms);
  }
  CHECK(s.rechecks == 0);
  CHECK(s.giveUps == 0);
  CHECK_FALSE(s.watch->verdict().has_value());
}

TEST_CASE("runtime parts: the default stall timeout is three comm timeouts, or ten mean steps") {
  LoopStatus status;
  StallWatch watch(1, status, 0ms, 2s, {});
  CHECK(watch.timeout() == 6s);
  status.step = 10;
  status.trainSeconds = 10.0;  // 1 s a step
  CHECK(watch.timeout() == 10s);
  StallWatch configured(1, status, 1500ms, 2s, {});
  CHECK(configured.timeout() == 1500ms);
}

// ---- message queue -----------------------------------------------------------------------------

Incoming from(PeerId peer, std::uint64_t tag) {
  Incoming m;
  m.from = peer;
  m.tag = tag;
  return m;
}

TEST_CASE("runtime parts: gather takes one message per peer by tag, in the order asked") {
  MessageQueue queue;
  queue.push(from(2, 9));
  queue.push(from(3, 7));  // another round's: stays queued
  queue.push(from(3, 9));
  const std::vector<PeerId> peers = {3, 2};
  const GatherResult got = gather(queue, peers, 9, Clock::now() + 1s, [](PeerId) { return false; });
  REQUIRE(got.messages.size() == 2);
  CHECK(got.messages[0].from == 3);
  CHECK(got.messages[1].from == 2);
  CHECK(got.missing.empty());
  CHECK(queue.size() == 1);
}

TEST_CASE("runtime parts: gather ends at its deadline, or early when the missing peer is gone") {
  MessageQueue queue;
  const std::vector<PeerId> peers = {4};
  auto start = Clock::now();
  GatherResult got = gather(queue, peers, 1, start + 100ms, [](PeerId) { return false; });
  CHECK(got.missing == peers);
  CHECK(Clock::now() - start >= 100ms);

  // Gone, but what it sent before is still taken.
  queue.push(from(4, 1));
  got = gather(queue, peers, 1, Clock::now() + 10s, [](PeerId) { return true; });
  CHECK(got.messages.size() == 1);

  // Gone while waited for: the wait ends with the wake, long before the deadline.
  std::atomic<bool> gone{false};
  std::thread leaver([&] {
    std::this_thread::sleep_for(50ms);
    gone = true;
    queue.wake();
  });
  start = Clock::now();
  got = gather(queue, peers, 1, start + 10s, [&](PeerId) { return gone.load(); });
  leaver.join();
  CHECK(got.missing == peers);
  CHECK(Clock::now() - start < 5s);
}

// ---- staging -----------------------------------------------------------------------------------

// Staging over a device-like Compute (tests/support/guarded_compute.h): it says it is CUDA, its
// allocations are device memory that faults on host access, and its asynchronous copies land
// when the test says so, in any order.

TEST_CASE("runtime parts: on the CPU a send with an owner leaves from where it is, others copy") {
  auto compute = kernels::cpu::makeCompute({.blasThreads = 1});
  Staging staging(*compute, 64 * sizeof(float), {});
  auto params = std::make_shared<std::vector<float>>(64, 1.5f);
  Message owned{.payloads = {std::span<const float>(*params)}, .owner = params};
  std::vector<StagedBytes> sent;
  REQUIRE(
      staging.stageFromCompute(owned, 1s, [&](StagedBytes b) { sent.push_back(std::move(b)); }));
  REQUIRE(sent.size() == 1);  // at once: nothing was in flight
  CHECK(sent[0].spans[0].data() == reinterpret_cast<const std::byte*>(params->data()));
  CHECK(sent[0].owner == params);  // the transport keeps the params alive while it sends

  Message copied{.payloads = {std::span<const float>(*params)}};
  REQUIRE(
      staging.stageFromCompute(copied, 1s, [&](StagedBytes b) { sent.push_back(std::move(b)); }));
  REQUIRE(sent.size() == 2);
  CHECK(sent[1].spans[0].data() != reinterpret_cast<const std::byte*>(params->data()));
  CHECK(std::memcmp(sent[1].spans[0].data(), params->data(), 64 * sizeof(float)) == 0);
}

TEST_CASE("runtime parts: staged sends leave in staging order whatever order their copies land") {
  test::GuardedCompute compute;
  compute.deferAsyncCopies(true);
  Staging staging(compute, 16 * sizeof(float), {});
  kernels::Buffer<float> a = compute.allocate<float>(16), b = compute.allocate<float>(16);
  compute.fill(a.span(), 1.0f);
  compute.fill(b.span(), 2.0f);
  std::vector<std::string> order;
  auto record = [&](std::string name) {
    return [&order, name](StagedBytes) { order.push_back(name); };
  };
  // Device memory is copied off even with an owner; a mark without payloads waits its turn.
  REQUIRE(staging.stageFromCompute(Message{.payloads = {a.span()}}, 1s, record("a")));
  REQUIRE(staging.stageFromCompute(Message{.payloads = {b.span()}}, 1s, record("b")));
  REQUIRE(staging.stageFromCompute(Message{.step = 3}, 1s, record("mark")));
  CHECK(order.empty());
  compute.landInReverse();  // b's copy lands before a's
  CHECK(order == std::vector<std::string>{"a", "b", "mark"});
}

TEST_CASE("runtime parts: received payloads go to pooled device buffers, overflow is counted") {
  test::GuardedCompute compute;
  const std::size_t slots = 3;
  Staging staging(compute, 8 * sizeof(float), {.receiveSlots = slots});
  const std::size_t preallocated = compute.allocations();
  CHECK(preallocated == slots);
  const std::vector<float> host(8, 0.25f);
  for (int round = 0; round < 5; ++round) {  // uploads released each round: slots reused
    DeviceView view = staging.upload(host);
    CHECK(compute.isDeviceMemory(view.span().data()));
    std::vector<float> back(8);
    compute.download(std::span<float>(back), view.span());
    CHECK(back == host);
  }
  CHECK(staging.deviceOverflows() == 0);
  CHECK(compute.allocations() == preallocated);
  std::vector<DeviceView> held;
  for (std::size_t i = 0; i < slots + 1; ++i) held.push_back(staging.upload(host));
  CHECK(staging.deviceOverflows() == 1);  // the fourth held at once had no slot
  held.clear();
  CHECK(compute.allocations() == preallocated);  // the overflow buffer went with its view
}

}  // namespace
}  // namespace gossamer::engine::runtime
