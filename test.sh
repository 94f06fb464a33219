#!/usr/bin/env bash
# Quick start, part 2: installs missing Debian packages, builds, and runs every test through
# CTest. Extra arguments go to ctest (e.g. ./test.sh -R kernels).
set -euo pipefail
cd "$(dirname "$0")"
./run.sh --build-only
BUILD_DIR=${BUILD_DIR:-build}
ctest --test-dir "$BUILD_DIR" --output-on-failure -j "${JOBS:-$(nproc)}" --timeout 600 "$@"
