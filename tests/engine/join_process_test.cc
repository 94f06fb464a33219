// --join-timeout, multi-process: a gossamer-peer process that no seed admits (another secret,
// another model, nobody listening) says why in one line and exits with status 3 after about the
// timeout; one that got in and then lost its seed never gives up this way.
//
// Every run: the synthetic task, the `local` membership profile (joins retried within 2 s,
// failures detected in about 1.5 s) and a join timeout of 2 s, waited for with wide margins.
#include <chrono>
#include <string>

#include <doctest/doctest.h>

#include "tests/engine/peer_processes.h"
#include "tests/process_util.h"
#include "tests/support/watchdog.h"

namespace gossamer {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

constexpr int kExitCannotJoin = 3;  // gossamer-peer --help, --join-timeout
const std::string kData =
    "--dataset synthetic --train-samples 2000 --test-samples 200 --batch 32 --lr 0.05 "
    "--membership local --log-level info --algorithm gosgd ";

// A cluster's first peer, listening on 127.0.0.1:0 with the scratch secret and waiting for a
// second member (for long).
class Seed {
 public:
  Seed(const test::Scratch& scratch, const std::string& extra)
      : process_(test::peerCommand("--listen 127.0.0.1:0 --secret-file " + scratch.secret +
                                   " --min-peers 2 --start-timeout 120 " + kData + extra),
                 (scratch.dir / "seed.log").string()) {
    int port = 0;
    REQUIRE_MESSAGE(
        test::waitUntil(30s, [&] { return (port = test::listeningPort(process_.output())) != 0; }),
        process_.output());
    address_ = "127.0.0.1:" + std::to_string(port);
  }
  const std::string& address() const { return address_; }
  std::string output() const { return process_.output(); }

 private:
  test::ChildProcess process_;
  std::string address_;
};

// A secret file other than the scratch one.
std::string otherSecret(const test::Scratch& scratch) {
  const std::string path = (scratch.dir / "other-secret").string();
  std::ofstream(path) << "not the cluster's secret\n";
  std::filesystem::permissions(
      path, std::filesystem::perms::owner_read | std::filesystem::perms::owner_write,
      std::filesystem::perm_options::replace);
  return path;
}

// Runs a peer that cannot get in (--join-timeout `timeout`, 2 s unless given): it exits with
// status 3 after at least the timeout and before `deadline` seconds (well before a long start
// timeout), and says `cause` in its one error line.
void checkCannotJoin(const std::string& args, const std::string& cause, int timeout = 2,
                     double deadline = 30.0) {
  const Clock::time_point start = Clock::now();
  const test::ProcessResult r = test::runCommand(
      test::peerCommand("--listen 127.0.0.1:0 --join-timeout " + std::to_string(timeout) +
                        " --start-timeout 100 " + kData + args),
      60);
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  INFO(args << "\n" << r.output);
  CHECK(r.exitCode == kExitCannotJoin);
  CHECK(seconds >= timeout);
  CHECK(seconds < deadline);
  const std::string line = "gossamer-peer: error: could not join the cluster within " +
                           std::to_string(timeout) + " s (--join-timeout): " + cause;
  CHECK(r.output.find(line) != std::string::npos);
  // One error line: the first is the last.
  CHECK(r.output.find("error:") == r.output.rfind("error:"));
}

TEST_CASE("join processes: a peer whose secret the seed refuses says so and exits") {
  test::Watchdog watchdog(90s);
  test::Scratch scratch;
  Seed seed(scratch, "--hidden 16");
  checkCannotJoin("--hidden 16 --min-peers 2 --seeds " + seed.address() + " --secret-file " +
                      otherSecret(scratch),
                  "every seed refused authentication (wrong --secret-file?)");
}

TEST_CASE("join processes: a wrong-secret peer (TLS by default) exits within 15 s of a 10 s timeout") {
  test::Watchdog watchdog(90s);
  test::Scratch scratch;
  Seed seed(scratch, "--hidden 16");
  checkCannotJoin("--hidden 16 --min-peers 2 --seeds " + seed.address() + " --secret-file " +
                      otherSecret(scratch),
                  "every seed refused authentication (wrong --secret-file?)", 10, 15.0);
  // The seed refused it in the TLS handshake (its key is derived from another secret), and says
  // so in its log of refused handshakes.
  CHECK(test::waitUntil(10s, [&] {
    return seed.output().find("refused an inbound handshake from 127.0.0.1: wrong secret or "
                              "identity") != std::string::npos;
  }));
}

TEST_CASE("join processes: a plaintext peer and a TLS seed each say that the other differs") {
  test::Watchdog watchdog(90s);
  test::Scratch scratch;
  Seed seed(scratch, "--hidden 16");
  checkCannotJoin("--hidden 16 --min-peers 2 --insecure-plaintext --seeds " + seed.address() +
                      " --secret-file " + scratch.secret,
                  "the seeds and this peer disagree on TLS (");
  CHECK(test::waitUntil(10s, [&] {
    const std::string& out = seed.output();
    return out.find("refused an inbound handshake from 127.0.0.1: not TLS") != std::string::npos &&
           out.find("speaks plaintext and this side TLS; start both with or without "
                    "--insecure-plaintext") != std::string::npos;
  }));
}

TEST_CASE("join processes: a peer training alone gives up at the join timeout too") {
  // --min-peers 1: it starts at once, alone, while the seed keeps refusing its secret.
  test::Watchdog watchdog(90s);
  test::Scratch scratch;
  Seed seed(scratch, "--hidden 16");
  checkCannotJoin("--hidden 16 --min-peers 1 --steps 100000 --step-time 5 --seeds " +
                      seed.address() + " --secret-file " + otherSecret(scratch),
                  "every seed refused authentication (wrong --secret-file?)");
}

TEST_CASE("join processes: a peer whose only seed is a closed port names it unreachable") {
  test::Watchdog watchdog(90s);
  test::Scratch scratch;
  checkCannotJoin("--min-peers 2 --seeds 127.0.0.1:1 --secret-file " + scratch.secret,
                  "every seed was unreachable: 127.0.0.1:1 (");
}

TEST_CASE("join processes: a peer of another model names the model difference") {
  test::Watchdog watchdog(90s);
  test::Scratch scratch;
  Seed seed(scratch, "--hidden 16");
  checkCannotJoin(
      "--hidden 32 --min-peers 2 --seeds " + seed.address() + " --secret-file " + scratch.secret,
      "the cluster's model differs from this peer's (model fingerprint differs: "
      "parameters ");
}

TEST_CASE("join processes: seeds that fail differently are named each with its cause") {
  test::Watchdog watchdog(90s);
  test::Scratch scratch;
  Seed seed(scratch, "--hidden 16");
  checkCannotJoin("--hidden 32 --min-peers 2 --seeds 127.0.0.1:1," + seed.address() +
                      " --secret-file " + scratch.secret,
                  "the seeds failed differently: 127.0.0.1:1 was unreachable (");
}

// Peers 1 (the seed) and 2 (--join-timeout 2) of a cluster of peer processes.
test::PeerProcesses joinedPair(const std::string& flags) {
  return test::PeerProcesses(kData + "--hidden 16 --comm-timeout 2 " + flags);
}

TEST_CASE("join processes: a peer that got in and lost its seed keeps training, not giving up") {
  test::Watchdog watchdog(90s);
  // 600 steps of at least 10 ms: peer 2 trains on for seconds after the seed is killed, well past
  // its join timeout, alone, and finishes as a survivor does.
  test::PeerProcesses peers = joinedPair("--min-peers 2 --steps 600 --step-time 10");
  peers.start(1);
  peers.start(2, "--join-timeout 2");
  REQUIRE(peers.waitForStep(2, 30, 60s));
  peers[1].kill(SIGKILL);
  const int code = peers[2].wait(60s);
  const std::string output = peers[2].output();
  INFO(output);
  CHECK(code == 0);
  CHECK(test::jsonNumber(test::lastLine(output), "steps") == 600);
  CHECK(output.find("could not join") == std::string::npos);
}

TEST_CASE("join processes: a peer that got in and lost its seed before training waits as usual") {
  // Got in, then the seed dies before --min-peers 3 are there: no join timeout any more (2 s);
  // the start timeout (8 s) ends the wait, as it did before there was one.
  test::Watchdog watchdog(90s);
  test::PeerProcesses peers = joinedPair("--min-peers 3 --start-timeout 8");
  peers.start(1);
  peers.start(2, "--join-timeout 2");
  REQUIRE(test::waitUntil(
      30s, [&] { return peers[2].output().find("joined through") != std::string::npos; }));
  peers[1].kill(SIGKILL);
  const int code = peers[2].wait(60s);
  const std::string output = peers[2].output();
  INFO(output);
  CHECK(code == 1);
  CHECK(output.find("(--min-peers) joined within 8 s") != std::string::npos);
  CHECK(output.find("could not join") == std::string::npos);
}

}  // namespace
}  // namespace gossamer
