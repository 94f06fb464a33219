// gossamer-peer processes on 127.0.0.1 for the multi-process tests: a scratch directory with a
// cluster secret, and a cluster of peers joined by a seed list whose progress is read from their
// metrics files.
#pragma once

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include <unistd.h>

#include "tests/process_util.h"
#include "tests/support/watchdog.h"

namespace gossamer::test {

inline std::string peerCommand(const std::string& args) {
  return std::string(GOSSAMER_PEER_BINARY) + " " + args;
}

// A scratch directory with a cluster secret (mode 0600) in it; removed at the end.
struct Scratch {
  Scratch() {
    static int counter = 0;
    dir = std::filesystem::temp_directory_path() /
          ("gossamer-cluster-" + std::to_string(::getpid()) + "-" + std::to_string(counter++));
    std::filesystem::create_directories(dir);
    secret = (dir / "secret").string();
    std::ofstream(secret) << "a cluster secret for the test\n";
    std::filesystem::permissions(
        secret, std::filesystem::perms::owner_read | std::filesystem::perms::owner_write,
        std::filesystem::perm_options::replace);
  }
  // GOSSAMER_KEEP_SCRATCH=1 keeps the directory (the peers' logs) for a post-mortem.
  ~Scratch() {
    if (std::getenv("GOSSAMER_KEEP_SCRATCH") == nullptr) std::filesystem::remove_all(dir);
  }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;

  std::filesystem::path dir;
  std::string secret;
};

// The port in the first "listening on 127.0.0.1:PORT" line of a peer's log, or 0.
inline int listeningPort(const std::string& output) {
  std::smatch m;
  static const std::regex pattern("listening on 127\\.0\\.0\\.1:([0-9]+)");
  return std::regex_search(output, m, pattern) ? std::stoi(m[1]) : 0;
}

// Peers 1..n of one cluster (peer ids = their numbers), the first the seed of the others. Every
// peer appends an evaluation to its metrics file every 10 steps: step() reads how far it is.
class PeerProcesses {
 public:
  // `common`: the flags every peer gets (algorithm, data, steps, ...).
  explicit PeerProcesses(std::string common) : common_(std::move(common)) {}

  // Starts peer `id` (1-based) with `extra` flags; the first peer started is the seed.
  void start(std::size_t id, const std::string& extra = "") { startAt(id, 0, extra); }

  // Starts peer `id` again (its process has ended) at the address its last life listened on.
  void restart(std::size_t id, const std::string& extra = "") {
    const int port = listeningPort(peers_[id - 1]->output());
    if (port == 0) throw std::runtime_error("peer did not listen: " + peers_[id - 1]->output());
    startAt(id, port, extra);
  }

  // The last step peer `id` reported (0 before its first evaluation).
  std::uint64_t step(std::size_t id) const {
    std::ifstream in(metricsPath(id));
    std::string line;
    std::uint64_t last = 0;
    while (std::getline(in, line)) {
      const double s = jsonNumber(line, "step");
      if (s == s) last = static_cast<std::uint64_t>(s);
    }
    return last;
  }

  bool waitForStep(std::size_t id, std::uint64_t step, std::chrono::seconds timeout) const {
    return waitUntil(timeout, [&] { return this->step(id) >= step; });
  }

  ChildProcess& operator[](std::size_t id) { return *peers_[id - 1]; }
  std::size_t size() const { return peers_.size(); }
  const std::filesystem::path& dir() const { return scratch_.dir; }

 private:
  // Peer `id` listening on 127.0.0.1:`port` (0: any); the first peer started is the seed.
  void startAt(std::size_t id, int port, const std::string& extra) {
    if (peers_.size() < id) peers_.resize(id);
    std::string args = "--listen 127.0.0.1:" + std::to_string(port) + " --peer-id " +
                       std::to_string(id) + " --secret-file " + scratch_.secret + " --metrics " +
                       metricsPath(id) + " --eval-every 10 --eval-samples 200 --json " + common_ +
                       " " + extra;
    if (!seed_.empty()) args += " --seeds " + seed_;
    peers_[id - 1] = std::make_unique<ChildProcess>(
        peerCommand(args),
        (scratch_.dir / ("peer" + std::to_string(id) + "-" + std::to_string(starts_++) + ".log"))
            .string());
    if (seed_.empty()) {
      int seedPort = 0;
      if (!waitUntil(std::chrono::seconds(30),
                     [&] { return (seedPort = listeningPort(peers_[id - 1]->output())) != 0; }))
        throw std::runtime_error("the first peer did not listen: " + peers_[id - 1]->output());
      seed_ = "127.0.0.1:" + std::to_string(seedPort);
    }
  }

  std::string metricsPath(std::size_t id) const {
    return (scratch_.dir / ("peer" + std::to_string(id) + ".metrics.jsonl")).string();
  }

  Scratch scratch_;
  std::string common_;
  std::string seed_;
  int starts_ = 0;
  std::vector<std::unique_ptr<ChildProcess>> peers_;
};

}  // namespace gossamer::test
