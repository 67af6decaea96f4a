// SPDX-License-Identifier: Apache-2.0
// A minimal NVTX tool for tests: loaded by NVTX through NVTX_INJECTION64_PATH, it takes
// over nvtxDomainCreateA, nvtxDomainRangeStartEx and nvtxDomainRangeEnd and counts what it
// sees, so tests can check the ranges cuawait emits without Nsight Systems.

#include "common/nvtx_injection.hpp"

#include <nvtx3/nvToolsExt.h>

#include <cstring>
#include <mutex>
#include <set>

namespace {

std::mutex g_mutex;
cuawait_test_nvtx_counts g_counts{};
std::set<nvtxRangeId_t> g_open;
nvtxRangeId_t g_next = 1;
int g_cuawait_domain = 0x5eed; // the handle given to the "cuawait" domain

nvtxDomainHandle_t NVTX_API domain_create(const char* name) {
  const std::lock_guard lock(g_mutex);
  if (std::strcmp(name, "cuawait") == 0) {
    ++g_counts.domains_named_cuawait;
    return reinterpret_cast<nvtxDomainHandle_t>(&g_cuawait_domain);
  }
  return nullptr;
}

nvtxRangeId_t NVTX_API range_start(nvtxDomainHandle_t d, const nvtxEventAttributes_t* a) {
  const std::lock_guard lock(g_mutex);
  if (d != reinterpret_cast<nvtxDomainHandle_t>(&g_cuawait_domain)) {
    return 0;
  }
  ++g_counts.starts;
  if (a != nullptr && a->payloadType == NVTX_PAYLOAD_TYPE_UNSIGNED_INT64 &&
      a->payload.ullValue != 0) {
    ++g_counts.payloads;
  }
  if (a != nullptr && a->messageType == NVTX_MESSAGE_TYPE_ASCII && a->message.ascii != nullptr) {
    std::strncpy(g_counts.last_message, a->message.ascii, sizeof g_counts.last_message - 1);
  }
  const nvtxRangeId_t id = g_next++;
  g_open.insert(id);
  return id;
}

void NVTX_API range_end(nvtxDomainHandle_t, nvtxRangeId_t id) {
  const std::lock_guard lock(g_mutex);
  if (g_open.erase(id) == 1) {
    ++g_counts.ends;
  } else {
    ++g_counts.bad_ends;
  }
}

} // namespace

extern "C" {

__attribute__((visibility("default"))) void cuawait_test_nvtx_seen(cuawait_test_nvtx_counts* out) {
  const std::lock_guard lock(g_mutex);
  *out = g_counts;
}

__attribute__((visibility("default"))) int
InitializeInjectionNvtx2(NvtxGetExportTableFunc_t get_export_table) {
  const auto* callbacks =
      static_cast<const NvtxExportTableCallbacks*>(get_export_table(NVTX_ETID_CALLBACKS));
  if (callbacks == nullptr) {
    return 0;
  }
  NvtxFunctionTable table = nullptr;
  unsigned int size = 0;
  if (callbacks->GetModuleFunctionTable(NVTX_CB_MODULE_CORE2, &table, &size) == 0 ||
      size <= NVTX_CBID_CORE2_DomainCreateA) {
    return 0;
  }
  *table[NVTX_CBID_CORE2_DomainCreateA] = reinterpret_cast<NvtxFunctionPointer>(&domain_create);
  *table[NVTX_CBID_CORE2_DomainRangeStartEx] = reinterpret_cast<NvtxFunctionPointer>(&range_start);
  *table[NVTX_CBID_CORE2_DomainRangeEnd] = reinterpret_cast<NvtxFunctionPointer>(&range_end);
  return 1;
}

} // extern "C"
