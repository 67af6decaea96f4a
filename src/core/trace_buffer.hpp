// SPDX-License-Identifier: Apache-2.0
#pragma once

// Private to trace_recorder: the per-thread event buffers and what the writer reads.

#include "cuawait/detail/reactor_node.hpp"
#include "cuawait/wait_observer.hpp"

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <thread>

namespace cuawait {
class executor;
}

namespace cuawait::detail {

//! One recorded event (48 bytes).
struct trace_event_record {
  std::uint64_t t_ns = 0;
  std::uint64_t id = 0;
  const void* lane = nullptr;
  const char* operation = nullptr;
  const executor* exec = nullptr; // the recording thread's executor at the time
  std::int32_t error = 0;
  wait_event kind = wait_event::suspend;
  completion_state state = completion_state::pending;
};

//! A fixed block of events, appended by its thread only and published by `count`.
struct trace_chunk {
  static constexpr std::size_t size = 1024;
  std::array<trace_event_record, size> events;
  std::atomic<std::size_t> count{0};
  std::atomic<trace_chunk*> next{nullptr};
};

//! One thread's events for one recorder: a list of chunks, appended by that thread only.
struct trace_thread_buffer {
  std::thread::id thread;
  std::uint32_t ordinal = 0; // observed_thread_ordinal()
  std::uint64_t os_tid = 0;  // the kernel's thread id, for matching with other tools
  std::unique_ptr<trace_chunk> head;
  trace_chunk* tail = nullptr; // owner thread only
  bool full = false;           // owner thread only: no chunk could be taken any more

  ~trace_thread_buffer() {
    // The chain after `head` is owned through raw `next` pointers.
    trace_chunk* c = head ? head->next.load(std::memory_order_relaxed) : nullptr;
    while (c != nullptr) {
      trace_chunk* n = c->next.load(std::memory_order_relaxed);
      delete c;
      c = n;
    }
  }
};

} // namespace cuawait::detail
