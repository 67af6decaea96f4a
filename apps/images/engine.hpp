// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! `stage_engine`: runs the middle of the pipeline (blur, gradients, histogram, edge
//! image) for one image at a time, on the CPU or on the GPU. The sync and threads modes
//! give each worker thread its own engine; the coroutine mode does not use engines.

#include "stages.hpp"
#include "trace_log.hpp"

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

namespace cuawait::images {

class batch;

//! One worker's means of running the middle stages. Not thread-safe: one per thread.
class stage_engine {
public:
  virtual ~stage_engine() = default;

  //! A buffer of at least `shape.bytes()` bytes where the decoder writes the next image's
  //! 8-bit pixels (pinned host memory for the CUDA engine, so the upload needs no staging
  //! copy, and 1 or 3 bytes a pixel cross the bus instead of a 4-byte float). Valid until the next
  //! call of `input` or `process`.
  //! @throws std::bad_alloc, cuda_error
  [[nodiscard]] virtual std::span<std::uint8_t> input(const image_shape& shape) = 0;

  //! Runs the stages (gray conversion, blur, Sobel, histogram, edge image) on the image of
  //! `shape` in `input()`; `image` is the job index for the trace. Records its spans in the
  //! engine's trace log. The result points into the engine's buffers: valid until the next
  //! call of `input` or `process`.
  //! @throws std::runtime_error (cuda_error for the CUDA engine)
  [[nodiscard]] virtual result_view process(const image_shape& shape, int image) = 0;

  //! Untimed setup before the first image: sizes the buffers for images of `pixels`
  //! pixels and pays every first-use cost (allocations, lazy kernel loading) now, so that
  //! the timed run measures the steady state, as the coroutine mode's setup does. The
  //! default does nothing. @throws std::bad_alloc, cuda_error
  virtual void warm_up(std::size_t pixels) { (void)pixels; }
};

//! The CPU reference engine; records its work as a "cpu stages" span on the calling
//! thread's lane.
[[nodiscard]] std::unique_ptr<stage_engine> make_cpu_engine(trace_log& log);

//! The ceiling engine: no pipeline at all. Its "edge image" is a stand-in made in one cheap
//! pass (the absolute difference of horizontally adjacent bytes of the first channel) and
//! its features are zeros, so that a run with it times decoding, encoding and writing alone:
//! the most a batch of these files can reach on these CPU threads. Records a "stand-in"
//! span.
[[nodiscard]] std::unique_ptr<stage_engine> make_ceiling_engine(trace_log& log);

//! What a GPU backend offers the program. The program's core is CUDA-free; the executable
//! passes an implementation when it was built with CUDA.
class gpu_backend {
public:
  virtual ~gpu_backend() = default;
  //! Empty when a CUDA device can be used; otherwise why not.
  [[nodiscard]] virtual std::string unavailable_reason() = 0;
  //! Creates the CUDA context on the device, so that this one-off cost (tens to hundreds of
  //! ms) stays out of the timed run. Called once, before any engine or coroutine mode.
  //! @throws cuda_error
  virtual void prepare() = 0;
  //! A one-line description of the device ("NVIDIA H200, 132 SMs").
  [[nodiscard]] virtual std::string device_name() = 0;
  //! A new engine with its own stream and buffers (raw CUDA, synchronising after each step).
  //! Its GPU operations are recorded, with GPU timestamps, on a new GPU lane of `log`.
  //! @throws cuda_error
  [[nodiscard]] virtual std::unique_ptr<stage_engine> make_engine(trace_log& log) = 0;
  //! True when this build can decode JPEGs on the GPU (nvJPEG was found at build time).
  [[nodiscard]] virtual bool has_gpu_decode() const = 0;
  //! The coroutine mode on the GPU: one coroutine per image of `b`, at most
  //! `memory_budget` bytes of image buffers in flight, over a pool of `streams` streams
  //! (0: `default_stream_count`); JPEG files are decoded by nvJPEG when
  //! `b.config().gpu_decode` is set (see docs/IMAGES.md for what falls back to the CPU).
  //! @throws cuda_error when the device cannot be set up
  virtual void run_coro(batch& b, std::size_t memory_budget, std::size_t streams) = 0;
};

} // namespace cuawait::images
