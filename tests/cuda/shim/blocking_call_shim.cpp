// SPDX-License-Identifier: Apache-2.0
// An LD_PRELOAD shim over the shared CUDA runtime: counts the calls that block the calling
// thread (frees that synchronize, host synchronizations), split by whether the caller is a
// runtime pool worker (a thread named "cuawait-pool"), and forwards each to the real one.
// Read by tests/cuda/blocking_calls_test.cu through cuawait_blocking_shim_counts().

#include <cuda_runtime_api.h>

#include <dlfcn.h>
#include <pthread.h>

#include <atomic>
#include <cstring>

namespace {

enum call { free_device, free_host, stream_sync, device_sync, event_sync, call_count };

std::atomic<unsigned long> g_on_workers[call_count];
std::atomic<unsigned long> g_elsewhere[call_count];

bool on_pool_worker() {
  char name[16] = {};
  return pthread_getname_np(pthread_self(), name, sizeof name) == 0 &&
         std::strcmp(name, "cuawait-pool") == 0;
}

void count(call c) {
  (on_pool_worker() ? g_on_workers : g_elsewhere)[c].fetch_add(1, std::memory_order_relaxed);
}

template <class Fn>
Fn real(const char* name) {
  return reinterpret_cast<Fn>(dlsym(RTLD_NEXT, name));
}

} // namespace

extern "C" {

//! Copies the counts, indexed cudaFree, cudaFreeHost, cudaStreamSynchronize,
//! cudaDeviceSynchronize, cudaEventSynchronize.
__attribute__((visibility("default"))) void cuawait_blocking_shim_counts(unsigned long* on_workers,
                                                                         unsigned long* elsewhere) {
  for (int i = 0; i < call_count; ++i) {
    on_workers[i] = g_on_workers[i].load();
    elsewhere[i] = g_elsewhere[i].load();
  }
}

__attribute__((visibility("default"))) cudaError_t cudaFree(void* p) {
  static const auto f = real<cudaError_t (*)(void*)>("cudaFree");
  count(free_device);
  return f(p);
}

__attribute__((visibility("default"))) cudaError_t cudaFreeHost(void* p) {
  static const auto f = real<cudaError_t (*)(void*)>("cudaFreeHost");
  count(free_host);
  return f(p);
}

__attribute__((visibility("default"))) cudaError_t cudaStreamSynchronize(cudaStream_t s) {
  static const auto f = real<cudaError_t (*)(cudaStream_t)>("cudaStreamSynchronize");
  count(stream_sync);
  return f(s);
}

__attribute__((visibility("default"))) cudaError_t cudaDeviceSynchronize() {
  static const auto f = real<cudaError_t (*)()>("cudaDeviceSynchronize");
  count(device_sync);
  return f();
}

__attribute__((visibility("default"))) cudaError_t cudaEventSynchronize(cudaEvent_t e) {
  static const auto f = real<cudaError_t (*)(cudaEvent_t)>("cudaEventSynchronize");
  count(event_sync);
  return f(e);
}

} // extern "C"
