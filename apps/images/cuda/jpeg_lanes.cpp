// SPDX-License-Identifier: Apache-2.0
#include "jpeg_lanes.hpp"

#include <cuawait/cuda/error.hpp>

namespace cuawait::images::gpu {

struct jpeg_lanes::lane {
  std::unique_ptr<jpeg_decoder> own; // the lane's own nvJPEG handle, when one could be made
  const jpeg_decoder* decoder = nullptr;
  cuda::stream stream;
  jpeg_state_ptr state; // after `own`: destroyed before the handle it belongs to
  event_pair marks;     // around the lane's last decode call
  int trace_lane = 0;
  std::vector<jpeg_batch_item> items; // the last call's, kept to reuse their memory
};

jpeg_lanes::jpeg_lanes(const jpeg_decoder& decoder, std::size_t lanes, const gpu_timeline& timeline,
                       const std::string& name, cuda::device_context* device)
    : m_timeline(timeline), m_device(device) {
  for (std::size_t k = 0; k < lanes; ++k) {
    auto l = std::make_unique<lane>();
    // A handle per lane, so that two lanes' calls never wait for each other inside nvJPEG;
    // the shared one where another handle of the same backend cannot be had.
    std::string why_not;
    l->own = jpeg_decoder::create(why_not);
    if (l->own != nullptr && l->own->hardware() != decoder.hardware()) {
      l->own.reset();
    }
    l->decoder = l->own != nullptr ? l->own.get() : &decoder;
    l->state = l->decoder->make_state();
    l->decoder->preallocate(*l->state);
    l->trace_lane = timeline.log().add_gpu_lane(name + " " + std::to_string(k), l->stream.get());
    m_lanes.push_back(std::move(l));
  }
}

jpeg_lanes::~jpeg_lanes() = default;

bool jpeg_lanes::enqueue(lane& l, std::span<decode_job* const> jobs) {
  if (m_device != nullptr) {
    m_device->make_current(); // a lane resumes on whichever worker found its completion
  }
  l.items.clear();
  for (decode_job* job : jobs) {
    auto& j = static_cast<jpeg_job&>(*job);
    // In stream order on the lane's stream: the decode behind it may write at once, and a
    // buffer left from a refused try is freed behind that try's work.
    j.out = cuda::device_buffer<std::uint8_t>(j.plan.stored.bytes(), l.stream);
    l.items.push_back({j.file, &j.plan, j.out.data()});
  }
  l.stream.record(l.marks.start());
  const bool ok = l.decoder->decode_batch(*l.state, l.items, l.stream.get());
  l.stream.record(l.marks.end());
  return ok;
}

bool jpeg_lanes::enqueue_batch(std::size_t lane, std::span<decode_job* const> jobs) {
  return enqueue(*m_lanes[lane], jobs);
}

bool jpeg_lanes::enqueue_one(std::size_t lane, decode_job& job) {
  decode_job* const one[] = {&job};
  return enqueue(*m_lanes[lane], one);
}

task<void> jpeg_lanes::finish(std::size_t lane) {
  // The library's completion: the lane's coroutine suspends, no thread waits. drain():
  // the files and buffers may go only once the work is done, whatever stop is asked.
  co_await m_lanes[lane]->stream.drain();
}

void jpeg_lanes::decoded(std::size_t lane, std::span<decode_job* const> jobs) {
  const struct lane& l = *m_lanes[lane];
  for (decode_job* job : jobs) {
    m_timeline.record(l.trace_lane, static_cast<jpeg_job*>(job)->image, "nvjpeg", l.marks.start(),
                      l.marks.end());
  }
}

void jpeg_lanes::warm_up(std::span<const std::uint8_t> file, const jpeg_plan& plan) {
  for (const std::unique_ptr<lane>& l : m_lanes) {
    // A scratch output, freed in stream order behind the decode.
    const cuda::device_buffer<std::uint8_t> out(plan.stored.bytes(), l->stream);
    const jpeg_batch_item item{file, &plan, out.data()};
    (void)l->decoder->decode_batch(*l->state, {&item, 1}, l->stream.get());
  }
}

} // namespace cuawait::images::gpu
