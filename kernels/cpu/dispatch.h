// Run-time dispatch of the CPU backend's streaming loops to the vector units of the machine that
// runs them, without building for one machine.
//
// GOSSAMER_CPU_CLONES before a function definition compiles it three times, for x86-64-v4
// (AVX-512), x86-64-v3 (AVX2) and the baseline x86-64 (SSE2), and resolves the call once, at load
// time, to the best one the CPU supports (GCC/Clang `target_clones`, an ifunc). Put it on free
// functions that hold a hot loop (inline helpers they call are compiled into each clone), not on
// virtual methods.
//
// Every clone rounds alike: the kernels are compiled with -ffp-contract=off (kernels/CMakeLists),
// so the FMA units of v3/v4 never fuse a * b + c, and no loop reassociates a sum. A result is
// therefore bit-identical whichever clone runs, and to the CUDA backend's (built with
// --fmad=false). On other architectures, or with a compiler without target_clones, the macro is
// empty and the loop is compiled once for the build's target.
#pragma once

#if defined(__x86_64__) && defined(__has_attribute)
#if __has_attribute(target_clones)
#define GOSSAMER_CPU_CLONES \
  __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#endif
#endif
#ifndef GOSSAMER_CPU_CLONES
#define GOSSAMER_CPU_CLONES
#endif
