// cuBLAS loaded on first use (cublas_loader.cc): the backend calls cuBLAS as usual, and the
// library is dlopen()ed at the first call instead of at process start.
#pragma once

#include <string>

namespace gossamer::kernels::cuda {

// Why libcublas could not be loaded (loading it now if it was not yet); empty when it was.
const std::string& cublasLoadError();

}  // namespace gossamer::kernels::cuda
