#!/usr/bin/env bash
# The GPU bundle checked here, on a machine without a GPU, as the GPU machine will get it:
# bundle.sh packs BUILD_DIR into a temporary directory; the archive is at most 48 MiB; every ELF
# file in it finds every library it needs inside the bundle, apart from what the GPU machine
# brings (rules.sh: glibc, CUDA's own, the driver); then check.sh runs with an empty environment
# (env -i PATH=/usr/bin:/bin: the library path is the one check.sh sets itself), and must exit 0
# with every cpu part PASS and every cuda part SKIP with its reason; and the Python module it
# built took no header from this machine that the GPU machine lacks (all from the bundle).
#   tests/gpu/bundle_test.sh BUILD_DIR
set -euo pipefail
[[ $# -eq 1 ]] || { echo "usage: tests/gpu/bundle_test.sh BUILD_DIR" >&2; exit 2; }
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
build=$(cd "$1" && pwd -P)
fail() { echo "bundle_test.sh: FAILED: $*" >&2; exit 1; }
nvcc=$(sed -n 's/^CMAKE_CUDA_COMPILER:[A-Z]*=//p' "$build/CMakeCache.txt")
[[ -n $nvcc ]] || fail "$build has no CUDA compiler in its cache: the bundle needs a CUDA build"
CUDA_ROOT=$(realpath "$(dirname "$nvcc")/..")
# shellcheck source=tests/gpu/rules.sh
source "$here/rules.sh"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$here/bundle.sh" "$tmp/out" "$build"
archive=$tmp/out/gossamer-gpu-check.tar.xz
size=$(stat -c %s "$archive")
[[ $size -le $((48 * 1024 * 1024)) ]] || fail "the archive is $size bytes, over 48 MiB"
echo "bundle_test.sh: the archive is $((size / 1024)) KiB"
mkdir "$tmp/unpacked"
tar -C "$tmp/unpacked" -xJf "$archive"
root=$tmp/unpacked/gossamer-gpu-check
for f in check.sh summarize.py torch_peers.py python/CMakeLists.txt python/gossamer_link.cmake \
  python/module.cc python/gossamer/__init__.py bin/gossamer-peer bin/gossamer-bench bin/gossamer-tests; do
  [[ -f $root/$f ]] || fail "the bundle has no $f"
done

# Every ELF file's libraries: from the bundle, or the machine's own.
elves=0
while IFS= read -r -d '' file; do
  [[ $(head -c 4 "$file" | od -An -c | tr -d ' ') == 177ELF ]] || continue
  elves=$((elves + 1))
  while IFS= read -r line; do
    lib=$(awk '{ print $1 }' <<<"$line")
    path=$(awk '{ print $3 }' <<<"$line")
    [[ $line == *" => "* ]] || path=""
    if [[ $path == not ]]; then
      machines_library "$lib" || fail "${file#"$root"/} needs $lib, which is neither in the bundle nor the machine's own"
    elif ! machines_library "$lib" "$path" && [[ -n $path && $(realpath "$path") != "$root"/* ]]; then
      fail "${file#"$root"/} loads $lib from $path, outside the bundle"
    fi
  done < <(LD_LIBRARY_PATH=$root/lib:$root/lib/compat ldd "$file" 2>&1 | grep -v 'statically linked')
done < <(find "$root" -type f -print0)
[[ $elves -ge 10 ]] || fail "only $elves ELF files in the bundle"
echo "bundle_test.sh: $elves ELF files resolve their libraries in the bundle or the machine's own"

# check.sh with an empty environment, on this machine without a GPU.
rc=0
env -i PATH=/usr/bin:/bin HOME="$tmp" "$root/check.sh" "$tmp/results" || rc=$?
[[ $rc -eq 0 ]] || fail "check.sh exited with $rc"
python3 - "$tmp/results/check.json" <<'EOF'
import json, sys
report = json.load(open(sys.argv[1]))
parts = report["parts"]
expected = {"libraries", "cuda-device", "python-module", "conformance-cpu", "conformance-cuda", "bench-kernels",
            "bench-models", "train-cpu-mlp", "train-cpu-cnn", "train-cuda-mlp", "train-cuda-cnn",
            "torch-peers-cpu", "torch-peers-cuda"}
assert set(parts) == expected, "parts %s, expected %s" % (sorted(parts), sorted(expected))
for name, part in sorted(parts.items()):
    want = "PASS" if part["kind"] == "cpu" else "SKIP"
    assert part["status"] == want, "%s (%s) is %s, not %s: %s" % (name, part["kind"], part["status"], want, part["reason"])
    assert part["reason"], "%s gives no reason" % name
    assert part["seconds"] >= 0, name
for name in ("train-cpu-mlp", "train-cpu-cnn"):
    assert parts[name]["figures"]["test_accuracy"] >= 0.6, parts[name]["figures"]
assert parts["conformance-cpu"]["figures"]["test_cases"] > 20, parts["conformance-cpu"]["figures"]
assert parts["torch-peers-cpu"]["figures"]["passed"] is True, parts["torch-peers-cpu"]["figures"]
assert report["passed"] and report["counts"]["FAIL"] == 0, report["counts"]
print("bundle_test.sh: check.json: %s" % report["counts"])
EOF

# The module check.sh built: every header from the bundle or the machine's own.
load_glibc_headers
object=$(cd "$tmp/results/module-build" && find . -name 'module.cc.o' | head -1)
[[ -n $object ]] || fail "check.sh left no module.cc.o in its module build"
mapfile -t headers < <(ninja -C "$tmp/results/module-build" -t deps "${object#./}" | tail -n +2 |
  sed 's/^[[:space:]]*//' | grep -v '^$')
[[ ${#headers[@]} -gt 10 ]] || fail "no header list for the module built from the bundle"
while IFS= read -r path; do
  [[ $path == "$root"/* ]] || machines_header "$path" ||
    fail "the module built from the bundle read $path from this machine: bundle.sh must ship it"
done < <(realpath -ms -- "${headers[@]}")
echo "bundle_test.sh: the module's ${#headers[@]} headers came from the bundle or the machine's own"
echo "bundle_test.sh: passed"
