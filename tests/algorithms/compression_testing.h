// What the tests of compressed exchanges share: a local cluster run through a codec, the convex
// problem's settings, an MLP large enough that headers are a small part of the bytes, and the
// bytes a peer sent.
#pragma once

#include <string>
#include <utility>

#include "engine/algorithm.h"
#include "kernels/codec.h"
#include "tests/algorithms/algorithm_testing.h"

namespace gossamer::test {

// The strongly convex problem of convexOptimum(kConvexWeightDecay): weight decay, batch 64.
inline constexpr float kConvexWeightDecay = 0.05f;

inline engine::runtime::ClusterConfig convexCluster(const std::string& algorithm, std::size_t peers,
                                                    std::uint64_t steps, double lr,
                                                    engine::OptionValues options = {}) {
  auto config = algorithmCluster(algorithm, peers, steps, lr, std::move(options));
  config.peer.training.optimizer.weightDecay = kConvexWeightDecay;
  config.peer.training.batch = 64;
  return config;
}

// An MLP of ~43k parameters, where headers are a small part of the traffic (unlike the 68
// parameters of the convex problem).
inline void useMlp(engine::runtime::ClusterConfig& config) {
  config.peer.training.model = "mlp";
  config.peer.training.modelConfig.hidden = {2048};
}

// Runs `config` with its payloads through `codec` (error feedback on).
inline engine::runtime::ClusterResult runCompressed(engine::runtime::ClusterConfig config,
                                                    const std::string& codec,
                                                    const engine::Registry& reg = registry()) {
  config.peer.training.compression = {kernels::parseCodec(codec), true};
  return engine::runtime::runLocalCluster(config, reg, smallData());
}

inline double bytesPerPeer(const engine::runtime::ClusterResult& result) {
  double bytes = 0;
  for (const auto& p : result.peers) bytes += static_cast<double>(p.bytesSent);
  return bytes / static_cast<double>(result.peers.size());
}

// A peer's metric, 0 when it was never counted.
inline double metricOf(const engine::runtime::PeerResult& peer, const std::string& name) {
  const auto it = peer.metrics.find(name);
  return it == peer.metrics.end() ? 0 : it->second;
}

}  // namespace gossamer::test
