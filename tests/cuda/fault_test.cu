// SPDX-License-Identifier: Apache-2.0
// A kernel that faults kills the CUDA context: every pending wait must fail, saying so,
// and nothing may hang. Its own binary, since the context is gone afterwards.

#include "common/gpu.hpp"
#include "common/spin_kernel.cuh"

#include <cuawait/cuda.hpp>

#include <gtest/gtest.h>

namespace {

namespace cu = cuawait::cuda;

__global__ void write_illegal(int* p) { *(p + (1LL << 40)) = 1; }

TEST(FaultTest, IllegalAddressFailsEveryPendingWaitWithContextLost) {
  CUAWAIT_REQUIRE_GPU();
  cu::stream a, b;
  int* d = nullptr;
  ASSERT_EQ(cudaMalloc(&d, 4), cudaSuccess);
  auto faulting = [&]() -> cuawait::task<bool> {
    try {
      co_await a.launch(write_illegal, dim3(1), dim3(1), d);
    } catch (const cu::cuda_error& e) {
      EXPECT_TRUE(e.context_lost()) << e.what();
      EXPECT_NE(std::string(e.what()).find("context is lost"), std::string::npos);
      co_return true;
    }
    co_return false;
  };
  auto other = [&]() -> cuawait::task<cuawait::result<void, cu::cuda_error>> {
    b.launch(write_illegal, dim3(1), dim3(1), d);
    co_return co_await cu::operation(b.get(), "other").try_await();
  };
  EXPECT_TRUE(cuawait::sync_wait(faulting()));
  const auto r = cuawait::sync_wait(other());
  EXPECT_FALSE(r.has_value());
}

} // namespace
