// The credit accounting of protocol.h for one RDMA link (rdma_link.h), one struct per direction,
// as plain counters (no verbs, no I/O). Every count is cumulative; the immediates carry them mod
// 2^bits, and protocol::advance takes them back.
#pragma once

#include <algorithm>
#include <cstdint>

#include "net/ibverbs/protocol.h"

namespace gossamer::net::ibverbs {

// The send direction: what we posted, and what the remote reported freed of it. A data message
// (frame or chunk) is posted only while the remote has a data receive posted for it
// (dataWindow), a chunk only into a free slot (slotCount), a credit message only into a credit
// receive (creditWindow), and any request only into a free send queue entry (sendDepth): the
// sender never overruns the remote, and waits for credits instead.
struct SendWindow {
  bool canPostData() const {
    return posted - completed < sendDepth && dataSent - peerDataFreed < dataWindow;
  }
  bool canPostChunk() const { return canPostData() && chunksSent - peerSlotsFreed < slotCount; }
  bool canPostCredit() const {
    return posted - completed < sendDepth && creditsSent - peerCreditsFreed < creditWindow;
  }
  // Takes the credits a message of the remote carried in its immediate (a stale report changes
  // nothing).
  void apply(std::uint32_t imm) {
    const protocol::Credits credits = protocol::unpackImm(imm);
    peerDataFreed = protocol::advance(peerDataFreed, credits.dataFreed, protocol::kDataBits);
    peerSlotsFreed = protocol::advance(peerSlotsFreed, credits.slotsFreed, protocol::kSlotBits);
    peerCreditsFreed =
        protocol::advance(peerCreditsFreed, credits.creditsFreed, protocol::kCreditBits);
  }

  // Set at connect: our send queue's depth, and the remote's windows (its BootstrapInfo).
  std::uint32_t sendDepth = 0;
  std::uint32_t dataWindow = 0;
  std::uint32_t slotCount = 0;
  std::uint32_t creditWindow = 0;
  // What we posted of each kind, and what the remote reported freed of it.
  std::uint64_t dataSent = 0;
  std::uint64_t chunksSent = 0;
  std::uint64_t creditsSent = 0;
  std::uint64_t peerDataFreed = 0;
  std::uint64_t peerSlotsFreed = 0;
  std::uint64_t peerCreditsFreed = 0;
  // The send queue: requests posted, requests completed (they complete in order), and the
  // number of the first that failed.
  std::uint64_t posted = 0;
  std::uint64_t completed = 0;
  std::uint64_t firstFailed = UINT64_MAX;
};

// The receive direction: what we freed of the remote's messages (receives reposted, slots read
// out), and how much of it our messages reported. Every message we send carries the freed
// counts in its immediate (imm()); a credit message carries nothing else.
struct CreditReturn {
  std::uint32_t imm() const { return protocol::packImm(dataFreed, slotsFreed, creditsFreed); }
  // A message carrying imm() was posted.
  void reported() {
    dataReported = dataFreed;
    slotsReported = slotsFreed;
    creditsReported = creditsFreed;
  }
  // Whether a credit message is due, for our windows (`slotCount` slots, `dataWindow` data and
  // `creditWindow` credit receives). Report before the remote can run dry, and acknowledge its
  // credit messages every quarter of their window, so that it can always send ours; `flush`:
  // whatever is unreported is due (the receiver is about to wait), until a message carries it.
  // A flush with nothing to report is dropped.
  bool messageDue(bool flush, std::uint64_t slotCount, std::uint64_t dataWindow,
                  std::uint64_t creditWindow) {
    const std::uint64_t data = dataFreed - dataReported;
    const std::uint64_t slots = slotsFreed - slotsReported;
    const std::uint64_t credits = creditsFreed - creditsReported;
    flushWanted = flushWanted || flush;
    const bool due = (flushWanted && data + slots > 0) ||
                     slots >= std::max<std::uint64_t>(1, slotCount / 2) ||
                     data >= std::max<std::uint64_t>(1, dataWindow / 2) ||
                     credits >= std::max<std::uint64_t>(1, creditWindow / 4);
    if (!due) flushWanted = false;
    return due;
  }

  std::uint64_t dataFreed = 0;
  std::uint64_t slotsFreed = 0;
  std::uint64_t creditsFreed = 0;
  std::uint64_t dataReported = 0;
  std::uint64_t slotsReported = 0;
  std::uint64_t creditsReported = 0;
  bool flushWanted = false;  // a credit message to flush everything is owed
};

}  // namespace gossamer::net::ibverbs
