// The peer runtime's own protocol between peers (route `runtime`, messages of control.capnp):
//
//   status         "are you training, at which step of how many, did you start with me (this
//                  life of me: a restart is a new life), and have you trained all your steps?"
//                  A starting peer asks every member: one that the cluster started with waits
//                  until its view holds all of them (the same member list gives every peer the
//                  same shards and graph); one that finds the cluster training joins late; one
//                  that finds a member done, which did not count on it, has come too late.
//   finished       "my training loop is over", sent once on each link (control and data) behind
//                  everything the sender's compute thread sent on it: once both marks are in,
//                  everything it sent is in the inbox. The finish barrier waits for every live
//                  member's; a gather stops waiting for a peer that finished. A member that
//                  enters the view after the announcement (a joiner admitted at the last step,
//                  gossiped here late) gets the marks then: it waits for them like the others.
//   released       "I have what I need from the others (their final models): they may leave".
//   pull / model   a copy of the receiver's params at its next step boundary (SnapshotBoard),
//                  for the final consensus.
//   stateRequest / stateHeader / chunkRequest / chunk
//                  a joiner's verified catch-up in chunks from one or several members
//                  (catch_up.h, catch_up_server.h).
//
// Replies to the runtime's own requests go to a queue of their own, never to the algorithm's
// inbox. Threading: onMessage() on the io thread; wake() on any thread; everything else on the
// compute thread. Lock order: mutex_ may be held while the view is read (PeerNetwork's lock), never
// the other way round.
#pragma once

#include <array>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "engine/life/start_rule.h"
#include "engine/runtime/catch_up.h"
#include "engine/runtime/catch_up_server.h"
#include "engine/runtime/control_codec.h"
#include "engine/runtime/message_queue.h"
#include "engine/runtime/messenger.h"
#include "engine/runtime/network.h"
#include "engine/runtime/peer_state.h"
#include "engine/runtime/snapshots.h"
#include "engine/runtime/speeds.h"

namespace gossamer::engine::runtime {

// How a peer starts (engine/life/start_rule.h).
using StartPlan = life::StartPlan;

class ClusterControl {
 public:
  ClusterControl(PeerNetwork& network, Messenger& messenger, SnapshotBoard& snapshots,
                 const LoopStatus& status);

  // Io thread: a message of the runtime's route.
  void onMessage(Incoming message, std::vector<std::byte> control);
  // Any thread: waits re-check their conditions (a membership change).
  void wake();
  // Io thread, after each change of the view: wake(), and the marks of every barrier this peer
  // announced go to the members that were not in the view when it did.
  void onViewChanged();
  // Any thread: every wait ends now and later ones return at once (kill, shutdown).
  void stop();

  // ---- compute thread ----
  // Waits until training can start (see the header comment): `minPeers` members, or the members
  // an initial member was expected with, or a cluster already training. A peer resumed from a
  // checkpoint catches up like a newcomer. A cluster any of whose members trained all its steps
  // is ending: unless that member counted on this peer from the start, the plan says
  // clusterDone, whatever else answered. Returns cannotJoin at `joinDeadline` if this peer has
  // joined no one by then (Clock::time_point::max(): never). Throws gossamer::Error after
  // `timeout`, naming how many joined and `seeds` (and why it joined no one, if it did not), or
  // when stopped.
  StartPlan awaitStart(std::size_t minPeers, bool resumed, Clock::duration timeout,
                       Clock::time_point joinDeadline, const std::string& seeds);
  // `peer`'s status, when it answers within `timeout`.
  std::optional<control::Status> statusOf(PeerId peer, Clock::duration timeout);
  // The members this peer starts training with (answers `expected` to them, in the lives it
  // sees now, not to a later life of one: a restarted member joins late like a newcomer).
  void startedWith(const std::vector<PeerId>& members);

  // The end-of-run barriers.
  enum class Barrier { finished, released };
  // Sends `barrier`'s marks to `to`, and later to every member that enters the view.
  void announce(Barrier barrier, const std::vector<PeerId>& to, Clock::duration wait);
  // Waits until every live member but this peer has announced `barrier`, or `timeout`; false on
  // timeout (logged). Meanwhile the marks this peer announced go again, every tenth of the
  // timeout (0.5-5 s), to the members still missing (a mark is lost with a link that breaks).
  bool await(Barrier barrier, Clock::duration timeout);
  bool hasFinished(PeerId peer) const;
  bool hasReleased(PeerId peer) const;

  // `from`'s params at its next step boundary (payload 0, the step in `step`), or nullopt when
  // none came within `timeout` (or `from` left).
  std::optional<Incoming> pullModel(PeerId from, Clock::duration timeout);
  // The same from several peers at once (the final consensus).
  GatherResult pullModels(const std::vector<PeerId>& from, Clock::duration timeout);

  // The members' model in verified chunks (catch_up.h): what PeerContext::catchUp does. Logs
  // what came from whom.
  std::optional<CaughtUpModel> catchUp(std::span<const PeerId> candidates, ModelHolders holders,
                                       std::size_t floats, Clock::duration timeout,
                                       StateKind kind = StateKind::params);
  // Where a request for the algorithm's shared state is answered from (Peer: the algorithm's
  // sharedState()); called on the catch-up server's thread. Unset: none.
  void setSharedState(std::function<std::optional<SharedState>()> provider) {
    sharedState_ = std::move(provider);
  }
  void setCatchUpOptions(const CatchUpOptions& options) { catchUpOptions_ = options; }
  const CatchUpServer& catchUpServer() const { return catchUpServer_; }

  // Any thread: answers pulls with `snapshot` (sent from it in place, no copy): model pulls with
  // the params, catch-up state requests by holding the copy (CatchUpServer).
  void answerPulls(const std::vector<Incoming>& pulls, std::shared_ptr<const Snapshot> snapshot);

  MessageQueue& replies() { return replies_; }
  // How fast each peer trains (speeds.h): the reports of the others, recorded as they arrive.
  SpeedBoard& speeds() { return speeds_; }
  const SpeedBoard& speeds() const { return speeds_; }
  // Any thread: `speed` is this peer's own; recorded, and sent to every other member.
  void reportSpeed(const PeerSpeed& speed);

 private:
  void request(const std::vector<PeerId>& to, const control::Message& message, std::uint64_t tag);
  // A fresh tag whose replies are queued until closeReplies(tag), which also drops those left.
  std::uint64_t openReplies();
  void closeReplies(std::uint64_t tag);
  // The status of each of `peers` that answers within `timeout`.
  std::vector<control::Status> askStatus(const std::vector<PeerId>& peers, Clock::duration timeout);
  std::vector<PeerId> others() const;
  // The marks of every announced barrier to the members that have not had them (any thread).
  void markLateMembers();
  // A mark of `barrier` on `channel` from `from` (io thread): recorded, and answered with this
  // peer's own marks when it is the member's first of the barrier or says the sender is `waiting`
  // (control.cc).
  void onMark(Barrier barrier, PeerId from, std::uint32_t channel, bool waiting);
  // `barrier`'s marks, one per channel, to `to` (any thread, outside mutex_); `waiting`: this
  // peer still misses theirs.
  void sendMarks(Barrier barrier, const std::vector<PeerId>& to, bool waiting = false);

  PeerNetwork& network_;
  Messenger& messenger_;
  SnapshotBoard& snapshots_;
  const LoopStatus& status_;
  MessageQueue replies_;
  TagSource tags_;
  mutable std::mutex mutex_;
  std::condition_variable changed_;
  // The members this peer started training with, each with its incarnation in this peer's view
  // then: a later life of one (a restart) asks with a higher incarnation and joins late.
  std::map<PeerId, std::uint64_t> startLives_;
  // By Barrier (finished, released), per peer: bit c, the mark of channel c came.
  std::array<std::map<PeerId, unsigned>, 2> marks_;
  // Per barrier this peer announced: whom its marks went to (a member outside it gets them when
  // it appears in the view).
  std::map<Barrier, std::set<PeerId>> announcedTo_;
  std::uint64_t statusTag_ = 0;  // of the status request in flight
  std::map<PeerId, control::Status> statuses_;
  std::uint64_t wakeups_ = 0;  // counts wake(): a wait returns when the view may have changed
  bool stopped_ = false;
  CatchUpOptions catchUpOptions_;
  // The tags of the model pulls and catch-ups in flight: only their replies are queued (a late
  // reply to a wait that ended would hold its receive buffer for good).
  std::set<std::uint64_t> awaited_;
  std::function<std::optional<SharedState>()> sharedState_;
  SpeedBoard speeds_;  // the members' last control::Speed reports, and this peer's own
  // Last: destroyed first, its thread joined while what its jobs use (sharedState_) still lives.
  CatchUpServer catchUpServer_;
};

}  // namespace gossamer::engine::runtime
