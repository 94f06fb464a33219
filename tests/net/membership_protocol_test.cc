// The SWIM Protocol (net/membership/protocol.h) driven by hand through a fake Environment: manual
// time, a timer queue, and a record of every send. The contracts the Service and the simulator
// rely on: events and replies, callbacks never made from inside the call that asked, and
// nothing at all after stop().
#include <algorithm>
#include <map>
#include <span>
#include <variant>
#include <vector>

#include <doctest/doctest.h>

#include "net/membership/protocol.h"
#include "tests/net/fake_membership_env.h"

namespace gossamer::net::membership {
namespace {

using namespace std::chrono_literals;
using testing::FakeEnvironment;
using testing::member;
using testing::sentOf;

TEST_CASE("membership protocol: the first member is joined at once and answers a ping") {
  FakeEnvironment env;
  Protocol protocol(env, Config{});
  std::vector<Event> events;
  protocol.onEvent([&](const Event& e) { events.push_back(e); });
  protocol.start();
  REQUIRE(events.size() == 1);
  CHECK(events[0].kind == EventKind::joined);
  CHECK(events[0].member.id == 1);
  CHECK(events[0].epoch == 1);
  CHECK(protocol.joined());
  CHECK(protocol.view().ids() == std::vector<std::uint64_t>{1});
  protocol.handle(Remote{2, Endpoint{"fake", 2}}, wire::Ping{2, 77, {}});
  const auto acks = sentOf<wire::Ack>(env);
  REQUIRE(acks.size() == 1);
  CHECK(acks[0].sender == 1);
  CHECK(acks[0].sequence == 77);
  CHECK(env.sent.back().to == Endpoint{"fake", 2});
}

TEST_CASE("membership protocol: an unanswered member is probed, then indirectly, then suspected") {
  FakeEnvironment env;
  Config config;
  config.members = {member(1), member(2), member(3)};
  const Options o = config.options;
  Protocol protocol(env, config);
  std::vector<Event> events;
  protocol.onEvent([&](const Event& e) { events.push_back(e); });
  protocol.start();
  CHECK(protocol.view().ids() == std::vector<std::uint64_t>{1, 2, 3});
  REQUIRE(events.size() == 1);  // its own joined; the formed cluster's members have none
  // The first probe goes out at start; nothing answers.
  const auto pings = sentOf<wire::Ping>(env);
  REQUIRE(pings.size() == 1);
  const std::uint64_t target = env.sent[0].to.port;
  env.advance(o.probeTimeout - 1ms);
  CHECK(sentOf<wire::PingReq>(env).empty());
  env.advance(1ms);
  // After the probe timeout: the one other member is asked to probe it.
  const auto requests = sentOf<wire::PingReq>(env);
  REQUIRE(requests.size() == 1);
  CHECK(requests[0].target == target);
  // At the end of the period it is suspect (still in the view) and told so itself.
  env.advance(o.probeInterval - o.probeTimeout - 1ms);
  CHECK(protocol.view().find(target)->state == MemberState::alive);
  env.advance(1ms);
  CHECK(protocol.view().find(target)->state == MemberState::suspect);
  const auto gossip = sentOf<wire::Gossip>(env);
  REQUIRE_FALSE(gossip.empty());
  CHECK(gossip[0].updates[0].peerId == target);
  CHECK(gossip[0].updates[0].state == wire::MemberState::suspect);
}

TEST_CASE("membership protocol: an ack ends the probe early, a late ack for it is ignored") {
  FakeEnvironment env;
  Config config;
  config.members = {member(1), member(2)};
  const Options o = config.options;
  Protocol protocol(env, config);
  protocol.start();
  const auto pings = sentOf<wire::Ping>(env);
  REQUIRE(pings.size() == 1);
  env.advance(10ms);
  protocol.handle(Remote{2, Endpoint{"fake", 2}}, wire::Ack{2, pings[0].sequence, {}});
  protocol.handle(Remote{2, Endpoint{"fake", 2}}, wire::Ack{2, pings[0].sequence, {}});
  env.advance(o.probeInterval * 3 / 2);
  CHECK(sentOf<wire::PingReq>(env).empty());
  CHECK(protocol.view().find(2)->state == MemberState::alive);
  CHECK(sentOf<wire::Ping>(env).size() == 2);  // the next period's probe, at start + T
}

TEST_CASE("membership protocol: a gossip that could not be sent does not count as a copy") {
  FakeEnvironment env;
  Config config;
  config.members = {member(1), member(2), member(3)};
  const Options o = config.options;
  Protocol protocol(env, config);
  protocol.start();
  // The copies of the news about member 4 sent from message `from` on, in every kind of message.
  const auto copies = [&](std::size_t from) {
    std::size_t n = 0;
    for (std::size_t i = from; i < env.sent.size(); ++i)
      std::visit(
          [&](const auto& m) {
            if constexpr (requires { m.updates; })
              n += std::count_if(m.updates.begin(), m.updates.end(),
                                 [](const wire::MemberUpdate& u) { return u.peerId == 4; });
          },
          env.sent[i].message);
    return n;
  };
  const std::size_t limit = 3;  // ceil(retransmitMultiplier 4 x log10(4 members + 1))
  REQUIRE(o.retransmitMultiplier == 4.0);
  env.failGossip = true;
  const std::size_t before = env.sent.size();
  protocol.handle(Remote{2, Endpoint{"fake", 2}},
                  wire::Gossip{2, {wire::MemberUpdate{4, Endpoint{"fake", 4}, 1000}}});
  env.advance(o.probeInterval * 9 / 10);
  // Without the refunds, `limit` copies in all; every failed gossip gave its copy back.
  CHECK(copies(before) > limit + 2);
  // Once gossips leave, the news goes `limit` more times (probes' piggybacks included) and stops.
  env.failGossip = false;
  const std::size_t cleared = env.sent.size();
  env.advance(o.probeInterval * 9 / 10);
  CHECK(copies(cleared) >= 1);
  CHECK(copies(cleared) <= limit);
}

TEST_CASE("membership protocol: leave tells every member, reports once, and then nothing runs") {
  FakeEnvironment env;
  Config config;
  config.members = {member(1), member(2), member(3)};
  Protocol protocol(env, config);
  protocol.start();
  env.sent.clear();
  int done = 0;
  protocol.leave(1s, [&] { ++done; });
  CHECK(done == 0);  // never from inside the call
  CHECK(sentOf<wire::Leave>(env).size() == 2);
  env.advance(1ms);
  CHECK(done == 1);
  // Stopped: messages are ignored and no timer sends anything any more.
  env.sent.clear();
  protocol.handle(Remote{2, Endpoint{"fake", 2}}, wire::Ping{2, 5, {}});
  env.advance(60s);
  CHECK(env.sent.empty());
  CHECK(done == 1);
}

TEST_CASE("membership protocol: a leaving member refuses a join instead of admitting it alone") {
  FakeEnvironment env;
  Config config;
  config.members = {member(1), member(2)};
  Protocol protocol(env, config);
  protocol.start();
  // The leave waits for its announcement's outcome: a join request comes meanwhile.
  protocol.leave(1s, [] {});
  env.sent.clear();
  protocol.handle(Remote{3, Endpoint{"fake", 3}}, wire::JoinRequest{3, Endpoint{"fake", 3}, 1000});
  const auto replies = sentOf<wire::JoinReply>(env);
  REQUIRE(replies.size() == 1);
  CHECK_FALSE(replies[0].accepted);
  CHECK(replies[0].reason.find("leaving") != std::string::npos);
  CHECK(replies[0].members.empty());
  CHECK(protocol.view().find(3) == nullptr);
}

TEST_CASE("membership protocol: member records carry identity keys and another key is refused") {
  const auto key = [](std::uint8_t b) { return std::vector<std::byte>(32, std::byte{b}); };
  FakeEnvironment env;
  env.keys[1] = key(1);  // this peer's own
  env.keys[3] = key(3);  // the joiner's, bound by its link's handshake
  Protocol protocol(env, Config{});
  protocol.start();
  protocol.handle(Remote{3, Endpoint{"fake", 3}}, wire::JoinRequest{3, Endpoint{"fake", 3}, 1000});
  const auto replies = sentOf<wire::JoinReply>(env);
  REQUIRE(replies.size() == 1);
  REQUIRE(replies[0].members.size() == 2);
  for (const wire::MemberUpdate& record : replies[0].members)
    CHECK(record.identityKey == key(static_cast<std::uint8_t>(record.peerId)));

  // A rumour of peer 4 with its key binds it; one of "peer 4" with another key is a poser.
  const wire::MemberUpdate four{4, Endpoint{"fake", 4}, 1000, wire::MemberState::alive, 0, key(4)};
  protocol.handle(Remote{3, Endpoint{"fake", 3}}, wire::Gossip{3, {four}});
  REQUIRE(protocol.view().find(4) != nullptr);
  CHECK(protocol.view().find(4)->identityKey == key(4));
  CHECK(env.keys.at(4) == key(4));
  const wire::MemberUpdate poser{4,     Endpoint{"elsewhere", 9}, 2000, wire::MemberState::alive, 0,
                                 key(9)};
  protocol.handle(Remote{3, Endpoint{"fake", 3}}, wire::Gossip{3, {poser}});
  CHECK(protocol.view().find(4)->address == Endpoint{"fake", 4});
  CHECK(protocol.view().find(4)->incarnation == 1000);
  CHECK(env.keys.at(4) == key(4));
  // A record without a key says nothing about identity: it is taken as before.
  const wire::MemberUpdate newer{4, Endpoint{"fake", 4}, 1001, wire::MemberState::alive, 0, {}};
  protocol.handle(Remote{3, Endpoint{"fake", 3}}, wire::Gossip{3, {newer}});
  CHECK(protocol.view().find(4)->incarnation == 1001);
  CHECK(protocol.view().find(4)->identityKey == key(4));
}

TEST_CASE("membership protocol: stop() leaves nothing that acts, a destroyed protocol neither") {
  FakeEnvironment env;
  Config config;
  config.members = {member(1), member(2), member(3)};
  {
    Protocol protocol(env, config);
    std::size_t events = 0;
    protocol.onEvent([&](const Event&) { ++events; });
    protocol.start();
    env.advance(10ms);
    protocol.stop();
    env.sent.clear();
    env.advance(120s);
    CHECK(env.sent.empty());
    CHECK(events == 1);
    CHECK(env.pendingTimers() == 0);  // stop() cancelled them
  }
  // A protocol destroyed with timers pending: they fire into nothing.
  {
    Protocol protocol(env, config);
    protocol.start();
  }
  env.sent.clear();
  env.advance(120s);
  CHECK(env.sent.empty());
}

}  // namespace
}  // namespace gossamer::net::membership
