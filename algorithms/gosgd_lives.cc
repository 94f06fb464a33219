// GoSGD's lives (algorithms/gosgd.h): every message stamped with the sender's life and the
// receiver's as the sender knows it, admission of a message by those stamps, a peer's end of life
// (dead or restarted) and the mass it held, and the checks a transfer passes before it merges.
#include <algorithm>
#include <string>
#include <vector>

#include "algorithms/gosgd.h"
#include "engine/base/log.h"

namespace gossamer::algorithms {

using engine::PeerId;

namespace {

bool contains(const std::vector<PeerId>& ids, PeerId id) {
  return std::find(ids.begin(), ids.end(), id) != ids.end();
}

}  // namespace

// ---- Lives -------------------------------------------------------------------------------------

engine::Message Gosgd::stamped(engine::PeerContext& ctx, std::uint32_t kind, PeerId to,
                               double alpha) {
  const auto life = lives_.find(to);
  engine::Message message{.kind = kind,
                          .step = ctx.step(),
                          .scalars = {alpha},
                          .integers = {life_, life == lives_.end() ? 0 : life->second, ++seq_, 0}};
  // The reports of the lives whose transfers this peer merged lately (see "Lives"): the weight
  // in `alpha` came from them after the reports `to` may hold.
  const engine::Clock::time_point since = ctx.now() - ctx.commTimeout();
  for (auto it = mergedFrom_.begin(); it != mergedFrom_.end();) {
    const auto heard = lives_.find(it->first);
    const auto report = reports_.find(it->first);
    if (it->second < since || heard == lives_.end() || report == reports_.end()) {
      it = mergedFrom_.erase(it);
      continue;
    }
    if (it->first != to) {
      message.integers.insert(message.integers.end(),
                              {it->first, heard->second, report->second.seq});
      message.scalars.push_back(report->second.alpha);
      ++message.integers[3];
    }
    ++it;
  }
  return message;
}

std::size_t Gosgd::headerIntegers(const std::vector<std::uint64_t>& integers) {
  return integers.size() < kHeaderIntegers ? kHeaderIntegers : kHeaderIntegers + 3 * integers[3];
}

std::size_t Gosgd::headerScalars(const std::vector<std::uint64_t>& integers) {
  return integers.size() < kHeaderIntegers ? kHeaderScalars : kHeaderScalars + integers[3];
}

bool Gosgd::admit(engine::PeerContext& ctx, engine::Incoming& m) {
  if (m.integers.size() < kHeaderIntegers || m.scalars.size() < kHeaderScalars ||
      m.integers[0] == 0 || !(m.scalars[0] >= 0 && m.scalars[0] <= 1) ||
      m.integers[3] > m.integers.size() || m.integers.size() < headerIntegers(m.integers) ||
      m.scalars.size() < headerScalars(m.integers))
    return refuse(ctx, m,
                  "no valid header (life, addressee's life, seq, relayed reports; a weight in "
                  "[0, 1])");
  const std::uint64_t life = m.integers[0], toLife = m.integers[1];
  const Report report{.seq = m.integers[2], .alpha = m.scalars[0]};
  std::vector<std::pair<Life, Report>> relayed;
  for (std::size_t k = 0; k < m.integers[3]; ++k) {
    const Report r{.seq = m.integers[kHeaderIntegers + 3 * k + 2],
                   .alpha = m.scalars[kHeaderScalars + k]};
    if (!(r.alpha >= 0 && r.alpha <= 1)) return refuse(ctx, m, "a relayed weight not in [0, 1]");
    relayed.push_back(
        {{m.integers[kHeaderIntegers + 3 * k], m.integers[kHeaderIntegers + 3 * k + 1]}, r});
  }
  m.integers.erase(m.integers.begin(), m.integers.begin() + headerIntegers(m.integers));
  m.scalars.erase(m.scalars.begin(), m.scalars.begin() + kHeaderScalars + relayed.size());
  const auto known = lives_.find(m.from);
  if (known != lives_.end() && life < known->second) {
    ctx.metrics().add("gosgd.stale", 1);
    return false;
  }
  if (known != lives_.end() && life > known->second) endLife(ctx, m.from, true);
  lives_[m.from] = life;
  if (contains(ctx.members(), m.from) && dead_.erase({m.from, life}) > 0)
    log::get("algorithms")
        ->info("gosgd: peer {:016x} is back in the same life (a partition healed)", m.from);
  hear({m.from, life}, report);
  for (const auto& [other, r] : relayed)
    if (other.first != ctx.self() && other.first != m.from) hear(other, r);
  if (toLife != 0 && toLife != life_) {
    // For a previous life of this peer: its ids are not ours, and it may have merged a transfer.
    ctx.metrics().add("gosgd.to_previous_life", 1);
    if (m.kind == kTransfer) ctx.send(m.from, stamped(ctx, kAck, m.from));
    return false;
  }
  return true;
}

void Gosgd::hear(const Life& life, const Report& report) {
  // A report of a life other than the latest heard of its peer (relayed, of an earlier or a later
  // life) tells nothing about the weight that peer holds now: only its own messages end a life.
  const auto known = lives_.find(life.first);
  if (known == lives_.end())
    lives_[life.first] = life.second;
  else if (known->second != life.second)
    return;
  Report& latest = reports_[life.first];
  if (report.seq >= latest.seq) latest = report;
  // A report of a life already recorded ended, sent before it ended and heard after: later than
  // the record, and a transfer in that message is merged here, so the record follows (the others
  // learn it with this peer's settled marks, which carry every record). Else the weight it
  // carried would count twice: in this peer's weight and in the record of the dead.
  if (const auto dead = dead_.find(life); dead != dead_.end() && report.seq > dead->second.seq)
    dead->second = report;
}

void Gosgd::endLife(engine::PeerContext& ctx, PeerId peer, bool restarted) {
  const auto life = lives_.find(peer);
  if (life == lives_.end()) return;
  const Life ended{peer, life->second};
  if (dead_.count(ended) == 0) {
    const Report report = reports_[peer];
    noteDead(ended, report);
    log::get("algorithms")
        ->info(
            "gosgd: peer {:016x}: the life of peer {:016x} ended{} with weight {:.6g} (its "
            "report {})",
            ctx.self(), peer, restarted ? " (it restarted)" : "", report.alpha, report.seq);
    for (PeerId other : ctx.members()) {
      if (other == ctx.self() || other == peer) continue;
      engine::Message message = stamped(ctx, kDead, other);
      message.integers.insert(message.integers.end(), {peer, ended.second, report.seq});
      message.scalars.push_back(report.alpha);
      ctx.send(other, message);
    }
  }
  if (!restarted) return;
  // A new life: nothing of the old one's numbering holds (see "Lives").
  ctx.metrics().add("gosgd.restarts_seen", 1);
  delivery_.restarted(peer);
  estimates_.forget(peer);
  settled_.erase(peer);
  leavers_.erase(peer);
  reports_.erase(peer);
  lives_.erase(life);
}

void Gosgd::noteDead(const Life& life, const Report& report) {
  Report latest = report;
  // What this peer heard from that life itself may be later than the record it is told (a
  // message of it still in flight when the others saw it end).
  if (const auto heard = lives_.find(life.first);
      heard != lives_.end() && heard->second == life.second) {
    const auto own = reports_.find(life.first);
    if (own != reports_.end() && own->second.seq > latest.seq) latest = own->second;
  }
  const auto [it, inserted] = dead_.emplace(life, latest);
  if (!inserted && latest.seq > it->second.seq) it->second = latest;
}

void Gosgd::readDead(engine::PeerContext& ctx, const engine::Incoming& m) {
  if (m.integers.size() % 3 != 0 || m.scalars.size() != m.integers.size() / 3) {
    refuse(ctx, m, "records of ended lives that are not (peer, life, seq) and a weight each");
    return;
  }
  for (std::size_t k = 0; k < m.scalars.size(); ++k) {
    const Life life{m.integers[3 * k], m.integers[3 * k + 1]};
    const double alpha = m.scalars[k];
    if (!(alpha >= 0 && alpha <= 1)) {
      refuse(ctx, m, fmt::format("an ended life of weight {} (not in [0, 1])", alpha));
      return;
    }
    // Someone took this life for dead (a partition): it is not.
    if (life.first == ctx.self() && life.second == life_) continue;
    noteDead(life, {.seq = m.integers[3 * k + 2], .alpha = alpha});
  }
}

void Gosgd::appendDead(engine::Message& message) const {
  for (const auto& [life, report] : dead_) {
    message.integers.insert(message.integers.end(), {life.first, life.second, report.seq});
    message.scalars.push_back(report.alpha);
  }
}

double Gosgd::deadWeight(const std::vector<PeerId>& members, PeerId self) const {
  double sum = 0;
  for (const auto& [life, report] : dead_) {
    // A member is taken to live the life recorded unless another life of it was heard from.
    const auto current = lives_.find(life.first);
    const bool alive = life.first == self
                           ? life.second == life_
                           : contains(members, life.first) &&
                                 (current == lives_.end() || current->second == life.second);
    if (!alive) sum += report.alpha;
  }
  return sum;
}

bool Gosgd::refuse(engine::PeerContext& ctx, const engine::Incoming& m, const std::string& why) {
  log::get("algorithms")
      ->warn("gosgd: refused a message of kind {} from peer {:016x}: {}", m.kind, m.from, why);
  ctx.metrics().add("gosgd.refused", 1);
  return false;
}

bool Gosgd::acceptTransfer(engine::PeerContext& ctx, const engine::Incoming& m) {
  if (!engine::acceptMessage(m, {.payloads = {ctx.params().size()}, .scalars = 1, .integers = 2},
                             ctx.metrics(), name()))
    return false;
  // {id, floor} (a plain model) or {id, floor, form, number} (a stream of estimates).
  const std::vector<std::uint64_t>& ints = m.integers;
  if (ints.size() != 2 &&
      (ints.size() != 4 || ints[3] == 0 ||
       (ints[2] != PublicEstimates::kAnchor && ints[2] != PublicEstimates::kDifference)))
    return refuse(ctx, m,
                  fmt::format("a transfer with {} integers that are not a model's", ints.size()));
  // A weight is a share of the cluster's mass of 1.
  if (m.scalars[0] < 0 || m.scalars[0] > 1)
    return refuse(ctx, m, fmt::format("a transfer of weight {} (not in [0, 1])", m.scalars[0]));
  return true;
}

engine::Invariants Gosgd::invariants() const {
  using engine::Invariant;
  const auto settled = [](const char* metric) {
    return engine::unless("gosgd.unsettled", engine::metricReading(metric));
  };
  engine::Invariants out;
  out.rules.push_back({.name = "the survivors agree on the weight of the dead",
                       .rule = Invariant::Rule::agree,
                       .read = settled("gosgd.dead_weight")});
  out.rules.push_back({.name = "gossip weight is never created (the survivors' plus the dead's)",
                       .rule = Invariant::Rule::sumAtMost,
                       .read = settled("gosgd.alpha"),
                       .common = settled("gosgd.dead_weight"),
                       .bound = 1,
                       .tolerance = 1e-6});
  return end_.adjust(std::move(out));
}

}  // namespace gossamer::algorithms
