// `gossamer-bench shaped`: accuracy of the shaped transport (net/shaped/) over the inproc
// backend. For each latency profile it measures the one-way latency of small frames, and for each
// bandwidth cap the throughput of back-to-back frames, and prints them next to what the profile
// asks for and next to the unshaped inproc link measured the same way in the same run (what the
// shaper adds to). Target: within 10% of the profile for latencies of 1-200 ms
// and caps of 10 Mbit/s-10 Gbit/s.
//
// Latency: frames carry their send time; one-way latency = arrival - send time, p50 over frames
// sent every --interval ms for --seconds. Throughput: frames of about 4 ms of serialization each
// are sent back to back for --seconds, --window sends outstanding; throughput = bytes after
// frame n/10 / time between its arrival and the last one (the first tenth is warm-up). The headline
// errors compare the raw measurement with the profile; the latency error over the baseline takes
// the unshaped link's own one-way latency out first; what remains is the shaper's own lateness
// (frames are never delivered early; its timers fire Options::timerLead early and it yields until
// the exact time, since a timer wake-up alone is ~60 us late on a loaded VM, 6% of 1 ms). The
// sender and the receiver each run on their own io_context thread.
//
// Then, over real tcp connections on loopback (multistream_bench.h), several connections per link:
// 1 GiB Tokyo-London on geo-cap over `auto` streams against its 10 Gbit/s capacity
// (multistream_vs_capacity, target >= 0.8) and against one connection (multistream_speedup), both
// next to the closed form min(K x window / RTT, capacity); and 1 GiB on loopback without emulation
// over 4 striped connections against plain tcp (target: within 10%).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <future>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <CLI/CLI.hpp>
#include <asio/co_spawn.hpp>
#include <asio/executor_work_guard.hpp>
#include <asio/io_context.hpp>
#include <asio/post.hpp>
#include <asio/steady_timer.hpp>
#include <asio/this_coro.hpp>
#include <asio/use_awaitable.hpp>
#include <asio/use_future.hpp>
#include <fmt/format.h>

#include "bench/bench_util.h"
#include "bench/benchmarks.h"
#include "bench/io_thread.h"
#include "bench/link_pair.h"
#include "bench/multistream_bench.h"
#include "engine/base/enforce.h"
#include "engine/base/json.h"
#include "net/inproc/inproc_transport.h"
#include "net/shaped/shaped_transport.h"

namespace gossamer::bench {
namespace {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

constexpr double kTargetError = 0.10;
// Serialization time of one throughput frame: long against timer slack, short enough for a
// hundred frames per measurement.
constexpr double kFrameSeconds = 0.004;
// How long any one measurement may take before the bench gives up on it.
constexpr auto kMeasurementDeadline = 120s;

struct ShapedBenchOptions {
  CommonOptions common;
  std::vector<double> latenciesMs = {1, 10, 50, 200};
  std::vector<double> capsMbit = {10, 100, 1000, 10000};
  double seconds = 0.5;
  double intervalMs = 2;
  std::size_t window = 4;
  std::size_t multistreamMiB = 1024;  // 0: no multistream measurements
};

// The multistream figures (multistream_bench.h) as a table, and into `json` when given.
void reportMultistream(const MultistreamFigures& f, JsonObject* json) {
  const double vsCapacity = f.multistreamBitsPerSecond / f.capacityBitsPerSecond;
  const double speedup = f.multistreamBitsPerSecond / f.singleBitsPerSecond;
  const double loopback = f.loopbackFourBitsPerSecond / f.loopbackOneBitsPerSecond;
  if (json != nullptr) {
    json->add("multistream_streams", static_cast<double>(f.autoStreams));
    json->add("multistream_vs_capacity", vsCapacity);
    json->add("multistream_speedup", speedup);
    json->add("multistream_vs_model", f.multistreamBitsPerSecond / f.autoModelBitsPerSecond);
    json->add("single_stream_vs_model", f.singleBitsPerSecond / f.singleModelBitsPerSecond);
    json->add("loopback_4_streams_vs_1", loopback);
    return;
  }
  Table table({{"transfer"},
               {"streams"},
               {"measured Gbit/s", 3},
               {"model Gbit/s", 3},
               {"measured / model", 3}});
  table.addRow({"geo-cap tokyo-london", std::to_string(f.autoStreams) + " (auto)",
                f.multistreamBitsPerSecond / 1e9, f.autoModelBitsPerSecond / 1e9,
                f.multistreamBitsPerSecond / f.autoModelBitsPerSecond});
  table.addRow({"geo-cap tokyo-london", std::string("1"), f.singleBitsPerSecond / 1e9,
                f.singleModelBitsPerSecond / 1e9,
                f.singleBitsPerSecond / f.singleModelBitsPerSecond});
  table.addRow({"loopback, plain tcp", std::string("1"), f.loopbackOneBitsPerSecond / 1e9,
                std::string("-"), std::string("-")});
  table.addRow({"loopback, striped", std::string("4"), f.loopbackFourBitsPerSecond / 1e9,
                std::string("-"), std::string("-")});
  fmt::print(
      "\nseveral connections per link (tcp, plaintext; model: min(K x window / RTT, "
      "capacity))\n{}\n",
      table.format());
  fmt::print(
      "multistream_vs_capacity {:.3f} (target >= 0.8): {}; multistream_speedup {:.2f}x over one "
      "connection; 4 streams on loopback {:.3f} of one (target >= 0.9): {}\n",
      vsCapacity, vsCapacity >= 0.8 ? "met" : "NOT met", speedup, loopback,
      loopback >= 0.9 ? "met" : "NOT met");
}

template <typename T>
T waitFor(std::future<T>& future, const char* what) {
  GOSSAMER_ENFORCE(future.wait_for(kMeasurementDeadline) == std::future_status::ready,
                   "shaped bench: {} did not finish within {} s", what,
                   kMeasurementDeadline.count());
  return future.get();
}

// A sender (peer 0) and a receiver (peer 1), shaped with `profile` (or plain inproc when
// `profile` is null), connected by one link.
LinkPair::MakeTransport shapedInproc(const net::shaped::NetworkProfile* profile) {
  return [profile, hub = net::inproc::makeHub()](IoThread& thread, std::size_t index) {
    std::unique_ptr<net::Transport> transport = net::inproc::makeTransport(thread.io(), hub);
    if (profile == nullptr) return transport;
    net::shaped::Options options{
        .profile = *profile,
        .selfIndex = index,
        .indexOf = [](const net::Endpoint&) -> std::optional<std::size_t> { return 1; }};
    return net::shaped::makeTransport(std::move(transport), std::move(options));
  };
}

std::int64_t nowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch())
      .count();
}

double percentile(std::vector<double> values, double fraction) {
  std::sort(values.begin(), values.end());
  const auto rank =
      static_cast<std::size_t>(std::ceil(fraction * static_cast<double>(values.size())));
  return values[std::clamp<std::size_t>(rank, 1, values.size()) - 1];
}

struct LatencyResult {
  double p50Ms = 0, p99Ms = 0, minMs = 0;
  std::size_t frames = 0;
};

// One-way latency of `frames` header-only frames sent every `interval`.
LatencyResult measureLatency(IoThread& sender, IoThread& receiver,
                             const net::shaped::NetworkProfile* profile, std::size_t frames,
                             std::chrono::microseconds interval) {
  LinkPair pair(sender, receiver, shapedInproc(profile), net::Endpoint{"inproc", 0});
  auto received = asio::co_spawn(
      receiver.io(),
      [&pair, frames]() -> asio::awaitable<std::vector<double>> {
        std::vector<double> delays;
        net::InFrame frame;
        for (std::size_t i = 0; i < frames; ++i) {
          if (co_await pair.in().receive(frame)) break;
          const std::int64_t arrival = nowNs();
          std::int64_t sent = 0;
          std::memcpy(&sent, frame.header.data(), sizeof(sent));
          delays.push_back(static_cast<double>(arrival - sent) * 1e-6);
        }
        co_return delays;
      },
      asio::use_future);
  auto sent = asio::co_spawn(
      sender.io(),
      [&pair, frames, interval]() -> asio::awaitable<std::error_code> {
        asio::steady_timer timer(co_await asio::this_coro::executor);
        std::vector<std::byte> header(16);
        for (std::size_t i = 0; i < frames; ++i) {
          const std::int64_t now = nowNs();
          std::memcpy(header.data(), &now, sizeof(now));
          net::OutFrame frame{header, {}};  // named: see shaped_transport.cc on GCC 12
          if (auto error = co_await pair.out().send(std::move(frame))) co_return error;
          timer.expires_after(interval);
          co_await timer.async_wait(asio::use_awaitable);
        }
        co_return std::error_code();
      },
      asio::use_future);
  const std::error_code error = waitFor(sent, "latency sender");
  GOSSAMER_ENFORCE(!error, "shaped bench: send failed: {}", error.message());
  const std::vector<double> delays = waitFor(received, "latency receiver");
  GOSSAMER_ENFORCE_EQ(delays.size(), frames, "shaped bench: frames lost on a loss-free link");
  return {percentile(delays, 0.5), percentile(delays, 0.99), percentile(delays, 0.0),
          delays.size()};
}

struct ThroughputResult {
  double bitsPerSecond = 0;
  std::size_t frames = 0;
  std::size_t frameBytes = 0;
};

// Throughput of `frames` back-to-back frames of `frameBytes` payload bytes, `window` sends
// outstanding.
ThroughputResult measureThroughput(IoThread& sender, IoThread& receiver,
                                   const net::shaped::NetworkProfile* profile, std::size_t frames,
                                   std::size_t frameBytes, std::size_t window) {
  LinkPair pair(sender, receiver, shapedInproc(profile), net::Endpoint{"inproc", 0});
  const std::vector<std::byte> payload(frameBytes, std::byte{0x5a});
  auto received = asio::co_spawn(
      receiver.io(),
      [&pair, frames]() -> asio::awaitable<std::pair<std::vector<double>, std::vector<double>>> {
        std::vector<double> arrivals, bytes;
        net::InFrame frame;
        for (std::size_t i = 0; i < frames; ++i) {
          if (co_await pair.in().receive(frame)) break;
          arrivals.push_back(static_cast<double>(nowNs()) * 1e-9);
          double size = static_cast<double>(frame.header.size());
          for (const net::Payload& p : frame.payloads) size += static_cast<double>(p.size());
          bytes.push_back(size);
        }
        co_return std::make_pair(arrivals, bytes);
      },
      asio::use_future);
  // `window` senders share the frames, so that many sends are outstanding at once, as a TCP
  // socket buffer would hold them: a sender thread that is descheduled for a moment then does not
  // leave the link idle.
  std::vector<std::future<std::error_code>> senders;
  for (std::size_t k = 0; k < window; ++k) {
    senders.push_back(asio::co_spawn(
        sender.io(),
        [&pair, &payload, frames, window, k]() -> asio::awaitable<std::error_code> {
          std::vector<std::byte> header(16);
          for (std::size_t i = k; i < frames; i += window) {
            std::memcpy(header.data(), &i, sizeof(i));
            net::OutFrame frame{header, {payload}};  // named: see shaped_transport.cc on GCC 12
            if (auto error = co_await pair.out().send(std::move(frame))) co_return error;
          }
          co_return std::error_code();
        },
        asio::use_future));
  }
  for (auto& sent : senders) {
    const std::error_code error = waitFor(sent, "throughput sender");
    GOSSAMER_ENFORCE(!error, "shaped bench: send failed: {}", error.message());
  }
  const auto [arrivals, bytes] = waitFor(received, "throughput receiver");
  GOSSAMER_ENFORCE_EQ(arrivals.size(), frames, "shaped bench: frames lost on a loss-free link");
  // The first tenth is warm-up (fresh pool buffers fault their pages in): measured from the
  // arrival of frame `first` to the last one.
  const std::size_t first = arrivals.size() / 10;
  double total = 0;
  for (std::size_t i = first + 1; i < bytes.size(); ++i) total += bytes[i];
  const double span = arrivals.back() - arrivals[first];
  return {span > 0 ? total * 8 / span : 0, frames, frameBytes};
}

net::shaped::NetworkProfile profileOf(const net::shaped::LinkProfile& link) {
  return net::shaped::NetworkProfile::uniform("bench", link);
}

void runShaped(const ShapedBenchOptions& options) {
  IoThread sender;
  IoThread receiver;
  const auto interval =
      std::chrono::microseconds(static_cast<std::int64_t>(std::llround(options.intervalMs * 1e3)));
  const auto latencyFrames = static_cast<std::size_t>(
      std::max(20.0, std::round(options.seconds * 1e3 / options.intervalMs)));
  const auto throughputFrames =
      static_cast<std::size_t>(std::max(20.0, std::round(options.seconds / kFrameSeconds)));

  fmt::print("shaped transport over inproc; sender and receiver on their own io threads\n");
  fmt::print(
      "baseline: the unshaped inproc link measured the same way in this run; error = "
      "|measured - profile| / profile, target <= {}\n",
      kTargetError);
  fmt::print(
      "latency: header-only frames every {} ms, one-way = arrival - send time; throughput: "
      "frames of {} ms of serialization back to back ({} sends outstanding), bytes after frame "
      "n/10 / time from its arrival to the last\n\n",
      options.intervalMs, kFrameSeconds * 1e3, options.window);
  std::fflush(stdout);

  Table table({{"measure"},
               {"profile"},
               {"measured", 3},
               {"p99", 3},
               {"unit"},
               {"ratio", 3},
               {"error", 3},
               {"error-base", 3},
               {"frames"},
               {"frame bytes"}});

  fmt::print(stderr, "measuring the unshaped inproc baseline\n");
  const LatencyResult baseLatency =
      measureLatency(sender, receiver, nullptr, latencyFrames, interval);
  table.addRow({"latency", "inproc", baseLatency.p50Ms, baseLatency.p99Ms, "ms", 0.0, 0.0, 0.0,
                static_cast<std::int64_t>(baseLatency.frames), std::int64_t{16}});
  const std::size_t baselineFrameBytes = std::size_t{4} << 20;
  const ThroughputResult baseThroughput = measureThroughput(
      sender, receiver, nullptr, throughputFrames, baselineFrameBytes, options.window);
  table.addRow({"throughput", "inproc", baseThroughput.bitsPerSecond / 1e6, 0.0, "Mbit/s", 0.0, 0.0,
                0.0, static_cast<std::int64_t>(baseThroughput.frames),
                static_cast<std::int64_t>(baselineFrameBytes)});

  double maxLatencyError = 0;
  double maxShaperLatencyError = 0;
  for (const double ms : options.latenciesMs) {
    fmt::print(stderr, "measuring latency {} ms\n", ms);
    const auto profile = profileOf(
        {.latency = std::chrono::microseconds(static_cast<std::int64_t>(std::llround(ms * 1e3)))});
    const LatencyResult result =
        measureLatency(sender, receiver, &profile, latencyFrames, interval);
    const double error = std::abs(result.p50Ms - ms) / ms;
    // What the shaper itself adds: the inner link's own latency taken out.
    const double shaperError = std::abs(result.p50Ms - baseLatency.p50Ms - ms) / ms;
    maxLatencyError = std::max(maxLatencyError, error);
    maxShaperLatencyError = std::max(maxShaperLatencyError, shaperError);
    table.addRow({"latency", fmt::format("{} ms", ms), result.p50Ms, result.p99Ms, "ms",
                  result.p50Ms / ms, error, shaperError, static_cast<std::int64_t>(result.frames),
                  std::int64_t{16}});
  }

  double maxThroughputError = 0;
  for (const double mbit : options.capsMbit) {
    fmt::print(stderr, "measuring throughput {} Mbit/s\n", mbit);
    const double bitsPerSecond = mbit * 1e6;
    const auto frameBytes =
        static_cast<std::size_t>(std::max(1024.0, bitsPerSecond / 8 * kFrameSeconds));
    const auto profile = profileOf({.bandwidthBitsPerSecond = bitsPerSecond});
    const ThroughputResult result =
        measureThroughput(sender, receiver, &profile, throughputFrames, frameBytes, options.window);
    const double error = std::abs(result.bitsPerSecond - bitsPerSecond) / bitsPerSecond;
    maxThroughputError = std::max(maxThroughputError, error);
    table.addRow({"throughput", fmt::format("{} Mbit/s", mbit), result.bitsPerSecond / 1e6, 0.0,
                  "Mbit/s", result.bitsPerSecond / bitsPerSecond, error, error,
                  static_cast<std::int64_t>(result.frames), static_cast<std::int64_t>(frameBytes)});
  }

  fmt::print("{}\n", table.format());
  fmt::print(
      "error-base: latency error once the unshaped link's own p50 ({:.3f} ms) is taken out, i.e. "
      "the shaper's own lateness\n",
      baseLatency.p50Ms);
  fmt::print(
      "max latency error {:.3f} ({:.3f} of the added delay), max throughput error {:.3f} "
      "(target <= {}): {}\n",
      maxLatencyError, maxShaperLatencyError, maxThroughputError, kTargetError,
      maxLatencyError <= kTargetError && maxThroughputError <= kTargetError ? "met" : "NOT met");
  if (!options.common.csvPath.empty()) table.writeCsv(options.common.csvPath);
  std::optional<MultistreamFigures> multistream;
  if (options.multistreamMiB > 0) {
    multistream = measureMultistream(options.multistreamMiB,
                                     std::max<std::size_t>(128, options.multistreamMiB / 8),
                                     options.multistreamMiB);
    reportMultistream(*multistream, nullptr);
  }
  if (options.common.json) {
    JsonObject json;
    json.add("benchmark", "shaped");
    if (multistream) reportMultistream(*multistream, &json);
    json.add("max_latency_error", maxLatencyError);
    json.add("max_latency_error_over_baseline", maxShaperLatencyError);
    json.add("max_throughput_error", maxThroughputError);
    json.add("target_error", kTargetError);
    json.add("baseline_latency_ms", baseLatency.p50Ms);
    json.add("baseline_throughput_mbit", baseThroughput.bitsPerSecond / 1e6);
    fmt::print("{}\n", json.str());
  }
}

}  // namespace

void addShapedCommand(CLI::App& app) {
  auto options = std::make_shared<ShapedBenchOptions>();
  CLI::App* command = app.add_subcommand(
      "shaped", "Accuracy of the shaped transport: one-way latency and throughput vs the profile");
  addCommonOptions(*command, options->common);
  command->add_option("--latencies", options->latenciesMs, "One-way latencies to check, ms")
      ->delimiter(',')
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  command->add_option("--caps", options->capsMbit, "Bandwidth caps to check, Mbit/s")
      ->delimiter(',')
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  command->add_option("--seconds", options->seconds, "Length of each measurement, seconds")
      ->check(CLI::Range(0.05, 60.0))
      ->capture_default_str();
  command->add_option("--interval", options->intervalMs, "Gap between latency probes, ms")
      ->check(CLI::Range(0.1, 1000.0))
      ->capture_default_str();
  command->add_option("--window", options->window, "Sends outstanding in the throughput runs")
      ->check(CLI::Range(1, 8))
      ->capture_default_str();
  command
      ->add_option("--multistream-mib", options->multistreamMiB,
                   "MiB sent Tokyo-London on geo-cap over auto streams, and on loopback over 1 and "
                   "4 (one eighth, at least 128, over one stream on geo-cap); 0 skips them")
      ->capture_default_str();
  command->callback([options] { runShaped(*options); });
}

}  // namespace gossamer::bench
