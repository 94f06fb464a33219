// The source side of a verified catch-up (catch_up.h): a member holds a copy of its params for a
// joiner and serves it in chunks, each as bytes, as a SHA-256 digest, or both.
//
//   stateRequest {}  -> the copy of its params taken at the member's next step boundary
//                    (SnapshotBoard; the final one at once) is held under a fresh id
//   stateRequest {1} -> a copy of the algorithm's shared state (Algorithm::sharedState, taken on
//                    this server's thread), held the same way
//                 both answered stateHeader {id, floats, version, integers...}, the step in the
//                 envelope; id 0: no state to give now
//   chunkRequest {id, chunk, chunk floats, attempt, bytes?, digest?}
//                 -> chunk {id, chunk, attempt, held, [digest]} with the chunk's floats as the
//                    payload when asked for, sent from the held copy in place (no copy)
//
// A chunk asked for without its digest is answered at once on the io thread; digests are
// computed on this server's own thread, started on first use (a 4 MiB chunk takes about 3 ms),
// once per chunk of a copy, so the io thread never hashes. A copy is held while joiners use it:
// at most kMaxHeld copies, each dropped after kHeldIdle without a request (an unknown or dropped
// id is answered `held` = 0, and the joiner asks elsewhere).
//
// Threading: answerState() on any thread (the compute thread's publish or the io thread);
// onChunkRequest() on the io thread; replies leave from either or from the hashing thread
// (Messenger::sendFromHost is thread-safe).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <thread>

#include "engine/runtime/chunk_plan.h"
#include "engine/runtime/messenger.h"
#include "engine/runtime/snapshots.h"

namespace gossamer::engine::runtime {

// The kinds of the catch-up's runtime messages, set by the receiving runtime from the control
// bytes (never trusted from the sender), so that queued replies are told apart.
enum CatchUpKind : std::uint32_t {
  kStateRequestKind = 1,  // a state request waiting in the SnapshotBoard for the next copy
  kStateHeaderKind = 2,
  kChunkReplyKind = 3,
};

// The integers of a chunk request, in order (control.capnp).
struct ChunkRequestFields {
  std::uint64_t copy = 0;
  std::uint64_t chunk = 0;
  std::uint64_t chunkFloats = 0;
  std::uint32_t attempt = 0;
  bool data = false;
  bool digest = false;
  std::vector<std::uint64_t> integers() const;
  // nullopt for integers of another shape (a hostile or broken peer).
  static std::optional<ChunkRequestFields> of(const std::vector<std::uint64_t>& integers);
};

// The integers of a chunk reply.
struct ChunkReplyFields {
  std::uint64_t copy = 0;
  std::uint64_t chunk = 0;
  std::uint32_t attempt = 0;
  bool held = false;
  std::optional<Digest> digest;
  std::vector<std::uint64_t> integers() const;
  static std::optional<ChunkReplyFields> of(const std::vector<std::uint64_t>& integers);
};

class CatchUpServer {
 public:
  static constexpr std::size_t kMaxHeld = 4;
  static constexpr std::chrono::seconds kHeldIdle{120};
  // The largest chunk served (a request for more is answered `held` = 0).
  static constexpr std::uint64_t kMaxChunkFloats = std::uint64_t{64} << 20;  // 256 MiB

  explicit CatchUpServer(Messenger& messenger);
  ~CatchUpServer();
  CatchUpServer(const CatchUpServer&) = delete;
  CatchUpServer& operator=(const CatchUpServer&) = delete;

  // Holds `snapshot` for `request`'s sender and answers with its header.
  void answerState(const Incoming& request, std::shared_ptr<const Snapshot> snapshot);
  // Answers `request` on this server's thread with a copy of what `take` returns (a state copied
  // there, off the io thread), or with "none" when it returns null.
  void answerStateWith(const Incoming& request,
                       std::function<std::shared_ptr<const Snapshot>()> take);
  // Io thread: a chunk request.
  void onChunkRequest(const Incoming& request);
  // Stops the hashing thread (pending digests are not sent). Idempotent.
  void stop();

  // Digests computed, and chunks sent, since the start (tests, metrics).
  std::uint64_t digestsComputed() const;
  std::uint64_t chunksSent() const;

 private:
  struct Held;
  struct Job {
    PeerId to = 0;
    std::uint64_t tag = 0;
    ChunkRequestFields request;
    std::shared_ptr<Held> held;
  };
  std::shared_ptr<Held> find(std::uint64_t copy);
  void reply(const Job& job, const std::optional<Digest>& digest);
  void hash(Job job);
  // Runs `work` on this server's thread (started on first use); false when stopping.
  bool post(std::function<void()> work);
  void workLoop();

  Messenger& messenger_;
  mutable std::mutex mutex_;
  std::condition_variable work_;
  std::map<std::uint64_t, std::shared_ptr<Held>> held_;
  std::uint64_t nextCopy_ = 0;
  std::deque<std::function<void()>> jobs_;
  std::uint64_t digests_ = 0;
  std::uint64_t chunksSent_ = 0;
  bool stopping_ = false;
  std::thread hasher_;
};

}  // namespace gossamer::engine::runtime
