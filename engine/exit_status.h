// The exit statuses of gossamer-peer (documented in its --help and engine/README.md), for the
// programs and tests that run it.
#pragma once

#include <chrono>

namespace gossamer::engine::cli {

// 0: done (or left the cluster on SIGINT/SIGTERM); 1: failed, the cause in one line on stderr.
// A peer with --seeds that joined no one within --join-timeout.
inline constexpr int kExitCannotJoin = 3;
// The cluster it came to had trained all its steps (its run was ending): nothing to join.
inline constexpr int kExitClusterDone = 4;
// Its training stalled (no step for twice --stall-timeout while waiting on the others).
inline constexpr int kExitStalled = 5;
// SIGINT/SIGTERM, and the graceful leave did not end within kLeaveBound: it exited anyway.
inline constexpr int kExitLeaveCut = 6;
inline constexpr std::chrono::seconds kLeaveBound{2};

}  // namespace gossamer::engine::cli
