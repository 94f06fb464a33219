// `gossamer-bench relay`: the bulk throughput of a relayed link (net/relay) against a direct link
// between the same two peers, same run. Three peers on 127.0.0.1 (a, the relay r, b), each with
// its own io thread, TLS 1.3 on every TCP link, and the shaped transport giving every link of a
// pair its own --mbit pipe with --latency-ms one way (as `run-nat.sh` caps every host at
// 200 Mbit/s). a sends --mib MiB to b in envelopes of --frame-mib on a's own link to b (direct),
// then on a link relayed by r (TLS between a's and b's identity keys inside, which r forwards),
// alternating --rounds times; each transfer runs from the first send to the last byte handed to
// b's handler. Baseline: the direct link, same peers, same run: `relay_vs_direct` = direct
// seconds / relayed seconds (the relayed link's share of the direct one's throughput).
//
// Target: relay_vs_direct >= 0.8 at 200 Mbit/s.
#include <atomic>
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>
#include <asio/co_spawn.hpp>
#include <asio/use_future.hpp>
#include <fmt/format.h>

#include "bench/bench_util.h"
#include "bench/benchmarks.h"
#include "bench/io_thread.h"
#include "engine/base/enforce.h"
#include "engine/base/json.h"
#include "engine/base/log.h"
#include "net/mesh/mesh.h"
#include "net/shaped/shaped_transport.h"
#include "net/tcp/tcp_transport.h"
#include "net/tcp/tls.h"

namespace gossamer::bench {
namespace {

using namespace std::chrono_literals;
constexpr double kTargetRatio = 0.8;

struct RelayBenchOptions {
  CommonOptions common;
  double mib = 64;
  double frameMib = 4;
  double mbit = 200;
  double latencyMs = 1;
  std::size_t rounds = 2;
};

// One peer: a shaped TLS tcp transport and a mesh on its own io thread; counts what it receives.
struct BenchPeer {
  BenchPeer(std::uint64_t id, std::size_t index, const RelayBenchOptions& o,
            const std::shared_ptr<net::tcp::TlsContext>& tls) {
    identity = net::wire::Identity::generate();
    io.call([&] {
      net::tcp::Options tcpOptions;
      tcpOptions.tls = tls;
      net::shaped::LinkProfile link;
      link.latency = std::chrono::microseconds(static_cast<long>(o.latencyMs * 1000));
      link.bandwidthBitsPerSecond = o.mbit * 1e6;
      net::shaped::Options shaped{
          .profile = net::shaped::NetworkProfile::uniform("relay", link),
          .selfIndex = index,
          .indexOf = [](const net::Endpoint&) -> std::optional<std::size_t> { return 0; }};
      transport = net::shaped::makeTransport(net::tcp::makeTransport(io.io(), tcpOptions),
                                             std::move(shaped));
      net::MeshOptions options;
      options.handshake.clusterId = "relay-bench";
      options.handshake.peerId = id;
      options.handshake.secret = std::vector<std::byte>(32, std::byte{7});
      options.handshake.identity = identity;
      options.handshake.book = std::make_shared<net::wire::IdentityBook>();
      mesh = std::make_unique<net::Mesh>(io.io(), *transport, options);
      mesh->onEnvelope([this](const net::Remote&, net::wire::EnvelopeHeader,
                              std::vector<net::Payload> payloads) {
        for (const net::Payload& p : payloads) received += p.size();
      });
      const std::error_code error = mesh->listen(net::Endpoint{"127.0.0.1", 0});
      GOSSAMER_ENFORCE(!error, "relay bench: listen failed: {}", error.message());
      endpoint = mesh->localEndpoint();
    });
  }
  ~BenchPeer() {
    io.call([this] {
      mesh.reset();
      transport.reset();
    });
  }

  template <typename Awaitable>
  auto run(Awaitable awaitable) {
    return asio::co_spawn(io.io(), std::move(awaitable), asio::use_future).get();
  }

  IoThread io;
  std::shared_ptr<const net::wire::Identity> identity;
  std::unique_ptr<net::Transport> transport;
  std::unique_ptr<net::Mesh> mesh;
  net::Endpoint endpoint;
  std::atomic<std::uint64_t> received{0};
};

// Sends `bytes` from a to b in frames of `frame` bytes on a's link to b (whichever it is now);
// returns the seconds until b has them all.
double transfer(BenchPeer& a, BenchPeer& b, const std::vector<std::byte>& frame,
                std::size_t frames) {
  const std::uint64_t before = b.received.load();
  const auto start = std::chrono::steady_clock::now();
  for (std::size_t i = 0; i < frames; ++i) {
    const std::error_code error =
        a.run(a.mesh->sendEnvelope(b.endpoint, net::Channel::data, net::wire::EnvelopeHeader{},
                                   std::vector<std::span<const std::byte>>{frame}, 10s));
    GOSSAMER_ENFORCE(!error, "relay bench: a send failed: {}", error.message());
  }
  const std::uint64_t want = before + frames * frame.size();
  const auto deadline = start + 300s;
  while (b.received.load() < want) {
    GOSSAMER_ENFORCE(std::chrono::steady_clock::now() < deadline,
                     "relay bench: the transfer did not end within 300 s");
    std::this_thread::sleep_for(200us);
  }
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

void runRelayBench(const RelayBenchOptions& o) {
  log::setLevel("warn");
  const auto tls = net::tcp::makeTlsContext(
      net::tcp::TlsConfig{.secret = std::vector<std::byte>(32, std::byte{7})});
  BenchPeer a(1, 0, o, tls), r(2, 1, o, tls), b(3, 2, o, tls);
  a.mesh->identityBook()->bind(3, b.identity->publicKey());
  b.mesh->identityBook()->bind(1, a.identity->publicKey());
  // b and a hold links to r, as dial-out-only peers would.
  for (BenchPeer* end : {&a, &b})
    for (net::Channel channel : {net::Channel::control, net::Channel::data})
      GOSSAMER_ENFORCE(end->run(end->mesh->open(r.endpoint, channel, 10s)).ok(),
                       "relay bench: no link to the relay");
  const std::size_t frameBytes = static_cast<std::size_t>(o.frameMib * (1 << 20));
  const std::size_t frames = std::max<std::size_t>(1, static_cast<std::size_t>(o.mib / o.frameMib));
  std::vector<std::byte> frame(frameBytes, std::byte{0x5a});
  const double megabits = static_cast<double>(frames * frameBytes) * 8 / 1e6;
  fmt::print(
      "relay: {} MiB from a to b in {} MiB envelopes, TLS 1.3 on every TCP link, every link its "
      "own {:.0f} Mbit/s pipe ({} ms one way) on 127.0.0.1; direct: a's own link to b; relayed: "
      "through r, TLS between a's and b's identity keys inside. Baseline: the direct link.\n\n"
      "{:>6} {:>10} {:>12} {:>10}\n",
      frames * frameBytes >> 20, frameBytes >> 20, o.mbit, o.latencyMs, "round", "path", "seconds",
      "Mbit/s");
  double direct = 0, relayed = 0;
  bool relayOpen = false;
  for (std::size_t round = 1; round <= o.rounds; ++round) {
    // Direct: a's own link (dialed); a relayed link a keeps as its own is dropped first.
    if (relayOpen) a.io.call([&] { a.mesh->disconnect(b.endpoint); });
    relayOpen = false;
    const double d = transfer(a, b, frame, frames);
    fmt::print("{:>6} {:>10} {:>12.2f} {:>10.1f}\n", round, "direct", d, megabits / d);
    a.io.call([&] { a.mesh->disconnect(b.endpoint); });
    const net::LinkOutcome opened =
        a.run(a.mesh->relay(r.endpoint, b.endpoint, 3, net::Channel::data, 10s));
    GOSSAMER_ENFORCE(opened.ok(), "relay bench: the relayed link did not open: {} {}",
                     opened.error.message(), opened.reason);
    relayOpen = true;
    const double rl = transfer(a, b, frame, frames);
    fmt::print("{:>6} {:>10} {:>12.2f} {:>10.1f}\n", round, "relayed", rl, megabits / rl);
    std::fflush(stdout);
    direct += d;
    relayed += rl;
  }
  const double ratio = direct / relayed;
  fmt::print("\nrelayed vs direct throughput: {:.2f} (target >= {}); r forwarded {:.1f} MiB\n",
             ratio, kTargetRatio, static_cast<double>(r.mesh->bytesRelayed()) / (1 << 20));
  if (o.common.json) {
    JsonObject json;
    json.add("benchmark", "relay")
        .add("bytes", static_cast<std::uint64_t>(frames * frameBytes))
        .add("mbit_per_link", o.mbit)
        .add("direct_seconds", direct / static_cast<double>(o.rounds))
        .add("relayed_seconds", relayed / static_cast<double>(o.rounds))
        .add("relay_vs_direct", ratio)
        .add("bytes_relayed", r.mesh->bytesRelayed())
        .add("target_relay_vs_direct", kTargetRatio);
    fmt::print("{}\n", json.str());
  }
}

}  // namespace

void addRelayCommand(CLI::App& app) {
  auto options = std::make_shared<RelayBenchOptions>();
  CLI::App* command = app.add_subcommand(
      "relay", "bulk throughput of a relayed link against a direct one, TLS on, shaped links");
  addCommonOptions(*command, options->common);
  command->add_option("--mib", options->mib, "MiB sent on each path per round")
      ->capture_default_str()
      ->check(CLI::Range(1.0, 4096.0));
  command->add_option("--frame-mib", options->frameMib, "MiB per envelope")
      ->capture_default_str()
      ->check(CLI::Range(0.0625, 256.0));
  command->add_option("--mbit", options->mbit, "bandwidth of every link, Mbit/s")
      ->capture_default_str()
      ->check(CLI::Range(1.0, 100000.0));
  command->add_option("--latency-ms", options->latencyMs, "one-way latency of every link")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 1000.0));
  command->add_option("--rounds", options->rounds, "direct and relayed transfers, alternating")
      ->capture_default_str()
      ->check(CLI::Range(1, 100));
  command->callback([options] { runRelayBench(*options); });
}

}  // namespace gossamer::bench
