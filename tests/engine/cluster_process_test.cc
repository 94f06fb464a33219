// Multi-process tests: four gossamer-peer processes on 127.0.0.1 joined by a seed list train
// together, and a networked peer refuses bad configuration clearly.
#include <filesystem>
#include <fstream>
#include <memory>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include <doctest/doctest.h>

#include "tests/engine/peer_processes.h"
#include "tests/process_util.h"
#include "tests/support/watchdog.h"

namespace gossamer {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

using test::listeningPort;
using test::Scratch;

std::string peer(const std::string& args) { return test::peerCommand(args); }

TEST_CASE(
    "cluster processes: four gossamer-peer processes joined by seeds train to a target accuracy") {
  test::Watchdog watchdog(240s);
  Scratch scratch;
  const std::string common =
      "--secret-file " + scratch.secret +
      " --algorithm gosgd --gosgd.p 0.2 --min-peers 4 --dataset fashion-mnist --train-samples 8000 "
      "--test-samples 2000 --hidden 64 --epochs 4 --batch 32 --lr 0.05 --json --log-level info";
  std::vector<std::unique_ptr<test::ChildProcess>> peers;
  peers.push_back(std::make_unique<test::ChildProcess>(peer("--listen 127.0.0.1:0 " + common),
                                                       (scratch.dir / "peer0.log").string()));
  int port = 0;
  REQUIRE(test::waitUntil(30s, [&] { return (port = listeningPort(peers[0]->output())) != 0; }));
  const std::string seed = "127.0.0.1:" + std::to_string(port);
  for (int i = 1; i < 4; ++i) {
    // Each later peer names the first one and, for some, a dead seed that it must skip.
    const std::string seeds = i == 2 ? "127.0.0.1:1," + seed : seed;
    peers.push_back(std::make_unique<test::ChildProcess>(
        peer("--listen 127.0.0.1:0 --seeds " + seeds + " " + common),
        (scratch.dir / ("peer" + std::to_string(i) + ".log")).string()));
  }
  for (auto& p : peers) {
    const int code = p->wait(200s);
    const std::string output = p->output();
    INFO(output);
    REQUIRE(code == 0);
    const std::string json = test::lastLine(output);
    CHECK(test::jsonNumber(json, "peers") == 4);
    CHECK(test::jsonNumber(json, "test_accuracy") > 0.72);  // the consensus model, 8k samples
    CHECK(test::jsonNumber(json, "min_peer_accuracy") > 0.6);
    CHECK(test::jsonNumber(json, "bytes_sent_per_peer") > 0);
    CHECK(json.find("\"algorithm\":\"gosgd\"") != std::string::npos);
  }
  CHECK(peers[2]->output().find("seed 127.0.0.1:1 is unreachable") != std::string::npos);
}

TEST_CASE("cluster processes: bad cluster configuration fails with a clear message") {
  test::Watchdog watchdog(120s);
  Scratch scratch;
  auto check = [](const std::string& args, const std::string& expected) {
    const test::ProcessResult r = test::runCommand(peer(args + " --log-level warn"), 60);
    INFO(args << "\n" << r.output);
    CHECK(r.exitCode != 0);
    CHECK(r.output.find(expected) != std::string::npos);
  };
  check("--dataset synthetic --algorithm gosgd --listen 127.0.0.1:0", "--secret-file is required");
  check("--dataset synthetic --algorithm gosgd --listen 127.0.0.1:0 --secret-file /nonexistent/s",
        "/nonexistent/s");
  check("--dataset synthetic --algorithm nope --local 2", "unknown algorithm 'nope'");
  check("--dataset synthetic --algorithm gosgd --local 2 --gosgd.p 7", "gosgd.p must be in (0, 1]");
  check("--dataset synthetic --algorithm gosgd --local 2 --topology moebius",
        "unknown topology 'moebius'");
  check("--dataset synthetic --algorithm allreduce-sgd --local 2 --compress int9",
        "codec 'int9': unknown codec");
  check("--dataset synthetic --algorithm allreduce-sgd --local 2 --compress topk:2",
        "fraction 2 is outside (0, 1]");
  check("--dataset synthetic --algorithm allreduce-sgd --local 2 --error-feedback maybe",
        "--error-feedback");
  check(
      "--dataset synthetic --listen 0.0.0.0:7000 --algorithm gosgd --secret-file " + scratch.secret,
      "add --advertise");
  // Nobody answers the seed: the start timeout names the seeds.
  check(
      "--dataset synthetic --algorithm gosgd --min-peers 2 --start-timeout 2 --seeds 127.0.0.1:1 "
      "--secret-file " +
          scratch.secret,
      "only 1 of the 2 peers (--min-peers) joined within 2 s; seeds: 127.0.0.1:1");
}

TEST_CASE("cluster processes: --resume refuses a missing, corrupt or mismatched checkpoint") {
  test::Watchdog watchdog(120s);
  Scratch scratch;
  const std::string checkpoints = (scratch.dir / "checkpoints").string();
  const std::string common = "--listen 127.0.0.1:0 --secret-file " + scratch.secret +
                             " --algorithm gosgd --dataset synthetic --train-samples 500 "
                             "--test-samples 100 --peer-id 7 --log-level warn --checkpoint-dir " +
                             checkpoints;
  const std::string file = checkpoints + "/peer-0000000000000007.ckpt";
  auto refused = [&](const std::string& args, const std::string& expected) {
    const test::ProcessResult r = test::runCommand(peer(common + " " + args), 60);
    INFO(args << "\n" << r.output);
    CHECK(r.exitCode != 0);
    CHECK(r.output.find(expected) != std::string::npos);
  };
  refused("--resume", "no checkpoint of peer 0000000000000007");
  // A real checkpoint of a one-peer cluster with 32 hidden units...
  const test::ProcessResult first = test::runCommand(peer(common + " --steps 5 --hidden 32"), 60);
  INFO(first.output);
  REQUIRE(first.exitCode == 0);
  REQUIRE(fs::exists(file));
  // ... does not fit a model with 64, and a damaged copy is refused whole.
  refused("--resume --hidden 64", "is for a different model");
  fs::resize_file(file, fs::file_size(file) / 2);
  refused("--resume --hidden 32", file);
}

TEST_CASE("cluster processes: peers of different models refuse each other") {
  test::Watchdog watchdog(120s);
  Scratch scratch;
  const std::string common =
      "--secret-file " + scratch.secret +
      " --dataset synthetic --algorithm gosgd --min-peers 2 --start-timeout 4 "
      "--log-level info";
  test::ChildProcess first(peer("--listen 127.0.0.1:0 --hidden 32 " + common),
                           (scratch.dir / "a.log").string());
  int port = 0;
  REQUIRE(test::waitUntil(30s, [&] { return (port = listeningPort(first.output())) != 0; }));
  const test::ProcessResult other = test::runCommand(
      peer("--listen 127.0.0.1:0 --hidden 64 --seeds 127.0.0.1:" + std::to_string(port) + " " +
           common),
      60);
  INFO(other.output);
  CHECK(other.exitCode != 0);
  CHECK(other.output.find("model fingerprint differs") != std::string::npos);
  CHECK(first.wait(30s) != 0);  // alone, it times out too
}

}  // namespace
}  // namespace gossamer
