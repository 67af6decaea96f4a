// SPDX-License-Identifier: Apache-2.0
// The coroutine mode on the CPU backend.

#include "coro_mode.hpp"

#include "codec.hpp"
#include "memory_gate.hpp"

#include <cuawait/async_scope.hpp>
#include <cuawait/sync_wait.hpp>
#include <cuawait/task.hpp>
#include <cuawait/thread_pool.hpp>

#include <algorithm>
#include <string>
#include <unistd.h>

namespace cuawait::images {
namespace {

task<void> process_on_cpu(batch& b, int i, thread_pool& pool, memory_gate& gate) {
  co_await pool.schedule();
  if (b.stopping()) {
    co_return;
  }
  memory_gate::share share = co_await gate.acquire(image_footprint(b.expected_pixels(i)));
  // The gate may resume us inside another image's release: continue from the pool instead,
  // so finished images never nest the next one on their stack.
  co_await pool.schedule();
  if (b.stopping()) {
    co_return; // stopped while waiting for memory: start nothing new
  }
  try {
    gray_image gray;
    {
      const scoped_span span(b.log(), i, "decode+preprocess");
      const image8 img = b.load(i);
      gray = {img.width, img.height, std::vector<float>(img.pixel_count())};
      b.preprocess(img, gray.pixels);
    }
    co_await pool.schedule(); // a scheduling point between stages, as the GPU version has
    image_result result;
    {
      const scoped_span span(b.log(), i, "cpu stages");
      result = process_cpu(gray);
    }
    gray = {};
    co_await pool.schedule();
    b.finish(i, result.view());
  } catch (const std::exception& e) {
    b.fail(i, e.what());
  }
}

task<void> run_all(batch& b, thread_pool& pool, memory_gate& gate) {
  async_scope scope;
  for (int i = 0; i < static_cast<int>(b.jobs().size()); ++i) {
    scope.spawn(process_on_cpu(b, i, pool, gate));
  }
  co_await scope.join();
}

} // namespace

std::size_t image_footprint(std::size_t pixels) noexcept {
  // Decoded bytes (up to 3 per pixel), the float input, blur temporary and blurred image,
  // and the edge bytes.
  return pixels * (3 + 3 * sizeof(float) + 1);
}

std::size_t gpu_image_footprint(std::size_t pixels) noexcept {
  return pixels * (3 + 3 + 3 + 3 * sizeof(float) + 1 + 1);
}

std::size_t default_memory_budget(int threads, std::uint64_t physical_memory) noexcept {
  const std::size_t wanted =
      std::max<std::size_t>(512, 96 * static_cast<std::size_t>(std::max(1, threads))) << 20;
  if (physical_memory == 0) {
    return wanted;
  }
  return static_cast<std::size_t>(std::min<std::uint64_t>(wanted, physical_memory / 2));
}

std::uint64_t physical_memory_bytes() noexcept {
  const long pages = ::sysconf(_SC_PHYS_PAGES);
  const long page_size = ::sysconf(_SC_PAGE_SIZE);
  return pages > 0 && page_size > 0
             ? static_cast<std::uint64_t>(pages) * static_cast<std::uint64_t>(page_size)
             : 0;
}

std::size_t default_stream_count(int threads) noexcept {
  return std::clamp<std::size_t>(2 * static_cast<std::size_t>(std::max(1, threads)), 8, 32);
}

std::size_t default_max_in_flight(int threads) noexcept {
  return std::max<std::size_t>(8, 2 * static_cast<std::size_t>(std::max(1, threads)));
}

std::size_t images_in_flight(std::size_t memory_budget, std::size_t footprint,
                             std::size_t max_images) {
  const std::size_t units = std::max<std::size_t>(1, memory_budget / memory_gate::unit);
  const std::size_t per_image =
      std::max<std::size_t>(1, (footprint + memory_gate::unit - 1) / memory_gate::unit);
  const std::size_t by_budget = std::max<std::size_t>(1, units / per_image);
  return max_images == 0 ? by_budget : std::min(by_budget, max_images);
}

std::string in_flight_note(const batch& b, std::size_t memory_budget, std::size_t footprint) {
  const std::size_t cap = b.config().max_in_flight;
  const std::string budget = "memory budget " + std::to_string(memory_budget >> 20) + " MiB" +
                             (cap != 0 ? ", at most " + std::to_string(cap) + " images" : "");
  const bool synthetic = !b.jobs().empty() && b.jobs().front().source.empty();
  if (!synthetic || footprint == 0) {
    return budget + " bound the images in flight";
  }
  const std::size_t images = images_in_flight(memory_budget, footprint, cap);
  const std::size_t n = std::min(images, b.jobs().size());
  return "up to " + std::to_string(n) + (n == 1 ? " image" : " images") + " in flight (" + budget +
         ")";
}

void run_coro_cpu(batch& b, std::size_t memory_budget) {
  memory_gate gate(memory_budget, b.config().max_in_flight);
  thread_pool pool(static_cast<std::size_t>(b.config().threads));
  b.log().recorder().name_executor(&pool, "pool"); // the trace's thread tracks
  b.set_concurrency_note(
      in_flight_note(b, memory_budget,
                     image_footprint(static_cast<std::size_t>(b.config().width) *
                                     static_cast<std::size_t>(b.config().height))));
  b.start_clock();
  sync_wait(run_all(b, pool, gate));
}

} // namespace cuawait::images
