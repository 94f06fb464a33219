// Peers of the externally driven loop (engine/runtime/peer.h) in one process, for tests: each
// driven by the test's own loop on a thread of its own.
#pragma once

#include <cstddef>
#include <exception>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "engine/runtime/cluster.h"
#include "engine/runtime/peer.h"
#include "tests/algorithms/algorithm_testing.h"

namespace gossamer::engine::runtime {

inline ParamLayout flatLayout(std::size_t count) {
  ParamLayout layout;
  layout.add("w", {count});
  return layout;
}

inline PeerConfig clusterPeer(const std::string& algorithm, std::uint64_t steps) {
  PeerConfig config;
  config.network.transport = "inproc";
  config.training.algorithm = algorithm;
  config.training.maxSteps = steps;
  return config;
}

// `peers` external peers in one process (inproc), peer i of model(i), each driven by
// `drive(peer, i)` on a thread of its own; returns their results in peer order and rethrows the
// first error of a thread.
template <typename Drive>
std::vector<PeerResult> runExternalCluster(PeerConfig base, std::size_t peers,
                                           const std::function<ExternalModel(std::size_t)>& model,
                                           Drive drive) {
  base.training.minPeers = peers;
  LocalPeerConfigs configs(base, test::registry());
  std::vector<std::unique_ptr<Peer>> all;
  for (std::size_t i = 0; i < peers; ++i) {
    all.push_back(std::make_unique<Peer>(
        configs.make(i, i == 0 ? std::nullopt : std::optional(all.front()->endpoint())),
        test::registry(), model(i)));
    configs.listening(all.back()->endpoint(), i);
  }
  std::vector<PeerResult> results(peers);
  std::vector<std::exception_ptr> errors(peers);
  std::vector<std::thread> threads;
  for (std::size_t i = 0; i < peers; ++i)
    threads.emplace_back([&, i] {
      try {
        results[i] = drive(*all[i], i);
      } catch (...) {
        errors[i] = std::current_exception();
      }
    });
  for (std::thread& t : threads) t.join();
  for (const std::exception_ptr& e : errors)
    if (e) std::rethrow_exception(e);
  return results;
}

// The same, every peer with its own buffers of `count` floats.
template <typename Drive>
std::vector<PeerResult> runExternalCluster(PeerConfig base, std::size_t peers, std::size_t count,
                                           Drive drive) {
  return runExternalCluster(
      std::move(base), peers, [count](std::size_t) { return ExternalModel{flatLayout(count), {}}; },
      drive);
}

}  // namespace gossamer::engine::runtime
