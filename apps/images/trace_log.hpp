// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! `trace_log`: the spans of every image's stages, on CPU-thread lanes and GPU-stream
//! lanes, from which the summary computes GPU busy time and CPU/GPU overlap and the
//! Chrome trace and SVG timeline are drawn. The spans live in the library's
//! `cuawait::trace_recorder` (`record_span`): the trace is the library's (`--trace`, the
//! format of docs/OBSERVABILITY.md, with the GPU waits too when the recorder is installed on
//! a runtime's reactor: `observe`), and the timeline the library's `timeline_svg`.

#include <cuawait/trace_recorder.hpp>

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace cuawait {
class completion_reactor;
class observer_set;
} // namespace cuawait

namespace cuawait::images {

//! Whether a lane is a CPU thread or a GPU stream.
enum class lane_kind : std::uint8_t { cpu, gpu };

//! One stage of one image on one lane, times in microseconds since the log was created.
struct span_record {
  int lane = 0;
  int image = -1; //!< job index, -1 when the span belongs to no image
  const char* name = "";
  double start_us = 0;
  double end_us = 0;
};

//! A lane of the timeline.
struct lane_info {
  lane_kind kind = lane_kind::cpu;
  std::string name;
};

//! Time fractions of a run, from the recorded spans.
struct utilisation {
  double wall_us = 0;
  double gpu_busy_us = 0; //!< union of all GPU spans
  double cpu_busy_us = 0; //!< union of all CPU spans
  double overlap_us = 0;  //!< time when some CPU stage and some GPU operation both ran
  bool has_gpu = false;
};

//! A thread-safe log of spans, over a `trace_recorder`. Recording costs one mutex
//! acquisition per span; a run records a handful of spans per image.
class trace_log {
public:
  using clock = std::chrono::steady_clock;

  trace_log();
  trace_log(const trace_log&) = delete;
  trace_log& operator=(const trace_log&) = delete;
  ~trace_log();

  //! Microseconds from the log's origin to `t`.
  [[nodiscard]] double to_us(clock::time_point t) const {
    return std::chrono::duration<double, std::micro>(t - m_origin).count();
  }
  //! Microseconds from the origin to now.
  [[nodiscard]] double now_us() const { return to_us(clock::now()); }

  //! The lane of the calling thread, registered as "CPU thread N" on first use.
  [[nodiscard]] int cpu_lane();
  //! Registers a new GPU lane named `name` and returns its id. `stream`: the CUDA stream
  //! it stands for, so that its GPU work and the waits on that stream (`observe`) share
  //! the lane's name in the trace; nullptr: a lane of its own.
  [[nodiscard]] int add_gpu_lane(std::string name, const void* stream = nullptr);

  //! Records a span.
  void record(int lane, int image, const char* name, double start_us, double end_us);

  //! A copy of the lanes and spans recorded so far.
  [[nodiscard]] std::vector<lane_info> lanes() const;
  [[nodiscard]] std::vector<span_record> spans() const;

  //! Busy and overlap times over the wall interval [start_us, end_us].
  [[nodiscard]] utilisation measure(double start_us, double end_us) const;

  //! The recorder holding the spans.
  [[nodiscard]] trace_recorder& recorder() noexcept { return m_recorder; }
  [[nodiscard]] const trace_recorder& recorder() const noexcept { return m_recorder; }
  //! Log time `us` on the recorder's clock (`observer_clock_ns()`).
  [[nodiscard]] std::uint64_t to_ns(double us) const noexcept;

  //! Records the GPU waits of `r` into the same trace until `stop_observing` (call both
  //! while no wait is in flight on `r`). Replaces hooks installed on `r` before.
  void observe(completion_reactor& r);
  void stop_observing() noexcept;

private:
  //! Lanes keep their address: a GPU lane's is its key in the recorder.
  struct lane_entry {
    lane_info info;
    std::uint32_t thread = 0;  // a CPU lane's thread (`observed_thread_ordinal()`)
    const void* key = nullptr; // a GPU lane's key in the recorder
  };

  std::uint64_t m_id;
  clock::time_point m_origin;
  std::uint64_t m_origin_ns;
  trace_recorder m_recorder;
  mutable std::mutex m_mutex;
  std::vector<std::unique_ptr<lane_entry>> m_lanes;
  std::unique_ptr<observer_set> m_observers;
  completion_reactor* m_observed = nullptr;
};

//! Records the span from construction to destruction on the calling thread's CPU lane.
class scoped_span {
public:
  scoped_span(trace_log& log, int image, const char* name)
      : m_log(log), m_image(image), m_name(name), m_start(log.now_us()) {}
  scoped_span(const scoped_span&) = delete;
  scoped_span& operator=(const scoped_span&) = delete;
  ~scoped_span() { m_log.record(m_log.cpu_lane(), m_image, m_name, m_start, m_log.now_us()); }

private:
  trace_log& m_log;
  int m_image;
  const char* m_name;
  double m_start;
};

//! The trace as Chrome/Perfetto JSON: the library's format (docs/OBSERVABILITY.md); each
//! span is a slice with its image number as the argument `item`.
[[nodiscard]] std::string chrome_trace_json(const trace_log& log);

//! What `timeline_svg` draws.
struct timeline_options {
  std::string title;                    //!< first line of the picture
  std::vector<std::string> image_names; //!< for the tooltips; may be empty
  double start_us = -1;                 //!< left edge (log time); < 0: the first span
  double end_us = -1;                   //!< right edge; < 0: the last span
  double axis_ms = 0;                   //!< > 0: the plot spans this many ms, so that two
                                        //!< timelines drawn with the same value compare
};

//! Draws the lanes as an SVG timeline (the library's `timeline_svg`), readable at a glance
//! for tens of images: CPU threads first, then GPU streams (lanes without spans left out),
//! each labelled; a time axis in ms with grid lines; spans coloured by stage and numbered by
//! image where wide enough, with a tooltip each; and a legend of the stages that occur.
[[nodiscard]] std::string timeline_svg(const trace_log& log, const timeline_options& options);

} // namespace cuawait::images
