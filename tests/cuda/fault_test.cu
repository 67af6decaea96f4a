// SPDX-License-Identifier: Apache-2.0
// A kernel that faults kills the CUDA context: every pending wait must fail, saying so,
// and nothing may hang. Its own binary, since the context is gone afterwards.

#include "common/gpu.hpp"
#include "common/spin_kernel.cuh"

#include <cuawait/cuda.hpp>

#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <thread>

namespace {

namespace cu = cuawait::cuda;

__global__ void write_illegal(int* p) { *(p + (1LL << 40)) = 1; }

TEST(FaultTest, IllegalAddressFailsEveryPendingWaitWithContextLost) {
  CUAWAIT_REQUIRE_GPU();
  cu::stream a, b;
  int* d = nullptr;
  ASSERT_EQ(cudaMalloc(&d, 4), cudaSuccess);
  cuawait::test::spin_control ctl; // never released: b stays busy until the context dies
  ASSERT_NE(ctl.device, nullptr);
  b.launch(cuawait::test::spin_until_released, dim3(1), dim3(1), ctl.device, ctl.device + 1);
  // A wait pending on b, on another thread, before the fault.
  std::optional<cuawait::result<void, cu::cuda_error>> other;
  std::thread waiter([&] {
    const auto body = [&]() -> cuawait::task<cuawait::result<void, cu::cuda_error>> {
      co_return co_await cu::operation(b.get(), "other stream").try_await();
    };
    other.emplace(cuawait::sync_wait(body()));
  });
  while (cu::current_reactor().reactor().pending() == 0) {
    std::this_thread::yield();
  }
  const auto faulting = [&]() -> cuawait::task<bool> {
    try {
      co_await a.launch(write_illegal, dim3(1), dim3(1), d);
    } catch (const cu::cuda_error& e) {
      EXPECT_TRUE(e.context_lost()) << e.what();
      EXPECT_NE(std::string(e.what()).find("context is lost"), std::string::npos) << e.what();
      co_return true;
    }
    co_return false;
  };
  EXPECT_TRUE(cuawait::sync_wait(faulting()));
  waiter.join(); // the pending wait on b must not hang
  ASSERT_TRUE(other.has_value());
  // On the H200 a fault is reported only once every kernel already running has finished:
  // b's spin kernel runs to its time bound and the work behind it may complete, so b's wait
  // may resolve as done (measured with a probe: cudaStreamQuery on both streams says
  // "not ready" until b's kernel ends, then both say cudaErrorIllegalAddress). What must hold
  // is that it resolved, and that an error, if reported, says the context is lost.
  if (!other->has_value()) {
    EXPECT_TRUE(other->error().context_lost()) << other->error().what();
  }
  // A wait submitted on b after the loss fails, naming it, instead of hanging.
  const auto later = [&]() -> cuawait::task<cuawait::result<void, cu::cuda_error>> {
    co_return co_await cu::operation(b.get(), "after the loss").try_await();
  };
  const auto after = cuawait::sync_wait(later());
  ASSERT_FALSE(after.has_value());
  EXPECT_TRUE(after.error().context_lost()) << after.error().what();
  // Enqueuing after the loss throws at the call.
  EXPECT_THROW(a.launch(write_illegal, dim3(1), dim3(1), d), cu::cuda_error);
}

} // namespace
