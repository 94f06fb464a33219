#include "engine/runtime/catch_up.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <map>
#include <set>
#include <thread>

#include <fmt/format.h>
#include <sys/mman.h>
#include <unistd.h>

#include "engine/base/log.h"
#include "engine/runtime/catch_up_server.h"
#include "engine/runtime/chunk_plan.h"
#include "engine/runtime/control_codec.h"

namespace gossamer::engine::runtime {

using std::chrono::milliseconds;

CatchUpClient::CatchUpClient(PeerId self, Messenger& messenger, MessageQueue& replies,
                             std::function<bool(PeerId)> gone, CatchUpOptions options)
    : self_(self),
      messenger_(messenger),
      replies_(replies),
      gone_(std::move(gone)),
      options_(options) {}

std::vector<CatchUpClient::Source> CatchUpClient::askHolders(std::span<const PeerId> candidates,
                                                             ModelHolders holders,
                                                             std::size_t floats, std::uint64_t tag,
                                                             Clock::duration timeout,
                                                             StateKind kind) {
  std::vector<PeerId> asked;
  for (PeerId peer : candidates) {
    if (peer == self_ || std::find(asked.begin(), asked.end(), peer) != asked.end()) continue;
    asked.push_back(peer);
  }
  if (holders == ModelHolders::identical && asked.size() > options_.maxSources)
    asked.resize(options_.maxSources);

  std::vector<Source> got;
  const auto ask = [&](std::span<const PeerId> to) {
    Message request{.tag = tag};
    if (kind == StateKind::algorithm) request.integers = {static_cast<std::uint64_t>(kind)};
    messenger_.sendFromHost(
        to, request,
        Envelope{.route = Route::runtime, .control = control::encode(control::StateRequest{})},
        false, std::chrono::seconds(1));
  };
  // Waits for the headers of `to` until each answered or left, the deadline, or (several asked)
  // a grace after the first answer as long again as it took, at least 0.5 s: a member busy in a
  // long step does not hold the others' transfer back.
  const auto collect = [&](std::span<const PeerId> to) {
    const Clock::time_point start = Clock::now();
    const Clock::time_point deadline = start + timeout;
    std::optional<Clock::time_point> enough;
    std::vector<bool> done(to.size(), false);
    for (;;) {
      const std::uint64_t seen = replies_.version();
      std::size_t open = 0;
      for (std::size_t i = 0; i < to.size(); ++i) {
        if (done[i]) continue;
        std::optional<Incoming> header = replies_.take([&](const Incoming& m) {
          return m.tag == tag && m.from == to[i] && m.kind == kStateHeaderKind;
        });
        const bool none = header && header->integers.size() >= 3 && header->integers[0] == 0;
        if (header && !none && header->integers.size() >= 3 && header->integers[1] == floats) {
          got.push_back(Source{
              to[i], header->integers[0], header->step, header->integers[2],
              std::vector<std::uint64_t>(header->integers.begin() + 3, header->integers.end())});
          done[i] = true;
          if (!enough) {
            const Clock::duration took = Clock::now() - start;
            enough = Clock::now() + std::max<Clock::duration>(took, milliseconds(500));
          }
        } else if (none) {
          // Nothing to give now (an algorithm's state half merged): asked again in a moment.
          std::this_thread::sleep_for(milliseconds(5));
          ask(std::span<const PeerId>(&to[i], 1));
          ++open;
        } else if (header) {
          log::get("peer")->warn("peer {:016x}: {:016x} offered a state of {} floats, not {}",
                                 self_, to[i],
                                 header->integers.size() >= 3 ? header->integers[1] : 0, floats);
          done[i] = true;
        } else if (gone_(to[i])) {
          done[i] = true;
        } else {
          ++open;
        }
      }
      const Clock::time_point now = Clock::now();
      if (open == 0 || replies_.closed() || now >= deadline || (enough && now >= *enough)) return;
      replies_.waitChanged(seen, std::min(deadline, enough.value_or(deadline)));
    }
  };
  if (holders == ModelHolders::identical) {
    ask(asked);
    collect(asked);
    // In the caller's order of preference, whatever order they answered in.
    const auto rank = [&](const Source& s) {
      return std::find(asked.begin(), asked.end(), s.peer);
    };
    std::sort(got.begin(), got.end(),
              [&](const Source& a, const Source& b) { return rank(a) < rank(b); });
  } else {
    for (std::size_t i = 0; i < asked.size() && got.empty(); ++i) {
      ask(std::span<const PeerId>(&asked[i], 1));
      collect(std::span<const PeerId>(&asked[i], 1));
    }
  }
  return got;
}

namespace {

// Maps the pages of `memory` in ahead of the chunks (MADV_POPULATE_WRITE, Linux 5.14: zeroed
// pages, the bytes already there untouched, so merging may run beside it), on a thread of its
// own while the first chunks travel: faulting a fresh gigabyte in page by page on the merging
// thread took 3 s on a 2-core VM, against 0.1-0.3 s populated in bulk. Without the advice
// (an older kernel) the merges fault the pages in as before.
class Populate {
 public:
  explicit Populate(std::span<float> memory) {
    const auto page = static_cast<std::uintptr_t>(sysconf(_SC_PAGESIZE));
    const auto begin = (reinterpret_cast<std::uintptr_t>(memory.data()) + page - 1) / page * page;
    const auto end = reinterpret_cast<std::uintptr_t>(memory.data() + memory.size()) / page * page;
    if (end <= begin + (std::uintptr_t{64} << 20)) return;  // small: not worth a thread
    thread_ = std::thread([this, begin, end] {
      constexpr std::uintptr_t kStep = std::uintptr_t{64} << 20;
      for (std::uintptr_t at = begin; at < end && !stop_.load(); at += kStep) {
        if (madvise(reinterpret_cast<void*>(at), std::min(kStep, end - at), kPopulateWrite) != 0)
          return;
      }
    });
  }
  ~Populate() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
  }

 private:
  static constexpr int kPopulateWrite = 23;  // MADV_POPULATE_WRITE, absent from older headers
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace

bool CatchUpClient::transfer(const std::vector<Source>& sources, std::span<float> out,
                             std::uint64_t tag, Clock::duration timeout) {
  const Populate populate(out);
  const std::size_t chunkFloats = std::max<std::size_t>(options_.chunkBytes / sizeof(float), 1);
  const std::size_t chunks = (out.size() + chunkFloats - 1) / chunkFloats;
  // The window, shared out so that every chunk in flight has a receive buffer.
  const std::size_t window =
      std::clamp<std::size_t>(options_.maxInFlight / sources.size(), 1, options_.window);
  ChunkPlan plan(chunks, sources.size(), window);
  std::map<std::size_t, Incoming> kept;  // bytes waiting for their digest
  // Per source, the (chunk, attempt) of each request it has not answered.
  std::vector<std::set<std::pair<std::size_t, std::uint32_t>>> owed(sources.size());
  std::vector<Clock::time_point> heard(sources.size(), Clock::now());
  const Clock::duration silence = std::max<Clock::duration>(timeout / 2, std::chrono::seconds(1));
  const auto name = [&](std::size_t s) { return fmt::format("{:016x}", sources[s].peer); };
  const auto lose = [&](std::size_t s, const char* why) {
    if (!plan.alive(s)) return;
    log::get("peer")->warn("peer {:016x}: catch-up source {} {}; its chunks go to the others",
                           self_, name(s), why);
    for (std::size_t c : plan.onSourceLost(s)) kept.erase(c);
    owed[s].clear();
    report_.sourcesLost.push_back(sources[s].peer);
  };
  const auto chunkSize = [&](std::size_t c) {
    return std::min(chunkFloats, out.size() - c * chunkFloats);
  };
  const auto merge = [&](std::size_t c, std::span<const float> bytes) {
    std::memcpy(out.data() + c * chunkFloats, bytes.data(), bytes.size_bytes());
  };
  const auto act = [&](ChunkVerdict verdict, std::size_t c, std::size_t s, Incoming* data) {
    switch (verdict) {
      case ChunkVerdict::accepted:
        merge(c, data ? data->payload(0) : kept.at(c).payload(0));
        kept.erase(c);
        break;
      case ChunkVerdict::waiting:
        if (data) kept.emplace(c, std::move(*data));
        break;
      case ChunkVerdict::rejected:
        kept.erase(c);
        log::get("peer")->warn(
            "peer {:016x}: catch-up chunk {} failed its check (last reply from {}); asking again "
            "from another pair of members",
            self_, c, name(s));
        break;
      case ChunkVerdict::stale:
        break;
    }
  };
  const auto handle = [&](Incoming& m) {
    std::size_t s = 0;
    while (s < sources.size() && sources[s].peer != m.from) ++s;
    const std::optional<ChunkReplyFields> f = ChunkReplyFields::of(m.integers);
    if (s == sources.size() || !f || f->copy != sources[s].copy || !plan.alive(s)) return;
    owed[s].erase({f->chunk, f->attempt});
    heard[s] = Clock::now();
    if (!f->held) return lose(s, "no longer holds its copy");
    if (f->chunk >= chunks) return;
    const std::size_t c = f->chunk;
    if (m.payloadCount() == 1) {
      if (m.payload(0).size() != chunkSize(c)) return lose(s, "sent a chunk of the wrong size");
      ChunkVerdict verdict = plan.onData(c, s, f->attempt, sha256(std::as_bytes(m.payload(0))));
      if (f->digest && verdict == ChunkVerdict::waiting)
        verdict = plan.onDigest(c, s, f->attempt, *f->digest);
      act(verdict, c, s, &m);
    } else if (f->digest) {
      act(plan.onDigest(c, s, f->attempt, *f->digest), c, s, nullptr);
    }
  };

  while (!plan.done()) {
    for (const ChunkAsk& ask : plan.asks()) {
      const ChunkRequestFields fields{
          sources[ask.source].copy, ask.chunk, chunkFloats, ask.attempt, ask.data, ask.digest};
      const bool sent = messenger_.sendFromHost(
          std::span<const PeerId>(&sources[ask.source].peer, 1),
          Message{.tag = tag, .integers = fields.integers()},
          Envelope{.route = Route::runtime, .control = control::encode(control::ChunkRequest{})},
          false, std::chrono::seconds(1));
      if (!sent) {
        lose(ask.source, "could not be sent a request");
        continue;
      }
      if (owed[ask.source].empty()) heard[ask.source] = Clock::now();
      owed[ask.source].emplace(ask.chunk, ask.attempt);
    }
    if (plan.failed()) break;
    if (plan.done()) break;
    const std::uint64_t seen = replies_.version();
    bool handled = false;
    while (std::optional<Incoming> m = replies_.take(
               [&](const Incoming& q) { return q.tag == tag && q.kind == kChunkReplyKind; })) {
      handle(*m);
      handled = true;
    }
    const Clock::time_point now = Clock::now();
    Clock::time_point wake = now + timeout;
    bool askAgain = false;  // a silent source's chunks: asked at once, not after a wait
    for (std::size_t s = 0; s < sources.size(); ++s) {
      if (!plan.alive(s)) continue;
      if (gone_(sources[s].peer)) {
        lose(s, "left the view");
      } else if (!owed[s].empty() && now - heard[s] > silence) {
        // Replies lost on the way (a send that failed at the source): what it owes is asked
        // again; a source silent kMaxSilences times in a row is lost.
        log::get("peer")->warn(
            "peer {:016x}: catch-up source {} sent nothing for {} s; asking "
            "again what it owes",
            self_, name(s), std::chrono::duration_cast<std::chrono::seconds>(silence).count());
        for (std::size_t c : plan.onSourceSilent(s)) kept.erase(c);
        if (!plan.alive(s)) report_.sourcesLost.push_back(sources[s].peer);
        owed[s].clear();
        askAgain = true;
      } else if (!owed[s].empty()) {
        wake = std::min(wake, heard[s] + silence);
      }
    }
    if (replies_.closed()) return false;
    if (!handled && !askAgain && !plan.failed()) replies_.waitChanged(seen, wake);
  }
  report_.chunks = plan.chunksAccepted();
  report_.rejected += plan.rejections();
  report_.served.clear();
  for (std::size_t s = 0; s < sources.size(); ++s) {
    if (plan.disagreements(s) > 0 &&
        std::find(report_.disagreeing.begin(), report_.disagreeing.end(), sources[s].peer) ==
            report_.disagreeing.end())
      report_.disagreeing.push_back(sources[s].peer);
    if (plan.served(s) > 0) report_.served.push_back(sources[s].peer);
  }
  if (plan.failed()) {
    log::get("peer")->warn("peer {:016x}: catch-up from {} member(s) failed: {}", self_,
                           sources.size(), plan.failure());
    return false;
  }
  return true;
}

std::optional<CaughtUpModel> CatchUpClient::fetch(std::span<const PeerId> candidates,
                                                  ModelHolders holders, std::size_t floats,
                                                  std::uint64_t tag, Clock::duration timeout,
                                                  StateKind kind) {
  report_ = {};
  std::vector<Source> sources = askHolders(candidates, holders, floats, tag, timeout, kind);
  if (sources.empty()) return std::nullopt;
  // The largest group at one version (the latest on a tie); the first holder alone for `one`.
  std::vector<Source> group;
  if (holders == ModelHolders::identical) {
    std::map<std::uint64_t, std::vector<Source>> byVersion;
    for (const Source& s : sources) byVersion[s.version].push_back(s);
    for (const auto& [version, members] : byVersion)
      if (members.size() >= group.size()) group = members;
  } else {
    group = {sources.front()};
  }
  CaughtUpModel model(group.front().step, {}, floats);
  model.integers = group.front().integers;
  bool ok = transfer(group, model.params(), tag, timeout);
  report_.agreed = ok && group.size() > 1;
  std::erase_if(group, [&](const Source& s) {
    return std::find(report_.sourcesLost.begin(), report_.sourcesLost.end(), s.peer) !=
           report_.sourcesLost.end();
  });
  if (!ok && group.size() > 1) {
    // The members do not hold one state after all (their steps matched, their models not): the
    // first holder's own, checked against its own digests.
    log::get("peer")->warn("peer {:016x}: fetching the model of {:016x} alone", self_,
                           group.front().peer);
    group.resize(1);
    ok = transfer(group, model.params(), tag, timeout);
  }
  if (!ok) return std::nullopt;
  model.from = report_.served;
  return model;
}

}  // namespace gossamer::engine::runtime
