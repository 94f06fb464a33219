// cuBLAS, loaded when a CUDA Compute first needs it instead of at every process start.
//
// Linking libcublas makes the loader run libcublasLt's static initializers in every process of
// a build with the CUDA backend: about 0.45 s and 200 MB before main(), in each of the test
// suite's 800 processes, on machines with a GPU or without. So the backend does not link it:
// this file defines the cuBLAS entry points it calls (the names cublas_v2.h maps them to) and
// forwards each to libcublas, dlopen()ed once on the first call: from where the build found it
// (GOSSAMER_CUBLAS_LIBRARY), else by its soname through the loader's paths (LD_LIBRARY_PATH,
// the binary's RUNPATH). When it cannot be loaded, every call returns CUBLAS_STATUS_NOT_INITIALIZED
// and cublasLoadError() says why.
#include "kernels/cuda/cublas_loader.h"

#include <mutex>
#include <string>

#include <cublas_v2.h>
#include <dlfcn.h>

namespace gossamer::kernels::cuda {
namespace {

struct Cublas {
  decltype(&cublasCreate_v2) create = nullptr;
  decltype(&cublasDestroy_v2) destroy = nullptr;
  decltype(&cublasSetStream_v2) setStream = nullptr;
  decltype(&cublasSetPointerMode_v2) setPointerMode = nullptr;
  decltype(&cublasSetMathMode) setMathMode = nullptr;
  decltype(&cublasSgemm_v2) sgemm = nullptr;
  decltype(&cublasGetStatusName) statusName = nullptr;
  decltype(&cublasGetStatusString) statusString = nullptr;
  std::string error;  // empty once loaded
};

template <typename F>
bool resolve(void* library, const char* name, F& out, std::string& error) {
  out = reinterpret_cast<F>(dlsym(library, name));
  if (out == nullptr) error = std::string("libcublas has no ") + name;
  return out != nullptr;
}

const Cublas& cublas() {
  static Cublas api;
  static std::once_flag once;
  std::call_once(once, [] {
    const std::string soname = "libcublas.so." + std::to_string(CUBLAS_VER_MAJOR);
    void* library = nullptr;
#ifdef GOSSAMER_CUBLAS_LIBRARY
    library = dlopen(GOSSAMER_CUBLAS_LIBRARY, RTLD_NOW | RTLD_LOCAL);
#endif
    if (library == nullptr) library = dlopen(soname.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (library == nullptr) {
      const char* why = dlerror();
      api.error = "cannot load " + soname + ": " + (why != nullptr ? why : "unknown error");
      return;
    }
    std::string error;
    const bool all = resolve(library, "cublasCreate_v2", api.create, error) &&
                     resolve(library, "cublasDestroy_v2", api.destroy, error) &&
                     resolve(library, "cublasSetStream_v2", api.setStream, error) &&
                     resolve(library, "cublasSetPointerMode_v2", api.setPointerMode, error) &&
                     resolve(library, "cublasSetMathMode", api.setMathMode, error) &&
                     resolve(library, "cublasSgemm_v2", api.sgemm, error) &&
                     resolve(library, "cublasGetStatusName", api.statusName, error) &&
                     resolve(library, "cublasGetStatusString", api.statusString, error);
    if (!all) api = Cublas{.error = error};
  });
  return api;
}

}  // namespace

const std::string& cublasLoadError() { return cublas().error; }

}  // namespace gossamer::kernels::cuda

using gossamer::kernels::cuda::cublas;

extern "C" {

cublasStatus_t cublasCreate_v2(cublasHandle_t* handle) {
  return cublas().create ? cublas().create(handle) : CUBLAS_STATUS_NOT_INITIALIZED;
}

cublasStatus_t cublasDestroy_v2(cublasHandle_t handle) {
  return cublas().destroy ? cublas().destroy(handle) : CUBLAS_STATUS_NOT_INITIALIZED;
}

cublasStatus_t cublasSetStream_v2(cublasHandle_t handle, cudaStream_t stream) {
  return cublas().setStream ? cublas().setStream(handle, stream) : CUBLAS_STATUS_NOT_INITIALIZED;
}

cublasStatus_t cublasSetPointerMode_v2(cublasHandle_t handle, cublasPointerMode_t mode) {
  return cublas().setPointerMode ? cublas().setPointerMode(handle, mode)
                                 : CUBLAS_STATUS_NOT_INITIALIZED;
}

cublasStatus_t cublasSetMathMode(cublasHandle_t handle, cublasMath_t mode) {
  return cublas().setMathMode ? cublas().setMathMode(handle, mode) : CUBLAS_STATUS_NOT_INITIALIZED;
}

cublasStatus_t cublasSgemm_v2(cublasHandle_t handle, cublasOperation_t transa,
                              cublasOperation_t transb, int m, int n, int k, const float* alpha,
                              const float* A, int lda, const float* B, int ldb, const float* beta,
                              float* C, int ldc) {
  return cublas().sgemm
             ? cublas().sgemm(handle, transa, transb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc)
             : CUBLAS_STATUS_NOT_INITIALIZED;
}

const char* cublasGetStatusName(cublasStatus_t status) {
  return cublas().statusName ? cublas().statusName(status) : "CUBLAS_STATUS_NOT_INITIALIZED";
}

const char* cublasGetStatusString(cublasStatus_t status) {
  return cublas().statusString ? cublas().statusString(status) : "libcublas could not be loaded";
}

}  // extern "C"
