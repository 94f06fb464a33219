// The completions of one RDMA link (rdma_link.h), taken from its CQ on the io thread (waiting on
// the completion channel's descriptor, or busy polling) and handed on: a send request's to the
// send side, a receive's credits to the send side and what it brought to the receive side. A
// failed request closes the link, except when the remote stopped answering: then the remote is
// gone (what it sent before can still be received) and the control connection is closed to tell
// it. Io thread only.
#pragma once

#include <cstddef>

#include <asio/any_io_executor.hpp>
#include <asio/awaitable.hpp>

#include "net/ibverbs/rdma_link_core.h"
#include "net/ibverbs/rdma_receive.h"
#include "net/ibverbs/rdma_resources.h"
#include "net/ibverbs/rdma_send.h"
#include "net/ibverbs/verbs.h"

namespace gossamer::net::ibverbs {

class CompletionPoller {
 public:
  CompletionPoller(LinkCore& core, LinkResources& resources, LinkSender& sender,
                   LinkReceiver& receiver);
  CompletionPoller(const CompletionPoller&) = delete;
  CompletionPoller& operator=(const CompletionPoller&) = delete;

  // Takes completions until the link closes (or fails it when the CQ cannot be armed or waited
  // on). Busy polling yields to the other work of `executor`, the link's, between rounds. The
  // caller keeps the link alive until it returns.
  asio::awaitable<void> run(asio::any_io_executor executor);
  // Takes every completion queued now; after any, sends the credits due and wakes the waiters.
  // Returns how many it took.
  std::size_t drain();

 private:
  void handle(const WorkCompletion& wc);
  void failed(const WorkCompletion& wc);

  LinkCore& core_;
  LinkResources& resources_;
  LinkSender& sender_;
  LinkReceiver& receiver_;
};

}  // namespace gossamer::net::ibverbs
