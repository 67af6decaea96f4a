// SPDX-License-Identifier: Apache-2.0
// The coroutine mode on the GPU: one coroutine per image, written as the sequential
// pipeline it is, on the public cuawait API. CPU stages run on the runtime's thread pool;
// each image leases a stream from a stream_pool, uses stream-ordered device buffers and
// pinned host buffers, enqueues its copies and kernels and awaits them once; a memory gate
// (an async_semaphore) bounds the images in flight.

#include "batch.hpp"
#include "codec.hpp"
#include "coro_mode.hpp"
#include "gpu_timeline.hpp"
#include "kernels.cuh"
#include "memory_gate.hpp"

#include <cuawait/async_scope.hpp>
#include <cuawait/cuda/device_buffer.hpp>
#include <cuawait/cuda/pinned_buffer.hpp>
#include <cuawait/cuda/stream_pool.hpp>
#include <cuawait/runtime.hpp>
#include <cuawait/task.hpp>

#include <algorithm>
#include <array>
#include <cstring>
#include <exception>
#include <vector>

namespace cuawait::images {
namespace {

// Timing events around the four GPU steps of one image (five marks).
class step_marks {
public:
  step_marks() {
    for (cudaEvent_t& e : m_events) {
      CUAWAIT_CUDA_CHECK("timing event", cudaEventCreate(&e));
    }
  }
  step_marks(const step_marks&) = delete;
  step_marks& operator=(const step_marks&) = delete;
  ~step_marks() {
    for (cudaEvent_t e : m_events) {
      if (e != nullptr) {
        cuda::check_noexcept(cudaEventDestroy(e), "timing event", "cudaEventDestroy");
      }
    }
  }
  void mark(int i, cuda::stream_ref s) {
    CUAWAIT_CUDA_CHECK("timing event",
                       cudaEventRecord(m_events[static_cast<std::size_t>(i)], s.get()));
  }
  [[nodiscard]] cudaEvent_t operator[](int i) const {
    return m_events[static_cast<std::size_t>(i)];
  }

private:
  std::array<cudaEvent_t, 5> m_events{};
};

// The GPU resources of one stream of the pool: device buffers and timing events, used
// only by the image that leases the stream. The next holder's work runs behind the
// previous holder's in stream order, so reusing them needs no fence, and the hot path
// makes no device allocation and creates no event.
class stream_slot {
public:
  //! Grows the buffers to `n` pixels, in stream order on `s` (the slot's own stream).
  void reserve(std::size_t n, cuda::stream_ref s) {
    if (n <= m_capacity) {
      return;
    }
    in = cuda::device_buffer<float>(n, s);
    tmp = cuda::device_buffer<float>(n, s);
    blurred = cuda::device_buffer<float>(n, s);
    edges = cuda::device_buffer<std::uint8_t>(n, s);
    if (hist.empty()) {
      hist = cuda::device_buffer<double>(feature_count, s);
    }
    m_capacity = n;
  }

  cuda::device_buffer<float> in;
  cuda::device_buffer<float> tmp;
  cuda::device_buffer<float> blurred;
  cuda::device_buffer<std::uint8_t> edges;
  cuda::device_buffer<double> hist;
  step_marks marks;

private:
  std::size_t m_capacity = 0;
};

// The pinned host buffers of one image: taken from the pool before its stream, kept past
// it for the postprocess.
struct host_buffers {
  explicit host_buffers(std::size_t n) : in(n), edges(n), hist(feature_count) {}
  cuda::pinned_buffer<float> in;
  cuda::pinned_buffer<std::uint8_t> edges;
  cuda::pinned_buffer<double> hist;
};

struct gpu_context {
  batch& b;
  runtime& rt;
  cuda::stream_pool& streams;
  std::vector<stream_slot>& slots; // one per stream of the pool, by index
  memory_gate& gate;
  const gpu::gpu_timeline& timeline;
  std::vector<int> lanes; // trace lane of each stream of the pool
};

// Enqueues upload, blur, Sobel + histogram and download on `s` between timing marks.
void enqueue_steps(cuda::stream_ref s, host_buffers& host, stream_slot& d, int w, int h) {
  const std::size_t n = host.in.size();
  d.marks.mark(0, s);
  (void)s.copy(d.in.data(), host.in.data(), n);
  d.marks.mark(1, s);
  gpu::launch_blur(d.in.data(), d.tmp.data(), d.blurred.data(), w, h, s.get());
  d.marks.mark(2, s);
  gpu::launch_sobel_hog(d.blurred.data(), w, h, d.edges.data(), d.hist.data(), s.get());
  d.marks.mark(3, s);
  (void)s.copy(host.edges.data(), d.edges.data(), n);
  (void)s.copy(host.hist.data(), d.hist.data(), feature_count);
  d.marks.mark(4, s);
}

// The GPU part of one image: lease a stream, enqueue everything, await it once, record the
// spans. The stream goes back before the CPU postprocess, so a stream is only ever held
// while GPU work of its image is queued or running.
task<void> run_on_gpu(gpu_context& ctx, int i, host_buffers& host, int w, int h) {
  cuda::stream_lease s = co_await ctx.streams.acquire();
  stream_slot& slot = ctx.slots[s.index()];
  slot.reserve(host.in.size(), s);
  std::exception_ptr failed;
  try {
    enqueue_steps(s, host, slot, w, h);
  } catch (...) {
    failed = std::current_exception();
  }
  if (failed) {
    // Copies may be in flight from or into the host buffers, which the caller frees: wait
    // for them without blocking this thread (no co_await inside a catch block).
    (void)co_await s.drain().try_await();
    std::rethrow_exception(failed);
  }
  co_await s; // one completion for the whole sequence; the thread serves other images
  const int lane = ctx.lanes[s.index()];
  const char* names[] = {"H2D", "blur", "sobel+hog", "D2H"};
  for (int k = 0; k < 4; ++k) {
    ctx.timeline.record(lane, i, names[k], slot.marks[k], slot.marks[k + 1]);
  }
}

// One image, start to end, as the sequential pipeline it is.
task<void> run_image(gpu_context& ctx, int i) {
  // CPU: decode and preprocess into pinned memory BEFORE taking a stream, so that a stream
  // is only ever held by GPU work and every thread can preprocess while the streams are busy.
  image8 img;
  {
    const scoped_span span(ctx.b.log(), i, "decode");
    img = ctx.b.load(i);
  }
  const int w = img.width;
  const int h = img.height;
  host_buffers host(img.pixel_count());
  {
    const scoped_span span(ctx.b.log(), i, "preprocess");
    ctx.b.preprocess(img, host.in.span());
    img = {};
  }
  co_await run_on_gpu(ctx, i, host, w, h);
  host.in.reset(); // the upload is done: back to the pool for the next image
  std::array<double, feature_count> sums{};
  std::memcpy(sums.data(), host.hist.data(), sizeof sums);
  // CPU postprocess on the pool, reading the edge bytes where the GPU put them.
  ctx.b.finish(i, {w, h, std::span<const std::uint8_t>(host.edges.data(), host.edges.size()),
                   to_features(sums)});
}

task<void> process_on_gpu(gpu_context& ctx, int i) {
  co_await ctx.rt.pool().schedule();
  if (ctx.b.stopping()) {
    co_return;
  }
  memory_gate::share share =
      co_await ctx.gate.acquire(gpu_image_footprint(ctx.b.expected_pixels(i)));
  co_await ctx.rt.pool().schedule(); // never continue nested inside another image's release
  if (ctx.b.stopping()) {
    co_return; // stopped while waiting for memory: start nothing new
  }
  try {
    co_await run_image(ctx, i);
  } catch (const std::exception& e) {
    ctx.b.fail(i, e.what());
  }
}

// Untimed setup, as a user of the library would do before a batch: every first-use cost
// of the GPU path is paid here, so the timed run measures the steady state. For images of
// `pixels` pixels (0: unknown, buffers then grow on first use) and `in_flight` images:
// - each stream's device buffers, allocated in stream order (the device pool grows now);
// - the pinned pool holds the host buffers of every image in flight (cudaHostAlloc costs
//   about 1 ms per 4 MiB block): allocated once and returned, so the run only reuses them;
// - each kernel launched once (CUDA loads a kernel's module on its first launch);
// - each stream awaited once (the reactor's per-stream state).
task<void> warm_up(gpu_context& ctx, std::size_t pixels, std::size_t in_flight) {
  std::vector<host_buffers> held;
  if (pixels > 0) {
    for (std::size_t k = 0; k < ctx.streams.size(); ++k) {
      ctx.slots[k].reserve(pixels, ctx.streams.at(k));
    }
    held.reserve(in_flight);
    held.emplace_back(pixels);
    try { // best effort beyond the first: the run allocates what it lacks
      for (std::size_t k = 1; k < in_flight; ++k) {
        held.emplace_back(pixels);
      }
    } catch (const cuda::cuda_error&) {
      (void)cudaGetLastError();
    }
    stream_slot& s0 = ctx.slots[0];
    gpu::warm_up_gpu(ctx.streams.at(0).get(), held.front().in.data(), s0.in.data(), s0.tmp.data(),
                     s0.blurred.data(), s0.edges.data(), s0.hist.data(), held.front().edges.data());
  }
  for (std::size_t k = 0; k < ctx.streams.size(); ++k) {
    co_await ctx.streams.at(k);
  }
  // `held` dies here, after every copy from or into it completed: its blocks go back to
  // the pool without a fence, ready for the first images.
}

task<void> run_all(gpu_context& ctx, std::size_t pixels, std::size_t in_flight) {
  co_await warm_up(ctx, pixels, in_flight);
  ctx.b.start_clock();
  async_scope scope;
  for (int i = 0; i < static_cast<int>(ctx.b.jobs().size()); ++i) {
    scope.spawn(process_on_gpu(ctx, i));
  }
  co_await scope.join();
}

} // namespace

void run_coro_cuda(batch& b, std::size_t memory_budget, std::size_t stream_count) {
  runtime_options options;
  options.threads = static_cast<std::size_t>(b.config().threads);
  runtime rt(options);
  if (stream_count == 0) {
    stream_count = default_stream_count(b.config().threads);
  }
  cuda::stream_pool streams(stream_count);
  std::vector<stream_slot> slots(stream_count); // after `streams`: freed on them first
  memory_gate gate(memory_budget);
  const gpu::gpu_timeline timeline(b.log(), streams.at(0).get());
  gpu_context ctx{b, rt, streams, slots, gate, timeline, {}};
  for (std::size_t k = 0; k < streams.size(); ++k) {
    ctx.lanes.push_back(b.log().add_gpu_lane("GPU stream " + std::to_string(k)));
  }
  const std::size_t pixels = b.jobs().empty() ? 0 : b.expected_pixels(0);
  const std::size_t footprint = gpu_image_footprint(pixels);
  const std::size_t in_flight =
      std::min(b.jobs().size(), images_in_flight(memory_budget, footprint));
  b.set_concurrency_note(in_flight_note(b, memory_budget, footprint) + ", " +
                         std::to_string(stream_count) + " streams");
  rt.run(run_all(ctx, pixels, in_flight));
}

} // namespace cuawait::images
