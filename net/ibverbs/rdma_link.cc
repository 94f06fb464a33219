#include "net/ibverbs/rdma_link.h"

#include <utility>

#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/dispatch.hpp>

#include "engine/base/log.h"
#include "net/errors.h"

namespace gossamer::net::ibverbs {

LinkState::LinkState(std::shared_ptr<Device> device, asio::any_io_executor executor,
                     std::unique_ptr<Link> control)
    : LinkCore(std::move(control)),
      executor_(std::move(executor)),
      resources_(std::move(device), executor_),
      sender_(*this, resources_, credits_),
      receiver_(*this, resources_, credits_, sender_),
      poller_(*this, resources_, sender_, receiver_) {}

std::error_code LinkState::create(std::shared_ptr<Device> device, asio::any_io_executor executor,
                                  std::unique_ptr<Link> control, std::shared_ptr<LinkState>* out) {
  auto self =
      std::make_shared<LinkState>(std::move(device), std::move(executor), std::move(control));
  *out = self;
  if (auto ec = self->resources_.create()) return ec;
  for (std::uint32_t i = 0; i < self->resources_.receiveDepth(); ++i) {
    if (auto ec = self->receiver_.repostReceive(i)) return ec;
  }
  return {};
}

std::error_code LinkState::connect(const protocol::BootstrapInfo& remote) {
  if (auto ec = resources_.negotiate(remote)) return ec;
  sender_.connected();
  return resources_.readyToReceive();
}

std::error_code LinkState::start() {
  if (auto ec = resources_.readyToSend()) return ec;
  started_ = true;
  asio::co_spawn(executor_, pollLoop(shared_from_this()), asio::detached);
  asio::co_spawn(executor_, watchControl(shared_from_this()), asio::detached);
  return {};
}

asio::awaitable<std::error_code> LinkState::send(std::shared_ptr<LinkState> self, OutFrame frame) {
  co_return co_await self->sender_.send(frame);  // `self` keeps the sender alive
}

asio::awaitable<void> LinkState::pollLoop(std::shared_ptr<LinkState> self) {
  co_await self->poller_.run(self->executor_);  // `self` keeps the poller alive
}

asio::awaitable<void> LinkState::watchControl(std::shared_ptr<LinkState> self) {
  // Nothing is sent on the control connection after the bootstrap: whatever ends this receive
  // (the remote closed or vanished, or broke the protocol) means the remote is gone.
  InFrame frame;
  const std::error_code ec = co_await self->control_->receive(frame);
  if (self->closed_ || self->peerGone_) co_return;
  log::get("net")->debug("ibverbs: link to {} lost its control connection ({})", self->remote_,
                         ec ? ec.message() : "unexpected frame");
  // What the remote sent before it went is in our completion queue: take it first, so that the
  // receiver gets those frames before the end of the link.
  self->poller_.drain();
  self->lostRemote(asio::error::broken_pipe);
}

void LinkState::close() {
  asio::dispatch(executor_,
                 [self = shared_from_this()] { self->closeWith(asio::error::operation_aborted); });
}

void LinkState::closeWith(std::error_code reason) {
  if (closed_) return;
  closed_ = true;
  closeError_ = reason;
  control_->close();     // the remote learns at once
  resources_.toError();  // stops transfers; pending requests are flushed
  resources_.cancelEvents();
  sender_.close();
  receiver_.close();
  wakeAll();
}

}  // namespace gossamer::net::ibverbs
