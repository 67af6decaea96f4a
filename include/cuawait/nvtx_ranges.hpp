// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! `nvtx_ranges`: each wait becomes an NVTX range in the domain "cuawait", named by its
//! operation, from its suspension to its resumption (start/end ranges, since the two ends
//! are usually on different threads). Nsight Systems shows them beside the GPU work. With a
//! `runtime`, `CUAWAIT_NVTX=1` turns them on.
//!
//! NVTX is header-only (NVTX 3): cuawait is built with it when the CMake option
//! `CUAWAIT_NVTX` is on (the default when `nvtx3/nvToolsExt.h` is found). Without a tool
//! attached (no `NVTX_INJECTION64_PATH`), each call returns at once.

#include "cuawait/wait_observer.hpp"

namespace cuawait {

//! Emits an NVTX range per wait. The range id is kept in the wait's trace slot.
class nvtx_ranges final : public wait_observer {
public:
  //! True when cuawait was built with NVTX (otherwise `observe` does nothing).
  [[nodiscard]] static bool available() noexcept;

  //! Creates (or finds) the NVTX domain "cuawait".
  nvtx_ranges() noexcept;

  void observe(const wait_info& e) noexcept override;

private:
  void* m_domain = nullptr; // nvtxDomainHandle_t
};

} // namespace cuawait
