// Two transports on their own io threads and one link between them, for the benchmarks that time
// a link by hand (shaped_bench.cc, multistream_bench.cc).
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <future>
#include <memory>

#include <asio/co_spawn.hpp>
#include <asio/use_future.hpp>

#include "bench/io_thread.h"
#include "engine/base/enforce.h"
#include "net/transport.h"

namespace gossamer::bench {

// A sender (index 0) and a receiver (index 1) made by `make` on their threads, the receiver
// listening at `listenAt`, connected by one link. Destroying the pair closes both on their
// threads. Throws gossamer::Error when a step fails or takes over two minutes.
class LinkPair {
 public:
  using MakeTransport = std::function<std::unique_ptr<net::Transport>(IoThread&, std::size_t)>;

  LinkPair(IoThread& sender, IoThread& receiver, const MakeTransport& make,
           const net::Endpoint& listenAt)
      : sender_(sender), receiver_(receiver) {
    receiverTransport_ = receiver_.call([&] {
      auto transport = make(receiver_, 1);
      const std::error_code error = transport->listen(listenAt);
      GOSSAMER_ENFORCE(!error, "link pair: listen failed: {}", error.message());
      return transport;
    });
    senderTransport_ = sender_.call([&] { return make(sender_, 0); });
    const net::Endpoint where = receiver_.call([&] { return receiverTransport_->localEndpoint(); });
    auto accepted = asio::co_spawn(receiver_.io(), receiverTransport_->accept(), asio::use_future);
    auto connected = asio::co_spawn(
        sender_.io(), senderTransport_->connect(where, std::chrono::seconds(10)), asio::use_future);
    net::LinkResult out = waitFor(connected, "connect");
    net::LinkResult in = waitFor(accepted, "accept");
    GOSSAMER_ENFORCE(!out.error && !in.error, "link pair: connect failed: {} / {}",
                     out.error.message(), in.error.message());
    out_ = std::move(out.link);
    in_ = std::move(in.link);
  }
  LinkPair(const LinkPair&) = delete;
  LinkPair& operator=(const LinkPair&) = delete;

  ~LinkPair() {
    sender_.call([this] {
      out_.reset();
      senderTransport_.reset();
    });
    receiver_.call([this] {
      in_.reset();
      receiverTransport_.reset();
    });
    // Let the closes posted by the destructors run before the next pair starts.
    sender_.call([] {});
    receiver_.call([] {});
  }

  net::Link& out() { return *out_; }
  net::Link& in() { return *in_; }

  template <typename T>
  static T waitFor(std::future<T>& future, const char* what) {
    GOSSAMER_ENFORCE(future.wait_for(std::chrono::minutes(2)) == std::future_status::ready,
                     "link pair: {} did not finish within two minutes", what);
    return future.get();
  }

 private:
  IoThread& sender_;
  IoThread& receiver_;
  std::unique_ptr<net::Transport> senderTransport_, receiverTransport_;
  std::unique_ptr<net::Link> out_, in_;
};

}  // namespace gossamer::bench
