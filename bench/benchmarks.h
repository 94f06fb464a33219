// The subcommands of gossamer-bench. Each lives in its own file and registers its options and
// its run callback on the top-level app; main() only calls these and parses the command line.
#pragma once

namespace CLI {
class App;
}

namespace gossamer::bench {

// `kernels`: GB/s of the fused element-wise kernels next to memcpy (kernels_bench.cc).
void addKernelsCommand(CLI::App& app);

// `models`: training throughput of the built-in models (mlp, lenet, cnn) next to bare GEMM of the
// same shapes (models_bench.cc).
void addModelsCommand(CLI::App& app);

// `shaped`: one-way latency and throughput of the shaped transport next to its profile
// (shaped_bench.cc).
void addShapedCommand(CLI::App& app);

// `transport`: transport bulk GB/s and envelope round trip; tcp next to raw blocking sockets,
// ibverbs (--transport ibverbs) next to tcp (transport_bench.cc).
void addTransportCommand(CLI::App& app);

// `membership`: SWIM failure detection and join times in units of T, false failures under loss,
// protocol bytes per member (membership_bench.cc).
void addMembershipCommand(CLI::App& app);
// `join`: a joiner catching up a large model in verified chunks from 1, 2 and 4 members, against
// bytes over the sources' total bandwidth (join_bench.cc).
void addJoinCommand(CLI::App& app);
// `relay`: a relayed link's bulk throughput against a direct link's, TLS on, shaped links
// (relay_bench.cc).
void addRelayCommand(CLI::App& app);

// `convergence`: a matrix of decentralized training runs; report, CSV and plots
// (convergence_bench.cc).
void addConvergenceCommand(CLI::App& app);

// `chaos`: a randomised, replayable fault schedule over a running local cluster; accuracy next
// to the fault-free run and invariant violations (chaos_bench.cc).
void addChaosCommand(CLI::App& app);

// `simulate`: the algorithms on N simulated peers in virtual time, replayable from a seed; the
// report of `convergence` plus wall time and memory (simulate_bench.cc).
void addSimulateCommand(CLI::App& app);

}  // namespace gossamer::bench
