#include "engine/runtime/catch_up_server.h"

#include <algorithm>
#include <cstring>
#include <random>

#include "engine/runtime/control_codec.h"

namespace gossamer::engine::runtime {

namespace {

constexpr std::size_t kDigestWords = 4;

void putDigest(std::vector<std::uint64_t>& out, const Digest& digest) {
  for (std::size_t w = 0; w < kDigestWords; ++w) {
    std::uint64_t word = 0;
    std::memcpy(&word, digest.data() + 8 * w, 8);
    out.push_back(word);
  }
}

Digest takeDigest(const std::vector<std::uint64_t>& in, std::size_t at) {
  Digest digest;
  for (std::size_t w = 0; w < kDigestWords; ++w) std::memcpy(digest.data() + 8 * w, &in[at + w], 8);
  return digest;
}

}  // namespace

std::vector<std::uint64_t> ChunkRequestFields::integers() const {
  return {copy, chunk, chunkFloats, attempt, data ? 1u : 0u, digest ? 1u : 0u};
}

std::optional<ChunkRequestFields> ChunkRequestFields::of(const std::vector<std::uint64_t>& in) {
  if (in.size() != 6 || in[3] > UINT32_MAX || in[4] > 1 || in[5] > 1) return std::nullopt;
  return ChunkRequestFields{in[0],      in[1],     in[2], static_cast<std::uint32_t>(in[3]),
                            in[4] == 1, in[5] == 1};
}

std::vector<std::uint64_t> ChunkReplyFields::integers() const {
  std::vector<std::uint64_t> out{copy, chunk, attempt, held ? 1u : 0u};
  if (digest) putDigest(out, *digest);
  return out;
}

std::optional<ChunkReplyFields> ChunkReplyFields::of(const std::vector<std::uint64_t>& in) {
  if ((in.size() != 4 && in.size() != 4 + kDigestWords) || in[2] > UINT32_MAX || in[3] > 1)
    return std::nullopt;
  ChunkReplyFields out{in[0], in[1], static_cast<std::uint32_t>(in[2]), in[3] == 1, std::nullopt};
  if (in.size() == 4 + kDigestWords) out.digest = takeDigest(in, 4);
  return out;
}

struct CatchUpServer::Held {
  std::shared_ptr<const Snapshot> snapshot;
  Clock::time_point lastUse;
  std::map<std::pair<std::uint64_t, std::uint64_t>, Digest> digests;  // (chunk floats, chunk)
};

// Copy ids count up from a random start, so that a joiner's id from this server's earlier life
// (a restart) names no copy of this one.
CatchUpServer::CatchUpServer(Messenger& messenger) : messenger_(messenger) {
  std::random_device random;
  // Far from wrapping: never 0 once incremented.
  nextCopy_ = (std::uint64_t{random()} << 32 | random()) >> 1;
}

CatchUpServer::~CatchUpServer() { stop(); }

void CatchUpServer::stop() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
    jobs_.clear();
  }
  work_.notify_all();
  if (hasher_.joinable()) hasher_.join();
}

void CatchUpServer::answerStateWith(const Incoming& request,
                                    std::function<std::shared_ptr<const Snapshot>()> take) {
  post([this, request, take = std::move(take)] { answerState(request, take()); });
}

void CatchUpServer::answerState(const Incoming& request, std::shared_ptr<const Snapshot> snapshot) {
  if (!snapshot) {
    messenger_.sendFromHost(  // "none": id 0
        std::span<const PeerId>(&request.from, 1),
        Message{.tag = request.tag, .integers = {0, 0, 0}},
        Envelope{.route = Route::runtime, .control = control::encode(control::StateHeader{})}, true,
        {});
    return;
  }
  std::uint64_t copy = 0;
  {
    std::lock_guard lock(mutex_);
    // A joiner that asks again while its copy is held (a retry) gets the same one.
    for (const auto& [id, held] : held_) {
      if (held->snapshot == snapshot) copy = id;
    }
    if (copy == 0) {
      if (held_.size() >= kMaxHeld) {
        auto oldest = std::min_element(
            held_.begin(), held_.end(),
            [](const auto& a, const auto& b) { return a.second->lastUse < b.second->lastUse; });
        held_.erase(oldest);
      }
      copy = ++nextCopy_;
      held_[copy] = std::make_shared<Held>(Held{snapshot, Clock::now(), {}});
    }
  }
  std::vector<std::uint64_t> integers{copy, static_cast<std::uint64_t>(snapshot->params.size()),
                                      snapshot->version};
  integers.insert(integers.end(), snapshot->integers.begin(), snapshot->integers.end());
  messenger_.sendFromHost(
      std::span<const PeerId>(&request.from, 1),
      Message{.step = snapshot->step, .tag = request.tag, .integers = std::move(integers)},
      // On the data link, which it opens now if it is not open: the chunks follow on it, and a
      // send to a member suspected meanwhile (a joiner too busy to answer probes in time) fails
      // at once unless its link is open.
      Envelope{.route = Route::runtime,
               .control = control::encode(control::StateHeader{}),
               .channel = net::Channel::data},
      true, {});
}

std::shared_ptr<CatchUpServer::Held> CatchUpServer::find(std::uint64_t copy) {
  const Clock::time_point now = Clock::now();
  std::erase_if(held_, [&](const auto& entry) { return now - entry.second->lastUse > kHeldIdle; });
  const auto it = held_.find(copy);
  if (it == held_.end()) return nullptr;
  it->second->lastUse = now;
  return it->second;
}

void CatchUpServer::onChunkRequest(const Incoming& request) {
  const std::optional<ChunkRequestFields> fields = ChunkRequestFields::of(request.integers);
  if (!fields) return;  // not a request this runtime sends: nothing to answer
  Job job{request.from, request.tag, *fields, nullptr};
  {
    std::lock_guard lock(mutex_);
    job.held = find(fields->copy);
    const std::uint64_t size = job.held ? job.held->snapshot->params.size() : 0;
    const bool inRange = fields->chunkFloats > 0 && fields->chunkFloats <= kMaxChunkFloats &&
                         fields->chunk < (size + fields->chunkFloats - 1) / fields->chunkFloats;
    if (!inRange) job.held = nullptr;
  }
  if (job.held && fields->digest) {
    post([this, job = std::move(job)]() mutable { hash(std::move(job)); });
    return;
  }
  reply(job, std::nullopt);
}

bool CatchUpServer::post(std::function<void()> work) {
  std::lock_guard lock(mutex_);
  if (stopping_) return false;
  if (!hasher_.joinable()) hasher_ = std::thread([this] { workLoop(); });  // on first use
  jobs_.push_back(std::move(work));
  work_.notify_one();
  return true;
}

void CatchUpServer::workLoop() {
  std::unique_lock lock(mutex_);
  for (;;) {
    work_.wait(lock, [&] { return stopping_ || !jobs_.empty(); });
    if (stopping_) return;
    std::function<void()> work = std::move(jobs_.front());
    jobs_.pop_front();
    lock.unlock();
    work();
    work = nullptr;  // what it holds goes before the lock is taken again
    lock.lock();
  }
}

void CatchUpServer::reply(const Job& job, const std::optional<Digest>& digest) {
  const ChunkRequestFields& r = job.request;
  ChunkReplyFields fields{r.copy, r.chunk, r.attempt, job.held != nullptr, digest};
  Message message{.tag = job.tag};
  if (job.held) {
    const std::vector<float>& params = job.held->snapshot->params;
    message.step = job.held->snapshot->step;
    if (r.data) {
      const std::size_t begin = r.chunk * r.chunkFloats;
      const std::size_t count = std::min<std::size_t>(r.chunkFloats, params.size() - begin);
      message.payloads.push_back(std::span<const float>(params).subspan(begin, count));
      message.owner = job.held->snapshot;  // sent from the held copy in place
    }
  }
  message.integers = fields.integers();
  if (r.data && job.held) {  // counted before it leaves: its receiver may look at once
    std::lock_guard lock(mutex_);
    ++chunksSent_;
  }
  messenger_.sendFromHost(
      std::span<const PeerId>(&job.to, 1), message,
      Envelope{.route = Route::runtime, .control = control::encode(control::ChunkReply{})}, true,
      {});
}

void CatchUpServer::hash(Job job) {
  const std::pair key{job.request.chunkFloats, job.request.chunk};
  std::optional<Digest> digest;
  {
    std::lock_guard lock(mutex_);
    if (auto it = job.held->digests.find(key); it != job.held->digests.end()) digest = it->second;
  }
  if (!digest) {
    const std::vector<float>& params = job.held->snapshot->params;
    const std::size_t begin = key.second * key.first;
    const std::size_t count = std::min<std::size_t>(key.first, params.size() - begin);
    digest = sha256(std::as_bytes(std::span<const float>(params).subspan(begin, count)));
    std::lock_guard lock(mutex_);
    job.held->digests[key] = *digest;
    ++digests_;
  }
  reply(job, digest);
}

std::uint64_t CatchUpServer::digestsComputed() const {
  std::lock_guard lock(mutex_);
  return digests_;
}

std::uint64_t CatchUpServer::chunksSent() const {
  std::lock_guard lock(mutex_);
  return chunksSent_;
}

}  // namespace gossamer::engine::runtime
