// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! `lifecycle_log`: a line per wait event (what a coroutine suspended on, where it resumed,
//! after how long, what failed), with the wait's id, to a sink of the user's choosing,
//! filtered by level. With a `runtime`, `CUAWAIT_LOG=debug|info|warn|error` turns it on
//! (stderr) without recompiling.
//!
//! Levels: `debug` every suspension, completion and ready wait; `info` one line per
//! resumed or withdrawn wait; `warn` waits cancelled by shutdown; `error` failed waits and
//! a lost device context.

#include "cuawait/wait_observer.hpp"

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

namespace cuawait {

//! How important a log record is.
enum class log_level : std::uint8_t { debug, info, warn, error, off };

//! "debug", "info", "warn", "error", "off".
[[nodiscard]] const char* to_string(log_level l) noexcept;
//! The level called `name` (as `to_string` writes it, or "warning"), or nullopt.
[[nodiscard]] std::optional<log_level> parse_log_level(std::string_view name) noexcept;

//! One log record.
struct log_record {
  log_level level = log_level::info;
  wait_event event = wait_event::suspend;
  std::uint64_t wait_id = 0;
  const char* operation = nullptr; //!< what was awaited ("kernel launch"...), may be null
  const void* lane = nullptr;      //!< the lane (CUDA stream)
  std::uint32_t thread = 0;        //!< the thread the event happened on (ordinal)
  std::uint32_t suspended_on = 0;  //!< the thread that suspended (ordinal)
  std::uint64_t time_ns = 0;       //!< steady-clock time of the event
  //! resume / withdraw: time since the suspension; complete: the work's time as seen.
  std::uint64_t waited_ns = 0;
  //! resume: time from the completion to the resumption (0 if not completed).
  std::uint64_t latency_ns = 0;
  completion_status status{};
};

//! One line of text for `r`, without a newline:
//! `cuawait info wait 17 "kernel launch" lane 0x55..: resumed on thread 3 (suspended on 1)
//! after 41.2 us, 3.1 us after completion`.
[[nodiscard]] std::string format_log_record(const log_record& r);

//! Turns wait events into log records of at least a given level and hands them to a sink.
class lifecycle_log final : public wait_observer {
public:
  //! Receives each record on the thread of its event (some under the reactor's lock): keep
  //! it short; an exception it throws is swallowed.
  using sink = std::function<void(const log_record&)>;

  //! A sink that writes `format_log_record` lines to stderr (one `fputs` per line).
  [[nodiscard]] static sink stderr_sink();

  explicit lifecycle_log(log_level min_level = log_level::info, sink s = stderr_sink());

  void observe(const wait_info& e) noexcept override;

  [[nodiscard]] log_level level() const noexcept { return m_min; }

private:
  log_level m_min;
  sink m_sink;
};

} // namespace cuawait
