// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! `gate`: GPU work that is *skipped* when a stop is requested before the GPU reaches it.
//!
//! A stop request ends a wait, never GPU work (docs/CANCELLATION.md): the work a cancelled
//! job had queued runs on. Work enqueued through a gate is different: each gated unit (one
//! `launch`, or everything one `run` enqueues) becomes a small graph whose first node, a
//! one-thread kernel, reads the gate's "closed" word from pinned host memory and sets the
//! condition of an IF node holding the unit. Once the gate's stop token is stopped (or
//! `close()` is called), every unit the GPU has not started yet costs that one tiny kernel
//! and nothing else. A unit already running finishes.
//!
//! ```cpp
//! task<void> job(cuda::stream_lease s, float* d, int n) {
//!   cuda::gate g(s, co_await cuawait::get_stop_token()); // the job's token
//!   for (int i = 0; i < 100; ++i) {
//!     g.launch(step, grid, block, d, n);  // skipped from the first not yet started on a stop
//!   }
//!   co_await s;
//! }
//! ```
//!
//! Opt-in and per unit: plain stream operations are never gated and cost nothing more.
//! A gated unit costs host time to capture its body and update a graph (see
//! `bench/cuda/cancel_bench.cu` for the figure on the test machine), so gate units of real
//! work (a kernel of a millisecond, a pipeline step), not each of many tiny operations:
//! `run` puts several operations behind one check. What a unit may contain is what CUDA
//! allows in a conditional node's body: kernels, and copies and memsets between device
//! memory and pinned or mapped host memory (no pageable host memory, no allocations, no
//! host functions, no event records); anything else fails the unit with `cuda_error`.

#include "cuawait/cuda/error.hpp"
#include "cuawait/cuda/operation.hpp"
#include "cuawait/cuda/pinned_pool.hpp"
#include "cuawait/cuda/stream.hpp"

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <optional>
#include <source_location>
#include <stop_token>
#include <type_traits>
#include <utility>
#include <vector>

namespace cuawait::cuda {

namespace detail {

//! The words a gate shares with its check kernel (in pinned host memory).
struct gate_words {
  unsigned closed;  //!< written by the host: nonzero skips every unit not yet started
  unsigned ran;     //!< units the check let run (written by the GPU)
  unsigned skipped; //!< units the check skipped (written by the GPU)
};

//! A gated unit's executable graph: a template, [check] -> IF { child }, the unit being a
//! child graph in the IF body, and the graph instantiated from it. A unit is captured into
//! a graph of its own, put as the child of a template whose executable graph is then
//! updated (`cudaGraphExecUpdate`, which leaves launches already queued untouched) and
//! relaunched. Instantiating, and destroying an executable graph, may wait for the whole
//! device (seen on the H200 while another stream's kernel ran), and a graph with a
//! conditional node is instantiated only once: so templates are never destroyed while
//! their context lives. A gate keeps up to `max_templates` (one per unit shape, most
//! recently used first); the ones it drops and all of them when it goes return, once the
//! stream has passed their launches, to the device context's `gate_template_pool`, where
//! the next gate finds them. A gate instantiates only for a unit shape new to the context.
struct gate_template {
  cudaGraph_t graph = nullptr;     //!< the template
  cudaGraph_t body = nullptr;      //!< its IF node's body
  cudaGraphNode_t check = nullptr; //!< the check kernel's node (its words change per gate)
  cudaGraphNode_t child = nullptr; //!< the unit in the body
  cudaGraphConditionalHandle handle{};
  cudaGraphExec_t exec = nullptr;
};

//! Idle templates of one device context, most recently returned first.
class gate_template_pool {
public:
  static constexpr std::size_t capacity = 64; //!< beyond it, returned templates are destroyed
  gate_template_pool() = default;
  gate_template_pool(const gate_template_pool&) = delete;
  gate_template_pool& operator=(const gate_template_pool&) = delete;
  //! Destroys the templates (the context is going: nothing of them is in flight).
  ~gate_template_pool();
  //! The most recently returned template, if any.
  [[nodiscard]] bool take(gate_template& out) noexcept;
  //! A template none of whose launches is still in flight.
  void give(const gate_template& t) noexcept;

private:
  std::mutex m_mutex;
  std::vector<gate_template> m_free;
};

//! A gate's templates.
struct gate_graphs {
  static constexpr std::size_t max_templates = 4;
  struct retired {
    gate_template t;
    cudaEvent_t done; //!< recorded after its last launch
  };
  gate_template_pool* pool = nullptr;
  gate_words* device_words = nullptr;
  cudaGraph_t unit = nullptr;           //!< the unit being captured
  std::vector<gate_template> templates; //!< most recently used first
  std::vector<retired> dropped;         //!< dropped from `templates`, waiting for their launches
  std::uint64_t instantiated = 0;       //!< units that instantiated a graph
  std::uint64_t updated = 0;            //!< units that updated one
  //! Returns the dropped templates whose last launch has finished to the pool; never waits.
  void reap() noexcept;
  //! Returns everything to the pool, once the stream has passed it (the release thread's job).
  void return_all() noexcept;
};

//! Starts capturing `s` into a new unit graph.
//! @throws cuda_error
void gate_begin(cudaStream_t s, gate_graphs& g, const std::source_location& where);
//! Ends the capture, updates (or instantiates) a template's executable graph with the unit
//! and launches it on `s`.
//! @throws cuda_error (nothing is launched then)
void gate_end(cudaStream_t s, gate_graphs& g, const std::source_location& where);
//! Ends the capture and drops the unit (after `f` threw).
void gate_abort(cudaStream_t s, gate_graphs& g) noexcept;

//! Sets the closed word (the stop callback).
struct gate_closer {
  gate_words* words;
  void operator()() const noexcept;
};

} // namespace detail

//! A gate on one stream, closed by a stop request on its token (or by `close()`). Not
//! copyable or movable (its stop callback points into it). Construct it on a thread with a
//! device context: its words come from the context's pinned pool and go back to it fenced
//! behind the stream's work, so destroying the gate while gated work is queued is safe.
class gate {
public:
  //! A gate for work on `s`, closed when `token` is stopped (at once when it already is).
  //! @throws no_device_context; cuda_error when its words cannot be allocated.
  gate(stream_ref s, std::stop_token token = {});
  gate(const gate&) = delete;
  gate& operator=(const gate&) = delete;
  //! Gives the words back and destroys the units' graphs behind the stream's work; never
  //! throws, never waits.
  ~gate();

  //! Enqueues what `f(stream_ref)` enqueues on the gate's stream as one unit, skipped as a
  //! whole when the gate is closed by the time the GPU reaches it. `f` must only enqueue
  //! (see the file comment for what a unit may hold); it runs now, while the stream is
  //! being captured. @returns the awaitable of the stream's work so far.
  //! @throws cuda_error when the unit cannot be built (nothing of it is enqueued), or what
  //! `f` throws (nothing of it is enqueued either).
  template <class F>
  requires std::is_invocable_v<F&, stream_ref>
      operation run(F&& f, std::source_location where = std::source_location::current()) {
    detail::gate_begin(m_stream.get(), *m_graphs, where);
    try {
      f(m_stream);
    } catch (...) {
      detail::gate_abort(m_stream.get(), *m_graphs);
      throw;
    }
    detail::gate_end(m_stream.get(), *m_graphs, where);
    return {m_stream.get(), "gated work", where};
  }

  //! `kernel<<<grid, block>>>(args...)` as one gated unit.
  template <class... Params, class... Args>
  requires(sizeof...(Params) == sizeof...(Args) &&
           (std::is_convertible_v<Args&&, Params> && ...)) operation
      launch(void (*kernel)(Params...), dim3 grid, dim3 block, Args&&... args) {
    return run(
        [&](stream_ref s) { (void)s.launch(kernel, grid, block, std::forward<Args>(args)...); },
        std::source_location::current());
  }
  //! The same with a `launch_config` (dynamic shared memory).
  template <class... Params, class... Args>
  requires(sizeof...(Params) == sizeof...(Args) &&
           (std::is_convertible_v<Args&&, Params> && ...)) operation
      launch(launch_config cfg, void (*kernel)(Params...), Args&&... args) {
    return run([&](stream_ref s) { (void)s.launch(cfg, kernel, std::forward<Args>(args)...); },
               std::source_location::current());
  }

  //! Closes the gate by hand: units the GPU has not started are skipped.
  void close() noexcept { detail::gate_closer{m_words}(); }
  //! True once closed (by the token or `close()`).
  [[nodiscard]] bool closed() const noexcept;
  //! Units the GPU ran / skipped so far. Exact once the stream has passed them (e.g. after
  //! `co_await s.drain()`).
  [[nodiscard]] std::uint32_t ran() const noexcept;
  [[nodiscard]] std::uint32_t skipped() const noexcept;
  //! Units that instantiated a graph / updated one in place (host side, exact).
  [[nodiscard]] std::uint64_t instantiated() const noexcept { return m_graphs->instantiated; }
  [[nodiscard]] std::uint64_t updated() const noexcept { return m_graphs->updated; }
  //! The gate's stream.
  [[nodiscard]] stream_ref stream() const noexcept { return m_stream; }

private:
  stream_ref m_stream;
  pinned_pool* m_pool;
  pinned_pool::block m_block;
  detail::gate_words* m_words;        // host view
  detail::gate_words* m_device_words; // the same memory, for the check kernel
  detail::gate_graphs* m_graphs;      // owned; handed to the release thread by ~gate
  std::optional<std::stop_callback<detail::gate_closer>> m_on_stop;
};

} // namespace cuawait::cuda
