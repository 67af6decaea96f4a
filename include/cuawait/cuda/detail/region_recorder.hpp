// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! The machinery behind `cuda::cached_region` (cuda/region.hpp): the CUDA side of the region
//! cache (building a graph from a recording, setting nodes, whole-graph updates) and the
//! recorder a region's body enqueues through. Bodies defined in src/cuda/region.cpp.

#include "cuawait/cuda/capture.hpp"
#include "cuawait/cuda/detail/region_cache_core.hpp"
#include "cuawait/cuda/detail/region_ops.hpp"
#include "cuawait/cuda/graph.hpp"
#include "cuawait/cuda/graph_exec.hpp"
#include "cuawait/cuda/stream.hpp"

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <source_location>
#include <string>
#include <vector>

namespace cuawait::cuda {
class region_cache;
}

namespace cuawait::cuda::detail {

//! What `region_cache_core` needs from CUDA.
struct region_backend {
  //! A graph and, for a recorded region, its nodes in operation order and the recording
  //! it was built from. A captured region's blueprint has no nodes and no recording.
  struct blueprint {
    graph g;
    std::vector<cudaGraphNode_t> nodes;
    ::cuawait::cuda::detail::region_ops ops;
  };
  using exec = graph_exec;

  //! A chain of nodes, one per operation. @throws cuda_error naming the operation
  blueprint build(const ::cuawait::cuda::detail::region_ops& ops);
  //! @throws cuda_error ("cached region: graph instantiate")
  exec instantiate(const blueprint& b);
  //! Sets node `i` of `e` to ops[i]'s parameters; "" or why CUDA refused.
  std::string set(exec& e, const blueprint& b, std::size_t i,
                  const ::cuawait::cuda::detail::region_ops& ops);
  //! `cudaGraphExecUpdate` from a captured graph; "" or why CUDA refused.
  std::string update(exec& e, const blueprint& captured);
};

using region_core = ::cuawait::cuda::detail::region_cache_core<region_backend>;

//! One replay of a region: what its body enqueued (recorded, or captured once it made a
//! call that cannot be recorded), then the launch, and the hold on the executable until the
//! caller lets it go. Not movable (`region_stream`s point to it).
class region_recorder {
public:
  region_recorder(stream_ref s, std::string key, std::source_location where);
  region_recorder(const region_recorder&) = delete;
  region_recorder& operator=(const region_recorder&) = delete;
  ~region_recorder();

  //! Starts the region on `cache`: recorded, unless `must_capture` or the key is known to
  //! need capture (then the stream capture begins now).
  //! @throws cuda_error ("graph capture begin")
  void begin(region_cache& cache, bool must_capture);

  //! Records (or, capturing, enqueues) one operation. @throws cuda_error naming it
  void kernel(const void* func, dim3 grid, dim3 block, std::size_t shared_bytes, void** args,
              const std::uint32_t* sizes, std::uint32_t count, std::source_location where);
  void copy(void* dst, const void* src, std::size_t bytes, std::source_location where);
  void memset(void* dst, int value, std::size_t bytes, std::source_location where);

  //! Switches to stream capture (re-enqueuing what was recorded so far, in order) and
  //! returns the capturing stream, for calls the recorder cannot see.
  //! @throws cuda_error
  stream_ref to_capture();

  //! Ends the body: brings the cached executable up to date and launches it on the stream.
  //! With `tracked`, the executable stays held until `release()` (or destruction).
  //! @throws cuda_error naming what failed; the cache and the stream stay usable
  graph_cache_outcome launch(bool tracked);
  //! Discards an open capture (the body failed). Never throws.
  void abandon() noexcept;
  //! Lets the executable go (the launched work finished). Never throws.
  void release() noexcept;

  [[nodiscard]] stream_ref stream() const noexcept { return m_stream; }
  [[nodiscard]] const std::source_location& where() const noexcept { return m_where; }
  [[nodiscard]] bool capturing() const noexcept { return m_capture.has_value(); }

private:
  void emit(const ::cuawait::cuda::detail::region_ops& ops, std::size_t i);

  region_core* m_core = nullptr;
  stream_ref m_stream;
  std::string m_key;
  std::source_location m_where;
  ::cuawait::cuda::detail::region_ops m_ops;
  std::optional<capture_region> m_capture;
  region_core::lease m_lease;
};

} // namespace cuawait::cuda::detail
