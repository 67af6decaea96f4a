// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! Checks the structure of a trace written by `cuawait::trace_recorder` (Chrome / Perfetto
//! JSON): valid JSON, named tracks, properly nested slices, flows that start and finish
//! inside slices, and for every wait: its `co_await` on a thread track, a flow to its slice
//! on its lane, and unless it was withdrawn (marked) or still unfinished, a flow from there
//! to its resumption, in time order. Header-only: used by `cuawait-trace-check` and tests.

#include "json.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace cuawait::tools {

//! What the checker found.
struct trace_check_result {
  std::vector<std::string> problems; //!< empty: the trace is well formed
  std::size_t events = 0;
  std::size_t thread_tracks = 0; //!< tracks of the "cuawait threads" process with events
  std::size_t lane_tracks = 0;   //!< tracks of the "cuawait lanes" process with events
  std::size_t waits = 0;         //!< waits that suspended (slices on lanes)
  std::size_t resumed = 0;       //!< of which resumed, with both flows
  std::size_t withdrawn = 0;     //!< of which withdrawn (marked)
  std::size_t unfinished = 0;    //!< of which pending or not yet resumed when written
  std::size_t ready = 0;         //!< waits that did not suspend (instants)
  std::size_t flows = 0;         //!< matched flow pairs
  std::uint64_t dropped_events = 0;
  std::vector<std::string> thread_names; //!< names of the thread tracks
  std::vector<std::string> lane_names;   //!< names of the lane tracks

  [[nodiscard]] bool ok() const noexcept { return problems.empty(); }
};

namespace detail {

using track = std::pair<long long, long long>; // pid, tid

struct slice {
  std::int64_t ts = 0, end = 0; // ns
  std::string name;
  std::int64_t wait = -1;
  const json::value* args = nullptr;
  std::size_t index = 0;
};

struct flow_end {
  bool seen = false;
  track where{};
  std::int64_t ts = 0;
  const slice* bound = nullptr;
};

inline std::int64_t to_ns(double us) { return std::llround(us * 1000.0); }

inline bool arg_true(const json::value* args, std::string_view key) {
  const json::value* v = args != nullptr ? args->find(key) : nullptr;
  return v != nullptr && v->is_bool() && v->as_bool();
}

class checker {
public:
  trace_check_result run(std::string_view text) {
    json::value doc;
    try {
      doc = json::parse(text);
    } catch (const json::parse_error& e) {
      problem(e.what());
      return std::move(m_r);
    }
    const json::value* events = doc.find("traceEvents");
    if (events == nullptr || !events->is_array()) {
      problem("no traceEvents array at the top level");
      return std::move(m_r);
    }
    if (const json::value* other = doc.find("otherData")) {
      if (const json::value* d = other->find("dropped_events"); d != nullptr && d->is_number()) {
        m_r.dropped_events = static_cast<std::uint64_t>(d->as_number());
      }
    }
    m_r.events = events->as_array().size();
    for (std::size_t i = 0; i < events->as_array().size(); ++i) {
      read_event(events->as_array()[i], i);
    }
    check_tracks();
    for (auto& [t, list] : m_slices) {
      std::sort(list.begin(), list.end(), [](const slice& a, const slice& b) {
        return a.ts != b.ts ? a.ts < b.ts : a.end > b.end;
      });
      check_nesting(t, list);
    }
    check_flows();
    check_waits();
    return std::move(m_r);
  }

private:
  void problem(std::string p) {
    if (m_r.problems.size() < 50) {
      m_r.problems.push_back(std::move(p));
    } else if (m_r.problems.size() == 50) {
      m_r.problems.push_back("... more problems not listed");
    }
  }
  static std::string at(std::size_t i) { return "event " + std::to_string(i) + ": "; }

  void read_event(const json::value& e, std::size_t i) {
    const json::value* ph = e.find("ph");
    const json::value* pid = e.find("pid");
    const json::value* tid = e.find("tid");
    if (ph == nullptr || !ph->is_string() || pid == nullptr || !pid->is_number() ||
        tid == nullptr || !tid->is_number()) {
      problem(at(i) + "needs ph, pid and tid");
      return;
    }
    const track t{static_cast<long long>(pid->as_number()),
                  static_cast<long long>(tid->as_number())};
    const std::string& p = ph->as_string();
    const json::value* args = e.find("args");
    const json::value* name = e.find("name");
    const std::string n = name != nullptr && name->is_string() ? name->as_string() : "";
    if (p == "M") {
      const json::value* an = args != nullptr ? args->find("name") : nullptr;
      if (an != nullptr && an->is_string()) {
        if (n == "process_name") {
          m_process_names[t.first] = an->as_string();
        } else if (n == "thread_name") {
          m_thread_names[t] = an->as_string();
        }
      }
      return;
    }
    const json::value* ts = e.find("ts");
    if (ts == nullptr || !ts->is_number() || ts->as_number() < 0) {
      problem(at(i) + "needs a non-negative ts");
      return;
    }
    m_used.insert(t);
    const std::int64_t t_ns = to_ns(ts->as_number());
    std::int64_t wait = -1;
    if (const json::value* w = args != nullptr ? args->find("wait") : nullptr;
        w != nullptr && w->is_number()) {
      wait = static_cast<std::int64_t>(w->as_number());
    }
    if (p == "X") {
      const json::value* dur = e.find("dur");
      if (dur == nullptr || !dur->is_number() || dur->as_number() < 0) {
        problem(at(i) + "a slice needs a non-negative dur");
        return;
      }
      m_slices[t].push_back({t_ns, t_ns + to_ns(dur->as_number()), n, wait, args, i});
    } else if (p == "s" || p == "f") {
      const json::value* id = e.find("id");
      if (id == nullptr || (!id->is_number() && !id->is_string())) {
        problem(at(i) + "a flow needs an id");
        return;
      }
      const std::string key = id->is_number() ? std::to_string(id->as_number()) : id->as_string();
      flow_end& end = p == "s" ? m_flows[key].first : m_flows[key].second;
      if (end.seen) {
        problem(at(i) + "flow id " + key + " has two '" + p + "' events");
      }
      end = {true, t, t_ns, nullptr};
      if (p == "f") {
        const json::value* bp = e.find("bp");
        if (bp == nullptr || !bp->is_string() || bp->as_string() != "e") {
          problem(at(i) + "flow finish " + key + " must bind to its enclosing slice (bp \"e\")");
        }
      }
    } else if (p == "i" || p == "I") {
      if (arg_true(args, "ready")) {
        ++m_r.ready;
      }
    }
  }

  void check_tracks() {
    for (const auto& [pid, name] : m_process_names) {
      if (name == "cuawait threads") {
        m_threads_pid = pid;
      } else if (name == "cuawait lanes") {
        m_lanes_pid = pid;
      }
    }
    if (!m_used.empty() && (m_threads_pid < 0 || m_lanes_pid < 0)) {
      problem("no process named \"cuawait threads\" or \"cuawait lanes\"");
    }
    for (const track& t : m_used) {
      const auto it = m_thread_names.find(t);
      if (it == m_thread_names.end()) {
        problem("track pid " + std::to_string(t.first) + " tid " + std::to_string(t.second) +
                " has no thread_name");
        continue;
      }
      if (t.first == m_threads_pid) {
        ++m_r.thread_tracks;
        m_r.thread_names.push_back(it->second);
      } else if (t.first == m_lanes_pid) {
        ++m_r.lane_tracks;
        m_r.lane_names.push_back(it->second);
      }
    }
  }

  void check_nesting(const track& t, const std::vector<slice>& list) {
    std::vector<const slice*> open;
    for (const slice& s : list) {
      while (!open.empty() && open.back()->end <= s.ts) {
        open.pop_back();
      }
      if (!open.empty() && s.end > open.back()->end) {
        problem("slices overlap without nesting on pid " + std::to_string(t.first) + " tid " +
                std::to_string(t.second) + ": events " + std::to_string(open.back()->index) +
                " and " + std::to_string(s.index));
      }
      open.push_back(&s);
    }
  }

  //! The innermost slice on `t` that encloses `ts`, or nullptr.
  const slice* enclosing(const track& t, std::int64_t ts) const {
    const auto it = m_slices.find(t);
    if (it == m_slices.end()) {
      return nullptr;
    }
    const auto& list = it->second;
    auto pos = std::upper_bound(list.begin(), list.end(), ts,
                                [](std::int64_t v, const slice& s) { return v < s.ts; });
    while (pos != list.begin()) {
      --pos;
      if (pos->end >= ts) {
        return &*pos;
      }
    }
    return nullptr;
  }

  void check_flows() {
    for (auto& [id, ends] : m_flows) {
      auto& [s, f] = ends;
      if (!s.seen || !f.seen) {
        problem("flow " + id + " has no '" + std::string(s.seen ? "f" : "s") + "' event");
        continue;
      }
      if (f.ts < s.ts) {
        problem("flow " + id + " finishes before it starts");
      }
      s.bound = enclosing(s.where, s.ts);
      f.bound = enclosing(f.where, f.ts);
      if (s.bound == nullptr || f.bound == nullptr) {
        problem("flow " + id + " does not start and finish inside slices");
        continue;
      }
      ++m_r.flows;
      m_links.push_back({s.bound, f.bound});
    }
  }

  void check_waits() {
    std::map<std::int64_t, const slice*> awaits, resumes, lanes;
    for (const auto& [t, list] : m_slices) {
      for (const slice& s : list) {
        if (s.wait < 0) {
          continue;
        }
        auto& into = t.first == m_lanes_pid            ? lanes
                     : s.name.rfind("await ", 0) == 0  ? awaits
                     : s.name.rfind("resume ", 0) == 0 ? resumes
                                                       : lanes; // unexpected: reported below
        if (t.first != m_lanes_pid && &into == &lanes) {
          problem("slice event " + std::to_string(s.index) + " names wait " +
                  std::to_string(s.wait) + " on a thread but is neither await nor resume");
          continue;
        }
        if (!into.emplace(s.wait, &s).second) {
          problem("wait " + std::to_string(s.wait) + " has two slices of the same kind");
        }
      }
    }
    std::set<std::pair<const slice*, const slice*>> links(m_links.begin(), m_links.end());
    for (const auto& [id, lane] : lanes) {
      ++m_r.waits;
      const std::string w = "wait " + std::to_string(id) + ": ";
      const json::value* status = lane->args != nullptr ? lane->args->find("status") : nullptr;
      if (status == nullptr || !status->is_string()) {
        problem(w + "its lane slice has no status");
      }
      const auto a = awaits.find(id);
      if (a == awaits.end()) {
        problem(w + "no co_await slice on a thread");
        continue;
      }
      if (!links.contains({a->second, lane})) {
        problem(w + "no flow from its co_await to its lane");
      }
      if (a->second->ts > lane->ts) {
        problem(w + "its lane slice starts before it suspended");
      }
      const bool withdrawn = arg_true(lane->args, "withdrawn");
      const bool unfinished = arg_true(lane->args, "unresumed");
      const auto r = resumes.find(id);
      if (withdrawn) {
        ++m_r.withdrawn;
        if (lane->name.find("(withdrawn)") == std::string::npos) {
          problem(w + "withdrawn but its slice name does not say so");
        }
        if (r != resumes.end()) {
          problem(w + "withdrawn, yet resumed");
        }
        continue;
      }
      if (unfinished) {
        ++m_r.unfinished;
        continue;
      }
      if (r == resumes.end()) {
        problem(w + "no resumption (and not marked withdrawn or unresumed)");
        continue;
      }
      if (!links.contains({lane, r->second})) {
        problem(w + "no flow from its lane to its resumption");
      }
      if (r->second->ts < lane->end) {
        problem(w + "resumed before its lane slice ends");
      }
      ++m_r.resumed;
    }
    for (const auto& [id, a] : awaits) {
      if (lanes.contains(id)) {
        continue;
      }
      if (arg_true(a->args, "pending")) {
        ++m_r.waits; // never seen finished: no slice on its lane
        ++m_r.unfinished;
      } else {
        problem("wait " + std::to_string(id) + ": a co_await with no slice on a lane");
      }
    }
  }

  trace_check_result m_r;
  std::map<long long, std::string> m_process_names;
  std::map<track, std::string> m_thread_names;
  std::set<track> m_used;
  std::map<track, std::vector<slice>> m_slices;
  std::map<std::string, std::pair<flow_end, flow_end>> m_flows;
  std::vector<std::pair<const slice*, const slice*>> m_links;
  long long m_threads_pid = -1, m_lanes_pid = -1;
};

} // namespace detail

//! Checks the trace `text` (see the file comment).
[[nodiscard]] inline trace_check_result check_trace(std::string_view text) {
  return detail::checker().run(text);
}

} // namespace cuawait::tools
