// The built-in decentralized optimizers, by name, for the engine's Registry (algorithms/README.md
// lists them). The algorithms library sits above the engine (tests/check_layering.cmake checks
// the include arrows), so engine::makeBuiltinRegistry() cannot name them; binaries call
// makeRegistry(), which is both.
#pragma once

#include "engine/registry.h"

namespace gossamer::algorithms {

// Adds every built-in algorithm to `registry`.
void addBuiltinAlgorithms(engine::Registry& registry);

// engine::makeBuiltinRegistry() plus the built-in algorithms: what gossamer-peer and
// gossamer-bench start from.
engine::Registry makeRegistry();

}  // namespace gossamer::algorithms
