#include "engine/runtime/context.h"

#include <thread>

#include <fmt/format.h>

#include "engine/base/log.h"

namespace gossamer::engine::runtime {

bool TimedInbox::wait(std::optional<std::uint32_t> kind, Clock::time_point deadline) {
  const WaitBoard::Scope waiting(status_.waits, "a message in the inbox");
  const Clock::time_point start = Clock::now();
  const bool queued = queue_.wait(kind, deadline);
  status_.addCommWait(Clock::now() - start);
  return queued;
}

ComputeContext::ComputeContext(ComputeParts parts)
    : p_(parts),
      inbox_(parts.inbox, parts.status),
      rng_(parts.config.seed * 0x9e3779b97f4a7c15ull ^ parts.self) {}

void ComputeContext::sendOn(std::span<const PeerId> to, const Message& message, Route route,
                            Clock::duration wait) {
  const WaitBoard::Scope waiting(p_.status.waits, "a send slot");
  const Clock::time_point start = Clock::now();
  p_.messenger.send(to, message, Envelope{.route = route}, wait);
  p_.status.addCommWait(Clock::now() - start);  // back-pressure: waiting for a send slot
}

void ComputeContext::send(std::span<const PeerId> to, const Message& message) {
  sendOn(to, message, Route::inbox, commTimeout());
}

void ComputeContext::notify(PeerId to, const Message& message) {
  sendOn(std::span<const PeerId>(&to, 1), message, Route::serve, commTimeout());
}

double ComputeContext::computeGradients() {
  const Clock::time_point start = Clock::now();
  double loss = 0;
  if (local_ == nullptr) {
    loss = p_.learner.computeGradients();
  } else {
    loss = local_->gradients ? local_->gradients() : local_->loss;
    p_.learner.countSamples(local_->samples);
  }
  if (const std::int64_t least = p_.status.stepTimeUs; least > 0)
    std::this_thread::sleep_until(start + std::chrono::microseconds(least));
  p_.status.addCompute(Clock::now() - start);
  return loss;
}

void ComputeContext::roundMerged(std::uint64_t round, std::span<const float> model) {
  if (!p_.config.onRoundMerged) return;
  std::vector<float> host(model.size());
  p_.compute.download(std::span<float>(host), model);
  p_.config.onRoundMerged(round, std::move(host));
}

void ComputeContext::applyOptimizer() {
  const Clock::time_point start = Clock::now();
  if (local_ != nullptr && local_->update) {
    local_->update();
    // The step count stays the peer's (checkpoints, Adam's bias correction if it steps later).
    p_.learner.optimizer().setSteps(p_.learner.optimizer().steps() + 1);
  } else {
    p_.learner.applyUpdate();
  }
  p_.status.addCompute(Clock::now() - start);
}

std::optional<Incoming> ComputeContext::request(PeerId to, const Message& message,
                                                Clock::duration timeout) {
  Message tagged = message;
  tagged.tag = tags_.fresh();
  sendOn(std::span<const PeerId>(&to, 1), tagged, Route::serve, timeout);
  GatherResult got = gatherFrom(std::span<const PeerId>(&to, 1), tagged.tag, timeout, false);
  if (got.messages.empty()) return std::nullopt;
  return std::move(got.messages.front());
}

GatherResult ComputeContext::gather(std::span<const PeerId> from, std::uint64_t tag,
                                    Clock::duration timeout) {
  return gatherFrom(from, tag, timeout, true);
}

bool ComputeContext::doneSending(PeerId peer) const {
  if (peer == p_.self) return false;
  if (!p_.network.isMember(peer)) return true;
  return p_.roster.finishing ? p_.control.hasReleased(peer) : p_.control.hasFinished(peer);
}

GatherResult ComputeContext::gatherFrom(std::span<const PeerId> from, std::uint64_t tag,
                                        Clock::duration timeout, bool whileStepping) {
  const WaitBoard::Scope waiting(p_.status.waits, whileStepping ? "a gather" : "a reply",
                                 std::vector<PeerId>(from.begin(), from.end()));
  const Clock::time_point start = Clock::now();
  GatherResult result = runtime::gather(p_.inbox, from, tag, start + timeout, [&](PeerId peer) {
    if (whileStepping) return doneSending(peer);
    return peer != p_.self && !p_.network.isMember(peer);
  });
  const Clock::time_point end = Clock::now();
  p_.status.addCommWait(end - start);
  if (!result.complete() && end >= start + timeout) logExpiry(whileStepping, result.missing, end);
  return result;
}

void ComputeContext::logExpiry(bool gather, const std::vector<PeerId>& missing,
                               Clock::time_point now) {
  // On a lossy or partitioned link this can happen every step: one line per 10 s at most.
  ++expiries_;
  ++expiredWaits_;
  if (now < lastExpiryLog_ + std::chrono::seconds(10)) return;
  log::get("peer")->warn(
      "peer {:016x}: step {}: a {} expired without {} ({} wait(s) expired since the last such "
      "line); going on without them",
      p_.self, p_.status.step.load(), gather ? "gather" : "request", peerList(missing), expiries_);
  expiries_ = 0;
  lastExpiryLog_ = now;
}

std::optional<Incoming> ComputeContext::pullModel(PeerId from, Clock::duration timeout) {
  const WaitBoard::Scope waiting(p_.status.waits, "a model", {from});
  const Clock::time_point start = Clock::now();
  std::optional<Incoming> model = p_.control.pullModel(from, timeout);
  p_.status.addCommWait(Clock::now() - start);
  return model;
}

std::optional<CaughtUpModel> ComputeContext::catchUp(std::span<const PeerId> candidates,
                                                     ModelHolders holders,
                                                     Clock::duration timeout) {
  const WaitBoard::Scope waiting(p_.status.waits, "a model",
                                 std::vector<PeerId>(candidates.begin(), candidates.end()));
  const Clock::time_point start = Clock::now();
  std::optional<CaughtUpModel> model =
      p_.control.catchUp(candidates, holders, params().size(), timeout);
  p_.status.addCommWait(Clock::now() - start);
  return model;
}

std::optional<CaughtUpModel> ComputeContext::catchUpState(std::span<const PeerId> candidates,
                                                          std::size_t floats,
                                                          Clock::duration timeout) {
  const WaitBoard::Scope waiting(p_.status.waits, "the algorithm's state",
                                 std::vector<PeerId>(candidates.begin(), candidates.end()));
  const Clock::time_point start = Clock::now();
  std::optional<CaughtUpModel> state = p_.control.catchUp(candidates, ModelHolders::identical,
                                                          floats, timeout, StateKind::algorithm);
  p_.status.addCommWait(Clock::now() - start);
  return state;
}

void ServeContext::reply(const Incoming& request, const Message& message) {
  Message answer = message;
  answer.tag = request.tag;
  // The io thread must not wait: a reply that finds no buffer is dropped (the requester's wait
  // ends at its deadline), with a warning.
  messenger_.sendFromHost(std::span<const PeerId>(&request.from, 1), answer,
                          Envelope{.route = Route::inbox}, true, {});
}

void ServeGate::deliver(Incoming request) {
  if (open_) {
    serve(request);
  } else {
    early_.push_back(std::move(request));
  }
}

void ServeGate::open() {
  open_ = true;
  for (const Incoming& request : early_) serve(request);
  early_.clear();
}

void ServeGate::serve(const Incoming& request) {
  try {
    algorithm_.serve(context_, request);
  } catch (const std::exception& e) {
    log::get("peer")->error(
        "peer {:016x}: {}::serve failed on a message of kind {} from {:016x}: {}", context_.self(),
        algorithm_.name(), request.kind, request.from, e.what());
  }
}

}  // namespace gossamer::engine::runtime
