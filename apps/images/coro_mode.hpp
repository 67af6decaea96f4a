// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! The coroutine mode on the CPU backend: one coroutine per image on a cuawait
//! `thread_pool`, images in flight bounded by a memory budget through an
//! `async_semaphore`.

#include "batch.hpp"

#include <cstddef>

namespace cuawait::images {

//! Runs every job of `b` as a coroutine on a pool of `b.config().threads` threads, with at
//! most `memory_budget` bytes of image buffers in flight (at least one image is always let
//! through). Returns when all jobs are done or skipped after a stop.
void run_coro_cpu(batch& b, std::size_t memory_budget);

//! Bytes of working buffers the pipeline holds for an image of `pixels` pixels (input,
//! intermediate and output buffers), the unit of the memory budget.
[[nodiscard]] std::size_t image_footprint(std::size_t pixels) noexcept;

} // namespace cuawait::images
