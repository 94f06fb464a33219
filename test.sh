#!/usr/bin/env bash
# Quick start, part 2: installs missing Debian packages, builds, and runs the tests through CTest:
# every test but those labelled `slow` (under 10 minutes on 2 cores); `./test.sh --all` runs those
# too (the multi-host namespace and NAT examples, chaos, the elastic process matrix, the GPU
# bundle: about 8 minutes more). Other arguments go to ctest (e.g. ./test.sh -R kernels).
set -euo pipefail
cd "$(dirname "$0")"
labels=(-LE slow)
args=()
for arg in "$@"; do
  if [[ $arg == --all ]]; then labels=(); else args+=("$arg"); fi
done
./run.sh --build-only
BUILD_DIR=${BUILD_DIR:-build}
ctest --test-dir "$BUILD_DIR" --output-on-failure -j "${JOBS:-$(nproc)}" --timeout 600 \
  "${labels[@]}" "${args[@]}"
