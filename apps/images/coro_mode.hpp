// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! The coroutine mode on the CPU backend: one coroutine per image on a cuawait
//! `thread_pool`, images in flight bounded by a memory budget through an
//! `async_semaphore`.

#include "batch.hpp"

#include <cstddef>
#include <cstdint>
#include <string>

namespace cuawait::images {

//! Runs every job of `b` as a coroutine on a pool of `b.config().threads` threads, with at
//! most `memory_budget` bytes of image buffers in flight (at least one image is always let
//! through). Returns when all jobs are done or skipped after a stop.
void run_coro_cpu(batch& b, std::size_t memory_budget);

//! Bytes of working buffers the CPU pipeline holds for an image of `pixels` pixels (input,
//! intermediate and output buffers), the unit of the memory budget.
[[nodiscard]] std::size_t image_footprint(std::size_t pixels) noexcept;

//! Bytes the GPU coroutine mode holds for an image of `pixels` pixels: a decoded image (when
//! it is not decoded in place), the pinned 8-bit input and edge bytes, the device 8-bit
//! image, its gray floats, blur temporary, blurred image and edges.
[[nodiscard]] std::size_t gpu_image_footprint(std::size_t pixels) noexcept;

//! The default memory budget of the coroutine mode for `threads` CPU threads: 96 MiB per
//! thread, at least 512 MiB. Enough images in flight that every thread has CPU stages to
//! run while the GPU works through a queue of others: about 4.5 one-megapixel images per
//! thread on the GPU (21 MiB each), 6 on the CPU backend (16 MiB each). Capped at half of
//! `physical_memory` bytes (0: unknown, no cap), so that many threads on a small machine do
//! not ask for more memory than it has.
[[nodiscard]] std::size_t default_memory_budget(int threads,
                                                std::uint64_t physical_memory) noexcept;

//! Bytes of physical memory of this machine (sysconf), 0 when unknown.
[[nodiscard]] std::uint64_t physical_memory_bytes() noexcept;

//! The default number of streams of the GPU coroutine mode: two per CPU thread, at least
//! 8 and at most 32 (more streams than that only add scheduling work on the GPU).
[[nodiscard]] std::size_t default_stream_count(int threads) noexcept;

//! The default bound on the images in flight of the coroutine mode for `threads` CPU
//! threads: two per thread, at least 8. On small photos the memory budget alone let about
//! 250 images of a quarter megapixel in at once for 16 threads; their buffers, touched for
//! the first time, cost six times the threads mode's page faults, and the mode ran at
//! 0.89-0.93x the threads mode; with this bound 1.10-1.12x (H100, 2026-12-07;
//! docs/PERFORMANCE.md). Large images are bounded by the budget first (16 of 4 MP).
[[nodiscard]] std::size_t default_max_in_flight(int threads) noexcept;

//! Images of `footprint` bytes that `memory_budget` lets in at once (at least 1; the whole
//! budget when `footprint` is 0), as the memory gate counts them, and at most
//! `max_images` (0: no bound).
[[nodiscard]] std::size_t images_in_flight(std::size_t memory_budget, std::size_t footprint,
                                           std::size_t max_images = 0);

//! "up to N images in flight (memory budget M MiB)" for the summary; N is computed for the
//! synthetic image size, or left out for a batch of files of varied sizes.
[[nodiscard]] std::string in_flight_note(const batch& b, std::size_t memory_budget,
                                         std::size_t footprint);

} // namespace cuawait::images
