// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! `cpu_relax()`: the spin-wait hint (x86 `pause`, Arm `yield`), for loops that poll a
//! condition expected to change within microseconds. Unlike `std::this_thread::yield()` it
//! never gives the core away, so the loop notices the change at once even when other
//! threads are runnable.

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace cuawait::detail {

inline void cpu_relax() noexcept {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

} // namespace cuawait::detail
