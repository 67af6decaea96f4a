// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! `jpeg_lanes`: nvJPEG behind the program's `decode_batcher` (decode_batcher.hpp). Each
//! lane has its own nvJPEG handle (of the decoder's backend; the decoder's own where a second
//! one cannot be made), decode state, stream, timing events and trace lane; the batcher
//! uses a lane for one batch at a time, so a state is reused only after its previous batch
//! finished (nvJPEG's rule), and two lanes let one batch decode while the next gathers.
//! Each image of a batch is decoded into a device buffer of its own, allocated in stream
//! order on the lane's stream; the image then reads it from the stream it leases.

#include "decode_batcher.hpp"
#include "gpu_timeline.hpp"
#include "jpeg_decoder.hpp"

#include <cuawait/cuda/device_buffer.hpp>
#include <cuawait/cuda/device_context.hpp>
#include <cuawait/cuda/stream.hpp>
#include <cuawait/task.hpp>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace cuawait::images::gpu {

//! One image's request for a batched GPU decode; lives in the image's coroutine frame.
struct jpeg_job : decode_job {
  std::span<const std::uint8_t> file; //!< all of the file's bytes, alive until decoded
  jpeg_plan plan;
  int image = -1; //!< the job's index, for the trace
  //! The decoded pixels (`plan.stored.bytes()`), made by the lane. Complete once the
  //! batcher resumed the image; freed in stream order on the lane's stream.
  cuda::device_buffer<std::uint8_t> out;
};

class jpeg_lanes final : public batch_decoder {
public:
  //! `lanes` lanes of `decoder`, each with a trace lane named `name` + " k". `device`: the
  //! device made current before each call (runs over several devices), or null.
  //! @throws cuda_error, std::runtime_error (nvJPEG)
  jpeg_lanes(const jpeg_decoder& decoder, std::size_t lanes, const gpu_timeline& timeline,
             const std::string& name, cuda::device_context* device);
  jpeg_lanes(const jpeg_lanes&) = delete;
  jpeg_lanes& operator=(const jpeg_lanes&) = delete;
  ~jpeg_lanes() override;

  [[nodiscard]] std::size_t lanes() const noexcept override { return m_lanes.size(); }
  [[nodiscard]] bool enqueue_batch(std::size_t lane, std::span<decode_job* const> jobs) override;
  [[nodiscard]] bool enqueue_one(std::size_t lane, decode_job& job) override;
  [[nodiscard]] task<void> finish(std::size_t lane) override;
  void decoded(std::size_t lane, std::span<decode_job* const> jobs) override;

  //! Untimed setup: enqueues on every lane a decode of `file` (planned as `plan`), so that
  //! nvJPEG's first-use costs are paid before the run; await `finish(k)` for each lane
  //! before `file` goes.
  void warm_up(std::span<const std::uint8_t> file, const jpeg_plan& plan);

private:
  struct lane;
  bool enqueue(lane& l, std::span<decode_job* const> jobs);

  const gpu_timeline& m_timeline;
  cuda::device_context* m_device;
  std::vector<std::unique_ptr<lane>> m_lanes;
};

} // namespace cuawait::images::gpu
