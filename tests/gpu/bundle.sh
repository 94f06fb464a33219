#!/usr/bin/env bash
# Packs gossamer's GPU check into one archive for a machine that has an NVIDIA GPU, CUDA, CMake
# and a python3 with pybind11 (and torch), but none of gossamer's Debian libraries and no network:
#
#   tests/gpu/bundle.sh OUT_DIR [BUILD_DIR]
#
# BUILD_DIR (default: build/ in the repository) must be a Ninja build with the CUDA backend and
# the Python module (cmake -S . -B build -G Ninja -DGOSSAMER_WITH_CUDA=ON); the targets packed are
# built first. Writes OUT_DIR/gossamer-gpu-check.tar.xz (refused over 48 MiB), which unpacks to
# gossamer-gpu-check/:
#   bin/          gossamer-peer, gossamer-bench, gossamer-tests, stripped
#   lib/          the shared libraries they and the Python module load (found by ldd), less
#                 glibc's, CUDA's own (cudart, cuBLAS) and the driver's: those are the machine's
#   lib/compat/   libstdc++ and libgcc_s, which check.sh uses only where the machine's are older
#   lib/static/   gossamer's static libraries that the Python module links
#   include/      the headers module.cc includes, less the compiler's, glibc's, the kernel's,
#                 Python's and pybind11's (the machine's own)
#   python/       module.cc, the package's .py files, a CMakeLists.txt (tests/gpu/module/) and
#                 gossamer_link.cmake (this build's link line of the module, translated)
#   data/fashion-mnist/  the first 12000 training and 2000 test samples, raw IDX files
#   check.sh, summarize.py, torch_peers.py, BUILD_INFO
set -euo pipefail

die() {
  echo "bundle.sh: $*" >&2
  exit 1
}
[[ $# -ge 1 && $# -le 2 && ${1:-} != -* ]] || die "usage: tests/gpu/bundle.sh OUT_DIR [BUILD_DIR]"
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
src=$(cd "$here/../.." && pwd -P)
out=$1
build=${2:-$src/build}
name=gossamer-gpu-check
max_bytes=$((48 * 1024 * 1024))
train_samples=12000
test_samples=2000
fashion=/usr/share/datasets/fashion-mnist

# ---- the build: configured with Ninja, CUDA and the Python module ----
[[ -f $build/CMakeCache.txt ]] ||
  die "$build is not a configured build directory (no CMakeCache.txt); make one with: cmake -S . -B build -G Ninja -DGOSSAMER_WITH_CUDA=ON"
build=$(cd "$build" && pwd -P)
grep -q '^CMAKE_GENERATOR:INTERNAL=Ninja$' "$build/CMakeCache.txt" ||
  die "$build is not a Ninja build (the module's link line and headers are read from Ninja); configure one with -G Ninja"
config=$build/generated/engine/base/config.h
[[ -f $config ]] || die "$config is missing: configure $build again (cmake -S $src -B $build)"
grep -q '^#define GOSSAMER_HAVE_CUDA 1$' "$config" ||
  die "$build was built with CUDA off (GOSSAMER_HAVE_CUDA is not 1 in $config): configure it with -DGOSSAMER_WITH_CUDA=ON (needs nvcc and cuBLAS)"
ninja -C "$build" -t query gossamer_python >/dev/null 2>&1 ||
  die "$build has no Python module target (gossamer_python): install python3-dev and pybind11-dev and configure it with -DGOSSAMER_WITH_PYTHON=ON"
for tool in ldd readelf strip xz tar dpkg python3; do
  command -v "$tool" >/dev/null || die "$tool is not installed"
done
[[ -f $fashion/t10k-labels-idx1-ubyte.gz ]] ||
  die "Fashion-MNIST is not in $fashion (apt-get install dataset-fashion-mnist)"
nvcc=$(sed -n 's/^CMAKE_CUDA_COMPILER:[A-Z]*=//p' "$build/CMakeCache.txt")
CUDA_ROOT=$(realpath "$(dirname "$nvcc")/..")
# shellcheck source=tests/gpu/rules.sh
source "$here/rules.sh"

echo "bundle.sh: building gossamer-peer, gossamer-bench, gossamer-tests and gossamer_python in $build"
cmake --build "$build" --target gossamer-peer gossamer-bench gossamer-tests gossamer_python

stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
root=$stage/$name
mkdir -p "$root"/{bin,lib/compat,lib/static,include,python/gossamer,data/fashion-mnist}

# ---- the module's compile and link commands, as Ninja runs them ----
commands=$(ninja -C "$build" -t commands gossamer_python)
compile=$(grep -F -- "-c $src/engine/python/module.cc" <<<"$commands" | tail -1) ||
  die "no compile command of engine/python/module.cc in $build"
link=$(tail -1 <<<"$commands" | awk -F' && ' '{ for (i = 1; i <= NF; i++) if ($i ~ / -shared /) { print $i; exit } }')
[[ -n $link ]] || die "no link command of gossamer_python in $build"
read -ra compile_words <<<"$compile"
read -ra link_words <<<"$link"
object=""
for ((i = 0; i < ${#compile_words[@]}; i++)); do
  [[ ${compile_words[i]} == -o ]] && object=${compile_words[i + 1]}
done
[[ -n $object ]] || die "no object file in the compile command of module.cc"

# ---- binaries and shared libraries ----
for target in engine/gossamer-peer bench/gossamer-bench tests/gossamer-tests; do
  cp "$build/$target" "$root/bin/"
  strip "$root/bin/${target##*/}"
done

declare -A libraries=()  # name the loader asks for -> where it is here
add_dependencies() {
  local line lib path
  while IFS= read -r line; do
    [[ $line == *" => "* ]] || continue
    lib=$(awk '{ print $1 }' <<<"$line")
    path=$(awk '{ print $3 }' <<<"$line")
    [[ $path == not ]] && die "ldd cannot find $lib, needed by $1"
    machines_library "$lib" "$path" || libraries[$lib]=$path
  done < <(ldd "$1")
}
soname() { readelf -d "$1" | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p'; }
for b in "$root"/bin/*; do add_dependencies "$b"; done

# ---- the module's link line, translated for the other machine ----
link_lines=()
skip_next=no
for word in "${link_words[@]:1}"; do
  if [[ $skip_next == yes ]]; then skip_next=no; continue; fi
  case $word in
    -o) skip_next=yes ;;
    -l*) link_lines+=("$word") ;;
    -L*)
      [[ $(realpath -m "${word#-L}") == "$CUDA_ROOT"/* ]] && link_lines+=("-L\${CUDAToolkit_LIBRARY_DIR}") ;;
    *.a | *.so | *.so.*)
      path=$word
      [[ $path == /* ]] || path=$build/$path
      if [[ $(realpath "$path") == "$CUDA_ROOT"/* ]]; then
        link_lines+=("\${CUDAToolkit_LIBRARY_DIR}/${path##*/}")
      elif [[ $path == *.a ]]; then
        [[ -e $root/lib/static/${path##*/} ]] && die "two static libraries named ${path##*/} on the module's link line"
        cp "$path" "$root/lib/static/"
        strip --strip-debug "$root/lib/static/${path##*/}"
        link_lines+=("\${GOSSAMER_BUNDLE}/lib/static/${path##*/}")
      else
        lib=$(soname "$path")
        lib=${lib:-${path##*/}}
        if machines_library "$lib"; then
          lib=${lib#lib}
          link_lines+=("-l${lib%%.so*}")
        else
          libraries[$lib]=$path
          add_dependencies "$path"
          link_lines+=("\${GOSSAMER_BUNDLE}/lib/$lib")
        fi
      fi
      ;;
  esac
done
for lib in "${!libraries[@]}"; do
  case $lib in
    libstdc++.so.* | libgcc_s.so.*) dest=$root/lib/compat/$lib ;;
    *) dest=$root/lib/$lib ;;
  esac
  cp -L "${libraries[$lib]}" "$dest"
  chmod u+w "$dest"
  strip --strip-unneeded "$dest"
done

definitions=()
for word in "${compile_words[@]}"; do
  case $word in
    -DNDEBUG | -Dgossamer_python_EXPORTS) ;;
    -D*) definitions+=("${word#-D}") ;;
  esac
done
needs_cuda=OFF
grep -q 'CUDAToolkit_LIBRARY_DIR' <<<"${link_lines[*]}" && needs_cuda=ON
{
  echo "# Written by tests/gpu/bundle.sh from the link line of gossamer_python in $build."
  echo "set(GOSSAMER_DEFINITIONS ${definitions[*]})"
  echo "set(GOSSAMER_NEEDS_CUDA $needs_cuda)"
  echo "function(gossamer_link target)"
  echo "  target_link_libraries(\${target} PRIVATE"
  printf '    %s\n' "${link_lines[@]}"
  echo "  )"
  echo "endfunction()"
} >"$root/python/gossamer_link.cmake"

# ---- the headers module.cc includes ----
multiarch=$(gcc -print-multiarch 2>/dev/null || echo x86_64-linux-gnu)
load_glibc_headers
mapfile -t headers < <(ninja -C "$build" -t deps "$object" | tail -n +2 | sed 's/^[[:space:]]*//' | grep -v '^$')
[[ ${#headers[@]} -gt 10 ]] || die "Ninja holds no header list for $object: build gossamer_python in $build"
shipped=0
while IFS= read -r path; do
  case $path in
    "$src"/engine/python/module.cc) continue ;;
    "$build"/generated/*) rel=${path#"$build"/generated/} ;;
    "$build"/*) die "module.cc includes $path, a file of the build other than its generated headers" ;;
    "$src"/*) rel=${path#"$src"/} ;;
    /usr/include/* | /usr/local/include/* | /usr/lib/gcc/* | "$CUDA_ROOT"/* | /usr/local/cuda*)
      machines_header "$path" && continue
      rel=${path#/usr/include/}
      rel=${rel#/usr/local/include/}
      rel=${rel#"$multiarch"/}
      ;;
    *) die "module.cc includes $path, which is neither the project's nor a system header" ;;
  esac
  mkdir -p "$root/include/$(dirname "$rel")"
  cp "$path" "$root/include/$rel"
  shipped=$((shipped + 1))
done < <(realpath -ms -- "${headers[@]}")

# ---- the Python package, the scripts, the data ----
cp "$src/engine/python/module.cc" "$root/python/"
cp "$src"/engine/python/gossamer/*.py "$root/python/gossamer/"
cp "$here/module/CMakeLists.txt" "$root/python/"
cp "$here/check.sh" "$here/summarize.py" "$here/torch_peers.py" "$root/"
python3 - "$fashion" "$root/data/fashion-mnist" "$train_samples" "$test_samples" <<'EOF'
import gzip, os, sys
source, dest, train, test = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
for split, count in (("train", train), ("t10k", test)):
    for kind, header, item in (("images-idx3", 16, 28 * 28), ("labels-idx1", 8, 1)):
        name = "%s-%s-ubyte" % (split, kind)
        with gzip.open(os.path.join(source, name + ".gz"), "rb") as f:
            data = f.read(header + count * item)
        if int.from_bytes(data[4:8], "big") < count or len(data) != header + count * item:
            sys.exit("bundle.sh: %s holds fewer than %d samples" % (name, count))
        with open(os.path.join(dest, name), "wb") as f:
            f.write(data[:4] + count.to_bytes(4, "big") + data[8:])
EOF
{
  echo "gossamer $(git -C "$src" describe --always --dirty 2>/dev/null || echo unknown), bundled $(date -u +%Y-%m-%dT%H:%MZ)"
  echo "built in $build on $(sed -n 's/^PRETTY_NAME="\(.*\)"/\1/p' /etc/os-release) with $(c++ --version | head -1) and $("$nvcc" --version | tail -1)"
} >"$root/BUILD_INFO"

# ---- the archive ----
mkdir -p "$out"
archive=$(cd "$out" && pwd)/$name.tar.xz
echo "bundle.sh: compressing $(du -sh "$root" | cut -f1) ($(find "$root/lib" -name '*.so*' | wc -l) shared libraries, $shipped headers)"
tar -C "$stage" --owner=0 --group=0 --sort=name -cf - "$name" | xz -T0 -9 >"$archive.part"
size=$(stat -c %s "$archive.part")
if [[ $size -gt $max_bytes ]]; then
  rm -f "$archive.part"
  die "the archive would be $((size / 1048576)) MiB, over the 48 MiB limit; largest parts: $(du -s "$root"/* "$root"/lib/* | sort -rn | head -5 | awk '{ print $2 }' | tr '\n' ' ')"
fi
mv "$archive.part" "$archive"
echo "bundle.sh: wrote $archive ($(awk -v s="$size" 'BEGIN { printf "%.1f", s / 1048576 }') MiB)"
