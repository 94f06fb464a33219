// The joiner's side of a verified catch-up: a peer that enters a training cluster late (or
// restarts without its checkpoint, or falls behind a partition) fetches a member's params in
// chunks, so the frame limit never binds and several members can send at once, and merges
// nothing it has not verified.
//
//   1. It asks the candidates to hold a copy of their params (stateRequest): with
//      ModelHolders::identical (a synchronous algorithm: the members hold one model) every
//      candidate at once, up to CatchUpOptions::maxSources; with ModelHolders::one the first
//      candidate that answers (a gossip model is one peer's own).
//   2. Identical holders are grouped by step (an algorithm's state by its version): the largest
//      group (the latest on a tie) is fetched from all of its members at once, each chunk's
//      bytes from one checked against the SHA-256 another computed (chunk_plan.h: a chunk two
//      sources agree on). A group of one, or a group that turns out to disagree, is fetched from
//      one source (the first candidate), checked against that source's own digests.
//   3. A source that leaves the view or drops its copy is replaced by the others of the group;
//      one silent for half of `timeout` while it owes replies is asked again (a reply lost on
//      the way), and replaced after three such silences; a rejected chunk is asked again
//      elsewhere. Only a complete, verified state is returned; anything less returns nullopt
//      with the reason logged.
//
// Threading: the compute thread (it waits on the runtime's reply queue).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <vector>

#include "engine/algorithm.h"
#include "engine/runtime/message_queue.h"
#include "engine/runtime/messenger.h"

namespace gossamer::engine::runtime {

// What a catch-up fetches: the members' params (their snapshots), or the algorithm's shared state
// (Algorithm::sharedState: a diloco's outer state).
enum class StateKind : std::uint64_t { params = 0, algorithm = 1 };

// 32 MiB in flight per source: several bandwidth-delay products of a long link (8 MB at
// 300 Mbit/s and 212 ms), and half of what the shaped transport lets wait out its latency per
// link (larger windows stalled on it: 1.30x the ideal at 16 MiB x 4 against 1.05x at 4 MiB x 8,
// `gossamer-bench join --sources 1`).
struct CatchUpOptions {
  std::size_t chunkBytes = std::size_t{4} << 20;
  std::size_t window = 8;  // chunks in flight per source
  // Chunks in flight from all sources together: the joiner's receive buffers (Staging's receive
  // slots). Beyond them chunks land in the links' own bounded pools and the links stall: 4
  // sources x 8 chunks into 16 slots fetched at 2.1x the ideal, 4 x 4 at 1.25x.
  std::size_t maxInFlight = 16;
  std::size_t maxSources = 8;
};

// What a catch-up moved, for logs and `gossamer-bench join`.
struct CatchUpReport {
  std::size_t chunks = 0;              // of the transfer that completed
  std::vector<PeerId> served;          // the members whose chunks were merged
  std::size_t rejected = 0;          // chunks whose bytes disagreed with their digest
  std::vector<PeerId> sourcesLost;   // stopped answering, left or dropped their copy
  std::vector<PeerId> disagreeing;   // a source in a rejected pair that never agreed after
  bool agreed = false;               // every chunk was checked by a second source
};

class CatchUpClient {
 public:
  // `replies` holds the runtime's replies (ClusterControl routes stateHeader and chunk there);
  // `gone` says a peer left the view.
  CatchUpClient(PeerId self, Messenger& messenger, MessageQueue& replies,
                std::function<bool(PeerId)> gone, CatchUpOptions options = {});

  // Fetches a state of `floats` params (see the header comment); `tag` must be fresh and
  // replies carrying it are this fetch's. `timeout` bounds the wait for the holders' copies
  // (taken at their next step boundary) and each source's silence while it owes replies.
  std::optional<CaughtUpModel> fetch(std::span<const PeerId> candidates, ModelHolders holders,
                                     std::size_t floats, std::uint64_t tag,
                                     Clock::duration timeout, StateKind kind = StateKind::params);

  const CatchUpReport& report() const { return report_; }

 private:
  struct Source {
    PeerId peer = 0;
    std::uint64_t copy = 0;
    std::uint64_t step = 0;
    std::uint64_t version = 0;  // holders of one state agree on it (grouping)
    std::vector<std::uint64_t> integers;
  };
  // The holders' copies (their headers), in candidate order.
  std::vector<Source> askHolders(std::span<const PeerId> candidates, ModelHolders holders,
                                 std::size_t floats, std::uint64_t tag, Clock::duration timeout,
                                 StateKind kind);
  // Runs a ChunkPlan over `sources` into `out`; false when it failed (logged).
  bool transfer(const std::vector<Source>& sources, std::span<float> out, std::uint64_t tag,
                Clock::duration timeout);

  PeerId self_;
  Messenger& messenger_;
  MessageQueue& replies_;
  std::function<bool(PeerId)> gone_;
  CatchUpOptions options_;
  CatchUpReport report_;
};

}  // namespace gossamer::engine::runtime
