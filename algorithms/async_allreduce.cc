#include "algorithms/async_allreduce.h"

#include <algorithm>

#include "engine/base/enforce.h"
#include "engine/base/log.h"

namespace gossamer::algorithms {
namespace {

using engine::PeerId;

// A fingerprint of the member list (FNV-1a over the ids).
std::uint64_t membersFingerprint(const std::vector<PeerId>& members) {
  std::uint64_t hash = 14695981039346656037ull;
  for (PeerId id : members) {
    for (int byte = 0; byte < 8; ++byte) {
      hash ^= (id >> (8 * byte)) & 0xff;
      hash *= 1099511628211ull;
    }
  }
  return hash;
}

// With backups, the owners and the quorum are part of what the members must agree on.
std::uint64_t roundFingerprint(const std::vector<PeerId>& members,
                               const std::vector<std::size_t>& owners, std::size_t quorum) {
  std::uint64_t hash = membersFingerprint(members);
  if (owners.size() == members.size() && quorum == members.size()) return hash;
  for (std::uint64_t value : owners) hash = (hash ^ value) * 1099511628211ull;
  return (hash ^ quorum) * 1099511628211ull;
}

constexpr std::size_t kNone = static_cast<std::size_t>(-1);

// Message::integers: {fingerprint, what, chunk, piece}.
constexpr std::uint64_t kContribution = 0;  // chunk `chunk` of the sender's input, for its owner
constexpr std::uint64_t kReduced = 1;       // the owner's reduced chunk `chunk`
constexpr std::uint64_t kAbort = 2;         // the sender failed the round
constexpr std::size_t kIntegers = 4;

using Shared = std::shared_ptr<kernels::Buffer<float>>;

}  // namespace

struct AsyncAllReduce::Round {
  std::uint64_t id = 0;
  std::vector<PeerId> members;
  std::uint64_t fingerprint = 0;
  std::size_t rank = 0;
  std::size_t size = 0;
  std::vector<std::size_t> owners;  // chunk c is owned by the member of rank owners[c]
  std::size_t ownChunk = kNone;     // the chunk this peer owns, if any
  std::size_t quorum = 0;           // contributions (the owner's own included) a piece needs
  Shared sent;                      // this peer's input, sent from where it is (null: a listener)
  Shared result;  // own chunk: the sum being built; the others: the owners' reduced chunks
  std::vector<std::size_t> contributions;  // per piece of the own chunk: contributions added
  std::vector<bool> reduced;               // per piece of the own chunk: sent to the members
  std::vector<bool> contributed;           // [sender rank][piece]: added already (no duplicates)
  std::vector<bool> gathered;              // [chunk][piece]: reduced piece received
  std::size_t missingPieces = 0;           // reduced pieces still to come (own ones: compressed)
  bool compressed = false;                 // pieces travel encoded; the owner takes its own copy
  Feedback* feedback = nullptr;            // its stream's residuals, with error feedback
  RoundStatus status = RoundStatus::kPending;
  RingOutcome why = RingOutcome::kComplete;

  std::size_t n() const { return members.size(); }
  std::size_t chunks() const { return owners.size(); }
  bool owner() const { return ownChunk != kNone; }
};

namespace {

// How often a wait looks whether a member of its round is done sending (PeerContext::doneSending).
constexpr engine::Clock::duration kDoneCheck = std::chrono::milliseconds(50);

std::size_t piecesOf(std::size_t size, std::size_t n, std::size_t chunk, std::size_t pieces) {
  return ringPieces(ringSlice(size, n, chunk).count, pieces);
}

Slice pieceOf(std::size_t size, std::size_t n, std::size_t chunk, std::size_t pieces,
              std::size_t k) {
  const Slice c = ringSlice(size, n, chunk);
  const Slice s = ringSlice(c.count, ringPieces(c.count, pieces), k);
  return Slice{c.offset + s.offset, s.count};
}

}  // namespace

void writePresence(engine::PeerContext& ctx, std::span<float> flags) {
  const std::vector<PeerId>& members = ctx.members();
  std::vector<float> present(members.size(), 0.0f);
  present[static_cast<std::size_t>(std::find(members.begin(), members.end(), ctx.self()) -
                                   members.begin())] = 1.0f;
  ctx.compute().upload(flags, std::span<const float>(present));
}

std::vector<PeerId> presentMembers(engine::PeerContext& ctx, std::span<const float> flags) {
  const std::vector<PeerId>& members = ctx.members();
  std::vector<float> present(flags.size());
  ctx.compute().download(std::span<float>(present), flags);
  std::vector<PeerId> out;
  for (std::size_t i = 0; i < present.size() && i < members.size(); ++i)
    if (present[i] > 0) out.push_back(members[i]);
  return out;
}

AsyncAllReduce::AsyncAllReduce(AsyncAllReduceOptions options) : options_(std::move(options)) {
  GOSSAMER_ENFORCE(options_.pieces >= 1 && options_.pieces <= kMaxRingPipeline,
                   "{}: pieces must be in [1, {}], not {}", options_.who, kMaxRingPipeline,
                   options_.pieces);
  GOSSAMER_ENFORCE(options_.kind < engine::kMaxAlgorithmKind, "{}: message kind {} is reserved",
                   options_.who, options_.kind);
}

AsyncAllReduce::~AsyncAllReduce() = default;

void AsyncAllReduce::start(engine::PeerContext& ctx, std::uint64_t round,
                           std::span<const float> input, std::uint64_t stream) {
  std::shared_ptr<kernels::Buffer<float>> copy = buffer(ctx, input.size());
  ctx.compute().copy(copy->span(), input);
  begin(ctx, round, std::move(copy), input.size(), stream);
}

void AsyncAllReduce::start(engine::PeerContext& ctx, std::uint64_t round,
                           std::shared_ptr<kernels::Buffer<float>> input, std::uint64_t stream) {
  GOSSAMER_ENFORCE(input != nullptr, "{}: round {} without an input buffer", options_.who, round);
  const std::size_t size = input->size();
  begin(ctx, round, std::move(input), size, stream);
}

void AsyncAllReduce::listen(engine::PeerContext& ctx, std::uint64_t round, std::size_t size) {
  begin(ctx, round, nullptr, size, 0);
}

std::shared_ptr<kernels::Buffer<float>> AsyncAllReduce::buffer(engine::PeerContext& ctx,
                                                               std::size_t size) {
  return spare_.take(ctx.compute(), size);
}

void AsyncAllReduce::begin(engine::PeerContext& ctx, std::uint64_t round,
                           std::shared_ptr<kernels::Buffer<float>> input, std::size_t size,
                           std::uint64_t stream) {
  // What came meanwhile is the round's early messages: with backups, contributions that were
  // here before this peer's own count before it.
  absorbInbox(ctx);
  GOSSAMER_ENFORCE(!started_ || round > lastStarted_,
                   "{}: round {} started after round {}: rounds must increase", options_.who, round,
                   lastStarted_);
  started_ = true;
  lastStarted_ = round;
  kernels::Compute& compute = ctx.compute();
  auto r = std::make_unique<Round>();
  r->id = round;
  r->members = ctx.members();
  const std::size_t n = r->n();
  r->rank = static_cast<std::size_t>(std::find(r->members.begin(), r->members.end(), ctx.self()) -
                                     r->members.begin());
  GOSSAMER_ENFORCE(r->rank < n, "{}: peer {:016x} is not a member", options_.who, ctx.self());
  GOSSAMER_ENFORCE(input != nullptr || n > 1, "{}: a member alone listens to round {}",
                   options_.who, round);
  for (PeerId id : owners_) {
    const auto at = std::find(r->members.begin(), r->members.end(), id);
    if (at == r->members.end()) break;
    r->owners.push_back(static_cast<std::size_t>(at - r->members.begin()));
  }
  const bool named = r->owners.size() == owners_.size() && !owners_.empty();
  if (!named) {
    r->owners.resize(n);
    for (std::size_t i = 0; i < n; ++i) r->owners[i] = i;
  }
  if (const auto own = std::find(r->owners.begin(), r->owners.end(), r->rank);
      own != r->owners.end())
    r->ownChunk = static_cast<std::size_t>(own - r->owners.begin());
  r->quorum = named && contributors_ > 0 ? std::min(contributors_, n)
                                         : n - std::min(options_.backups, n - 1);
  r->fingerprint = roundFingerprint(r->members, r->owners, r->quorum);
  r->size = size;
  r->sent = std::move(input);
  r->result = buffer(ctx, r->size);
  Round& ref = *r;
  rounds_.emplace(round, std::move(r));
  if (n == 1) {
    compute.copy(ref.result->span(), ref.sent->span());
    ref.status = RoundStatus::kComplete;
    return;
  }
  const std::size_t chunks = ref.chunks();
  // Every contribution counts: the owner's own goes first. With backups it comes after those that
  // were here before this peer started, as the late one it is.
  const bool ownFirst = ref.sent && ref.quorum == n;
  std::size_t ownPieces = 0;
  if (ref.owner()) {
    const Slice own = ringSlice(ref.size, chunks, ref.ownChunk);
    const std::span<float> sum = ref.result->span().subspan(own.offset, own.count);
    if (ownFirst)
      compute.copy(sum, ref.sent->span().subspan(own.offset, own.count));
    else
      compute.fill(sum, 0.0f);
    ownPieces = piecesOf(ref.size, chunks, ref.ownChunk, options_.pieces);
  }
  ref.contributions.assign(ownPieces, ownFirst ? 1 : 0);
  ref.reduced.assign(ownPieces, false);
  ref.contributed.assign(n * options_.pieces, false);
  ref.gathered.assign(chunks * options_.pieces, false);
  for (std::size_t chunk = 0; chunk < chunks; ++chunk)
    if (chunk != ref.ownChunk)
      ref.missingPieces += piecesOf(ref.size, chunks, chunk, options_.pieces);
  const engine::PayloadCompression& compression = ctx.compression();
  ref.compressed = options_.compress && compression.enabled();
  if (ref.compressed) ref.missingPieces += ownPieces;  // the owner's decoded copies, from itself
  std::span<float> residual;
  if (ref.compressed && compression.errorFeedback && ref.sent) {
    Feedback& feedback = feedback_[stream];
    for (kernels::Buffer<float>* buffer : {&feedback.contributions, &feedback.reduced}) {
      if (buffer->size() != ref.size) {
        *buffer = compute.allocate<float>(ref.size);
        compute.fill(*buffer, 0.0f);
      }
    }
    ref.feedback = &feedback;
    residual = feedback.contributions.span();
  }
  if (ref.sent) contribute(ctx, ref, residual);
  // Messages that came before this peer started the round.
  if (auto it = future_.find(round); it != future_.end()) {
    std::vector<engine::Incoming> early = std::move(it->second);
    future_.erase(it);
    for (engine::Incoming& m : early)
      if (ref.status == RoundStatus::kPending) handle(ctx, ref, m);
  }
  if (!ownFirst && ref.sent)
    for (std::size_t k = 0; k < ownPieces && ref.status == RoundStatus::kPending; ++k) {
      if (ref.reduced[k]) {
        ctx.metrics().add(options_.who + ".late", 1);
        continue;
      }
      const Slice s = pieceOf(ref.size, chunks, ref.ownChunk, options_.pieces, k);
      compute.axpby(ref.result->span().subspan(s.offset, s.count), 1.0f,
                    ref.sent->span().subspan(s.offset, s.count), 1.0f);
      // A quorum of one (two members, one backup) needs nobody else.
      if (++ref.contributions[k] == ref.quorum) sendReduced(ctx, ref, k);
    }
  completeIfDone(ref);  // an input shorter than the member count has empty chunks
}

void AsyncAllReduce::contribute(engine::PeerContext& ctx, Round& r, std::span<float> residual) {
  // Chunk c of the input goes to its owner, piece by piece; chunks in order from the one after
  // this peer's rank on, so that not every member starts with the same owner.
  const std::size_t chunks = r.chunks();
  for (std::size_t step = 0; step < chunks; ++step) {
    const std::size_t chunk = (r.rank + 1 + step) % chunks;
    if (chunk == r.ownChunk) continue;
    for (std::size_t k = 0; k < piecesOf(r.size, chunks, chunk, options_.pieces); ++k) {
      const Slice s = pieceOf(r.size, chunks, chunk, options_.pieces, k);
      engine::Message message{.kind = options_.kind,
                              .step = r.id,
                              .integers = {r.fingerprint, kContribution, chunk, k},
                              .payloads = {r.sent->span().subspan(s.offset, s.count)},
                              .owner = r.sent};
      if (r.compressed)
        message.compressible = {
            {.payload = 0,
             .residual = residual.empty() ? residual : residual.subspan(s.offset, s.count)}};
      ctx.send(r.members[r.owners[chunk]], message);
    }
  }
}

void AsyncAllReduce::absorbInbox(engine::PeerContext& ctx) {
  for (engine::Incoming& m : ctx.inbox().drain(options_.kind)) absorb(ctx, std::move(m));
}

void AsyncAllReduce::poll(engine::PeerContext& ctx) {
  absorbInbox(ctx);
  for (auto& [id, r] : rounds_)
    if (r->status == RoundStatus::kPending && r->members != ctx.members())
      fail(ctx, *r, RingOutcome::kMissing);  // someone left or joined: the round cannot finish
}

std::uint64_t AsyncAllReduce::latestReducedHeard() const {
  for (auto it = future_.rbegin(); it != future_.rend(); ++it)
    for (const engine::Incoming& m : it->second)
      if (m.integers.size() >= kIntegers && m.integers[1] == kReduced) return it->first;
  return 0;
}

void AsyncAllReduce::absorb(engine::PeerContext& ctx, engine::Incoming message) {
  const std::uint64_t round = message.step;
  if (auto it = rounds_.find(round); it != rounds_.end()) {
    if (it->second->status == RoundStatus::kPending) handle(ctx, *it->second, message);
    return;
  }
  if (started_ && round <= lastStarted_) return;  // a round released, or never started here
  auto& queue = future_[round];
  queue.push_back(std::move(message));
  while (future_.size() > options_.maxFutureRounds) {
    ctx.metrics().add(options_.who + ".dropped",
                      static_cast<double>(future_.rbegin()->second.size()));
    future_.erase(std::prev(future_.end()));  // the furthest ahead: the latest to be needed
  }
}

void AsyncAllReduce::handle(engine::PeerContext& ctx, Round& r, const engine::Incoming& message) {
  const std::size_t n = r.n();
  const auto sender = static_cast<std::size_t>(
      std::find(r.members.begin(), r.members.end(), message.from) - r.members.begin());
  if (sender >= n) return;  // not a member of this round: ignore
  // From itself only its reduced pieces, when they travel compressed (see "Compression").
  if (sender == r.rank &&
      !(r.compressed && message.integers.size() >= kIntegers && message.integers[1] == kReduced))
    return;
  if (message.integers.size() < kIntegers || message.integers[0] != r.fingerprint) {
    fail(ctx, r, RingOutcome::kMismatch);
    return;
  }
  const std::uint64_t what = message.integers[1];
  if (what == kAbort) {
    fail(ctx, r, RingOutcome::kAborted);
    return;
  }
  const std::uint64_t chunk = message.integers[2];
  const std::uint64_t k = message.integers[3];
  const bool contribution = what == kContribution;
  const std::size_t chunks = r.chunks();
  const bool known = (what == kContribution && r.owner() && chunk == r.ownChunk) ||
                     (what == kReduced && chunk < chunks && r.owners[chunk] == sender);
  if (!known || k >= piecesOf(r.size, chunks, chunk, options_.pieces)) {
    log::get("algorithms")
        ->warn(
            "{}: refused a message from peer {:016x}: part {} of chunk {} (kind {}) is not one "
            "it sends in round {}",
            options_.who, message.from, k, chunk, what, r.id);
    ctx.metrics().add(options_.who + ".refused", 1);
    fail(ctx, r, RingOutcome::kInvalid);
    return;
  }
  const Slice s = pieceOf(r.size, chunks, chunk, options_.pieces, k);
  if (!engine::acceptMessage(message, {.payloads = {s.count}, .integers = kIntegers}, ctx.metrics(),
                             options_.who)) {
    fail(ctx, r, RingOutcome::kInvalid);
    return;
  }
  kernels::Compute& compute = ctx.compute();
  const std::span<float> out = r.result->span().subspan(s.offset, s.count);
  // A contribution and a mean stand for one input, a sum for n: each against this peer's own.
  const double share =
      contribution || options_.op == ReduceOp::kMean ? 1.0 : static_cast<double>(n);
  if (sender != r.rank && r.sent && ctx.normBound().enabled() &&
      !engine::acceptNearOwn(compute, message, ctx.upload(message.payload(0)),
                             r.sent->span().subspan(s.offset, s.count), ctx.normBound(),
                             ctx.metrics(), options_.who, share)) {
    fail(ctx, r, RingOutcome::kInvalid);
    return;
  }
  if (contribution) {
    if (r.contributed[sender * options_.pieces + k]) return;  // a duplicate
    r.contributed[sender * options_.pieces + k] = true;
    if (r.reduced[k]) {  // the piece went on without it (backups)
      ctx.metrics().add(options_.who + ".late", 1);
      return;
    }
    const engine::DeviceView received = ctx.upload(message.payload(0));
    compute.axpby(out, 1.0f, received, 1.0f);
    if (++r.contributions[k] == r.quorum) sendReduced(ctx, r, k);
  } else {
    if (r.gathered[chunk * options_.pieces + k]) return;
    r.gathered[chunk * options_.pieces + k] = true;
    compute.upload(out, message.payload(0));
    --r.missingPieces;
  }
  completeIfDone(r);
}

bool AsyncAllReduce::owes(const Round& r, std::size_t sender) const {
  if (sender == r.rank) return false;
  const std::size_t chunks = r.chunks();
  // Every contribution counts only without backups: with them, the others may make the quorum.
  if (r.owner() && r.quorum == r.n())
    for (std::size_t k = 0; k < r.contributions.size(); ++k)
      if (!r.contributed[sender * options_.pieces + k]) return true;  // to this peer's chunk
  for (std::size_t chunk = 0; chunk < chunks; ++chunk)
    if (r.owners[chunk] == sender)
      for (std::size_t k = 0; k < piecesOf(r.size, chunks, chunk, options_.pieces); ++k)
        if (!r.gathered[chunk * options_.pieces + k]) return true;  // its reduced chunk
  return false;
}

void AsyncAllReduce::completeIfDone(Round& r) {
  if (r.status == RoundStatus::kPending && r.missingPieces == 0 &&
      std::all_of(r.reduced.begin(), r.reduced.end(), [](bool sent) { return sent; }))
    r.status = RoundStatus::kComplete;
}

void AsyncAllReduce::sendReduced(engine::PeerContext& ctx, Round& r, std::size_t k) {
  const std::size_t n = r.n();
  r.reduced[k] = true;
  const Slice s = pieceOf(r.size, r.chunks(), r.ownChunk, options_.pieces, k);
  const std::span<float> out = r.result->span().subspan(s.offset, s.count);
  if (options_.op == ReduceOp::kMean)
    ctx.compute().scale(out, 1.0f / static_cast<float>(r.contributions[k]));
  // Compressed, the owner is a recipient too: it replaces its sum with the decoded piece.
  std::vector<PeerId> recipients;
  for (std::size_t i = 0; i < n; ++i)
    if (i != r.rank || r.compressed) recipients.push_back(r.members[i]);
  // The reduced piece is final: it is sent from the result buffer itself.
  engine::Message message{.kind = options_.kind,
                          .step = r.id,
                          .integers = {r.fingerprint, kReduced, r.ownChunk, k},
                          .payloads = {out},
                          .owner = r.result};
  if (r.compressed)
    message.compressible = {{.payload = 0,
                             .residual = r.feedback
                                             ? r.feedback->reduced.span().subspan(s.offset, s.count)
                                             : std::span<float>()}};
  ctx.send(recipients, message);
}

void AsyncAllReduce::fail(engine::PeerContext& ctx, Round& r, RingOutcome why) {
  if (r.status != RoundStatus::kPending) return;
  r.status = RoundStatus::kFailed;
  r.why = why;
  ctx.metrics().add(options_.who + "." + ringOutcomeName(why), 1);
  // Tell the others still in the view, so that they stop waiting for this peer's part.
  std::vector<PeerId> others;
  for (PeerId peer : r.members)
    if (peer != ctx.self() &&
        std::find(ctx.members().begin(), ctx.members().end(), peer) != ctx.members().end())
      others.push_back(peer);
  if (!others.empty())
    ctx.send(others,
             engine::Message{
                 .kind = options_.kind, .step = r.id, .integers = {r.fingerprint, kAbort, 0, 0}});
}

RingOutcome AsyncAllReduce::wait(engine::PeerContext& ctx, std::uint64_t round,
                                 engine::Clock::time_point deadline) {
  Round& r = find(round);
  for (;;) {
    // Asked before the poll: what a member that is done sent is queued by then. Such a member
    // sends this round nothing more, so a round still short of its part after the poll never
    // completes.
    std::vector<std::size_t> done;
    for (std::size_t i = 0; i < r.n(); ++i)
      if (ctx.doneSending(r.members[i])) done.push_back(i);
    poll(ctx);
    if (r.status != RoundStatus::kPending) break;
    if (std::any_of(done.begin(), done.end(), [&](std::size_t i) { return owes(r, i); })) {
      fail(ctx, r, RingOutcome::kMissing);
      break;
    }
    // In slices: a member finishing (or leaving) queues nothing to wake the wait. A slice that
    // ends early without a message: the peer is shutting down, nothing more will come.
    const engine::Clock::time_point now = ctx.now();
    const engine::Clock::time_point slice = std::min(deadline, now + kDoneCheck);
    if (now >= deadline || (!ctx.inbox().wait(options_.kind, slice) && ctx.now() < slice)) {
      poll(ctx);
      if (r.status != RoundStatus::kPending) break;
      if (now >= deadline) {
        std::vector<PeerId> missing;
        for (std::size_t i = 0; i < r.n(); ++i)
          if (owes(r, i)) missing.push_back(r.members[i]);
        ctx.waitExpired(missing);
      }
      fail(ctx, r, RingOutcome::kMissing);
      break;
    }
  }
  return r.status == RoundStatus::kComplete ? RingOutcome::kComplete : r.why;
}

AsyncAllReduce::Residuals AsyncAllReduce::residuals(std::uint64_t stream) const {
  const auto it = feedback_.find(stream);
  if (it == feedback_.end()) return {};
  return {it->second.contributions.span(), it->second.reduced.span()};
}

RoundStatus AsyncAllReduce::status(std::uint64_t round) const {
  const Round* r = lookup(round);
  return r ? r->status : RoundStatus::kUnknown;
}

RingOutcome AsyncAllReduce::outcome(std::uint64_t round) const {
  const Round* r = lookup(round);
  return r && r->status == RoundStatus::kFailed ? r->why : RingOutcome::kComplete;
}

std::span<const float> AsyncAllReduce::input(std::uint64_t round) const {
  const Round* r = lookup(round);
  GOSSAMER_ENFORCE(r != nullptr && r->sent != nullptr,
                   "{}: round {} was not started (or was released, or listened to)", options_.who,
                   round);
  return r->sent->span();
}

std::span<const float> AsyncAllReduce::result(std::uint64_t round) const {
  const Round* r = lookup(round);
  GOSSAMER_ENFORCE(r && r->status == RoundStatus::kComplete, "{}: round {} is not complete",
                   options_.who, round);
  return r->result->span();
}

void AsyncAllReduce::release(engine::PeerContext& ctx, std::uint64_t round) {
  auto it = rounds_.find(round);
  if (it == rounds_.end()) return;
  fail(ctx, *it->second, RingOutcome::kMissing);
  spare_.give(std::move(it->second->sent));
  spare_.give(std::move(it->second->result));
  rounds_.erase(it);
}

void AsyncAllReduce::releaseAll(engine::PeerContext& ctx) {
  while (!rounds_.empty()) release(ctx, rounds_.begin()->first);
  future_.clear();
}

AsyncAllReduce::Round& AsyncAllReduce::find(std::uint64_t round) {
  auto it = rounds_.find(round);
  GOSSAMER_ENFORCE(it != rounds_.end(), "{}: round {} was not started (or was released)",
                   options_.who, round);
  return *it->second;
}

const AsyncAllReduce::Round* AsyncAllReduce::lookup(std::uint64_t round) const {
  auto it = rounds_.find(round);
  return it == rounds_.end() ? nullptr : it->second.get();
}

}  // namespace gossamer::algorithms
