#include "kernels/compute.h"

namespace gossamer::kernels {

const char* deviceName(Device device) {
  switch (device) {
    case Device::kCpu:
      return "cpu";
    case Device::kCuda:
      return "cuda";
  }
  return "unknown";
}

}  // namespace gossamer::kernels
