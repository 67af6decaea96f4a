// SPDX-License-Identifier: Apache-2.0
// Cached regions (cuda/region.hpp): the CUDA side of the region cache and the recorder.

#include "cuawait/cuda/region.hpp"

#include "cuawait/cuda/device_context.hpp"
#include "cuawait/cuda/operation.hpp"

#include <exception>
#include <string>
#include <utility>
#include <vector>

namespace cuawait::cuda {

namespace detail {

namespace {

using ::cuawait::cuda::detail::region_op;
using ::cuawait::cuda::detail::region_op_kind;
using ::cuawait::cuda::detail::region_ops;

dim3 to_dim3(const ::cuawait::cuda::detail::region_dim& d) { return dim3(d[0], d[1], d[2]); }
::cuawait::cuda::detail::region_dim from_dim3(dim3 d) { return {d.x, d.y, d.z}; }

//! Scratch storage of the hot path, one per thread, reused from replay to replay: the
//! argument pointers of one node, and a recording's vectors (a recorder takes them when it
//! starts and gives them back when it dies, so recording allocates nothing once warm).
thread_local std::vector<void*> tl_args;
thread_local region_ops tl_spare_ops;

cudaKernelNodeParams kernel_params(const region_ops& ops, const region_op& op,
                                   std::vector<void*>& args) {
  args.clear();
  ops.arg_pointers(op, args);
  cudaKernelNodeParams p{};
  p.func = const_cast<void*>(op.func);
  p.gridDim = to_dim3(op.grid);
  p.blockDim = to_dim3(op.block);
  p.sharedMemBytes = static_cast<unsigned>(op.shared_bytes);
  p.kernelParams = args.empty() ? nullptr : args.data();
  p.extra = nullptr;
  return p;
}

cudaMemsetParams memset_params(const region_op& op) {
  cudaMemsetParams p{};
  p.dst = op.dst;
  p.value = static_cast<unsigned>(static_cast<unsigned char>(op.value));
  p.elementSize = 1;
  p.width = op.bytes;
  p.height = 1;
  p.pitch = 0;
  return p;
}

std::string operation_label(const char* what, std::size_t i, region_op_kind k) {
  return std::string("cached region: ") + what + " (operation " + std::to_string(i) + ", " +
         ::cuawait::cuda::detail::region_op_name(k) + ")";
}

} // namespace

region_backend::blueprint region_backend::build(const region_ops& ops) {
  blueprint b{graph{}, {}, ops};
  b.nodes.reserve(ops.size());
  std::vector<void*> args;
  for (std::size_t i = 0; i < ops.size(); ++i) {
    const region_op& op = ops[i];
    cudaGraphNode_t node = nullptr;
    const cudaGraphNode_t* dep = b.nodes.empty() ? nullptr : &b.nodes.back();
    const std::size_t deps = b.nodes.empty() ? 0 : 1;
    cudaError_t e = cudaSuccess;
    switch (op.kind) {
    case region_op_kind::kernel: {
      const cudaKernelNodeParams p = kernel_params(ops, op, args);
      e = cudaGraphAddKernelNode(&node, b.g.get(), dep, deps, &p);
      break;
    }
    case region_op_kind::copy:
      e = cudaGraphAddMemcpyNode1D(&node, b.g.get(), dep, deps, op.dst, op.src, op.bytes,
                                   cudaMemcpyDefault);
      break;
    case region_op_kind::memset: {
      const cudaMemsetParams p = memset_params(op);
      e = cudaGraphAddMemsetNode(&node, b.g.get(), dep, deps, &p);
      break;
    }
    }
    check(operation_label("graph add node", i, op.kind).c_str(), e, "cudaGraphAdd*Node");
    b.nodes.push_back(node);
  }
  return b;
}

region_backend::exec region_backend::instantiate(const blueprint& b) {
  cudaGraphExec_t e = nullptr;
  check("cached region: graph instantiate", cudaGraphInstantiate(&e, b.g.get(), 0),
        "cudaGraphInstantiate");
  return graph_exec::from_native_handle(e);
}

std::string region_backend::set(exec& e, const blueprint& b, std::size_t i, const region_ops& ops) {
  const region_op& op = ops[i];
  cudaError_t r = cudaSuccess;
  const char* api = "";
  switch (op.kind) {
  case region_op_kind::kernel: {
    const cudaKernelNodeParams p = kernel_params(ops, op, tl_args);
    r = cudaGraphExecKernelNodeSetParams(e.get(), b.nodes[i], &p);
    api = "cudaGraphExecKernelNodeSetParams";
    break;
  }
  case region_op_kind::copy:
    r = cudaGraphExecMemcpyNodeSetParams1D(e.get(), b.nodes[i], op.dst, op.src, op.bytes,
                                           cudaMemcpyDefault);
    api = "cudaGraphExecMemcpyNodeSetParams1D";
    break;
  case region_op_kind::memset: {
    const cudaMemsetParams p = memset_params(op);
    r = cudaGraphExecMemsetNodeSetParams(e.get(), b.nodes[i], &p);
    api = "cudaGraphExecMemsetNodeSetParams";
    break;
  }
  }
  if (r == cudaSuccess) {
    return {};
  }
  (void)cudaGetLastError(); // a refused update is an answer, not a sticky error
  return std::string("CUDA refused to update operation ") + std::to_string(i) + " (" +
         ::cuawait::cuda::detail::region_op_name(op.kind) + ") in place: " + api + ": " +
         cudaGetErrorName(r);
}

std::string region_backend::update(exec& e, const blueprint& captured) {
  const graph_update_result r = e.try_update(captured.g);
  return r.ok() ? std::string() : std::string(r.reason());
}

region_recorder::region_recorder(stream_ref s, std::string key, std::source_location where)
    : m_stream(s), m_key(std::move(key)), m_where(where), m_ops(std::move(tl_spare_ops)) {
  m_ops.clear();
}

region_recorder::~region_recorder() {
  abandon();
  tl_spare_ops = std::move(m_ops);
}

void region_recorder::begin(region_cache& cache, bool must_capture) {
  m_core = &cache.core();
  if (must_capture || m_core->captured(m_key)) {
    m_capture.emplace(m_stream, m_where);
  }
}

void region_recorder::kernel(const void* func, dim3 grid, dim3 block, std::size_t shared_bytes,
                             void** args, const std::uint32_t* sizes, std::uint32_t count,
                             std::source_location where) {
  if (m_capture) {
    check("kernel launch", cudaLaunchKernel(func, grid, block, args, shared_bytes, m_stream.get()),
          "cudaLaunchKernel", where);
    return;
  }
  m_ops.add_kernel(func, from_dim3(grid), from_dim3(block), shared_bytes, args, sizes, count);
}

void region_recorder::copy(void* dst, const void* src, std::size_t bytes,
                           std::source_location where) {
  if (m_capture) {
    check("copy", cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, m_stream.get()),
          "cudaMemcpyAsync", where);
    return;
  }
  m_ops.add_copy(dst, src, bytes);
}

void region_recorder::memset(void* dst, int value, std::size_t bytes, std::source_location where) {
  if (m_capture) {
    check("memset", cudaMemsetAsync(dst, value, bytes, m_stream.get()), "cudaMemsetAsync", where);
    return;
  }
  m_ops.add_memset(dst, value, bytes);
}

void region_recorder::emit(const region_ops& ops, std::size_t i) {
  const region_op& op = ops[i];
  switch (op.kind) {
  case region_op_kind::kernel: {
    std::vector<void*> args;
    ops.arg_pointers(op, args);
    check("kernel launch",
          cudaLaunchKernel(op.func, to_dim3(op.grid), to_dim3(op.block),
                           args.empty() ? nullptr : args.data(), op.shared_bytes, m_stream.get()),
          "cudaLaunchKernel", m_where);
    break;
  }
  case region_op_kind::copy:
    check("copy", cudaMemcpyAsync(op.dst, op.src, op.bytes, cudaMemcpyDefault, m_stream.get()),
          "cudaMemcpyAsync", m_where);
    break;
  case region_op_kind::memset:
    check("memset", cudaMemsetAsync(op.dst, op.value, op.bytes, m_stream.get()), "cudaMemsetAsync",
          m_where);
    break;
  }
}

stream_ref region_recorder::to_capture() {
  if (!m_capture) {
    m_capture.emplace(m_stream, m_where);
    for (std::size_t i = 0; i < m_ops.size(); ++i) {
      emit(m_ops, i);
    }
    m_ops.clear();
  }
  return m_stream;
}

graph_cache_outcome region_recorder::launch(bool tracked) {
  const auto launch_on_stream = [this](graph_exec& e) {
    check("cached region launch", cudaGraphLaunch(e.get(), m_stream.get()), "cudaGraphLaunch",
          m_where);
  };
  region_core::result r;
  if (m_capture) {
    graph g = m_capture->end();
    m_capture.reset();
    r = m_core->replay_captured(m_key, region_backend::blueprint{std::move(g), {}, {}},
                                m_stream.get(), tracked, launch_on_stream);
  } else {
    r = m_core->replay(m_key, m_ops, m_stream.get(), tracked, launch_on_stream);
  }
  m_lease = std::move(r.held);
  if (!tracked) {
    m_lease.reset();
  }
  return r.outcome;
}

void region_recorder::abandon() noexcept {
  if (m_capture) {
    m_capture->abandon();
    m_capture.reset();
  }
}

void region_recorder::release() noexcept { m_lease.reset(); }

task<graph_cache_outcome> run_cached_region(std::unique_ptr<region_recorder> rec,
                                            std::shared_ptr<void> keep, task<void> body,
                                            bool must_capture) {
  rec->begin(current_context().regions(), must_capture);
  std::exception_ptr failed;
  try {
    co_await std::move(body);
  } catch (...) {
    failed = std::current_exception();
  }
  { // the body's frame dies before the callable it may refer to
    const task<void> finished = std::move(body);
  }
  keep.reset();
  if (failed) {
    rec->abandon(); // nothing is launched; the stream is usable again
    std::rethrow_exception(failed);
  }
  const graph_cache_outcome outcome = rec->launch(true);
  co_await operation{rec->stream().get(), "cached region", rec->where()};
  rec->release();
  co_return outcome;
}

task<void> run_region_function(std::function<void()> f) {
  f();
  co_return;
}

} // namespace detail

region_cache::region_cache(region_cache_options options)
    : m_core(detail::region_backend{}, options) {}

region_cache::~region_cache() = default;

} // namespace cuawait::cuda
