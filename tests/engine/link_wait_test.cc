// PeerNetwork::send without an open link: the sends to one address wait for one attempt to open
// it, at most NetworkConfig::linkWaitLimit of them; the others fail at once, so that a dead
// peer's closed port, retried for the whole connect timeout, never holds more than that many of
// the sender's send slots (under load, a survivor of a kill -9 used to run out of them).
#include <chrono>
#include <memory>
#include <vector>

#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/ip/tcp.hpp>
#include <doctest/doctest.h>

#include "engine/runtime/network.h"
#include "tests/algorithms/algorithm_testing.h"
#include "tests/support/watchdog.h"

namespace gossamer::engine::runtime {
namespace {

using namespace std::chrono_literals;

// A port on 127.0.0.1 where nothing listens (bound, then closed: connects are refused).
net::Endpoint closedPort() {
  asio::io_context io;
  asio::ip::tcp::acceptor acceptor(io, {asio::ip::make_address("127.0.0.1"), 0});
  const unsigned short port = acceptor.local_endpoint().port();
  acceptor.close();
  return net::Endpoint{"127.0.0.1", port};
}

TEST_CASE("link wait: sends beyond the limit to an address that cannot be reached fail at once") {
  test::Watchdog watchdog(60s);
  NetworkConfig config;
  config.transport = "tcp";
  config.secret = std::vector<std::byte>(32, std::byte{7});
  config.membership = net::membership::Options::local();
  config.connectTimeout = 1500ms;  // the refused port is retried this long
  config.linkWaitLimit = 3;
  prepareTransport(config, test::registry());
  PeerNetwork network(config, 1);
  network.start(PeerNetwork::Handlers{.target = {},
                                      .envelope = [](const net::Remote&, net::wire::EnvelopeHeader,
                                                     std::vector<net::Payload>) {},
                                      .membershipChanged = [](const net::membership::Event&) {},
                                      .registerMemory = [](net::Transport&) {},
                                      .deviceMemory = {}},
                net::wire::ModelFingerprint{16, "f32", 0x5eed}, 1);

  struct Outcome {
    std::error_code error;
    Clock::duration after{};
    bool done = false;
  };
  constexpr std::size_t kSends = 7;
  std::vector<Outcome> outcomes(kSends);
  const net::Endpoint nobody = closedPort();
  const Clock::time_point start = Clock::now();
  runOn(network.io(), [&] {
    net::wire::EnvelopeHeader header;
    header.sender = 1;
    const auto envelope = net::EncodedEnvelope::of(header);
    for (std::size_t i = 0; i < kSends; ++i) {
      asio::co_spawn(
          network.io(),
          [&, i, envelope]() -> asio::awaitable<void> {
            outcomes[i].error = co_await network.send(nobody, net::Channel::control, envelope, {});
            outcomes[i].after = Clock::now() - start;
            outcomes[i].done = true;
          },
          asio::detached);
    }
    return 0;
  });
  const Clock::time_point deadline = Clock::now() + 30s;
  auto allDone = [&] {
    return runOn(network.io(), [&] {
      for (const Outcome& o : outcomes)
        if (!o.done) return false;
      return true;
    });
  };
  while (!allDone() && Clock::now() < deadline) std::this_thread::sleep_for(20ms);
  REQUIRE(allDone());
  network.shutdown();
  // The first three waited for the attempt and failed with it; the rest failed at once.
  for (std::size_t i = 0; i < kSends; ++i) {
    INFO("send " << i << ": " << outcomes[i].error.message() << " after "
                 << std::chrono::duration_cast<std::chrono::milliseconds>(outcomes[i].after).count()
                 << " ms");
    CHECK(outcomes[i].error);
    if (i < config.linkWaitLimit) {
      CHECK(outcomes[i].error != asio::error::no_buffer_space);
      CHECK(outcomes[i].after >= 1000ms);
    } else {
      CHECK(outcomes[i].error == asio::error::no_buffer_space);
      CHECK(outcomes[i].after < 1000ms);
    }
  }
}

}  // namespace
}  // namespace gossamer::engine::runtime
