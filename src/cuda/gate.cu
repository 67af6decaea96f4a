// SPDX-License-Identifier: Apache-2.0
// The gate's check kernel and the construction of a gated unit: [check] -> IF(condition) {
// body captured from the stream }. The condition is reset to 0 (skip) at every launch; the
// check sets it to 1 while the gate is open.
#include "cuawait/cuda/gate.hpp"

#include "cuawait/cuda/detail/deferred_release.hpp"
#include "cuawait/cuda/device_context.hpp"

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

void destroy_template(const gate_template& t) noexcept {
  if (t.exec != nullptr) {
    check_noexcept("gated work", cudaGraphExecDestroy(t.exec), "cudaGraphExecDestroy");
  }
  if (t.graph != nullptr) {
    check_noexcept("gated work", cudaGraphDestroy(t.graph), "cudaGraphDestroy");
  }
}

void destroy_template_later(void* p) noexcept {
  auto* t = static_cast<gate_template*>(p);
  destroy_template(*t);
  delete t;
}

//! Puts `unit` (cloned) as the only node of the template's IF body.
cudaError_t set_child(gate_template& t, cudaGraph_t unit) {
  if (t.child != nullptr) {
    const cudaError_t e = cudaGraphDestroyNode(t.child);
    if (e != cudaSuccess) {
      return e;
    }
    t.child = nullptr;
  }
  return cudaGraphAddChildGraphNode(&t.child, t.body, nullptr, 0, unit);
}

cudaKernelNodeParams check_params(void** args) {
  cudaKernelNodeParams kp{};
  kp.func = reinterpret_cast<void*>(&gate_check);
  kp.gridDim = dim3(1);
  kp.blockDim = dim3(1);
  kp.kernelParams = args;
  return kp;
}

//! A new template around `unit`: [check] -> IF { child(unit) }, not yet instantiated.
cudaError_t make_template(gate_template& t, gate_words* device_words, cudaGraph_t unit,
                          const char*& api) {
  api = "cudaGraphCreate";
  cudaError_t e = cudaGraphCreate(&t.graph, 0);
  if (e != cudaSuccess) {
    return e;
  }
  api = "cudaGraphConditionalHandleCreate";
  e = cudaGraphConditionalHandleCreate(&t.handle, t.graph, 0, cudaGraphCondAssignDefault);
  if (e == cudaSuccess) {
    void* args[] = {&t.handle, &device_words};
    const cudaKernelNodeParams kp = check_params(args);
    api = "cudaGraphAddKernelNode";
    e = cudaGraphAddKernelNode(&t.check, t.graph, nullptr, 0, &kp);
  }
  if (e == cudaSuccess) {
    cudaGraphNodeParams cp{};
    cp.type = cudaGraphNodeTypeConditional;
    cp.conditional.handle = t.handle;
    cp.conditional.type = cudaGraphCondTypeIf;
    cp.conditional.size = 1;
    cudaGraphNode_t if_node = nullptr;
    api = "cudaGraphAddNode (conditional)";
    e = add_node(&if_node, t.graph, &t.check, 1, &cp);
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

//! Puts the unit into `t` and updates its executable graph: cudaSuccess, a refusal
//! (another shape: `refused`), or an error of the unit.
cudaError_t try_update(gate_template& t, cudaGraph_t unit, bool& refused, const char*& api) {
  refused = false;
  api = "cudaGraphAddChildGraphNode";
  const cudaError_t e = set_child(t, unit);
  if (e != cudaSuccess) {
    return e; // what the unit holds is not allowed in a conditional body
  }
  cudaGraphExecUpdateResultInfo info{};
  if (cudaGraphExecUpdate(t.exec, t.graph, &info) != cudaSuccess) {
    (void)cudaGetLastError(); // another shape: not an error of the unit
    refused = true;
  }
  return cudaSuccess;
}

//! Makes `t` the gate's most recently used template; drops the least recently used one
//! beyond `max_templates`, to the pool once the stream has passed its launches.
cudaError_t adopt(cudaStream_t s, gate_graphs& g, const gate_template& t, const char*& api) {
  if (g.templates.size() >= gate_graphs::max_templates) {
    cudaEvent_t done = nullptr;
    api = "cudaEventCreateWithFlags";
    cudaError_t e = cudaEventCreateWithFlags(&done, cudaEventDisableTiming);
    if (e == cudaSuccess) {
      api = "cudaEventRecord";
      e = cudaEventRecord(done, s);
    }
    if (e == cudaSuccess) {
      try {
        g.dropped.push_back({g.templates.back(), done});
        g.templates.pop_back();
        done = nullptr;
      } catch (...) {
        e = cudaErrorMemoryAllocation;
      }
    }
    if (done != nullptr) {
      (void)try_check(cudaEventDestroy(done));
    }
    if (e != cudaSuccess) {
      return e;
    }
  }
  try {
    g.templates.insert(g.templates.begin(), t);
  } catch (...) {
    api = "std::vector::insert";
    return cudaErrorMemoryAllocation;
  }
  return cudaSuccess;
}

//! An executable graph running `g.unit`: the gate's most recently used template that takes
//! the update, else an idle one of the context's pool that does, else a new one.
cudaError_t exec_for_unit(cudaStream_t s, gate_graphs& g, cudaGraphExec_t& out, const char*& api) {
  bool refused = false;
  for (std::size_t i = 0; i < g.templates.size(); ++i) {
    const cudaError_t e = try_update(g.templates[i], g.unit, refused, api);
    if (e != cudaSuccess) {
      return e;
    }
    if (!refused) {
      std::rotate(g.templates.begin(), g.templates.begin() + static_cast<std::ptrdiff_t>(i),
                  g.templates.begin() + static_cast<std::ptrdiff_t>(i) + 1);
      out = g.templates.front().exec;
      ++g.updated;
      return cudaSuccess;
    }
  }
  // From the pool: a template of another gate (its check node gets this gate's words).
  constexpr int pool_tries = 4;
  gate_template tried[pool_tries];
  int n_tried = 0;
  cudaError_t e = cudaSuccess;
  bool found = false;
  gate_template t;
  while (!found && e == cudaSuccess && n_tried < pool_tries && g.pool != nullptr &&
         g.pool->take(t)) {
    void* args[] = {&t.handle, &g.device_words};
    const cudaKernelNodeParams kp = check_params(args);
    api = "cudaGraphKernelNodeSetParams";
    e = cudaGraphKernelNodeSetParams(t.check, &kp);
    if (e == cudaSuccess) {
      e = try_update(t, g.unit, refused, api);
    }
    if (e == cudaSuccess && !refused) {
      found = true;
    } else {
      tried[n_tried++] = t;
    }
  }
  for (int i = 0; i < n_tried; ++i) {
    g.pool->give(tried[i]); // idle: back for another gate
  }
  if (e != cudaSuccess) {
    return e;
  }
  if (found) {
    e = adopt(s, g, t, api);
    if (e != cudaSuccess) {
      g.pool->give(t);
      return e;
    }
    ++g.updated;
    out = t.exec;
    return cudaSuccess;
  }
  t = gate_template{};
  e = make_template(t, g.device_words, g.unit, api);
  if (e == cudaSuccess) {
    api = "cudaGraphInstantiate";
    e = cudaGraphInstantiate(&t.exec, t.graph, 0);
  }
  if (e == cudaSuccess) {
    e = adopt(s, g, t, api);
  }
  if (e != cudaSuccess) {
    destroy_template(t); // never launched
    return e;
  }
  ++g.instantiated;
  out = t.exec;
  return cudaSuccess;
}

} // namespace

gate_template_pool::~gate_template_pool() {
  for (const gate_template& t : m_free) {
    destroy_template(t);
  }
}

bool gate_template_pool::take(gate_template& out) noexcept {
  const std::lock_guard lock(m_mutex);
  if (m_free.empty()) {
    return false;
  }
  out = m_free.back();
  m_free.pop_back();
  return true;
}

void gate_template_pool::give(const gate_template& t) noexcept {
  {
    const std::lock_guard lock(m_mutex);
    if (m_free.size() < capacity) {
      try {
        m_free.push_back(t);
        return;
      } catch (...) {
      }
    }
  }
  // Beyond the pool: destroyed on the release thread (it may wait for the device).
  auto* p = new (std::nothrow) gate_template(t);
  if (p != nullptr) {
    release_later(&destroy_template_later, p);
  } else {
    destroy_template(t);
  }
}

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
    (void)try_check(cudaEventDestroy(dropped[n].done));
    pool->give(dropped[n].t);
  }
  dropped.erase(dropped.begin(), dropped.begin() + static_cast<std::ptrdiff_t>(n));
}

void gate_graphs::return_all() noexcept {
  for (const retired& r : dropped) {
    (void)try_check(cudaEventSynchronize(r.done)); // passed already: behind the stream
    (void)try_check(cudaEventDestroy(r.done));
    pool->give(r.t);
  }
  for (const gate_template& t : templates) {
    pool->give(t);
  }
  if (unit != nullptr) {
    (void)try_check(cudaGraphDestroy(unit));
  }
  dropped.clear();
  templates.clear();
  unit = nullptr;
}

namespace {
void return_graphs(void* p) noexcept {
  auto* g = static_cast<gate_graphs*>(p);
  g->return_all();
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
    m_graphs->pool = &current_context().gate_templates();
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
    detail::return_graphs(m_graphs);
  } else {
    // Its executable graphs may still be queued: destroyed behind the stream's work.
    detail::release_after(m_stream.get(), &detail::return_graphs, m_graphs);
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
