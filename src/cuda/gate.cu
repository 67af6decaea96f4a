// SPDX-License-Identifier: Apache-2.0
// The gate's check kernel and the construction of a gated unit: [check] -> IF(condition) {
// body captured from the stream }. The condition is reset to 0 (skip) at every launch; the
// check sets it to 1 while the gate is open.
#include "cuawait/cuda/gate.hpp"

#include "cuawait/cuda/detail/deferred_release.hpp"

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <new>
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

void gate_begin(cudaStream_t s, gate_graphs& g, const std::source_location& where) {
  fail(cudaGraphCreate(&g.unit, 0), "cudaGraphCreate", where);
  const cudaError_t e = cudaStreamBeginCaptureToGraph(s, g.unit, nullptr, nullptr, 0,
                                                      cudaStreamCaptureModeThreadLocal);
  if (e != cudaSuccess) {
    (void)try_check(cudaGraphDestroy(std::exchange(g.unit, nullptr)));
    fail(e, "cudaStreamBeginCaptureToGraph", where);
  }
}

namespace {

void destroy_entry(const gate_graphs::entry& t) noexcept {
  if (t.exec != nullptr) {
    check_noexcept("gated work", cudaGraphExecDestroy(t.exec), "cudaGraphExecDestroy");
  }
  if (t.graph != nullptr) {
    check_noexcept("gated work", cudaGraphDestroy(t.graph), "cudaGraphDestroy");
  }
}

void destroy_retired(void* p) noexcept {
  auto* r = static_cast<gate_graphs::retired*>(p);
  destroy_entry(r->e);
  (void)try_check(cudaEventDestroy(r->done));
  delete r;
}

//! Puts `unit` (cloned) as the only node of the template's IF body.
cudaError_t set_child(gate_graphs::entry& t, cudaGraph_t unit) {
  if (t.child != nullptr) {
    const cudaError_t e = cudaGraphDestroyNode(t.child);
    if (e != cudaSuccess) {
      return e;
    }
    t.child = nullptr;
  }
  return cudaGraphAddChildGraphNode(&t.child, t.body, nullptr, 0, unit);
}

//! A new template around `unit`: [check] -> IF { child(unit) }, not yet instantiated.
cudaError_t make_template(gate_graphs::entry& t, gate_words* device_words, cudaGraph_t unit,
                          const char*& api) {
  api = "cudaGraphCreate";
  cudaError_t e = cudaGraphCreate(&t.graph, 0);
  if (e != cudaSuccess) {
    return e;
  }
  cudaGraphConditionalHandle h{};
  api = "cudaGraphConditionalHandleCreate";
  e = cudaGraphConditionalHandleCreate(&h, t.graph, 0, cudaGraphCondAssignDefault);
  cudaGraphNode_t check_node = nullptr;
  if (e == cudaSuccess) {
    void* args[] = {&h, &device_words};
    cudaKernelNodeParams kp{};
    kp.func = reinterpret_cast<void*>(&gate_check);
    kp.gridDim = dim3(1);
    kp.blockDim = dim3(1);
    kp.kernelParams = args;
    api = "cudaGraphAddKernelNode";
    e = cudaGraphAddKernelNode(&check_node, t.graph, nullptr, 0, &kp);
  }
  if (e == cudaSuccess) {
    cudaGraphNodeParams cp{};
    cp.type = cudaGraphNodeTypeConditional;
    cp.conditional.handle = h;
    cp.conditional.type = cudaGraphCondTypeIf;
    cp.conditional.size = 1;
    cudaGraphNode_t if_node = nullptr;
    api = "cudaGraphAddNode (conditional)";
    e = add_node(&if_node, t.graph, &check_node, 1, &cp);
    if (e == cudaSuccess) {
      t.body = cp.conditional.phGraph_out[0];
    }
  }
  if (e == cudaSuccess) {
    api = "cudaGraphAddChildGraphNode";
    e = set_child(t, unit);
  }
  return e;
}

//! An executable graph running `g.unit`: the most recently used template that takes the
//! update, moved to the front, else a new template.
cudaError_t exec_for_unit(cudaStream_t s, gate_graphs& g, cudaGraphExec_t& out,
                          const char*& api) {
  for (std::size_t i = 0; i < g.templates.size(); ++i) {
    gate_graphs::entry& t = g.templates[i];
    api = "cudaGraphAddChildGraphNode";
    cudaError_t e = set_child(t, g.unit);
    if (e != cudaSuccess) {
      return e; // what the unit holds is not allowed in a conditional body
    }
    cudaGraphExecUpdateResultInfo info{};
    e = cudaGraphExecUpdate(t.exec, t.graph, &info);
    if (e == cudaSuccess) {
      out = t.exec;
      std::rotate(g.templates.begin(), g.templates.begin() + static_cast<std::ptrdiff_t>(i),
                  g.templates.begin() + static_cast<std::ptrdiff_t>(i) + 1);
      ++g.updated;
      return cudaSuccess;
    }
    (void)cudaGetLastError(); // another shape: not an error of the unit
  }
  gate_graphs::entry t;
  cudaError_t e = make_template(t, g.device_words, g.unit, api);
  if (e == cudaSuccess) {
    api = "cudaGraphInstantiate";
    e = cudaGraphInstantiate(&t.exec, t.graph, 0);
  }
  if (e == cudaSuccess && g.templates.size() >= gate_graphs::max_templates) {
    // Drop the least recently used template once the stream has passed its launches.
    auto* r = new (std::nothrow) gate_graphs::retired{g.templates.back(), nullptr};
    api = "cudaEventCreateWithFlags";
    e = r == nullptr ? cudaErrorMemoryAllocation
                     : cudaEventCreateWithFlags(&r->done, cudaEventDisableTiming);
    if (e == cudaSuccess) {
      api = "cudaEventRecord";
      e = cudaEventRecord(r->done, s);
    }
    if (e == cudaSuccess) {
      try {
        g.dropped.push_back(*r);
        g.templates.pop_back();
      } catch (...) {
        e = cudaErrorMemoryAllocation;
      }
    }
    if (r != nullptr && r->done != nullptr && e != cudaSuccess) {
      (void)try_check(cudaEventDestroy(r->done));
    }
    delete r;
  }
  if (e == cudaSuccess) {
    try {
      g.templates.insert(g.templates.begin(), t);
    } catch (...) {
      e = cudaErrorMemoryAllocation;
    }
  }
  if (e != cudaSuccess) {
    destroy_entry(t); // never launched
    return e;
  }
  ++g.instantiated;
  out = t.exec;
  return cudaSuccess;
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
    auto* r = new (std::nothrow) retired(dropped[n]);
    if (r == nullptr) {
      break; // kept for the next reap or destroy_all
    }
    release_later(&destroy_retired, r);
  }
  dropped.erase(dropped.begin(), dropped.begin() + static_cast<std::ptrdiff_t>(n));
}

void gate_graphs::destroy_all() noexcept {
  for (const retired& r : dropped) {
    (void)try_check(cudaEventSynchronize(r.done));
    destroy_entry(r.e);
    (void)try_check(cudaEventDestroy(r.done));
  }
  for (const entry& t : templates) { // called behind the stream's work: nothing in flight
    destroy_entry(t);
  }
  if (unit != nullptr) {
    (void)try_check(cudaGraphDestroy(unit));
  }
  dropped.clear();
  templates.clear();
  unit = nullptr;
}

namespace {
void destroy_graphs(void* p) noexcept {
  auto* g = static_cast<gate_graphs*>(p);
  g->destroy_all();
  delete g;
}
} // namespace

void gate_end(cudaStream_t s, gate_graphs& g, const std::source_location& where) {
  cudaGraph_t captured = nullptr;
  cudaError_t e = cudaStreamEndCapture(s, &captured);
  const char* api = "cudaStreamEndCapture";
  g.reap(); // not while capturing: a query then would invalidate the capture
  std::size_t nodes = 0;
  if (e == cudaSuccess) {
    api = "cudaGraphGetNodes";
    e = cudaGraphGetNodes(g.unit, nullptr, &nodes);
  }
  if (e == cudaSuccess && nodes == 0) { // an empty unit: a child graph needs a node
    cudaGraphNode_t empty = nullptr;
    api = "cudaGraphAddEmptyNode";
    e = cudaGraphAddEmptyNode(&empty, g.unit, nullptr, 0);
  }
  cudaGraphExec_t exec = nullptr;
  if (e == cudaSuccess) {
    e = exec_for_unit(s, g, exec, api);
  }
  if (e == cudaSuccess) {
    api = "cudaGraphLaunch";
    e = cudaGraphLaunch(exec, s);
  }
  (void)try_check(cudaGraphDestroy(std::exchange(g.unit, nullptr)));
  if (e != cudaSuccess) {
    fail(e, api, where);
  }
}

void gate_abort(cudaStream_t s, gate_graphs& g) noexcept {
  cudaGraph_t captured = nullptr;
  (void)try_check(cudaStreamEndCapture(s, &captured));
  (void)try_check(cudaGraphDestroy(std::exchange(g.unit, nullptr)));
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
    m_graphs->device_words = m_device_words;
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
  if (m_graphs->templates.empty() && m_graphs->dropped.empty()) {
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
