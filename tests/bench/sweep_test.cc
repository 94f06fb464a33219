// gossamer-bench simulate --sweep: seeds of short simulated runs under faults at any moment (start
// and finish included), every algorithm in turn; each checks that every live peer ends and the
// algorithm's declared invariants, and a failing seed prints the command that replays it.
#include <regex>
#include <string>

#include <doctest/doctest.h>

#include "tests/process_util.h"

namespace gossamer {
namespace {

std::string sweep(const std::string& args) {
  return std::string(GOSSAMER_BENCH_BINARY) + " simulate --json " + args;
}

// Seeds 73 to 432: every algorithm about 28 times. The seeds of a full sweep that still fail are
// open findings (bench/README.md, "Fault-schedule sweep"); none is in this range.
TEST_CASE("bench sweep: hundreds of seeds end with no hang and every declared invariant kept") {
  const test::ProcessResult run = test::runCommand(sweep("--sweep 360 --seed 73"), 240);
  INFO(run.output);
  REQUIRE(run.exitCode == 0);
  const std::string json = test::lastLine(run.output);
  CHECK(test::jsonNumber(json, "seeds") == 360);
  CHECK(test::jsonNumber(json, "algorithms") >= 12);
  CHECK(test::jsonNumber(json, "faults") > 360);
  CHECK(test::jsonNumber(json, "hangs") == 0);
  CHECK(test::jsonNumber(json, "invariant_violations") == 0);
}

// Seeds of a full sweep that found a bug, each replayed alone: gosgd counted the weight of a peer
// that died or left twice when its last transfer (a kill's, or a leaver's handover: 787) reached
// a survivor after the survivor had recorded its end (787, 3218, 6416: the record kept the older
// report), or reached a survivor that had never heard from it before and then learned the older
// record from the others (2139, 1476); and lockstep peers whose rounds timed out apart during
// partitions too short for the failure detector stayed apart, every later round waiting out the
// comm timeout (dpsgd 627, allreduce-sgd 1171); dts, whose all-reduce waits in the inbox,
// did not count its expired rounds, so it never looked for a member ahead after such a partition
// (576, 3618); gosgd counted a transfer twice when its sender and its receiver died close
// together, the receiver's weight heard after the merge and the sender's only before (1593); and
// two sides of a partition that ended as two clusters were checked as one (gosgd 7716).
TEST_CASE("bench sweep: seeds that found bugs replay clean") {
  for (const char* seed :
       {"787", "3218", "6416", "2139", "1476", "627", "1171", "576", "3618", "1593", "7716"}) {
    const test::ProcessResult run =
        test::runCommand(sweep(std::string("--sweep 1 --seed ") + seed), 120);
    INFO("seed " << seed << ": " << run.output);
    CHECK(run.exitCode == 0);
  }
}

TEST_CASE("bench sweep: a failing seed prints its replay command, and the replay fails the same") {
  // No run of 30 steps of 300 ms ends within 5 virtual seconds: every seed hangs.
  const test::ProcessResult broken =
      test::runCommand(sweep("--sweep 3 --seed 80 --max-virtual-seconds 5"), 120);
  INFO(broken.output);
  CHECK(broken.exitCode != 0);
  std::smatch replay;
  const std::regex command(
      "replay: gossamer-bench (simulate --sweep 1 --seed 81 --max-virtual-seconds 5)");
  REQUIRE(std::regex_search(broken.output, replay, command));
  const test::ProcessResult again =
      test::runCommand(std::string(GOSSAMER_BENCH_BINARY) + " " + replay[1].str(), 120);
  CHECK(again.exitCode != 0);
  // The same seed's block, word for word.
  const auto block = [](const std::string& text) {
    const std::size_t from = text.find("seed 81 (");
    return from == std::string::npos ? std::string()
                                     : text.substr(from, text.find("  replay:", from) - from);
  };
  CHECK_FALSE(block(again.output).empty());
  CHECK(block(again.output) == block(broken.output));
  // The summary line comes before the error that ends the process.
  const std::size_t summary = broken.output.find("{\"benchmark\":\"simulate-sweep\"");
  REQUIRE(summary != std::string::npos);
  CHECK(test::jsonNumber(broken.output.substr(summary), "hangs") == 3);
}

TEST_CASE("bench sweep: an unknown algorithm is refused with the known ones") {
  const test::ProcessResult run = test::runCommand(sweep("--sweep 2 --algorithms gosgd,nope"), 60);
  CHECK(run.exitCode != 0);
  CHECK(run.output.find("nope") != std::string::npos);
  CHECK(run.output.find("gosgd") != std::string::npos);
}

}  // namespace
}  // namespace gossamer
