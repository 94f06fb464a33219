// One peer's network, messenger and control protocol, wired as runtime::Peer wires them (Comms in
// peer_impl.h) but without a training loop or an algorithm: for tests of the runtime's own
// protocols (barriers, catch-up) and for `gossamer-bench join`, which fetches a model from
// members that only serve it.
#pragma once

#include <cstddef>
#include <memory>

#include "engine/runtime/control.h"
#include "engine/runtime/messenger.h"
#include "engine/runtime/network.h"
#include "kernels/compute.h"

namespace gossamer::engine::runtime {

struct ControlNode {
  // Starts the network at once (`config` prepared: prepareTransport). Payloads land in receive
  // slots of `slotBytes` (the largest payload expected).
  ControlNode(PeerId id, NetworkConfig config, net::wire::ModelFingerprint model,
              std::size_t slotBytes);
  ~ControlNode();
  ControlNode(const ControlNode&) = delete;
  ControlNode& operator=(const ControlNode&) = delete;

  // Publishes `params` as this node's final snapshot: every pull and catch-up is answered with
  // it at once, as by a peer that finished training at `step`.
  void serve(std::uint64_t step, std::vector<float> params);
  // Whether the view holds `count` members within `timeout`.
  bool waitForMembers(std::size_t count, Clock::duration timeout) const;

  NetworkConfig config;
  std::unique_ptr<kernels::Compute> compute;
  Staging staging;
  PayloadCodec codec;
  MessageQueue inbox;
  PeerNetwork network;
  Messenger messenger;
  SnapshotBoard snapshots;
  LoopStatus status;
  ClusterControl control;
};

}  // namespace gossamer::engine::runtime
