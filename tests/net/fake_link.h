// A tiny in-memory net::Link pair for the wire tests and fuzz targets: two queues of frames on
// one io_context, no transport backend involved. Single-threaded: every method, close()
// included, must be called on the io_context's thread.
#pragma once

#include <chrono>
#include <cstddef>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <asio/error.hpp>
#include <asio/experimental/as_tuple.hpp>
#include <asio/io_context.hpp>
#include <asio/steady_timer.hpp>
#include <asio/use_awaitable.hpp>

#include "net/transport.h"

namespace gossamer::net::testing {

// An owned copy of a frame in flight.
struct FakeFrame {
  std::vector<std::byte> header;
  std::vector<std::vector<std::byte>> payloads;
};

class FakeLink final : public Link {
 public:
  // Decides the fate of each frame this end sends: may edit it; returning false drops it and
  // closes this end (a peer that disconnects mid-handshake).
  using SendFilter = std::function<bool(FakeFrame&)>;

  // Two connected ends.
  static std::pair<std::unique_ptr<FakeLink>, std::unique_ptr<FakeLink>> pair(
      asio::io_context& io) {
    auto wire = std::make_shared<Wire>(io);
    return {std::unique_ptr<FakeLink>(new FakeLink(wire, 0)),
            std::unique_ptr<FakeLink>(new FakeLink(wire, 1))};
  }

  asio::awaitable<std::error_code> send(OutFrame frame) override {
    End& self = wire_->ends[side_];
    End& peer = wire_->ends[1 - side_];
    if (self.closed) co_return asio::error::operation_aborted;
    FakeFrame copy{{frame.header.begin(), frame.header.end()}, {}};
    for (auto payload : frame.payloads) copy.payloads.emplace_back(payload.begin(), payload.end());
    sent_ += copy.header.size();
    if (filter_ && !filter_(copy)) {
      close();
      co_return asio::error::connection_reset;
    }
    if (peer.closed) co_return asio::error::broken_pipe;
    peer.inbox.push_back(std::move(copy));
    wake(peer);
    co_return std::error_code{};
  }

  asio::awaitable<std::error_code> receive(InFrame& frame) override {
    End& self = wire_->ends[side_];
    for (;;) {
      if (self.closed) co_return asio::error::operation_aborted;
      if (!self.inbox.empty()) {
        FakeFrame next = std::move(self.inbox.front());
        self.inbox.pop_front();
        received_ += next.header.size();
        frame.header = std::move(next.header);
        frame.payloads.clear();
        for (auto& bytes : next.payloads) {
          auto owner = std::make_shared<std::vector<std::byte>>(std::move(bytes));
          frame.payloads.emplace_back(std::span<std::byte>(*owner), owner);
        }
        co_return std::error_code{};
      }
      if (wire_->ends[1 - side_].closed || self.peerDoneSending) co_return asio::error::eof;
      self.woken = false;
      self.wake.expires_at(asio::steady_timer::time_point::max());
      co_await self.wake.async_wait(asio::experimental::as_tuple(asio::use_awaitable));
      // Our own wake-up cancels the timer too; anything else is a per-operation cancellation.
      if (!self.woken) co_return asio::error::operation_aborted;
    }
  }

  void setPayloadTarget(PayloadTarget) override {}

  void close() override {
    End& self = wire_->ends[side_];
    if (self.closed) return;
    self.closed = true;
    wake(self);
    wake(wire_->ends[1 - side_]);
  }

  std::string remoteAddress() const override { return "fake:" + std::to_string(1 - side_); }
  std::uint64_t bytesSent() const override { return sent_; }
  std::uint64_t bytesReceived() const override { return received_; }

  // Test hooks.
  void setSendFilter(SendFilter filter) { filter_ = std::move(filter); }
  // Puts a frame in this end's inbox as if the peer had sent it.
  void inject(FakeFrame frame) {
    wire_->ends[side_].inbox.push_back(std::move(frame));
    wake(wire_->ends[side_]);
  }
  // After the frames already queued, this end's receives see end-of-stream (the peer shut
  // down its sending side but still accepts what we send).
  void peerFinishedSending() {
    wire_->ends[side_].peerDoneSending = true;
    wake(wire_->ends[side_]);
  }
  bool closed() const { return wire_->ends[side_].closed; }

 private:
  struct End {
    explicit End(asio::io_context& io) : wake(io) {}
    std::deque<FakeFrame> inbox;
    bool closed = false;
    bool peerDoneSending = false;
    bool woken = false;
    asio::steady_timer wake;
  };
  struct Wire {
    explicit Wire(asio::io_context& io) : ends{End(io), End(io)} {}
    End ends[2];
  };

  FakeLink(std::shared_ptr<Wire> wire, int side) : wire_(std::move(wire)), side_(side) {}

  static void wake(End& end) {
    end.woken = true;
    end.wake.cancel();
  }

  std::shared_ptr<Wire> wire_;
  int side_;
  SendFilter filter_;
  std::uint64_t sent_ = 0;
  std::uint64_t received_ = 0;
};

}  // namespace gossamer::net::testing
