#include "engine/runtime/control_codec.h"

#include <cmath>

#include <capnp/message.h>

#include "engine/runtime/control.capnp.h"
#include "net/wire/flat.h"

namespace gossamer::engine::runtime::control {
namespace {

namespace s = ::gossamer::engine::runtime::schema;

template <typename... F>
struct Overloaded : F... {
  using F::operator()...;
};
template <typename... F>
Overloaded(F...) -> Overloaded<F...>;

Message toMessage(s::Control::Reader r) {
  switch (r.which()) {
    case s::Control::STATUS_REQUEST:
      return StatusRequest{};
    case s::Control::STATUS_REQUEST_OF:
      return StatusRequest{r.getStatusRequestOf().getLife()};
    case s::Control::STATUS: {
      auto status = r.getStatus();
      return Status{status.getTraining(), status.getStep(),    status.getTotalSteps(),
                    status.getExpected(), status.getMembers(), status.getDone(),
                    status.getRunSteps()};
    }
    case s::Control::FINISHED: {
      const auto mark = r.getFinished();
      if (mark.getChannel() > 1) throw net::wire::Malformed{};
      return Finished{mark.getChannel(), mark.getWaiting()};
    }
    case s::Control::RELEASED: {
      const auto mark = r.getReleased();
      if (mark.getChannel() > 1) throw net::wire::Malformed{};
      return Released{mark.getChannel(), mark.getWaiting()};
    }
    case s::Control::PULL_MODEL:
      return PullModel{};
    case s::Control::MODEL:
      return Model{};
    case s::Control::STATE_REQUEST:
      return StateRequest{};
    case s::Control::STATE_HEADER:
      return StateHeader{};
    case s::Control::CHUNK_REQUEST:
      return ChunkRequest{};
    case s::Control::CHUNK:
      return ChunkReply{};
    case s::Control::SPEED: {
      auto speed = r.getSpeed();
      const Speed out{speed.getStepSeconds(), speed.getSamplesPerSecond(), speed.getStep()};
      if (!std::isfinite(out.stepSeconds) || !std::isfinite(out.samplesPerSecond) ||
          out.stepSeconds < 0 || out.samplesPerSecond < 0)
        throw net::wire::Malformed{};
      return out;
    }
  }
  throw net::wire::Malformed{};  // a union member from a newer schema
}

template <typename MarkBuilder>
void setMark(MarkBuilder mark, std::uint8_t channel, bool waiting) {
  mark.setChannel(channel);
  mark.setWaiting(waiting);
}

}  // namespace

std::vector<std::byte> encode(const Message& message) {
  capnp::MallocMessageBuilder builder(16);
  auto root = builder.initRoot<s::Control>();
  std::visit(Overloaded{
                 [&](const StatusRequest& v) { root.initStatusRequestOf().setLife(v.life); },
                 [&](const Status& v) {
                   auto status = root.initStatus();
                   status.setTraining(v.training);
                   status.setStep(v.step);
                   status.setTotalSteps(v.totalSteps);
                   status.setExpected(v.expected);
                   status.setMembers(v.members);
                   status.setDone(v.done);
                   status.setRunSteps(v.runSteps);
                 },
                 [&](const Finished& v) { setMark(root.initFinished(), v.channel, v.waiting); },
                 [&](const Released& v) { setMark(root.initReleased(), v.channel, v.waiting); },
                 [&](const PullModel&) { root.setPullModel(); },
                 [&](const Model&) { root.setModel(); },
                 [&](const StateRequest&) { root.setStateRequest(); },
                 [&](const StateHeader&) { root.setStateHeader(); },
                 [&](const ChunkRequest&) { root.setChunkRequest(); },
                 [&](const ChunkReply&) { root.setChunk(); },
                 [&](const Speed& v) {
                   auto speed = root.initSpeed();
                   speed.setStepSeconds(v.stepSeconds);
                   speed.setSamplesPerSecond(v.samplesPerSecond);
                   speed.setStep(v.step);
                 },
             },
             message);
  return net::wire::flatten(builder);
}

std::error_code decode(std::span<const std::byte> bytes, Message& out) {
  return net::wire::readFlat<s::Control>(bytes,
                                         [&](s::Control::Reader root) { out = toMessage(root); });
}

}  // namespace gossamer::engine::runtime::control
