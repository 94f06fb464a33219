// Which chunk of a catch-up comes from which source, and when a chunk may be merged: the joiner's
// side of the verified, chunked transfer (catch_up.h) as a state machine with no I/O, so that
// every rule is tested on its own (tests/engine/chunk_plan_test.cc).
//
// A state of C chunks is fetched from N sources that claim to hold it identically (N >= 2), or
// from one source that holds its own (N = 1):
//
// - Each chunk is asked for as two requests: its bytes from one source (the server) and its
//   SHA-256 digest from another (the verifier). The joiner hashes the bytes it receives; the chunk
//   is accepted when that digest equals the verifier's, i.e. when two sources agree on it. With
//   one source, server and verifier are the same: the digest then guards the transfer only.
// - Servers are chosen by load: at most `window` chunks in flight per source, the least loaded
//   first; verifiers round-robin over the others, so the hashing is spread too.
// - A mismatch rejects the bytes and asks the chunk again from a pair of sources not yet tried
//   for it, preferring sources with fewer disagreements; a chunk on which every pair was tried
//   fails the plan (the sources do not hold the same state). With one source a chunk is tried
//   kMaxSingleSourceTries times.
// - A source that fails (it left, it no longer holds the state) is dropped: its chunks are asked
//   again elsewhere. A source that owes replies and is silent (a reply lost on the way) has its
//   chunks asked again, of any source, itself included; after kMaxSilences silences in a row it
//   is dropped. The plan fails when no source is left.
//
// Replies are matched to the attempt that asked: a late reply to an earlier attempt is stale.
// Nothing here is merged until accepted; the caller keeps received bytes only while the verdict
// is `waiting`.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace gossamer::engine::runtime {

using Digest = std::array<std::byte, 32>;  // SHA-256

// SHA-256 of `bytes` (OpenSSL).
Digest sha256(std::span<const std::byte> bytes);
// The first 8 hex digits, for logs.
std::string shortHex(const Digest& digest);

// A request the caller sends now: chunk `chunk`'s bytes (`data`) and/or digest (`digest`) from
// source `source`, tagged with `attempt` (echoed in the reply).
struct ChunkAsk {
  std::size_t chunk = 0;
  std::size_t source = 0;
  std::uint32_t attempt = 0;
  bool data = false;
  bool digest = false;
  friend bool operator==(const ChunkAsk&, const ChunkAsk&) = default;
};

enum class ChunkVerdict {
  waiting,   // keep the bytes: the other half of the check has not come yet
  accepted,  // merge the bytes (now or, after a digest, the ones kept)
  rejected,  // drop the bytes: they disagree with the digest; the chunk is asked again
  stale,     // a reply to an attempt that is over: ignore it
};

class ChunkPlan {
 public:
  static constexpr std::uint32_t kMaxSingleSourceTries = 3;
  static constexpr std::uint32_t kMaxSilences = 3;

  ChunkPlan(std::size_t chunks, std::size_t sources, std::size_t window);

  // The requests to send now (each chunk that is not asked yet, while servers have room).
  std::vector<ChunkAsk> asks();

  // The bytes of `chunk` came from `source` for `attempt`, hashing to `actual`.
  ChunkVerdict onData(std::size_t chunk, std::size_t source, std::uint32_t attempt,
                      const Digest& actual);
  // `source`'s digest of `chunk` came for `attempt`. `accepted` means the bytes kept under
  // `waiting` are the chunk's.
  ChunkVerdict onDigest(std::size_t chunk, std::size_t source, std::uint32_t attempt,
                        const Digest& claimed);
  // `source` failed; returns the chunks whose kept bytes must be dropped (asked again).
  std::vector<std::size_t> onSourceLost(std::size_t source);
  // `source` owes replies and sent none for too long: what it owes is asked again (the same
  // return); its kMaxSilences-th silence in a row, with no reply between, is a loss.
  std::vector<std::size_t> onSourceSilent(std::size_t source);

  bool done() const { return accepted_ == chunks_.size(); }
  // Why the plan cannot complete (empty while it can).
  const std::string& failure() const { return failure_; }
  bool failed() const { return !failure_.empty(); }

  bool alive(std::size_t source) const { return sources_[source].alive; }
  std::size_t disagreements(std::size_t source) const { return sources_[source].disagreements; }
  // Chunks each source served that were accepted.
  std::size_t served(std::size_t source) const { return sources_[source].served; }
  std::size_t chunksAccepted() const { return accepted_; }
  std::size_t rejections() const { return rejections_; }

 private:
  enum class State { pending, asked, accepted };
  struct Chunk {
    State state = State::pending;
    std::size_t server = 0;
    std::size_t verifier = 0;
    std::uint32_t attempt = 0;
    std::optional<Digest> actual;   // of the bytes kept for this attempt
    std::optional<Digest> claimed;  // the verifier's digest for this attempt
    std::vector<std::pair<std::size_t, std::size_t>> tried;  // (server, verifier), mismatched
  };
  struct Source {
    bool alive = true;
    std::size_t inFlight = 0;  // chunks it serves now
    std::size_t disagreements = 0;
    std::size_t served = 0;
    std::size_t verifying = 0;  // digests asked of it, ever (spreads the hashing)
    std::uint32_t silences = 0;  // in a row, without a reply between
  };
  // Puts every chunk asked of `source` back to pending; returns those with bytes kept.
  std::vector<std::size_t> reclaim(std::size_t source);

  // The best untried pair for `chunk` among live sources with room; nullopt when none has room
  // now. Sets failure_ when every pair was tried.
  std::optional<std::pair<std::size_t, std::size_t>> choosePair(std::size_t chunk);
  // One half of a chunk's check came from `source`: the bytes' digest (`from` = server,
  // `half` = actual) or the verifier's (verifier, claimed).
  ChunkVerdict record(std::size_t chunk, std::size_t source, std::uint32_t attempt,
                      const Digest& digest, std::size_t Chunk::*from,
                      std::optional<Digest> Chunk::*half);
  ChunkVerdict check(std::size_t chunk);
  void release(Chunk& c);

  std::vector<Chunk> chunks_;
  std::vector<Source> sources_;
  std::size_t window_;
  std::size_t accepted_ = 0;
  std::size_t rejections_ = 0;
  std::string failure_;
};

}  // namespace gossamer::engine::runtime
