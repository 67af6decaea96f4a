// SPDX-License-Identifier: Apache-2.0
#include "cuawait/lifecycle_log.hpp"

#include <cstdio>

namespace cuawait {

namespace {

const char* state_text(completion_state s) noexcept {
  switch (s) {
  case completion_state::pending:
    return "pending";
  case completion_state::done:
    return "done";
  case completion_state::failed:
    return "failed";
  case completion_state::context_lost:
    return "context lost";
  case completion_state::cancelled:
    return "cancelled";
  }
  return "?";
}

bool failed(completion_state s) noexcept {
  return s == completion_state::failed || s == completion_state::context_lost;
}

//! The level of event `e` of a wait whose status is `s`.
log_level level_of(wait_event e, completion_state s) noexcept {
  if (failed(s) && (e == wait_event::complete || e == wait_event::ready)) {
    return log_level::error; // once per failed wait: where it was found
  }
  switch (e) {
  case wait_event::suspend:
  case wait_event::complete:
  case wait_event::ready:
    return log_level::debug;
  case wait_event::resume:
    return s == completion_state::cancelled ? log_level::warn : log_level::info;
  case wait_event::withdraw:
    return log_level::info;
  }
  return log_level::info;
}

std::string micros(std::uint64_t ns) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "%.1f us", static_cast<double>(ns) / 1000.0);
  return buf;
}

} // namespace

const char* to_string(log_level l) noexcept {
  switch (l) {
  case log_level::debug:
    return "debug";
  case log_level::info:
    return "info";
  case log_level::warn:
    return "warn";
  case log_level::error:
    return "error";
  case log_level::off:
    return "off";
  }
  return "?";
}

std::optional<log_level> parse_log_level(std::string_view name) noexcept {
  for (const log_level l :
       {log_level::debug, log_level::info, log_level::warn, log_level::error, log_level::off}) {
    if (name == to_string(l)) {
      return l;
    }
  }
  if (name == "warning") {
    return log_level::warn;
  }
  return std::nullopt;
}

std::string format_log_record(const log_record& r) {
  char head[160];
  std::snprintf(head, sizeof head, "cuawait %s wait %llu \"%s\" lane %p: ", to_string(r.level),
                static_cast<unsigned long long>(r.wait_id),
                r.operation != nullptr ? r.operation : "wait", r.lane);
  std::string s = head;
  const std::string t = std::to_string(r.thread);
  switch (r.event) {
  case wait_event::suspend:
    s += "suspended on thread " + t;
    break;
  case wait_event::ready:
    s += std::string("already finished (") + state_text(r.status.state) + "), no suspension";
    break;
  case wait_event::complete:
    s += std::string("finished (") + state_text(r.status.state) + "), seen on thread " + t +
         " after " + micros(r.waited_ns);
    break;
  case wait_event::resume:
    s += "resumed on thread " + t + " (suspended on " + std::to_string(r.suspended_on) +
         ") after " + micros(r.waited_ns);
    if (r.latency_ns != 0) {
      s += ", " + micros(r.latency_ns) + " after completion";
    }
    if (r.status.state != completion_state::done) {
      s += std::string(", ") + state_text(r.status.state);
    }
    break;
  case wait_event::withdraw:
    s += "withdrawn on thread " + t + " (its coroutine was destroyed) after " + micros(r.waited_ns);
    break;
  }
  if (r.status.error != 0) {
    s += ", error " + std::to_string(r.status.error);
  }
  return s;
}

lifecycle_log::sink lifecycle_log::stderr_sink() {
  return [](const log_record& r) {
    const std::string line = format_log_record(r) + '\n';
    std::fputs(line.c_str(), stderr);
  };
}

lifecycle_log::lifecycle_log(log_level min_level, sink s)
    : m_min(min_level), m_sink(std::move(s)) {}

void lifecycle_log::observe(const wait_info& e) noexcept {
  const detail::wait_node& w = e.node;
  const log_level lvl = level_of(e.event, w.status.state);
  if (lvl < m_min || m_min == log_level::off || !m_sink) {
    return;
  }
  log_record r;
  r.level = lvl;
  r.event = e.event;
  r.wait_id = e.id;
  r.operation = w.operation;
  r.lane = w.lane_key;
  r.thread = e.thread;
  r.suspended_on = suspending_thread(e.id);
  r.time_ns = e.now_ns;
  r.waited_ns = e.now_ns > w.trace.suspend_ns ? e.now_ns - w.trace.suspend_ns : 0;
  if (e.event == wait_event::resume && w.resolved_ns != 0 && e.now_ns > w.resolved_ns) {
    r.latency_ns = e.now_ns - w.resolved_ns;
  }
  r.status = w.status;
  try {
    m_sink(r);
  } catch (...) {
    // A log must never take the reactor down.
  }
}

} // namespace cuawait
