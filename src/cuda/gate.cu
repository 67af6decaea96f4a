// SPDX-License-Identifier: Apache-2.0
// The gate's check kernel and the construction of a gated unit: [check] -> IF(condition) {
// body captured from the stream }. The condition is reset to 0 (skip) at every launch; the
// check sets it to 1 while the gate is open.
#include "cuawait/cuda/gate.hpp"

#include "cuawait/cuda/detail/deferred_release.hpp"

#include <atomic>
#include <cstddef>
#include <string>

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

gate_unit gate_begin(cudaStream_t s, gate_words* device_words, const std::source_location& where) {
  gate_unit u;
  fail(cudaGraphCreate(&u.graph, 0), "cudaGraphCreate", where);
  try {
    cudaGraphConditionalHandle h{};
    fail(cudaGraphConditionalHandleCreate(&h, u.graph, 0, cudaGraphCondAssignDefault),
         "cudaGraphConditionalHandleCreate", where);
    void* args[] = {&h, &device_words};
    cudaKernelNodeParams kp{};
    kp.func = reinterpret_cast<void*>(&gate_check);
    kp.gridDim = dim3(1);
    kp.blockDim = dim3(1);
    kp.kernelParams = args;
    cudaGraphNode_t check_node = nullptr;
    fail(cudaGraphAddKernelNode(&check_node, u.graph, nullptr, 0, &kp), "cudaGraphAddKernelNode",
         where);
    cudaGraphNodeParams cp{};
    cp.type = cudaGraphNodeTypeConditional;
    cp.conditional.handle = h;
    cp.conditional.type = cudaGraphCondTypeIf;
    cp.conditional.size = 1;
    cudaGraphNode_t if_node = nullptr;
    fail(add_node(&if_node, u.graph, &check_node, 1, &cp), "cudaGraphAddNode (conditional)", where);
    fail(cudaStreamBeginCaptureToGraph(s, cp.conditional.phGraph_out[0], nullptr, nullptr, 0,
                                       cudaStreamCaptureModeThreadLocal),
         "cudaStreamBeginCaptureToGraph", where);
  } catch (...) {
    (void)try_check(cudaGraphDestroy(u.graph));
    throw;
  }
  return u;
}

namespace {
void destroy_exec(void* x) noexcept {
  check_noexcept("gated work", cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(x)),
                 "cudaGraphExecDestroy");
}
} // namespace

void gate_in_flight::reap() noexcept {
  std::size_t n = 0;
  for (; n < launched.size(); ++n) {
    const cudaError_t q = cudaEventQuery(launched[n].done);
    if (q == cudaErrorNotReady) {
      break; // one stream: the units after it have not finished either
    }
    if (q != cudaSuccess) {
      (void)cudaGetLastError(); // an error after which the GPU runs nothing more: done too
    }
    // Destroying an executable graph frees what CUDA allocated for it, which may wait for
    // the whole device (other streams' kernels included): done on the release thread.
    release_later(&destroy_exec, launched[n].exec);
    spare_events.push_back(launched[n].done);
  }
  launched.erase(launched.begin(), launched.begin() + static_cast<std::ptrdiff_t>(n));
}

void gate_in_flight::destroy_all() noexcept {
  for (const gate_launched& l : launched) {
    (void)try_check(cudaEventSynchronize(l.done));
    check_noexcept("gated work", cudaGraphExecDestroy(l.exec), "cudaGraphExecDestroy");
    (void)try_check(cudaEventDestroy(l.done));
  }
  for (cudaEvent_t e : spare_events) {
    (void)try_check(cudaEventDestroy(e));
  }
  launched.clear();
  spare_events.clear();
}

namespace {
void destroy_in_flight(void* p) noexcept {
  auto* f = static_cast<gate_in_flight*>(p);
  f->destroy_all();
  delete f;
}
} // namespace

void gate_end(gate_unit& u, cudaStream_t s, gate_in_flight& flight,
              const std::source_location& where) {
  cudaGraph_t captured = nullptr;
  cudaError_t e = cudaStreamEndCapture(s, &captured);
  flight.reap(); // not while capturing: a query then would invalidate the capture
  cudaGraphExec_t exec = nullptr;
  const char* api = "cudaStreamEndCapture";
  if (e == cudaSuccess) {
    api = "cudaGraphInstantiate";
    e = cudaGraphInstantiate(&exec, u.graph, 0);
  }
  cudaEvent_t done = nullptr;
  if (e == cudaSuccess) {
    if (flight.spare_events.empty()) {
      api = "cudaEventCreateWithFlags";
      e = cudaEventCreateWithFlags(&done, cudaEventDisableTiming);
    } else {
      done = flight.spare_events.back();
      flight.spare_events.pop_back();
    }
  }
  bool launched = false;
  if (e == cudaSuccess) {
    api = "cudaGraphLaunch";
    e = cudaGraphLaunch(exec, s);
    launched = e == cudaSuccess;
  }
  if (e == cudaSuccess) {
    api = "cudaEventRecord";
    e = cudaEventRecord(done, s);
  }
  if (e == cudaSuccess) {
    try {
      flight.launched.push_back({exec, done});
      exec = nullptr;
      done = nullptr;
    } catch (...) { // out of memory: fall back to destroying it at once (waits for it)
    }
  }
  if (done != nullptr) {
    (void)try_check(cudaEventDestroy(done));
  }
  if (exec != nullptr) {
    // Launched but not tracked (the event could not be recorded): CUDA waits for the launch.
    check_noexcept("gated work", cudaGraphExecDestroy(exec), "cudaGraphExecDestroy");
  }
  if (launched && e != cudaSuccess) {
    e = cudaSuccess; // the unit runs; only its tracking failed, and it was handled above
  }
  check_noexcept("gated work", cudaGraphDestroy(std::exchange(u.graph, nullptr)),
                 "cudaGraphDestroy");
  if (e != cudaSuccess) {
    fail(e, api, where);
  }
}

void gate_abort(gate_unit& u, cudaStream_t s) noexcept {
  cudaGraph_t captured = nullptr;
  (void)try_check(cudaStreamEndCapture(s, &captured));
  (void)try_check(cudaGraphDestroy(std::exchange(u.graph, nullptr)));
}

void gate_closer::operator()() const noexcept {
  std::atomic_ref<unsigned>(words->closed).store(1, std::memory_order_release);
}

} // namespace detail

gate::gate(stream_ref s, std::stop_token token)
    : m_stream(s.get()), m_pool(&pinned_pool::current()), // refuses a moved-from stream
      m_block(m_pool->allocate(sizeof(detail::gate_words))),
      m_words(static_cast<detail::gate_words*>(m_block.ptr)), m_device_words(nullptr),
      m_flight(nullptr) {
  *m_words = {0, 0, 0};
  void* d = nullptr;
  const cudaError_t e = cudaHostGetDevicePointer(&d, m_block.ptr, 0);
  if (e != cudaSuccess) {
    m_pool->deallocate(m_block);
    check("gate: map its words", e, "cudaHostGetDevicePointer");
  }
  m_device_words = static_cast<detail::gate_words*>(d);
  try {
    m_flight = new detail::gate_in_flight;
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
  m_flight->reap();
  if (m_flight->launched.empty()) {
    detail::destroy_in_flight(m_flight);
  } else {
    detail::release_after(m_stream.get(), &detail::destroy_in_flight, m_flight);
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
