#include "engine/runtime/messenger.h"

#include <cstring>

#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/post.hpp>

#include "engine/base/log.h"

namespace gossamer::engine::runtime {
namespace {

const auto& logger() {
  static const auto l = log::get("peer");
  return l;
}

}  // namespace

Messenger::Messenger(PeerNetwork& network, Staging& staging, PayloadCodec& codec)
    : network_(network), staging_(staging), codec_(codec) {}

net::wire::EnvelopeHeader Messenger::headerOf(
    const Message& message, Envelope& envelope,
    std::vector<net::wire::PayloadDescriptor> payloads) const {
  net::wire::EnvelopeHeader header;
  header.tag = message.tag;
  header.kind = message.kind;
  header.sender = network_.self();
  header.step = message.step;
  header.scalars = message.scalars;
  header.integers = message.integers;
  header.route = envelope.route;
  header.control = std::move(envelope.control);
  header.payloads = std::move(payloads);
  return header;
}

// Members of the view (and self); a peer we cannot address is counted and skipped.
std::vector<PeerId> Messenger::recipients(std::span<const PeerId> to, std::uint32_t kind) {
  std::vector<PeerId> out;
  out.reserve(to.size());
  for (PeerId peer : to) {
    if (peer != network_.self() && !network_.addressOf(peer)) {
      logger()->debug("peer {:016x}: {:016x} is not a member; message of kind {} not sent",
                      network_.self(), peer, kind);
      ++sendFailures_;
      continue;
    }
    out.push_back(peer);
  }
  return out;
}

bool Messenger::send(std::span<const PeerId> to, const Message& message, Envelope envelope,
                     Clock::duration wait) {
  if (to.empty()) return true;
  WirePayloads wire = codec_.encode(message);
  auto header = headerOf(message, envelope, std::move(wire.descriptors));
  std::vector<PeerId> recipients(to.begin(), to.end());
  const bool staged = staging_.stageFromCompute(
      wire.bytes, wait,
      [this, recipients = std::move(recipients), header = std::move(header),
       channel = envelope.channel](StagedBytes bytes) mutable {
        asio::post(network_.io(), [this, recipients = std::move(recipients),
                                   header = std::move(header), channel,
                                   bytes = std::move(bytes)]() mutable {
          dispatch(std::move(recipients), std::move(header), channel, std::move(bytes));
        });
      });
  if (!staged)
    logger()->warn("peer {:016x}: no send buffer free within {} ms; message of kind {} dropped",
                   network_.self(),
                   std::chrono::duration_cast<std::chrono::milliseconds>(wait).count(),
                   message.kind);
  return staged;
}

bool Messenger::sendFromHost(std::span<const PeerId> to, const Message& message,
                             Envelope envelope, bool reply, Clock::duration wait) {
  if (to.empty()) return true;
  // Only serve()'s replies (io thread) may carry compressible marks here.
  WirePayloads wire = reply ? codec_.encodeReply(message) : rawPayloads(message);
  std::optional<StagedBytes> bytes = staging_.stageFromHost(wire.bytes, reply, wait);
  if (!bytes) {
    logger()->warn("peer {:016x}: no {} buffer free; message of kind {} dropped", network_.self(),
                   reply ? "reply" : "send", message.kind);
    return false;
  }
  auto header = headerOf(message, envelope, std::move(wire.descriptors));
  asio::post(network_.io(), [this, recipients = std::vector<PeerId>(to.begin(), to.end()),
                             header = std::move(header), channel = envelope.channel,
                             bytes = std::move(*bytes)]() mutable {
    dispatch(std::move(recipients), std::move(header), channel, std::move(bytes));
  });
  return true;
}

void Messenger::dispatch(std::vector<PeerId> to, net::wire::EnvelopeHeader header,
                         std::optional<net::Channel> channel, StagedBytes bytes) {
  const net::Channel link = channel.value_or(
      header.payloads.empty() ? net::Channel::control : net::Channel::data);
  std::shared_ptr<const net::EncodedEnvelope> encoded;  // once, for every remote recipient
  for (PeerId peer : recipients(to, header.kind)) {
    if (peer == network_.self()) {
      // To self: handed over as if it had arrived, the staged bytes becoming its payloads.
      std::vector<net::Payload> payloads;
      for (const auto& span : bytes.spans) {
        auto* data = const_cast<std::byte*>(span.data());  // read-only from here on
        payloads.emplace_back(std::span<std::byte>(data, span.size()),
                              std::const_pointer_cast<void>(bytes.owner));
      }
      onEnvelope(net::Remote{peer, network_.endpoint()}, header, std::move(payloads));
      continue;
    }
    if (!encoded) encoded = net::EncodedEnvelope::of(header);
    const std::optional<net::Endpoint> address = network_.addressOf(peer);
    if (!address) continue;  // left the view since recipients() looked
    asio::co_spawn(
        network_.io(),
        [this, to = *address, link, encoded, bytes]() -> asio::awaitable<void> {
          const std::error_code error = co_await network_.send(to, link, encoded, bytes.spans);
          if (error) {
            ++sendFailures_;
            logger()->debug("peer {:016x}: send to {} failed: {}", network_.self(), to.str(),
                            error.message());
          }
        },
        asio::detached);
  }
}

void Messenger::onEnvelope(const net::Remote& from, net::wire::EnvelopeHeader header,
                           std::vector<net::Payload> payloads) {
  Incoming message;
  message.from = from.peerId;
  message.kind = header.kind;
  message.step = header.step;
  message.tag = header.tag;
  message.scalars = std::move(header.scalars);
  message.integers = std::move(header.integers);
  // Every payload has its descriptor (the mesh checks the count against the frame).
  for (std::size_t i = 0; i < payloads.size(); ++i) {
    const net::wire::PayloadDescriptor descriptor =
        i < header.payloads.size() ? header.payloads[i] : net::wire::PayloadDescriptor{};
    DecodedPayload decoded = codec_.decode(descriptor, payloads[i]);
    if (!decoded.error.empty()) {
      ++refusedPayloads_;
      logger()->warn("peer {:016x}: dropping a message of kind {} from {:016x}: {}",
                     network_.self(), message.kind, from.peerId, decoded.error);
      return;
    }
    message.addPayload(decoded.data, std::move(decoded.owner));
  }
  deliver(header.route, std::move(message), std::move(header.control));
}

void Messenger::deliver(Route route, Incoming message, std::vector<std::byte> control) {
  switch (route) {
    case Route::inbox:
      routes_.inbox->push(std::move(message));
      return;
    case Route::serve:
      routes_.serve(std::move(message));
      return;
    case Route::runtime:
      routes_.runtime(std::move(message), std::move(control));
      return;
  }
}

}  // namespace gossamer::engine::runtime
