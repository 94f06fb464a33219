#include "engine/sim/faults.h"

#include <algorithm>
#include <cmath>
#include <random>

#include <fmt/format.h>

namespace gossamer::engine::sim {

const char* name(FaultKind kind) {
  switch (kind) {
    case FaultKind::kill:
      return "kill";
    case FaultKind::restart:
      return "restart";
    case FaultKind::join:
      return "join";
    case FaultKind::partition:
      return "partition";
    case FaultKind::loss:
      return "loss";
    case FaultKind::straggler:
      return "straggler";
    case FaultKind::leave:
      return "leave";
    case FaultKind::restartFresh:
      return "restart-fresh";
  }
  return "?";
}

std::optional<FaultKind> faultKindNamed(std::string_view text) {
  for (FaultKind k : kFaultKinds)
    if (text == name(k)) return k;
  return std::nullopt;
}

std::vector<std::string> faultKindNames() {
  std::vector<std::string> out;
  for (FaultKind k : kFaultKinds) out.push_back(name(k));
  return out;
}

std::vector<Fault> drawFaults(std::uint64_t seed, std::size_t count, double windowSeconds,
                              const std::vector<FaultKind>& kinds, StragglerShape straggler) {
  // In the order of kFaultKinds.
  std::vector<double> weights = {0.25, 0.2, 0.1, 0.15, 0.15, 0.15, 0.1, 0.1};
  if (!kinds.empty()) {
    for (std::size_t k = 0; k < weights.size(); ++k)
      if (std::find(kinds.begin(), kinds.end(), kFaultKinds[k]) == kinds.end()) weights[k] = 0;
  }
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> unit(0, 1);
  std::discrete_distribution<std::size_t> kind(weights.begin(), weights.end());
  std::vector<Fault> faults;
  for (std::size_t i = 0; i < count; ++i) {
    Fault f;
    f.at = windowSeconds * (0.1 + 0.75 * unit(rng));
    f.kind = kFaultKinds[kind(rng)];
    f.seconds = 2 + 4 * unit(rng);
    f.magnitude = f.kind == FaultKind::loss ? 0.1 + 0.2 * unit(rng) : 3 + 2 * unit(rng);
    f.pick = rng();
    if (f.kind == FaultKind::straggler) {
      if (straggler.factor > 0) f.magnitude = straggler.factor;
      if (straggler.seconds > 0) f.seconds = straggler.seconds;
    }
    faults.push_back(f);
  }
  std::sort(faults.begin(), faults.end(),
            [](const Fault& a, const Fault& b) { return a.at < b.at; });
  return faults;
}

std::string describe(const Fault& f) {
  switch (f.kind) {
    case FaultKind::kill:
    case FaultKind::join:
    case FaultKind::restart:
    case FaultKind::leave:
    case FaultKind::restartFresh:
      return name(f.kind);
    case FaultKind::partition:
      return fmt::format("partition for {:.2f} s", f.seconds);
    case FaultKind::loss:
      return fmt::format("loss {:.3f} for {:.2f} s", f.magnitude, f.seconds);
    case FaultKind::straggler:
      return fmt::format("straggler x{:.2f} for {:.2f} s", f.magnitude, f.seconds);
  }
  return "?";
}

std::vector<std::string> survivorViolations(std::span<const Survivor> survivors,
                                            std::span<const runtime::Snapshot> finals,
                                            std::uint64_t totalSteps,
                                            const Invariants& invariants) {
  std::vector<std::string> out = invariantViolations(invariants, survivors, totalSteps);
  for (const runtime::Snapshot& s : finals) {
    if (!std::all_of(s.params.begin(), s.params.end(), [](float v) { return std::isfinite(v); }))
      out.push_back(fmt::format("peer {:016x}'s final model is not finite", s.peer));
  }
  return out;
}

}  // namespace gossamer::engine::sim
