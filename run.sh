#!/usr/bin/env bash
# Quick start, part 1: installs missing Debian packages, builds a Release build in build/, and
# runs the embedded default: a local cluster of 4 peers training an MLP on Fashion-MNIST.
#   ./run.sh              set up, build, run the default
#   ./run.sh --build-only set up and build (used by ./test.sh)
#   ./run.sh -- ARGS...   set up, build, run gossamer-peer with ARGS instead of the default
# Environment: BUILD_DIR (default build), CMAKE_ARGS (extra configure flags, e.g.
# "-DGOSSAMER_WITH_CUDA=OFF"), JOBS (default: number of cores).
set -euo pipefail
cd "$(dirname "$0")"

BUILD_DIR=${BUILD_DIR:-build}
JOBS=${JOBS:-$(nproc)}
# The package list, shared with examples/docker/Dockerfile: one a line, '#' comments.
mapfile -t PACKAGES < <(sed -e 's/#.*//' debian-packages.txt | tr -s ' \t' '\n' | grep .)

install_missing() {
  local missing=()
  for p in "${PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  echo "run.sh: installing missing Debian packages: ${missing[*]}"
  local sudo=""
  if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null || { echo "run.sh: need root (or sudo) to install: ${missing[*]}" >&2; exit 1; }
    sudo=sudo
  fi
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
}

build() {
  # shellcheck disable=SC2086
  cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release ${CMAKE_ARGS:-} >/dev/null
  cmake --build "$BUILD_DIR" -j "$JOBS"
}

install_missing
build
case "${1:-}" in
  --build-only) exit 0 ;;
  --) shift; exec "$BUILD_DIR/engine/gossamer-peer" "$@" ;;
  "") ;;
  *) echo "run.sh: unknown argument '$1' (use --build-only or -- ARGS)" >&2; exit 2 ;;
esac

echo "run.sh: 4 peers in one process train an MLP 784-256-256-10 on Fashion-MNIST with gosgd (gossip)"
exec "$BUILD_DIR/engine/gossamer-peer" --local 4 --algorithm gosgd --model mlp --hidden 256,256 \
  --dataset fashion-mnist --epochs 5 --batch 64 --optimizer momentum --lr 0.05 --lr-schedule cosine \
  --cluster-eval-every 100 --eval-samples 2000
