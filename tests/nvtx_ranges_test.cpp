// SPDX-License-Identifier: Apache-2.0
// nvtx_ranges without Nsight Systems: NVTX loads the test tool (tests/nvtx_injection.cpp,
// path given at build time) through NVTX_INJECTION64_PATH on its first call, and the tool
// counts the ranges. Each wait is one range in the domain "cuawait", named by its
// operation, carrying its id, ended exactly once (resumed, ready or withdrawn).

#include "common/fake_completion_source.hpp"
#include "common/nvtx_injection.hpp"
#include "common/owned_coroutine.hpp"

#include <cuawait/completion_reactor.hpp>
#include <cuawait/nvtx_ranges.hpp>
#include <cuawait/wait_observer.hpp>

#include <gtest/gtest.h>

#include <dlfcn.h>

#include <cstdlib>
#include <string>

namespace {

namespace ca = cuawait;
using ca::completion_reactor;
using ca::test::fake_completion_source;
using ca::test::fake_wait;
using ca::test::owned_coroutine;

owned_coroutine await_one(completion_reactor& r, std::uintptr_t lane, std::uint64_t token) {
  (void)co_await fake_wait(r, lane, token);
}

cuawait_test_nvtx_counts seen() {
  // Already loaded by NVTX: dlopen finds the same copy.
  void* lib = ::dlopen(CUAWAIT_TEST_NVTX_INJECTION, RTLD_NOW | RTLD_NOLOAD);
  if (lib == nullptr) {
    ADD_FAILURE() << "NVTX did not load the test tool " << CUAWAIT_TEST_NVTX_INJECTION;
    return {};
  }
  auto fn = reinterpret_cast<cuawait_test_nvtx_seen_fn>(::dlsym(lib, "cuawait_test_nvtx_seen"));
  cuawait_test_nvtx_counts c{};
  if (fn != nullptr) {
    fn(&c);
  }
  ::dlclose(lib);
  return c;
}

TEST(NvtxRanges, OneRangePerWaitEndedOnce) {
  if (!ca::nvtx_ranges::available()) {
    GTEST_SKIP() << "cuawait built without NVTX (CUAWAIT_NVTX=OFF)";
  }
  // Before the first NVTX call of the process, which reads it.
  ::setenv("NVTX_INJECTION64_PATH", CUAWAIT_TEST_NVTX_INJECTION, 1);
  fake_completion_source src;
  ca::reactor_options o;
  o.start_thread = false;
  completion_reactor r(src, o);
  ca::nvtx_ranges nvtx;
  ca::observer_set set;
  set.add(nvtx);
  set.install(r);
  src.complete(9);
  auto ready = await_one(r, 3, 9); // finished already: its range ends at once
  auto a = await_one(r, 1, 1);
  auto b = await_one(r, 1, 2);
  auto gone = await_one(r, 2, 3);
  gone.handle.destroy(); // withdrawn: its range ends too
  const auto mid = seen();
  EXPECT_EQ(mid.domains_named_cuawait, 1);
  EXPECT_EQ(mid.starts, 4);
  EXPECT_EQ(mid.ends, 2);
  src.complete(1);
  src.complete(2);
  r.drain();
  r.set_trace({});
  const auto end = seen();
  EXPECT_EQ(end.starts, 4);
  EXPECT_EQ(end.ends, 4);
  EXPECT_EQ(end.bad_ends, 0);
  EXPECT_EQ(end.payloads, 4);
  EXPECT_EQ(std::string(end.last_message), "fake");
  for (auto* c : {&ready, &a, &b}) {
    c->handle.destroy();
  }
}

} // namespace
