// The thin seam between the RDMA transport and libibverbs: every verbs call the transport makes
// goes through this interface, so the transport runs over libibverbs on real InfiniBand/RoCE
// hardware (makeLibibverbs) and over an in-memory fake in tests (tests/net/fake_verbs.h), which
// connects several fake devices in one process.
//
// The types are our own, not libibverbs' (this header does not include <infiniband/verbs.h>):
// handles are opaque numbers, attributes are plain structs holding only what the transport uses.
// Errors of control calls are std::error_code values (errno values in std::generic_category, as
// libibverbs reports them); failed work requests come back as WorkCompletion statuses.
//
// Threading: like libibverbs, calls on different objects may come from different threads; the
// transport makes all calls of one device context from its io thread, except the fake's
// deliveries, which cross threads inside the fake.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <system_error>
#include <vector>

namespace gossamer::net::ibverbs {

// An opaque reference to a verbs object (ibv_context*, ibv_pd*, ... for libibverbs; an id for the
// fake). Zero is "none". The Tag keeps the kinds apart.
template <typename Tag>
struct Handle {
  std::uintptr_t value = 0;
  explicit operator bool() const { return value != 0; }
  friend bool operator==(Handle, Handle) = default;
};
using ContextHandle = Handle<struct ContextTag>;
using PdHandle = Handle<struct PdTag>;
using MrHandle = Handle<struct MrTag>;
using ChannelHandle = Handle<struct ChannelTag>;
using CqHandle = Handle<struct CqTag>;
using QpHandle = Handle<struct QpTag>;

using Gid = std::array<std::uint8_t, 16>;

enum class LinkLayer { kInfiniband, kEthernet };

struct PortAttributes {
  bool active = false;
  LinkLayer linkLayer = LinkLayer::kInfiniband;
  std::uint16_t lid = 0;
  int activeMtu = 1024;  // bytes: 256, 512, 1024, 2048 or 4096
  int gidTableLength = 0;
};

// Access rights of a memory region.
enum Access : unsigned {
  kLocalWrite = 1u << 0,
  kRemoteWrite = 1u << 1,
};

struct MemoryRegion {
  MrHandle handle;
  std::uint32_t lkey = 0;
  std::uint32_t rkey = 0;
};

struct QpCapabilities {
  std::uint32_t maxSendWr = 0;
  std::uint32_t maxRecvWr = 0;
  std::uint32_t maxSendSge = 1;
  std::uint32_t maxRecvSge = 1;
};

// Queue pair states of a reliable-connected QP (IBV_QPS_*), in the order of the bring-up.
enum class QpState { kReset, kInit, kReadyToReceive, kReadyToSend, kError };

// One ibv_modify_qp call: the target state and the attributes that transition needs (the others
// are ignored). RESET -> INIT: port, access. INIT -> RTR: path MTU, remote QP number, LID, GID
// (when useGid), receive PSN. RTR -> RTS: send PSN and the retry settings.
struct QpTransition {
  QpState target = QpState::kReset;
  int port = 1;
  unsigned access = 0;  // Access bits for incoming RDMA
  int pathMtu = 1024;   // bytes
  std::uint32_t remoteQpn = 0;
  std::uint16_t remoteLid = 0;
  bool useGid = false;
  Gid remoteGid{};
  int gidIndex = 0;  // the local GID index used as the source GID
  std::uint32_t receivePsn = 0;
  std::uint32_t sendPsn = 0;
  int timeout = 14;    // local ACK timeout, 4.096 us * 2^timeout
  int retryCount = 7;  // transport retries before IBV_WC_RETRY_EXC_ERR
  int rnrRetry = 7;    // RNR retries; 7 = infinite
  int minRnrTimer = 12;
};

struct Sge {
  std::uint64_t address = 0;
  std::uint32_t length = 0;
  std::uint32_t lkey = 0;
};

enum class SendOpcode { kSendWithImm, kWriteWithImm };

// One work request, always signaled (the transport counts every send completion).
struct SendRequest {
  std::uint64_t wrId = 0;
  SendOpcode opcode = SendOpcode::kSendWithImm;
  std::span<const Sge> sges;        // may be empty (a zero-length message)
  std::uint32_t imm = 0;            // host byte order
  std::uint64_t remoteAddress = 0;  // kWriteWithImm
  std::uint32_t rkey = 0;           // kWriteWithImm
};

struct RecvRequest {
  std::uint64_t wrId = 0;
  std::span<const Sge> sges;
};

enum class WcStatus {
  kSuccess,
  kFlushed,            // the QP went to the error state before the request ran
  kRetryExceeded,      // the remote did not acknowledge (gone, or the path broke)
  kRnrRetryExceeded,   // the remote had no receive posted, for too long
  kRemoteAccessError,  // the remote refused an RDMA access (rkey, bounds, rights)
  kRemoteInvalidRequest,
  kLocalProtectionError,  // a local SGE outside its memory region
  kLocalLengthError,      // a message longer than the receive buffer
  kOther,
};

enum class WcOpcode { kSend, kRdmaWrite, kRecv, kRecvRdmaWithImm, kOther };

struct WorkCompletion {
  std::uint64_t wrId = 0;
  WcStatus status = WcStatus::kSuccess;
  WcOpcode opcode = WcOpcode::kOther;  // valid for successful completions only
  std::uint32_t byteLength = 0;        // received bytes (receive completions)
  std::uint32_t imm = 0;               // host byte order
  bool hasImm = false;
  std::uint32_t vendorError = 0;
};

const char* statusName(WcStatus status);

class Verbs {
 public:
  virtual ~Verbs() = default;

  // "libibverbs", "fake".
  virtual std::string name() const = 0;

  // Names of the RDMA devices present (ibv_get_device_list); empty when there are none. Fails
  // only when the list cannot be read at all.
  virtual std::error_code deviceNames(std::vector<std::string>* names) = 0;

  virtual std::error_code open(const std::string& device, ContextHandle* context) = 0;
  virtual void close(ContextHandle context) = 0;
  virtual std::error_code portCount(ContextHandle context, int* ports) = 0;
  virtual std::error_code queryPort(ContextHandle context, int port, PortAttributes* out) = 0;
  virtual std::error_code queryGid(ContextHandle context, int port, int index, Gid* out) = 0;
  // True when device memory (CUDA) can be registered directly (GPUDirect RDMA: the
  // nvidia_peermem or nv_peer_mem kernel module is loaded).
  virtual bool peerMemoryAvailable() = 0;

  virtual std::error_code allocPd(ContextHandle context, PdHandle* pd) = 0;
  virtual void deallocPd(PdHandle pd) = 0;
  virtual std::error_code registerMemory(PdHandle pd, void* address, std::size_t bytes,
                                         unsigned access, MemoryRegion* region) = 0;
  virtual void deregisterMemory(MrHandle region) = 0;

  // A completion channel and its file descriptor (non-blocking), readable when an event waits.
  virtual std::error_code createChannel(ContextHandle context, ChannelHandle* channel) = 0;
  virtual void destroyChannel(ChannelHandle channel) = 0;
  virtual int channelFd(ChannelHandle channel) = 0;
  virtual std::error_code createCq(ContextHandle context, int entries, ChannelHandle channel,
                                   CqHandle* cq) = 0;
  // Every event taken with getCqEvent must be acknowledged before the CQ is destroyed.
  virtual void destroyCq(CqHandle cq) = 0;
  // Arms the CQ: the next completion added to it makes one event on its channel.
  virtual std::error_code requestNotify(CqHandle cq) = 0;
  // Takes one event from the channel; would_block (resource_unavailable_try_again) when none.
  virtual std::error_code getCqEvent(ChannelHandle channel, CqHandle* cq) = 0;
  virtual void ackCqEvents(CqHandle cq, unsigned events) = 0;
  // Moves up to out.size() completions into `out`; *count says how many.
  virtual std::error_code pollCq(CqHandle cq, std::span<WorkCompletion> out,
                                 std::size_t* count) = 0;

  // A reliable-connected QP in the RESET state, with both queues on `cq`.
  virtual std::error_code createQp(PdHandle pd, CqHandle cq, const QpCapabilities& capabilities,
                                   QpHandle* qp, std::uint32_t* qpn) = 0;
  // Fails with invalid_argument for a transition the QP state machine does not allow.
  virtual std::error_code modifyQp(QpHandle qp, const QpTransition& transition) = 0;
  virtual void destroyQp(QpHandle qp) = 0;
  virtual std::error_code postSend(QpHandle qp, const SendRequest& request) = 0;
  virtual std::error_code postRecv(QpHandle qp, const RecvRequest& request) = 0;
};

// Verbs over libibverbs (the real devices of this machine).
std::shared_ptr<Verbs> makeLibibverbs();

}  // namespace gossamer::net::ibverbs
