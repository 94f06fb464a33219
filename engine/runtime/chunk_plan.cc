#include "engine/runtime/chunk_plan.h"

#include <algorithm>
#include <tuple>

#include <fmt/format.h>
#include <openssl/sha.h>

namespace gossamer::engine::runtime {

Digest sha256(std::span<const std::byte> bytes) {
  Digest out;
  SHA256(reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size(),
         reinterpret_cast<unsigned char*>(out.data()));
  return out;
}

std::string shortHex(const Digest& digest) {
  return fmt::format("{:02x}{:02x}{:02x}{:02x}", static_cast<unsigned>(digest[0]),
                     static_cast<unsigned>(digest[1]), static_cast<unsigned>(digest[2]),
                     static_cast<unsigned>(digest[3]));
}

ChunkPlan::ChunkPlan(std::size_t chunks, std::size_t sources, std::size_t window)
    : chunks_(chunks), sources_(sources), window_(std::max<std::size_t>(window, 1)) {
  if (sources == 0) failure_ = "no source to fetch from";
}

std::optional<std::pair<std::size_t, std::size_t>> ChunkPlan::choosePair(std::size_t chunk) {
  const Chunk& c = chunks_[chunk];
  std::vector<std::size_t> live;
  for (std::size_t s = 0; s < sources_.size(); ++s)
    if (sources_[s].alive) live.push_back(s);
  if (live.empty()) {
    failure_ = "every source failed";
    return std::nullopt;
  }
  auto triedCount = [&](std::size_t s, std::size_t v) {
    return static_cast<std::size_t>(std::count(c.tried.begin(), c.tried.end(), std::pair{s, v}));
  };
  // One live source checks itself (kMaxSingleSourceTries times); several check each other, each
  // pair once.
  const bool alone = live.size() == 1;
  bool untried = false;
  std::optional<std::pair<std::size_t, std::size_t>> best;
  std::tuple<std::size_t, std::size_t, std::size_t, std::size_t> bestScore{};
  for (std::size_t s : live) {
    for (std::size_t v : live) {
      if ((s == v) != alone) continue;
      if (triedCount(s, v) >= (alone ? kMaxSingleSourceTries : 1)) continue;
      untried = true;
      if (sources_[s].inFlight >= window_) continue;
      // Fewest disagreements, then the least loaded server, then the verifier asked least, then
      // a rotation by chunk so that equal sources take turns.
      const std::tuple score{sources_[s].disagreements + sources_[v].disagreements,
                             sources_[s].inFlight, sources_[v].verifying,
                             (s + sources_.size() - chunk % sources_.size()) % sources_.size()};
      if (!best || score < bestScore) {
        best = std::pair{s, v};
        bestScore = score;
      }
    }
  }
  if (!untried) {
    failure_ =
        alone ? fmt::format("chunk {} failed its digest {} times", chunk, kMaxSingleSourceTries)
              : fmt::format("the sources disagree on chunk {}: every pair was tried", chunk);
  }
  return best;
}

std::vector<ChunkAsk> ChunkPlan::asks() {
  std::vector<ChunkAsk> out;
  for (std::size_t i = 0; i < chunks_.size() && !failed(); ++i) {
    Chunk& c = chunks_[i];
    if (c.state != State::pending) continue;
    const std::optional<std::pair<std::size_t, std::size_t>> pair = choosePair(i);
    if (!pair) continue;
    c.state = State::asked;
    ++c.attempt;
    c.server = pair->first;
    c.verifier = pair->second;
    ++sources_[c.server].inFlight;
    ++sources_[c.verifier].verifying;
    if (c.server == c.verifier) {
      out.push_back({i, c.server, c.attempt, true, true});
    } else {
      out.push_back({i, c.server, c.attempt, true, false});
      out.push_back({i, c.verifier, c.attempt, false, true});
    }
  }
  return out;
}

ChunkVerdict ChunkPlan::onData(std::size_t chunk, std::size_t source, std::uint32_t attempt,
                               const Digest& actual) {
  return record(chunk, source, attempt, actual, &Chunk::server, &Chunk::actual);
}

ChunkVerdict ChunkPlan::onDigest(std::size_t chunk, std::size_t source, std::uint32_t attempt,
                                 const Digest& claimed) {
  return record(chunk, source, attempt, claimed, &Chunk::verifier, &Chunk::claimed);
}

ChunkVerdict ChunkPlan::record(std::size_t chunk, std::size_t source, std::uint32_t attempt,
                               const Digest& digest, std::size_t Chunk::*from,
                               std::optional<Digest> Chunk::*half) {
  if (chunk >= chunks_.size()) return ChunkVerdict::stale;
  Chunk& c = chunks_[chunk];
  if (c.state != State::asked || c.attempt != attempt || c.*from != source || c.*half)
    return ChunkVerdict::stale;
  c.*half = digest;
  sources_[source].silences = 0;
  return check(chunk);
}

ChunkVerdict ChunkPlan::check(std::size_t chunk) {
  Chunk& c = chunks_[chunk];
  if (!c.actual || !c.claimed) return ChunkVerdict::waiting;
  release(c);
  if (*c.actual == *c.claimed) {
    c.state = State::accepted;
    ++accepted_;
    ++sources_[c.server].served;
    return ChunkVerdict::accepted;
  }
  c.tried.emplace_back(c.server, c.verifier);
  ++sources_[c.server].disagreements;
  if (c.verifier != c.server) ++sources_[c.verifier].disagreements;
  ++rejections_;
  c.state = State::pending;
  return ChunkVerdict::rejected;
}

void ChunkPlan::release(Chunk& c) {
  --sources_[c.server].inFlight;
  c.actual.reset();
  c.claimed.reset();
}

std::vector<std::size_t> ChunkPlan::reclaim(std::size_t source) {
  std::vector<std::size_t> dropped;
  for (std::size_t i = 0; i < chunks_.size(); ++i) {
    Chunk& c = chunks_[i];
    if (c.state != State::asked || (c.server != source && c.verifier != source)) continue;
    if (c.actual) dropped.push_back(i);
    release(c);
    c.state = State::pending;
  }
  return dropped;
}

std::vector<std::size_t> ChunkPlan::onSourceLost(std::size_t source) {
  if (source >= sources_.size() || !sources_[source].alive) return {};
  sources_[source].alive = false;
  std::vector<std::size_t> dropped = reclaim(source);
  if (std::none_of(sources_.begin(), sources_.end(), [](const Source& s) { return s.alive; }))
    failure_ = "every source failed";
  return dropped;
}

std::vector<std::size_t> ChunkPlan::onSourceSilent(std::size_t source) {
  if (source >= sources_.size() || !sources_[source].alive) return {};
  if (++sources_[source].silences >= kMaxSilences) return onSourceLost(source);
  return reclaim(source);
}

}  // namespace gossamer::engine::runtime
