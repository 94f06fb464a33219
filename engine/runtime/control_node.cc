#include "engine/runtime/control_node.h"

#include <thread>

#include "kernels/cpu/cpu_compute.h"

namespace gossamer::engine::runtime {

ControlNode::ControlNode(PeerId id, NetworkConfig networkConfig, net::wire::ModelFingerprint model,
                         std::size_t slotBytes)
    : config(std::move(networkConfig)),
      compute(kernels::cpu::makeCompute({.blasThreads = 1})),
      staging(*compute, slotBytes, {}),
      codec(
          *compute, *compute, {}, id,
          [this](std::size_t bytes) { return staging.receiveSlot(bytes); },
          net::Limits{}.maxFrameBytes),
      network(config, id),
      messenger(network, staging, codec),
      snapshots(id),
      control(network, messenger, snapshots, status) {
  messenger.setRoutes(Routes{.inbox = &inbox,
                             .serve = [](Incoming) {},
                             .runtime =
                                 [this](Incoming m, std::vector<std::byte> bytes) {
                                   control.onMessage(std::move(m), std::move(bytes));
                                 }});
  network.start(
      PeerNetwork::Handlers{
          .target = [this](const net::Remote&, const net::wire::EnvelopeHeader&, std::size_t,
                           std::size_t size) { return messenger.receiveTarget(size); },
          .envelope =
              [this](const net::Remote& from, net::wire::EnvelopeHeader header,
                     std::vector<net::Payload> payloads) {
                messenger.onEnvelope(from, std::move(header), std::move(payloads));
              },
          .membershipChanged = [this](const net::membership::Event&) { control.onViewChanged(); },
          .registerMemory = [](net::Transport&) {},
          .deviceMemory = {}},
      model, 1);
}

ControlNode::~ControlNode() { network.shutdown(); }

void ControlNode::serve(std::uint64_t step, std::vector<float> params) {
  std::vector<Incoming> waiting = snapshots.publish(step, std::move(params), true);
  if (!waiting.empty()) control.answerPulls(waiting, snapshots.latest());
}

bool ControlNode::waitForMembers(std::size_t count, Clock::duration timeout) const {
  const Clock::time_point deadline = Clock::now() + timeout;
  while (network.members().size() < count) {
    if (Clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return true;
}

}  // namespace gossamer::engine::runtime
