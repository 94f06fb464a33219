// `gossamer-bench simulate --sweep N`: N seeds, each a short simulated run of one algorithm (seed
// s runs the s-th of the algorithms, in name order, modulo their count, so that N seeds cover
// them all) under a fault schedule drawn from the seed: kills, restarts (from a checkpoint when
// the peer has one), joins, partitions, loss and stragglers at random moments from the first
// step to past the last, so that the start and finish phases are hit. Each run checks that every
// live peer ends within the bound (3x the run's compute time plus 120 virtual seconds) and the
// algorithm's declared invariants (Algorithm::invariants), as every simulated run does. A
// failing seed prints its violations and the command that replays it alone.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace gossamer::bench {

struct SweepOptions {
  std::uint64_t seeds = 0;              // --sweep N
  std::uint64_t firstSeed = 1;          // --seed: the seeds are firstSeed .. firstSeed + N - 1
  std::vector<std::string> algorithms;  // empty: every registered one
  double maxVirtualSeconds = 0;  // > 0: this bound instead of the default (a test's broken run)
  bool json = false;
};

// Runs the sweep, printing a line per failing seed and a summary (and a --json line). Returns the
// process exit status: 0 when every seed kept every invariant, 1 otherwise.
int runSweep(const SweepOptions& options);

}  // namespace gossamer::bench
