// SPDX-License-Identifier: Apache-2.0
// Span recording and the interval arithmetic behind the summary.

#include "trace_log.hpp"

#include <algorithm>
#include <atomic>
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

trace_log::trace_log() : m_id(g_next_log_id.fetch_add(1)), m_origin(clock::now()) {}

int trace_log::cpu_lane() {
  if (tl_lane.log_id == m_id) {
    return tl_lane.lane;
  }
  const std::lock_guard lock(m_mutex);
  int cpu_count = 0;
  for (const lane_info& l : m_lanes) {
    cpu_count += l.kind == lane_kind::cpu ? 1 : 0;
  }
  m_lanes.push_back({lane_kind::cpu, "CPU thread " + std::to_string(cpu_count)});
  tl_lane = {m_id, static_cast<int>(m_lanes.size()) - 1};
  return tl_lane.lane;
}

int trace_log::add_gpu_lane(std::string name) {
  const std::lock_guard lock(m_mutex);
  m_lanes.push_back({lane_kind::gpu, std::move(name)});
  return static_cast<int>(m_lanes.size()) - 1;
}

void trace_log::record(int lane, int image, const char* name, double start_us, double end_us) {
  const std::lock_guard lock(m_mutex);
  m_spans.push_back({lane, image, name, start_us, end_us});
}

std::vector<lane_info> trace_log::lanes() const {
  const std::lock_guard lock(m_mutex);
  return m_lanes;
}

std::vector<span_record> trace_log::spans() const {
  const std::lock_guard lock(m_mutex);
  return m_spans;
}

utilisation trace_log::measure(double start_us, double end_us) const {
  const std::lock_guard lock(m_mutex);
  std::vector<interval> cpu;
  std::vector<interval> gpu;
  utilisation u;
  for (const span_record& s : m_spans) {
    const bool is_gpu = m_lanes[static_cast<std::size_t>(s.lane)].kind == lane_kind::gpu;
    (is_gpu ? gpu : cpu).emplace_back(s.start_us, s.end_us);
  }
  for (const lane_info& l : m_lanes) {
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

} // namespace cuawait::images
