// The device-like test Compute (tests/support/guarded_compute.h): its memory is device memory to
// its callers, reached through its copies and kernels only; a host dereference faults.
#include "tests/support/guarded_compute.h"

#include <csignal>
#include <vector>

#include <doctest/doctest.h>
#include <sys/wait.h>
#include <unistd.h>

namespace gossamer::test {
namespace {

// Whether reading `pointer` on the host kills a child process with SIGSEGV.
bool hostReadFaults(const float* pointer) {
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    std::signal(SIGSEGV, SIG_DFL);  // not doctest's handler: die of the signal itself
    const volatile float value = *pointer;
    (void)value;
    ::_exit(0);
  }
  int status = 0;
  REQUIRE(::waitpid(child, &status, 0) == child);
  return WIFSIGNALED(status) && WTERMSIG(status) == SIGSEGV;
}

TEST_CASE("guarded compute: device memory is reached through its copies and kernels only") {
  GuardedCompute compute;
  CHECK(compute.device() == kernels::Device::kCuda);
  kernels::Buffer<float> w = compute.allocate<float>(1000);
  kernels::Buffer<float> g = compute.allocate<float>(1000);
  CHECK(compute.isDeviceMemory(w.data()));
  CHECK(compute.isDeviceMemory(w.data() + 999));
  const std::vector<float> host(1000, 2.0f);
  CHECK_FALSE(compute.isDeviceMemory(host.data()));

  compute.upload(w.span(), host);
  compute.fill(g.span(), 0.5f);
  compute.sgdStep(w.span(), g.span(), kernels::SgdHyper{.lr = 2.0f});  // w = 2 - 2 * 0.5
  std::vector<float> back(1000);
  compute.download(std::span<float>(back), w.span());
  CHECK(back == std::vector<float>(1000, 1.0f));

  // Outside its calls the host cannot read it: the read that a real GPU would turn into garbage
  // or a crash fails here too.
  CHECK(hostReadFaults(w.data()));
  CHECK_FALSE(hostReadFaults(host.data()));
}

}  // namespace
}  // namespace gossamer::test
