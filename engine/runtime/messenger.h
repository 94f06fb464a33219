// How a peer's messages travel (engine/runtime/README.md).
//
// Out: a Message becomes an envelope header (net/wire's generic Envelope, with its route), its
// payloads are staged (Staging), the header is encoded once, and the io thread sends it to each
// recipient over the mesh, holding the staged bytes until the transport is done; a message to
// this peer itself is handed over without the network, as if it had arrived.
// In: every envelope becomes an Incoming whose payloads are the received memory itself (its
// owner moved in from the transport, never copied or wrapped again) and goes where its route
// says: the algorithm's inbox (compute thread), the algorithm's serve() (io thread) or the
// runtime's control protocol (io thread).
//
// Channels: small messages travel on the control link, messages with payloads on the data link,
// so that requests and membership probes never queue behind bulk transfers; a caller may choose
// (the runtime's `finished` mark goes on both). Messages from one sender on one channel arrive in
// the order they were sent.
//
// Threading: send() on the compute thread; sendFromHost() on any thread; the network handlers on
// the io thread; counters on any thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <vector>

#include "engine/algorithm.h"
#include "engine/runtime/message_queue.h"
#include "engine/runtime/network.h"
#include "engine/runtime/payload_codec.h"
#include "engine/runtime/staging.h"
#include "net/wire/codec.h"

namespace gossamer::engine::runtime {

using Route = net::wire::Route;

// Where received messages go (set before the network starts).
struct Routes {
  MessageQueue* inbox = nullptr;              // Route::inbox
  std::function<void(Incoming)> serve;        // Route::serve, io thread
  std::function<void(Incoming, std::vector<std::byte> control)> runtime;  // io thread
};

// What travels besides a Message: its route, the runtime's control bytes, and the channel when
// the default (by payloads) will not do.
struct Envelope {
  Route route = Route::inbox;
  std::vector<std::byte> control;
  std::optional<net::Channel> channel;
};

class Messenger {
 public:
  // `codec` encodes what send() marks compressible and decodes what arrives encoded.
  Messenger(PeerNetwork& network, Staging& staging, PayloadCodec& codec);
  void setRoutes(Routes routes) { routes_ = std::move(routes); }

  // Compute thread: stages `message` (payloads in the Compute's memory) and sends it to each of
  // `to`, after every message this thread sent before. Waits up to `wait` for a send slot; false
  // when none came (the message is dropped, with a warning). Recipients outside the view are
  // skipped (counted in sendFailures()).
  bool send(std::span<const PeerId> to, const Message& message, Envelope envelope,
            Clock::duration wait);
  // Any thread: the same for host payloads, which travel as float32, except a reply's (io
  // thread: serve()'s), whose compressible marks `codec` encodes there. A reply takes a reply
  // slot and never waits: without one it is dropped (the requester's wait ends at its deadline).
  bool sendFromHost(std::span<const PeerId> to, const Message& message, Envelope envelope,
                    bool reply, Clock::duration wait);

  // The network's handlers (io thread).
  net::Payload receiveTarget(std::size_t bytes) { return staging_.receiveSlot(bytes); }
  void onEnvelope(const net::Remote& from, net::wire::EnvelopeHeader header,
                  std::vector<net::Payload> payloads);

  std::uint64_t sendFailures() const { return sendFailures_; }
  // Received messages dropped for a payload that was not float32 or failed to decode.
  std::uint64_t refusedPayloads() const { return refusedPayloads_; }

 private:
  net::wire::EnvelopeHeader headerOf(const Message& message, Envelope& envelope,
                                     std::vector<net::wire::PayloadDescriptor> payloads) const;
  // Io thread: one send per recipient (or a local hand-over to self).
  void dispatch(std::vector<PeerId> to, net::wire::EnvelopeHeader header,
                std::optional<net::Channel> channel, StagedBytes bytes);
  void deliver(Route route, Incoming message, std::vector<std::byte> control);
  std::vector<PeerId> recipients(std::span<const PeerId> to, std::uint32_t kind);

  PeerNetwork& network_;
  Staging& staging_;
  PayloadCodec& codec_;
  Routes routes_;
  std::atomic<std::uint64_t> sendFailures_{0};
  std::atomic<std::uint64_t> refusedPayloads_{0};
};

}  // namespace gossamer::engine::runtime
