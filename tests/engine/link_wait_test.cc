// PeerNetwork::send without an open link: the sends to one address wait for one attempt to open
// it; where a link was open before and broke, at most NetworkConfig::linkWaitLimit of them, the
// others failing at once, so that a dead peer's closed port, retried for the whole connect
// timeout, never holds more than that many of the sender's send slots (under load, a survivor of
// a kill -9 used to run out of them).
#include <algorithm>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <doctest/doctest.h>

#include "engine/runtime/network.h"
#include "tests/algorithms/algorithm_testing.h"
#include "tests/support/watchdog.h"

namespace gossamer::engine::runtime {
namespace {

using namespace std::chrono_literals;

NetworkConfig tcpConfig() {
  NetworkConfig config;
  config.transport = "tcp";
  config.secret = std::vector<std::byte>(32, std::byte{7});
  config.membership = net::membership::Options::local();
  config.connectTimeout = 1500ms;  // a dead peer's closed port is retried this long
  config.linkWaitLimit = 3;
  prepareTransport(config, test::registry());
  return config;
}

PeerNetwork::Handlers quietHandlers() {
  return PeerNetwork::Handlers{
      .target = {},
      .envelope = [](const net::Remote&, net::wire::EnvelopeHeader, std::vector<net::Payload>) {},
      .membershipChanged = [](const net::membership::Event&) {},
      .registerMemory = [](net::Transport&) {},
      .deviceMemory = {}};
}

struct Outcome {
  std::error_code error;
  Clock::duration after{};
  bool done = false;
};

// `count` sends from `network` to `to` at once; their outcomes once all have ended.
std::vector<Outcome> sendAtOnce(PeerNetwork& network, const net::Endpoint& to, std::size_t count) {
  std::vector<Outcome> outcomes(count);
  const Clock::time_point start = Clock::now();
  runOn(network.io(), [&] {
    net::wire::EnvelopeHeader header;
    header.sender = 1;
    const auto envelope = net::EncodedEnvelope::of(header);
    for (std::size_t i = 0; i < count; ++i) {
      asio::co_spawn(
          network.io(),
          [&, i, envelope]() -> asio::awaitable<void> {
            outcomes[i].error = co_await network.send(to, net::Channel::control, envelope, {});
            outcomes[i].after = Clock::now() - start;
            outcomes[i].done = true;
          },
          asio::detached);
    }
    return 0;
  });
  const auto allDone = [&] {
    return runOn(network.io(), [&] {
      return std::all_of(outcomes.begin(), outcomes.end(), [](const Outcome& o) { return o.done; });
    });
  };
  const Clock::time_point deadline = Clock::now() + 30s;
  while (!allDone() && Clock::now() < deadline) std::this_thread::sleep_for(20ms);
  REQUIRE(allDone());
  return outcomes;
}

std::string describe(const Outcome& o) {
  return o.error.message() + " after " +
         std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(o.after).count()) +
         " ms";
}

TEST_CASE("link wait: the first opening of a link takes every send, a broken one takes a few") {
  test::Watchdog watchdog(60s);
  const NetworkConfig config = tcpConfig();
  PeerNetwork sender(config, 1);
  sender.start(quietHandlers(), net::wire::ModelFingerprint{16, "f32", 0x5eed}, 1);
  auto receiver = std::make_unique<PeerNetwork>(config, 2);
  receiver->start(quietHandlers(), net::wire::ModelFingerprint{16, "f32", 0x5eed}, 1);
  const net::Endpoint address = receiver->endpoint();

  // The first link: a burst of sends, more than the limit, all go.
  for (const Outcome& o : sendAtOnce(sender, address, 7)) {
    INFO(describe(o));
    CHECK_FALSE(o.error);
  }
  // The receiver dies: its link breaks, and its port refuses (retried for the connect timeout).
  receiver->shutdown();
  receiver.reset();
  std::this_thread::sleep_for(300ms);  // the sender sees the link close
  const std::vector<Outcome> outcomes = sendAtOnce(sender, address, 7);
  sender.shutdown();
  // At most three wait for a new link and fail with its attempt; the rest fail at once.
  std::size_t waited = 0;
  for (const Outcome& o : outcomes) {
    INFO(describe(o));
    CHECK(o.error);
    if (o.error == asio::error::no_buffer_space) {
      CHECK(o.after < 1000ms);
    } else {
      ++waited;
    }
  }
  CHECK(waited >= 1);
  CHECK(waited <= config.linkWaitLimit + 1);  // one may meet the link before it is seen closed
  CHECK(outcomes.size() - waited >= 3);
}

}  // namespace
}  // namespace gossamer::engine::runtime
