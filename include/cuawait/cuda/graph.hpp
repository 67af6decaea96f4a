// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! `graph`: an owning CUDA graph (`cudaGraph_t`) built node by node (kernel, 1-D copy,
//! memset, host function, event record / wait, child graph) with explicit dependencies,
//! then instantiated into a `graph_exec`. Graphs captured from a coroutine (capture.hpp)
//! are `graph`s too.
//!
//! Use after move: a moved-from (or released) `graph` holds a sentinel; adding nodes to it,
//! cloning, instantiating, counting its nodes, `get()`, or adding it as a child throw
//! `cuda_error` ("use of a moved-from cuda::graph") before any CUDA call. Destroying it or
//! move-assigning into it is fine.
//!
//! @code
//! cuda::graph g;
//! auto h2d = g.add_copy({}, dev, host, bytes);
//! auto ka = g.add_kernel({h2d}, kernel_a, grid, block, dev, n);
//! g.add_copy({ka}, host, dev, bytes);
//! cuda::graph_exec exec = g.instantiate();
//! exec.launch(s);            // then co_await s
//! @endcode

#include "cuawait/cuda/detail/graph_kernel_args.hpp"
#include "cuawait/cuda/detail/unique_handle.hpp"
#include "cuawait/cuda/error.hpp"
#include "cuawait/cuda/graph_exec.hpp"

#include <cuda_runtime_api.h>

#include <cstddef>
#include <initializer_list>
#include <memory>
#include <span>
#include <type_traits>
#include <utility>
#include <vector>

namespace cuawait::cuda {

namespace detail {
//! The owner traits of `graph` (see unique_handle.hpp).
struct graph_traits : handle_holder_access {
  using handle_type = cudaGraph_t;
  using base_type = handle_holder<cudaGraph_t>;
  static cudaGraph_t moved_from() noexcept { return sentinel_handle<cudaGraph_t>(); }
  static bool is_moved_from(cudaGraph_t g) noexcept { return is_sentinel_handle(g); }
  static void destroy(cudaGraph_t g) noexcept {
    check_noexcept("graph destroy", cudaGraphDestroy(g), "cudaGraphDestroy");
  }
  [[noreturn]] static void throw_moved_from(cudaGraph_t /*g*/, std::source_location where) {
    throw cuda_error::moved_from("cuda::graph", where);
  }
};
} // namespace detail

//! The nodes a new node waits for. Built implicitly from `{a, b}`, `{}` (none), one node,
//! or a contiguous range of nodes; it only views them for the duration of the call.
class dependencies {
public:
  dependencies() noexcept = default;
  dependencies(std::initializer_list<graph_node> nodes) : dependencies(std::span(nodes)) {}
  dependencies(graph_node n) : dependencies(std::span(&n, 1)) {} // NOLINT: implicit on purpose
  dependencies(std::span<const graph_node> nodes) {              // NOLINT: implicit on purpose
    m_nodes.reserve(nodes.size());
    for (graph_node n : nodes) {
      m_nodes.push_back(n.get());
    }
  }
  dependencies(const std::vector<graph_node>& nodes) // NOLINT: implicit on purpose
      : dependencies(std::span<const graph_node>(nodes)) {}

  [[nodiscard]] const cudaGraphNode_t* data() const noexcept { return m_nodes.data(); }
  [[nodiscard]] std::size_t size() const noexcept { return m_nodes.size(); }

private:
  std::vector<cudaGraphNode_t> m_nodes;
};

//! An owning CUDA graph: a description of work, not yet executable. Move-only; never
//! throws from its destructor. Executable graphs instantiated from it stay valid after it
//! is destroyed. Not thread-safe: build one graph from one thread at a time.
class graph : public detail::unique_handle<detail::graph_traits> {
  using owner = detail::unique_handle<detail::graph_traits>;

public:
  //! Creates an empty graph.
  //! @throws cuda_error ("graph create")
  graph() : owner(create()) {}
  graph(int) = delete;
  graph(std::nullptr_t) = delete;
  //! Moves the graph; `o` is left moved-from (see the file comment).
  graph(graph&& o) noexcept = default;
  //! Destroys this graph, then takes `o`'s; `o` is left moved-from.
  graph& operator=(graph&& o) noexcept = default;
  ~graph() = default;

  //! Takes ownership of `g` (e.g. from `cudaStreamEndCapture`).
  [[nodiscard]] static graph from_native_handle(cudaGraph_t g) noexcept { return graph(g, 0); }
  //! Gives up ownership; the caller destroys the returned handle. This object is then
  //! moved-from.
  using owner::release;
  //! The native handle.
  //! @throws cuda_error ("use of a moved-from cuda::graph") when moved from.
  [[nodiscard]] cudaGraph_t get() const { return checked_handle(); }

  //! A deep copy (`cudaGraphClone`).
  //! @throws cuda_error ("graph clone")
  [[nodiscard]] graph clone() const {
    cudaGraph_t c = nullptr;
    CUAWAIT_CUDA_CHECK("graph clone", cudaGraphClone(&c, get()));
    return graph(c, 0);
  }

  //! Number of nodes.
  //! @throws cuda_error ("graph node count")
  [[nodiscard]] std::size_t node_count() const {
    std::size_t n = 0;
    CUAWAIT_CUDA_CHECK("graph node count", cudaGraphGetNodes(get(), nullptr, &n));
    return n;
  }

  //! Adds a kernel launch `kernel<<<grid, block>>>(args...)`. The arguments are checked
  //! against the kernel's parameters at compile time and copied into the node.
  //! @throws cuda_error ("graph add kernel node")
  template <class... Params, class... Args>
  requires ::cuawait::cuda::detail::graph_kernel_args_match<
      ::cuawait::cuda::detail::graph_type_list<Params...>, Args...>
      graph_node add_kernel(const dependencies& after, void (*kernel)(Params...), dim3 grid,
                            dim3 block, Args&&... args) {
    ::cuawait::cuda::detail::graph_kernel_args<Params...> packed(static_cast<Args&&>(args)...);
    const cudaKernelNodeParams p = packed.node_params(kernel, grid, block);
    return add("graph add kernel node", [&](cudaGraphNode_t* n) {
      return cudaGraphAddKernelNode(n, get(), after.data(), after.size(), &p);
    });
  }

  //! Adds a 1-D copy of `bytes` bytes (direction inferred from the addresses).
  //! @throws cuda_error ("graph add copy node")
  graph_node add_copy(const dependencies& after, void* dst, const void* src, std::size_t bytes) {
    return add("graph add copy node", [&](cudaGraphNode_t* n) {
      return cudaGraphAddMemcpyNode1D(n, get(), after.data(), after.size(), dst, src, bytes,
                                      cudaMemcpyDefault);
    });
  }

  //! Adds a memset of `bytes` bytes of device memory at `dst` to `value`.
  //! @throws cuda_error ("graph add memset node")
  graph_node add_memset(const dependencies& after, void* dst, unsigned char value,
                        std::size_t bytes) {
    cudaMemsetParams p{};
    p.dst = dst;
    p.value = value;
    p.elementSize = 1;
    p.width = bytes;
    p.height = 1;
    p.pitch = 0;
    return add("graph add memset node", [&](cudaGraphNode_t* n) {
      return cudaGraphAddMemsetNode(n, get(), after.data(), after.size(), &p);
    });
  }

  //! Adds a host function node running `fn(user)` on a CUDA driver thread. Like
  //! `cudaLaunchHostFunc`, it must not call CUDA and blocks the graph while it runs.
  //! @throws cuda_error ("graph add host node")
  graph_node add_host(const dependencies& after, cudaHostFn_t fn, void* user) {
    const cudaHostNodeParams p{fn, user};
    return add("graph add host node", [&](cudaGraphNode_t* n) {
      return cudaGraphAddHostNode(n, get(), after.data(), after.size(), &p);
    });
  }

  //! Adds a host node running a copy of `f()`. The copy lives as long as the graph or any
  //! executable graph made from it (a CUDA user object), so `f` may own state. `f` must
  //! not throw (an exception terminates) and must not call CUDA.
  //! @throws cuda_error ("graph add host node")
  template <class F>
  requires std::is_invocable_v < std::decay_t<F>
  & > graph_node add_host(const dependencies& after, F&& f) {
    using fn_t = std::decay_t<F>;
    const cudaGraph_t g = get(); // before the user object exists, so that it cannot leak
    auto owned = std::make_unique<fn_t>(static_cast<F&&>(f));
    cudaUserObject_t obj = nullptr;
    CUAWAIT_CUDA_CHECK("graph add host node",
                       cudaUserObjectCreate(&obj, owned.get(), &destroy_fn<fn_t>, 1,
                                            cudaUserObjectNoDestructorSync));
    fn_t* raw = owned.release(); // now owned by the user object
    CUAWAIT_CUDA_CHECK("graph add host node",
                       cudaGraphRetainUserObject(g, obj, 1, cudaGraphUserObjectMove));
    return add_host(after, &call_fn<fn_t>, raw);
  }

  //! Adds a node recording `event` (the event is not owned; it must outlive launches).
  //! @throws cuda_error ("graph add event record node")
  graph_node add_event_record(const dependencies& after, cudaEvent_t event) {
    return add("graph add event record node", [&](cudaGraphNode_t* n) {
      return cudaGraphAddEventRecordNode(n, get(), after.data(), after.size(), event);
    });
  }

  //! Adds a node that waits for `event` (recorded elsewhere) before its dependents run.
  //! @throws cuda_error ("graph add event wait node")
  graph_node add_event_wait(const dependencies& after, cudaEvent_t event) {
    return add("graph add event wait node", [&](cudaGraphNode_t* n) {
      return cudaGraphAddEventWaitNode(n, get(), after.data(), after.size(), event);
    });
  }

  //! Adds `child` as one node; CUDA clones it, so `child` may be changed or destroyed after.
  //! @throws cuda_error ("graph add child graph node")
  graph_node add_child(const dependencies& after, const graph& child) {
    return add("graph add child graph node", [&](cudaGraphNode_t* n) {
      return cudaGraphAddChildGraphNode(n, get(), after.data(), after.size(), child.get());
    });
  }

  //! Instantiates the graph into an executable graph (costly: do it once, then launch or
  //! update the result many times; see graph_cache.hpp).
  //! @throws cuda_error ("graph instantiate")
  [[nodiscard]] graph_exec instantiate() const {
    cudaGraphExec_t e = nullptr;
    CUAWAIT_CUDA_CHECK("graph instantiate", cudaGraphInstantiate(&e, get(), 0));
    return graph_exec::from_native_handle(e);
  }

private:
  graph(cudaGraph_t g, int /*adopt*/) noexcept : owner(g) {}

  static cudaGraph_t create() {
    cudaGraph_t g = nullptr;
    CUAWAIT_CUDA_CHECK("graph create", cudaGraphCreate(&g, 0));
    return g;
  }

  template <class Add>
  graph_node add(const char* operation, Add&& add_node) {
    cudaGraphNode_t n = nullptr;
    check(operation, add_node(&n), "cudaGraphAdd*Node");
    return graph_node(n);
  }

  template <class Fn>
  static void CUDART_CB call_fn(void* p) noexcept {
    (*static_cast<Fn*>(p))();
  }
  template <class Fn>
  static void CUDART_CB destroy_fn(void* p) noexcept {
    delete static_cast<Fn*>(p);
  }
};

inline graph_update_result graph_exec::try_update(const graph& g) {
  cudaGraphExecUpdateResultInfo info{};
  const cudaError_t e = cudaGraphExecUpdate(get(), g.get(), &info);
  graph_update_result r{info.result, info.errorNode, info.errorFromNode};
  if (e == cudaErrorGraphExecUpdateFailure) {
    (void)cudaGetLastError(); // a refused update is an answer, not a sticky error
    if (r.ok()) {
      r.result = cudaGraphExecUpdateError;
    }
    return r;
  }
  check("graph update", e, "cudaGraphExecUpdate");
  return r;
}

inline void graph_exec::update(const graph& g) {
  const graph_update_result r = try_update(g);
  if (!r.ok()) {
    throw graph_update_error(cudaErrorGraphExecUpdateFailure, r);
  }
}

} // namespace cuawait::cuda
