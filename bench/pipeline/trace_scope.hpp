// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! `--trace FILE`: each cuawait mode run records a trace of its runtime's GPU waits and
//! writes it next to FILE, named after the mode and level (`trace_path_for`, options.hpp).

#include "modes.hpp"

#include <cuawait/runtime.hpp>

#include <cstdio>
#include <exception>
#include <string>

namespace cuawait::bench {

//! Records `rt`'s waits for the scope's lifetime when the run has a trace path. Construct it
//! while no GPU wait is in flight (after warm-up), before the timed region.
class trace_scope {
public:
  trace_scope(runtime& rt, const mode_context& ctx) : m_rt(rt), m_path(ctx.trace_path) {
    if (!m_path.empty()) {
      (void)rt.start_trace();
    }
  }
  trace_scope(const trace_scope&) = delete;
  trace_scope& operator=(const trace_scope&) = delete;
  ~trace_scope() {
    if (m_path.empty()) {
      return;
    }
    try {
      m_rt.write_trace(m_path);
      std::fprintf(stderr, "trace: %s\n", m_path.c_str());
    } catch (const std::exception& e) {
      std::fprintf(stderr, "trace: %s\n", e.what());
    }
  }

private:
  runtime& m_rt;
  std::string m_path;
};

} // namespace cuawait::bench
