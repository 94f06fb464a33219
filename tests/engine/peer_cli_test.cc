// The gossamer-peer binary end to end: a --json run, and clear errors for bad input.
#include <algorithm>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include "engine/builtin.h"
#include "tests/engine/peer_processes.h"
#include "tests/process_util.h"

namespace gossamer {
namespace {

std::string peer(const std::string& args) { return std::string(GOSSAMER_PEER_BINARY) + " " + args; }

TEST_CASE("peer cli: --json prints one JSON result object as the last stdout line") {
  const test::ProcessResult r = test::runCommand(
      peer("--dataset synthetic --train-samples 2000 --test-samples 500 --hidden 32 --epochs 2 "
           "--batch 32 --lr 0.05 --json --log-level warn"));
  REQUIRE(r.exitCode == 0);
  const std::string last = test::lastLine(r.output);
  INFO(r.output);
  CHECK(last.front() == '{');
  for (const char* key : {"\"test_accuracy\":", "\"test_loss\":", "\"steps\":126",
                          "\"wall_s\":", "\"samples_per_s\":"}) {
    CHECK(last.find(key) != std::string::npos);
  }
  CHECK(test::jsonNumber(last, "test_accuracy") > 0.5);
}

TEST_CASE("peer cli: bad flags and bad input fail with a clear message, the sentence only") {
  auto check = [](const std::string& args, const std::string& expected) {
    const test::ProcessResult r = test::runCommand(peer(args));
    INFO(args << "\n" << r.output);
    CHECK(r.exitCode != 0);
    CHECK(r.output.find(expected) != std::string::npos);
    // The user's error is the sentence; the check and source location are for --log-level debug.
    CHECK(r.output.find("check failed") == std::string::npos);
    CHECK(r.output.find(".cc:") == std::string::npos);
  };
  check("--optimizer lion", "--optimizer");
  check("--batch 0", "--batch");
  check("--no-such-flag", "no-such-flag");
  check("--model resnet --dataset synthetic", "unknown model 'resnet'");
  check("--dataset fashion-mnist --data-dir /nonexistent/fmnist", "dataset-fashion-mnist");
  check("--dataset synthetic --resume", "--resume needs --checkpoint");
  check("--dataset synthetic --shards 2 --shard-index 2",
        "--shard-index 2 must be below --shards 2");
  check("--dataset synthetic --resume --checkpoint /nonexistent/ckpt", "/nonexistent/ckpt");
  check("--device tpu", "--device");
  check("--join-timeout -1", "--join-timeout: '-1' is not a number of seconds (0 or more)");
  check("--join-timeout nan", "--join-timeout: 'nan' is not a number of seconds");
  check("--start-timeout inf", "--start-timeout: 'inf' is not a number of seconds (more than 0)");
  check("--algorithm gosgd --listen 127.0.0.1:0", "--secret-file is required");
  check("--local 2 --algorithm gosgd --dataset synthetic --transport-option keep-alive=false",
        "--local peers take --local-transport");
  check("--algorithm gosgd --dataset synthetic --peer-step-times 300,600 --listen 127.0.0.1:0",
        "a peer process takes --step-time");
  check("--dataset synthetic --tcp-streams 0", "--tcp-streams takes auto or a count");
  check("--dataset synthetic --tcp-streams 65", "in [1, 64], not '65'");
}

TEST_CASE("peer cli: --tcp-streams carries each tcp link over several connections") {
  // gosgd sends whole models of 4.4 MB: each is striped over the three connections.
  const test::ProcessResult r = test::runCommand(
      peer("--local 2 --local-transport tcp --tcp-streams 3 --algorithm gosgd --dataset synthetic "
           "--train-samples 2000 --test-samples 500 --hidden 1024,1024 --epochs 1 --batch 32 "
           "--lr 0.05 --json --log-level info"));
  INFO(r.output);
  REQUIRE(r.exitCode == 0);
  CHECK(r.output.find(": 3 connections (fixed)") != std::string::npos);
  CHECK(test::jsonNumber(test::lastLine(r.output), "test_accuracy") > 0.5);
}

TEST_CASE("peer cli: --json reports the knobs auto chose under \"chosen\", and none that were fixed") {
  // 50 ms steps: the speeds and every pair's round trip are measured within a few seconds, and a
  // survey at step 32, 64 or 128 chooses. On the emulated lan an exchange takes a few ms, far
  // below 5% of 10 steps: h is its lower bound, 10.
  const std::string run =
      "--local 3 --algorithm diloco --dataset synthetic --train-samples 2000 --test-samples 500 "
      "--hidden 32 --epochs 3.5 --batch 16 --lr 0.05 --step-time 50 --json --log-level info";
  const test::ProcessResult chosen = test::runCommand(peer(run));
  INFO(chosen.output);
  REQUIRE(chosen.exitCode == 0);
  const std::string last = test::lastLine(chosen.output);
  CHECK(last.find("\"chosen\":{\"diloco.h\":10}") != std::string::npos);
  CHECK(chosen.output.find("diloco: h = 10 (auto: survey at step") != std::string::npos);
  const test::ProcessResult fixed = test::runCommand(peer(run + " --diloco.h 12"));
  REQUIRE(fixed.exitCode == 0);
  CHECK(test::lastLine(fixed.output).find("\"chosen\":{}") != std::string::npos);
  const test::ProcessResult bad = test::runCommand(peer(run + " --diloco.h fast"));
  CHECK(bad.exitCode != 0);
  CHECK(bad.output.find("'h'") != std::string::npos);
}

TEST_CASE("peer cli: the source location of an error goes to the debug log") {
  const test::ProcessResult r =
      test::runCommand(peer("--dataset synthetic --resume --log-level debug"));
  INFO(r.output);
  CHECK(r.exitCode != 0);
  CHECK(r.output.find("--resume needs --checkpoint") != std::string::npos);
  CHECK(r.output.find("that error was raised at") != std::string::npos);
  CHECK(r.output.find("peer_config.cc:") != std::string::npos);  // where the check is
}

TEST_CASE("peer cli: --device cuda fails at start where no GPU is usable, auto falls back") {
  std::string reason;
  if (engine::cudaUsable(&reason)) {
    MESSAGE("skipped: this machine has a usable GPU");
    return;
  }
  const std::string run =
      "--dataset synthetic --train-samples 500 --test-samples 100 --hidden 8 --epochs 1 --json ";
  const test::ProcessResult cuda = test::runCommand(peer(run + "--device cuda"));
  INFO(cuda.output);
  CHECK(cuda.exitCode == 1);
  CHECK(cuda.output.find("--device cuda: no usable GPU: " + reason) != std::string::npos);
  const test::ProcessResult automatic = test::runCommand(peer(run + "--log-level info"));
  INFO(automatic.output);
  CHECK(automatic.exitCode == 0);
  CHECK(automatic.output.find("no usable GPU (" + reason + "); computing on the cpu") !=
        std::string::npos);
  CHECK(test::lastLine(automatic.output).find("\"device\":\"cpu") != std::string::npos);
}

// A single peer is a cluster of one: the same loop, so the same evaluation events (keys and
// all) in the metrics file as a cluster peer's, and a checkpoint it can resume from.
TEST_CASE("peer cli: a single peer runs the cluster's training loop, metrics and checkpoints") {
  test::Scratch scratch;
  const std::string data =
      "--dataset synthetic --train-samples 2000 --test-samples 500 --hidden 16 --batch 32 "
      "--log-level warn --json ";
  const std::string single = (scratch.dir / "single.jsonl").string();
  const std::string cluster = (scratch.dir / "cluster.jsonl").string();
  const std::string checkpoint = (scratch.dir / "single.ckpt").string();
  REQUIRE(test::runCommand(
              peer(data + "--epochs 2 --metrics " + single + " --checkpoint " + checkpoint))
              .exitCode == 0);
  REQUIRE(test::runCommand(peer(data +
                                "--epochs 2 --local 2 --algorithm gosgd --eval-every 63 "
                                "--metrics " +
                                cluster))
              .exitCode == 0);
  // The keys of the first evaluation event in a metrics file.
  auto evalKeys = [](const std::string& path) {
    std::ifstream in(path);
    std::string line;
    std::getline(in, line);
    INFO(path << ": " << line);
    CHECK(line.find("\"event\":\"eval\"") != std::string::npos);
    std::vector<std::string> keys;
    static const std::regex key("\"([a-z_]+)\":");
    for (std::sregex_iterator it(line.begin(), line.end(), key), end; it != end; ++it)
      keys.push_back((*it)[1]);
    return keys;
  };
  const std::vector<std::string> singleKeys = evalKeys(single);
  CHECK(singleKeys == evalKeys(cluster));
  for (const char* key : {"peer", "step", "epoch", "train_loss", "test_accuracy", "bytes_sent"})
    CHECK(std::find(singleKeys.begin(), singleKeys.end(), key) != singleKeys.end());
  // Two more epochs from the checkpoint: the run goes on from step 126, not from 0.
  const test::ProcessResult resumed = test::runCommand(
      peer(data + "--epochs 4 --resume --checkpoint " + checkpoint + " --metrics " + single));
  INFO(resumed.output);
  REQUIRE(resumed.exitCode == 0);
  CHECK(test::jsonNumber(test::lastLine(resumed.output), "steps") == 252);
  std::stringstream written;
  written << std::ifstream(single).rdbuf();
  CHECK(written.str().find("\"step\":189") != std::string::npos);  // epoch 3, appended
}

TEST_CASE("peer cli: --step-time paces the steps and --json reports the compute utilization") {
  const test::ProcessResult r = test::runCommand(
      peer("--local 2 --algorithm gosgd --dataset synthetic --train-samples 2000 "
           "--test-samples 200 --hidden 8 --epochs 1 --batch 32 --step-time 10 --json "
           "--log-level warn"));
  INFO(r.output);
  REQUIRE(r.exitCode == 0);
  const std::string json = test::lastLine(r.output);
  const double steps = test::jsonNumber(json, "steps");
  CHECK(steps >= 30);
  CHECK(test::jsonNumber(json, "wall_s") >= steps * 0.010);
  CHECK(test::jsonNumber(json, "utilization") > 0.5);
  CHECK(test::jsonNumber(json, "utilization") <= 1.0);
  // The waits and the time they are a fraction of: the loop and the finish.
  CHECK(test::jsonNumber(json, "comm_wait_fraction") <= 1.0);
  CHECK(test::jsonNumber(json, "finish_s") > 0);
  CHECK(json.find("\"device\":\"cpu") != std::string::npos);  // what the peers computed on
  // Memory: the largest peer's tracked peak, against the model, and the process's.
  // (the synthetic dataset's 64 features and 10 classes through a hidden layer of 8).
  const double modelBytes = 4.0 * ((64 * 8 + 8) + (8 * 10 + 10));
  CHECK(test::jsonNumber(json, "peak_bytes_per_peer") >= 2 * modelBytes);  // params and grads
  CHECK(test::jsonNumber(json, "peak_memory_vs_model") ==
        doctest::Approx(test::jsonNumber(json, "peak_bytes_per_peer") / modelBytes));
  CHECK(test::jsonNumber(json, "peak_rss_bytes") >= test::jsonNumber(json, "peak_bytes_per_peer"));
}

}  // namespace
}  // namespace gossamer
