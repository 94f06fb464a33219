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
// --fmad=false). On other architectures, with a compiler without target_clones, and in sanitizer
// builds, the macro is empty and the loop is compiled once for the build's target: the ifunc
// resolvers run while the dynamic loader relocates the binary, before a sanitizer's runtime is
// initialised, and an instrumented resolver crashes there (GOSSAMER_SANITIZE=thread did).
#pragma once

#if defined(__has_feature)
#if __has_feature(thread_sanitizer) || __has_feature(address_sanitizer)
#define GOSSAMER_SANITIZED 1
#endif
#endif
#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
#define GOSSAMER_SANITIZED 1
#endif

#if defined(__x86_64__) && defined(__has_attribute) && !defined(GOSSAMER_SANITIZED)
#if __has_attribute(target_clones)
#define GOSSAMER_CPU_CLONES \
  __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#endif
#endif
#ifndef GOSSAMER_CPU_CLONES
#define GOSSAMER_CPU_CLONES
#endif
