// The gossamer-peer binary end to end: a --json run, and clear errors for bad input.
#include <doctest/doctest.h>


#include <string>

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
  for (const char* key : {"\"test_accuracy\":", "\"test_loss\":", "\"steps\":126", "\"wall_s\":",
                          "\"samples_per_s\":"}) {
    CHECK(last.find(key) != std::string::npos);
  }
  CHECK(test::jsonNumber(last, "test_accuracy") > 0.5);
}

TEST_CASE("peer cli: bad flags and bad input fail with a clear message") {
  auto check = [](const std::string& args, const std::string& expected) {
    const test::ProcessResult r = test::runCommand(peer(args));
    INFO(args << "\n" << r.output);
    CHECK(r.exitCode != 0);
    CHECK(r.output.find(expected) != std::string::npos);
  };
  check("--optimizer lion", "--optimizer");
  check("--batch 0", "--batch");
  check("--no-such-flag", "no-such-flag");
  check("--model resnet --dataset synthetic", "unknown model 'resnet'");
  check("--dataset fashion-mnist --data-dir /nonexistent/fmnist", "dataset-fashion-mnist");
  check("--dataset synthetic --resume", "--resume needs --checkpoint");
  check("--dataset synthetic --shards 2 --shard-index 2", "--shard-index 2 must be below --shards 2");
  check("--dataset synthetic --resume --checkpoint /nonexistent/ckpt", "/nonexistent/ckpt");
}

}  // namespace
}  // namespace gossamer
