// The local part of one step when the caller owns the training loop (Peer::step,
// engine/runtime/peer.h): the caller's gradients and, optionally, the caller's optimizer. The
// algorithm's step runs as in the built-in loop; where it asks for gradients
// (PeerContext::computeGradients) and for the local update (PeerContext::applyOptimizer) it gets
// these instead of the peer's own model, data and optimizer.
#pragma once

#include <cstddef>
#include <functional>
#include <optional>

namespace gossamer::engine::runtime {

struct LocalStep {
  // Writes this step's gradients into the peer's grads buffer and returns the mini-batch loss;
  // called on the caller's thread when the algorithm asks for them (D-PSGD sends the params
  // first, so that the gradients are computed while they fly). Empty: the caller computed them
  // before the step (grads already hold them) and their loss is `loss`.
  std::function<double()> gradients;
  double loss = 0;
  // The samples in this step's mini-batch (throughput and the sample count).
  std::size_t samples = 0;
  // Applies the caller's optimizer to the peer's params with its grads (a torch.optim optimizer
  // over views of the flat buffers, say). Empty: the peer's optimizer (TrainingConfig::optimizer,
  // its learning rate following TrainingConfig::schedule). Algorithms that fold the local
  // optimizer into their own rule read the peer's optimizer options either way (dts's
  // compensation, dpsgd.plain, eamsgd's momentum check): run those with the peer's optimizer.
  std::function<void()> update;
  // The caller's stream for this step and the calls above (buffers on CUDA, CallerBuffers): from
  // now on the place's stream. Empty: as before.
  std::optional<void*> stream;
};

}  // namespace gossamer::engine::runtime
