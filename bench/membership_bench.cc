// `gossamer-bench membership`: the SWIM membership service (net/membership/) of N peers in this
// process, each on its own io_context thread, over TCP on 127.0.0.1.
//  - detection: a peer is stopped abruptly (its service stops and its transport closes every
//    socket, as the kernel does for a process killed with kill -9); the time until EVERY
//    survivor has delivered its `failed` event, in units of the probe interval T. Then a fresh
//    peer joins through 3 random members; the time until every member has delivered its `joined`
//    event. Repeated --trials times for each N in --peers. Targets: detection median <= 8T and
//    p99 <= 16T, join median <= 3T.
//  - loss: --loss-peers peers with --loss-rate random loss injected by the shaped transport for
//    --loss-seconds: live peers declared failed (target: zero). --loss-mode stream (the default)
//    loses TCP segments, which are retransmitted (frames arrive late, as over a real TCP link);
//    datagram drops whole frames.
//  - traffic: membership bytes sent per member per second in a quiet cluster of each N in
//    --traffic-peers, which must stay bounded as N grows.
// The baseline of the timing figures is T itself (the protocol's own clock), so the ratios are
// the figures.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <CLI/CLI.hpp>
#include <asio/co_spawn.hpp>
#include <asio/executor_work_guard.hpp>
#include <asio/io_context.hpp>
#include <asio/post.hpp>
#include <asio/use_future.hpp>
#include <fmt/format.h>

#include "bench/bench_util.h"
#include "bench/benchmarks.h"
#include "engine/base/enforce.h"
#include "engine/base/json.h"
#include "engine/base/log.h"
#include "net/membership/membership.h"
#include "net/shaped/shaped_transport.h"
#include "net/tcp/tcp_transport.h"

namespace gossamer::bench {
namespace {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;
namespace membership = net::membership;

constexpr double kDetectMedianTarget = 8;
constexpr double kDetectP99Target = 16;
constexpr double kJoinMedianTarget = 3;
// How long one trial may wait for a detection or a join before the bench reports it as missed.
constexpr double kTrialDeadlineT = 60;

struct MembershipBenchOptions {
  CommonOptions common;
  std::vector<std::size_t> peers{8, 32};
  int trials = 20;
  int probeMs = 200;
  std::size_t lossPeers = 16;
  double lossRate = 0.05;
  net::shaped::LossMode lossMode = net::shaped::LossMode::stream;
  double lossSeconds = 300;
  std::vector<std::size_t> trafficPeers{8, 16, 32};
  double trafficSeconds = 20;
};

double percentile(std::vector<double> values, double p) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  return values[static_cast<std::size_t>(p * static_cast<double>(values.size() - 1) + 0.5)];
}

// Every event any peer delivered, with the time it was delivered.
class EventLog {
 public:
  struct Entry {
    std::uint64_t observer;
    membership::Event event;
    Clock::time_point at;
  };

  void record(std::uint64_t observer, const membership::Event& event) {
    std::lock_guard lock(mutex_);
    entries_.push_back({observer, event, Clock::now()});
  }

  // The latest time at which each of `observers` delivered `kind` about `subject` after `since`,
  // or nullopt while one of them has not.
  std::optional<Clock::time_point> allSaw(const std::vector<std::uint64_t>& observers,
                                          std::uint64_t subject, membership::EventKind kind,
                                          Clock::time_point since) const {
    std::lock_guard lock(mutex_);
    Clock::time_point latest = since;
    for (std::uint64_t observer : observers) {
      bool seen = false;
      for (const Entry& e : entries_) {
        if (e.observer == observer && e.event.member.id == subject && e.event.kind == kind &&
            e.at >= since) {
          seen = true;
          latest = std::max(latest, e.at);
          break;
        }
      }
      if (!seen) return std::nullopt;
    }
    return latest;
  }

  // `failed` events about peers in `live` delivered after `since`.
  std::size_t falseFailures(const std::vector<std::uint64_t>& live, Clock::time_point since) const {
    std::lock_guard lock(mutex_);
    return static_cast<std::size_t>(
        std::count_if(entries_.begin(), entries_.end(), [&](const Entry& e) {
          return e.at >= since && e.event.kind == membership::EventKind::failed &&
                 std::find(live.begin(), live.end(), e.event.member.id) != live.end();
        }));
  }

 private:
  mutable std::mutex mutex_;
  std::vector<Entry> entries_;
};

// Listen endpoint -> peer index, for the shaped transport's indexOf (filled as peers listen).
class EndpointIndex {
 public:
  void add(const net::Endpoint& endpoint, std::size_t index) {
    std::lock_guard lock(mutex_);
    index_[endpoint] = index;
  }
  std::optional<std::size_t> find(const net::Endpoint& endpoint) const {
    std::lock_guard lock(mutex_);
    const auto it = index_.find(endpoint);
    if (it == index_.end()) return std::nullopt;
    return it->second;
  }

 private:
  mutable std::mutex mutex_;
  std::map<net::Endpoint, std::size_t> index_;
};

// Runs `f` on `io`'s thread and returns its result.
template <typename F>
auto runOn(asio::io_context& io, F f) -> decltype(f()) {
  std::packaged_task<decltype(f())()> task(std::move(f));
  auto result = task.get_future();
  asio::post(io, [&task] { task(); });
  return result.get();
}

// One peer: an io thread, a transport (tcp, optionally shaped), its mesh and the membership
// service.
class BenchPeer {
 public:
  BenchPeer(std::uint64_t id, std::vector<net::Endpoint> seeds, const membership::Options& options,
            EventLog& log, const std::optional<net::shaped::LinkProfile>& loss,
            EndpointIndex& index)
      : id_(id) {
    runOnIo([&] {
      std::unique_ptr<net::Transport> tcp = net::tcp::makeTransport(io_);
      if (loss) {
        net::shaped::Options shaping;
        shaping.profile = net::shaped::NetworkProfile::uniform("loss", *loss);
        shaping.selfIndex = static_cast<std::size_t>(id);
        shaping.indexOf = [&index](const net::Endpoint& e) { return index.find(e); };
        shaping.seed = 1000 + id;
        transport_ = net::shaped::makeTransport(std::move(tcp), std::move(shaping));
      } else {
        transport_ = std::move(tcp);
      }
      net::MeshOptions meshOptions;
      meshOptions.handshake.clusterId = "membership-bench";
      meshOptions.handshake.peerId = id;
      meshOptions.handshake.secret = {std::byte{'b'}, std::byte{'e'}, std::byte{'n'},
                                      std::byte{'c'}};
      meshOptions.handshake.identity = net::wire::Identity::generate();
      mesh_ = std::make_unique<net::Mesh>(io_, *transport_, meshOptions);
      service_ = membership::makeService(io_, *mesh_,
                                         membership::Config{std::move(seeds), options, 7 + id});
      service_->onEvent([this, &log](const membership::Event& e) { log.record(id_, e); });
      const std::error_code error = mesh_->listen(net::Endpoint{"127.0.0.1", 0});
      GOSSAMER_ENFORCE(!error, "peer {} cannot listen: {}", id, error.message());
      endpoint_ = mesh_->localEndpoint();
      index.add(endpoint_, static_cast<std::size_t>(id));
      service_->start();
      return 0;
    });
  }

  ~BenchPeer() { kill(); }

  // Stops without telling anyone, as kill -9 does: every socket closes, nothing is announced.
  void kill() {
    if (!thread_.joinable()) return;
    runOnIo([this] {
      service_->stop();
      mesh_->close();
      service_.reset();
      mesh_.reset();
      transport_.reset();
      return 0;
    });
    work_.reset();
    io_.stop();
    thread_.join();
  }

  std::uint64_t id() const { return id_; }
  const net::Endpoint& endpoint() const { return endpoint_; }
  membership::View view() const { return service_->view(); }
  std::uint64_t bytesSent() const { return service_->traffic().bytesSent; }

 private:
  template <typename F>
  auto runOnIo(F f) -> decltype(f()) {
    return runOn(io_, std::move(f));
  }

  std::uint64_t id_;
  asio::io_context io_;
  asio::executor_work_guard<asio::io_context::executor_type> work_ = asio::make_work_guard(io_);
  std::thread thread_{[this] { io_.run(); }};
  std::unique_ptr<net::Transport> transport_;
  std::unique_ptr<net::Mesh> mesh_;
  std::unique_ptr<membership::Service> service_;
  net::Endpoint endpoint_;
};

// N peers joined into one cluster.
class BenchCluster {
 public:
  BenchCluster(const membership::Options& options, std::optional<net::shaped::LinkProfile> loss,
               std::uint64_t seed)
      : options_(options), loss_(loss), rng_(seed) {}

  // Starts a peer that joins through up to 3 random members; returns it.
  BenchPeer& add() {
    std::vector<net::Endpoint> seeds;
    std::vector<std::size_t> order(peers_.size());
    for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::shuffle(order.begin(), order.end(), rng_);
    for (std::size_t i = 0; i < std::min<std::size_t>(3, order.size()); ++i)
      seeds.push_back(peers_[order[i]]->endpoint());
    peers_.push_back(
        std::make_unique<BenchPeer>(nextId_++, std::move(seeds), options_, log_, loss_, index_));
    return *peers_.back();
  }

  // Adds `n` peers and waits until every one sees all of them; false on timeout.
  bool grow(std::size_t n, Clock::duration deadline) {
    for (std::size_t i = 0; i < n; ++i) add();
    return waitFor(deadline, [&] {
      return std::all_of(peers_.begin(), peers_.end(),
                         [&](const auto& p) { return p->view().members.size() == peers_.size(); });
    });
  }

  // Kills a random member (never the only one) and removes it; returns its id.
  std::uint64_t killRandom() {
    std::uniform_int_distribution<std::size_t> pick(0, peers_.size() - 1);
    const std::size_t victim = pick(rng_);
    const std::uint64_t id = peers_[victim]->id();
    peers_[victim]->kill();
    peers_.erase(peers_.begin() + static_cast<std::ptrdiff_t>(victim));
    return id;
  }

  std::vector<std::uint64_t> ids() const {
    std::vector<std::uint64_t> out;
    for (const auto& p : peers_) out.push_back(p->id());
    return out;
  }

  std::uint64_t bytesSent() const {
    std::uint64_t total = 0;
    for (const auto& p : peers_) total += p->bytesSent();
    return total;
  }

  std::size_t size() const { return peers_.size(); }
  EventLog& log() { return log_; }

  template <typename Predicate>
  static bool waitFor(Clock::duration deadline, Predicate done) {
    const Clock::time_point until = Clock::now() + deadline;
    while (!done()) {
      if (Clock::now() >= until) return false;
      std::this_thread::sleep_for(5ms);
    }
    return true;
  }

 private:
  membership::Options options_;
  std::optional<net::shaped::LinkProfile> loss_;
  std::mt19937_64 rng_;
  EventLog log_;
  EndpointIndex index_;
  std::uint64_t nextId_ = 1;
  std::vector<std::unique_ptr<BenchPeer>> peers_;
};

membership::Options optionsWithProbe(int probeMs) {
  membership::Options options = membership::Options::local();
  const double scale = probeMs / static_cast<double>(options.probeInterval.count());
  auto scaled = [scale](std::chrono::milliseconds d) {
    return std::chrono::milliseconds(
        static_cast<std::int64_t>(static_cast<double>(d.count()) * scale));
  };
  options.probeInterval = std::chrono::milliseconds(probeMs);
  options.probeTimeout = scaled(options.probeTimeout);
  options.gossipInterval = scaled(options.gossipInterval);
  options.pushPullInterval = scaled(options.pushPullInterval);
  return options;
}

struct DetectionResult {
  std::size_t peers = 0;
  std::vector<double> detectT, joinT;
  int missedDetections = 0, missedJoins = 0;
};

DetectionResult measureDetection(const MembershipBenchOptions& o, std::size_t n) {
  const membership::Options options = optionsWithProbe(o.probeMs);
  const double t = static_cast<double>(o.probeMs) / 1000.0;
  const auto trialDeadline = std::chrono::duration_cast<Clock::duration>(
      std::chrono::duration<double>(kTrialDeadlineT * t));
  BenchCluster cluster(options, std::nullopt, 42 + n);
  GOSSAMER_ENFORCE(cluster.grow(n, 120s), "{} peers did not converge to one view in 120 s", n);
  std::this_thread::sleep_for(std::chrono::milliseconds(5 * o.probeMs));  // settle
  DetectionResult result;
  result.peers = n;
  for (int trial = 0; trial < o.trials; ++trial) {
    const Clock::time_point killedAt = Clock::now();
    const std::uint64_t victim = cluster.killRandom();
    std::optional<Clock::time_point> seen;
    const std::vector<std::uint64_t> survivors = cluster.ids();
    BenchCluster::waitFor(trialDeadline, [&] {
      seen = cluster.log().allSaw(survivors, victim, membership::EventKind::failed, killedAt);
      return seen.has_value();
    });
    if (seen) {
      result.detectT.push_back(std::chrono::duration<double>(*seen - killedAt).count() / t);
    } else {
      ++result.missedDetections;
    }

    const std::vector<std::uint64_t> members = cluster.ids();
    const Clock::time_point startedAt = Clock::now();
    const std::uint64_t joiner = cluster.add().id();
    BenchCluster::waitFor(trialDeadline, [&] {
      seen = cluster.log().allSaw(members, joiner, membership::EventKind::joined, startedAt);
      return seen.has_value();
    });
    if (seen) {
      result.joinT.push_back(std::chrono::duration<double>(*seen - startedAt).count() / t);
    } else {
      ++result.missedJoins;
    }
    fmt::print("  {} peers, trial {}/{}: detection {:.2f} T, join {:.2f} T\n", n, trial + 1,
               o.trials, result.detectT.empty() ? -1.0 : result.detectT.back(),
               result.joinT.empty() ? -1.0 : result.joinT.back());
    std::fflush(stdout);
  }
  return result;
}

// Membership bytes per member per second in a quiet cluster of n peers.
double measureTraffic(const MembershipBenchOptions& o, std::size_t n) {
  BenchCluster cluster(optionsWithProbe(o.probeMs), std::nullopt, 7 + n);
  GOSSAMER_ENFORCE(cluster.grow(n, 120s), "{} peers did not converge to one view in 120 s", n);
  std::this_thread::sleep_for(std::chrono::milliseconds(10 * o.probeMs));  // joins disseminated
  const std::uint64_t before = cluster.bytesSent();
  const Clock::time_point start = Clock::now();
  std::this_thread::sleep_for(std::chrono::duration<double>(o.trafficSeconds));
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  return static_cast<double>(cluster.bytesSent() - before) / static_cast<double>(n) / seconds;
}

// Live peers declared failed under random loss.
std::size_t measureFalseFailures(const MembershipBenchOptions& o) {
  const net::shaped::LinkProfile loss{.lossRate = o.lossRate, .lossMode = o.lossMode};
  BenchCluster cluster(optionsWithProbe(o.probeMs), loss, 99);
  GOSSAMER_ENFORCE(cluster.grow(o.lossPeers, 300s), "{} peers did not converge under {}% loss",
                   o.lossPeers, 100 * o.lossRate);
  const Clock::time_point start = Clock::now();
  std::this_thread::sleep_for(std::chrono::duration<double>(o.lossSeconds));
  return cluster.log().falseFailures(cluster.ids(), start);
}

void runMembership(const MembershipBenchOptions& o) {
  log::setLevel("warn");
  fmt::print("membership: SWIM over TCP on 127.0.0.1, every peer on its own io thread, T = {} ms\n",
             o.probeMs);
  fmt::print(
      "baseline: T itself (figures are in units of T); targets: detection median <= {}T, "
      "p99 <= {}T; join median <= {}T; zero false failures under {:.0f}% loss\n\n",
      kDetectMedianTarget, kDetectP99Target, kJoinMedianTarget, 100 * o.lossRate);

  Table table({{"measure", 0},
               {"peers", 0},
               {"samples", 0},
               {"median T", 2},
               {"p99 T", 2},
               {"max T", 2},
               {"missed", 0},
               {"target", 0}});
  std::optional<DetectionResult> largest;
  for (std::size_t n : o.peers) {
    DetectionResult r = measureDetection(o, n);
    const auto count = [](const std::vector<double>& v) {
      return static_cast<std::int64_t>(v.size());
    };
    table.addRow({std::string("detect kill"), static_cast<std::int64_t>(n), count(r.detectT),
                  percentile(r.detectT, 0.5), percentile(r.detectT, 0.99),
                  percentile(r.detectT, 1.0), static_cast<std::int64_t>(r.missedDetections),
                  fmt::format("p50<={} p99<={}", kDetectMedianTarget, kDetectP99Target)});
    table.addRow({std::string("join seen by all"), static_cast<std::int64_t>(n), count(r.joinT),
                  percentile(r.joinT, 0.5), percentile(r.joinT, 0.99), percentile(r.joinT, 1.0),
                  static_cast<std::int64_t>(r.missedJoins),
                  fmt::format("p50<={}", kJoinMedianTarget)});
    if (!largest || n >= largest->peers) largest = std::move(r);
  }
  fmt::print("{}\n", table.format());

  Table traffic({{"peers", 0}, {"bytes/member/s", 1}, {"bytes/member/T", 1}});
  JsonObject trafficJson;
  for (std::size_t n : o.trafficPeers) {
    const double rate = measureTraffic(o, n);
    traffic.addRow({static_cast<std::int64_t>(n), rate, rate * o.probeMs / 1000.0});
    trafficJson.add(fmt::format("{}", n), rate);
  }
  fmt::print("{}\n", traffic.format());

  std::optional<std::size_t> falseFailures;
  if (o.lossSeconds > 0) {
    fmt::print("loss: {} peers, {:.0f}% {}, {:.0f} s ...\n", o.lossPeers, 100 * o.lossRate,
               describeLoss(o.lossMode), o.lossSeconds);
    std::fflush(stdout);
    falseFailures = measureFalseFailures(o);
    fmt::print("live peers declared failed: {} (target 0): {}\n", *falseFailures,
               *falseFailures == 0 ? "met" : "MISSED");
  }
  if (largest) {
    const double p50 = percentile(largest->detectT, 0.5), p99 = percentile(largest->detectT, 0.99);
    const double join = percentile(largest->joinT, 0.5);
    const bool met = largest->missedDetections == 0 && p50 <= kDetectMedianTarget &&
                     p99 <= kDetectP99Target && largest->missedJoins == 0 &&
                     join <= kJoinMedianTarget;
    fmt::print("{} peers: detection p50 {:.2f}T p99 {:.2f}T, join p50 {:.2f}T: {}\n",
               largest->peers, p50, p99, join, met ? "met" : "MISSED");
  }
  if (!o.common.csvPath.empty()) table.writeCsv(o.common.csvPath);
  if (o.common.json) {
    JsonObject json;
    json.add("benchmark", "membership")
        .add("probe_interval_ms", static_cast<std::int64_t>(o.probeMs));
    if (largest) {
      json.add("peers", static_cast<std::uint64_t>(largest->peers))
          .add("detect_median_T", percentile(largest->detectT, 0.5))
          .add("detect_p99_T", percentile(largest->detectT, 0.99))
          .add("join_median_T", percentile(largest->joinT, 0.5))
          .add("missed_detections", static_cast<std::int64_t>(largest->missedDetections));
    }
    json.addRaw("bytes_per_member_per_s", trafficJson.str());
    if (falseFailures) {
      json.add("false_failures", static_cast<std::uint64_t>(*falseFailures))
          .add("loss_rate", o.lossRate)
          .add("loss_mode", net::shaped::name(o.lossMode));
    }
    fmt::print("{}\n", json.str());
  }
}

}  // namespace

void addMembershipCommand(CLI::App& app) {
  auto options = std::make_shared<MembershipBenchOptions>();
  CLI::App* command = app.add_subcommand(
      "membership",
      "SWIM failure detection and join times in units of T, false failures under "
      "loss, protocol bytes per member");
  addCommonOptions(*command, options->common);
  command->add_option("--peers", options->peers, "cluster sizes of the detection trials")
      ->delimiter(',')
      ->capture_default_str();
  command->add_option("--trials", options->trials, "kills (each followed by a join) per size")
      ->check(CLI::Range(1, 10000))
      ->capture_default_str();
  command->add_option("--probe-ms", options->probeMs, "probe interval T in milliseconds")
      ->check(CLI::Range(10, 10000))
      ->capture_default_str();
  command->add_option("--loss-peers", options->lossPeers, "cluster size of the loss run")
      ->check(CLI::Range(std::size_t{2}, std::size_t{256}))
      ->capture_default_str();
  command->add_option("--loss-rate", options->lossRate, "fraction of segments (or frames) lost")
      ->check(CLI::Range(0.0, 0.5))
      ->capture_default_str();
  addLossModeOption(*command, options->lossMode, "the loss run's loss");
  command->add_option("--loss-seconds", options->lossSeconds, "length of the loss run (0: skip)")
      ->check(CLI::Range(0.0, 86400.0))
      ->capture_default_str();
  command->add_option("--traffic-peers", options->trafficPeers, "cluster sizes of the traffic runs")
      ->delimiter(',')
      ->capture_default_str();
  command->add_option("--traffic-seconds", options->trafficSeconds, "length of each traffic run")
      ->check(CLI::Range(1.0, 3600.0))
      ->capture_default_str();
  command->callback([options] { runMembership(*options); });
}

}  // namespace gossamer::bench
