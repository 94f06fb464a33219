// What launchers rely on, multi-process: every gossamer-peer flag can come from an environment
// variable GOSSAMER_<FLAG> (the command line and a --config file winning), and seeds may be host
// names, resolved at each join attempt: a name that resolves joins, a peer's own name in its seed
// list is skipped, and a name that does not resolve is an unreachable seed that --join-timeout
// ends with a line naming it.
#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>

#include <arpa/inet.h>
#include <doctest/doctest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "tests/engine/peer_processes.h"
#include "tests/process_util.h"
#include "tests/support/watchdog.h"

namespace gossamer {
namespace {

using namespace std::chrono_literals;

constexpr int kExitCannotJoin = 3;  // gossamer-peer --help, --join-timeout
const std::string kData =
    "--dataset synthetic --train-samples 2000 --test-samples 200 --batch 32 --lr 0.05 "
    "--membership local --algorithm gosgd ";

// A TCP port on 127.0.0.1 that was free a moment ago (for a peer that must name its own port in
// its seed list before it listens).
int freePort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(fd >= 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof(address);
  const bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0 &&
                  ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) == 0;
  ::close(fd);
  REQUIRE(ok);
  return ntohs(address.sin_port);
}

// `command` in a network namespace of its own (loopback only) where this process may make one
// (root, util-linux unshare): a name lookup there fails at once and sends nothing to the
// machine's DNS server. Elsewhere `command` as it is.
std::string offline(const std::string& command) {
  static const bool canUnshare = test::runCommand("unshare -n ip link set lo up", 10).exitCode == 0;
  return canUnshare ? "unshare -n sh -c 'ip link set lo up && exec " + command + "'" : command;
}

TEST_CASE("launch processes: every flag can come from GOSSAMER_<FLAG>, the command line winning") {
  test::Watchdog watchdog(60s);
  const std::string describe = test::peerCommand("--json");
  // Plain, numeric and boolean flags from the environment.
  test::ProcessResult r =
      test::runCommand("env GOSSAMER_DESCRIBE_TOPOLOGY=ring GOSSAMER_PEERS=8 " + describe, 30);
  INFO(r.output);
  CHECK(r.exitCode == 0);
  CHECK(r.output.find("\"topology\":\"ring\"") != std::string::npos);
  CHECK(test::jsonNumber(test::lastLine(r.output), "peers") == 8);
  // The command line wins over the environment.
  r = test::runCommand(
      "env GOSSAMER_DESCRIBE_TOPOLOGY=ring GOSSAMER_PEERS=8 " + describe + " --peers 5", 30);
  CHECK(r.exitCode == 0);
  CHECK(test::jsonNumber(test::lastLine(r.output), "peers") == 5);
  // A flag's checks hold for its variable, with the flag's name in the message.
  r = test::runCommand("env GOSSAMER_JOIN_TIMEOUT=-1 " + describe, 30);
  CHECK(r.exitCode != 0);
  CHECK(r.output.find("--join-timeout: '-1' is not a number of seconds (0 or more)") !=
        std::string::npos);
  // Algorithm options too (GOSSAMER_GOSGD_P is --gosgd.p).
  r = test::runCommand("env GOSSAMER_GOSGD_P=0.5 GOSSAMER_ALGORITHM=easgd GOSSAMER_LOCAL=2 " +
                           test::peerCommand("--dataset synthetic"),
                       30);
  CHECK(r.exitCode == 1);
  CHECK(r.output.find("--gosgd.p is an option of algorithm gosgd, but --algorithm is easgd") !=
        std::string::npos);
  // A GOSSAMER_ variable that names no flag is a warning, not silence.
  r = test::runCommand("env GOSSAMER_DESCRIBE_TOPOLOGY=ring GOSSAMER_SEEED=x " + describe, 30);
  CHECK(r.exitCode == 0);
  CHECK(r.output.find("warning: environment variable GOSSAMER_SEEED names no flag") !=
        std::string::npos);
}

TEST_CASE("launch processes: GOSSAMER_CONFIG names a config file, which beats the environment") {
  test::Watchdog watchdog(60s);
  test::Scratch scratch;
  const std::string config = (scratch.dir / "peer.toml").string();
  std::ofstream(config) << "describe-topology = \"hypercube\"\npeers = 16\n";
  test::ProcessResult r = test::runCommand(
      "env GOSSAMER_CONFIG=" + config + " GOSSAMER_PEERS=8 " + test::peerCommand("--json"), 30);
  INFO(r.output);
  CHECK(r.exitCode == 0);
  CHECK(r.output.find("\"topology\":\"hypercube\"") != std::string::npos);
  CHECK(test::jsonNumber(test::lastLine(r.output), "peers") == 16);
  // A config file that is not there is an error, not silently nothing.
  r = test::runCommand("env GOSSAMER_CONFIG=" + config + ".missing " + test::peerCommand("--json"),
                       30);
  CHECK(r.exitCode != 0);
  CHECK(r.output.find(config + ".missing") != std::string::npos);
}

TEST_CASE("launch processes: seeds by host name join and a peer skips its own name") {
  test::Watchdog watchdog(120s);
  test::Scratch scratch;
  const std::string common =
      kData + "--hidden 16 --steps 60 --secret-file " + scratch.secret + " --join-timeout 20 ";
  // Alone, with only its own name as a seed: it must see that the seed is itself and start the
  // cluster (were it to ask itself to join, it would be refused and give up at the join timeout).
  const int own = freePort();
  test::ProcessResult alone = test::runCommand(
      test::peerCommand("--listen 127.0.0.1:" + std::to_string(own) + " --seeds localhost:" +
                        std::to_string(own) + " --min-peers 1 --log-level debug " + common),
      60);
  INFO(alone.output);
  CHECK(alone.exitCode == 0);
  CHECK(alone.output.find("is this peer itself") != std::string::npos);

  // Two peers whose seed lists name both by host name, themselves included.
  const int first = freePort();
  int second = freePort();
  while (second == first) second = freePort();
  const std::string seeds =
      " --seeds localhost:" + std::to_string(first) + ",localhost:" + std::to_string(second);
  test::ChildProcess a(test::peerCommand("--listen 127.0.0.1:" + std::to_string(first) + seeds +
                                         " --min-peers 2 --json " + common),
                       (scratch.dir / "a.log").string());
  test::ChildProcess b(test::peerCommand("--listen 127.0.0.1:" + std::to_string(second) + seeds +
                                         " --min-peers 2 --json " + common),
                       (scratch.dir / "b.log").string());
  const int codeA = a.wait(90s);
  const int codeB = b.wait(90s);
  INFO(a.output() << "\n----\n" << b.output());
  CHECK(codeA == 0);
  CHECK(codeB == 0);
  CHECK(test::jsonNumber(test::lastLine(a.output()), "peers") == 2);
  CHECK(test::jsonNumber(test::lastLine(b.output()), "peers") == 2);
}

TEST_CASE("launch processes: --advertise HOST advertises the port listened on") {
  // Its seed, 127.0.0.1:PORT, is itself by another name: the handshake there answers with the
  // advertised localhost:PORT and this peer's id.
  test::Watchdog watchdog(60s);
  test::Scratch scratch;
  const std::string port = std::to_string(freePort());
  const test::ProcessResult r = test::runCommand(
      test::peerCommand("--listen 127.0.0.1:" + port + " --advertise localhost --seeds 127.0.0.1:" +
                        port + " --min-peers 1 --steps 20 --join-timeout 20 --log-level debug " +
                        "--hidden 16 --secret-file " + scratch.secret + " " + kData),
      40);
  INFO(r.output);
  CHECK(r.exitCode == 0);
  CHECK(r.output.find("listening on localhost:" + port) != std::string::npos);
  CHECK(r.output.find("seed 127.0.0.1:" + port + " is this peer itself") != std::string::npos);
}

TEST_CASE("launch processes: a seed name that does not resolve is named at the join timeout") {
  test::Watchdog watchdog(60s);
  test::Scratch scratch;
  const test::ProcessResult r = test::runCommand(
      offline(test::peerCommand("--listen 127.0.0.1:0 --join-timeout 2 --start-timeout 100 "
                                "--min-peers 2 --seeds no-such-host.invalid:7000 --secret-file " +
                                scratch.secret + " " + kData)),
      40);
  INFO(r.output);
  CHECK(r.exitCode == kExitCannotJoin);
  CHECK(r.output.find("gossamer-peer: error: could not join the cluster within 2 s "
                      "(--join-timeout): every seed was unreachable: no-such-host.invalid:7000 "
                      "(its host name 'no-such-host.invalid' does not resolve: ") !=
        std::string::npos);
}

}  // namespace
}  // namespace gossamer
