// SPDX-License-Identifier: Apache-2.0
// The gate's check kernel and the construction of a gated unit: [check] -> IF(condition) {
// body captured from the stream }. The condition is reset to 0 (skip) at every launch; the
// check sets it to 1 while the gate is open.
#include "cuawait/cuda/gate.hpp"

#include "cuawait/cuda/detail/deferred_release.hpp"

#include <atomic>
#include <cstddef>
#include <string>
#include <vector>

namespace cuawait::cuda {
namespace detail {

namespace {

__global__ void gate_check(cudaGraphConditionalHandle h, gate_words* w) {
  volatile gate_words* v = w;
  const bool open = v->closed == 0;
  cudaGraphSetConditional(h, open ? 1U : 0U);
  // One thread, and the units of one gate run in stream order: plain increments suffice.
  if (open) {
    v->ran = v->ran + 1;
  } else {
    v->skipped = v->skipped + 1;
  }
}

void fail(cudaError_t e, const char* api, const std::source_location& where) {
  check("gated work", e, api, where);
}

cudaError_t add_node(cudaGraphNode_t* out, cudaGraph_t g, const cudaGraphNode_t* deps,
                     std::size_t n, cudaGraphNodeParams* p) {
#if CUDART_VERSION >= 13000
  return cudaGraphAddNode(out, g, deps, nullptr, n, p);
#else
  return cudaGraphAddNode_v2(out, g, deps, nullptr, n, p);
#endif
}

} // namespace

void gate_begin(cudaStream_t s, gate_graphs& g, gate_words* device_words,
                const std::source_location& where) {
  if (g.graph == nullptr) {
    cudaGraph_t graph = nullptr;
    fail(cudaGraphCreate(&graph, 0), "cudaGraphCreate", where);
    try {
      cudaGraphConditionalHandle h{};
      fail(cudaGraphConditionalHandleCreate(&h, graph, 0, cudaGraphCondAssignDefault),
           "cudaGraphConditionalHandleCreate", where);
      void* args[] = {&h, &device_words};
      cudaKernelNodeParams kp{};
      kp.func = reinterpret_cast<void*>(&gate_check);
      kp.gridDim = dim3(1);
      kp.blockDim = dim3(1);
      kp.kernelParams = args;
      cudaGraphNode_t check_node = nullptr;
      fail(cudaGraphAddKernelNode(&check_node, graph, nullptr, 0, &kp), "cudaGraphAddKernelNode",
           where);
      cudaGraphNodeParams cp{};
      cp.type = cudaGraphNodeTypeConditional;
      cp.conditional.handle = h;
      cp.conditional.type = cudaGraphCondTypeIf;
      cp.conditional.size = 1;
      cudaGraphNode_t if_node = nullptr;
      fail(add_node(&if_node, graph, &check_node, 1, &cp), "cudaGraphAddNode (conditional)",
           where);
      g.body = cp.conditional.phGraph_out[0];
    } catch (...) {
      (void)try_check(cudaGraphDestroy(graph));
      throw;
    }
    g.graph = graph;
  } else {
    // Empty the body of the previous unit (its executable graphs keep their own copy).
    std::size_t n = 0;
    fail(cudaGraphGetNodes(g.body, nullptr, &n), "cudaGraphGetNodes", where);
    if (n > 0) {
      std::vector<cudaGraphNode_t> nodes(n);
      fail(cudaGraphGetNodes(g.body, nodes.data(), &n), "cudaGraphGetNodes", where);
      for (std::size_t i = 0; i < n; ++i) {
        fail(cudaGraphDestroyNode(nodes[i]), "cudaGraphDestroyNode", where);
      }
    }
  }
  fail(cudaStreamBeginCaptureToGraph(s, g.body, nullptr, nullptr, 0,
                                     cudaStreamCaptureModeThreadLocal),
       "cudaStreamBeginCaptureToGraph", where);
}

namespace {
void destroy_exec(void* x) noexcept {
  check_noexcept("gated work", cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(x)),
                 "cudaGraphExecDestroy");
}
void destroy_event(void* e) noexcept {
  (void)try_check(cudaEventDestroy(static_cast<cudaEvent_t>(e)));
}
} // namespace

void gate_graphs::reap() noexcept {
  std::size_t n = 0;
  for (; n < dropped.size(); ++n) {
    const cudaError_t q = cudaEventQuery(dropped[n].done);
    if (q == cudaErrorNotReady) {
      break; // one stream: the ones dropped after it have not finished either
    }
    if (q != cudaSuccess) {
      (void)cudaGetLastError(); // an error after which the GPU runs nothing more: done too
    }
    // Destroying an executable graph frees what CUDA allocated for it, which may wait for
    // the whole device (other streams' kernels included): done on the release thread.
    release_later(&destroy_exec, dropped[n].exec);
    release_later(&destroy_event, dropped[n].done);
  }
  dropped.erase(dropped.begin(), dropped.begin() + static_cast<std::ptrdiff_t>(n));
}

void gate_graphs::destroy_all() noexcept {
  for (const retired& r : dropped) {
    (void)try_check(cudaEventSynchronize(r.done));
    check_noexcept("gated work", cudaGraphExecDestroy(r.exec), "cudaGraphExecDestroy");
    (void)try_check(cudaEventDestroy(r.done));
  }
  for (cudaGraphExec_t x : execs) { // called behind the stream's work: nothing in flight
    check_noexcept("gated work", cudaGraphExecDestroy(x), "cudaGraphExecDestroy");
  }
  if (graph != nullptr) {
    check_noexcept("gated work", cudaGraphDestroy(graph), "cudaGraphDestroy");
  }
  dropped.clear();
  execs.clear();
  graph = nullptr;
  body = nullptr;
}

namespace {
void destroy_graphs(void* p) noexcept {
  auto* g = static_cast<gate_graphs*>(p);
  g->destroy_all();
  delete g;
}

//! An executable graph of the template with the unit just captured: the most recently used
//! one that takes the update, moved to the front, else a new one (nullptr and an error).
cudaError_t exec_for_unit(cudaStream_t s, gate_graphs& g, cudaGraphExec_t& out,
                          const char*& api) {
  for (std::size_t i = 0; i < g.execs.size(); ++i) {
    cudaGraphExecUpdateResultInfo info{};
    const cudaError_t e = cudaGraphExecUpdate(g.execs[i], g.graph, &info);
    if (e == cudaSuccess) {
      out = g.execs[i];
      g.execs.erase(g.execs.begin() + static_cast<std::ptrdiff_t>(i));
      g.execs.insert(g.execs.begin(), out);
      ++g.updated;
      return cudaSuccess;
    }
    (void)cudaGetLastError(); // a refused update is not an error of the unit
  }
  api = "cudaGraphInstantiate";
  cudaGraphExec_t x = nullptr;
  cudaError_t e = cudaGraphInstantiate(&x, g.graph, 0);
  if (e != cudaSuccess) {
    return e;
  }
  if (g.execs.size() >= gate_graphs::max_execs) {
    // Drop the least recently used one, once the stream has passed its launches.
    cudaEvent_t done = nullptr;
    api = "cudaEventCreateWithFlags";
    e = cudaEventCreateWithFlags(&done, cudaEventDisableTiming);
    if (e == cudaSuccess) {
      api = "cudaEventRecord";
      e = cudaEventRecord(done, s);
    }
    if (e == cudaSuccess) {
      try {
        g.dropped.push_back({g.execs.back(), done});
        g.execs.pop_back();
        done = nullptr;
      } catch (...) {
        e = cudaErrorMemoryAllocation;
      }
    }
    if (done != nullptr) {
      (void)try_check(cudaEventDestroy(done));
    }
    if (e != cudaSuccess) {
      release_after(s, &destroy_exec, x); // never launched: nothing to wait for but safe
      return e;
    }
  }
  try {
    g.execs.insert(g.execs.begin(), x);
  } catch (...) {
    release_after(s, &destroy_exec, x);
    return cudaErrorMemoryAllocation;
  }
  ++g.instantiated;
  out = x;
  return cudaSuccess;
}
} // namespace

void gate_end(cudaStream_t s, gate_graphs& g, const std::source_location& where) {
  cudaGraph_t captured = nullptr;
  cudaError_t e = cudaStreamEndCapture(s, &captured);
  const char* api = "cudaStreamEndCapture";
  g.reap(); // not while capturing: a query then would invalidate the capture
  cudaGraphExec_t exec = nullptr;
  if (e == cudaSuccess) {
    e = exec_for_unit(s, g, exec, api);
  }
  if (e == cudaSuccess) {
    api = "cudaGraphLaunch";
    e = cudaGraphLaunch(exec, s);
  }
  if (e != cudaSuccess) {
    fail(e, api, where);
  }
}

void gate_abort(cudaStream_t s) noexcept {
  cudaGraph_t captured = nullptr;
  (void)try_check(cudaStreamEndCapture(s, &captured));
}

void gate_closer::operator()() const noexcept {
  std::atomic_ref<unsigned>(words->closed).store(1, std::memory_order_release);
}

} // namespace detail

gate::gate(stream_ref s, std::stop_token token)
    : m_stream(s.get()), m_pool(&pinned_pool::current()), // refuses a moved-from stream
      m_block(m_pool->allocate(sizeof(detail::gate_words))),
      m_words(static_cast<detail::gate_words*>(m_block.ptr)), m_device_words(nullptr),
      m_graphs(nullptr) {
  *m_words = {0, 0, 0};
  void* d = nullptr;
  const cudaError_t e = cudaHostGetDevicePointer(&d, m_block.ptr, 0);
  if (e != cudaSuccess) {
    m_pool->deallocate(m_block);
    check("gate: map its words", e, "cudaHostGetDevicePointer");
  }
  m_device_words = static_cast<detail::gate_words*>(d);
  try {
    m_graphs = new detail::gate_graphs;
  } catch (...) {
    m_pool->deallocate(m_block);
    throw;
  }
  if (token.stop_possible()) {
    (void)m_on_stop.emplace(std::move(token), detail::gate_closer{m_words});
  }
}

gate::~gate() {
  m_on_stop.reset(); // returns once a callback running on another thread has finished
  m_graphs->reap();
  if (m_graphs->graph == nullptr) {
    detail::destroy_graphs(m_graphs);
  } else {
    // Its executable graphs may still be queued: destroyed behind the stream's work.
    detail::release_after(m_stream.get(), &detail::destroy_graphs, m_graphs);
  }
  m_pool->deallocate(m_block, m_stream);
}

bool gate::closed() const noexcept {
  return std::atomic_ref<unsigned>(m_words->closed).load(std::memory_order_acquire) != 0;
}

std::uint32_t gate::ran() const noexcept {
  return std::atomic_ref<unsigned>(m_words->ran).load(std::memory_order_acquire);
}

std::uint32_t gate::skipped() const noexcept {
  return std::atomic_ref<unsigned>(m_words->skipped).load(std::memory_order_acquire);
}

} // namespace cuawait::cuda
