#include "net/ibverbs/ibverbs_transport.h"

#include <algorithm>
#include <array>
#include <utility>
#include <vector>

#include <asio/dispatch.hpp>
#include <asio/steady_timer.hpp>
#include <asio/this_coro.hpp>

#include "engine/base/enforce.h"
#include "engine/base/log.h"
#include "net/errors.h"
#include "net/ibverbs/device.h"
#include "net/ibverbs/protocol.h"
#include "net/ibverbs/rdma_link.h"
#include "net/ibverbs/verbs.h"
#include "net/link_support.h"
#include "net/tcp/tcp_transport.h"

namespace gossamer::net::ibverbs {
namespace {

using detail::kUseTuple;
using RdmaLink = detail::SharedStateLink<LinkState>;

std::shared_ptr<Verbs> verbsOf(const Options& options) {
  return options.verbs ? options.verbs : makeLibibverbs();
}

// The options' own consistency; throws gossamer::Error.
void checkOptions(const Options& o) {
  GOSSAMER_ENFORCE(o.slotCount >= 1 && o.slotCount <= protocol::kMaxSlotCount,
                   "ibverbs: slotCount must be in [1, {}] (got {})", protocol::kMaxSlotCount,
                   o.slotCount);
  GOSSAMER_ENFORCE(o.slotCount + o.headerDepth <= protocol::kMaxDataWindow && o.headerDepth >= 1,
                   "ibverbs: slotCount + headerDepth must be in [2, {}] (got {} + {})",
                   protocol::kMaxDataWindow, o.slotCount, o.headerDepth);
  GOSSAMER_ENFORCE(o.slotBytes >= protocol::kMinSlotBytes && o.slotBytes <= protocol::kMaxSlotBytes,
                   "ibverbs: slotBytes must be in [{}, {}] (got {})", protocol::kMinSlotBytes,
                   protocol::kMaxSlotBytes, o.slotBytes);
  GOSSAMER_ENFORCE(
      o.receiveBytes >= protocol::kMinReceiveBytes && o.receiveBytes <= protocol::kMaxReceiveBytes,
      "ibverbs: receiveBytes must be in [{}, {}] (got {})", protocol::kMinReceiveBytes,
      protocol::kMaxReceiveBytes, o.receiveBytes);
  GOSSAMER_ENFORCE(
      !o.deviceMemory.isDevice || (o.deviceMemory.copyToHost && o.deviceMemory.copyToDevice),
      "ibverbs: DeviceMemory::isDevice needs copyToHost and copyToDevice too");
}

// The control connections carry a few small frames, before any authentication: bound them
// tightly (a remote cannot make us allocate more than this for them) and leave the socket
// buffers at the kernel's defaults.
tcp::Options controlOptions(const Limits& limits, std::shared_ptr<tcp::TlsContext> tls) {
  tcp::Options options;
  options.tls = std::move(tls);
  options.limits.maxHeaderBytes = 256;
  options.limits.maxPayloads = 0;
  options.limits.maxFrameBytes = 256;
  options.limits.maxBufferedBytes = 256;
  options.limits.maxInFlightSends = 2;
  options.limits.maxPendingHandshakes = limits.maxPendingHandshakes;  // the listen backlog
  options.sendBufferBytes = 0;
  options.receiveBufferBytes = 0;
  return options;
}

// Closes a link that is still bootstrapping when its time is up, which ends the pending
// receive on its control connection; fired() tells the two apart.
class BootstrapWatch {
 public:
  BootstrapWatch(const asio::any_io_executor& executor, std::chrono::milliseconds timeout,
                 std::shared_ptr<LinkState> state)
      : state_(std::make_shared<State>(std::move(state))), timer_(executor, timeout) {
    timer_.async_wait([state = state_](std::error_code ec) {
      if (ec || state->done) return;
      state->fired = true;
      state->link->closeWith(Errc::handshakeTimeout);
    });
  }
  ~BootstrapWatch() {
    state_->done = true;
    timer_.cancel();
  }
  bool fired() const { return state_->fired; }

 private:
  struct State {
    explicit State(std::shared_ptr<LinkState> link) : link(std::move(link)) {}
    std::shared_ptr<LinkState> link;
    bool done = false;
    bool fired = false;
  };
  std::shared_ptr<State> state_;
  asio::steady_timer timer_;
};

class TransportState final : public std::enable_shared_from_this<TransportState> {
 public:
  TransportState(asio::io_context& io, const Options& options)
      : io_(io),
        options_(options),
        device_(std::make_shared<Device>(verbsOf(options), options)),
        control_(tcp::makeTransport(io, controlOptions(options.limits, options.controlTls))) {}

  std::error_code listen(const Endpoint& local) { return control_->listen(local); }
  Endpoint localEndpoint() const { return control_->localEndpoint(); }

  static asio::awaitable<LinkResult> accept(std::shared_ptr<TransportState> self) {
    if (self->closed_) co_return LinkResult{asio::error::operation_aborted, nullptr};
    LinkResult control = co_await self->control_->accept();
    if (control.error) co_return control;
    co_return co_await self->bootstrap(std::move(control.link), self->options_.bootstrapTimeout);
  }

  static asio::awaitable<LinkResult> connect(std::shared_ptr<TransportState> self, Endpoint remote,
                                             std::chrono::milliseconds timeout) {
    if (self->closed_) co_return LinkResult{asio::error::operation_aborted, nullptr};
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    LinkResult control = co_await self->control_->connect(remote, timeout);
    if (control.error) co_return control;
    // The bootstrap gets what is left of the timeout (and at most bootstrapTimeout).
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    co_return co_await self->bootstrap(
        std::move(control.link),
        std::min(std::max(left, std::chrono::milliseconds(1)), self->options_.bootstrapTimeout));
  }

  void registerMemory(std::span<std::byte> memory) { device_->registerMemory(memory); }

  // Any thread; runs inline on the io thread.
  void close() {
    asio::dispatch(io_, [self = shared_from_this()] { self->closeNow(); });
  }

  std::string name() const { return "ibverbs"; }
  const Limits& limits() const { return options_.limits; }

 private:
  // Both ends run the same steps over the control connection (protocol.h); nothing is sent on
  // the QP before the remote said it is ready to receive.
  asio::awaitable<LinkResult> bootstrap(std::unique_ptr<Link> control,
                                        std::chrono::milliseconds timeout) {
    const asio::any_io_executor executor = co_await asio::this_coro::executor;
    std::shared_ptr<LinkState> state;
    const std::error_code created =
        LinkState::create(device_, executor, std::move(control), &state);
    if (created) {
      log::get("net")->warn("ibverbs: cannot set up a link to {}: {}", state->remoteAddress(),
                            created.message());
      state->closeWith(created);
      co_return LinkResult{created, nullptr};
    }
    std::error_code ec;
    {
      BootstrapWatch watch(executor, timeout, state);
      ec = co_await exchange(*state);
      if (watch.fired()) ec = Errc::handshakeTimeout;
    }
    if (!ec && closed_) ec = asio::error::operation_aborted;
    if (!ec) ec = state->start();
    if (ec) {
      log::get("net")->debug("ibverbs: bootstrap with {} failed: {}", state->remoteAddress(),
                             ec.message());
      state->closeWith(ec);
      co_return LinkResult{ec, nullptr};
    }
    std::erase_if(links_, [](const std::weak_ptr<LinkState>& weak) { return weak.expired(); });
    links_.push_back(state);
    co_return LinkResult{{}, std::make_unique<RdmaLink>(std::move(state))};
  }

  static asio::awaitable<std::error_code> exchange(LinkState& state) {
    Link& control = state.control();
    const auto info = protocol::encodeBootstrap(state.localInfo());
    if (auto ec = co_await control.send(OutFrame(info))) co_return ec;
    InFrame frame;
    if (auto ec = co_await control.receive(frame)) co_return ec;
    protocol::BootstrapInfo remote;
    if (!frame.payloads.empty()) co_return Errc::malformedFrame;
    if (auto ec = protocol::decodeBootstrap(frame.header, &remote)) co_return ec;
    if (auto ec = state.connect(remote)) co_return ec;  // RTR: we can receive
    std::array<std::byte, 4> ready;
    detail::storeLe(ready.data(), protocol::kReadyMagic, 4);
    if (auto ec = co_await control.send(OutFrame(ready))) co_return ec;
    if (auto ec = co_await control.receive(frame)) co_return ec;
    if (frame.header.size() != ready.size() || !frame.payloads.empty() ||
        detail::loadLe(frame.header.data(), 4) != protocol::kReadyMagic)
      co_return Errc::malformedFrame;
    co_return std::error_code{};
  }

  void closeNow() {
    if (closed_) return;
    closed_ = true;
    control_->close();  // pending accepts and connects fail with operation_aborted
    for (const auto& weak : links_) {
      if (auto link = weak.lock()) link->closeWith(asio::error::operation_aborted);
    }
    links_.clear();
  }

  asio::io_context& io_;
  const Options options_;
  const std::shared_ptr<Device> device_;
  const std::unique_ptr<Transport> control_;
  bool closed_ = false;
  std::vector<std::weak_ptr<LinkState>> links_;
};

}  // namespace

bool isViable(std::string* reason, const Options& options) {
  std::shared_ptr<Verbs> verbs = verbsOf(options);
  DeviceChoice choice;
  ContextHandle context;
  std::string why;
  if (!chooseDevice(*verbs, options, &choice, &context, &why)) {
    if (reason != nullptr) *reason = why;
    return false;
  }
  verbs->close(context);
  if (reason != nullptr) reason->clear();
  return true;
}

std::unique_ptr<Transport> makeTransport(asio::io_context& io, const Options& options) {
  checkOptions(options);
  return std::make_unique<detail::SharedStateTransport<TransportState>>(
      std::make_shared<TransportState>(io, options));
}

}  // namespace gossamer::net::ibverbs
