// SPDX-License-Identifier: Apache-2.0
// trace_recorder::write_json: turns the recorded events into a Chrome / Perfetto trace.
// Layout (see trace_recorder.hpp): pid 1 holds one track per thread, pid 2 one per lane.

#include "cuawait/trace_recorder.hpp"

#include "trace_buffer.hpp"

#include <algorithm>
#include <cstdio>
#include <map>
#include <ostream>
#include <string>
#include <unordered_map>
#include <vector>

namespace cuawait {

namespace {

constexpr int threads_pid = 1;
constexpr int lanes_pid = 2;

//! Where and when one event of a wait happened.
struct point {
  bool seen = false;
  std::uint64_t t = 0;
  std::uint32_t thread = 0;
};

//! Everything recorded about one wait.
struct wait_summary {
  std::uint64_t id = 0;
  const char* operation = nullptr;
  const void* lane = nullptr;
  point suspend, ready, complete, resume, withdraw;
  completion_state state = completion_state::pending;
  std::int32_t error = 0;
  // Filled when laid out on its lane.
  std::uint64_t lane_start = 0, lane_end = 0;
  std::uint32_t lane_tid = 0;
};

struct thread_track {
  std::uint32_t ordinal = 0;
  std::uint64_t os_tid = 0;
  const executor* exec = nullptr; // the first executor it ran waits on
  bool resumed_or_suspended = false;
};

const char* state_name(completion_state s) noexcept {
  switch (s) {
  case completion_state::pending:
    return "pending";
  case completion_state::done:
    return "done";
  case completion_state::failed:
    return "failed";
  case completion_state::context_lost:
    return "context_lost";
  case completion_state::cancelled:
    return "cancelled";
  }
  return "?";
}

//! A JSON string literal.
std::string quoted(const char* s) {
  std::string out = "\"";
  for (const char* p = s != nullptr ? s : "wait"; *p != '\0'; ++p) {
    const auto c = static_cast<unsigned char>(*p);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + '"';
}
std::string quoted(const std::string& s) { return quoted(s.c_str()); }

std::string pointer_text(const void* p) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%p", p);
  return buf;
}

//! Writes trace events; timestamps in microseconds with nanosecond decimals.
class event_writer {
public:
  event_writer(std::ostream& out, std::uint64_t base) : m_out(out), m_base(base) {}

  [[nodiscard]] std::string ts(std::uint64_t t_ns) const {
    const std::uint64_t rel = t_ns > m_base ? t_ns - m_base : 0;
    char buf[40];
    std::snprintf(buf, sizeof buf, "%llu.%03llu", static_cast<unsigned long long>(rel / 1000),
                  static_cast<unsigned long long>(rel % 1000));
    return buf;
  }
  static std::string dur(std::uint64_t d_ns) {
    char buf[40];
    std::snprintf(buf, sizeof buf, "%llu.%03llu", static_cast<unsigned long long>(d_ns / 1000),
                  static_cast<unsigned long long>(d_ns % 1000));
    return buf;
  }

  void event(const std::string& body) {
    m_out << (m_first ? "\n" : ",\n") << '{' << body << '}';
    m_first = false;
  }
  void metadata(const char* what, int pid, std::uint32_t tid, const std::string& args) {
    event("\"ph\":\"M\",\"name\":\"" + std::string(what) + "\",\"pid\":" + std::to_string(pid) +
          ",\"tid\":" + std::to_string(tid) + ",\"args\":{" + args + '}');
  }
  void slice(const std::string& name, int pid, std::uint32_t tid, std::uint64_t t, std::uint64_t d,
             const std::string& args) {
    event("\"ph\":\"X\",\"cat\":\"cuawait\",\"name\":" + quoted(name) +
          ",\"pid\":" + std::to_string(pid) + ",\"tid\":" + std::to_string(tid) +
          ",\"ts\":" + ts(t) + ",\"dur\":" + dur(d) + ",\"args\":{" + args + '}');
  }
  void instant(const std::string& name, int pid, std::uint32_t tid, std::uint64_t t,
               const std::string& args) {
    event("\"ph\":\"i\",\"s\":\"t\",\"cat\":\"cuawait\",\"name\":" + quoted(name) +
          ",\"pid\":" + std::to_string(pid) + ",\"tid\":" + std::to_string(tid) +
          ",\"ts\":" + ts(t) + ",\"args\":{" + args + '}');
  }
  //! A flow start (`s`) or finish (`f`, bound to the enclosing slice).
  void flow(char ph, std::uint64_t id, int pid, std::uint32_t tid, std::uint64_t t) {
    event(std::string("\"ph\":\"") + ph +
          "\",\"cat\":\"cuawait.wait\",\"name\":\"wait\",\"id\":" + std::to_string(id) +
          (ph == 'f' ? ",\"bp\":\"e\"" : "") + ",\"pid\":" + std::to_string(pid) +
          ",\"tid\":" + std::to_string(tid) + ",\"ts\":" + ts(t));
  }

private:
  std::ostream& m_out;
  std::uint64_t m_base;
  bool m_first = true;
};

//! The slices on the threads are instants in effect; 1 ns keeps them slices that flows
//! can bind to.
constexpr std::uint64_t mark_ns = 1;

//! Lays the waits of each lane out as consecutive slices: a lane finishes in order, so a
//! wait's work can only be seen running from its suspension or the end of the wait before
//! it, whichever is later, until the reactor saw it finish (or it was withdrawn). Each slice
//! lasts at least 2 ns (a wait seen finished in the same nanosecond as the one before it
//! moves by as much), so that flows bind inside exactly one slice.
void lay_out_lanes(std::vector<wait_summary*>& waits,
                   std::map<const void*, std::uint32_t>& lane_tids) {
  std::unordered_map<const void*, std::vector<wait_summary*>> by_lane;
  for (wait_summary* w : waits) {
    by_lane[w->lane].push_back(w);
    lane_tids.emplace(w->lane, 0);
  }
  std::uint32_t next_tid = 1;
  for (auto& [key, tid] : lane_tids) {
    tid = next_tid++;
  }
  for (auto& [key, list] : by_lane) {
    for (wait_summary* w : list) {
      w->lane_end = std::max(w->complete.seen ? w->complete.t : w->withdraw.t, w->suspend.t);
    }
    std::sort(list.begin(), list.end(), [](const wait_summary* a, const wait_summary* b) {
      return a->lane_end != b->lane_end ? a->lane_end < b->lane_end : a->id < b->id;
    });
    std::uint64_t prev_end = 0;
    for (wait_summary* w : list) {
      w->lane_start = std::max(w->suspend.t, prev_end);
      w->lane_end = std::max(w->lane_end, w->lane_start + 2);
      w->lane_tid = lane_tids[key];
      prev_end = w->lane_end;
    }
  }
}

std::string thread_name(const thread_track& t,
                        const std::unordered_map<const executor*, std::string>& names) {
  std::string name;
  if (const auto it = names.find(t.exec); t.exec != nullptr && it != names.end()) {
    name = it->second;
  } else if (t.exec != nullptr) {
    name = "executor " + pointer_text(t.exec);
  } else {
    name = t.resumed_or_suspended ? "thread" : "poller";
  }
  name += " #" + std::to_string(t.ordinal);
  if (t.os_tid != 0) {
    name += " (tid " + std::to_string(t.os_tid) + ")";
  }
  return name;
}

void write_wait(event_writer& out, const wait_summary& w, std::uint64_t& next_flow) {
  const std::string op = w.operation != nullptr ? w.operation : "wait";
  const std::string id_arg = "\"wait\":" + std::to_string(w.id);
  if (w.ready.seen) {
    out.instant(op + " (ready)", threads_pid, w.suspend.thread, w.suspend.t,
                id_arg + ",\"ready\":true,\"status\":\"" + state_name(w.state) + '"');
    return;
  }
  // The co_await on the suspending thread, and a flow to the lane. A wait not seen
  // finished (still pending, or its later events dropped) has no slice on its lane.
  const bool pending = !w.complete.seen && !w.withdraw.seen;
  out.slice("await " + op, threads_pid, w.suspend.thread, w.suspend.t, mark_ns,
            id_arg + ",\"lane\":\"" + pointer_text(w.lane) + '"' +
                (pending ? ",\"pending\":true" : ""));
  if (pending) {
    return;
  }
  const std::uint64_t to_lane = next_flow++;
  out.flow('s', to_lane, threads_pid, w.suspend.thread, w.suspend.t);
  // The wait on its lane.
  const std::uint64_t d = w.lane_end - w.lane_start;
  std::string args = id_arg + ",\"status\":\"" + state_name(w.state) +
                     "\",\"suspended_at\":" + out.ts(w.suspend.t);
  if (w.error != 0) {
    args += ",\"error\":" + std::to_string(w.error);
  }
  if (w.withdraw.seen) {
    args += ",\"withdrawn\":true";
  } else if (!w.resume.seen) {
    args += ",\"unresumed\":true"; // finished, not yet running again
  }
  out.slice(w.withdraw.seen ? op + " (withdrawn)" : op, lanes_pid, w.lane_tid, w.lane_start, d,
            args);
  // Bind inside the slice (at least 2 ns long): 1 ns after its start, 1 ns before its end.
  out.flow('f', to_lane, lanes_pid, w.lane_tid, w.lane_start + 1);
  if (w.withdraw.seen) {
    out.instant("withdrawn " + op, threads_pid, w.withdraw.thread, w.withdraw.t, id_arg);
    return;
  }
  if (!w.complete.seen || !w.resume.seen) {
    return;
  }
  // The resumption, and a flow to it from the lane.
  const std::uint64_t back = next_flow++;
  out.flow('s', back, lanes_pid, w.lane_tid, w.lane_end - 1);
  const std::uint64_t resume_t = std::max(w.resume.t, w.lane_end);
  out.slice("resume " + op, threads_pid, w.resume.thread, resume_t, mark_ns,
            id_arg + ",\"latency_ns\":" + std::to_string(resume_t - w.complete.t));
  out.flow('f', back, threads_pid, w.resume.thread, resume_t);
}

} // namespace

void trace_recorder::write_json(std::ostream& os) const {
  std::unordered_map<std::uint64_t, wait_summary> waits;
  std::map<std::uint32_t, thread_track> threads;
  std::unordered_map<const executor*, std::string> exec_names;
  std::unordered_map<const void*, std::string> lane_names;
  std::vector<recorded_span> spans;
  {
    const std::lock_guard lock(m_mutex);
    exec_names = m_executor_names;
    lane_names = m_lane_names;
    spans = m_spans;
    for (const auto& b : m_threads) {
      thread_track& track = threads[b->ordinal];
      track.ordinal = b->ordinal;
      track.os_tid = b->os_tid;
      for (const detail::trace_chunk* c = b->head.get(); c != nullptr;
           c = c->next.load(std::memory_order_acquire)) {
        const std::size_t n = c->count.load(std::memory_order_acquire);
        for (std::size_t i = 0; i < n; ++i) {
          const detail::trace_event_record& r = c->events[i];
          wait_summary& w = waits[r.id];
          w.id = r.id;
          const point p{true, r.t_ns, b->ordinal};
          switch (r.kind) {
          case wait_event::suspend:
            w.suspend = p;
            w.operation = r.operation;
            w.lane = r.lane;
            break;
          case wait_event::ready:
            w.ready = p;
            w.state = r.state;
            w.error = r.error;
            break;
          case wait_event::complete:
            w.complete = p;
            w.state = r.state;
            w.error = r.error;
            break;
          case wait_event::resume:
            w.resume = p;
            break;
          case wait_event::withdraw:
            w.withdraw = p;
            break;
          }
          if (r.kind != wait_event::complete) {
            track.resumed_or_suspended = true;
            if (track.exec == nullptr) {
              track.exec = r.exec;
            }
          }
        }
      }
    }
  }
  // Only waits whose suspension was recorded (sampling and the memory bound keep whole
  // waits as far as they can; a wait cut short is shown as far as it got).
  std::vector<wait_summary*> ordered;
  std::vector<wait_summary*> on_lanes;
  for (auto& [id, w] : waits) {
    if (w.suspend.seen) {
      ordered.push_back(&w);
      if (!w.ready.seen && (w.complete.seen || w.withdraw.seen)) {
        on_lanes.push_back(&w);
      }
    }
  }
  std::sort(ordered.begin(), ordered.end(), [](const wait_summary* a, const wait_summary* b) {
    return a->suspend.t < b->suspend.t;
  });
  std::map<const void*, std::uint32_t> lane_tids;
  lay_out_lanes(on_lanes, lane_tids);
  // Spans: CPU work on its thread's track, GPU work on a track of its own per lane (the
  // wait slices of a lane are laid out back to back and would not nest with it).
  std::map<const void*, std::uint32_t> gpu_tids;
  for (const recorded_span& r : spans) {
    if (r.span.lane != nullptr) {
      gpu_tids.emplace(r.span.lane, 0);
    } else {
      thread_track& track = threads[r.thread];
      track.ordinal = r.thread;
      track.resumed_or_suspended = true;
      if (track.exec == nullptr) {
        track.exec = r.exec;
      }
    }
  }
  std::uint32_t next_gpu_tid = static_cast<std::uint32_t>(lane_tids.size()) + 1;
  for (auto& [key, tid] : gpu_tids) {
    tid = next_gpu_tid++;
  }

  os << "{\"displayTimeUnit\":\"ns\",\"otherData\":{\"generator\":\"cuawait trace_recorder\","
     << "\"sample_every\":" << m_options.sample_every << ",\"dropped_events\":" << dropped()
     << "},\"traceEvents\":[";
  event_writer out(os, m_base_ns);
  out.metadata("process_name", threads_pid, 0, "\"name\":\"cuawait threads\"");
  out.metadata("process_sort_index", threads_pid, 0, "\"sort_index\":1");
  out.metadata("process_name", lanes_pid, 0, "\"name\":\"cuawait lanes\"");
  out.metadata("process_sort_index", lanes_pid, 0, "\"sort_index\":2");
  for (const auto& [ordinal, t] : threads) {
    out.metadata("thread_name", threads_pid, ordinal,
                 "\"name\":" + quoted(thread_name(t, exec_names)));
  }
  for (const auto& [key, tid] : lane_tids) {
    const auto it = lane_names.find(key);
    out.metadata("thread_name", lanes_pid, tid,
                 "\"name\":" +
                     quoted(it != lane_names.end() ? it->second : "lane " + pointer_text(key)));
  }
  for (const auto& [key, tid] : gpu_tids) {
    const auto it = lane_names.find(key);
    out.metadata("thread_name", lanes_pid, tid,
                 "\"name\":" +
                     quoted((it != lane_names.end() ? it->second : "lane " + pointer_text(key)) +
                            " (GPU work)"));
  }
  std::uint64_t next_flow = 1;
  for (const wait_summary* w : ordered) {
    write_wait(out, *w, next_flow);
  }
  for (const recorded_span& r : spans) {
    const trace_span& sp = r.span;
    const bool on_lane = sp.lane != nullptr;
    out.slice(sp.name, on_lane ? lanes_pid : threads_pid, on_lane ? gpu_tids[sp.lane] : r.thread,
              sp.start_ns, sp.end_ns - sp.start_ns,
              sp.item >= 0 ? "\"item\":" + std::to_string(sp.item) : std::string());
  }
  os << "\n]}\n";
}

} // namespace cuawait
