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

//! Streams in the pool: enough for copies of some images to overlap kernels of others.
constexpr std::size_t stream_count = 8;

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

// The GPU part of one image: upload, blur, Sobel + histogram, download, awaited once.
task<image_result> gpu_stages(gpu_context& ctx, int i, const image8& img) {
  const int w = img.width;
  const int h = img.height;
  const std::size_t n = img.pixel_count();
  cuda::stream_lease s = co_await ctx.streams.acquire();
  // Buffers are released in stream order on `s`, so none is reused under its own work.
  cuda::pinned_buffer<float> host_in(n, s);
  {
    const scoped_span span(ctx.b.log(), i, "preprocess");
    ctx.b.preprocess(img, std::span<float>(host_in.data(), n));
  }
  cuda::device_buffer<float> in(n, s);
  cuda::device_buffer<float> tmp(n, s);
  cuda::device_buffer<float> blurred(n, s);
  cuda::device_buffer<std::uint8_t> edges(n, s);
  cuda::device_buffer<double> hist(feature_count, s);
  cuda::pinned_buffer<std::uint8_t> host_edges(n, s);
  cuda::pinned_buffer<double> host_hist(feature_count, s);
  step_marks marks;
  marks.mark(0, s);
  (void)s.copy(in, host_in);
  marks.mark(1, s);
  gpu::launch_blur(in.data(), tmp.data(), blurred.data(), w, h, s.get());
  marks.mark(2, s);
  gpu::launch_sobel_hog(blurred.data(), w, h, edges.data(), hist.data(), s.get());
  marks.mark(3, s);
  (void)s.copy(host_edges, edges);
  (void)s.copy(host_hist, hist);
  marks.mark(4, s);
  co_await s; // one completion for the whole sequence; the thread serves other images
  const int lane = ctx.lanes[s.index()];
  const char* names[] = {"H2D", "blur", "sobel+hog", "D2H"};
  for (int k = 0; k < 4; ++k) {
    ctx.timeline.record(lane, i, names[k], marks[k], marks[k + 1]);
  }
  image_result r{w, h, std::vector<std::uint8_t>(host_edges.data(), host_edges.data() + n), {}};
  std::array<double, feature_count> sums{};
  std::memcpy(sums.data(), host_hist.data(), sizeof sums);
  r.features = to_features(sums);
  co_return r;
}

task<void> process_on_gpu(gpu_context& ctx, int i) {
  co_await ctx.rt.pool().schedule();
  if (ctx.b.stopping()) {
    co_return;
  }
  memory_gate::share share = co_await ctx.gate.acquire(image_footprint(expected_pixels(ctx.b, i)));
  co_await ctx.rt.pool().schedule(); // never continue nested inside another image's release
  try {
    image8 img;
    {
      const scoped_span span(ctx.b.log(), i, "decode");
      img = ctx.b.load(i);
    }
    const image_result result = co_await gpu_stages(ctx, i, img);
    img = {};
    ctx.b.finish(i, result); // resumed on the pool: the CPU postprocess runs there
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

void run_coro_cuda(batch& b, std::size_t memory_budget) {
  runtime_options options;
  options.threads = static_cast<std::size_t>(b.config().threads);
  runtime rt(options);
  cuda::stream_pool streams(stream_count);
  memory_gate gate(memory_budget);
  const gpu::gpu_timeline timeline(b.log(), streams.at(0).get());
  gpu_context ctx{b, rt, streams, gate, timeline, {}};
  for (std::size_t k = 0; k < streams.size(); ++k) {
    ctx.lanes.push_back(b.log().add_gpu_lane("GPU stream " + std::to_string(k)));
  }
  b.start_clock();
  rt.run(run_all(ctx));
}

} // namespace cuawait::images
