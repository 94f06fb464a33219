# shellcheck shell=bash
# What the GPU machine brings itself, and so what a bundle of bundle.sh leaves out; sourced by
# bundle.sh (to leave it out) and bundle_test.sh (to check that nothing else is missing):
# glibc, the NVIDIA driver and CUDA's own libraries (the runtime, cuBLAS); the headers of the
# compiler, glibc, the kernel, Python and pybind11. Needs CUDA_ROOT (the toolkit's directory,
# symbolic links resolved) set by the caller.

glibc_libraries='^(linux-vdso|ld-linux[^ ]*|libc|libm|libmvec|libpthread|libdl|librt|libresolv|libutil|libanl|libnsl|libBrokenLocale|libthread_db|libnss_[a-z]*)\.so'
cuda_libraries='^(libcuda|libnvidia-[^ ]*|libcudart|libcublas|libcublasLt)\.so'

# machines_library NAME [PATH]: true for a shared library (by the name the loader asks for, and
# where it was found here, if known) that the machine brings itself.
machines_library() {
  [[ $1 =~ $glibc_libraries || $1 =~ $cuda_libraries ]] && return 0
  [[ -n ${2:-} && $(realpath "$2") == "$CUDA_ROOT"/* ]]
}

# The headers of glibc and the kernel, by path (dpkg -L of libc6-dev and linux-libc-dev).
declare -A glibc_headers=()
load_glibc_headers() {
  local path
  while IFS= read -r path; do if [[ -n $path ]]; then glibc_headers[$path]=1; fi; done < <(dpkg -L libc6-dev linux-libc-dev)
}

# machines_header PATH (normalized, absolute): true for a header the machine brings itself.
machines_header() {
  case $1 in
    /usr/include/c++/* | /usr/include/*/c++/* | /usr/lib/gcc/*) return 0 ;;  # the compiler's
    /usr/include/python3* | /usr/include/*/python3* | /usr/include/pybind11/*) return 0 ;;
    "$CUDA_ROOT"/* | /usr/local/cuda*) return 0 ;;
  esac
  [[ -n ${glibc_headers[$1]:-} ]]
}
