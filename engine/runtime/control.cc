#include "engine/runtime/control.h"

#include <algorithm>

#include <fmt/format.h>

#include "engine/base/enforce.h"
#include "engine/base/log.h"
#include "engine/runtime/join_failure.h"

namespace gossamer::engine::runtime {
namespace {

using std::chrono::duration_cast;
using std::chrono::milliseconds;
using std::chrono::seconds;

constexpr unsigned kBothMarks = 0b11;

bool hasBothMarks(const std::map<PeerId, unsigned>& marks, PeerId peer) {
  const auto it = marks.find(peer);
  return it != marks.end() && it->second == kBothMarks;
}

control::Message markOf(ClusterControl::Barrier barrier, net::Channel channel, bool waiting) {
  const auto index = static_cast<std::uint8_t>(channel);
  return barrier == ClusterControl::Barrier::released
             ? control::Message{control::Released{index, waiting}}
             : control::Message{control::Finished{index, waiting}};
}

constexpr net::Channel kMarkChannels[] = {net::Channel::control, net::Channel::data};

}  // namespace

ClusterControl::ClusterControl(PeerNetwork& network, Messenger& messenger, SnapshotBoard& snapshots,
                               const LoopStatus& status)
    : network_(network),
      messenger_(messenger),
      snapshots_(snapshots),
      status_(status),
      catchUpServer_(messenger) {}

std::vector<PeerId> ClusterControl::others() const {
  std::vector<PeerId> out = network_.members();
  std::erase(out, network_.self());
  return out;
}

void ClusterControl::request(const std::vector<PeerId>& to, const control::Message& message,
                             std::uint64_t tag) {
  messenger_.sendFromHost(to, Message{.tag = tag},
                          Envelope{.route = Route::runtime, .control = control::encode(message)},
                          false, seconds(1));
}

// ---- io thread ---------------------------------------------------------------------------------

void ClusterControl::onMessage(Incoming message, std::vector<std::byte> bytes) {
  control::Message decoded;
  if (const std::error_code error = control::decode(bytes, decoded)) {
    log::get("peer")->warn("peer {:016x}: dropping a malformed control message from {:016x}: {}",
                           network_.self(), message.from, error.message());
    return;
  }
  const PeerId from = message.from;
  if (const auto* request = std::get_if<control::StatusRequest>(&decoded)) {
    control::Status status{status_.training,
                           status_.step,
                           status_.totalSteps,
                           false,
                           static_cast<std::uint32_t>(network_.members().size()),
                           status_.loopEnded && status_.step >= status_.totalSteps,
                           status_.runSteps};
    {
      std::lock_guard lock(mutex_);
      const auto started = startLives_.find(from);
      status.expected =
          started != startLives_.end() && (request->life == 0 || request->life <= started->second);
    }
    messenger_.sendFromHost(std::span<const PeerId>(&from, 1), Message{.tag = message.tag},
                            Envelope{.route = Route::runtime, .control = control::encode(status)},
                            true, {});
  } else if (auto* status = std::get_if<control::Status>(&decoded)) {
    {
      std::lock_guard lock(mutex_);
      if (message.tag == statusTag_) statuses_[from] = *status;
    }
    wake();
  } else if (auto* finished = std::get_if<control::Finished>(&decoded)) {
    onMark(Barrier::finished, from, finished->channel, finished->waiting);
  } else if (auto* released = std::get_if<control::Released>(&decoded)) {
    onMark(Barrier::released, from, released->channel, released->waiting);
  } else if (const auto* speed = std::get_if<control::Speed>(&decoded)) {
    speeds_.record(from, PeerSpeed{speed->stepSeconds, speed->samplesPerSecond, speed->step});
  } else if (std::holds_alternative<control::PullModel>(decoded)) {
    message.kind = 0;
    if (std::shared_ptr<const Snapshot> snapshot = snapshots_.pull(message))
      answerPulls({message}, std::move(snapshot));
  } else if (std::holds_alternative<control::StateRequest>(decoded) &&
             message.integers ==
                 std::vector<std::uint64_t>{static_cast<std::uint64_t>(StateKind::algorithm)}) {
    // Copied on the catch-up server's thread: a large state's copy would hold the io thread.
    catchUpServer_.answerStateWith(message, [this]() -> std::shared_ptr<const Snapshot> {
      std::optional<SharedState> state = sharedState_ ? sharedState_() : std::nullopt;
      if (!state) return nullptr;
      return std::make_shared<const Snapshot>(Snapshot{network_.self(), state->step,
                                                       std::move(state->floats), state->version,
                                                       std::move(state->integers)});
    });
  } else if (std::holds_alternative<control::StateRequest>(decoded)) {
    message.kind = kStateRequestKind;
    if (std::shared_ptr<const Snapshot> snapshot = snapshots_.pull(message))
      answerPulls({message}, std::move(snapshot));
  } else if (std::holds_alternative<control::ChunkRequest>(decoded)) {
    catchUpServer_.onChunkRequest(message);
  } else if (std::holds_alternative<control::StateHeader>(decoded) ||
             std::holds_alternative<control::ChunkReply>(decoded)) {
    message.kind =
        std::holds_alternative<control::StateHeader>(decoded) ? kStateHeaderKind : kChunkReplyKind;
    std::lock_guard lock(mutex_);
    if (awaited_.contains(message.tag)) replies_.push(std::move(message));
  } else {  // control::Model: the answer to a pull
    message.kind = 0;
    std::lock_guard lock(mutex_);
    if (awaited_.contains(message.tag)) replies_.push(std::move(message));
  }
}

std::uint64_t ClusterControl::openReplies() {
  const std::uint64_t tag = tags_.fresh();
  std::lock_guard lock(mutex_);
  awaited_.insert(tag);
  return tag;
}

void ClusterControl::closeReplies(std::uint64_t tag) {
  {
    std::lock_guard lock(mutex_);
    awaited_.erase(tag);
  }
  while (replies_.take([tag](const Incoming& m) { return m.tag == tag; })) {
  }
}

void ClusterControl::answerPulls(const std::vector<Incoming>& pulls,
                                 std::shared_ptr<const Snapshot> snapshot) {
  for (const Incoming& pull : pulls) {
    if (pull.kind == kStateRequestKind) {
      catchUpServer_.answerState(pull, snapshot);
      continue;
    }
    messenger_.sendFromHost(
        std::span<const PeerId>(&pull.from, 1),
        Message{.step = snapshot->step,
                .tag = pull.tag,
                .payloads = {snapshot->params},
                .owner = snapshot},
        Envelope{.route = Route::runtime, .control = control::encode(control::Model{})}, true, {});
  }
}

void ClusterControl::wake() {
  {
    std::lock_guard lock(mutex_);
    ++wakeups_;
  }
  changed_.notify_all();
  replies_.wake();
}

void ClusterControl::onMark(Barrier barrier, PeerId from, std::uint32_t channel, bool waiting) {
  bool answer = false;
  {
    std::lock_guard lock(mutex_);
    unsigned& marks = marks_[barrier == Barrier::released ? 1 : 0][from];
    const unsigned bit = 1u << channel;
    // This peer's marks (one per channel), when it announced them to `from`, go again to it when
    // it says it still misses them (a re-send of await), and when its first mark of the barrier
    // arrives: they may have been lost on the way (a link that broke with them in flight), and a
    // peer that has every mark stops sending its own again, so the other would wait out its whole
    // timeout. Answers are not `waiting`, and a first arrival happens once per member and
    // barrier: no echo of echoes, and one answer for its marks on every channel.
    const auto sent = announcedTo_.find(barrier);
    answer = (waiting || marks == 0) && sent != announcedTo_.end() && sent->second.count(from);
    marks |= bit;
  }
  if (answer) sendMarks(barrier, {from});
  wake();
}

void ClusterControl::onViewChanged() {
  wake();
  markLateMembers();
}

void ClusterControl::markLateMembers() {
  std::map<Barrier, std::vector<PeerId>> late;  // members that missed an announcement
  {
    std::lock_guard lock(mutex_);
    if (announcedTo_.empty()) return;
    const std::vector<PeerId> members = others();  // the view's lock, inside ours
    for (auto& [barrier, sent] : announcedTo_) {
      for (PeerId member : members)
        if (sent.insert(member).second) late[barrier].push_back(member);
    }
  }
  // Nothing was sent to them before (they were not members): the marks trail nothing.
  for (const auto& [barrier, to] : late) {
    log::get("peer")->debug("peer {:016x}: {} member(s) joined after this peer announced {}",
                            network_.self(), to.size(),
                            barrier == Barrier::released ? "released" : "finished");
    sendMarks(barrier, to);
  }
}

void ClusterControl::sendMarks(Barrier barrier, const std::vector<PeerId>& to, bool waiting) {
  for (const net::Channel channel : kMarkChannels)
    messenger_.sendFromHost(to, Message{.step = status_.step},
                            Envelope{.route = Route::runtime,
                                     .control = control::encode(markOf(barrier, channel, waiting)),
                                     .channel = channel},
                            true, {});
}

void ClusterControl::reportSpeed(const PeerSpeed& speed) {
  speeds_.record(network_.self(), speed);
  const std::vector<PeerId> to = others();
  if (to.empty()) return;
  // On the control link, never waiting: a report that finds no send slot is dropped (the next
  // comes a second later).
  messenger_.sendFromHost(to, Message{.step = speed.step},
                          Envelope{.route = Route::runtime,
                                   .control = control::encode(control::Speed{
                                       speed.stepSeconds, speed.samplesPerSecond, speed.step}),
                                   .channel = net::Channel::control},
                          false, {});
}

void ClusterControl::stop() {
  {
    std::lock_guard lock(mutex_);
    stopped_ = true;
  }
  changed_.notify_all();
  replies_.close();
}

// ---- compute thread ----------------------------------------------------------------------------

StartPlan ClusterControl::awaitStart(std::size_t minPeers, bool resumed, Clock::duration timeout,
                                     Clock::time_point joinDeadline, const std::string& seeds) {
  const Clock::time_point deadline = Clock::now() + timeout;
  for (;;) {
    const std::uint64_t seen = [&] {
      std::lock_guard lock(mutex_);
      return wakeups_;
    }();
    const std::vector<PeerId> members = network_.members();
    const std::vector<PeerId> peers = others();
    // Not before this peer's own admission: the view may list the others first, and a status
    // request without this life's incarnation would pass a restart for the life the others
    // started with (it then trained from step 0 beside them).
    const bool joined = network_.joined();
    std::vector<life::MemberStatus> statuses;
    if (!peers.empty() && joined) {
      for (const control::Status& s : askStatus(peers, seconds(1)))
        statuses.push_back({.training = s.training,
                            .done = s.done,
                            .expected = s.expected,
                            .step = s.step,
                            .totalSteps = s.totalSteps,
                            .runSteps = s.runSteps,
                            .members = s.members});
    }
    if (const std::optional<StartPlan> plan = life::planStart({.statuses = statuses,
                                                               .members = members.size(),
                                                               .minPeers = minPeers,
                                                               .resumed = resumed,
                                                               .joined = joined}))
      return *plan;
    const Clock::time_point now = Clock::now();
    if (now >= joinDeadline && !network_.joined()) return StartPlan{.cannotJoin = true};
    if (now >= deadline) {
      const std::string why = network_.joined()
                                  ? ""
                                  : "; " + JoinFailure::of(network_.seedFailures(),
                                                           duration_cast<milliseconds>(timeout))
                                               .cause();
      GOSSAMER_THROW("only {} of the {} peers (--min-peers) joined within {} s; seeds: {}{}",
                     members.size(), minPeers, duration_cast<seconds>(timeout).count(), seeds, why);
    }
    std::unique_lock lock(mutex_);
    if (stopped_)
      GOSSAMER_THROW("peer {:016x} was stopped before training started", network_.self());
    // Wake on a membership change (wake()) or poll: a peer's status can change unannounced.
    changed_.wait_for(lock, milliseconds(200), [&] { return stopped_ || wakeups_ != seen; });
  }
}

std::optional<control::Status> ClusterControl::statusOf(PeerId peer, Clock::duration timeout) {
  std::vector<control::Status> got = askStatus({peer}, timeout);
  if (got.empty()) return std::nullopt;
  return got.front();
}

std::vector<control::Status> ClusterControl::askStatus(const std::vector<PeerId>& peers,
                                                       Clock::duration timeout) {
  const std::uint64_t tag = tags_.fresh();
  {
    std::lock_guard lock(mutex_);
    statusTag_ = tag;
    statuses_.clear();
  }
  request(peers, control::StatusRequest{network_.life()}, tag);
  std::unique_lock lock(mutex_);
  changed_.wait_for(lock, timeout, [&] {
    return stopped_ || std::all_of(peers.begin(), peers.end(), [&](PeerId peer) {
             return statuses_.count(peer) > 0 || !network_.isMember(peer);
           });
  });
  std::vector<control::Status> out;
  for (const auto& [peer, status] : statuses_) out.push_back(status);
  statusTag_ = 0;
  return out;
}

void ClusterControl::startedWith(const std::vector<PeerId>& members) {
  const net::membership::View view = network_.view();
  std::map<PeerId, std::uint64_t> lives;
  for (const PeerId member : members) {
    const net::membership::Member* known = view.find(member);
    lives[member] = known ? known->incarnation : 0;  // not in the view: no life of it expected
  }
  std::lock_guard lock(mutex_);
  startLives_ = std::move(lives);
}

void ClusterControl::announce(Barrier barrier, const std::vector<PeerId>& to,
                              Clock::duration wait) {
  {
    // Recorded first: a member that enters the view from now on gets its marks from
    // onViewChanged(), one already in it from here.
    std::lock_guard lock(mutex_);
    announcedTo_[barrier].insert(to.begin(), to.end());
  }
  const Message mark{.step = status_.step};
  // One mark per link, each behind everything this thread sent on it.
  for (const net::Channel channel : kMarkChannels) {
    messenger_.send(to, mark,
                    Envelope{.route = Route::runtime,
                             .control = control::encode(markOf(barrier, channel, false)),
                             .channel = channel},
                    wait);
  }
  markLateMembers();  // members the caller's list missed
}

bool ClusterControl::hasFinished(PeerId peer) const {
  std::lock_guard lock(mutex_);
  return hasBothMarks(marks_[0], peer);
}

bool ClusterControl::hasReleased(PeerId peer) const {
  std::lock_guard lock(mutex_);
  return hasBothMarks(marks_[1], peer);
}

bool ClusterControl::await(Barrier barrier, Clock::duration timeout) {
  using namespace std::chrono_literals;
  const auto& marks = marks_[barrier == Barrier::released ? 1 : 0];
  // A mark is lost when its link breaks with it in flight (a relay that died). So every so often
  // the marks this peer announced go again to the members whose marks it still misses, saying
  // so (`waiting`): the barriers are symmetric, so they may be missing this peer's as well, and
  // they answer with their own (onMark). Marks are idempotent.
  const Clock::duration resendEvery = std::clamp<Clock::duration>(timeout / 10, 500ms, 5s);
  const Clock::time_point deadline = Clock::now() + timeout;
  std::vector<PeerId> missing;
  std::unique_lock lock(mutex_);
  const auto allMarked = [&] {
    if (stopped_) return true;
    missing.clear();
    for (PeerId peer : network_.members()) {  // the view's lock, inside ours (see the header)
      if (peer != network_.self() && !hasBothMarks(marks, peer)) missing.push_back(peer);
    }
    return missing.empty();
  };
  bool all = false;
  while (!(all = changed_.wait_until(lock, std::min(deadline, Clock::now() + resendEvery),
                                     allMarked)) &&
         Clock::now() < deadline) {
    std::map<Barrier, std::vector<PeerId>> again;
    for (const auto& [announced, sent] : announcedTo_)
      for (PeerId peer : missing)
        if (sent.count(peer)) again[announced].push_back(peer);
    lock.unlock();
    for (const auto& [announced, to] : again) sendMarks(announced, to, true);
    lock.lock();
  }
  if (!all) {
    log::get("peer")->warn(
        "peer {:016x}: not every member {} within {} s (waited for {}); going on", network_.self(),
        barrier == Barrier::released ? "released the others" : "finished training",
        duration_cast<seconds>(timeout).count(), peerList(missing));
  }
  return all;
}

std::optional<Incoming> ClusterControl::pullModel(PeerId from, Clock::duration timeout) {
  GatherResult got = pullModels({from}, timeout);
  if (got.messages.empty()) return std::nullopt;
  return std::move(got.messages.front());
}

GatherResult ClusterControl::pullModels(const std::vector<PeerId>& from, Clock::duration timeout) {
  const std::uint64_t tag = openReplies();
  request(from, control::PullModel{}, tag);
  GatherResult got = gather(replies_, from, tag, Clock::now() + timeout, [this](PeerId peer) {
    return peer != network_.self() && !network_.isMember(peer);
  });
  closeReplies(tag);
  return got;
}

}  // namespace gossamer::engine::runtime

namespace gossamer::engine::runtime {

std::optional<CaughtUpModel> ClusterControl::catchUp(std::span<const PeerId> candidates,
                                                     ModelHolders holders, std::size_t floats,
                                                     Clock::duration timeout, StateKind kind) {
  const std::uint64_t tag = openReplies();
  CatchUpClient client(
      network_.self(), messenger_, replies_,
      [this](PeerId peer) { return peer != network_.self() && !network_.isMember(peer); },
      catchUpOptions_);
  const Clock::time_point start = Clock::now();
  std::optional<CaughtUpModel> model =
      client.fetch(candidates, holders, floats, tag, timeout, kind);
  closeReplies(tag);
  const CatchUpReport& report = client.report();
  if (model) {
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    log::get("peer")->info(
        "peer {:016x}: caught up with {:.1f} MiB{} at step {} in {:.2f} s from {} member(s) "
        "({}), {} chunk(s){}{}",
        network_.self(), static_cast<double>(floats) * sizeof(float) / (1 << 20),
        kind == StateKind::algorithm ? " of the algorithm's state" : "", model->step, seconds,
        model->from.size(), peerList(model->from), report.chunks,
        report.agreed ? ", each checked by a second member" : ", checked by the sender's digests",
        report.rejected > 0
            ? fmt::format(", {} rejected and fetched again (members that disagreed: {})",
                          report.rejected, peerList(report.disagreeing))
            : std::string());
  }
  return model;
}

}  // namespace gossamer::engine::runtime
