// SPDX-License-Identifier: Apache-2.0
#include "cuawait/nvtx_ranges.hpp"

#if defined(CUAWAIT_HAS_NVTX)
#include <nvtx3/nvToolsExt.h>
#endif

namespace cuawait {

#if defined(CUAWAIT_HAS_NVTX)

bool nvtx_ranges::available() noexcept { return true; }

nvtx_ranges::nvtx_ranges() noexcept : m_domain(nvtxDomainCreateA("cuawait")) {}

void nvtx_ranges::observe(const wait_info& e) noexcept {
  auto* const domain = static_cast<nvtxDomainHandle_t>(m_domain);
  switch (e.event) {
  case wait_event::suspend: {
    nvtxEventAttributes_t a{};
    a.version = NVTX_VERSION;
    a.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
    a.messageType = NVTX_MESSAGE_TYPE_ASCII;
    a.message.ascii = e.node.operation != nullptr ? e.node.operation : "wait";
    a.payloadType = NVTX_PAYLOAD_TYPE_UNSIGNED_INT64; // the wait id, as in traces and logs
    a.payload.ullValue = e.id;
    e.node.trace.range = nvtxDomainRangeStartEx(domain, &a);
    break;
  }
  case wait_event::ready:
  case wait_event::resume:
  case wait_event::withdraw:
    if (e.node.trace.range != 0) {
      nvtxDomainRangeEnd(domain, e.node.trace.range);
      e.node.trace.range = 0;
    }
    break;
  case wait_event::complete:
    break;
  }
}

#else

bool nvtx_ranges::available() noexcept { return false; }
nvtx_ranges::nvtx_ranges() noexcept = default;
void nvtx_ranges::observe(const wait_info&) noexcept {}

#endif

} // namespace cuawait
