// `gossamer-bench transport`: a transport on loopback next to a baseline in the same run.
//  --transport tcp (default): the TCP transport next to plain blocking sockets.
//  - bulk: one-way transfer of a 64 MiB payload; GB/s of the transport (scatter-gather send, the
//    receiver's PayloadTarget puts the bytes in place) vs a blocking send()/recv() loop moving the
//    same bytes over a socket with the same options. Target >= 0.9.
//  - rtt: round trip of a small envelope (a 64-byte header, no payload) echoed by the remote;
//    p50/p99 of the transport vs a raw blocking-socket ping-pong of the same bytes on the wire.
//    Target p50 <= 1.5x.
//  - the same two over TLS 1.3 (AES-128-GCM, a PSK as derived from a cluster secret), next to the
//    plaintext transport of the same run: bulk target >= 0.7 of plaintext
//    (`tls_ratio_vs_plaintext`), round trip p50 <= 1.3x plaintext (`tls_rtt_p50_ratio`).
//  --transport ibverbs: the RDMA transport (two peers in this process, over the HCA's loopback;
//    the bulk buffers registered with registerMemory) next to the TCP transport measured the same
//    way in the same run; the ratios say how much RDMA gains. Needs an RDMA device: without one
//    (or in a build without the backend) it exits at once with the reason.
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <functional>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/executor_work_guard.hpp>
#include <asio/io_context.hpp>
#include <asio/use_future.hpp>
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "bench/bench_util.h"
#include "bench/benchmarks.h"
#include "engine/base/enforce.h"
#include "engine/base/json.h"
#include "engine/builtin.h"
#include "net/tcp/tcp_transport.h"
#include "net/transport.h"

namespace gossamer::bench {
namespace {

using Clock = std::chrono::steady_clock;
constexpr double kBulkTarget = 0.9;
constexpr double kRttTarget = 1.5;
constexpr double kTlsBulkTarget = 0.7;
constexpr double kTlsRttTarget = 1.3;
constexpr std::size_t kRttHeaderBytes = 64;
// The TCP transport's frame prefix for a frame with no payloads: magic, header length, count.
constexpr std::size_t kPrefixBytes = 12;
constexpr int kSocketBufferBytes = 4 << 20;

struct TransportBenchOptions {
  CommonOptions common;
  std::string transport = "tcp";
  engine::OptionValues rdma;  // the ibverbs transport's options (net/ibverbs Options::bind)
  std::size_t bulkBytes = 64u << 20;
  int bulkRounds = 20;
  int rttRounds = 5000;
};

double seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

double percentile(std::vector<double> values, double p) {
  std::sort(values.begin(), values.end());
  const auto index = static_cast<std::size_t>(p * static_cast<double>(values.size() - 1));
  return values[index];
}

// ---- the baseline: plain blocking sockets on 127.0.0.1 ----

void setSocketOptions(int fd) {
  const int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  ::setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &kSocketBufferBytes, sizeof kSocketBufferBytes);
  ::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &kSocketBufferBytes, sizeof kSocketBufferBytes);
}

// A connected pair of blocking loopback sockets: {client, server}.
std::pair<int, int> socketPair() {
  const int listener = ::socket(AF_INET, SOCK_STREAM, 0);
  GOSSAMER_ENFORCE(listener >= 0, "socket: {}", std::strerror(errno));
  setSocketOptions(listener);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof address;
  GOSSAMER_ENFORCE(::bind(listener, reinterpret_cast<sockaddr*>(&address), length) == 0 &&
                       ::listen(listener, 1) == 0 &&
                       ::getsockname(listener, reinterpret_cast<sockaddr*>(&address), &length) == 0,
                   "listen on loopback: {}", std::strerror(errno));
  const int client = ::socket(AF_INET, SOCK_STREAM, 0);
  setSocketOptions(client);
  GOSSAMER_ENFORCE(::connect(client, reinterpret_cast<sockaddr*>(&address), length) == 0,
                   "connect on loopback: {}", std::strerror(errno));
  const int server = ::accept(listener, nullptr, nullptr);
  GOSSAMER_ENFORCE(server >= 0, "accept: {}", std::strerror(errno));
  setSocketOptions(server);
  ::close(listener);
  return {client, server};
}

void sendAll(int fd, const std::byte* data, std::size_t n) {
  while (n > 0) {
    const ssize_t sent = ::send(fd, data, n, MSG_NOSIGNAL);
    GOSSAMER_ENFORCE(sent > 0, "send: {}", std::strerror(errno));
    data += sent;
    n -= static_cast<std::size_t>(sent);
  }
}

void receiveAll(int fd, std::byte* data, std::size_t n) {
  while (n > 0) {
    const ssize_t got = ::recv(fd, data, n, 0);
    GOSSAMER_ENFORCE(got > 0, "recv: {}", got == 0 ? "peer closed" : std::strerror(errno));
    data += got;
    n -= static_cast<std::size_t>(got);
  }
}

// Seconds of each one-way transfer of `bytes`, timed until the receiver has every byte.
std::vector<double> rawBulk(std::size_t bytes, int rounds) {
  auto [client, server] = socketPair();
  std::vector<std::byte> source(bytes, std::byte{1}), sink(bytes);
  std::vector<double> times;
  for (int r = 0; r < rounds; ++r) {
    const auto start = Clock::now();
    std::thread sender([&, fd = client] { sendAll(fd, source.data(), bytes); });
    receiveAll(server, sink.data(), bytes);
    times.push_back(seconds(Clock::now() - start));
    sender.join();
  }
  ::close(client);
  ::close(server);
  return times;
}

// Seconds of each round trip of `bytes` echoed by a thread.
std::vector<double> rawRtt(std::size_t bytes, int rounds) {
  auto [client, server] = socketPair();
  std::thread echo([&, fd = server] {
    std::vector<std::byte> buffer(bytes);
    for (int r = 0; r < rounds; ++r) {
      receiveAll(fd, buffer.data(), bytes);
      sendAll(fd, buffer.data(), bytes);
    }
  });
  std::vector<std::byte> message(bytes, std::byte{7});
  std::vector<double> times;
  for (int r = 0; r < rounds; ++r) {
    const auto start = Clock::now();
    sendAll(client, message.data(), bytes);
    receiveAll(client, message.data(), bytes);
    times.push_back(seconds(Clock::now() - start));
  }
  echo.join();
  ::close(client);
  ::close(server);
  return times;
}

// ---- the transport: two peers, each with its own io_context thread ----

using MakeTransport = std::function<std::unique_ptr<net::Transport>(asio::io_context&)>;

struct Peer {
  asio::io_context io;
  asio::executor_work_guard<asio::io_context::executor_type> work = asio::make_work_guard(io);
  std::unique_ptr<net::Transport> transport;
  std::thread thread;
  explicit Peer(const MakeTransport& make) : transport(make(io)) {
    thread = std::thread([this] { io.run(); });
  }
  ~Peer() {
    asio::post(io, [this] { transport->close(); });
    work.reset();
    thread.join();
  }
  template <typename Awaitable>
  auto run(Awaitable awaitable) {
    return asio::co_spawn(io, std::move(awaitable), asio::use_future).get();
  }
};

// A connected link pair {sender side, receiver side} between two peers.
std::pair<std::unique_ptr<net::Link>, std::unique_ptr<net::Link>> connectPeers(Peer& a, Peer& b) {
  GOSSAMER_ENFORCE(!b.transport->listen(net::Endpoint{"127.0.0.1", 0}), "transport listen failed");
  const net::Endpoint at = b.transport->localEndpoint();
  auto accepted = asio::co_spawn(b.io, b.transport->accept(), asio::use_future);
  net::LinkResult connected = a.run(a.transport->connect(at, std::chrono::seconds(5)));
  net::LinkResult inbound = accepted.get();
  GOSSAMER_ENFORCE(!connected.error && !inbound.error, "transport connect failed: {} / {}",
                   connected.error.message(), inbound.error.message());
  return {std::move(connected.link), std::move(inbound.link)};
}

std::vector<double> transportBulk(const MakeTransport& make, std::size_t bytes, int rounds) {
  Peer a(make), b(make);
  auto [sender, receiver] = connectPeers(a, b);
  std::vector<std::byte> source(bytes, std::byte{1}), sink(bytes);
  // Registered once, as a peer registers its flat buffers (a no-op for TCP).
  a.run([&]() -> asio::awaitable<void> {
    a.transport->registerMemory(source);
    co_return;
  }());
  b.run([&]() -> asio::awaitable<void> {
    b.transport->registerMemory(sink);
    co_return;
  }());
  receiver->setPayloadTarget(
      [&sink](std::span<const std::byte>, std::size_t, std::size_t size) {
        return size == sink.size() ? std::span<std::byte>(sink) : std::span<std::byte>();
      });
  const std::vector<std::byte> header(16, std::byte{0});
  std::vector<double> times;
  for (int r = 0; r < rounds; ++r) {
    const auto start = Clock::now();
    auto received = asio::co_spawn(
        b.io,
        [&]() -> asio::awaitable<std::error_code> {
          net::InFrame frame;
          co_return co_await receiver->receive(frame);
        },
        asio::use_future);
    const std::error_code sendError =
        a.run(sender->send(net::OutFrame{header, {std::span<const std::byte>(source)}}));
    const std::error_code receiveError = received.get();
    times.push_back(seconds(Clock::now() - start));
    GOSSAMER_ENFORCE(!sendError && !receiveError, "bulk transfer failed: {} / {}",
                     sendError.message(), receiveError.message());
  }
  return times;
}

std::vector<double> transportRtt(const MakeTransport& make, int rounds) {
  Peer a(make), b(make);
  auto [client, server] = connectPeers(a, b);
  asio::co_spawn(
      b.io,
      [&server, rounds]() -> asio::awaitable<void> {
        net::InFrame frame;
        for (int r = 0; r < rounds; ++r) {
          if (co_await server->receive(frame)) co_return;
          if (co_await server->send(net::OutFrame{frame.header, {}})) co_return;
        }
      },
      asio::detached);
  const std::vector<std::byte> header(kRttHeaderBytes, std::byte{7});
  return a.run([&]() -> asio::awaitable<std::vector<double>> {
    std::vector<double> times;
    net::InFrame reply;
    for (int r = 0; r < rounds; ++r) {
      const auto start = Clock::now();
      const std::error_code sendError = co_await client->send(net::OutFrame{header, {}});
      const std::error_code receiveError = sendError ? sendError : co_await client->receive(reply);
      GOSSAMER_ENFORCE(!receiveError, "round trip failed: {}", receiveError.message());
      times.push_back(seconds(Clock::now() - start));
    }
    co_return times;
  }());
}

MakeTransport tcpTransport() {
  return [](asio::io_context& io) { return net::tcp::makeTransport(io); };
}

// The tcp transport with TLS 1.3, authenticated by a key derived from a fixed secret.
MakeTransport tlsTransport() {
  net::tcp::TlsConfig config;
  for (const char c : std::string("the benchmark's cluster secret"))
    config.secret.push_back(static_cast<std::byte>(c));
  return [tls = net::tcp::makeTlsContext(config)](asio::io_context& io) {
    net::tcp::Options options;
    options.tls = tls;
    return net::tcp::makeTransport(io, options);
  };
}

void runRdma(const TransportBenchOptions& o);

void runTransport(const TransportBenchOptions& o) {
  if (o.transport == "ibverbs") return runRdma(o);
  const double gib = static_cast<double>(o.bulkBytes) / 1e9;
  fmt::print("transport tcp on 127.0.0.1, socket buffers {} MiB, TCP_NODELAY on both sides\n",
             kSocketBufferBytes >> 20);
  fmt::print("baseline: blocking send()/recv() loops on a plain socket pair with the same options, "
             "in the same run\n\n");
  // Interleave the two so that machine noise hits both alike.
  std::vector<double> rawBulkTimes, ourBulkTimes, rawRttTimes, ourRttTimes;
  std::vector<double> tlsBulkTimes, tlsRttTimes;
  const MakeTransport tls = tlsTransport();
  const auto append = [](std::vector<double>& to, const std::vector<double>& from) {
    to.insert(to.end(), from.begin(), from.end());
  };
  for (int pass = 0; pass < 2; ++pass) {
    append(rawBulkTimes, rawBulk(o.bulkBytes, o.bulkRounds / 2));
    append(ourBulkTimes, transportBulk(tcpTransport(), o.bulkBytes, o.bulkRounds / 2));
    append(tlsBulkTimes, transportBulk(tls, o.bulkBytes, o.bulkRounds / 2));
    append(rawRttTimes, rawRtt(kPrefixBytes + kRttHeaderBytes, o.rttRounds / 2));
    append(ourRttTimes, transportRtt(tcpTransport(), o.rttRounds / 2));
    append(tlsRttTimes, transportRtt(tls, o.rttRounds / 2));
  }
  const double tlsGbps = gib / percentile(tlsBulkTimes, 0.5);
  const double tlsP50 = percentile(tlsRttTimes, 0.5) * 1e6;
  const double tlsP99 = percentile(tlsRttTimes, 0.99) * 1e6;
  const double rawGbps = gib / percentile(rawBulkTimes, 0.5);
  const double ourGbps = gib / percentile(ourBulkTimes, 0.5);
  const double bulkRatio = ourGbps / rawGbps;
  const double rawP50 = percentile(rawRttTimes, 0.5) * 1e6, rawP99 = percentile(rawRttTimes, 0.99) * 1e6;
  const double ourP50 = percentile(ourRttTimes, 0.5) * 1e6, ourP99 = percentile(ourRttTimes, 0.99) * 1e6;
  const double rttRatio = ourP50 / rawP50;
  const double tlsBulkRatio = tlsGbps / ourGbps;
  const double tlsRttRatio = tlsP50 / ourP50;

  Table table({{"measurement", 0}, {"size", 0}, {"rounds", 0}, {"GB/s or p50 us", 2},
               {"p99 us", 1}, {"baseline", 2}, {"ratio", 3}});
  table.addRow({std::string("bulk one-way GB/s"), Count{o.bulkBytes},
                static_cast<std::int64_t>(ourBulkTimes.size()), ourGbps,
                percentile(ourBulkTimes, 0.99) * 1e6, rawGbps, bulkRatio});
  table.addRow({std::string("envelope round trip"), Count{kRttHeaderBytes},
                static_cast<std::int64_t>(ourRttTimes.size()), ourP50, ourP99, rawP50, rttRatio});
  table.addRow({std::string("TLS bulk one-way GB/s (vs plaintext)"), Count{o.bulkBytes},
                static_cast<std::int64_t>(tlsBulkTimes.size()), tlsGbps,
                percentile(tlsBulkTimes, 0.99) * 1e6, ourGbps, tlsBulkRatio});
  table.addRow({std::string("TLS round trip (vs plaintext)"), Count{kRttHeaderBytes},
                static_cast<std::int64_t>(tlsRttTimes.size()), tlsP50, tlsP99, ourP50,
                tlsRttRatio});
  fmt::print("{}\n", table.format());
  fmt::print("raw socket round trip: p50 {:.1f} us, p99 {:.1f} us\n", rawP50, rawP99);
  fmt::print("bulk at {:.3f} of the raw socket (target >= {}): {}\n", bulkRatio, kBulkTarget,
             bulkRatio >= kBulkTarget ? "met" : "MISSED");
  fmt::print("round trip p50 at {:.2f}x the raw socket (target <= {}x): {}\n", rttRatio, kRttTarget,
             rttRatio <= kRttTarget ? "met" : "MISSED");
  fmt::print("TLS 1.3 bulk at {:.3f} of plaintext (target >= {}): {}\n", tlsBulkRatio,
             kTlsBulkTarget, tlsBulkRatio >= kTlsBulkTarget ? "met" : "MISSED");
  fmt::print("TLS 1.3 round trip p50 at {:.2f}x plaintext (target <= {}x): {}\n", tlsRttRatio,
             kTlsRttTarget, tlsRttRatio <= kTlsRttTarget ? "met" : "MISSED");
  if (!o.common.csvPath.empty()) table.writeCsv(o.common.csvPath);
  if (o.common.json) {
    fmt::print("{}\n", JsonObject()
                           .add("benchmark", "transport")
                           .add("transport", "tcp")
                           .add("bulk_bytes", static_cast<std::uint64_t>(o.bulkBytes))
                           .add("bulk_gbps", ourGbps)
                           .add("raw_socket_gbps", rawGbps)
                           .add("ratio_vs_raw_socket", bulkRatio)
                           .add("rtt_p50_us", ourP50)
                           .add("rtt_p99_us", ourP99)
                           .add("raw_rtt_p50_us", rawP50)
                           .add("raw_rtt_p99_us", rawP99)
                           .add("rtt_p50_ratio", rttRatio)
                           .add("tls_bulk_gbps", tlsGbps)
                           .add("tls_rtt_p50_us", tlsP50)
                           .add("tls_rtt_p99_us", tlsP99)
                           .add("tls_ratio_vs_plaintext", tlsBulkRatio)
                           .add("tls_rtt_p50_ratio", tlsRttRatio)
                           .str());
  }
}

// The RDMA transport next to the TCP transport, both measured by the same code in this run.
void runRdma(const TransportBenchOptions& o) {
  const engine::Registry registry = engine::makeBuiltinRegistry();
  const engine::TransportSpec& spec = registry.transports.get("ibverbs");
  std::string reason;
  if (!spec.viable(o.rdma, &reason))
    GOSSAMER_THROW("--transport ibverbs: {}", reason);  // e.g. "no RDMA device found (...)"
  const MakeTransport rdma = [maker = spec.prepare(o.rdma)](asio::io_context& io) {
    return maker(engine::TransportEnvironment{io, {}});
  };
  const double gib = static_cast<double>(o.bulkBytes) / 1e9;
  fmt::print("transport ibverbs ({}) on this host's RDMA loopback, bulk buffers registered\n",
             o.rdma.empty() ? "first active device" : engine::formatOptionList(o.rdma));
  fmt::print("baseline: the tcp transport on 127.0.0.1, same code, same run\n\n");
  std::vector<double> rdmaBulkTimes, tcpBulkTimes, rdmaRttTimes, tcpRttTimes;
  for (int pass = 0; pass < 2; ++pass) {
    for (double t : transportBulk(rdma, o.bulkBytes, o.bulkRounds / 2)) rdmaBulkTimes.push_back(t);
    for (double t : transportBulk(tcpTransport(), o.bulkBytes, o.bulkRounds / 2))
      tcpBulkTimes.push_back(t);
    for (double t : transportRtt(rdma, o.rttRounds / 2)) rdmaRttTimes.push_back(t);
    for (double t : transportRtt(tcpTransport(), o.rttRounds / 2)) tcpRttTimes.push_back(t);
  }
  const double rdmaGbps = gib / percentile(rdmaBulkTimes, 0.5);
  const double tcpGbps = gib / percentile(tcpBulkTimes, 0.5);
  const double rdmaP50 = percentile(rdmaRttTimes, 0.5) * 1e6;
  const double rdmaP99 = percentile(rdmaRttTimes, 0.99) * 1e6;
  const double tcpP50 = percentile(tcpRttTimes, 0.5) * 1e6;
  const double tcpP99 = percentile(tcpRttTimes, 0.99) * 1e6;

  Table table({{"measurement", 0},
               {"size", 0},
               {"rounds", 0},
               {"GB/s or p50 us", 2},
               {"p99 us", 1},
               {"tcp transport", 2},
               {"ratio", 3}});
  table.addRow({std::string("bulk one-way GB/s"), Count{o.bulkBytes},
                static_cast<std::int64_t>(rdmaBulkTimes.size()), rdmaGbps,
                percentile(rdmaBulkTimes, 0.99) * 1e6, tcpGbps, rdmaGbps / tcpGbps});
  table.addRow({std::string("envelope round trip"), Count{kRttHeaderBytes},
                static_cast<std::int64_t>(rdmaRttTimes.size()), rdmaP50, rdmaP99, tcpP50,
                rdmaP50 / tcpP50});
  fmt::print("{}\n", table.format());
  fmt::print("tcp transport round trip: p50 {:.1f} us, p99 {:.1f} us\n", tcpP50, tcpP99);
  if (!o.common.csvPath.empty()) table.writeCsv(o.common.csvPath);
  if (o.common.json) {
    fmt::print("{}\n", JsonObject()
                           .add("benchmark", "transport")
                           .add("transport", "ibverbs")
                           .add("bulk_bytes", static_cast<std::uint64_t>(o.bulkBytes))
                           .add("bulk_gbps", rdmaGbps)
                           .add("tcp_transport_gbps", tcpGbps)
                           .add("ratio_vs_tcp_transport", rdmaGbps / tcpGbps)
                           .add("rtt_p50_us", rdmaP50)
                           .add("rtt_p99_us", rdmaP99)
                           .add("tcp_rtt_p50_us", tcpP50)
                           .add("tcp_rtt_p99_us", tcpP99)
                           .add("rtt_p50_ratio", rdmaP50 / tcpP50)
                           .str());
  }
}

}  // namespace

void addTransportCommand(CLI::App& app) {
  auto options = std::make_shared<TransportBenchOptions>();
  CLI::App* command = app.add_subcommand(
      "transport",
      "transport bulk GB/s and envelope round trip: tcp next to raw blocking sockets, ibverbs next "
      "to tcp");
  addCommonOptions(*command, options->common);
  command->add_option("--transport", options->transport, "the transport measured")
      ->check(CLI::IsMember({"tcp", "ibverbs"}))
      ->capture_default_str();
  auto rdmaFlag = [&](const char* flag, const char* key, const char* help) {
    return command->add_option_function<std::string>(
        flag, [options, key](const std::string& value) { options->rdma[key] = value; }, help);
  };
  rdmaFlag("--rdma-device", "device", "RDMA device (ibverbs); default: the first with an active port");
  rdmaFlag("--rdma-port", "port", "its port; 0: the first active one")->check(CLI::Range(0, 255));
  rdmaFlag("--rdma-gid-index", "gid-index",
           "GID index; -1: LID on InfiniBand, the first GID in use on RoCE")
      ->check(CLI::Range(-1, 255));
  command->add_flag_callback(
      "--rdma-busy-poll", [options] { options->rdma["busy-poll"] = "true"; },
      "poll completions on the io threads instead of waiting for events");
  command->add_option("--bulk-bytes", options->bulkBytes, "payload of the one-way transfer")
      ->check(CLI::Range(std::size_t{1}, std::size_t{1} << 30))
      ->capture_default_str();
  command->add_option("--bulk-rounds", options->bulkRounds, "one-way transfers per side (even)")
      ->check(CLI::Range(2, 1000))
      ->capture_default_str();
  command->add_option("--rtt-rounds", options->rttRounds, "round trips per side (even)")
      ->check(CLI::Range(20, 10000000))
      ->capture_default_str();
  command->callback([options] { runTransport(*options); });
}

}  // namespace gossamer::bench
