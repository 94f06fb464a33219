// Relays in the SWIM Protocol (net/membership/protocol_relay.cc), driven by hand through a fake
// Environment: once a hole punch to another dial-out-only member failed, the link goes through
// the member with the shortest probe round trip, then the next when one fails, and a member
// that refused (--relay off) is not asked again.
#include <doctest/doctest.h>

#include "net/membership/protocol.h"
#include "tests/net/fake_membership_env.h"

namespace gossamer::net::membership {
namespace {

using namespace std::chrono_literals;
using testing::at;
using testing::dialOutOnly;
using testing::FakeEnvironment;
using testing::member;

// Answers this peer's pings to each member in `delays` after that long, for `span` of time.
void answerPings(FakeEnvironment& env, Protocol& protocol,
                 const std::map<std::uint64_t, std::chrono::milliseconds>& delays,
                 std::chrono::milliseconds span) {
  std::map<std::size_t, Environment::Clock::time_point> seen;  // sent index -> when
  for (auto t = 0ms; t < span; t += 1ms) {
    env.advance(1ms);
    for (std::size_t i = 0; i < env.sent.size(); ++i) {
      const auto* ping = std::get_if<wire::Ping>(&env.sent[i].message);
      const std::uint64_t to = env.sent[i].to.port;
      if (ping == nullptr || !delays.count(to)) continue;
      const auto [it, fresh] = seen.try_emplace(i, env.now());
      if (it->second == Environment::Clock::time_point::max()) continue;  // answered
      if (env.now() - it->second >= delays.at(to)) {
        it->second = Environment::Clock::time_point::max();
        protocol.handle(Remote{to, at(to), ""}, wire::Ack{to, ping->sequence, {}});
      }
    }
  }
}

TEST_CASE("membership relay: after a failed punch the nearest member relays, then the next") {
  FakeEnvironment env;
  Config config;
  config.noInbound = true;
  config.members = {member(2), member(3), dialOutOnly(4)};
  Protocol protocol(env, config);
  protocol.start();
  // 3 answers probes in 5 ms, 2 in 40 ms.
  answerPings(env, protocol, {{2, 40ms}, {3, 5ms}}, 5s);
  // Before any punch failed, a link to 4 is asked of rendezvous, not relays.
  CHECK(protocol.requestReversal(at(4), Channel::data));
  CHECK(env.relays.empty());
  // 2 introduces the two; the punch fails (a NAT that picks ports at random).
  protocol.handle(Remote{2, at(2), ""}, wire::Punch{1, 4, 1, "203.0.113.11", "203.0.113.12", true});
  REQUIRE(env.punches.size() == 1);
  env.punches[0].done(LinkOutcome{std::make_error_code(std::errc::timed_out), {}, {}});
  env.advance(1ms);
  // Now the link goes through a relay: the nearest first.
  CHECK(protocol.requestReversal(at(4), Channel::data));
  REQUIRE(env.relays.size() == 1);
  CHECK(env.relays[0].via == at(3));
  CHECK(env.relays[0].member == at(4));
  CHECK(env.relays[0].expected == 4);
  CHECK(env.relays[0].channel == Channel::data);
  // One attempt at a time.
  CHECK(protocol.requestReversal(at(4), Channel::control));
  CHECK(env.relays.size() == 1);
  // 3 has no link to 4: the next one, 2, which refuses (relaying is off there).
  env.relays[0].done(LinkOutcome{asio::error::connection_refused, "no open link", {}});
  env.advance(1ms);
  REQUIRE(env.relays.size() == 2);
  CHECK(env.relays[1].via == at(2));
  env.relays[1].done(
      LinkOutcome{asio::error::connection_refused, "this member does not relay (--relay off)", {}});
  env.advance(1ms);
  CHECK(env.relays.size() == 2);  // nobody left to ask
  // The next request asks 3 again, never 2.
  CHECK(protocol.requestReversal(at(4), Channel::data));
  REQUIRE(env.relays.size() == 3);
  CHECK(env.relays[2].via == at(3));
  env.relays[2].done(LinkOutcome{{}, {}, Remote{4, at(4), "relayed by fake:3"}});
  env.advance(1ms);
  // Relayed: the next attempt (after this link ends) starts afresh, with 3 alone.
  CHECK(protocol.requestReversal(at(4), Channel::data));
  REQUIRE(env.relays.size() == 4);
  CHECK(env.relays[3].via == at(3));
}

TEST_CASE("membership relay: without a member that can be dialed nobody relays") {
  FakeEnvironment env;
  Config config;
  config.noInbound = true;
  config.members = {dialOutOnly(4), dialOutOnly(5)};
  Protocol protocol(env, config);
  protocol.start();
  protocol.handle(Remote{5, at(5), ""}, wire::Punch{1, 4, 1, "a", "b", true});
  CHECK(env.punches.empty());  // 5 is no rendezvous (dial-out only)
  CHECK_FALSE(protocol.requestReversal(at(4), Channel::data));
  CHECK(env.relays.empty());
}

}  // namespace
}  // namespace gossamer::net::membership
