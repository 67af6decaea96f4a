// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! `graph_cache`: replays work of the same shape as a graph without instantiating it again.
//! Each call captures what a function enqueues (cheap), finds the executable graph cached
//! under a key (given, or the call site), updates its parameters in place
//! (`cudaGraphExecUpdate`: kernel arguments, copy addresses and sizes), and launches it.
//! When the shape changed, it instantiates again and keeps the reason.
//! For a region inside a coroutine (`co_await`-able, updated node by node without capturing
//! again, with executables for concurrent replays), see `cached_region` in region.hpp.
//!
//! @code
//! cuda::graph_cache cache;
//! task<void> job(cuda::stream_ref s, buffers b) {
//!   cache.launch(s, [&](cuda::stream_ref s) {   // key: this call site
//!     enqueue_job(s, b);                        // copies and kernels, recorded
//!   });
//!   co_await s;                                 // one completion for the whole graph
//! }
//! @endcode

#include "cuawait/cuda/capture.hpp"
#include "cuawait/cuda/detail/graph_cache_core.hpp"
#include "cuawait/cuda/error.hpp"
#include "cuawait/cuda/graph.hpp"
#include "cuawait/cuda/graph_exec.hpp"
#include "cuawait/cuda/stream.hpp"

#include <cstdint>
#include <mutex>
#include <source_location>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

namespace cuawait::cuda {

//! What a graph is cached under: a name chosen by the user, or a call site.
class graph_key {
public:
  //! A key named by the user: equal names share one executable graph.
  graph_key(std::string_view name) : m_key(name) {}       // NOLINT: implicit on purpose
  graph_key(const char* name) : m_key(name) {}            // NOLINT: implicit on purpose
  graph_key(std::string name) : m_key(std::move(name)) {} // NOLINT: implicit on purpose

  //! The call site (file, line, column), optionally qualified by `variant` (e.g. a size
  //! class) when one call site produces several shapes.
  [[nodiscard]] static graph_key
  here(std::uint64_t variant = 0, std::source_location where = std::source_location::current()) {
    std::string k = where.file_name();
    k += ':';
    k += std::to_string(where.line());
    k += ':';
    k += std::to_string(where.column());
    if (variant != 0) {
      k += '#';
      k += std::to_string(variant);
    }
    return graph_key(std::move(k));
  }

  //! The key as text (for messages).
  [[nodiscard]] const std::string& str() const noexcept { return m_key; }

private:
  std::string m_key;
};

//! A bounded cache of executable graphs. Thread-safe: each lookup and launch holds the
//! cache's lock, so coroutines on any pool thread may share one cache.
class graph_cache {
public:
  //! Keeps at most `capacity` executable graphs (least recently used ones are dropped).
  //! @throws std::invalid_argument when `capacity` is 0
  explicit graph_cache(std::size_t capacity = 256) : m_core(capacity) {}
  graph_cache(const graph_cache&) = delete;
  graph_cache& operator=(const graph_cache&) = delete;

  //! Captures `f(s)` on `s` (see capture.hpp; `f` returns void), brings the executable
  //! graph cached under `key` up to date with it, and launches it on `s`. Returns what the
  //! cache did. Await `s` afterwards for completion.
  //! @throws cuda_error from capture, instantiation or launch; the cache stays consistent.
  template <class F>
  requires std::is_void_v<std::invoke_result_t<F&, stream_ref>> graph_cache_outcome
  launch(stream_ref s, const graph_key& key, F&& f, std::uint64_t fingerprint = 0) {
    graph g = capture(s, std::forward<F>(f));
    const std::lock_guard lock(m_mutex);
    auto [exec, outcome] = acquire_locked(key, g, fingerprint);
    exec.launch(s);
    return outcome;
  }

  //! Same, keyed by the call site.
  template <class F>
  requires std::is_void_v<std::invoke_result_t<F&, stream_ref>> graph_cache_outcome
  launch(stream_ref s, F&& f, std::source_location where = std::source_location::current()) {
    return launch(s, graph_key::here(0, where), std::forward<F>(f));
  }

  //! Brings the executable graph cached under `key` up to date with `g` and launches it on
  //! `s`, for graphs built explicitly or captured by the caller. `fingerprint`: a non-zero
  //! summary of `g`'s parameters lets an unchanged graph skip the update.
  //! @throws cuda_error
  graph_cache_outcome launch(stream_ref s, const graph_key& key, const graph& g,
                             std::uint64_t fingerprint = 0) {
    const std::lock_guard lock(m_mutex);
    auto [exec, outcome] = acquire_locked(key, g, fingerprint);
    exec.launch(s);
    return outcome;
  }

  //! Counters (hits, misses, updates, re-instantiations, evictions) and the size.
  [[nodiscard]] graph_cache_stats stats() const {
    const std::lock_guard lock(m_mutex);
    return m_core.stats();
  }

  //! Why the last re-instantiation happened, e.g. "graph cache: key "job" re-instantiated:
  //! the topology changed (...)"; empty when none happened.
  [[nodiscard]] std::string last_reinstantiation_reason() const {
    const std::lock_guard lock(m_mutex);
    return m_core.last_reason();
  }

  //! Drops every cached executable graph (launched work is unaffected).
  void clear() {
    const std::lock_guard lock(m_mutex);
    m_core.clear();
  }

private:
  std::pair<graph_exec&, graph_cache_outcome> acquire_locked(const graph_key& key, const graph& g,
                                                             std::uint64_t fingerprint) {
    return m_core.acquire(
        key.str(), g, fingerprint, [](const graph& gr) { return gr.instantiate(); },
        [](graph_exec& e, const graph& gr) -> const char* {
          const graph_update_result r = e.try_update(gr);
          return r.ok() ? nullptr : r.reason();
        });
  }

  mutable std::mutex m_mutex;
  ::cuawait::cuda::detail::graph_cache_core<graph_exec> m_core;
};

} // namespace cuawait::cuda
