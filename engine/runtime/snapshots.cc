#include "engine/runtime/snapshots.h"

namespace gossamer::engine::runtime {

std::vector<Incoming> SnapshotBoard::publish(std::uint64_t step, std::vector<float> params,
                                             bool final) {
  auto snapshot = std::make_shared<const Snapshot>(Snapshot{self_, step, std::move(params), step, {}});
  std::vector<Incoming> pulls;
  {
    std::lock_guard lock(mutex_);
    latest_ = std::move(snapshot);
    ++version_;
    final_ = final;
    wanted_ = false;
    pulls.swap(pending_);
  }
  published_.notify_all();
  return pulls;
}

std::shared_ptr<const Snapshot> SnapshotBoard::latest() const {
  std::lock_guard lock(mutex_);
  return latest_;
}

std::optional<Snapshot> SnapshotBoard::take(Clock::duration timeout, bool trainingOver) {
  std::unique_lock lock(mutex_);
  if (final_ || (trainingOver && latest_)) return *latest_;
  const std::uint64_t version = version_;
  wanted_ = true;
  if (!published_.wait_for(lock, timeout, [&] { return version_ != version; }))
    return std::nullopt;
  return *latest_;
}

std::shared_ptr<const Snapshot> SnapshotBoard::pull(const Incoming& request) {
  std::lock_guard lock(mutex_);
  if (final_) return latest_;
  pending_.push_back(request);
  wanted_ = true;
  return nullptr;
}

}  // namespace gossamer::engine::runtime
