// Reachability in the SWIM Protocol (net/membership/protocol_reach.cc), driven by hand through a
// fake Environment: a seed's dial-back to a joiner and what the joiner learns from it, a
// dial-out-only peer's frequent push-pull, and connection reversal (a dial-out-only member asked
// to open a link, directly or through a member linked to it, and opening it only to an address
// its own table holds, rate limited).
#include <vector>

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

TEST_CASE("membership protocol: a seed dials each joiner back at its advertised address") {
  FakeEnvironment env;
  Protocol protocol(env, Config{});
  protocol.start();
  const Remote joiner{3, Endpoint{"fake", 3}, "198.51.100.7:40000"};
  protocol.handle(joiner, wire::JoinRequest{3, Endpoint{"fake", 3}, 1000});
  const auto replies = sentOf<wire::JoinReply>(env);
  REQUIRE(replies.size() == 1);
  CHECK(replies[0].observed == "198.51.100.7:40000");
  REQUIRE(env.dialBacks.size() == 1);
  CHECK(env.dialBacks[0].to == Endpoint{"fake", 3});  // the advertised address, nothing else
  CHECK(env.dialBacks[0].expected == 3);
  env.completeDialBack(0, std::make_error_code(std::errc::connection_refused));
  env.advance(1ms);
  auto answers = sentOf<wire::Reachability>(env);
  REQUIRE(answers.size() == 1);
  CHECK_FALSE(answers[0].dialable);
  CHECK(answers[0].address == Endpoint{"fake", 3});
  CHECK(answers[0].observed == "198.51.100.7:40000");
  CHECK(env.sent.back().to == Endpoint{"fake", 3});

  // A joiner that says it cannot be dialed is not dialed, and its record says so.
  protocol.handle(Remote{4, Endpoint{"fake", 4}, ""},
                  wire::JoinRequest{4, Endpoint{"fake", 4}, 1000, true});
  CHECK(env.dialBacks.size() == 1);
  CHECK(protocol.view().find(4)->dialOutOnly);

  // At most 8 dial-backs a second: a burst of joins gets 7 more now, the rest none.
  for (std::uint64_t id = 10; id < 30; ++id)
    protocol.handle(Remote{id, Endpoint{"fake", static_cast<std::uint16_t>(id)}, ""},
                    wire::JoinRequest{id, Endpoint{"fake", static_cast<std::uint16_t>(id)}, 1000});
  CHECK(env.dialBacks.size() == 8);
  env.advance(1s);
  protocol.handle(Remote{40, Endpoint{"fake", 40}, ""},
                  wire::JoinRequest{40, Endpoint{"fake", 40}, 1000});
  CHECK(env.dialBacks.size() == 9);
}

TEST_CASE("membership protocol: a peer that could not be dialed back marks itself dial-out only") {
  FakeEnvironment env;
  Protocol protocol(env, Config{});
  protocol.start();
  const Remote seed{2, Endpoint{"fake", 2}, ""};
  // Dialable: nothing changes.
  protocol.handle(seed, wire::Reachability{2, true, Endpoint{"fake", 1}, "10.0.0.1:5000"});
  CHECK_FALSE(protocol.view().find(1)->dialOutOnly);
  CHECK(protocol.view().find(1)->incarnation == 1000);
  // Not dialable: this peer states it, under a new incarnation that reaches the others.
  protocol.handle(seed, wire::Reachability{2, false, Endpoint{"fake", 1}, "203.0.113.9:6000"});
  CHECK(protocol.view().find(1)->dialOutOnly);
  CHECK(protocol.view().find(1)->incarnation == 1001);
  protocol.handle(seed, wire::Ping{2, 5, {}});
  const auto acks = sentOf<wire::Ack>(env);
  REQUIRE(acks.size() == 1);
  bool carried = false;
  for (const wire::MemberUpdate& update : acks[0].updates)
    carried |= update.peerId == 1 && update.dialOutOnly && update.incarnation == 1001;
  CHECK(carried);
  // Said once: another answer changes nothing.
  protocol.handle(seed, wire::Reachability{2, false, Endpoint{"fake", 1}, "203.0.113.9:6000"});
  CHECK(protocol.view().find(1)->incarnation == 1001);
}

TEST_CASE("membership protocol: a dial-out-only peer exchanges its table every 3 probe periods") {
  // The others reach it only over the links it opened: it pulls the news itself, where a peer
  // that can be dialed waits the whole push-pull interval.
  for (const bool noInbound : {false, true}) {
    CAPTURE(noInbound);
    FakeEnvironment env;
    Config config;
    config.options.probeInterval = 1000ms;
    config.options.pushPullInterval = 30000ms;
    config.members = {member(2), member(3)};
    config.noInbound = noInbound;
    Protocol protocol(env, config);
    protocol.start();
    std::size_t answered = 0;
    const auto run = [&](std::chrono::milliseconds span) {  // every probe is answered at once
      for (auto t = 0ms; t < span; t += 10ms) {
        env.advance(10ms);
        for (; answered < env.sent.size(); ++answered) {
          const auto* ping = std::get_if<wire::Ping>(&env.sent[answered].message);
          const std::uint64_t to = env.sent[answered].to.port;
          if (ping != nullptr)
            protocol.handle(Remote{to, at(to), ""}, wire::Ack{to, ping->sequence, {}});
        }
      }
    };
    run(9500ms);
    CHECK(sentOf<wire::PushPull>(env).size() == (noInbound ? 3 : 0));
    run(21000ms);  // 30.5 s in all
    CHECK(sentOf<wire::PushPull>(env).size() == (noInbound ? 10 : 1));
    CHECK(protocol.view().members.size() == 3);
  }
}

TEST_CASE("membership protocol: --no-inbound is in this peer's record from the start") {
  FakeEnvironment env;
  Config config;
  config.noInbound = true;
  Protocol protocol(env, config);
  protocol.start();
  CHECK(protocol.view().find(1)->dialOutOnly);
  protocol.handle(Remote{3, Endpoint{"fake", 3}, ""}, wire::JoinRequest{3, Endpoint{"fake", 3}, 1});
  const auto replies = sentOf<wire::JoinReply>(env);
  REQUIRE(replies.size() == 1);
  bool stated = false;
  for (const wire::MemberUpdate& record : replies[0].members)
    stated |= record.peerId == 1 && record.dialOutOnly;
  CHECK(stated);
}

TEST_CASE("membership protocol: a dial-out-only member is asked to open the link, never dialed") {
  FakeEnvironment env;
  Config config;
  config.members = {member(2), member(3), dialOutOnly(4), dialOutOnly(5)};
  Protocol protocol(env, config);
  protocol.start();
  env.sent.clear();
  // Members that can be dialed, or unknown ones, are dialed.
  CHECK_FALSE(protocol.requestReversal(at(2), Channel::data));
  CHECK_FALSE(protocol.requestReversal(at(99), Channel::data));
  CHECK(env.sent.empty());
  // With a control link open to it, the request goes there.
  env.links.insert({at(4), Channel::control});
  CHECK(protocol.requestReversal(at(4), Channel::data));
  REQUIRE(env.sent.size() == 1);
  CHECK(env.sent[0].to == at(4));
  CHECK(std::get<wire::Reverse>(env.sent[0].message) == wire::Reverse{1, 4, 1, false});
  // Without one, members that can be dialed pass it on: never the target, never another
  // dial-out-only member.
  env.links.clear();
  env.sent.clear();
  CHECK(protocol.requestReversal(at(4), Channel::control));
  REQUIRE(env.sent.size() == 2);
  for (const auto& sent : env.sent) {
    CHECK((sent.to == at(2) || sent.to == at(3)));
    CHECK(std::get<wire::Reverse>(sent.message) == wire::Reverse{1, 4, 0, false});
  }
}

TEST_CASE(
    "membership protocol: a reversal request is forwarded once, for its requester, on a link") {
  FakeEnvironment env;
  Config config;
  config.members = {member(2), member(3), dialOutOnly(4)};
  Protocol protocol(env, config);
  protocol.start();
  env.sent.clear();
  const Remote requester{2, at(2), ""};
  protocol.handle(requester, wire::Reverse{2, 4, 1, false});
  CHECK(env.sent.empty());  // no link to the target: it would have to dial it
  env.links.insert({at(4), Channel::control});
  protocol.handle(requester, wire::Reverse{2, 4, 1, false});
  REQUIRE(env.sent.size() == 1);
  CHECK(env.sent[0].to == at(4));
  CHECK(std::get<wire::Reverse>(env.sent[0].message) == wire::Reverse{2, 4, 1, true});
  // Not for someone else's name, and never forwarded twice.
  protocol.handle(Remote{3, at(3), ""}, wire::Reverse{2, 4, 1, false});
  protocol.handle(requester, wire::Reverse{2, 4, 1, true});
  protocol.handle(requester, wire::Reverse{2, 99, 1, false});  // unknown target
  CHECK(env.sent.size() == 1);
}

TEST_CASE(
    "membership protocol: a dial-out-only peer opens the asked link to the address it knows") {
  FakeEnvironment env;
  Config config;
  config.noInbound = true;
  config.members = {member(2), member(3), dialOutOnly(5)};
  Protocol protocol(env, config);
  protocol.start();
  // It cannot be dialed itself: asking another such peer to dial it is pointless; it asks for a
  // hole punch instead (membership_punch_test.cc).
  CHECK(protocol.requestReversal(at(5), Channel::data));
  CHECK(sentOf<wire::Reverse>(env).empty());
  CHECK_FALSE(sentOf<wire::Punch>(env).empty());
  const Remote forwarder{3, at(3), ""};
  protocol.handle(forwarder, wire::Reverse{2, 1, 1, true});
  REQUIRE(env.opened.size() == 1);
  CHECK(env.opened[0] == std::pair{at(2), Channel::data});  // its table's address for peer 2
  // Unknown or dial-out-only requesters, unknown channels, links already open: nothing.
  protocol.handle(forwarder, wire::Reverse{9, 1, 1, true});
  protocol.handle(forwarder, wire::Reverse{5, 1, 1, true});
  protocol.handle(forwarder, wire::Reverse{2, 1, 7, true});
  env.links.insert({at(2), Channel::control});
  protocol.handle(forwarder, wire::Reverse{2, 1, 0, true});
  CHECK(env.opened.size() == 1);
  // At most 64 a second.
  for (int i = 0; i < 100; ++i) protocol.handle(forwarder, wire::Reverse{2, 1, 1, true});
  CHECK(env.opened.size() == 64);
  env.advance(1s);
  protocol.handle(forwarder, wire::Reverse{2, 1, 1, true});
  CHECK(env.opened.size() == 65);
}

// A probe of a dial-out-only member may wait for its link (which it opens on request) the whole
// protocol period, and its Ack counts until then; a dialable member's, the probe timeout.
TEST_CASE("membership protocol: a dial-out-only member's probe waits the period for its link") {
  for (const bool dialable : {true, false}) {
    CAPTURE(dialable);
    FakeEnvironment env;
    Config config;
    config.members = {dialable ? member(4) : dialOutOnly(4)};
    const Options o = config.options;
    Protocol protocol(env, config);
    protocol.start();
    REQUIRE(sentOf<wire::Ping>(env).size() == 1);  // the first probe, at start
    CHECK(env.sent[0].to == at(4));
    CHECK(env.sent[0].linkWait == (dialable ? o.probeTimeout : o.probeInterval));
    // Its Ack, late but within the period, still counts: not suspected.
    env.advance(o.probeInterval - 10ms);
    const std::uint64_t sequence = sentOf<wire::Ping>(env)[0].sequence;
    protocol.handle(Remote{4, at(4), ""}, wire::Ack{4, sequence, {}});
    env.advance(20ms);
    CHECK(protocol.view().find(4)->state == MemberState::alive);
  }
}

}  // namespace
}  // namespace gossamer::net::membership
