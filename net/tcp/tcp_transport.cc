#include "net/tcp/tcp_transport.h"

#include <algorithm>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <asio/dispatch.hpp>
#include <asio/experimental/awaitable_operators.hpp>
#include <asio/ip/tcp.hpp>
#include <asio/steady_timer.hpp>

#include "net/errors.h"
#include "net/link_support.h"
#include "net/tcp/tcp_link.h"

namespace gossamer::net::tcp {
namespace {

using detail::Clock;
using detail::Role;
using detail::Tcp;
using detail::endpointText;
using detail::PlainLinkState;
using detail::retryable;
using detail::TlsLinkState;
using net::detail::kUseTuple;
// SO_REUSEPORT (Asio names only SO_REUSEADDR).
using ReusePort = asio::detail::socket_option::boolean<SOL_SOCKET, SO_REUSEPORT>;


// The listening socket and the links made, shared with the coroutines of accept and connect.
// Io thread only.
class TransportState final : public std::enable_shared_from_this<TransportState> {
 public:
  TransportState(asio::io_context& io, const Options& options)
      : io_(io), options_(options), acceptor_(io) {}

  std::error_code listen(const Endpoint& local) {
    if (closed_) return asio::error::operation_aborted;
    if (acceptor_.is_open()) return asio::error::already_open;
    std::error_code ec;
    Tcp::endpoint endpoint;
    const asio::ip::address address = asio::ip::make_address(local.host, ec);
    if (!ec) {
      endpoint = Tcp::endpoint(address, local.port);
    } else {
      Tcp::resolver resolver(io_);
      const auto results = resolver.resolve(local.host, std::to_string(local.port), ec);
      if (ec) return ec;
      if (results.empty()) return asio::error::host_not_found;
      endpoint = results.begin()->endpoint();
    }
    // punch() connects from the listen port, which Linux allows beside a listener only when both
    // set SO_REUSEPORT; but SO_REUSEPORT would also let a second listener share the port
    // silently. So a probe without it claims the port first (and picks it, for port 0): a port
    // that another process listens on still fails with address_in_use.
    Tcp::acceptor probe(io_);
    probe.open(endpoint.protocol(), ec);
    if (!ec) probe.set_option(Tcp::acceptor::reuse_address(true), ec);
    if (!ec) probe.bind(endpoint, ec);
    if (!ec) endpoint = probe.local_endpoint(ec);
    if (!ec) acceptor_.open(endpoint.protocol(), ec);
    if (!ec) acceptor_.set_option(Tcp::acceptor::reuse_address(true), ec);
    if (!ec) acceptor_.set_option(ReusePort(true), ec);
    if (!ec && options_.receiveBufferBytes > 0)
      acceptor_.set_option(asio::socket_base::receive_buffer_size(options_.receiveBufferBytes), ec);
    if (!ec) acceptor_.bind(endpoint, ec);
    std::error_code ignored;
    probe.close(ignored);
    // The backlog bounds connections the kernel completed that accept() has not taken yet.
    if (!ec)
      acceptor_.listen(
          static_cast<int>(std::clamp<std::size_t>(options_.limits.maxPendingHandshakes, 1, 4096)),
          ec);
    if (ec) acceptor_.close(ignored);
    return ec;
  }

  Endpoint localEndpoint() const {
    std::error_code ec;
    const Tcp::endpoint endpoint = acceptor_.local_endpoint(ec);
    if (ec) return Endpoint{};
    return Endpoint{endpoint.address().to_string(), endpoint.port()};
  }

  static asio::awaitable<LinkResult> accept(std::shared_ptr<TransportState> self) {
    for (;;) {
      if (self->closed_) co_return LinkResult{asio::error::operation_aborted, nullptr};
      auto [ec, socket] = co_await self->acceptor_.async_accept(kUseTuple);
      if (!ec && self->closed_) ec = asio::error::operation_aborted;
      if (!ec) ec = self->configure(socket);
      if (ec) co_return LinkResult{ec, nullptr};
      if (!self->handToPunch(socket)) co_return LinkResult{{}, self->adopt(std::move(socket), Role::server)};
    }
  }

  static asio::awaitable<LinkResult> connect(std::shared_ptr<TransportState> self, Endpoint remote,
                                             std::chrono::milliseconds timeout) {
    using namespace asio::experimental::awaitable_operators;
    const Clock::time_point deadline = Clock::now() + timeout;
    std::vector<Tcp::endpoint> targets;
    std::error_code ec;
    const asio::ip::address address = asio::ip::make_address(remote.host, ec);
    if (!ec) {
      targets.emplace_back(address, remote.port);
    } else {
      // Name resolution is not bounded by the timeout (getaddrinfo cannot be interrupted).
      Tcp::resolver resolver(self->io_);
      auto [resolveError, results] =
          co_await resolver.async_resolve(remote.host, std::to_string(remote.port), kUseTuple);
      if (resolveError) co_return LinkResult{resolveError, nullptr};
      for (const auto& result : results) targets.push_back(result.endpoint());
      if (targets.empty()) co_return LinkResult{asio::error::host_not_found, nullptr};
    }

    asio::steady_timer timer(self->io_);
    std::chrono::milliseconds backoff =
        std::max(self->options_.initialBackoff, std::chrono::milliseconds(1));
    for (;;) {
      for (const Tcp::endpoint& target : targets) {
        if (self->closed_) co_return LinkResult{asio::error::operation_aborted, nullptr};
        if (Clock::now() >= deadline) co_return LinkResult{asio::error::timed_out, nullptr};
        Tcp::socket socket(self->io_);
        socket.open(target.protocol(), ec);
        if (!ec) ec = self->configure(socket);  // before connecting: window scale, SYN options
        if (ec) co_return LinkResult{ec, nullptr};
        // A connect that hangs (SYNs to a dead host) loses the race against the deadline.
        timer.expires_at(deadline);
        auto result =
            co_await (socket.async_connect(target, kUseTuple) || timer.async_wait(kUseTuple));
        if (result.index() == 1) co_return LinkResult{asio::error::timed_out, nullptr};
        ec = std::get<0>(std::get<0>(result));
        if (!ec && self->closed_) ec = asio::error::operation_aborted;
        if (!ec) co_return LinkResult{{}, self->adopt(std::move(socket), Role::client)};
        if (!retryable(ec)) co_return LinkResult{ec, nullptr};
      }
      const Clock::time_point now = Clock::now();
      if (now >= deadline) co_return LinkResult{asio::error::timed_out, nullptr};
      timer.expires_after(std::min<Clock::duration>(backoff, deadline - now));
      co_await timer.async_wait(kUseTuple);
      backoff = std::min(backoff * 2, std::max(self->options_.maxBackoff, backoff));
    }
  }

  static asio::awaitable<LinkResult> punch(std::shared_ptr<TransportState> self, Endpoint remote,
                                           std::chrono::milliseconds timeout, bool asServer) {
    using namespace asio::experimental::awaitable_operators;
    const Clock::time_point deadline = Clock::now() + timeout;
    std::error_code ec;
    const asio::ip::address address = asio::ip::make_address(remote.host, ec);
    if (ec) co_return LinkResult{ec, nullptr};
    const Tcp::endpoint local = self->acceptor_.local_endpoint(ec);
    if (ec) co_return LinkResult{asio::error::not_connected, nullptr};  // not listening
    const auto wait = std::make_shared<PunchWait>(Tcp::endpoint(address, remote.port), self->io_);
    self->punches_.push_back(wait);
    const Role role = asServer ? Role::server : Role::client;
    LinkResult result = co_await punchLoop(self, *wait, local, deadline, role);
    std::erase(self->punches_, wait);
    co_return result;
  }

  // Any thread; runs inline on the io thread.
  void close() {
    asio::dispatch(io_, [self = shared_from_this()] { self->closeNow(); });
  }

  std::string name() const { return options_.tls ? "tcp+tls" : "tcp"; }
  void registerMemory(std::span<std::byte> /*memory*/) {}  // nothing to register for sockets
  const Limits& limits() const { return options_.limits; }

 private:
  void closeNow() {
    if (closed_) return;
    closed_ = true;
    std::error_code ignored;
    acceptor_.close(ignored);  // pending accepts fail with operation_aborted
    for (const auto& weak : plainLinks_) {
      if (auto link = weak.lock()) link->closeWith(asio::error::operation_aborted);
    }
    for (const auto& weak : tlsLinks_) {
      if (auto link = weak.lock()) link->closeWith(asio::error::operation_aborted);
    }
    plainLinks_.clear();
    tlsLinks_.clear();
  }

  // A connection toward a punch's remote that accept() took (the remote's connect reached the
  // listener, not this side's connecting socket), handed to the punch() awaiting it.
  struct PunchWait {
    PunchWait(Tcp::endpoint from, asio::io_context& io)
        : remote(from), arrived(io, Clock::time_point::max()) {}
    const Tcp::endpoint remote;
    std::optional<Tcp::socket> accepted;
    asio::steady_timer arrived;  // cancelled when `accepted` is set
  };

  // Whether `socket` came from the remote of a running punch(), which then takes it.
  bool handToPunch(Tcp::socket& socket) {
    std::error_code ec;
    const Tcp::endpoint from = socket.remote_endpoint(ec);
    if (ec) return false;
    for (const auto& wait : punches_) {
      if (wait->remote != from || wait->accepted) continue;
      wait->accepted.emplace(std::move(socket));
      wait->arrived.cancel();
      return true;
    }
    return false;
  }

  // Connects from `local` (the listen endpoint) to wait.remote until one connect succeeds, the
  // remote's connect is accepted instead, or `deadline`.
  static asio::awaitable<LinkResult> punchLoop(std::shared_ptr<TransportState> self,
                                               PunchWait& wait, Tcp::endpoint local,
                                               Clock::time_point deadline, Role role) {
    using namespace asio::experimental::awaitable_operators;
    asio::steady_timer timer(self->io_);
    std::chrono::milliseconds backoff =
        std::max(self->options_.initialBackoff, std::chrono::milliseconds(1));
    for (;;) {
      if (self->closed_) co_return LinkResult{asio::error::operation_aborted, nullptr};
      if (wait.accepted) co_return LinkResult{{}, self->adopt(std::move(*wait.accepted), role)};
      if (Clock::now() >= deadline) co_return LinkResult{asio::error::timed_out, nullptr};
      Tcp::socket socket(self->io_);
      std::error_code ec;
      socket.open(wait.remote.protocol(), ec);
      if (!ec) socket.set_option(Tcp::socket::reuse_address(true), ec);
      if (!ec) socket.set_option(ReusePort(true), ec);
      if (!ec) ec = self->configure(socket);
      if (!ec) socket.bind(local, ec);
      if (ec) co_return LinkResult{ec, nullptr};
      timer.expires_at(deadline);
      auto result = co_await (socket.async_connect(wait.remote, kUseTuple) ||
                              wait.arrived.async_wait(kUseTuple) || timer.async_wait(kUseTuple));
      if (result.index() == 2) co_return LinkResult{asio::error::timed_out, nullptr};
      if (result.index() == 1) continue;  // accepted
      ec = std::get<0>(std::get<0>(result));
      if (!ec && !self->closed_) co_return LinkResult{{}, self->adopt(std::move(socket), role)};
      // Refused or reset (the remote's NAT or host lets nothing in yet), or the address pair is
      // taken (the remote's connect reached the listener): again, after a pause.
      // (Asio's system category maps to no std::errc: EADDRNOTAVAIL is compared by value.)
      const bool pairTaken = ec == asio::error::address_in_use ||
                             ec == std::error_code(EADDRNOTAVAIL, asio::error::get_system_category());
      if (!retryable(ec) && !pairTaken)
        co_return LinkResult{ec, nullptr};
      socket.close(ec);
      timer.expires_after(std::min<Clock::duration>(backoff, deadline - Clock::now()));
      co_await (timer.async_wait(kUseTuple) || wait.arrived.async_wait(kUseTuple));
      backoff = std::min(backoff * 2, std::max(self->options_.maxBackoff, backoff));
    }
  }

  std::error_code configure(Tcp::socket& socket) const {
    std::error_code ec;
    socket.set_option(Tcp::no_delay(true), ec);
    if (!ec && options_.keepAlive) socket.set_option(asio::socket_base::keep_alive(true), ec);
    if (!ec && options_.sendBufferBytes > 0)
      socket.set_option(asio::socket_base::send_buffer_size(options_.sendBufferBytes), ec);
    if (!ec && options_.receiveBufferBytes > 0)
      socket.set_option(asio::socket_base::receive_buffer_size(options_.receiveBufferBytes), ec);
    return ec;
  }

  std::unique_ptr<Link> adopt(Tcp::socket socket, Role role) {
    std::error_code ec;
    const Tcp::endpoint endpoint = socket.remote_endpoint(ec);
    std::string remote = ec ? std::string("unknown") : endpointText(endpoint);
    if (options_.tls) {
      auto state = std::make_shared<TlsLinkState>(std::move(socket), options_.limits,
                                                  std::move(remote), role, options_.tls);
      TlsLinkState::startHandshake(state);
      return track(tlsLinks_, std::move(state));
    }
    return track(plainLinks_, std::make_shared<PlainLinkState>(
                                  std::move(socket), options_.limits, std::move(remote), role,
                                  nullptr));
  }

  // Remembers a new link for closeNow() and wraps it as a Link.
  template <typename State>
  static std::unique_ptr<Link> track(std::vector<std::weak_ptr<State>>& links,
                                     std::shared_ptr<State> state) {
    std::erase_if(links, [](const std::weak_ptr<State>& weak) { return weak.expired(); });
    links.push_back(state);
    return std::make_unique<net::detail::SharedStateLink<State>>(std::move(state));
  }

  asio::io_context& io_;
  const Options options_;
  Tcp::acceptor acceptor_;
  bool closed_ = false;
  std::vector<std::weak_ptr<PlainLinkState>> plainLinks_;
  std::vector<std::weak_ptr<TlsLinkState>> tlsLinks_;
  std::vector<std::shared_ptr<PunchWait>> punches_;  // punch() calls running
};

}  // namespace

std::unique_ptr<Transport> makeTransport(asio::io_context& io, const Options& options) {
  return std::make_unique<net::detail::SharedStateTransport<TransportState>>(
      std::make_shared<TransportState>(io, options));
}

}  // namespace gossamer::net::tcp
