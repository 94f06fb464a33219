// A fake of the Verbs interface (net/ibverbs/verbs.h) that stands in for RDMA hardware in tests:
// a FakeFabric connects any number of fake devices in one process, each behind its own Verbs
// (one "host" per transport), and carries SENDs and RDMA WRITEs between their queue pairs in
// memory. It lives in tests/ because nothing but tests should ever run the transport without
// a device.
//
// What it models, as the hardware does:
// - The RC queue pair state machine: RESET -> INIT -> RTR -> RTS, any -> RESET or ERROR; any
//   other transition fails with EINVAL, as does posting a send before RTS. Entering ERROR
//   flushes the posted receives (WR_FLUSH_ERR completions); sends posted in ERROR are flushed.
// - Protection: an SGE outside a registered region of the QP's protection domain is a local
//   protection error; an RDMA WRITE to an rkey, range or region without remote write is a remote
//   access error; a SEND longer than the receive buffer is a local length error at the receiver.
//   Each moves the QPs involved to ERROR.
// - Delivery happens inside postSend (synchronously, under the fabric's lock): the bytes are
//   copied, one receive is consumed (SEND and WRITE_WITH_IMM), and completions are queued on both
//   CQs. A remote QP that does not exist or is not ready gives RETRY_EXC_ERR, like hardware
//   only after the retries (kRetryDelay, on a thread of the fake): the sender's QP then goes to
//   ERROR and what was posted behind it is flushed.
// - Completion channels: each is an eventfd (semaphore mode), written when a completion lands
//   on an armed CQ, so the transport's asio wait on the channel's descriptor is real.
// It is STRICTER than hardware in one way: a message that finds no receive posted is an RNR
// error at once (a device with rnr_retry = 7 would retry forever), and it is recorded as a
// violation, so a transport that overruns its peer's receives fails the test.
//
// Include this header; it holds the fabric's objects, the calls for tests, and FakeVerbs, and
// includes fake_verbs_qp.h: the queue pairs (state machine, posting, delivery, failures).
#pragma once

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <sys/eventfd.h>
#include <unistd.h>

#include "net/ibverbs/verbs.h"

namespace gossamer::net::ibverbs::fake {

struct HostOptions {
  bool hasDevice = true;  // false: a machine with no RDMA device at all
  bool portActive = true;
  LinkLayer linkLayer = LinkLayer::kInfiniband;
  int activeMtu = 4096;
  // Device (CUDA) memory as the fake sees it, and whether it can be registered (GPUDirect).
  std::function<bool(const void*)> isDeviceMemory;
  bool peerMemory = false;
};

// Per-device counts of what was delivered, for tests.
struct DeviceStats {
  std::uint64_t frameSends = 0;   // SENDs with bytes
  std::uint64_t creditSends = 0;  // zero-length SENDs
  std::uint64_t writes = 0;       // RDMA WRITEs with immediate
  std::uint64_t bytesWritten = 0;
  std::uint64_t largestWrite = 0;
};

struct LiveCounts {
  std::size_t contexts = 0, pds = 0, mrs = 0, channels = 0, cqs = 0, qps = 0;
  friend bool operator==(const LiveCounts&, const LiveCounts&) = default;
};

class FakeFabric final : public std::enable_shared_from_this<FakeFabric> {
 public:
  // A Verbs that sees one new device ("fake0", "fake1", ...) on this fabric, with one port.
  std::shared_ptr<Verbs> makeHost(const HostOptions& options = {});

  // The next send work request posted by `device` completes with `status` and moves its QP to
  // ERROR (as the hardware does on a fatal completion); the remote sees nothing of it.
  void failNextSend(const std::string& device, WcStatus status) {
    std::lock_guard lock(mutex_);
    faults_[device].push_back(status);
  }
  // Moves every QP of `device` to ERROR, as a crashed host's QPs stop answering.
  void breakDevice(const std::string& device) {
    std::lock_guard lock(mutex_);
    for (auto& [id, qp] : qps_)
      if (devices_[contexts_.at(pds_.at(qp.pd).context).device].name == device) toError(qp);
  }

  // Protocol violations seen (receiver not ready, CQ overrun, events not acknowledged). A
  // correct transport makes none.
  std::vector<std::string> violations() const {
    std::lock_guard lock(mutex_);
    return violations_;
  }
  DeviceStats stats(const std::string& device) const {
    std::lock_guard lock(mutex_);
    auto it = stats_.find(device);
    return it == stats_.end() ? DeviceStats{} : it->second;
  }
  LiveCounts live() const {
    std::lock_guard lock(mutex_);
    return LiveCounts{contexts_.size(), pds_.size(), mrs_.size(),
                      channels_.size(), cqs_.size(), qps_.size()};
  }
  // The states each QP of `device` went through, in order, starting with RESET (QPs that still
  // exist and destroyed ones alike).
  std::vector<std::vector<QpState>> qpHistories(const std::string& device) const {
    std::lock_guard lock(mutex_);
    auto it = histories_.find(device);
    if (it == histories_.end()) return {};
    std::vector<std::vector<QpState>> out;
    for (const auto& [qpn, history] : it->second) out.push_back(history);
    return out;
  }

  // ---- the Verbs calls, for FakeVerbs ----

  std::error_code deviceNames(int device, std::vector<std::string>* names) {
    std::lock_guard lock(mutex_);
    names->clear();
    if (devices_[device].options.hasDevice) names->push_back(devices_[device].name);
    return {};
  }

  std::error_code open(int device, const std::string& name, ContextHandle* out) {
    std::lock_guard lock(mutex_);
    if (!devices_[device].options.hasDevice || devices_[device].name != name)
      return std::make_error_code(std::errc::no_such_device);
    const std::uint64_t id = nextId_++;
    contexts_[id] = Context{device};
    *out = ContextHandle{id};
    return {};
  }
  void close(ContextHandle context) {
    std::lock_guard lock(mutex_);
    contexts_.erase(context.value);
  }
  std::error_code queryPort(ContextHandle context, int port, PortAttributes* out) {
    std::lock_guard lock(mutex_);
    auto it = contexts_.find(context.value);
    if (it == contexts_.end() || port != 1)
      return std::make_error_code(std::errc::invalid_argument);
    const FakeDevice& device = devices_[it->second.device];
    *out = PortAttributes{
        .active = device.options.portActive,
        .linkLayer = device.options.linkLayer,
        .lid = device.options.linkLayer == LinkLayer::kEthernet ? std::uint16_t{0} : device.lid,
        .activeMtu = device.options.activeMtu,
        .gidTableLength = 2};
    return {};
  }
  std::error_code queryGid(ContextHandle context, int port, int index, Gid* out) {
    std::lock_guard lock(mutex_);
    auto it = contexts_.find(context.value);
    if (it == contexts_.end() || port != 1 || index < 0 || index > 1)
      return std::make_error_code(std::errc::invalid_argument);
    *out = index == 0 ? Gid{} : gidOf(devices_[it->second.device].lid);  // index 0 unset
    return {};
  }
  bool peerMemory(int device) {
    std::lock_guard lock(mutex_);
    return devices_[device].options.peerMemory;
  }

  std::error_code allocPd(ContextHandle context, PdHandle* out) {
    std::lock_guard lock(mutex_);
    if (!contexts_.contains(context.value))
      return std::make_error_code(std::errc::invalid_argument);
    const std::uint64_t id = nextId_++;
    pds_[id] = Pd{context.value};
    *out = PdHandle{id};
    return {};
  }
  void deallocPd(PdHandle pd) {
    std::lock_guard lock(mutex_);
    for (const auto& [id, mr] : mrs_)
      if (mr.pd == pd.value) violations_.push_back("protection domain freed with regions in it");
    pds_.erase(pd.value);
  }
  std::error_code registerMemory(PdHandle pd, void* address, std::size_t bytes, unsigned access,
                                 MemoryRegion* out) {
    std::lock_guard lock(mutex_);
    auto it = pds_.find(pd.value);
    if (it == pds_.end() || address == nullptr || bytes == 0)
      return std::make_error_code(std::errc::invalid_argument);
    const HostOptions& host = devices_[contexts_.at(it->second.context).device].options;
    if (host.isDeviceMemory && host.isDeviceMemory(address) && !host.peerMemory)
      return std::make_error_code(std::errc::bad_address);  // as ibv_reg_mr without peer memory
    const std::uint64_t id = nextId_++;
    const auto key = static_cast<std::uint32_t>(0x1000 + id * 7);
    mrs_[id] = Mr{pd.value, static_cast<std::byte*>(address), bytes, access, key, key ^ 0xa5a5};
    *out = MemoryRegion{MrHandle{id}, key, key ^ 0xa5a5};
    return {};
  }
  void deregisterMemory(MrHandle mr) {
    std::lock_guard lock(mutex_);
    mrs_.erase(mr.value);
  }

  std::error_code createChannel(ContextHandle, ChannelHandle* out) {
    const int fd = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC | EFD_SEMAPHORE);
    if (fd < 0) return std::error_code(errno, std::generic_category());
    std::lock_guard lock(mutex_);
    const std::uint64_t id = nextId_++;
    channels_[id] = Channel{fd, {}};
    *out = ChannelHandle{id};
    return {};
  }
  void destroyChannel(ChannelHandle channel) {
    std::lock_guard lock(mutex_);
    auto it = channels_.find(channel.value);
    if (it == channels_.end()) return;
    ::close(it->second.fd);
    channels_.erase(it);
  }
  int channelFd(ChannelHandle channel) {
    std::lock_guard lock(mutex_);
    return channels_.at(channel.value).fd;
  }
  std::error_code createCq(ContextHandle, int entries, ChannelHandle channel, CqHandle* out) {
    std::lock_guard lock(mutex_);
    if (entries < 1) return std::make_error_code(std::errc::invalid_argument);
    const std::uint64_t id = nextId_++;
    cqs_[id] = Cq{channel.value, static_cast<std::size_t>(entries)};
    *out = CqHandle{id};
    return {};
  }
  void destroyCq(CqHandle cq) {
    std::lock_guard lock(mutex_);
    auto it = cqs_.find(cq.value);
    if (it == cqs_.end()) return;
    if (it->second.unacked != 0)
      violations_.push_back("CQ destroyed with unacknowledged events (ibv_destroy_cq would hang)");
    for (const auto& [id, qp] : qps_)
      if (qp.cq == cq.value) violations_.push_back("CQ destroyed while a QP uses it");
    cqs_.erase(it);
  }
  std::error_code requestNotify(CqHandle cq) {
    std::lock_guard lock(mutex_);
    auto it = cqs_.find(cq.value);
    if (it == cqs_.end()) return std::make_error_code(std::errc::invalid_argument);
    it->second.armed = true;
    return {};
  }
  std::error_code getCqEvent(ChannelHandle channel, CqHandle* out) {
    std::lock_guard lock(mutex_);
    auto it = channels_.find(channel.value);
    if (it == channels_.end()) return std::make_error_code(std::errc::invalid_argument);
    std::uint64_t value = 0;
    if (::read(it->second.fd, &value, sizeof value) != sizeof value)
      return std::make_error_code(std::errc::resource_unavailable_try_again);
    const std::uint64_t cq = it->second.events.front();
    it->second.events.pop_front();
    if (auto cqIt = cqs_.find(cq); cqIt != cqs_.end()) ++cqIt->second.unacked;
    *out = CqHandle{cq};
    return {};
  }
  void ackCqEvents(CqHandle cq, unsigned events) {
    std::lock_guard lock(mutex_);
    if (auto it = cqs_.find(cq.value); it != cqs_.end()) it->second.unacked -= events;
  }
  std::error_code pollCq(CqHandle cq, std::span<WorkCompletion> out, std::size_t* count) {
    std::lock_guard lock(mutex_);
    auto it = cqs_.find(cq.value);
    if (it == cqs_.end()) return std::make_error_code(std::errc::invalid_argument);
    Cq& queue = it->second;
    *count = 0;
    while (*count < out.size() && !queue.entries.empty()) {
      const Entry& entry = queue.entries.front();
      if (entry.send) {
        if (auto qp = qps_.find(entry.qp); qp != qps_.end()) --qp->second.sendOutstanding;
      }
      out[(*count)++] = entry.wc;
      queue.entries.pop_front();
    }
    return {};
  }

  // Queue pairs (defined in fake_verbs_qp.h).
  std::error_code createQp(PdHandle pd, CqHandle cq, const QpCapabilities& caps, QpHandle* out,
                           std::uint32_t* qpn);
  std::error_code modifyQp(QpHandle handle, const QpTransition& t);
  void destroyQp(QpHandle qp);
  std::error_code postRecv(QpHandle handle, const RecvRequest& request);
  std::error_code postSend(QpHandle handle, const SendRequest& request);

 private:
  struct FakeDevice {
    std::string name;
    std::uint16_t lid = 0;
    HostOptions options;
  };
  struct Context {
    int device = 0;
  };
  struct Pd {
    std::uint64_t context = 0;
  };
  struct Mr {
    std::uint64_t pd = 0;
    std::byte* address = nullptr;
    std::size_t bytes = 0;
    unsigned access = 0;
    std::uint32_t lkey = 0;
    std::uint32_t rkey = 0;
  };
  struct Channel {
    int fd = -1;
    std::deque<std::uint64_t> events;  // the CQ of each event not taken yet
  };
  struct Entry {
    WorkCompletion wc;
    std::uint64_t qp = 0;
    bool send = false;
  };
  struct Cq {
    std::uint64_t channel = 0;
    std::size_t capacity = 0;
    std::deque<Entry> entries;
    bool armed = false;
    unsigned unacked = 0;
  };
  struct Receive {
    std::uint64_t wrId = 0;
    std::vector<Sge> sges;
  };
  struct Qp {
    std::uint64_t pd = 0;
    std::uint64_t cq = 0;
    int device = 0;
    QpCapabilities caps;
    std::uint32_t qpn = 0;
    QpState state = QpState::kReset;
    unsigned access = 0;
    std::uint32_t remoteQpn = 0;
    std::uint16_t remoteLid = 0;
    bool useGid = false;
    Gid remoteGid{};
    std::deque<Receive> receives;
    std::uint32_t sendOutstanding = 0;
    bool retrying = false;            // a request is being retried (see retry)
    std::vector<std::uint64_t> held;  // requests posted behind it
  };

  // How long the hardware would retry a request nobody acknowledges before RETRY_EXC_ERR.
  static constexpr std::chrono::milliseconds kRetryDelay{20};

  static Gid gidOf(std::uint16_t lid) {
    Gid gid{};
    gid[0] = 0xfe;
    gid[1] = 0x80;
    gid[14] = static_cast<std::uint8_t>(lid >> 8);
    gid[15] = static_cast<std::uint8_t>(lid);
    return gid;
  }

  // With mutex_ held (defined in fake_verbs_qp.h).
  void retry(std::uint64_t id, std::uint64_t wrId, WcOpcode opcode);  // fails after kRetryDelay
  std::uint64_t idOf(const Qp& qp) const;
  Qp* findRemote(const Qp& qp);  // the QP `qp` is connected to, or null
  bool inRegion(std::uint64_t pd, std::uint32_t key, std::uint64_t address, std::size_t bytes,
                bool remote, unsigned access) const;
  // Queues a completion on CQ `cqId` (an event on its channel when armed).
  void complete(std::uint64_t cqId, std::uint64_t qp, bool send, const WorkCompletion& wc);
  void toError(Qp& qp);  // the error state: posted receives are flushed

  mutable std::mutex mutex_;
  std::vector<FakeDevice> devices_;
  std::map<std::uint64_t, Context> contexts_;
  std::map<std::uint64_t, Pd> pds_;
  std::map<std::uint64_t, Mr> mrs_;
  std::map<std::uint64_t, Channel> channels_;
  std::map<std::uint64_t, Cq> cqs_;
  std::map<std::uint64_t, Qp> qps_;
  std::map<std::string, std::deque<WcStatus>> faults_;
  std::map<std::string, DeviceStats> stats_;
  std::map<std::string, std::map<std::uint32_t, std::vector<QpState>>> histories_;
  std::vector<std::string> violations_;
  std::uint64_t nextId_ = 1;
  std::uint32_t nextQpn_ = 0x100;
};

// One host's view of the fabric: the Verbs a transport under test is given.
class FakeVerbs final : public Verbs {
 public:
  FakeVerbs(std::shared_ptr<FakeFabric> fabric, int device)
      : fabric_(std::move(fabric)), device_(device) {}

  std::string name() const override { return "fake"; }
  std::error_code deviceNames(std::vector<std::string>* names) override {
    return fabric_->deviceNames(device_, names);
  }
  std::error_code open(const std::string& device, ContextHandle* context) override {
    return fabric_->open(device_, device, context);
  }
  void close(ContextHandle context) override { fabric_->close(context); }
  std::error_code portCount(ContextHandle, int* ports) override {
    *ports = 1;
    return {};
  }
  std::error_code queryPort(ContextHandle context, int port, PortAttributes* out) override {
    return fabric_->queryPort(context, port, out);
  }
  std::error_code queryGid(ContextHandle context, int port, int index, Gid* out) override {
    return fabric_->queryGid(context, port, index, out);
  }
  bool peerMemoryAvailable() override { return fabric_->peerMemory(device_); }
  std::error_code allocPd(ContextHandle context, PdHandle* pd) override {
    return fabric_->allocPd(context, pd);
  }
  void deallocPd(PdHandle pd) override { fabric_->deallocPd(pd); }
  std::error_code registerMemory(PdHandle pd, void* address, std::size_t bytes, unsigned access,
                                 MemoryRegion* region) override {
    return fabric_->registerMemory(pd, address, bytes, access, region);
  }
  void deregisterMemory(MrHandle region) override { fabric_->deregisterMemory(region); }
  std::error_code createChannel(ContextHandle context, ChannelHandle* channel) override {
    return fabric_->createChannel(context, channel);
  }
  void destroyChannel(ChannelHandle channel) override { fabric_->destroyChannel(channel); }
  int channelFd(ChannelHandle channel) override { return fabric_->channelFd(channel); }
  std::error_code createCq(ContextHandle context, int entries, ChannelHandle channel,
                           CqHandle* cq) override {
    return fabric_->createCq(context, entries, channel, cq);
  }
  void destroyCq(CqHandle cq) override { fabric_->destroyCq(cq); }
  std::error_code requestNotify(CqHandle cq) override { return fabric_->requestNotify(cq); }
  std::error_code getCqEvent(ChannelHandle channel, CqHandle* cq) override {
    return fabric_->getCqEvent(channel, cq);
  }
  void ackCqEvents(CqHandle cq, unsigned events) override { fabric_->ackCqEvents(cq, events); }
  std::error_code pollCq(CqHandle cq, std::span<WorkCompletion> out, std::size_t* count) override {
    return fabric_->pollCq(cq, out, count);
  }
  std::error_code createQp(PdHandle pd, CqHandle cq, const QpCapabilities& capabilities,
                           QpHandle* qp, std::uint32_t* qpn) override {
    return fabric_->createQp(pd, cq, capabilities, qp, qpn);
  }
  std::error_code modifyQp(QpHandle qp, const QpTransition& transition) override {
    return fabric_->modifyQp(qp, transition);
  }
  void destroyQp(QpHandle qp) override { fabric_->destroyQp(qp); }
  std::error_code postSend(QpHandle qp, const SendRequest& request) override {
    return fabric_->postSend(qp, request);
  }
  std::error_code postRecv(QpHandle qp, const RecvRequest& request) override {
    return fabric_->postRecv(qp, request);
  }

 private:
  const std::shared_ptr<FakeFabric> fabric_;
  const int device_;
};

inline std::shared_ptr<Verbs> FakeFabric::makeHost(const HostOptions& options) {
  std::lock_guard lock(mutex_);
  const int index = static_cast<int>(devices_.size());
  devices_.push_back(
      FakeDevice{"fake" + std::to_string(index), static_cast<std::uint16_t>(index + 1), options});
  return std::make_shared<FakeVerbs>(shared_from_this(), index);
}

}  // namespace gossamer::net::ibverbs::fake

// FakeFabric's queue pairs.
#include "tests/net/fake_verbs_qp.h"  // IWYU pragma: export
