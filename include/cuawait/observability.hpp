// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! `observability`: the trace recorder, lifecycle log and NVTX ranges a reactor's owner
//! (the `runtime`) installs, behind one `observer_set`, configured from the environment:
//!
//! | variable | effect |
//! | --- | --- |
//! | `CUAWAIT_TRACE=path.json` | record a trace, written to `path.json` by `finish` (`%p` in the
//! path: the process id, `%n`: a count of the traces this process wrote) | |
//! `CUAWAIT_LOG=debug\|info\|warn\|error` | a lifecycle log to stderr from that level | |
//! `CUAWAIT_NVTX=1` | NVTX ranges (when built with NVTX) |
//!
//! Nothing is installed on the reactor unless one of them is asked for: the hot path then
//! stays a null check.

#include "cuawait/lifecycle_log.hpp"
#include "cuawait/nvtx_ranges.hpp"
#include "cuawait/trace_recorder.hpp"
#include "cuawait/wait_observer.hpp"

#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace cuawait {

class completion_reactor;
class executor;

//! What `observability` reads from the environment (see the file comment).
struct observability_config {
  std::string trace_path;         //!< CUAWAIT_TRACE ("" none)
  log_level log = log_level::off; //!< CUAWAIT_LOG
  bool nvtx = false;              //!< CUAWAIT_NVTX
};

//! Reads CUAWAIT_TRACE, CUAWAIT_LOG and CUAWAIT_NVTX.
//! @throws std::invalid_argument naming the variable for a value it does not know.
[[nodiscard]] observability_config observability_from_environment();

//! Owns the observers of one reactor and installs them on it. Not thread-safe: configure
//! it from the thread that owns the reactor, while no wait is in flight.
class observability {
public:
  observability() = default;
  observability(const observability&) = delete;
  observability& operator=(const observability&) = delete;
  ~observability();

  //! Names executors for traces, then sets up what `config` asks for on `r`.
  void attach(completion_reactor& r, const observability_config& config,
              std::vector<std::pair<const executor*, std::string>> executor_names = {});
  //! `attach` with `observability_from_environment()`.
  void attach_from_environment(completion_reactor& r,
                               std::vector<std::pair<const executor*, std::string>> names = {});

  //! Starts recording a trace (replacing one started before) and installs the hooks if they
  //! are not yet: call while no wait is in flight.
  trace_recorder& start_trace(completion_reactor& r, trace_options options = {});
  //! The trace being recorded, or nullptr.
  [[nodiscard]] trace_recorder* trace() noexcept { return m_trace.get(); }
  [[nodiscard]] const trace_recorder* trace() const noexcept { return m_trace.get(); }
  //! Writes the trace recorded so far to `path`.
  //! @throws std::runtime_error when no trace is recorded or the file cannot be written.
  void write_trace(const std::string& path) const;

  //! Writes the trace to CUAWAIT_TRACE's path if set (a failure is reported on stderr) and
  //! uninstalls the hooks from `r`. Call once the reactor has no wait in flight.
  void finish(completion_reactor& r) noexcept;

private:
  void install(completion_reactor& r) noexcept;

  observer_set m_set;
  std::unique_ptr<trace_recorder> m_trace;
  std::unique_ptr<lifecycle_log> m_log;
  std::unique_ptr<nvtx_ranges> m_nvtx;
  std::vector<std::pair<const executor*, std::string>> m_names;
  std::string m_trace_path;
  completion_reactor* m_installed = nullptr;
};

} // namespace cuawait
