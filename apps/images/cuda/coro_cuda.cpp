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

#include <array>
#include <cstring>
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

struct gpu_context {
  batch& b;
  runtime& rt;
  cuda::stream_pool& streams;
  memory_gate& gate;
  const gpu::gpu_timeline& timeline;
  std::vector<int> lanes; // trace lane of each stream of the pool
};

std::size_t expected_pixels(const batch& b, int i) {
  const job& j = b.jobs()[static_cast<std::size_t>(i)];
  if (j.source.empty()) {
    return static_cast<std::size_t>(b.config().width) * static_cast<std::size_t>(b.config().height);
  }
  const auto size = peek_size(j.source);
  return size ? static_cast<std::size_t>(size->first) * static_cast<std::size_t>(size->second) : 0;
}

// The buffers of one image's GPU steps, allocated in stream order on its stream (and so
// never reused under its own work). Pinned host memory is pooled, device memory comes from
// the stream-ordered pool: no cudaMalloc/cudaHostAlloc on the hot path once warm.
struct gpu_buffers {
  gpu_buffers(std::size_t n, cuda::stream_ref s)
      : in(n, s), tmp(n, s), blurred(n, s), edges(n, s), hist(feature_count, s), host_edges(n, s),
        host_hist(feature_count, s) {}
  cuda::device_buffer<float> in;
  cuda::device_buffer<float> tmp;
  cuda::device_buffer<float> blurred;
  cuda::device_buffer<std::uint8_t> edges;
  cuda::device_buffer<double> hist;
  cuda::pinned_buffer<std::uint8_t> host_edges;
  cuda::pinned_buffer<double> host_hist;
};

// Enqueues upload, blur, Sobel + histogram and download on `s` between timing marks.
void enqueue_steps(cuda::stream_ref s, cuda::pinned_buffer<float>& host_in, gpu_buffers& d, int w,
                   int h, step_marks& marks) {
  marks.mark(0, s);
  (void)s.copy(d.in, host_in);
  marks.mark(1, s);
  gpu::launch_blur(d.in.data(), d.tmp.data(), d.blurred.data(), w, h, s.get());
  marks.mark(2, s);
  gpu::launch_sobel_hog(d.blurred.data(), w, h, d.edges.data(), d.hist.data(), s.get());
  marks.mark(3, s);
  (void)s.copy(d.host_edges, d.edges);
  (void)s.copy(d.host_hist, d.hist);
  marks.mark(4, s);
}

// One image, start to end, as the sequential pipeline it is.
task<void> run_image(gpu_context& ctx, int i) {
  // CPU: decode and preprocess into pinned memory BEFORE taking a stream, so that a stream
  // is only ever held by GPU work and 16 threads can preprocess while the streams are busy.
  int w = 0;
  int h = 0;
  cuda::pinned_buffer<float> host_in;
  {
    image8 img;
    {
      const scoped_span span(ctx.b.log(), i, "decode");
      img = ctx.b.load(i);
    }
    w = img.width;
    h = img.height;
    host_in = cuda::pinned_buffer<float>(img.pixel_count());
    const scoped_span span(ctx.b.log(), i, "preprocess");
    ctx.b.preprocess(img, host_in.span());
  }
  const std::size_t n = host_in.size();
  cuda::stream_lease s = co_await ctx.streams.acquire();
  host_in.set_stream(s); // from now on its release waits for the upload
  gpu_buffers d(n, s);
  step_marks marks;
  enqueue_steps(s, host_in, d, w, h, marks);
  co_await s; // one completion for the whole sequence; the thread serves other images
  host_in.reset(); // back to the pool while this image still holds `s` (its fence is then ours)
  const int lane = ctx.lanes[s.index()];
  const char* names[] = {"H2D", "blur", "sobel+hog", "D2H"};
  for (int k = 0; k < 4; ++k) {
    ctx.timeline.record(lane, i, names[k], marks[k], marks[k + 1]);
  }
  std::array<double, feature_count> sums{};
  std::memcpy(sums.data(), d.host_hist.data(), sizeof sums);
  // CPU postprocess on the pool, reading the edge bytes where the GPU put them.
  ctx.b.finish(i, {w, h, std::span<const std::uint8_t>(d.host_edges.data(), n), to_features(sums)});
}

task<void> process_on_gpu(gpu_context& ctx, int i) {
  co_await ctx.rt.pool().schedule();
  if (ctx.b.stopping()) {
    co_return;
  }
  memory_gate::share share =
      co_await ctx.gate.acquire(gpu_image_footprint(expected_pixels(ctx.b, i)));
  co_await ctx.rt.pool().schedule(); // never continue nested inside another image's release
  try {
    co_await run_image(ctx, i);
  } catch (const std::exception& e) {
    ctx.b.fail(i, e.what());
  }
}

task<void> run_all(gpu_context& ctx) {
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
  memory_gate gate(memory_budget);
  const gpu::gpu_timeline timeline(b.log(), streams.at(0).get());
  gpu_context ctx{b, rt, streams, gate, timeline, {}};
  for (std::size_t k = 0; k < streams.size(); ++k) {
    ctx.lanes.push_back(b.log().add_gpu_lane("GPU stream " + std::to_string(k)));
  }
  b.set_concurrency_note(
      in_flight_note(b, memory_budget, gpu_image_footprint(expected_pixels(b, 0))) + ", " +
      std::to_string(stream_count) + " streams");
  b.start_clock();
  rt.run(run_all(ctx));
}

} // namespace cuawait::images
