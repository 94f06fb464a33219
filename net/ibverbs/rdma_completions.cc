#include "net/ibverbs/rdma_completions.h"

#include <array>

#include <asio/post.hpp>
#include <asio/use_awaitable.hpp>

#include "engine/base/log.h"
#include "net/errors.h"
#include "net/link_support.h"

namespace gossamer::net::ibverbs {
namespace {

using detail::kUseTuple;

constexpr std::size_t kPollBatch = 32;

// The error a failed work completion closes the link with.
std::error_code errorOf(WcStatus status) {
  switch (status) {
    case WcStatus::kRetryExceeded:
      return asio::error::connection_reset;  // the remote is gone
    case WcStatus::kRnrRetryExceeded:
      return asio::error::timed_out;
    case WcStatus::kRemoteAccessError:
    case WcStatus::kRemoteInvalidRequest:
    case WcStatus::kLocalProtectionError:
      return Errc::rdmaAccessError;
    case WcStatus::kLocalLengthError:
      return Errc::malformedFrame;  // a SEND beyond our buffers
    default:
      return Errc::rdmaFailure;
  }
}

}  // namespace

CompletionPoller::CompletionPoller(LinkCore& core, LinkResources& resources, LinkSender& sender,
                                   LinkReceiver& receiver)
    : core_(core), resources_(resources), sender_(sender), receiver_(receiver) {}

asio::awaitable<void> CompletionPoller::run(asio::any_io_executor executor) {
  if (resources_.options().busyPoll) {
    while (!core_.closed()) {
      drain();
      co_await asio::post(executor, asio::use_awaitable);  // let the io loop run
    }
    co_return;
  }
  for (;;) {
    // Arm, then take what came before arming; the next completion makes an event.
    if (auto ec = resources_.requestNotify()) {
      core_.failWith(ec);
      co_return;
    }
    drain();
    if (core_.closed()) co_return;
    auto [ec] =
        co_await resources_.events().async_wait(asio::posix::descriptor_base::wait_read, kUseTuple);
    if (core_.closed()) co_return;
    if (ec) {
      core_.failWith(ec);
      co_return;
    }
    resources_.takeEvents();
  }
}

std::size_t CompletionPoller::drain() {
  std::array<WorkCompletion, kPollBatch> completions;
  std::size_t total = 0;
  while (!core_.closed()) {
    std::size_t count = 0;
    if (auto ec = resources_.poll(completions, &count)) {
      core_.failWith(ec);
      break;
    }
    for (std::size_t i = 0; i < count && !core_.closed(); ++i) handle(completions[i]);
    total += count;
    if (count < completions.size()) break;
  }
  if (total > 0 && !core_.closed()) {
    sender_.maybeSendCredits();
    core_.wakeAll();
  }
  return total;
}

void CompletionPoller::handle(const WorkCompletion& wc) {
  const WorkKind kind = kindOf(wc.wrId);
  const std::uint32_t index = indexOf(wc.wrId);
  if (kind != WorkKind::kReceive) sender_.completed(kind, index, wc.status == WcStatus::kSuccess);
  if (wc.status != WcStatus::kSuccess) {
    failed(wc);
    return;
  }
  if (kind != WorkKind::kReceive) return;
  if (!wc.hasImm) {
    core_.failWith(Errc::malformedFrame);
    return;
  }
  sender_.applyCredits(wc.imm);
  receiver_.arrived(index, wc);
}

void CompletionPoller::failed(const WorkCompletion& wc) {
  if (wc.status == WcStatus::kFlushed) {
    // The QP is in the error state: because we closed the link or lost the remote (then this
    // is expected), or on its own after a fatal error.
    if (!core_.closed() && !core_.peerGone()) core_.failWith(Errc::rdmaFailure);
    return;
  }
  if (core_.closed()) return;
  const bool unanswered =
      wc.status == WcStatus::kRetryExceeded || wc.status == WcStatus::kRnrRetryExceeded;
  // Requests to a remote known to be gone are expected to fail: not worth a warning.
  log::get("net")->log(unanswered && core_.peerGone() ? spdlog::level::debug : spdlog::level::warn,
                       "ibverbs: link to {}: a work request failed: {} (vendor error {:#x})",
                       core_.remoteAddress(), statusName(wc.status), wc.vendorError);
  if (unanswered) {
    // The remote stopped answering: like its disconnect, what it sent before can still be
    // received, but nothing can be sent. Tell it (if it is still there) by closing the control
    // connection.
    core_.lostRemote(errorOf(wc.status));
    core_.control().close();
    return;
  }
  core_.failWith(errorOf(wc.status));
}

}  // namespace gossamer::net::ibverbs
