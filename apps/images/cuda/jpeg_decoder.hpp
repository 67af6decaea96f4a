// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! JPEG decoding on the GPU with nvJPEG, for the coroutine mode. Compiled with nvJPEG only
//! where the build found it (`CUAWAIT_IMAGES_NVJPEG`); elsewhere `built_in()` is false and
//! `create` says why. This header names no nvJPEG type, so the rest of the program builds
//! the same either way.
//!
//! The CPU decoder (libjpeg) stays the reference: nvJPEG's IDCT and colour conversion may
//! give pixels that differ from libjpeg's by a level or two, so edges and features of a
//! GPU-decoded image are close to, not equal to, those of the CPU path.

#include "image.hpp"

#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>

namespace cuawait::images::gpu {

//! What the CPU learns of a JPEG file, from its header alone, before nvJPEG decodes it.
struct jpeg_plan {
  image_shape stored;  //!< size and channels (1 gray, 3 colour) as stored
  int orientation = 1; //!< EXIF orientation, applied by the gray conversion on the GPU
};

//! One decoder's per-stream state (nvJPEG's decode state and bitstream handle), used by one
//! call at a time: the image that leases the stream it belongs to, or a batch lane's batch.
//! A call may reuse it only once the work of the previous call has completed.
struct jpeg_state;

//! One image of a batched decode: all of its file's bytes, its plan, and where its pixels
//! go (device memory, `plan->stored.bytes()` bytes, rows packed, RGB interleaved or gray).
struct jpeg_batch_item {
  std::span<const std::uint8_t> file;
  const jpeg_plan* plan = nullptr;
  std::uint8_t* out = nullptr;
};

//! Destroys a `jpeg_state`.
struct jpeg_state_deleter {
  void operator()(jpeg_state* s) const noexcept;
};

//! Owner of a `jpeg_state`.
using jpeg_state_ptr = std::unique_ptr<jpeg_state, jpeg_state_deleter>;

//! The nvJPEG library handle: the hardware backend (the GPU's JPEG engines) where the device
//! has one, else nvJPEG's default backend. Thread-safe except through a `jpeg_state`.
class jpeg_decoder {
public:
  //! True when this build has nvJPEG.
  [[nodiscard]] static bool built_in() noexcept;

  //! The decoder, or nullptr with the reason in `why_not` (no nvJPEG in this build, or
  //! nvjpegCreateEx failed). Call after the CUDA context exists.
  [[nodiscard]] static std::unique_ptr<jpeg_decoder> create(std::string& why_not);

  jpeg_decoder(const jpeg_decoder&) = delete;
  jpeg_decoder& operator=(const jpeg_decoder&) = delete;
  ~jpeg_decoder();

  //! "hardware" or "default": the nvJPEG backend in use.
  [[nodiscard]] const char* backend_name() const noexcept;
  //! True when the hardware backend (the GPU's JPEG engines) is in use.
  [[nodiscard]] bool hardware() const noexcept;

  //! CPU, any thread: the plan for decoding `file` (all of a file's bytes) on the GPU, or
  //! nullopt when the CPU decoder should take it: not a JPEG, a header nvJPEG cannot read,
  //! other than 1 or 3 components, more pixels than `max_pixels`, or a file that does not
  //! end with the EOI marker (truncated: libjpeg then names the problem).
  [[nodiscard]] std::optional<jpeg_plan> plan(std::span<const std::uint8_t> file,
                                              std::uint64_t max_pixels) const;

  //! CPU, any thread: whether the batched decoder takes `file` (a file `plan` accepted).
  //! With the hardware backend, `nvjpegDecodeBatchedSupported` on the parsed file: the
  //! engines take baseline files with the usual subsamplings only (progressive ones go to
  //! the CPU decoder). Always true with the default backend.
  [[nodiscard]] bool batch_supported(std::span<const std::uint8_t> file) const;

  //! A new per-stream state. @throws std::runtime_error when nvJPEG fails
  [[nodiscard]] jpeg_state_ptr make_state() const;

  //! Asks nvJPEG to set up `state`'s internal buffers now (hardware backend; best effort,
  //! as NVIDIA's own decoders do: the engines' buffers then come from a pool). Untimed
  //! setup, before the state's first batch.
  void preallocate(jpeg_state& state) const;

  //! Enqueues on `s` the decode of `items` by one `nvjpegDecodeBatched` call with `state`,
  //! which is (re)initialised when the batch's size or output format differs from its
  //! previous call's. Every item must have the same channels. The files must stay alive and
  //! unchanged until the work on `s` completes. Returns false when nvJPEG refuses the batch
  //! as a whole (then nothing usable was written, and the state is reset for its next call);
  //! a file the hardware backend does not take (`batch_supported`) may be refused this way.
  [[nodiscard]] bool decode_batch(jpeg_state& state, std::span<const jpeg_batch_item> items,
                                  cudaStream_t s) const;

  //! Enqueues on `s` the decode of `file` into `out` (device, `plan.stored.bytes()` bytes,
  //! rows packed, RGB interleaved or gray), with `state`. `file` must stay alive and
  //! unchanged until the work on `s` completes. Returns false when nvJPEG refuses the file
  //! (the hardware engine cannot take it, or the data is bad): then nothing usable was
  //! written and the caller decodes on the CPU.
  [[nodiscard]] bool decode(jpeg_state& state, std::span<const std::uint8_t> file,
                            const jpeg_plan& plan, std::uint8_t* out, cudaStream_t s) const;

  //! The process's nvJPEG host time so far: decode calls, images, initialisations (for a
  //! run's summary; where the CPU time of GPU decoding goes).
  [[nodiscard]] static std::string call_summary();

private:
  struct impl;
  explicit jpeg_decoder(std::unique_ptr<impl> p) noexcept;
  std::unique_ptr<impl> m_impl;
};

} // namespace cuawait::images::gpu
