// What the parts of one RDMA link (rdma_link.h) share: its control connection, where the link
// stands, and the conditions its coroutines wait on. A link is open; or closed (closed_: every
// operation fails with closeError_ from then on, the control connection is closed and the QP is
// in the error state); or open with its remote gone (peerGone_: sends fail with peerError_,
// receives still get what arrived before). LinkState is the one LinkCore of a link: its parts
// hold a LinkCore& and close the link through it. Io thread only.
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <system_error>
#include <utility>

#include <asio/awaitable.hpp>

#include "net/link_support.h"
#include "net/transport.h"

namespace gossamer::net::ibverbs {

class LinkCore {
 public:
  LinkCore(const LinkCore&) = delete;
  LinkCore& operator=(const LinkCore&) = delete;

  Link& control() { return *control_; }
  const std::string& remoteAddress() const { return remote_; }
  bool started() const { return started_; }
  bool closed() const { return closed_; }
  const std::error_code& closeError() const { return closeError_; }
  bool peerGone() const { return peerGone_; }
  const std::error_code& peerError() const { return peerError_; }

  // The first call fails pending and later operations with `reason`, closes the control
  // connection and moves the QP to the error state (LinkState's: it knows every part).
  virtual void closeWith(std::error_code reason) = 0;
  // Closes the link with `ec` unless it is closed already; returns the error it is closed with.
  std::error_code failWith(std::error_code ec) {
    if (closed_) return closeError_;
    closeWith(ec);
    return ec;
  }
  // The remote is gone (its control connection ended, or it stopped acknowledging): sends fail
  // with `error`, receives get what arrived before, then eof (or the error).
  void lostRemote(std::error_code error) {
    if (peerGone_) return;
    peerGone_ = true;
    peerError_ = error;
    wakeAll();
  }
  // Wakes every send and the receive waiting: what they wait for may have changed.
  void wakeAll() {
    sendWake_.notifyAll();
    receiveWake_.notifyAll();
  }

  std::mutex& waitMutex() { return waitMutex_; }
  detail::AsyncCondition& sendWake() { return sendWake_; }
  detail::AsyncCondition& receiveWake() { return receiveWake_; }

  // Waits on `condition` until `ready()`; fails with the close error, or peerError() when the
  // remote went away (and `failOnPeerGone`).
  template <typename Ready>
  asio::awaitable<std::error_code> waitUntil(detail::AsyncCondition& condition, Ready ready,
                                             bool failOnPeerGone) {
    std::unique_lock lock(waitMutex_);
    for (;;) {
      if (closed_) co_return closeError_;
      if (ready()) co_return std::error_code{};
      if (failOnPeerGone && peerGone_) co_return peerError_;
      if (auto ec = co_await condition.wait(lock)) co_return closed_ ? closeError_ : ec;
      lock.lock();
    }
  }

 protected:
  explicit LinkCore(std::unique_ptr<Link> control)
      : control_(std::move(control)), remote_(control_->remoteAddress()) {}
  ~LinkCore() = default;

  // closed_ and closeError_ are what detail::FrameReceiver reads of LinkState.
  const std::unique_ptr<Link> control_;
  const std::string remote_;
  bool started_ = false;
  bool closed_ = false;
  std::error_code closeError_;
  bool peerGone_ = false;
  std::error_code peerError_;  // what sends fail with once peerGone_

 private:
  std::mutex waitMutex_;  // only for AsyncCondition's interface: all waiters are on the io thread
  detail::AsyncCondition sendWake_;
  detail::AsyncCondition receiveWake_;
};

}  // namespace gossamer::net::ibverbs
