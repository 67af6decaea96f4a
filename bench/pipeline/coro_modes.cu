// SPDX-License-Identifier: Apache-2.0
// The cuawait modes of the pipeline benchmark, written as a user writes them with the
// public API (include/cuawait/cuda.hpp, include/cuawait/runtime.hpp).

#include "modes.hpp"

namespace cuawait::bench {

void register_cuawait_modes(std::vector<mode_entry>& /*modes*/) {
  // Filled in once the CUDA layer's public API exists (see docs/BENCHMARK.md).
}

} // namespace cuawait::bench
