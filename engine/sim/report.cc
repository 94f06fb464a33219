// What a simulated run reports: consensus evaluations of the live peers, the chaos benchmark's
// invariants, and the result as text (format(), the same bytes for the same seed).
#include <algorithm>
#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "engine/sim/internal.h"

namespace gossamer::engine::sim {
namespace detail {

runtime::EvalPoint World::point(std::span<const runtime::Snapshot> snapshots, std::size_t samples,
                                bool perPeer) {
  runtime::EvalPoint pt;
  pt.wallSeconds = Seconds(now_ - kStart).count();
  pt.minStep = std::numeric_limits<std::uint64_t>::max();
  double bytes = 0, wait = 0, compute = 0;
  std::size_t count = 0;
  for (const auto& [id, p] : slots_) {
    if (p->phase == Phase::dead || p->phase == Phase::left) continue;
    ++count;
    pt.minStep = std::min(pt.minStep, p->step.load());
    pt.maxStep = std::max(pt.maxStep, p->step.load());
    pt.meanStep += static_cast<double>(p->step);
    pt.samples += p->parts.learner ? p->parts.learner->samples() : 0;
    bytes += static_cast<double>(p->figures.bytesSent);
    wait += Seconds(p->figures.commWait).count();
    compute += Seconds(p->figures.computeTime).count();
  }
  if (count == 0) pt.minStep = 0;
  const double n = std::max<double>(static_cast<double>(count), 1);
  pt.meanStep /= n;
  pt.bytesSentPerPeer = bytes / n;
  if (pt.wallSeconds > 0) {
    pt.commWaitFraction = wait / n / pt.wallSeconds;
    pt.utilization = compute / n / pt.wallSeconds;
  }
  if (merged_ && !perPeer) {
    // At round boundaries: the latest merged model, and the peers' spread around their mean.
    const EvalResult model = evaluator_.evaluateModel(merged_->params, samples);
    pt.consensus.peers = snapshots.size();
    pt.consensus.accuracy = model.accuracy();
    pt.consensus.loss = model.meanLoss();
    runtime::averageModels(snapshots, &pt.consensus.distance);
  } else {
    pt.consensus = evaluator_.evaluate(snapshots, samples, false);
  }
  if (perPeer && config_.finalPeerSamples > 0) {
    const runtime::ConsensusResult own =
        evaluator_.evaluate(snapshots, config_.finalPeerSamples, true);
    pt.consensus.minPeerAccuracy = own.minPeerAccuracy;
    pt.consensus.meanPeerAccuracy = own.meanPeerAccuracy;
  }
  return pt;
}

void World::samplePoint(const SimPeer& peer, std::uint64_t point) {
  const std::span<const float> params = peer.parts.learner->params();
  points_.add(runtime::PointSample{
      .point = point,
      .model = {peer.id, peer.step, std::vector<float>(params.begin(), params.end())},
      .figures = {Seconds(now_ - peer.figures.trainStart).count(),
                  Seconds(peer.figures.commWait).count(),
                  Seconds(peer.figures.computeTime).count()},
      .samples = peer.parts.learner->samples(),
      .bytesSent = peer.figures.bytesSent});
  evaluatePoints();
}

void World::evaluatePoints() {
  std::vector<PeerId> ids;
  for (const auto& [id, p] : slots_) ids.push_back(id);
  // A life owes a point while it trains short of it; one that died, or began past it, does not.
  const auto owes = [this](PeerId id, std::uint64_t step) {
    const SimPeer* p = current(id);
    return p != nullptr && (p->phase == Phase::waiting || p->phase == Phase::training) &&
           p->step < step;
  };
  for (std::vector<runtime::PointSample>& samples : points_.takeComplete(ids, owes)) {
    runtime::EvalPoint pt = runtime::evaluateAveraged(runtime::averagePoint(std::move(samples)),
                                                      evaluator_, config_.evalSamples);
    if (config_.onEval) config_.onEval(pt);
    result_.curve.push_back(std::move(pt));
  }
}

void World::evaluate(bool final) {
  std::vector<runtime::Snapshot> snapshots;
  for (const auto& [id, p] : slots_) {
    // A life that left holds no part of the cluster's model.
    if (p->phase == Phase::dead || p->phase == Phase::left || !p->parts.learner) continue;
    const std::span<const float> params = p->parts.learner->params();
    snapshots.push_back({id, p->step, std::vector<float>(params.begin(), params.end())});
  }
  if (snapshots.empty()) return;
  runtime::EvalPoint pt = point(snapshots, final ? 0 : config_.evalSamples, final);
  if (config_.onEval) config_.onEval(pt);
  result_.curve.push_back(pt);
  if (final) {
    result_.consensus = pt.consensus;
    result_.finals = std::move(snapshots);
  }
}

void World::checkInvariants(SimResult& r) {
  // The peers that were not killed and did not leave: the live ones, and those whose fiber threw.
  std::vector<Survivor> survivors;
  for (const SimPeerResult& p : r.peers)
    if ((p.alive && !p.left) || !p.error.empty())
      survivors.push_back({.name = fmt::format("peer {}", p.id),
                           .error = p.error,
                           .steps = p.steps,
                           .metrics = &p.metrics,
                           .id = p.id,
                           .view = p.view});
  for (std::string& what :
       survivorViolations(survivors, r.finals, shared_.totalSteps, shared_.invariants))
    r.violations.push_back({r.virtualSeconds, std::move(what)});
  if (config_.invariant) {
    if (std::optional<std::string> broken = config_.invariant(r.finals))
      r.violations.push_back({r.virtualSeconds, *broken});
  }
}

}  // namespace detail

std::string format(const SimResult& r) {
  std::string out = fmt::format("topology {} (spectral gap {:.6f})\n", r.topology, r.spectralGap);
  out += "virtual_s,min_step,max_step,mean_step,samples,bytes_per_peer,accuracy,loss,distance\n";
  for (const runtime::EvalPoint& p : r.curve)
    out += fmt::format("{:.6f},{},{},{:.3f},{},{:.0f},{:.6f},{:.6f},{:.9g}\n", p.wallSeconds,
                       p.minStep, p.maxStep, p.meanStep, p.samples, p.bytesSentPerPeer,
                       p.consensus.accuracy, p.consensus.loss, p.consensus.distance);
  out += fmt::format(
      "final accuracy {:.6f} loss {:.6f} distance {:.9g} min peer {:.6f} mean peer "
      "{:.6f} peers {}\n",
      r.consensus.accuracy, r.consensus.loss, r.consensus.distance, r.consensus.minPeerAccuracy,
      r.consensus.meanPeerAccuracy, r.consensus.peers);
  out += fmt::format("virtual seconds {:.6f}, events {}, frames {}, dropped {}\n", r.virtualSeconds,
                     r.events, r.messages, r.dropped);
  out += fmt::format("membership frames {}, bytes {}\n", r.membershipMessages, r.membershipBytes);
  for (const std::string& f : r.faultLog) out += "fault " + f + "\n";
  for (const SimPeerResult& p : r.peers)
    out += fmt::format("peer {} steps {}{} {} bytes {} wait {:.6f}{}\n", p.id, p.steps,
                       p.startStep > 0 ? fmt::format(" (from {})", p.startStep) : "",
                       p.alive ? (p.finished ? "finished" : "unfinished") : "dead", p.bytesSent,
                       p.commWaitSeconds, p.error.empty() ? "" : " error: " + p.error);
  for (const Violation& v : r.violations)
    out += fmt::format("violation at {:.3f} s: {}\n", v.at, v.what);
  return out;
}

}  // namespace gossamer::engine::sim
