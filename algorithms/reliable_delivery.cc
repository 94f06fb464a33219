#include "algorithms/reliable_delivery.h"

#include <algorithm>

namespace gossamer::algorithms {

using engine::Clock;
using engine::PeerId;

// ---- InflightBound -----------------------------------------------------------------------------

void InflightBound::sent(std::uint64_t id, std::size_t bytes, Clock::time_point now) {
  flights_[id] = Flight{.bytes = bytes, .sentAt = now, .deliveredAtSend = delivered_};
}

void InflightBound::acked(std::uint64_t id, Clock::time_point now, bool resent) {
  const auto it = flights_.find(id);
  if (it == flights_.end()) return;
  const Flight flight = it->second;
  flights_.erase(it);
  delivered_ += flight.bytes;
  const double rtt = std::chrono::duration<double>(now - flight.sentAt).count();
  if (resent || !(rtt > 0)) return;
  // Delivery rate: what was acknowledged while this transfer was in flight, itself included.
  const double rate = static_cast<double>(delivered_ - flight.deliveredAtSend) / rtt;
  // Both filters keep their extreme for a window, then take the next sample.
  if (!sampled_ || rate >= rate_ || now - rateAt_ > kWindow) {
    rate_ = rate;
    rateAt_ = now;
  }
  if (!sampled_ || rtt <= minRtt_ || now - minRttAt_ > kWindow) {
    minRtt_ = rtt;
    minRttAt_ = now;
  }
  sampled_ = true;
}

std::size_t InflightBound::limit(std::size_t transferBytes) const {
  if (fixed_ > 0) return std::max(static_cast<std::size_t>(fixed_), transferBytes);
  if (!sampled_) return kInitialTransfers * transferBytes;
  const double bdp = kGain * rate_ * minRtt_;
  const double bounded = std::min(bdp, static_cast<double>(kCapBytes));
  // The floor: as many transfers as fit in kSmallFloorBytes, between 1 and kInitialTransfers.
  const std::size_t floorTransfers = std::clamp<std::size_t>(
      kSmallFloorBytes / std::max<std::size_t>(transferBytes, 1), 1, kInitialTransfers);
  return std::max(static_cast<std::size_t>(bounded), floorTransfers * transferBytes);
}

// ---- Sender side -------------------------------------------------------------------------------

std::uint64_t ReliableDelivery::escrow(PeerId to, double weight, kernels::Compute& compute,
                                       std::size_t size, std::size_t bytes, Clock::time_point now,
                                       Clock::duration after) {
  const std::uint64_t id = nextId_++;
  escrow_.emplace(id, Transfer{.to = to,
                               .weight = weight,
                               .model = spare_.take(compute, size),
                               .bytes = bytes,
                               .due = now + after});
  bound_.sent(id, bytes, now);
  ++sends_;
  return id;
}

std::vector<std::uint64_t> ReliableDelivery::due(Clock::time_point now, Clock::duration after) {
  std::vector<std::uint64_t> ids;
  for (auto& [id, t] : escrow_) {
    if (t.due > now) continue;
    t.due = now + after;
    t.resent = true;
    t.overdue = true;
    ids.push_back(id);
  }
  retransmits_ += ids.size();
  return ids;
}

std::vector<std::uint64_t> ReliableDelivery::resend(PeerId to, std::uint64_t upTo,
                                                    Clock::time_point now, Clock::duration after) {
  std::vector<std::uint64_t> ids;
  for (auto& [id, t] : escrow_) {
    if (t.to != to || id > upTo) continue;
    t.due = now + after;
    t.resent = true;
    ids.push_back(id);
  }
  return ids;
}

void ReliableDelivery::acked(PeerId from, std::span<const std::uint64_t> ids,
                             Clock::time_point now) {
  for (std::uint64_t id : ids) {
    const auto it = escrow_.find(id);
    if (it == escrow_.end() || it->second.to != from) continue;  // a duplicate ack
    bound_.acked(id, now, it->second.resent);
    ackedBy_[from] += it->second.weight;
    spare_.give(std::move(it->second.model));
    escrow_.erase(it);
  }
}

std::uint64_t ReliableDelivery::floor(PeerId to, std::uint64_t id) const {
  std::uint64_t floor = id;
  for (const auto& [other, t] : escrow_)
    if (t.to == to) floor = std::min(floor, other);
  return floor;
}

bool ReliableDelivery::owes(PeerId to) const {
  return std::any_of(escrow_.begin(), escrow_.end(),
                     [&](const auto& entry) { return entry.second.to == to; });
}

bool ReliableDelivery::overdue(PeerId to) const {
  return std::any_of(escrow_.begin(), escrow_.end(), [&](const auto& entry) {
    return entry.second.to == to && entry.second.overdue;
  });
}

// ---- Receiver side -----------------------------------------------------------------------------

ReliableDelivery::Arrival ReliableDelivery::arrived(PeerId from, std::uint64_t id,
                                                    std::uint64_t floor) {
  Merged& seen = merged_[from];
  if (floor > seen.floor) {
    // The sender has every id below `floor` acknowledged: it will never send them again.
    seen.floor = floor;
    seen.ids.erase(seen.ids.begin(), seen.ids.lower_bound(floor));
    seen.judged.erase(seen.judged.begin(), seen.judged.lower_bound(floor));
  }
  if (seen.judged.count(id) > 0) return Arrival::kJudged;
  if (id < seen.floor || seen.ids.count(id) > 0) return Arrival::kDuplicate;
  return Arrival::kNew;
}

void ReliableDelivery::merged(PeerId from, std::uint64_t id, double weight) {
  merged_[from].ids.insert(id);
  mergedFrom_[from] += weight;
}

void ReliableDelivery::judged(PeerId from, std::uint64_t id) { merged_[from].judged.insert(id); }

// ---- Lives -------------------------------------------------------------------------------------

template <typename Which>
void ReliableDelivery::loseIf(Which which) {
  for (auto it = escrow_.begin(); it != escrow_.end();) {
    const PeerId to = it->second.to;
    if (!which(to)) {
      ++it;
      continue;
    }
    lost_ += it->second.weight;
    lostTo_[to] += it->second.weight;
    bound_.forget(it->first);
    spare_.give(std::move(it->second.model));
    it = escrow_.erase(it);
  }
}

void ReliableDelivery::lose(PeerId to) {
  loseIf([&](PeerId peer) { return peer == to; });
}

void ReliableDelivery::loseAllBut(std::span<const PeerId> members) {
  loseIf([&](PeerId peer) {
    return std::find(members.begin(), members.end(), peer) == members.end();
  });
}

void ReliableDelivery::restarted(PeerId peer) {
  lose(peer);
  merged_.erase(peer);
  mergedFrom_.erase(peer);
  ackedBy_.erase(peer);
}

void ReliableDelivery::release() {
  spare_.clear();
  for (auto& [id, t] : escrow_) t.model.reset();
}

// ---- The ledger --------------------------------------------------------------------------------

double ReliableDelivery::escrowed() const {
  double sum = 0;
  for (const auto& [id, t] : escrow_) sum += t.weight;
  return sum;
}

std::size_t ReliableDelivery::bytesInFlight() const {
  std::size_t sum = 0;
  for (const auto& [id, t] : escrow_) sum += t.bytes;
  return sum;
}

std::map<PeerId, double> ReliableDelivery::escrowTo() const {
  std::map<PeerId, double> out;
  for (const auto& [id, t] : escrow_) out[t.to] += t.weight;
  return out;
}

}  // namespace gossamer::algorithms
