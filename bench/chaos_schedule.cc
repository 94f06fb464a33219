#include "bench/chaos_schedule.h"

#include <algorithm>
#include <array>
#include <random>
#include <utility>

#include "engine/sim/faults.h"

namespace gossamer::bench {
namespace {

using engine::sim::FaultKind;

struct KindInfo {
  ChaosKind kind;
  const char* name;
  const char* label;
  double weight;  // its share of the faults when every kind is drawn
};

constexpr std::array<KindInfo, 9> kKinds = {{
    {ChaosKind::kill, "kill", "kill -9", 0.25},
    {ChaosKind::restart, "restart", "restart from checkpoint", 0.2},
    {ChaosKind::join, "join", "join of a new peer", 0.1},
    {ChaosKind::partition, "partition", "partition", 0.15},
    {ChaosKind::loss, "loss", "loss", 0.15},
    {ChaosKind::straggler, "straggler", "straggler", 0.15},
    {ChaosKind::restartFresh, "restart-fresh", "restart without resume", 0.15},
    {ChaosKind::joinFinishing, "join-finishing", "join during the finish", 0.05},
    {ChaosKind::killJoin, "kill-join", "kill -9 and a join in the same second", 0.1},
}};

const KindInfo& info(ChaosKind kind) { return kKinds[static_cast<std::size_t>(kind)]; }

// The kinds whose faults the simulator's drawFaults draws for chaos (restart-fresh, which it also
// knows, chaos draws itself, as its schedules always have).
constexpr std::pair<ChaosKind, FaultKind> kShared[] = {
    {ChaosKind::kill, FaultKind::kill},         {ChaosKind::restart, FaultKind::restart},
    {ChaosKind::join, FaultKind::join},         {ChaosKind::partition, FaultKind::partition},
    {ChaosKind::loss, FaultKind::loss},         {ChaosKind::straggler, FaultKind::straggler},
};

// The simulator's kind of `kind`, if it has one.
std::optional<FaultKind> simKind(ChaosKind kind) {
  for (const auto& [chaos, sim] : kShared)
    if (chaos == kind) return sim;
  return std::nullopt;
}

ChaosKind chaosKind(FaultKind kind) {
  for (const auto& [chaos, sim] : kShared)
    if (sim == kind) return chaos;
  return ChaosKind::kill;  // not reached: the simulator draws only the kinds it was given
}

bool has(const std::vector<ChaosKind>& kinds, ChaosKind kind) {
  return std::find(kinds.begin(), kinds.end(), kind) != kinds.end();
}

}  // namespace

const char* name(ChaosKind kind) { return info(kind).name; }
const char* label(ChaosKind kind) { return info(kind).label; }

std::optional<ChaosKind> chaosKindNamed(std::string_view text) {
  for (const KindInfo& k : kKinds)
    if (text == k.name) return k.kind;
  return std::nullopt;
}

std::vector<std::string> chaosKindNames() {
  std::vector<std::string> names;
  for (const KindInfo& k : kKinds) names.emplace_back(k.name);
  return names;
}

std::vector<ChaosKind> supportedKinds(bool processes) {
  if (processes) {
    return {ChaosKind::kill,         ChaosKind::restart,       ChaosKind::join,
            ChaosKind::restartFresh, ChaosKind::joinFinishing, ChaosKind::killJoin};
  }
  std::vector<ChaosKind> all;
  for (const KindInfo& k : kKinds) all.push_back(k.kind);
  return all;
}

std::vector<ChaosFault> drawChaosSchedule(std::uint64_t seed, std::size_t count, double runSeconds,
                                          const std::vector<ChaosKind>& kinds,
                                          engine::sim::StragglerShape straggler) {
  // Which faults are of the simulator's kinds (drawn by it) and which of the new ones.
  constexpr std::array<ChaosKind, 3> kNewKinds = {ChaosKind::restartFresh, ChaosKind::joinFinishing,
                                                  ChaosKind::killJoin};
  std::vector<FaultKind> simKinds;
  double simWeight = 0;
  for (ChaosKind k : kinds) {
    if (const std::optional<FaultKind> s = simKind(k)) {
      simKinds.push_back(*s);
      simWeight += info(k).weight;
    }
  }
  std::vector<double> weights = {simWeight};
  for (ChaosKind k : kNewKinds) weights.push_back(has(kinds, k) ? info(k).weight : 0);
  std::vector<ChaosFault> out;
  if (count == 0 || std::all_of(weights.begin(), weights.end(), [](double w) { return w == 0; }))
    return out;

  std::mt19937_64 rng(seed ^ 0x6b696c6c6a6f696eULL);  // "killjoin": independent of the simulator's
  std::uniform_real_distribution<double> unit(0, 1);
  std::discrete_distribution<std::size_t> which(weights.begin(), weights.end());
  std::size_t simCount = 0;
  for (std::size_t i = 0; i < count; ++i) {
    const std::size_t w = which(rng);
    if (w == 0) {
      ++simCount;
      continue;
    }
    ChaosFault f;
    f.kind = kNewKinds[w - 1];
    f.at = f.kind == ChaosKind::joinFinishing ? runSeconds * (0.98 + 0.02 * unit(rng))
                                              : runSeconds * (0.1 + 0.75 * unit(rng));
    f.seconds = f.kind == ChaosKind::killJoin ? 0.9 * unit(rng) : 0;
    f.pick = rng();
    out.push_back(f);
  }
  for (const engine::sim::Fault& s :
       engine::sim::drawFaults(seed, simCount, runSeconds, simKinds, straggler))
    out.push_back({.at = s.at,
                   .kind = chaosKind(s.kind),
                   .seconds = s.seconds,
                   .magnitude = s.magnitude,
                   .pick = s.pick});
  std::stable_sort(out.begin(), out.end(),
                   [](const ChaosFault& a, const ChaosFault& b) { return a.at < b.at; });
  return out;
}

}  // namespace gossamer::bench
