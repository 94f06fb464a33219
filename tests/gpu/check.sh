#!/usr/bin/env bash
# The GPU check of gossamer, run from an unpacked bundle of tests/gpu/bundle.sh on a machine with
# an NVIDIA GPU, CUDA (nvcc, cuBLAS), CMake, python3 with pybind11 (and torch for the last part):
#
#   tar -xJf gossamer-gpu-check.tar.xz && gossamer-gpu-check/check.sh [RESULTS_DIR]
#
# Parts, each printing PASS, FAIL or SKIP with its reason ("cuda" parts SKIP where no GPU is
# usable; "cpu" parts always run):
#   libraries          cpu   every library the binaries need resolves (bundle's lib/, CUDA's)
#   cuda-device        cuda  nvidia-smi lists a GPU and gossamer-peer computes on it
#   python-module      cpu   the module builds against this python3 and pybind11, and imports
#   conformance-cpu    cpu   the kernels' conformance suite on the CPU backend
#   conformance-cuda   cuda  the same cases on the CUDA backend (float64 references, bounds)
#   bench-kernels      cuda  weightedSum, elasticPull, momentumStep, codecs vs device memcpy
#   bench-models       cuda  the mlp/lenet/cnn training step vs bare cuBLAS GEMM of its shapes
#   train-{cpu,cuda}-{mlp,cnn}  4 local peers (allreduce-sgd) on a Fashion-MNIST subset
#   torch-peers-{cpu,cuda}      4 processes train a torch module through gossamer.torch
# At the end a summary (summarize.py) and RESULTS_DIR/check.json: each part's status, seconds,
# reason and key figures (bench ratios, accuracies, CPU vs CUDA accuracy differences).
# RESULTS_DIR (default: results/ beside this script) also holds each part's log.
# Exit status: 0 when no part failed, 1 when one did, 2 on bad arguments.
set -uo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
if [[ $# -gt 1 || ${1:-} == -* ]]; then
  echo "usage: check.sh [RESULTS_DIR]" >&2
  exit 2
fi
out=${1:-$here/results}
mkdir -p "$out" || { echo "check.sh: cannot create the results directory $out" >&2; exit 2; }
out=$(cd "$out" && pwd)
bin=$here/bin
: >"$out/parts.tsv"

# Training runs: the subset of Fashion-MNIST the bundle carries (bundle.sh: --train 12000).
TRAIN_SAMPLES=12000
TEST_SAMPLES=2000
EPOCHS=2

# ---- the library path: the bundle's libraries, then CUDA's where the loader cannot find them ----
library_path=$here/lib
# The libraries each binary misses under a given LD_LIBRARY_PATH, as "binary: library" lines.
missing_libraries() {
  local b
  for b in "$bin"/gossamer-peer "$bin"/gossamer-bench "$bin"/gossamer-tests; do
    LD_LIBRARY_PATH=$1 ldd "$b" 2>&1 | sed -n "s|^[[:space:]]*\([^ ]*\) => not found|${b##*/}: \1|p"
  done
}
# Version errors ("version `GLIBCXX_3.4.30' not found") under a given LD_LIBRARY_PATH.
version_errors() {
  LD_LIBRARY_PATH=$1 ldd "$bin/gossamer-tests" 2>&1 | grep -o "version \`[A-Z_.0-9]*' not found" | sort -u
}
# CUDA's runtime and cuBLAS: from the loader's own paths and the binaries' RUNPATH, else from
# the toolkit of the nvcc on PATH or /usr/local/cuda.
missing=$(missing_libraries "$library_path")
if [[ $missing == *libcu* ]]; then
  wanted=$(sed -n 's/.*: \(libcu[^ ]*\)$/\1/p' <<<"$missing" | head -1)
  nvcc_dir=$(dirname "$(command -v nvcc 2>/dev/null || echo /usr/local/cuda/bin/nvcc)")
  for dir in "$nvcc_dir/../lib64" "$nvcc_dir/../targets/x86_64-linux/lib" /usr/local/cuda/lib64; do
    if [[ -e $dir/$wanted ]]; then
      library_path=$library_path:$(cd "$dir" && pwd -P)
      break
    fi
  done
fi
# libstdc++ and libgcc_s come from the machine; the bundle's copies (lib/compat) only where the
# machine's are older than the build machine's (a newer one must stay: torch may need it).
compat_note="the machine's libstdc++"
errors=$(version_errors "$library_path")
if [[ $errors == *GLIBCXX* || $errors == *CXXABI* || $errors == *GCC_* ]]; then
  library_path=$here/lib/compat:$library_path
  compat_note="the bundle's libstdc++ (the machine's is older than the build's)"
fi
export LD_LIBRARY_PATH=$library_path${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export OPENBLAS_NUM_THREADS=1 PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
echo "check.sh: bundle $here ($(head -1 "$here/BUILD_INFO" 2>/dev/null))"
echo "check.sh: LD_LIBRARY_PATH=$LD_LIBRARY_PATH; $compat_note"

# ---- the parts ----
cuda_usable=no
cuda_reason="not probed"
module_dir=$out/module-build
module_built=no

# Runs a command under the part's time limit, its output appended to the part's log.
limit=60
log=/dev/null
t() { timeout -k 10 "$limit" "$@" >>"$log" 2>&1; }
# The reason of a failed command: its timeout, or its exit status and last line of output.
failed_because() {
  local rc=$1
  if [[ $rc -eq 124 || $rc -eq 137 ]]; then
    reason="timed out after $limit s"
  else
    reason="exit $rc: $(grep -v '^[[:space:]]*$' "$log" | tail -1 | cut -c1-300)"
  fi
}
# The last JSON line of the part's log.
last_json() { grep '^{' "$log" | tail -1; }

part_libraries() {
  local missing versions
  missing=$(missing_libraries "$LD_LIBRARY_PATH")
  versions=$(version_errors "$LD_LIBRARY_PATH")
  LD_LIBRARY_PATH=$LD_LIBRARY_PATH ldd "$bin/gossamer-tests" >>"$log" 2>&1
  if [[ -n $versions ]]; then
    reason="this machine's system libraries are older than the build machine's: $(echo "$versions" | tr '\n' ' ')"
    return 1
  fi
  if [[ -n $missing ]]; then
    reason="not found: $(echo "$missing" | tr '\n' ' ')(CUDA's own libraries come from the machine)"
    return 1
  fi
  reason="every library resolves; $compat_note"
}

part_cuda_device() {
  local gpus="" rc=0
  if command -v nvidia-smi >/dev/null; then
    gpus=$(nvidia-smi -L 2>>"$log" | grep '^GPU ' || true)
    nvidia-smi >>"$log" 2>&1
  fi
  t "$bin/gossamer-peer" --dataset synthetic --train-samples 500 --test-samples 100 --hidden 8 \
    --epochs 1 --device cuda --json --log-level warn || rc=$?
  if [[ $rc -eq 0 && $(last_json) == *'"device":"cuda'* ]]; then
    cuda_usable=yes
    reason="${gpus:-a GPU}"
    reason="${reason%%$'\n'*}; gossamer-peer trains on it"
    return 0
  fi
  local said
  said=$(sed -n 's/.*no usable GPU: //p' "$log" | tail -1)
  said="gossamer-peer --device cuda: ${said:-exit $rc}"
  if [[ -z $gpus ]]; then
    if command -v nvidia-smi >/dev/null; then
      cuda_reason="no CUDA device: nvidia-smi lists no GPU; $said"
    else
      cuda_reason="no CUDA device: nvidia-smi not found (no NVIDIA driver); $said"
    fi
    reason=$cuda_reason
    return 77
  fi
  cuda_reason="nvidia-smi lists a GPU but gossamer cannot use it: $said"
  reason=$cuda_reason
  return 1
}

part_python_module() {
  local python pybind11_dir rc=0
  python=$(command -v python3) || { reason="python3 not found on PATH"; return 1; }
  command -v cmake >/dev/null || { reason="cmake not found on PATH"; return 1; }
  local args=(-S "$here/python" -B "$module_dir" -DCMAKE_BUILD_TYPE=Release -DPython_EXECUTABLE="$python")
  # pip's pybind11 names its CMake directory; Debian's pybind11-dev is found in /usr/lib/cmake.
  pybind11_dir=$("$python" -m pybind11 --cmakedir 2>/dev/null) && args+=(-Dpybind11_DIR="$pybind11_dir")
  command -v ninja >/dev/null && args+=(-G Ninja)
  rm -rf "$module_dir"
  t cmake "${args[@]}" || { failed_because $?; reason="configuring the module: $reason"; return 1; }
  t cmake --build "$module_dir" -j "$(nproc)" || { failed_because $?; reason="building the module: $reason"; return 1; }
  PYTHONPATH=$module_dir t "$python" -c '
import json, sys, gossamer
peer = gossamer.Peer(parameters=8, algorithm="none", steps=2, transport="inproc", optimizer="sgd", lr=0.5)
assert peer.start()
peer.grads[:] = 2.0
assert peer.step(loss=1.0, samples=4)
assert (peer.params == -1.0).all(), peer.params
result = peer.finish()
print(json.dumps({"python": sys.version.split()[0], "module": gossamer.__file__, "steps": result["steps"]}))
' || rc=$?
  [[ $rc -eq 0 ]] || { failed_because $rc; reason="importing and stepping a peer: $reason"; return 1; }
  module_built=yes
  reason="built with $("$python" --version 2>&1) and pybind11 ${pybind11_dir:-of the system}; a peer steps"
}

# The kernels' conformance cases of one backend (doctest template instances "kernels: ...<X>").
conformance() {
  local rc=0 cases failed assertions
  t "$bin/gossamer-tests" "--test-case=kernels:*<$1>" --no-intro || rc=$?
  cases=$(sed -n 's/.*test cases: *\([0-9]*\) |.*/\1/p' "$log" | tail -1)
  failed=$(sed -n 's/.*test cases:.*| *\([0-9]*\) failed.*/\1/p' "$log" | tail -1)
  assertions=$(sed -n 's/.*assertions: *\([0-9]*\) |.*/\1/p' "$log" | tail -1)
  if [[ $rc -ne 0 ]]; then
    failed_because $rc
    reason="${failed:-?} of ${cases:-?} test cases failed; $reason"
    return 1
  fi
  if [[ ${cases:-0} -eq 0 ]]; then
    reason="no test case matched kernels:*<$1>"
    return 1
  fi
  if grep -q 'skipping CUDA conformance' "$log"; then
    reason="the CUDA cases skipped: $(grep -o 'skipping CUDA conformance.*' "$log" | head -1)"
    return 1
  fi
  reason="$cases test cases passed ($assertions assertions)"
}
part_conformance_cpu() { conformance CpuBackend; }
part_conformance_cuda() { conformance CudaBackend; }

# gossamer-bench on CUDA: passes when it measured on the GPU (speed is reported, not asserted).
bench() {
  local rc=0 json
  t "$bin/gossamer-bench" "$@" --device cuda --json || rc=$?
  [[ $rc -eq 0 ]] || { failed_because $rc; return 1; }
  json=$(last_json)
  if [[ $json != *'"device":"cuda"'* || $json == *fallback_reason* ]]; then
    reason="it did not measure on the GPU: ${json:0:300}"
    return 1
  fi
  reason="measured on the GPU (figures below)"
}
part_bench_kernels() { bench kernels --repeat 3 --min-time 0.2; }
part_bench_models() { bench models --min-time 1; }

# 4 local peers train one model on one device; passes when the run ends and the model learned.
train() {
  local rc=0 json accuracy
  t "$bin/gossamer-peer" --local 4 --algorithm allreduce-sgd --model "$2" --epochs "$EPOCHS" \
    --train-samples "$TRAIN_SAMPLES" --test-samples "$TEST_SAMPLES" --data-dir "$out/data" \
    --device "$1" --seed 1 --json --log-level warn || rc=$?
  [[ $rc -eq 0 ]] || { failed_because $rc; return 1; }
  json=$(last_json)
  if [[ $json != *"\"device\":\"$1"* ]]; then
    reason="the peers did not compute on $1: ${json:0:200}"
    return 1
  fi
  accuracy=$(echo "$json" | grep -o '"test_accuracy":[0-9.e-]*' | cut -d: -f2)
  if [[ -z $accuracy ]]; then
    reason="no test_accuracy in the run's JSON: ${json:0:200}"
    return 1
  fi
  # A sanity floor, far below what 2 epochs reach (about 0.8): the model learned something.
  if ! awk -v a="$accuracy" 'BEGIN { exit !(a >= 0.6) }'; then
    reason="test accuracy $accuracy is below 0.6: the model did not learn"
    return 1
  fi
  reason="test accuracy $accuracy"
}
part_train_cpu_mlp() { train cpu mlp; }
part_train_cpu_cnn() { train cpu cnn; }
part_train_cuda_mlp() { train cuda mlp; }
part_train_cuda_cnn() { train cuda cnn; }

torch_peers() {
  local rc=0
  [[ $module_built == yes ]] || { reason="needs the Python module, which did not build (part python-module)"; return 77; }
  if ! python3 -c 'import torch' >>"$log" 2>&1; then
    reason="torch is not installed for $(command -v python3)"
    return 77
  fi
  PYTHONPATH=$module_dir t python3 "$here/torch_peers.py" --device "$1" --json --timeout $((limit - 15)) || rc=$?
  [[ $rc -eq 0 ]] || { failed_because $rc; reason=$(grep '^torch_peers:' "$log" | tail -1 || echo "$reason"); return 1; }
  reason=$(grep '^torch_peers:' "$log" | tail -1)
}
part_torch_peers_cpu() { torch_peers cpu; }
part_torch_peers_cuda() { torch_peers cuda; }

# run NAME KIND LIMIT: runs part_NAME (dashes as underscores) under LIMIT seconds per command,
# or skips a cuda part where no GPU is usable; prints and records the verdict.
failures=0
run() {
  local name=$1 kind=$2 status rc=0 started seconds
  limit=$3
  log=$out/$name.log
  : >"$log"
  reason=""
  started=$(date +%s.%N)
  if [[ $kind == cuda && $name != cuda-device && $cuda_usable != yes ]]; then
    rc=77
    reason=$cuda_reason
  else
    "part_${name//-/_}" || rc=$?
  fi
  seconds=$(awk -v a="$started" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
  case $rc in
    0) status=PASS ;;
    77) status=SKIP ;;
    *) status=FAIL; failures=$((failures + 1)) ;;
  esac
  reason=${reason//$'\t'/ }
  reason=${reason//$'\n'/ }
  printf '%-4s  %-18s %6s s  %s\n' "$status" "$name" "$seconds" "$reason"
  printf '%s\t%s\t%s\t%s\t%s\n' "$name" "$kind" "$status" "$seconds" "$reason" >>"$out/parts.tsv"
}

# The Fashion-MNIST subset, gzip'd where gossamer-peer --data-dir reads it.
mkdir -p "$out/data"
for f in "$here"/data/fashion-mnist/*-ubyte; do
  gzip -1 -c "$f" >"$out/data/${f##*/}.gz" || echo "check.sh: cannot gzip $f: the training parts will fail" >&2
done

run libraries cpu 30
run cuda-device cuda 60
run python-module cpu 240
run conformance-cpu cpu 120
run conformance-cuda cuda 120
run bench-kernels cuda 120
run bench-models cuda 90
run train-cpu-mlp cpu 120
run train-cuda-mlp cuda 120
run train-cpu-cnn cpu 180
run train-cuda-cnn cuda 120
run torch-peers-cpu cpu 120
run torch-peers-cuda cuda 120

echo
if command -v python3 >/dev/null && python3 "$here/summarize.py" "$out"; then
  :
else
  echo "check.sh: no summary: python3 or summarize.py failed; the verdicts are in $out/parts.tsv" >&2
  failures=$((failures + 1))
fi
[[ $failures -eq 0 ]]
