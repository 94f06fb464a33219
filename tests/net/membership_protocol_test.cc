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

namespace gossamer::net::membership {
namespace {

using namespace std::chrono_literals;

class FakeEnvironment final : public Environment {
 public:
  struct Sent {
    Endpoint to;
    wire::MembershipMessage message;
  };

  Clock::time_point now() const override { return now_; }
  std::uint64_t firstIncarnation() const override { return 1000; }
  std::uint64_t selfId() const override { return 1; }
  Endpoint selfAddress() const override { return Endpoint{"fake", 1}; }
  TimerId at(Clock::time_point when, std::function<void()> action) override {
    timers_.emplace(std::pair{when, ++next_}, std::move(action));
    return next_;
  }
  void cancel(TimerId timer) override {
    std::erase_if(timers_, [&](const auto& entry) { return entry.first.second == timer; });
  }
  void send(const Endpoint& to, wire::MembershipMessage message, std::chrono::milliseconds,
            std::function<void(std::error_code)> done) override {
    sent.push_back({to, std::move(message)});
    if (done) at(now_, [done] { done({}); });
  }
  void open(const Endpoint& to, std::chrono::milliseconds,
            std::function<void(LinkOutcome)> done) override {
    at(now_, [to, done] { done(LinkOutcome{{}, "", Remote{to.port, to}}); });
  }
  void disconnect(const Endpoint&) override {}
  // The bindings of ids to identity keys, as a mesh's IdentityBook keeps them.
  std::vector<std::byte> identityKeyOf(std::uint64_t id) const override {
    const auto it = keys.find(id);
    return it == keys.end() ? std::vector<std::byte>{} : it->second;
  }
  // Dial-backs wait here until the test completes them (completeDialBack).
  void dialBack(const Endpoint& to, std::uint64_t expected, std::chrono::milliseconds,
                std::function<void(std::error_code)> done) override {
    dialBacks.push_back({to, expected, std::move(done)});
  }
  void completeDialBack(std::size_t index, std::error_code outcome) {
    at(now_, [done = dialBacks.at(index).done, outcome] { done(outcome); });
  }
  bool bindIdentity(std::uint64_t id, std::span<const std::byte> key) override {
    const auto [it, fresh] = keys.try_emplace(id, key.begin(), key.end());
    return fresh || std::equal(key.begin(), key.end(), it->second.begin(), it->second.end());
  }

  // Runs every timer due by `until`, in time order; time ends at `until`.
  void runUntil(Clock::time_point until) {
    while (!timers_.empty() && timers_.begin()->first.first <= until) {
      auto node = timers_.extract(timers_.begin());
      now_ = node.key().first;
      node.mapped()();
    }
    now_ = until;
  }
  void advance(Clock::duration by) { runUntil(now_ + by); }
  std::size_t pendingTimers() const { return timers_.size(); }

  std::vector<Sent> sent;
  std::map<std::uint64_t, std::vector<std::byte>> keys;
  struct DialBack {
    Endpoint to;
    std::uint64_t expected = 0;
    std::function<void(std::error_code)> done;
  };
  std::vector<DialBack> dialBacks;

 private:
  Clock::time_point now_{std::chrono::hours(1)};
  TimerId next_ = 0;
  std::map<std::pair<Clock::time_point, TimerId>, std::function<void()>> timers_;
};

template <typename T>
std::vector<T> sentOf(const FakeEnvironment& env) {
  std::vector<T> out;
  for (const auto& s : env.sent)
    if (const T* m = std::get_if<T>(&s.message)) out.push_back(*m);
  return out;
}

Member member(std::uint64_t id) {
  return Member{id, Endpoint{"fake", static_cast<std::uint16_t>(id)}, 1000, MemberState::alive};
}

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
