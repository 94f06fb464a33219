// gossamer-bench chaos as a user runs it, at the moments that used to break a cluster: peers as
// gossamer-peer processes (--processes) under a kill -9, restarts without --resume at the same
// address, a kill and a join in the same second and a join during the finish; the same kinds with
// peers as threads; and the kinds a process run cannot have, refused. Every run must end with no
// invariant violation and no hang, every process within 10 s of the cluster's last step.
#include <string>

#include <doctest/doctest.h>

#include "tests/process_util.h"

namespace gossamer {
namespace {

const std::string kSmall =
    " --peers 4 --algorithm allreduce-sgd --dataset synthetic --hidden 16 --minutes 0.25"
    " --step-ms 30 --no-baseline --json";

std::string chaos(const std::string& args) {
  return std::string(GOSSAMER_BENCH_BINARY) + " chaos" + kSmall + " " + args;
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// Seed 22 draws each of the four kinds below (the schedule is printed before the run).
TEST_CASE("bench chaos: processes survive kills, restarts without resume and joins at the end") {
  const test::ProcessResult run = test::runCommand(
      chaos("--processes --seed 22 --faults 5 --kinds kill,restart-fresh,kill-join,join-finishing"),
      240);
  INFO(run.output);
  REQUIRE(run.exitCode == 0);
  for (const char* kind : {"kill -9 of peer", "restart without resume of peer",
                           "kill -9 and a join in the same second: peer",
                           "join during the finish: peer"})
    CHECK(contains(run.output, kind));
  const std::string json = test::lastLine(run.output);
  CHECK(test::jsonNumber(json, "invariant_violations") == 0);
  CHECK(test::jsonNumber(json, "hangs") == 0);
  CHECK(test::jsonNumber(json, "max_exit_after_last_step_s") < 10);
  CHECK(test::jsonNumber(json, "survivors") >= 2);
}

TEST_CASE("bench chaos: threads survive restarts without resume and a kill with a join") {
  const test::ProcessResult run = test::runCommand(
      chaos("--seed 22 --faults 5 --kinds kill,restart-fresh,kill-join,join-finishing"), 240);
  INFO(run.output);
  REQUIRE(run.exitCode == 0);
  CHECK(contains(run.output, "restart without resume of peer"));
  CHECK(contains(run.output, "kill -9 and a join in the same second"));
  CHECK(test::jsonNumber(test::lastLine(run.output), "invariant_violations") == 0);
}

TEST_CASE("bench chaos: a process run refuses the kinds that need the threads' shaped links") {
  const test::ProcessResult run = test::runCommand(chaos("--processes --kinds kill,partition"), 60);
  INFO(run.output);
  CHECK(run.exitCode != 0);
  CHECK(contains(run.output, "partition"));
}

}  // namespace
}  // namespace gossamer
