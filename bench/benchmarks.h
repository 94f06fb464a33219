// The subcommands of gossamer-bench. Each lives in its own file and registers its options and
// its run callback on the top-level app; main() only calls these and parses the command line.
#pragma once

namespace CLI {
class App;
}

namespace gossamer::bench {

// `kernels`: GB/s of the fused element-wise kernels next to memcpy (kernels_bench.cc).
void addKernelsCommand(CLI::App& app);

// `mlp`: MLP training throughput next to a bare sgemm of the same shapes (mlp_bench.cc).
void addMlpCommand(CLI::App& app);

// `shaped`: one-way latency and throughput of the shaped transport next to its profile
// (shaped_bench.cc).
void addShapedCommand(CLI::App& app);

// `transport`: transport bulk GB/s and envelope round trip; tcp next to raw blocking sockets,
// ibverbs (--transport ibverbs) next to tcp (transport_bench.cc).
void addTransportCommand(CLI::App& app);

// `membership`: SWIM failure detection and join times in units of T, false failures under loss,
// protocol bytes per member (membership_bench.cc).
void addMembershipCommand(CLI::App& app);

// `convergence`: a matrix of decentralized training runs; report, CSV and plots
// (convergence_bench.cc).
void addConvergenceCommand(CLI::App& app);

}  // namespace gossamer::bench
