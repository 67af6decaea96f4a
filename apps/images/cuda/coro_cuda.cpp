// SPDX-License-Identifier: Apache-2.0
// The coroutine mode on the GPU (placeholder until the cuawait CUDA layer is complete).

#include "batch.hpp"

#include <stdexcept>

namespace cuawait::images {

void run_coro_cuda(batch& /*b*/, std::size_t /*memory_budget*/) {
  throw std::runtime_error("--mode=coro with --backend=cuda is not implemented yet");
}

} // namespace cuawait::images
