// The runtime's control messages (engine/runtime/control.capnp) as plain C++ values, and their
// encoding. Decoding treats the bytes as hostile (net/wire/flat.h's limits) and never throws.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <system_error>
#include <variant>
#include <vector>

namespace gossamer::engine::runtime::control {

// `life`: the asker's incarnation when it was admitted (0: not said, an older peer).
struct StatusRequest {
  std::uint64_t life = 0;
  friend bool operator==(const StatusRequest&, const StatusRequest&) = default;
};
struct Status {
  bool training = false;
  std::uint64_t step = 0;
  std::uint64_t totalSteps = 0;
  bool expected = false;
  std::uint32_t members = 0;
  bool done = false;           // the answerer trained all its steps: the cluster's run is ending
  std::uint64_t runSteps = 0;  // the run's steps as planned (0 from an older peer)
  friend bool operator==(const Status&, const Status&) = default;
};
// Finished and Released are marks sent once per link (channel 0: control, 1: data); `waiting`:
// sent again by a member that still misses the receiver's marks, which the receiver answers.
struct Finished {
  std::uint8_t channel = 0;
  bool waiting = false;
  friend bool operator==(const Finished&, const Finished&) = default;
};
struct Released {
  std::uint8_t channel = 0;
  bool waiting = false;
  friend bool operator==(const Released&, const Released&) = default;
};
struct PullModel {
  friend bool operator==(const PullModel&, const PullModel&) = default;
};
struct Model {
  friend bool operator==(const Model&, const Model&) = default;
};

// A verified catch-up in chunks (catch_up.h); their fields travel as the envelope's integers.
struct StateRequest {
  friend bool operator==(const StateRequest&, const StateRequest&) = default;
};
struct StateHeader {
  friend bool operator==(const StateHeader&, const StateHeader&) = default;
};
struct ChunkRequest {
  friend bool operator==(const ChunkRequest&, const ChunkRequest&) = default;
};
struct ChunkReply {
  friend bool operator==(const ChunkReply&, const ChunkReply&) = default;
};

// How fast the sender trains (engine/runtime/speeds.h): both figures finite and not negative.
struct Speed {
  double stepSeconds = 0;
  double samplesPerSecond = 0;
  std::uint64_t step = 0;
  friend bool operator==(const Speed&, const Speed&) = default;
};

using Message = std::variant<StatusRequest, Status, Finished, Released, PullModel, Model,
                             StateRequest, StateHeader, ChunkRequest, ChunkReply, Speed>;

std::vector<std::byte> encode(const Message& message);
// net::Errc::malformedMessage for anything but one well-formed message (an unknown union member,
// a channel above 1, bad framing).
std::error_code decode(std::span<const std::byte> bytes, Message& out);

}  // namespace gossamer::engine::runtime::control
