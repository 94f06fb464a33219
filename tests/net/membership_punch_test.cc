// Hole punching in the SWIM Protocol (net/membership/protocol_punch.cc), driven by hand through a
// fake Environment: a dial-out-only peer that needs a link to another asks members to introduce
// the two; a rendezvous linked to both sends each the host it sees the other at; each end then
// punches to the other's host at its advertised port, the lower id leading the handshake; behind
// one NAT the lead connects to the advertised address. Requests that do not fit are ignored.
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
using testing::sentOf;

TEST_CASE("membership punch: two dial-out-only peers ask members that can be dialed to meet them") {
  FakeEnvironment env;
  Config config;
  config.noInbound = true;
  config.members = {member(2), member(3), dialOutOnly(4)};
  Protocol protocol(env, config);
  protocol.start();
  env.sent.clear();
  CHECK(protocol.requestReversal(at(4), Channel::data));
  const auto requests = sentOf<wire::Punch>(env);
  REQUIRE(requests.size() == 2);
  for (const auto& sent : env.sent) CHECK((sent.to == at(2) || sent.to == at(3)));
  CHECK(requests[0] == wire::Punch{1, 4, 1, "", "", false});
  // Members that can be dialed are dialed.
  CHECK_FALSE(protocol.requestReversal(at(2), Channel::data));
}

TEST_CASE("membership punch: without a member that can be dialed nobody is asked") {
  FakeEnvironment env;
  Config config;
  config.noInbound = true;
  config.members = {dialOutOnly(4), dialOutOnly(5)};
  Protocol protocol(env, config);
  protocol.start();
  env.sent.clear();
  CHECK_FALSE(protocol.requestReversal(at(4), Channel::data));
  CHECK(env.sent.empty());
}

TEST_CASE("membership punch: a rendezvous introduces the two with the hosts it sees them at") {
  FakeEnvironment env;
  Config config;
  config.members = {dialOutOnly(2), member(3), dialOutOnly(4)};
  Protocol protocol(env, config);
  protocol.start();
  env.sent.clear();
  const Remote requester{2, at(2), "203.0.113.11:40000"};
  // No open link to the target: nothing to pass on.
  protocol.handle(requester, wire::Punch{2, 4, 1, "", "", false});
  CHECK(env.sent.empty());
  env.observed[at(4)] = "203.0.113.12:51000";
  // Only for the requester itself, between two live dial-out-only members, on a valid channel.
  protocol.handle(Remote{3, at(3), "198.51.100.3:1"}, wire::Punch{2, 4, 1, "", "", false});
  protocol.handle(requester, wire::Punch{2, 3, 1, "", "", false});  // 3 can be dialed
  protocol.handle(requester, wire::Punch{2, 9, 1, "", "", false});  // unknown
  protocol.handle(requester, wire::Punch{2, 4, 7, "", "", false});  // no such channel
  CHECK(env.sent.empty());
  protocol.handle(requester, wire::Punch{2, 4, 1, "", "", false});
  REQUIRE(env.sent.size() == 2);
  const wire::Punch introduced{2, 4, 1, "203.0.113.11", "203.0.113.12", true};
  CHECK(env.sent[0].to == at(2));
  CHECK(std::get<wire::Punch>(env.sent[0].message) == introduced);
  CHECK(env.sent[1].to == at(4));
  CHECK(std::get<wire::Punch>(env.sent[1].message) == introduced);
}

TEST_CASE("membership punch: each end punches to the other's host at its advertised port") {
  FakeEnvironment env;
  Config config;
  config.noInbound = true;
  config.members = {member(2), member(3), dialOutOnly(4), member(6)};
  Protocol protocol(env, config);
  protocol.start();
  const Remote rendezvous{2, at(2), "198.51.100.2:7000"};
  // This peer (1) is the target; 4 asked. 1 < 4: this peer leads.
  const wire::Punch introduced{4, 1, 1, "203.0.113.12", "203.0.113.11", true};
  protocol.handle(Remote{4, at(4), ""}, introduced);  // 4 is no rendezvous (dial-out only)
  protocol.handle(Remote{9, at(9), ""}, introduced);  // nor is a stranger
  CHECK(env.punches.empty());
  protocol.handle(rendezvous, introduced);
  REQUIRE(env.punches.size() == 1);
  CHECK(env.punches[0].member == at(4));
  CHECK(env.punches[0].expected == 4);
  CHECK(env.punches[0].at == Endpoint{"203.0.113.12", 4});
  CHECK(env.punches[0].channel == Channel::data);
  CHECK(env.punches[0].lead);
  // The same introduction through another rendezvous while it runs: one punch.
  protocol.handle(Remote{3, at(3), ""}, introduced);
  CHECK(env.punches.size() == 1);
  env.punches[0].done(LinkOutcome{std::make_error_code(std::errc::timed_out), {}, {}});
  env.advance(1ms);
  // It failed: no punch to 4 for 2 s (nor a request for one), then the next one punches again.
  protocol.handle(Remote{3, at(3), ""}, introduced);
  env.sent.clear();
  CHECK(protocol.requestReversal(at(4), Channel::data));  // the sender waits; nobody is asked
  CHECK(sentOf<wire::Punch>(env).empty());
  CHECK(env.punches.size() == 1);
  env.advance(2s);
  protocol.handle(Remote{3, at(3), ""}, introduced);
  CHECK(env.punches.size() == 2);
  env.punches[1].done(LinkOutcome{std::make_error_code(std::errc::timed_out), {}, {}});
  env.advance(3s);  // twice the wait after the second failure
  protocol.handle(Remote{3, at(3), ""}, introduced);
  CHECK(env.punches.size() == 2);
  env.advance(1s);
  protocol.handle(Remote{3, at(3), ""}, introduced);
  REQUIRE(env.punches.size() == 3);
  env.punches[2].done(LinkOutcome{{}, {}, Remote{4, at(4), "203.0.113.12:4"}});
  env.advance(1ms);
  env.links.insert({at(4), Channel::data});
  protocol.handle(rendezvous, introduced);
  CHECK(env.punches.size() == 3);
  // Neither end, or a member that can be dialed at the other end: ignored.
  protocol.handle(rendezvous, wire::Punch{4, 6, 1, "a", "b", true});
  protocol.handle(rendezvous, wire::Punch{6, 1, 1, "a", "b", true});
  CHECK(env.punches.size() == 3);
}

TEST_CASE("membership punch: the end with the higher id follows, and behind one NAT the lead "
          "connects to the advertised address") {
  FakeEnvironment env;
  env.self = 5;
  Config config;
  config.noInbound = true;
  config.members = {member(2), dialOutOnly(4), dialOutOnly(7)};
  Protocol protocol(env, config);
  protocol.start();
  const Remote rendezvous{2, at(2), ""};
  protocol.handle(rendezvous, wire::Punch{5, 4, 0, "203.0.113.11", "203.0.113.12", true});
  REQUIRE(env.punches.size() == 1);
  CHECK_FALSE(env.punches[0].lead);  // 4 < 5
  CHECK(env.punches[0].at == Endpoint{"203.0.113.12", 4});
  CHECK(env.punches[0].channel == Channel::control);
  // One NAT in front of both (one host seen): 4 leads, so it connects; this peer waits.
  protocol.handle(rendezvous, wire::Punch{4, 5, 1, "203.0.113.11", "203.0.113.11", true});
  CHECK(env.punches.size() == 1);
  // With 7 this peer leads: it connects to 7's advertised address.
  protocol.handle(rendezvous, wire::Punch{7, 5, 1, "203.0.113.11", "203.0.113.11", true});
  REQUIRE(env.punches.size() == 2);
  CHECK(env.punches[1].lead);
  CHECK(env.punches[1].at == at(7));
}

}  // namespace
}  // namespace gossamer::net::membership
