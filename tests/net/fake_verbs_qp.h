// The queue pairs of the fake verbs (included by fake_verbs.h: include that one): the RC state
// machine, posting receives and sends, and delivery of a SEND or RDMA WRITE with immediate to
// the remote QP at once, with the protection checks, RNR and retry-exceeded failures, the error
// state's flushes and the completions on both CQs, as fake_verbs.h describes. The calls take the
// fabric's mutex; the helpers below them run with it held.
#pragma once

#include "tests/net/fake_verbs.h"

namespace gossamer::net::ibverbs::fake {

inline std::error_code FakeFabric::createQp(PdHandle pd, CqHandle cq, const QpCapabilities& caps,
                                            QpHandle* out, std::uint32_t* qpn) {
  std::lock_guard lock(mutex_);
  if (!pds_.contains(pd.value) || !cqs_.contains(cq.value) || caps.maxSendWr == 0 ||
      caps.maxRecvWr == 0)
    return std::make_error_code(std::errc::invalid_argument);
  const std::uint64_t id = nextId_++;
  Qp qp;
  qp.pd = pd.value;
  qp.cq = cq.value;
  qp.caps = caps;
  qp.qpn = nextQpn_++;
  qp.device = contexts_.at(pds_.at(pd.value).context).device;
  qps_[id] = qp;
  histories_[devices_[qp.device].name][qp.qpn] = {QpState::kReset};
  *out = QpHandle{id};
  *qpn = qp.qpn;
  return {};
}

inline std::error_code FakeFabric::modifyQp(QpHandle handle, const QpTransition& t) {
  std::lock_guard lock(mutex_);
  auto it = qps_.find(handle.value);
  if (it == qps_.end()) return std::make_error_code(std::errc::invalid_argument);
  Qp& qp = it->second;
  const QpState from = qp.state;
  const QpState to = t.target;
  const bool legal = to == QpState::kReset || to == QpState::kError ||
                     (from == QpState::kReset && to == QpState::kInit) ||
                     (from == QpState::kInit && to == QpState::kInit) ||
                     (from == QpState::kInit && to == QpState::kReadyToReceive) ||
                     (from == QpState::kReadyToReceive && to == QpState::kReadyToSend) ||
                     (from == QpState::kReadyToSend && to == QpState::kReadyToSend);
  if (!legal) return std::make_error_code(std::errc::invalid_argument);
  if (to == QpState::kInit) {
    if (t.port != 1) return std::make_error_code(std::errc::invalid_argument);
    qp.access = t.access;
  }
  if (to == QpState::kReadyToReceive) {
    const int mtu = t.pathMtu;
    if ((mtu != 256 && mtu != 512 && mtu != 1024 && mtu != 2048 && mtu != 4096) ||
        mtu > devices_[qp.device].options.activeMtu || t.remoteQpn == 0 ||
        (devices_[qp.device].options.linkLayer == LinkLayer::kEthernet && !t.useGid))
      return std::make_error_code(std::errc::invalid_argument);
    qp.remoteQpn = t.remoteQpn;
    qp.remoteLid = t.remoteLid;
    qp.useGid = t.useGid;
    qp.remoteGid = t.remoteGid;
  }
  if (to == QpState::kError) {
    toError(qp);
  } else {
    if (to == QpState::kReset) qp.receives.clear();
    qp.state = to;
  }
  histories_[devices_[qp.device].name][qp.qpn].push_back(to);
  return {};
}

inline void FakeFabric::destroyQp(QpHandle qp) {
  std::lock_guard lock(mutex_);
  qps_.erase(qp.value);
}

inline std::error_code FakeFabric::postRecv(QpHandle handle, const RecvRequest& request) {
  std::lock_guard lock(mutex_);
  auto it = qps_.find(handle.value);
  if (it == qps_.end()) return std::make_error_code(std::errc::invalid_argument);
  Qp& qp = it->second;
  if (qp.state == QpState::kReset) return std::make_error_code(std::errc::invalid_argument);
  if (qp.receives.size() >= qp.caps.maxRecvWr || request.sges.size() > qp.caps.maxRecvSge)
    return std::make_error_code(std::errc::not_enough_memory);
  if (qp.state == QpState::kError) {
    complete(qp.cq, handle.value, false,
             WorkCompletion{.wrId = request.wrId, .status = WcStatus::kFlushed});
    return {};
  }
  qp.receives.push_back(Receive{request.wrId, {request.sges.begin(), request.sges.end()}});
  return {};
}

inline std::error_code FakeFabric::postSend(QpHandle handle, const SendRequest& request) {
  std::lock_guard lock(mutex_);
  auto it = qps_.find(handle.value);
  if (it == qps_.end()) return std::make_error_code(std::errc::invalid_argument);
  const std::uint64_t id = handle.value;
  Qp& qp = it->second;
  if (qp.state != QpState::kReadyToSend && qp.state != QpState::kError)
    return std::make_error_code(std::errc::invalid_argument);
  if (qp.sendOutstanding >= qp.caps.maxSendWr || request.sges.size() > qp.caps.maxSendSge)
    return std::make_error_code(std::errc::not_enough_memory);
  ++qp.sendOutstanding;
  const WcOpcode opcode =
      request.opcode == SendOpcode::kWriteWithImm ? WcOpcode::kRdmaWrite : WcOpcode::kSend;
  auto finish = [&](WcStatus status) {
    complete(qp.cq, id, true,
             WorkCompletion{.wrId = request.wrId, .status = status, .opcode = opcode});
    if (status != WcStatus::kSuccess && status != WcStatus::kFlushed) toError(qp);
  };
  if (qp.state == QpState::kError) {
    finish(WcStatus::kFlushed);
    return {};
  }
  if (qp.retrying) {  // behind a request that is still being retried
    qp.held.push_back(request.wrId);
    return {};
  }
  // Gather the local bytes (a local protection error when an SGE is outside its region).
  std::vector<std::byte> bytes;
  for (const Sge& sge : request.sges) {
    if (!inRegion(qp.pd, sge.lkey, sge.address, sge.length, false, 0)) {
      finish(WcStatus::kLocalProtectionError);
      return {};
    }
    const auto* from = reinterpret_cast<const std::byte*>(sge.address);
    bytes.insert(bytes.end(), from, from + sge.length);
  }
  FakeDevice& self = devices_[qp.device];
  if (auto fault = faults_.find(self.name); fault != faults_.end() && !fault->second.empty()) {
    const WcStatus status = fault->second.front();
    fault->second.pop_front();
    finish(status);
    return {};
  }
  Qp* remote = findRemote(qp);
  if (remote == nullptr ||
      (remote->state != QpState::kReadyToReceive && remote->state != QpState::kReadyToSend)) {
    retry(id, request.wrId, opcode);
    return {};
  }
  const std::uint64_t remoteId = idOf(*remote);
  DeviceStats& stats = stats_[self.name];
  const bool write = request.opcode == SendOpcode::kWriteWithImm;
  if (write && (!(remote->access & kRemoteWrite) ||
                !inRegion(remote->pd, request.rkey, request.remoteAddress, bytes.size(), true,
                          kRemoteWrite))) {
    finish(WcStatus::kRemoteAccessError);
    toError(*remote);
    return {};
  }
  // Both consume a receive: a SEND for its bytes, a WRITE_WITH_IMM for its immediate.
  if (remote->receives.empty()) {
    violations_.push_back(std::string(write ? "RDMA write with immediate" : "SEND") +
                          " found no receive posted (RNR)");
    finish(WcStatus::kRnrRetryExceeded);
    return {};
  }
  const Receive receive = std::move(remote->receives.front());
  remote->receives.pop_front();
  if (write) {
    if (!bytes.empty())
      std::memcpy(reinterpret_cast<std::byte*>(request.remoteAddress), bytes.data(), bytes.size());
    ++stats.writes;
    stats.bytesWritten += bytes.size();
    stats.largestWrite = std::max<std::uint64_t>(stats.largestWrite, bytes.size());
  } else {
    std::size_t room = 0;
    for (const Sge& sge : receive.sges) room += sge.length;
    if (bytes.size() > room) {
      complete(remote->cq, remoteId, false,
               WorkCompletion{.wrId = receive.wrId, .status = WcStatus::kLocalLengthError});
      toError(*remote);
      finish(WcStatus::kRemoteInvalidRequest);
      return {};
    }
    std::size_t offset = 0;
    for (const Sge& sge : receive.sges) {
      const std::size_t n = std::min<std::size_t>(sge.length, bytes.size() - offset);
      if (n > 0) std::memcpy(reinterpret_cast<std::byte*>(sge.address), bytes.data() + offset, n);
      offset += n;
    }
    ++(bytes.empty() ? stats.creditSends : stats.frameSends);
  }
  complete(remote->cq, remoteId, false,
           WorkCompletion{.wrId = receive.wrId,
                          .opcode = write ? WcOpcode::kRecvRdmaWithImm : WcOpcode::kRecv,
                          .byteLength = static_cast<std::uint32_t>(bytes.size()),
                          .imm = request.imm,
                          .hasImm = true});
  finish(WcStatus::kSuccess);
  return {};
}

// With mutex_ held: request `wrId` of QP `id` finds no one; it fails after kRetryDelay.
inline void FakeFabric::retry(std::uint64_t id, std::uint64_t wrId, WcOpcode opcode) {
  qps_.at(id).retrying = true;
  std::thread([fabric = shared_from_this(), id, wrId, opcode] {
    std::this_thread::sleep_for(kRetryDelay);
    std::lock_guard lock(fabric->mutex_);
    auto it = fabric->qps_.find(id);
    if (it == fabric->qps_.end()) return;
    Qp& qp = it->second;
    qp.retrying = false;
    fabric->complete(
        qp.cq, id, true,
        WorkCompletion{.wrId = wrId, .status = WcStatus::kRetryExceeded, .opcode = opcode});
    for (const std::uint64_t held : qp.held)
      fabric->complete(qp.cq, id, true, WorkCompletion{.wrId = held, .status = WcStatus::kFlushed});
    qp.held.clear();
    fabric->toError(qp);
  }).detach();
}

inline std::uint64_t FakeFabric::idOf(const Qp& qp) const {
  for (const auto& [id, candidate] : qps_)
    if (&candidate == &qp) return id;
  return 0;
}

inline FakeFabric::Qp* FakeFabric::findRemote(const Qp& qp) {
  for (auto& [id, candidate] : qps_) {
    const FakeDevice& device = devices_[candidate.device];
    const bool addressed = qp.useGid ? gidOf(device.lid) == qp.remoteGid
                                     : device.lid == qp.remoteLid &&
                                           device.options.linkLayer == LinkLayer::kInfiniband;
    if (addressed && candidate.qpn == qp.remoteQpn) return &candidate;
  }
  return nullptr;
}

// True when [address, address + bytes) lies in a region of `pd` with key `key` (the rkey
// when `remote`) that grants `access`.
inline bool FakeFabric::inRegion(std::uint64_t pd, std::uint32_t key, std::uint64_t address,
                                 std::size_t bytes, bool remote, unsigned access) const {
  for (const auto& [id, mr] : mrs_) {
    if (mr.pd != pd || (remote ? mr.rkey : mr.lkey) != key) continue;
    const auto begin = reinterpret_cast<std::uint64_t>(mr.address);
    return address >= begin && address - begin <= mr.bytes &&
           bytes <= mr.bytes - (address - begin) && (mr.access & access) == access;
  }
  return false;
}

inline void FakeFabric::complete(std::uint64_t cqId, std::uint64_t qp, bool send,
                                 const WorkCompletion& wc) {
  auto it = cqs_.find(cqId);
  if (it == cqs_.end()) return;
  Cq& cq = it->second;
  if (cq.entries.size() >= cq.capacity) {
    violations_.push_back("completion queue overrun");
    return;
  }
  cq.entries.push_back(Entry{wc, qp, send});
  if (cq.armed && cq.channel != 0) {
    cq.armed = false;
    Channel& channel = channels_.at(cq.channel);
    channel.events.push_back(cqId);
    const std::uint64_t one = 1;
    [[maybe_unused]] const auto written = ::write(channel.fd, &one, sizeof one);
  }
}

inline void FakeFabric::toError(Qp& qp) {
  if (qp.state == QpState::kError) return;
  qp.state = QpState::kError;
  const std::uint64_t id = idOf(qp);
  for (const Receive& receive : qp.receives)
    complete(qp.cq, id, false, WorkCompletion{.wrId = receive.wrId, .status = WcStatus::kFlushed});
  qp.receives.clear();
}

}  // namespace gossamer::net::ibverbs::fake
