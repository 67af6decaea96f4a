// SPDX-License-Identifier: Apache-2.0
// The CUDA backend: device probing, and the raw-CUDA engine of the sync and threads modes
// (one stream per engine, cudaStreamSynchronize after every step, the traditional blocking loop).

#include "cuda_backend.hpp"

#include "gpu_timeline.hpp"
#include "jpeg_decoder.hpp"
#include "kernels.cuh"
#include "raw_buffers.hpp"

#include <cuawait/cuda/error.hpp>
#include <cuawait/cuda/stream.hpp>

#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>

namespace cuawait::images {

// Defined in coro_cuda.cpp: the coroutine mode on the GPU.
void run_coro_cuda(batch& b, std::size_t memory_budget, std::size_t streams);

namespace gpu {
namespace {

class cuda_engine final : public stage_engine {
public:
  cuda_engine(trace_log& log, int lane) : m_timeline(log, m_stream.get()), m_lane(lane) {}

  std::span<std::uint8_t> input(const image_shape& shape) override {
    return {static_cast<std::uint8_t*>(m_host_in.reserve(shape.bytes())), shape.bytes()};
  }

  result_view process(const image_shape& shape, int image) override {
    const int w = shape.width;
    const int h = shape.height;
    const std::size_t n = shape.pixel_count();
    reserve(n);
    const cudaStream_t s = m_stream.get();
    // The 8-bit pixels go up (1 or 3 bytes a pixel instead of a 4-byte float) and become
    // gray floats on the GPU, in the same step.
    step(image, "H2D", [&] {
      CUAWAIT_CUDA_CHECK("copy H2D",
                         cudaMemcpyAsync(m_raw.as<std::uint8_t>(), m_host_in.as<std::uint8_t>(),
                                         shape.bytes(), cudaMemcpyHostToDevice, s));
      launch_gray(m_raw.as<std::uint8_t>(), w, h, shape.channels, 1, m_in.as<float>(), s);
    });
    step(image, "blur",
         [&] { launch_blur(m_in.as<float>(), m_tmp.as<float>(), m_blurred.as<float>(), w, h, s); });
    step(image, "sobel+hog", [&] {
      launch_sobel_hog(m_blurred.as<float>(), w, h, m_edges.as<std::uint8_t>(), m_hist.as<double>(),
                       s);
    });
    step(image, "D2H", [&] {
      CUAWAIT_CUDA_CHECK("copy D2H",
                         cudaMemcpyAsync(m_host_edges.as<std::uint8_t>(),
                                         m_edges.as<std::uint8_t>(), n, cudaMemcpyDeviceToHost, s));
      CUAWAIT_CUDA_CHECK("copy D2H", cudaMemcpyAsync(m_host_hist.as<double>(), m_hist.as<double>(),
                                                     sizeof(double) * feature_count,
                                                     cudaMemcpyDeviceToHost, s));
    });
    std::array<double, feature_count> hist{};
    std::memcpy(hist.data(), m_host_hist.as<double>(), sizeof hist);
    return {w, h, std::span<const std::uint8_t>(m_host_edges.as<std::uint8_t>(), n),
            to_features(hist)};
  }

  void warm_up(std::size_t pixels) override {
    if (pixels == 0) {
      return;
    }
    (void)m_host_in.reserve(3 * pixels); // sized for colour: 3 bytes a pixel
    reserve(pixels);
    warm_up_gpu(m_stream.get(), m_host_in.as<std::uint8_t>(), m_raw.as<std::uint8_t>(),
                m_in.as<float>(), m_tmp.as<float>(), m_blurred.as<float>(),
                m_edges.as<std::uint8_t>(), m_hist.as<double>(), m_host_edges.as<std::uint8_t>());
    CUAWAIT_CUDA_CHECK("timing event", cudaEventRecord(m_events.start(), m_stream.get()));
    CUAWAIT_CUDA_CHECK("timing event", cudaEventRecord(m_events.end(), m_stream.get()));
    m_stream.sync();
  }

private:
  // Enqueues one step between timing events, waits for it, and records its GPU span.
  template <class F>
  void step(int image, const char* name, F&& enqueue) {
    const cudaStream_t s = m_stream.get();
    CUAWAIT_CUDA_CHECK("timing event", cudaEventRecord(m_events.start(), s));
    enqueue();
    CUAWAIT_CUDA_CHECK("timing event", cudaEventRecord(m_events.end(), s));
    m_stream.sync();
    m_timeline.record(m_lane, image, name, m_events.start(), m_events.end());
  }

  void reserve(std::size_t n) {
    m_raw.reserve(3 * n);
    m_in.reserve(n * sizeof(float));
    m_tmp.reserve(n * sizeof(float));
    m_blurred.reserve(n * sizeof(float));
    m_edges.reserve(n);
    m_hist.reserve(sizeof(double) * feature_count);
    m_host_edges.reserve(n);
    m_host_hist.reserve(sizeof(double) * feature_count);
  }

  cuawait::cuda::stream m_stream;
  gpu_timeline m_timeline;
  int m_lane;
  event_pair m_events;
  raw_buffer m_raw{false}, m_in{false}, m_tmp{false}, m_blurred{false}, m_edges{false},
      m_hist{false};
  raw_buffer m_host_in{true}, m_host_edges{true}, m_host_hist{true};
};

class cuda_backend final : public gpu_backend {
public:
  std::string unavailable_reason() override {
    int count = 0;
    const cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess) {
      (void)cudaGetLastError();
      return std::string("no CUDA device: ") + cudaGetErrorName(e) + ": " + cudaGetErrorString(e);
    }
    if (count == 0) {
      return "no CUDA device: cudaGetDeviceCount found 0 devices";
    }
    return {};
  }

  void prepare() override {
    // cudaFree(nullptr) is the customary way to create the primary context now.
    CUAWAIT_CUDA_CHECK("create the CUDA context", cudaFree(nullptr));
  }

  std::string device_name() override {
    cudaDeviceProp p{};
    if (cudaGetDeviceProperties(&p, 0) != cudaSuccess) {
      (void)cudaGetLastError();
      return "device 0";
    }
    return std::string(p.name) + ", " + std::to_string(p.multiProcessorCount) + " SMs";
  }

  std::unique_ptr<stage_engine> make_engine(trace_log& log) override {
    int lane = 0;
    {
      const std::lock_guard lock(m_mutex);
      lane = log.add_gpu_lane("GPU stream " + std::to_string(m_streams++));
    }
    return std::make_unique<cuda_engine>(log, lane);
  }

  bool has_gpu_decode() const override { return jpeg_decoder::built_in(); }

  void run_coro(batch& b, std::size_t memory_budget, std::size_t streams) override {
    run_coro_cuda(b, memory_budget, streams);
  }

private:
  std::mutex m_mutex;
  int m_streams = 0;
};

} // namespace
} // namespace gpu

std::unique_ptr<gpu_backend> make_cuda_backend() {
  // The coroutine mode runs up to 32 streams; with CUDA's default of 8 hardware queues,
  // streams k and k+8 would share one and falsely wait for each other. Must be set before
  // the context exists; a value the user set wins.
  ::setenv("CUDA_DEVICE_MAX_CONNECTIONS", "32", 0);
  return std::make_unique<gpu::cuda_backend>();
}

} // namespace cuawait::images
