#include "bench/multistream_bench.h"

#include <chrono>
#include <future>
#include <memory>
#include <optional>
#include <vector>

#include <asio/co_spawn.hpp>
#include <asio/use_awaitable.hpp>
#include <asio/use_future.hpp>
#include <fmt/format.h>

#include "bench/io_thread.h"
#include "bench/link_pair.h"
#include "engine/base/enforce.h"
#include "net/shaped/shaped_transport.h"
#include "net/striped/striped_transport.h"
#include "net/tcp/tcp_transport.h"

namespace gossamer::bench {
namespace {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

constexpr std::size_t kFrameBytes = std::size_t{64} << 20;

// How the two ends are built: tcp, maybe shaped as tokyo (sender) and london (receiver) of
// geo-cap, maybe striped with `streams` (0: auto).
struct Stack {
  bool shaped = false;
  std::optional<std::size_t> streams;  // none: plain tcp
};

// The transports of one transfer: tcp, maybe shaped as tokyo (sender) and london (receiver) of
// geo-cap, maybe striped (streams; 0: auto). Tells `chosen` the sender's stream count.
LinkPair::MakeTransport makeStack(const Stack& stack, std::size_t* chosen) {
  return [stack, chosen](IoThread& thread, std::size_t index) {
    std::unique_ptr<net::Transport> transport = net::tcp::makeTransport(thread.io());
    net::shaped::NetworkProfile profile = net::shaped::NetworkProfile::geoCap();
    profile.assignPeer(0, "tokyo");
    profile.assignPeer(1, "london");
    const net::shaped::LinkProfile link = profile.between(0, 1);
    if (stack.shaped) {
      net::shaped::Options options{
          .profile = profile,
          .selfIndex = index,
          .indexOf = [](const net::Endpoint&) -> std::optional<std::size_t> { return 1; }};
      // A 10 Gbit/s link with 106 ms one-way holds 133 MB in flight.
      options.maxDelayedBytes = std::size_t{256} << 20;
      transport = net::shaped::makeTransport(std::move(transport), std::move(options));
    }
    if (!stack.streams) return transport;
    net::striped::Options options;
    options.streams = *stack.streams;
    const net::striped::PathHint hint =
        stack.shaped ? net::striped::PathHint{link.flowWindowBytes, link.bandwidthBitsPerSecond}
                     : net::striped::PathHint{};
    options.pathOf = [hint](const net::Endpoint&) { return hint; };
    options.onConnect = [chosen](const net::Endpoint&, std::size_t streams, auto) {
      if (chosen != nullptr) *chosen = streams;
    };
    return net::striped::makeTransport(std::move(transport), std::move(options));
  };
}

class Transfer {
 public:
  Transfer(const Stack& stack, std::size_t* chosen)
      : pair_(sender_, receiver_, makeStack(stack, chosen), net::Endpoint{"127.0.0.1", 0}) {}

  // Sends `bytes` in frames of kFrameBytes; returns the throughput: the bytes over the time from
  // the first send to the last frame's arrival, less the path's one-way `latency` (so a link
  // that moves C bit/s measures C; the socket buffers hold several frames, so the arrivals
  // themselves are not paced by the link).
  double run(std::size_t bytes, std::chrono::duration<double> latency) {
    const std::size_t frames = std::max<std::size_t>(2, bytes / kFrameBytes);
    std::vector<std::byte> source(kFrameBytes, std::byte{0x5a});
    std::vector<std::byte> landing(kFrameBytes);
    receiver_.call([&] {
      pair_.in().setPayloadTarget([&landing](std::span<const std::byte>, std::size_t,
                                             std::size_t size) -> std::span<std::byte> {
        return size == landing.size() ? std::span<std::byte>(landing) : std::span<std::byte>();
      });
    });
    auto received = asio::co_spawn(
        receiver_.io(),
        [&]() -> asio::awaitable<std::vector<Clock::time_point>> {
          std::vector<Clock::time_point> arrivals;
          for (std::size_t i = 0; i < frames; ++i) {
            net::InFrame frame;
            const std::error_code ec = co_await pair_.in().receive(frame);
            GOSSAMER_ENFORCE(!ec, "multistream bench: receive failed: {}", ec.message());
            arrivals.push_back(Clock::now());
          }
          co_return arrivals;
        },
        asio::use_future);
    const std::byte header[8] = {};
    const Clock::time_point start = Clock::now();
    auto sent = asio::co_spawn(
        sender_.io(),
        [&]() -> asio::awaitable<void> {
          const std::vector<std::span<const std::byte>> payloads(1, std::span(source));
          for (std::size_t i = 0; i < frames; ++i) {
            const std::error_code ec =
                co_await pair_.out().send(net::OutFrame(std::span(header), payloads));
            GOSSAMER_ENFORCE(!ec, "multistream bench: send failed: {}", ec.message());
          }
        },
        asio::use_future);
    LinkPair::waitFor(sent, "sender");
    const std::vector<Clock::time_point> arrivals = LinkPair::waitFor(received, "receiver");
    const std::chrono::duration<double> span = arrivals.back() - start - latency;
    return static_cast<double>(frames * kFrameBytes) * 8.0 / span.count();
  }

 private:
  IoThread sender_;
  IoThread receiver_;
  LinkPair pair_;
};

}  // namespace

MultistreamFigures measureMultistream(std::size_t autoMiB, std::size_t singleMiB,
                                      std::size_t loopbackMiB) {
  MultistreamFigures figures;
  const net::shaped::NetworkProfile profile = net::shaped::NetworkProfile::geoCap();
  const net::shaped::LinkProfile& link =
      profile.link(*profile.siteIndex("tokyo"), *profile.siteIndex("london"));
  figures.capacityBitsPerSecond = link.bandwidthBitsPerSecond;
  figures.singleModelBitsPerSecond = link.flowBitsPerSecond();
  const std::size_t mib = std::size_t{1} << 20;
  fmt::print(stderr, "multistream: {} MiB Tokyo-London on geo-cap over auto streams\n", autoMiB);
  {
    Transfer transfer(Stack{.shaped = true, .streams = 0}, &figures.autoStreams);
    figures.multistreamBitsPerSecond = transfer.run(autoMiB * mib, link.latency);
  }
  figures.autoModelBitsPerSecond =
      std::min(static_cast<double>(figures.autoStreams) * figures.singleModelBitsPerSecond,
               figures.capacityBitsPerSecond);
  fmt::print(stderr, "multistream: {} MiB Tokyo-London on geo-cap over one stream\n", singleMiB);
  {
    Transfer transfer(Stack{.shaped = true, .streams = 1}, nullptr);
    figures.singleBitsPerSecond = transfer.run(singleMiB * mib, link.latency);
  }
  fmt::print(stderr, "multistream: {} MiB on loopback, plain tcp and 4 streams\n", loopbackMiB);
  {
    Transfer transfer(Stack{.shaped = false, .streams = std::nullopt}, nullptr);
    figures.loopbackOneBitsPerSecond = transfer.run(loopbackMiB * mib, std::chrono::seconds(0));
  }
  {
    Transfer transfer(Stack{.shaped = false, .streams = 4}, nullptr);
    figures.loopbackFourBitsPerSecond = transfer.run(loopbackMiB * mib, std::chrono::seconds(0));
  }
  return figures;
}

}  // namespace gossamer::bench
