// The receive loop of a mesh link: each frame's header decoded once, then handed to the
// membership handler, the envelope handler, or the relay hub (mesh.h states the contracts).
#include <exception>
#include <variant>

#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>

#include "engine/base/log.h"
#include "net/mesh/mesh_state.h"

namespace gossamer::net {
namespace {

// Runs a user handler; an exception from it is a bug in the handler, logged, never allowed to
// unwind through the receive loop (and so terminate the io thread).
template <typename F>
void guarded(const char* what, F&& f) {
  try {
    f();
  } catch (const std::exception& e) {
    log::get("net")->error("{} handler threw: {}", what, e.what());
  }
}

}  // namespace

void Mesh::State::start(const std::shared_ptr<LinkEntry>& entry) {
  entry->open = true;
  std::weak_ptr<State> weakSelf = shared_from_this();
  std::weak_ptr<LinkEntry> weakEntry = entry;
  entry->link->setPayloadTarget([weakSelf, weakEntry](std::span<const std::byte> header,
                                                      std::size_t index, std::size_t size) {
    const auto self = weakSelf.lock();
    const auto e = weakEntry.lock();
    if (!self || !e || !self->envelopeTarget) return std::span<std::byte>{};
    if (index == 0) {
      e->targets.clear();
      e->headerError = wire::decodeHeader(header, e->header);
      e->headerDecoded = true;
    }
    const auto* envelope = std::get_if<wire::EnvelopeHeader>(&e->header);
    if (e->headerError || envelope == nullptr) return std::span<std::byte>{};
    Payload target;
    guarded("envelope target",
            [&] { target = self->envelopeTarget(e->remote, *envelope, index, size); });
    if (target.size() != size) return std::span<std::byte>{};  // the pool takes it
    if (e->targets.size() <= index) e->targets.resize(index + 1);
    e->targets[index] = target;
    return target.bytes();
  });
  asio::co_spawn(io, receiveLoop(shared_from_this(), entry), asio::detached);
}

asio::awaitable<void> Mesh::State::receiveLoop(std::shared_ptr<State> self,
                                               std::shared_ptr<LinkEntry> entry) {
  auto logger = log::get("net");
  for (;;) {
    InFrame frame;
    const std::error_code error = co_await entry->link->receive(frame);
    if (error) {
      entry->targets.clear();
      entry->headerDecoded = false;
      if (!self->closed && error != asio::error::eof && error != asio::error::operation_aborted)
        logger->debug("link with peer {:016x} ({}) ended: {}", entry->remote.peerId,
                      entry->remote.listen.str(), error.message());
      self->drop(entry);
      co_return;
    }
    // Payloads that landed in target buffers keep their owners alive in the frame.
    for (std::size_t i = 0; i < std::min(entry->targets.size(), frame.payloads.size()); ++i) {
      if (entry->targets[i].size() > 0) frame.payloads[i] = std::move(entry->targets[i]);
    }
    entry->targets.clear();

    // Decoded once: by the payload target when the frame has payloads, else here.
    wire::Header header;
    std::error_code bad;
    if (entry->headerDecoded) {
      header = std::move(entry->header);
      bad = entry->headerError;
      entry->headerDecoded = false;
    } else {
      bad = wire::decodeHeader(frame.header, header);
    }
    if (bad) {
      logger->warn("closing the link with peer {:016x} ({}): undecodable frame header ({})",
                   entry->remote.peerId, entry->remote.listen.str(), bad.message());
      self->drop(entry);
      co_return;
    }
    std::size_t bytes = frame.header.size();
    for (const Payload& payload : frame.payloads) bytes += payload.size();
    if (auto* membership = std::get_if<wire::MembershipMessage>(&header)) {
      detail::AtomicCounters& c = self->countersOf(Traffic::membership);
      ++c.framesReceived;
      c.bytesReceived += bytes;
      if (self->membershipHandler)
        guarded("membership",
                [&] { self->membershipHandler(entry->remote, std::move(*membership)); });
    } else if (auto* envelope = std::get_if<wire::EnvelopeHeader>(&header)) {
      if (!descriptorsMatch(*envelope, frame.payloads)) {
        logger->warn(
            "closing the link with peer {:016x} ({}): envelope describes {} payloads, "
            "frame carries {} of other sizes",
            entry->remote.peerId, entry->remote.listen.str(), envelope->payloads.size(),
            frame.payloads.size());
        self->drop(entry);
        co_return;
      }
      detail::AtomicCounters& c = self->countersOf(detail::trafficOf(*envelope));
      ++c.framesReceived;
      c.bytesReceived += bytes;
      if (self->envelopeHandler)
        guarded("envelope", [&] {
          self->envelopeHandler(entry->remote, std::move(*envelope), std::move(frame.payloads));
        });
    } else if (auto* relayed = std::get_if<wire::RelayHeader>(&header)) {
      // At most one payload (a data frame's ciphertext); never relayed in turn on a relayed link.
      if (frame.payloads.size() > 1 || entry->relayed) {
        logger->warn("closing the link with peer {:016x} ({}): a relay frame {}",
                     entry->remote.peerId, entry->remote.listen.str(),
                     entry->relayed ? "inside a relayed link" : "with more than one payload");
        self->drop(entry);
        co_return;
      }
      detail::AtomicCounters& c = self->countersOf(Traffic::relay);
      ++c.framesReceived;
      c.bytesReceived += bytes;
      std::span<const std::byte> ciphertext;
      if (!frame.payloads.empty()) ciphertext = frame.payloads[0].bytes();
      // Awaited: a relay that cannot forward (or an end that cannot take more) slows this link.
      co_await self->relays->onFrame(self->options.handshake, entry->remote, std::move(*relayed),
                                     ciphertext);
      if (self->closed) co_return;
    } else {
      logger->warn(
          "closing the link with peer {:016x} ({}): handshake message after the "
          "handshake",
          entry->remote.peerId, entry->remote.listen.str());
      self->drop(entry);
      co_return;
    }
  }
}

bool Mesh::State::descriptorsMatch(const wire::EnvelopeHeader& header,
                                   const std::vector<Payload>& payloads) {
  if (header.payloads.size() != payloads.size()) return false;
  for (std::size_t i = 0; i < payloads.size(); ++i) {
    if (header.payloads[i].size != payloads[i].size()) return false;
  }
  return true;
}

}  // namespace gossamer::net
