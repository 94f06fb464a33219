// Verbs over libibverbs: each method is one libibverbs call and a translation of its types. The
// only file of gossamer that includes <infiniband/verbs.h>.
#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

#include <arpa/inet.h>
#include <fcntl.h>
#include <infiniband/verbs.h>
#include <sys/stat.h>

#include "net/ibverbs/verbs.h"

namespace gossamer::net::ibverbs {
namespace {

template <typename T, typename H>
T* as(H handle) {
  return reinterpret_cast<T*>(handle.value);
}

template <typename H, typename T>
H handleOf(T* pointer) {
  return H{reinterpret_cast<std::uintptr_t>(pointer)};
}

// libibverbs returns errno values, either as the result or in errno.
std::error_code errnoCode(int value) {
  return std::error_code(value != 0 ? value : EIO, std::generic_category());
}

std::error_code lastError() { return errnoCode(errno); }

int mtuBytes(ibv_mtu mtu) {
  switch (mtu) {
    case IBV_MTU_256:
      return 256;
    case IBV_MTU_512:
      return 512;
    case IBV_MTU_1024:
      return 1024;
    case IBV_MTU_2048:
      return 2048;
    case IBV_MTU_4096:
      return 4096;
  }
  return 1024;
}

ibv_mtu mtuEnum(int bytes) {
  if (bytes >= 4096) return IBV_MTU_4096;
  if (bytes >= 2048) return IBV_MTU_2048;
  if (bytes >= 1024) return IBV_MTU_1024;
  if (bytes >= 512) return IBV_MTU_512;
  return IBV_MTU_256;
}

ibv_qp_state stateEnum(QpState state) {
  switch (state) {
    case QpState::kReset:
      return IBV_QPS_RESET;
    case QpState::kInit:
      return IBV_QPS_INIT;
    case QpState::kReadyToReceive:
      return IBV_QPS_RTR;
    case QpState::kReadyToSend:
      return IBV_QPS_RTS;
    case QpState::kError:
      return IBV_QPS_ERR;
  }
  return IBV_QPS_ERR;
}

int accessFlags(unsigned access) {
  int flags = 0;
  if (access & kLocalWrite) flags |= IBV_ACCESS_LOCAL_WRITE;
  if (access & kRemoteWrite) flags |= IBV_ACCESS_REMOTE_WRITE;
  return flags;
}

WcStatus statusOf(ibv_wc_status status) {
  switch (status) {
    case IBV_WC_SUCCESS:
      return WcStatus::kSuccess;
    case IBV_WC_WR_FLUSH_ERR:
      return WcStatus::kFlushed;
    case IBV_WC_RETRY_EXC_ERR:
      return WcStatus::kRetryExceeded;
    case IBV_WC_RNR_RETRY_EXC_ERR:
      return WcStatus::kRnrRetryExceeded;
    case IBV_WC_REM_ACCESS_ERR:
      return WcStatus::kRemoteAccessError;
    case IBV_WC_REM_INV_REQ_ERR:
      return WcStatus::kRemoteInvalidRequest;
    case IBV_WC_LOC_PROT_ERR:
      return WcStatus::kLocalProtectionError;
    case IBV_WC_LOC_LEN_ERR:
      return WcStatus::kLocalLengthError;
    default:
      return WcStatus::kOther;
  }
}

WcOpcode opcodeOf(ibv_wc_opcode opcode) {
  switch (opcode) {
    case IBV_WC_SEND:
      return WcOpcode::kSend;
    case IBV_WC_RDMA_WRITE:
      return WcOpcode::kRdmaWrite;
    case IBV_WC_RECV:
      return WcOpcode::kRecv;
    case IBV_WC_RECV_RDMA_WITH_IMM:
      return WcOpcode::kRecvRdmaWithImm;
    default:
      return WcOpcode::kOther;
  }
}

// ibv_sge and Sge have different layouts; a work request has few SGEs.
constexpr std::size_t kMaxSges = 16;

class Libibverbs final : public Verbs {
 public:
  std::string name() const override { return "libibverbs"; }

  std::error_code deviceNames(std::vector<std::string>* names) override {
    names->clear();
    int count = 0;
    errno = 0;
    ibv_device** list = ibv_get_device_list(&count);
    if (list == nullptr) {
      // ENOSYS: no kernel support (no RDMA subsystem): no devices, not an error.
      if (errno == ENOSYS || errno == 0) return {};
      return lastError();
    }
    for (int i = 0; i < count; ++i) names->emplace_back(ibv_get_device_name(list[i]));
    ibv_free_device_list(list);
    return {};
  }

  std::error_code open(const std::string& device, ContextHandle* context) override {
    int count = 0;
    ibv_device** list = ibv_get_device_list(&count);
    if (list == nullptr) return std::make_error_code(std::errc::no_such_device);
    ibv_context* opened = nullptr;
    errno = 0;
    for (int i = 0; i < count && opened == nullptr; ++i) {
      if (device == ibv_get_device_name(list[i])) {
        opened = ibv_open_device(list[i]);
        if (opened == nullptr && errno == 0) errno = EIO;
      }
    }
    const int error = errno;
    ibv_free_device_list(list);
    if (opened == nullptr)
      return error != 0 ? errnoCode(error) : std::make_error_code(std::errc::no_such_device);
    *context = handleOf<ContextHandle>(opened);
    return {};
  }

  void close(ContextHandle context) override { ibv_close_device(as<ibv_context>(context)); }

  std::error_code portCount(ContextHandle context, int* ports) override {
    ibv_device_attr attr{};
    if (int rc = ibv_query_device(as<ibv_context>(context), &attr)) return errnoCode(rc);
    *ports = attr.phys_port_cnt;
    return {};
  }

  std::error_code queryPort(ContextHandle context, int port, PortAttributes* out) override {
    ibv_port_attr attr{};
    if (int rc = ibv_query_port(as<ibv_context>(context), static_cast<std::uint8_t>(port), &attr))
      return errnoCode(rc);
    out->active = attr.state == IBV_PORT_ACTIVE;
    out->linkLayer =
        attr.link_layer == IBV_LINK_LAYER_ETHERNET ? LinkLayer::kEthernet : LinkLayer::kInfiniband;
    out->lid = attr.lid;
    out->activeMtu = mtuBytes(attr.active_mtu);
    out->gidTableLength = attr.gid_tbl_len;
    return {};
  }

  std::error_code queryGid(ContextHandle context, int port, int index, Gid* out) override {
    ibv_gid gid{};
    if (int rc =
            ibv_query_gid(as<ibv_context>(context), static_cast<std::uint8_t>(port), index, &gid))
      return errnoCode(rc);
    std::memcpy(out->data(), gid.raw, out->size());
    return {};
  }

  bool peerMemoryAvailable() override {
    struct stat info {};
    return ::stat("/sys/module/nvidia_peermem", &info) == 0 ||
           ::stat("/sys/module/nv_peer_mem", &info) == 0;
  }

  std::error_code allocPd(ContextHandle context, PdHandle* pd) override {
    ibv_pd* made = ibv_alloc_pd(as<ibv_context>(context));
    if (made == nullptr) return lastError();
    *pd = handleOf<PdHandle>(made);
    return {};
  }

  void deallocPd(PdHandle pd) override { ibv_dealloc_pd(as<ibv_pd>(pd)); }

  std::error_code registerMemory(PdHandle pd, void* address, std::size_t bytes, unsigned access,
                                 MemoryRegion* region) override {
    ibv_mr* mr = ibv_reg_mr(as<ibv_pd>(pd), address, bytes, accessFlags(access));
    if (mr == nullptr) return lastError();
    *region = MemoryRegion{handleOf<MrHandle>(mr), mr->lkey, mr->rkey};
    return {};
  }

  void deregisterMemory(MrHandle region) override { ibv_dereg_mr(as<ibv_mr>(region)); }

  std::error_code createChannel(ContextHandle context, ChannelHandle* channel) override {
    ibv_comp_channel* made = ibv_create_comp_channel(as<ibv_context>(context));
    if (made == nullptr) return lastError();
    const int flags = ::fcntl(made->fd, F_GETFL);
    if (flags < 0 || ::fcntl(made->fd, F_SETFL, flags | O_NONBLOCK) < 0) {
      const std::error_code ec = lastError();
      ibv_destroy_comp_channel(made);
      return ec;
    }
    *channel = handleOf<ChannelHandle>(made);
    return {};
  }

  void destroyChannel(ChannelHandle channel) override {
    ibv_destroy_comp_channel(as<ibv_comp_channel>(channel));
  }

  int channelFd(ChannelHandle channel) override { return as<ibv_comp_channel>(channel)->fd; }

  std::error_code createCq(ContextHandle context, int entries, ChannelHandle channel,
                           CqHandle* cq) override {
    ibv_cq* made = ibv_create_cq(as<ibv_context>(context), entries, nullptr,
                                 channel ? as<ibv_comp_channel>(channel) : nullptr, 0);
    if (made == nullptr) return lastError();
    *cq = handleOf<CqHandle>(made);
    return {};
  }

  void destroyCq(CqHandle cq) override { ibv_destroy_cq(as<ibv_cq>(cq)); }

  std::error_code requestNotify(CqHandle cq) override {
    if (int rc = ibv_req_notify_cq(as<ibv_cq>(cq), 0)) return errnoCode(rc);
    return {};
  }

  std::error_code getCqEvent(ChannelHandle channel, CqHandle* cq) override {
    ibv_cq* got = nullptr;
    void* context = nullptr;
    if (ibv_get_cq_event(as<ibv_comp_channel>(channel), &got, &context) != 0) return lastError();
    *cq = handleOf<CqHandle>(got);
    return {};
  }

  void ackCqEvents(CqHandle cq, unsigned events) override {
    ibv_ack_cq_events(as<ibv_cq>(cq), events);
  }

  std::error_code pollCq(CqHandle cq, std::span<WorkCompletion> out, std::size_t* count) override {
    ibv_wc wcs[32];
    const int want = static_cast<int>(std::min<std::size_t>(out.size(), 32));
    const int got = ibv_poll_cq(as<ibv_cq>(cq), want, wcs);
    if (got < 0) return std::make_error_code(std::errc::io_error);
    for (int i = 0; i < got; ++i) {
      const ibv_wc& wc = wcs[i];
      WorkCompletion& done = out[static_cast<std::size_t>(i)];
      done.wrId = wc.wr_id;
      done.status = statusOf(wc.status);
      done.opcode = opcodeOf(wc.opcode);
      done.byteLength = wc.byte_len;
      done.hasImm = (wc.wc_flags & IBV_WC_WITH_IMM) != 0;
      done.imm = done.hasImm ? ntohl(wc.imm_data) : 0;
      done.vendorError = wc.vendor_err;
    }
    *count = static_cast<std::size_t>(got);
    return {};
  }

  std::error_code createQp(PdHandle pd, CqHandle cq, const QpCapabilities& capabilities,
                           QpHandle* qp, std::uint32_t* qpn) override {
    ibv_qp_init_attr attr{};
    attr.send_cq = as<ibv_cq>(cq);
    attr.recv_cq = as<ibv_cq>(cq);
    attr.qp_type = IBV_QPT_RC;
    attr.sq_sig_all = 1;
    attr.cap.max_send_wr = capabilities.maxSendWr;
    attr.cap.max_recv_wr = capabilities.maxRecvWr;
    attr.cap.max_send_sge = capabilities.maxSendSge;
    attr.cap.max_recv_sge = capabilities.maxRecvSge;
    ibv_qp* made = ibv_create_qp(as<ibv_pd>(pd), &attr);
    if (made == nullptr) return lastError();
    *qp = handleOf<QpHandle>(made);
    *qpn = made->qp_num;
    return {};
  }

  std::error_code modifyQp(QpHandle qp, const QpTransition& t) override {
    ibv_qp_attr attr{};
    attr.qp_state = stateEnum(t.target);
    int mask = IBV_QP_STATE;
    switch (t.target) {
      case QpState::kInit:
        attr.pkey_index = 0;
        attr.port_num = static_cast<std::uint8_t>(t.port);
        attr.qp_access_flags = accessFlags(t.access);
        mask |= IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS;
        break;
      case QpState::kReadyToReceive:
        attr.path_mtu = mtuEnum(t.pathMtu);
        attr.dest_qp_num = t.remoteQpn;
        attr.rq_psn = t.receivePsn;
        attr.max_dest_rd_atomic = 1;
        attr.min_rnr_timer = static_cast<std::uint8_t>(t.minRnrTimer);
        attr.ah_attr.dlid = t.remoteLid;
        attr.ah_attr.sl = 0;
        attr.ah_attr.src_path_bits = 0;
        attr.ah_attr.port_num = static_cast<std::uint8_t>(t.port);
        if (t.useGid) {
          attr.ah_attr.is_global = 1;
          std::memcpy(attr.ah_attr.grh.dgid.raw, t.remoteGid.data(), t.remoteGid.size());
          attr.ah_attr.grh.sgid_index = static_cast<std::uint8_t>(t.gidIndex);
          attr.ah_attr.grh.hop_limit = 64;
        }
        mask |= IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
        break;
      case QpState::kReadyToSend:
        attr.sq_psn = t.sendPsn;
        attr.timeout = static_cast<std::uint8_t>(t.timeout);
        attr.retry_cnt = static_cast<std::uint8_t>(t.retryCount);
        attr.rnr_retry = static_cast<std::uint8_t>(t.rnrRetry);
        attr.max_rd_atomic = 1;
        mask |= IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                IBV_QP_MAX_QP_RD_ATOMIC;
        break;
      case QpState::kReset:
      case QpState::kError:
        break;
    }
    if (int rc = ibv_modify_qp(as<ibv_qp>(qp), &attr, mask)) return errnoCode(rc);
    return {};
  }

  void destroyQp(QpHandle qp) override { ibv_destroy_qp(as<ibv_qp>(qp)); }

  std::error_code postSend(QpHandle qp, const SendRequest& request) override {
    if (request.sges.size() > kMaxSges) return std::make_error_code(std::errc::invalid_argument);
    ibv_sge sges[kMaxSges];
    for (std::size_t i = 0; i < request.sges.size(); ++i)
      sges[i] = ibv_sge{request.sges[i].address, request.sges[i].length, request.sges[i].lkey};
    ibv_send_wr wr{};
    wr.wr_id = request.wrId;
    wr.sg_list = request.sges.empty() ? nullptr : sges;
    wr.num_sge = static_cast<int>(request.sges.size());
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.imm_data = htonl(request.imm);
    if (request.opcode == SendOpcode::kWriteWithImm) {
      wr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
      wr.wr.rdma.remote_addr = request.remoteAddress;
      wr.wr.rdma.rkey = request.rkey;
    } else {
      wr.opcode = IBV_WR_SEND_WITH_IMM;
    }
    ibv_send_wr* bad = nullptr;
    if (int rc = ibv_post_send(as<ibv_qp>(qp), &wr, &bad)) return errnoCode(rc);
    return {};
  }

  std::error_code postRecv(QpHandle qp, const RecvRequest& request) override {
    if (request.sges.size() > kMaxSges) return std::make_error_code(std::errc::invalid_argument);
    ibv_sge sges[kMaxSges];
    for (std::size_t i = 0; i < request.sges.size(); ++i)
      sges[i] = ibv_sge{request.sges[i].address, request.sges[i].length, request.sges[i].lkey};
    ibv_recv_wr wr{};
    wr.wr_id = request.wrId;
    wr.sg_list = request.sges.empty() ? nullptr : sges;
    wr.num_sge = static_cast<int>(request.sges.size());
    ibv_recv_wr* bad = nullptr;
    if (int rc = ibv_post_recv(as<ibv_qp>(qp), &wr, &bad)) return errnoCode(rc);
    return {};
  }
};

}  // namespace

const char* statusName(WcStatus status) {
  switch (status) {
    case WcStatus::kSuccess:
      return "success";
    case WcStatus::kFlushed:
      return "work request flushed";
    case WcStatus::kRetryExceeded:
      return "transport retry counter exceeded";
    case WcStatus::kRnrRetryExceeded:
      return "RNR retry counter exceeded";
    case WcStatus::kRemoteAccessError:
      return "remote access error";
    case WcStatus::kRemoteInvalidRequest:
      return "remote invalid request";
    case WcStatus::kLocalProtectionError:
      return "local protection error";
    case WcStatus::kLocalLengthError:
      return "local length error";
    case WcStatus::kOther:
      return "other error";
  }
  return "unknown";
}

std::shared_ptr<Verbs> makeLibibverbs() { return std::make_shared<Libibverbs>(); }

}  // namespace gossamer::net::ibverbs
