// A fake membership Environment (net/membership/protocol.h) for driving the SWIM Protocol by
// hand: manual time, a timer queue, a record of every send, dial-backs and link requests that wait
// for the test, and the links the test says are open.
#pragma once

#include <algorithm>
#include <functional>
#include <map>
#include <set>
#include <span>
#include <string>
#include <system_error>
#include <utility>
#include <variant>
#include <vector>

#include "net/membership/protocol.h"

namespace gossamer::net::membership::testing {

using namespace std::chrono_literals;

class FakeEnvironment final : public Environment {
 public:
  struct Sent {
    Endpoint to;
    wire::MembershipMessage message;
    std::chrono::milliseconds linkWait{0};  // how long the send may wait for a link
  };

  Clock::time_point now() const override { return now_; }
  std::uint64_t firstIncarnation() const override { return 1000; }
  std::uint64_t selfId() const override { return self; }
  Endpoint selfAddress() const override {
    return Endpoint{"fake", static_cast<std::uint16_t>(self)};
  }
  TimerId at(Clock::time_point when, std::function<void()> action) override {
    timers_.emplace(std::pair{when, ++next_}, std::move(action));
    return next_;
  }
  void cancel(TimerId timer) override {
    std::erase_if(timers_, [&](const auto& entry) { return entry.first.second == timer; });
  }
  void send(const Endpoint& to, wire::MembershipMessage message, std::chrono::milliseconds linkWait,
            std::function<void(std::error_code)> done) override {
    // A gossip the test says cannot leave (no link could be opened) fails.
    const bool fails = failGossip && std::holds_alternative<wire::Gossip>(message);
    sent.push_back({to, std::move(message), linkWait});
    if (done)
      at(now_, [done, fails] {
        done(fails ? std::make_error_code(std::errc::host_unreachable) : std::error_code{});
      });
  }
  void open(const Endpoint& to, std::chrono::milliseconds,
            std::function<void(LinkOutcome)> done) override {
    at(now_, [to, done] { done(LinkOutcome{{}, "", Remote{to.port, to}}); });
  }
  void disconnect(const Endpoint&) override {}
  bool linked(const Endpoint& to, Channel channel) const override {
    return links.count({to, channel}) > 0;
  }
  void openFor(const Endpoint& to, Channel channel, std::chrono::milliseconds,
               std::function<void(LinkOutcome)>) override {
    opened.push_back({to, channel});
  }
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

  std::string observedAt(const Endpoint& to) const override {
    const auto it = observed.find(to);
    return it == observed.end() ? std::string{} : it->second;
  }
  // Punches wait here until the test completes them.
  void punch(const Endpoint& member, std::uint64_t expected, const Endpoint& at, Channel channel,
             bool lead, std::chrono::milliseconds, std::function<void(LinkOutcome)> done) override {
    punches.push_back({member, expected, at, channel, lead, std::move(done)});
  }

  // Relayed links wait here until the test completes them.
  void relay(const Endpoint& via, const Endpoint& member, std::uint64_t expected, Channel channel,
             std::chrono::milliseconds, std::function<void(LinkOutcome)> done) override {
    relays.push_back({via, member, expected, channel, std::move(done)});
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

  std::uint64_t self = 1;   // this peer's id; it listens at fake:<id>
  bool failGossip = false;  // every Gossip's send fails (as when no link can be opened)
  std::vector<Sent> sent;
  std::map<Endpoint, std::string> observed;  // what observedAt() says, by member address
  struct Punched {
    Endpoint member;
    std::uint64_t expected = 0;
    Endpoint at;
    Channel channel = Channel::control;
    bool lead = false;
    std::function<void(LinkOutcome)> done;
  };
  std::vector<Punched> punches;
  struct Relayed {
    Endpoint via;
    Endpoint member;
    std::uint64_t expected = 0;
    Channel channel = Channel::control;
    std::function<void(LinkOutcome)> done;
  };
  std::vector<Relayed> relays;
  std::map<std::uint64_t, std::vector<std::byte>> keys;
  struct DialBack {
    Endpoint to;
    std::uint64_t expected = 0;
    std::function<void(std::error_code)> done;
  };
  std::vector<DialBack> dialBacks;
  std::set<std::pair<Endpoint, Channel>> links;      // what linked() says is open
  std::vector<std::pair<Endpoint, Channel>> opened;  // openFor's requests, in order

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

inline Member member(std::uint64_t id) {
  return Member{id, Endpoint{"fake", static_cast<std::uint16_t>(id)}, 1000, MemberState::alive};
}

// A member that cannot be dialed.
inline Member dialOutOnly(std::uint64_t id) {
  Member m = member(id);
  m.dialOutOnly = true;
  return m;
}

// Where member(id) listens.
inline Endpoint at(std::uint64_t id) { return Endpoint{"fake", static_cast<std::uint16_t>(id)}; }

}  // namespace gossamer::net::membership::testing
