// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! `graph_exec`: an owning, move-only executable CUDA graph (`cudaGraphExec_t`), made by
//! `graph::instantiate()`. Launch it on any stream, update its parameters in place from a
//! graph of the same shape, or set one node's parameters directly.
//!
//! Use after move: a moved-from (or released) `graph_exec` holds a sentinel; launching,
//! uploading, updating or setting nodes on it, and `get()`, throw `cuda_error` ("use of a
//! moved-from cuda::graph_exec") before any CUDA call. Destroying it or move-assigning into
//! it is fine. A default-constructed `graph_exec` is empty (null), not moved-from.

#include "cuawait/cuda/detail/graph_kernel_args.hpp"
#include "cuawait/cuda/detail/unique_handle.hpp"
#include "cuawait/cuda/error.hpp"
#include "cuawait/cuda/stream.hpp"

#include <cuda_runtime_api.h>

#include <cstddef>
#include <source_location>
#include <string>
#include <utility>

namespace cuawait::cuda {

class graph;

namespace detail {
//! The owner traits of `graph_exec` (see unique_handle.hpp).
struct graph_exec_traits : handle_holder_access {
  using handle_type = cudaGraphExec_t;
  using base_type = handle_holder<cudaGraphExec_t>;
  static cudaGraphExec_t moved_from() noexcept { return sentinel_handle<cudaGraphExec_t>(); }
  static bool is_moved_from(cudaGraphExec_t e) noexcept { return is_sentinel_handle(e); }
  static void destroy(cudaGraphExec_t e) noexcept {
    check_noexcept("graph exec destroy", cudaGraphExecDestroy(e), "cudaGraphExecDestroy");
  }
  [[noreturn]] static void throw_moved_from(cudaGraphExec_t /*e*/, std::source_location where) {
    throw cuda_error::moved_from("cuda::graph_exec", where);
  }
};
} // namespace detail

//! A node of a `graph`, as returned by the `graph::add_*` functions. A plain handle: it
//! stays valid while the graph it belongs to lives, and names the matching node of every
//! `graph_exec` instantiated from that graph (for `graph_exec::set_*`).
class graph_node {
public:
  constexpr graph_node() noexcept = default;
  constexpr explicit graph_node(cudaGraphNode_t n) noexcept : m_node(n) {}
  //! The native handle.
  [[nodiscard]] constexpr cudaGraphNode_t get() const noexcept { return m_node; }
  friend constexpr bool operator==(graph_node, graph_node) noexcept = default;

private:
  cudaGraphNode_t m_node = nullptr;
};

//! Why `graph_exec::try_update` could not update an executable graph in place.
struct graph_update_result {
  //! `cudaGraphExecUpdateSuccess` when the update was applied.
  cudaGraphExecUpdateResult result = cudaGraphExecUpdateSuccess;
  //! The node (of the new graph) the failure is about, when CUDA names one.
  cudaGraphNode_t error_node = nullptr;
  //! With a topology change: the source of the edge that differs.
  cudaGraphNode_t error_from_node = nullptr;

  //! True when the executable graph now matches the new graph.
  [[nodiscard]] bool ok() const noexcept { return result == cudaGraphExecUpdateSuccess; }
  //! A sentence saying why the update failed ("the topology changed: ..."), or "updated".
  [[nodiscard]] const char* reason() const noexcept { return describe(result); }

  //! The sentence for one `cudaGraphExecUpdateResult`.
  static const char* describe(cudaGraphExecUpdateResult r) noexcept {
    switch (r) {
    case cudaGraphExecUpdateSuccess:
      return "updated";
    case cudaGraphExecUpdateErrorTopologyChanged:
      return "the topology changed (nodes or edges were added, removed or reordered)";
    case cudaGraphExecUpdateErrorNodeTypeChanged:
      return "a node's type changed (e.g. a copy became a kernel)";
    case cudaGraphExecUpdateErrorFunctionChanged:
    case cudaGraphExecUpdateErrorUnsupportedFunctionChange:
      return "a kernel node's function changed in a way that cannot be updated";
    case cudaGraphExecUpdateErrorParametersChanged:
      return "a node's parameters changed in a way that cannot be updated (e.g. a copy "
             "changed device or dimensionality)";
    case cudaGraphExecUpdateErrorNotSupported:
      return "a node of this kind cannot be updated";
    case cudaGraphExecUpdateErrorAttributesChanged:
      return "a node's attributes changed in a way that cannot be updated";
    default:
      return "the update failed for an unexpected reason";
    }
  }
};

//! Thrown by `graph_exec::update` when the executable graph cannot take the new graph's
//! parameters (its topology or node kinds differ). `update_result()` says why.
class graph_update_error : public cuda_error {
public:
  graph_update_error(cudaError_t code, graph_update_result r,
                     std::source_location where = std::source_location::current())
      : cuda_error(code, (std::string("graph update: ") + r.reason()).c_str(),
                   "cudaGraphExecUpdate", where),
        m_result(r) {}
  //! CUDA's verdict and the offending nodes.
  [[nodiscard]] const graph_update_result& update_result() const noexcept { return m_result; }

private:
  graph_update_result m_result;
};

//! An executable graph. Move-only; the destructor destroys it without waiting (CUDA keeps
//! launched work alive until it completes) and never throws.
//!
//! Launching does not wait: `exec.launch(s)` enqueues the whole graph on `s` and returns
//! the stream layer's `operation`, awaited like any other (`co_await exec.launch(s)`). One
//! `graph_exec` may be launched again before the previous launch finished; CUDA orders launches of
//! the same executable graph.
class graph_exec : public detail::unique_handle<detail::graph_exec_traits> {
  using owner = detail::unique_handle<detail::graph_exec_traits>;

public:
  //! An empty handle; only assignment, destruction, `get()` (null) and `bool` are valid.
  graph_exec() noexcept : owner(cudaGraphExec_t{}) {}
  graph_exec(int) = delete;
  graph_exec(std::nullptr_t) = delete;
  //! Moves the executable graph; `o` is left moved-from (see the file comment).
  graph_exec(graph_exec&& o) noexcept = default;
  //! Destroys this executable graph, then takes `o`'s; `o` is left moved-from.
  graph_exec& operator=(graph_exec&& o) noexcept = default;
  ~graph_exec() = default;

  //! Takes ownership of `e`.
  [[nodiscard]] static graph_exec from_native_handle(cudaGraphExec_t e) noexcept {
    return graph_exec(e, 0);
  }
  //! Gives up ownership; the caller destroys the returned handle. This object is then
  //! moved-from.
  using owner::release;
  //! The native handle (null when empty).
  //! @throws cuda_error ("use of a moved-from cuda::graph_exec") when moved from.
  [[nodiscard]] cudaGraphExec_t get() const { return checked_handle(); }
  //! True when this holds an executable graph (false when empty or moved from).
  explicit operator bool() const noexcept { return owns_handle() && raw() != nullptr; }

  //! Enqueues the graph on `s` and returns its awaitable, like any stream operation:
  //! `co_await exec.launch(s)` resumes when the whole graph has finished (one completion
  //! for all its nodes); discarding the result is fine (the graph still runs).
  //! @throws cuda_error ("graph launch") when CUDA refuses the launch; `co_await` throws
  //! `cuda_error` naming "graph launch" when the graph's work failed.
  operation launch(stream_ref s,
                   std::source_location where = std::source_location::current()) const {
    check("graph launch", cudaGraphLaunch(checked_handle(where), s.get()), "cudaGraphLaunch",
          where);
    return operation{s.get(), "graph launch", where};
  }

  //! Uploads the graph's work descriptors to the device ahead of the first launch, so that
  //! the first launch costs what later ones cost. Optional.
  //! @throws cuda_error ("graph upload")
  void upload(stream_ref s) const {
    CUAWAIT_CUDA_CHECK("graph upload", cudaGraphUpload(get(), s.get()));
  }

  //! Takes every node parameter (kernel arguments, copy addresses and sizes, memset
  //! values...) from `g`, which must have the same topology as the graph this was
  //! instantiated from. Cheaper than instantiating `g`. Defined in graph.hpp.
  //! @returns `ok()` on success, else why not (this executable graph is then unchanged).
  //! @throws cuda_error for errors other than an update CUDA refuses.
  graph_update_result try_update(const graph& g);

  //! Like `try_update`, but a refused update throws.
  //! @throws graph_update_error naming the reason (e.g. "the topology changed").
  void update(const graph& g);

  //! Sets the arguments (and launch shape) of kernel node `n` for later launches.
  //! Arguments are checked against the kernel's parameters like a launch.
  //! @throws cuda_error ("graph set kernel node")
  template <class... Params, class... Args>
  requires ::cuawait::cuda::detail::graph_kernel_args_match<
      ::cuawait::cuda::detail::graph_type_list<Params...>, Args...>
  void set_kernel(graph_node n, void (*kernel)(Params...), dim3 grid, dim3 block, Args&&... args) {
    ::cuawait::cuda::detail::graph_kernel_args<Params...> packed(static_cast<Args&&>(args)...);
    const cudaKernelNodeParams p = packed.node_params(kernel, grid, block);
    CUAWAIT_CUDA_CHECK("graph set kernel node",
                       cudaGraphExecKernelNodeSetParams(get(), n.get(), &p));
  }

  //! Sets a 1-D copy node's addresses and size (same devices as at instantiation).
  //! @throws cuda_error ("graph set copy node")
  void set_copy(graph_node n, void* dst, const void* src, std::size_t bytes) {
    CUAWAIT_CUDA_CHECK(
        "graph set copy node",
        cudaGraphExecMemcpyNodeSetParams1D(get(), n.get(), dst, src, bytes, cudaMemcpyDefault));
  }

private:
  graph_exec(cudaGraphExec_t e, int /*adopt*/) noexcept : owner(e) {}
};

} // namespace cuawait::cuda
