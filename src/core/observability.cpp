// SPDX-License-Identifier: Apache-2.0
#include "cuawait/observability.hpp"

#include "cuawait/completion_reactor.hpp"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>

#if defined(__unix__)
#include <unistd.h>
#endif

namespace cuawait {

namespace {

std::atomic<unsigned> g_traces_written{0};

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr ? v : "";
}

//! `%p` -> the process id, `%n` -> how many traces this process wrote before.
std::string expand_trace_path(const std::string& pattern) {
  std::string out;
  for (std::size_t i = 0; i < pattern.size(); ++i) {
    if (pattern[i] == '%' && i + 1 < pattern.size()) {
      const char c = pattern[i + 1];
      if (c == 'p') {
#if defined(__unix__)
        out += std::to_string(::getpid());
#endif
        ++i;
        continue;
      }
      if (c == 'n') {
        out += std::to_string(g_traces_written.fetch_add(1));
        ++i;
        continue;
      }
    }
    out += pattern[i];
  }
  return out;
}

} // namespace

observability_config observability_from_environment() {
  observability_config c;
  c.trace_path = env("CUAWAIT_TRACE");
  if (const std::string log = env("CUAWAIT_LOG"); !log.empty()) {
    const auto l = parse_log_level(log);
    if (!l) {
      throw std::invalid_argument("CUAWAIT_LOG=" + log +
                                  ": not a log level (debug, info, warn, error, off)");
    }
    c.log = *l;
  }
  if (const std::string nvtx = env("CUAWAIT_NVTX"); !nvtx.empty()) {
    if (nvtx != "0" && nvtx != "1") {
      throw std::invalid_argument("CUAWAIT_NVTX=" + nvtx + ": expected 0 or 1");
    }
    c.nvtx = nvtx == "1";
  }
  return c;
}

observability::~observability() = default;

void observability::install(completion_reactor& r) noexcept {
  if (m_installed == nullptr) {
    m_set.install(r);
    m_installed = &r;
  }
}

void observability::attach(completion_reactor& r, const observability_config& config,
                           std::vector<std::pair<const executor*, std::string>> executor_names) {
  m_names = std::move(executor_names);
  if (config.log != log_level::off) {
    m_log = std::make_unique<lifecycle_log>(config.log);
    m_set.add(*m_log);
  }
  if (config.nvtx && nvtx_ranges::available()) {
    m_nvtx = std::make_unique<nvtx_ranges>();
    m_set.add(*m_nvtx);
  }
  if (!config.trace_path.empty()) {
    m_trace_path = config.trace_path;
    (void)start_trace(r);
  }
  if (!m_set.empty()) {
    install(r);
  }
}

void observability::attach_from_environment(
    completion_reactor& r, std::vector<std::pair<const executor*, std::string>> names) {
  attach(r, observability_from_environment(), std::move(names));
}

trace_recorder& observability::start_trace(completion_reactor& r, trace_options options) {
  auto fresh = std::make_unique<trace_recorder>(options);
  for (const auto& [ex, name] : m_names) {
    fresh->name_executor(ex, name);
  }
  if (m_trace) {
    m_set.remove(*m_trace);
  }
  m_trace = std::move(fresh);
  m_set.add(*m_trace);
  install(r);
  return *m_trace;
}

void observability::write_trace(const std::string& path) const {
  if (!m_trace) {
    throw std::runtime_error("cuawait: write_trace without a trace (call start_trace first)");
  }
  m_trace->write_json(path);
}

void observability::finish(completion_reactor& r) noexcept {
  if (m_trace && !m_trace_path.empty()) {
    try {
      const std::string path = expand_trace_path(m_trace_path);
      m_trace->write_json(path);
      std::fprintf(stderr, "cuawait: trace of %llu events written to %s\n",
                   static_cast<unsigned long long>(m_trace->recorded()), path.c_str());
    } catch (const std::exception& e) {
      std::fprintf(stderr, "cuawait: CUAWAIT_TRACE: %s\n", e.what());
    }
  }
  if (m_installed == &r) {
    r.set_trace({});
    m_installed = nullptr;
  }
}

} // namespace cuawait
