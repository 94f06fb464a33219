// The process's resident memory, as Linux reports it: its peak (VmHWM) and a reset of that peak,
// so that one process running experiments one after another can report each one's own.
#pragma once

#include <cstddef>

namespace gossamer {

// The most resident memory the process has held since it started or since resetPeakRss(), in
// bytes; 0 where /proc/self/status cannot be read.
std::size_t peakRssBytes();
// Starts the peak over from the current resident memory (writes 5 to /proc/self/clear_refs);
// false where the kernel does not allow it (the peak then runs from the start).
bool resetPeakRss();

}  // namespace gossamer
