#include "net/striped/striped_transport.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <deque>
#include <filesystem>
#include <limits>
#include <fstream>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/steady_timer.hpp>
#include <asio/this_coro.hpp>

#include "engine/base/enforce.h"
#include "net/errors.h"
#include "net/link_support.h"
#include "net/striped/striped_link.h"

namespace gossamer::net::striped {
namespace {

using asio::awaitable;
using Clock = std::chrono::steady_clock;
using detail::loadLe;
using detail::storeLe;

constexpr std::array<std::byte, 4> kMagic = {std::byte{'G'}, std::byte{'S'}, std::byte{'T'},
                                             std::byte{'R'}};
constexpr std::byte kVersion{1};
constexpr std::size_t kSetupBytes = 16;
enum class Kind : std::uint8_t { hello = 1, ack = 2, plan = 3 };

struct Setup {
  Kind kind = Kind::hello;
  std::size_t index = 0;    // hello
  std::size_t streams = 0;  // hello (0: auto, ack and plan follow), plan
  std::uint64_t group = 0;
};

std::array<std::byte, kSetupBytes> encode(const Setup& setup) {
  std::array<std::byte, kSetupBytes> bytes{};
  std::copy(kMagic.begin(), kMagic.end(), bytes.begin());
  bytes[4] = kVersion;
  bytes[5] = static_cast<std::byte>(setup.kind);
  bytes[6] = static_cast<std::byte>(setup.index);
  bytes[7] = static_cast<std::byte>(setup.streams);
  storeLe(&bytes[8], setup.group, 8);
  return bytes;
}

std::optional<Setup> decode(const InFrame& frame, Kind expected) {
  const auto& h = frame.header;
  if (h.size() != kSetupBytes || !frame.payloads.empty() ||
      !std::equal(kMagic.begin(), kMagic.end(), h.begin()) || h[4] != kVersion ||
      h[5] != static_cast<std::byte>(expected)) {
    return std::nullopt;
  }
  return Setup{expected, static_cast<std::size_t>(h[6]), static_cast<std::size_t>(h[7]),
               loadLe(&h[8], 8)};
}

awaitable<std::error_code> sendSetup(Link& link, const Setup& setup) {
  const std::array<std::byte, kSetupBytes> bytes = encode(setup);
  co_return co_await link.send(OutFrame(bytes));
}

// Receives one set-up message of `kind`; a remote silent for `timeout` gets its link closed
// (which completes the receive) and Errc::handshakeTimeout.
awaitable<std::pair<std::error_code, Setup>> receiveSetup(Link& link, Kind kind,
                                                          Clock::duration timeout) {
  struct Watch {
    bool done = false;
    bool fired = false;
  };
  auto watch = std::make_shared<Watch>();
  asio::steady_timer timer(co_await asio::this_coro::executor, timeout);
  timer.async_wait([watch, &link](std::error_code error) {
    if (!error && !watch->done) {
      watch->fired = true;
      link.close();
    }
  });
  InFrame frame;
  std::error_code ec = co_await link.receive(frame);
  watch->done = true;
  timer.cancel();
  if (watch->fired) ec = Errc::handshakeTimeout;
  std::optional<Setup> setup;
  if (!ec && !(setup = decode(frame, kind))) ec = Errc::malformedFrame;
  co_return std::pair{ec, setup.value_or(Setup{})};
}

// A set-up that failed on its own terms (a bad or missing set-up message) fails connect or
// accept. A stream that failed underneath it (TLS on one side only, a reset) is handed up as a
// link of that one stream instead: its next operation returns the same error, so the layer
// above explains it as it would for a single connection.
bool setupRefused(std::error_code ec) {
  return ec == Errc::malformedFrame || ec == Errc::handshakeTimeout;
}

Limits stripedLimits(const Limits& inner) {
  Limits limits = inner;
  const std::size_t overhead = kLeadFixedBytes + 8 * limits.maxPayloads;
  limits.maxHeaderBytes -= std::min(limits.maxHeaderBytes, overhead);
  limits.maxFrameBytes -= std::min(limits.maxFrameBytes, overhead);
  return limits;
}

class TransportState final : public std::enable_shared_from_this<TransportState> {
 public:
  TransportState(std::unique_ptr<Transport> inner, Options options)
      : inner_(std::move(inner)),
        options_(std::move(options)),
        limits_(stripedLimits(inner_->limits())) {}

  std::string name() const { return "striped(" + inner_->name() + ")"; }
  std::error_code listen(const Endpoint& local) { return inner_->listen(local); }
  Endpoint localEndpoint() const { return inner_->localEndpoint(); }
  void registerMemory(std::span<std::byte> memory) { inner_->registerMemory(memory); }
  const Limits& limits() const { return limits_; }
  void close() {
    inner_->close();
    std::lock_guard lock(mutex_);
    pending_.clear();
  }

  static awaitable<LinkResult> accept(std::shared_ptr<TransportState> self);
  static awaitable<LinkResult> connect(std::shared_ptr<TransportState> self, Endpoint remote,
                                       std::chrono::milliseconds timeout);
  static awaitable<LinkResult> punch(std::shared_ptr<TransportState> self, Endpoint remote,
                                     std::chrono::milliseconds timeout, bool asServer);

 private:
  // The streams of a group whose stream 0 is in but not all the others yet.
  struct Pending {
    std::vector<std::unique_ptr<Link>> streams;
    std::size_t arrived = 0;
    Clock::time_point deadline;
  };

  LinkResult finish(std::vector<std::unique_ptr<Link>> streams) const {
    return finish(std::move(streams), executor_);
  }
  LinkResult finish(std::vector<std::unique_ptr<Link>> streams,
                    const asio::any_io_executor& executor) const {
    return LinkResult{{},
                      makeStripedLink(executor, std::move(streams), limits_, options_.stripeBytes)};
  }
  static std::vector<std::unique_ptr<Link>> single(std::unique_ptr<Link> link) {
    std::vector<std::unique_ptr<Link>> links;
    links.push_back(std::move(link));
    return links;
  }
  // Hands a set-up link (or a set-up failure) to accept().
  void deliver(LinkResult result) {
    ready_.push_back(std::move(result));
    if (wake_) wake_->cancel();
  }
  // Accepts inner links while the transport is open, setting each up on its own coroutine, so
  // that a connector's streams (whose TLS and hello need this end) never wait for another's.
  static awaitable<void> acceptLoop(std::shared_ptr<TransportState> self);
  static awaitable<void> setUp(std::shared_ptr<TransportState> self, std::unique_ptr<Link> link);
  // Stream 0's side of an `auto` set-up, on the accepting end: ack, then the plan.
  static awaitable<std::pair<std::error_code, std::size_t>> answer(
      std::shared_ptr<TransportState> self, Link& link, std::uint64_t group);
  // Stream i > 0 of a connector: connect and say hello.
  static awaitable<void> openStream(std::shared_ptr<TransportState> self, Endpoint remote,
                                    std::chrono::milliseconds timeout, std::uint64_t group,
                                    std::size_t index, std::size_t streams,
                                    std::shared_ptr<std::vector<LinkResult>> out,
                                    std::shared_ptr<std::size_t> left,
                                    std::shared_ptr<asio::steady_timer> done);

  std::unique_ptr<Transport> inner_;
  const Options options_;
  const Limits limits_;
  asio::any_io_executor executor_;  // accept's, once it ran
  bool accepting_ = false;          // acceptLoop runs
  std::deque<LinkResult> ready_;    // for accept(), in order
  std::shared_ptr<asio::steady_timer> wake_;
  std::mutex mutex_;
  std::map<std::uint64_t, Pending> pending_;  // by group
};

awaitable<std::pair<std::error_code, std::size_t>> TransportState::answer(
    std::shared_ptr<TransportState> self, Link& link, std::uint64_t group) {
  if (auto ec = co_await sendSetup(link, Setup{Kind::ack, 0, 0, group})) co_return std::pair{ec, 0};
  const auto [ec, plan] = co_await receiveSetup(link, Kind::plan, self->options_.setupTimeout);
  if (ec) co_return std::pair{ec, std::size_t{0}};
  if (plan.group != group) co_return std::pair{make_error_code(Errc::malformedFrame), 0};
  co_return std::pair{std::error_code{}, plan.streams};
}

awaitable<LinkResult> TransportState::accept(std::shared_ptr<TransportState> self) {
  if (!self->accepting_) {
    self->accepting_ = true;
    self->executor_ = co_await asio::this_coro::executor;
    self->wake_ = std::make_shared<asio::steady_timer>(self->executor_, Clock::time_point::max());
    asio::co_spawn(self->executor_, acceptLoop(self), asio::detached);
  }
  while (self->ready_.empty()) {
    const std::shared_ptr<asio::steady_timer> wake = self->wake_;
    co_await wake->async_wait(detail::kUseTuple);
    wake->expires_at(Clock::time_point::max());
  }
  LinkResult result = std::move(self->ready_.front());
  self->ready_.pop_front();
  co_return result;
}

awaitable<void> TransportState::acceptLoop(std::shared_ptr<TransportState> self) {
  for (;;) {
    LinkResult result = co_await self->inner_->accept();
    if (result.error) {
      const bool closed = result.error == asio::error::operation_aborted;
      self->deliver(std::move(result));
      if (closed) co_return;
      continue;
    }
    asio::co_spawn(self->executor_, setUp(self, std::move(result.link)), asio::detached);
  }
}

awaitable<void> TransportState::setUp(std::shared_ptr<TransportState> self,
                                      std::unique_ptr<Link> link) {
  auto [ec, hello] = co_await receiveSetup(*link, Kind::hello, self->options_.setupTimeout);
  std::size_t streams = hello.streams;
  if (!ec && hello.index == 0 && streams == 0) {
    std::tie(ec, streams) = co_await answer(self, *link, hello.group);
  }
  if (!ec && (streams < 1 || streams > self->options_.maxStreams || hello.index >= streams))
    ec = Errc::malformedFrame;
  if (ec) {
    if (!setupRefused(ec)) co_return self->deliver(self->finish(single(std::move(link))));
    link->close();
    co_return self->deliver(LinkResult{ec, nullptr});
  }
  std::vector<std::unique_ptr<Link>> complete;
  {
    std::lock_guard lock(self->mutex_);
    const Clock::time_point now = Clock::now();
    std::erase_if(self->pending_, [&](const auto& entry) { return entry.second.deadline < now; });
    auto it = self->pending_.find(hello.group);
    if (hello.index == 0 && it == self->pending_.end() &&
        self->pending_.size() < self->limits_.maxPendingHandshakes) {
      Pending group{std::vector<std::unique_ptr<Link>>(streams), 0,
                    now + self->options_.setupTimeout};
      it = self->pending_.emplace(hello.group, std::move(group)).first;
    }
    // A stream of a group nobody opened, or twice the same stream: refused.
    if (it == self->pending_.end() || it->second.streams.size() != streams ||
        it->second.streams[hello.index] != nullptr) {
      ec = it == self->pending_.end() && hello.index == 0 ? Errc::tooManyHandshakes
                                                          : Errc::malformedFrame;
    } else {
      Pending& group = it->second;
      group.streams[hello.index] = std::move(link);
      if (++group.arrived == streams) {
        complete = std::move(group.streams);
        self->pending_.erase(it);
      }
    }
  }
  if (ec) {
    link->close();
    self->deliver(LinkResult{ec, nullptr});
  } else if (!complete.empty()) {
    self->deliver(self->finish(std::move(complete)));
  }
}

awaitable<void> TransportState::openStream(std::shared_ptr<TransportState> self, Endpoint remote,
                                           std::chrono::milliseconds timeout, std::uint64_t group,
                                           std::size_t index, std::size_t streams,
                                           std::shared_ptr<std::vector<LinkResult>> out,
                                           std::shared_ptr<std::size_t> left,
                                           std::shared_ptr<asio::steady_timer> done) {
  LinkResult result = co_await self->inner_->connect(remote, timeout);
  if (!result.error) {
    result.error = co_await sendSetup(*result.link, Setup{Kind::hello, index, streams, group});
  }
  (*out)[index] = std::move(result);
  if (--*left == 0) done->cancel();
}

awaitable<LinkResult> TransportState::connect(std::shared_ptr<TransportState> self, Endpoint remote,
                                              std::chrono::milliseconds timeout) {
  const asio::any_io_executor executor = co_await asio::this_coro::executor;
  const Clock::time_point deadline = Clock::now() + timeout;
  const auto remaining = [&] {
    return std::max(std::chrono::milliseconds(0),
                    std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()));
  };
  LinkResult first = co_await self->inner_->connect(remote, timeout);
  if (first.error) co_return first;
  const std::uint64_t group =
      (std::uint64_t{std::random_device{}()} << 32) ^ std::random_device{}();
  // A fixed count goes in the hello; `auto` asks for an ack, which measures the round trip.
  std::size_t streams = std::min(self->options_.streams, self->options_.maxStreams);
  const Clock::time_point sent = Clock::now();
  std::error_code ec = co_await sendSetup(*first.link, Setup{Kind::hello, 0, streams, group});
  std::chrono::duration<double> rtt{0};
  if (!ec && streams == 0) {
    Setup ack;
    std::tie(ec, ack) = co_await receiveSetup(*first.link, Kind::ack, self->options_.setupTimeout);
    if (!ec && ack.group != group) ec = Errc::malformedFrame;
    rtt = Clock::now() - sent;
    const PathHint path = self->options_.pathOf ? self->options_.pathOf(remote) : PathHint{};
    streams = autoStreams(rtt, path, self->options_.maxStreams);
    if (!ec) ec = co_await sendSetup(*first.link, Setup{Kind::plan, 0, streams, group});
  }
  if (ec) {
    if (!setupRefused(ec)) co_return self->finish(single(std::move(first.link)), executor);
    first.link->close();
    co_return LinkResult{ec, nullptr};
  }
  if (self->options_.onConnect) self->options_.onConnect(remote, streams, rtt);
  auto results = std::make_shared<std::vector<LinkResult>>(streams);
  (*results)[0] = std::move(first);
  if (streams > 1) {
    auto left = std::make_shared<std::size_t>(streams - 1);
    auto done = std::make_shared<asio::steady_timer>(executor, Clock::time_point::max());
    for (std::size_t i = 1; i < streams; ++i) {
      asio::co_spawn(executor,
                     openStream(self, remote, remaining(), group, i, streams, results, left, done),
                     asio::detached);
    }
    while (*left > 0) co_await done->async_wait(detail::kUseTuple);
  }
  std::vector<std::unique_ptr<Link>> links;
  for (LinkResult& result : *results) {
    if (result.error && !ec) ec = result.error;
    links.push_back(std::move(result.link));
  }
  if (ec) {
    for (const auto& link : links)
      if (link) link->close();
    co_return LinkResult{ec, nullptr};
  }
  co_return self->finish(std::move(links), executor);
}

// A punched link is one stream: the end that is not the server says hello with one stream.
awaitable<LinkResult> TransportState::punch(std::shared_ptr<TransportState> self, Endpoint remote,
                                            std::chrono::milliseconds timeout, bool asServer) {
  const asio::any_io_executor executor = co_await asio::this_coro::executor;
  LinkResult result = co_await self->inner_->punch(remote, timeout, asServer);
  if (result.error) co_return result;
  std::error_code ec;
  if (asServer) {
    Setup hello;
    std::tie(ec, hello) =
        co_await receiveSetup(*result.link, Kind::hello, self->options_.setupTimeout);
    if (!ec && (hello.index != 0 || hello.streams != 1)) ec = Errc::malformedFrame;
  } else {
    ec = co_await sendSetup(*result.link, Setup{Kind::hello, 0, 1, std::random_device{}()});
  }
  if (ec && setupRefused(ec)) {
    result.link->close();
    co_return LinkResult{ec, nullptr};
  }
  co_return self->finish(single(std::move(result.link)), executor);
}

}  // namespace

std::size_t autoStreams(std::chrono::duration<double> rtt, const PathHint& path,
                        std::size_t maxStreams) {
  if (path.flowWindowBytes == 0 || rtt.count() <= 0) return 1;
  const double capacity =
      path.capacityBitsPerSecond > 0 ? path.capacityBitsPerSecond : kAssumedCapacityBitsPerSecond;
  const double perFlow = static_cast<double>(path.flowWindowBytes) * 8.0 / rtt.count();
  const double wanted = std::ceil(capacity / perFlow - 1e-9);
  return static_cast<std::size_t>(
      std::clamp(wanted, 1.0, static_cast<double>(std::max<std::size_t>(1, maxStreams))));
}

double pathBitsPerSecond(const PathHint& path, std::chrono::duration<double> rtt,
                         std::size_t streams) {
  double bits = std::numeric_limits<double>::infinity();
  if (path.flowWindowBytes > 0 && rtt.count() > 0) {
    bits = static_cast<double>(streams) * static_cast<double>(path.flowWindowBytes) * 8.0 /
           rtt.count();
  }
  if (path.capacityBitsPerSecond > 0) bits = std::min(bits, path.capacityBitsPerSecond);
  return bits;
}

double localInterfaceBitsPerSecond() {
  double fastest = 0;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/sys/class/net", ec)) {
    if (entry.path().filename() == "lo") continue;
    std::ifstream in(entry.path() / "speed");
    long mbit = 0;
    if (in >> mbit && mbit > 0) fastest = std::max(fastest, static_cast<double>(mbit) * 1e6);
  }
  return fastest;
}

std::unique_ptr<Transport> makeTransport(std::unique_ptr<Transport> inner, Options options) {
  GOSSAMER_ENFORCE(inner != nullptr, "striped::makeTransport needs an inner transport");
  GOSSAMER_ENFORCE(options.maxStreams >= 1 && options.maxStreams <= 255,
                   "striped transport: at most 1 to 255 streams per link (got {})",
                   options.maxStreams);
  return std::make_unique<detail::SharedStateTransport<TransportState>>(
      std::make_shared<TransportState>(std::move(inner), std::move(options)));
}

}  // namespace gossamer::net::striped
