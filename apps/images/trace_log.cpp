// SPDX-License-Identifier: Apache-2.0
// Span recording (into the library's trace_recorder), the interval arithmetic behind the
// summary, and the trace and timeline, written by the library.

#include "trace_log.hpp"

#include <cuawait/completion_reactor.hpp>
#include <cuawait/trace_timeline.hpp>
#include <cuawait/wait_observer.hpp>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <sstream>
#include <utility>

namespace cuawait::images {
namespace {

std::atomic<std::uint64_t> g_next_log_id{1};

// Which lane the calling thread has in which log (logs are told apart by id, not address,
// so a new log at a dead one's address starts afresh).
struct thread_lane {
  std::uint64_t log_id = 0;
  int lane = -1;
};
thread_local thread_lane tl_lane;

using interval = std::pair<double, double>;

// Sorted, disjoint union of `v`, clipped to [lo, hi].
std::vector<interval> merge(std::vector<interval> v, double lo, double hi) {
  std::vector<interval> out;
  std::sort(v.begin(), v.end());
  for (auto [a, b] : v) {
    a = std::max(a, lo);
    b = std::min(b, hi);
    if (b <= a) {
      continue;
    }
    if (!out.empty() && a <= out.back().second) {
      out.back().second = std::max(out.back().second, b);
    } else {
      out.emplace_back(a, b);
    }
  }
  return out;
}

double length(const std::vector<interval>& v) {
  double t = 0;
  for (const auto& [a, b] : v) {
    t += b - a;
  }
  return t;
}

double intersection(const std::vector<interval>& x, const std::vector<interval>& y) {
  double t = 0;
  std::size_t i = 0;
  std::size_t j = 0;
  while (i < x.size() && j < y.size()) {
    const double a = std::max(x[i].first, y[j].first);
    const double b = std::min(x[i].second, y[j].second);
    t += std::max(0.0, b - a);
    if (x[i].second < y[j].second) {
      ++i;
    } else {
      ++j;
    }
  }
  return t;
}

} // namespace

trace_log::trace_log()
    : m_id(g_next_log_id.fetch_add(1)), m_origin(clock::now()),
      m_origin_ns(static_cast<std::uint64_t>(
          std::chrono::duration_cast<std::chrono::nanoseconds>(m_origin.time_since_epoch())
              .count())) {}

trace_log::~trace_log() { stop_observing(); }

std::uint64_t trace_log::to_ns(double us) const noexcept {
  const auto offset = static_cast<std::int64_t>(std::llround(us * 1000.0));
  return offset < 0 && static_cast<std::uint64_t>(-offset) > m_origin_ns
             ? 0
             : m_origin_ns + static_cast<std::uint64_t>(offset);
}

int trace_log::cpu_lane() {
  if (tl_lane.log_id == m_id) {
    return tl_lane.lane;
  }
  const std::lock_guard lock(m_mutex);
  int cpu_count = 0;
  for (const auto& l : m_lanes) {
    cpu_count += l->info.kind == lane_kind::cpu ? 1 : 0;
  }
  m_lanes.push_back(std::make_unique<lane_entry>(lane_entry{
      {lane_kind::cpu, "CPU thread " + std::to_string(cpu_count)}, observed_thread_ordinal()}));
  tl_lane = {m_id, static_cast<int>(m_lanes.size()) - 1};
  return tl_lane.lane;
}

int trace_log::add_gpu_lane(std::string name, const void* stream) {
  const std::lock_guard lock(m_mutex);
  m_lanes.push_back(std::make_unique<lane_entry>(lane_entry{{lane_kind::gpu, name}, 0, stream}));
  lane_entry& l = *m_lanes.back();
  if (l.key == nullptr) {
    l.key = &l; // unique: a lane's address
  }
  m_recorder.name_lane(l.key, std::move(name));
  return static_cast<int>(m_lanes.size()) - 1;
}

void trace_log::record(int lane, int image, const char* name, double start_us, double end_us) {
  const void* key = nullptr;
  {
    const std::lock_guard lock(m_mutex);
    const lane_entry& l = *m_lanes.at(static_cast<std::size_t>(lane));
    // A CPU lane's spans are recorded on its own thread (scoped_span): the calling thread.
    key = l.info.kind == lane_kind::gpu ? l.key : nullptr;
  }
  m_recorder.record_span({name, to_ns(start_us), to_ns(std::max(start_us, end_us)), image, key});
}

std::vector<lane_info> trace_log::lanes() const {
  const std::lock_guard lock(m_mutex);
  std::vector<lane_info> out;
  for (const auto& l : m_lanes) {
    out.push_back(l->info);
  }
  return out;
}

std::vector<span_record> trace_log::spans() const {
  const std::vector<recorded_span> recorded = m_recorder.spans();
  const std::lock_guard lock(m_mutex);
  std::vector<span_record> out;
  out.reserve(recorded.size());
  for (const recorded_span& r : recorded) {
    int lane = -1;
    for (std::size_t i = 0; i < m_lanes.size() && lane < 0; ++i) {
      const lane_entry& l = *m_lanes[i];
      const bool match = r.span.lane != nullptr
                             ? r.span.lane == l.key
                             : l.info.kind == lane_kind::cpu && l.thread == r.thread;
      lane = match ? static_cast<int>(i) : -1;
    }
    if (lane < 0) {
      continue; // recorded on the recorder directly, on a thread with no lane here
    }
    const auto us = [&](std::uint64_t t) {
      return t >= m_origin_ns ? static_cast<double>(t - m_origin_ns) / 1e3
                              : -static_cast<double>(m_origin_ns - t) / 1e3;
    };
    out.push_back(
        {lane, static_cast<int>(r.span.item), r.span.name, us(r.span.start_ns), us(r.span.end_ns)});
  }
  return out;
}

void trace_log::observe(completion_reactor& r) {
  stop_observing();
  m_observers = std::make_unique<observer_set>();
  (void)m_observers->add(m_recorder);
  m_observers->install(r);
  m_observed = &r;
}

void trace_log::stop_observing() noexcept {
  if (m_observed != nullptr) {
    m_observed->set_trace({});
    m_observed = nullptr;
  }
  m_observers.reset();
}

utilisation trace_log::measure(double start_us, double end_us) const {
  const std::vector<span_record> all = spans();
  const std::vector<lane_info> lane_list = lanes();
  std::vector<interval> cpu;
  std::vector<interval> gpu;
  utilisation u;
  for (const span_record& s : all) {
    const bool is_gpu = lane_list[static_cast<std::size_t>(s.lane)].kind == lane_kind::gpu;
    (is_gpu ? gpu : cpu).emplace_back(s.start_us, s.end_us);
  }
  for (const lane_info& l : lane_list) {
    u.has_gpu = u.has_gpu || l.kind == lane_kind::gpu;
  }
  const auto cpu_union = merge(std::move(cpu), start_us, end_us);
  const auto gpu_union = merge(std::move(gpu), start_us, end_us);
  u.wall_us = end_us - start_us;
  u.cpu_busy_us = length(cpu_union);
  u.gpu_busy_us = length(gpu_union);
  u.overlap_us = intersection(cpu_union, gpu_union);
  return u;
}

// The stage colours of the timeline, in pipeline order (the legend's).
static const std::vector<std::pair<std::string, std::string>>& stage_colours() {
  static const std::vector<std::pair<std::string, std::string>> table{
      {"read", "#86bcb6"},       {"decode+preprocess", "#4e79a7"},
      {"decode", "#4e79a7"},     {"preprocess", "#a0cbe8"},
      {"cpu stages", "#f28e2b"}, {"stand-in", "#bab0ac"},
      {"H2D", "#b07aa1"},        {"nvjpeg", "#ff9da7"},
      {"gray", "#9d7660"},       {"blur", "#e15759"},
      {"sobel+hog", "#edc948"},  {"D2H", "#76b7b2"},
      {"postprocess", "#59a14f"}};
  return table;
}

std::string chrome_trace_json(const trace_log& log) {
  std::ostringstream out;
  log.recorder().write_json(out);
  return out.str();
}

std::string timeline_svg(const trace_log& log, const timeline_options& options) {
  cuawait::timeline_options o;
  o.title = options.title;
  o.item_names = options.image_names;
  o.item = "image";
  o.window_note = " (the timed region)";
  o.start_ns = options.start_us >= 0 ? log.to_ns(options.start_us) : 0;
  o.end_ns = options.end_us >= 0 ? log.to_ns(options.end_us) : 0;
  o.axis_ms = options.axis_ms;
  o.stage_colours = stage_colours();
  return cuawait::timeline_svg(log.recorder(), o);
}

} // namespace cuawait::images
