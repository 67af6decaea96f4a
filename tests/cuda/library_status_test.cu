// SPDX-License-Identifier: Apache-2.0
// stream_ref::enqueue checks what a library call returns: cudaError_t, cuBLAS statuses (when
// cuBLAS was found at build time) and any status type with a registered checker.

#include "common/gpu.hpp"

#include <cuawait/cuda.hpp>

#include <gtest/gtest.h>

#include <string>

#if defined(CUAWAIT_TEST_CUBLAS)
#include <cublas_v2.h>
#endif

namespace {

namespace cu = cuawait::cuda;
using cuawait::task;

enum class fake_status { ok, broken };

} // namespace

template <>
struct cuawait::cuda::status_checker<fake_status> {
  static constexpr const char* library = "fakelib";
  static bool ok(fake_status s) noexcept { return s == fake_status::ok; }
  static const char* name(fake_status s) noexcept {
    return s == fake_status::ok ? "FAKE_OK" : "FAKE_BROKEN";
  }
};

namespace {

static_assert(cu::concepts::library_status<fake_status>);
static_assert(!cu::concepts::library_status<int>);

// No device needed: the callable makes no CUDA call and enqueue makes none before it returns.
TEST(LibraryStatus, ARegisteredStatusIsCheckedAndNamed) {
  const cu::stream_ref s{cudaStream_t{}};
  (void)s.enqueue([](cudaStream_t) { return fake_status::ok; });
  try {
    (void)s.enqueue([](cudaStream_t) { return fake_status::broken; });
    FAIL() << "no library_error";
  } catch (const cu::library_error& e) {
    EXPECT_EQ(e.library(), "fakelib");
    EXPECT_EQ(e.status_name(), "FAKE_BROKEN");
    EXPECT_EQ(e.status(), 1);
    EXPECT_EQ(e.operation(), "enqueue");
    EXPECT_NE(std::string(e.what()).find("enqueue (fakelib): FAKE_BROKEN (1)"), std::string::npos)
        << e.what();
  }
}

TEST(LibraryStatus, ACudaErrorStillThrowsCudaError) {
  const cu::stream_ref s{cudaStream_t{}};
  EXPECT_THROW((void)s.enqueue([](cudaStream_t) { return cudaErrorInvalidValue; }), cu::cuda_error);
}

#if defined(CUAWAIT_TEST_CUBLAS)

// A failing cuBLAS call inside a coroutine reaches whoever awaits it, named.
TEST(LibraryStatus, ACublasFailureReachesTheAwaiterNamed) {
  CUAWAIT_REQUIRE_GPU();
  cu::device_context ctx;
  const cu::context_scope scope(ctx);
  cublasHandle_t h = nullptr;
  ASSERT_EQ(cublasCreate(&h), CUBLAS_STATUS_SUCCESS);
  cu::stream s;
  float* d = nullptr;
  ASSERT_EQ(cudaMalloc(&d, 16 * sizeof(float)), cudaSuccess);
  const float one = 1.0f;
  auto body = [&]() -> task<void> {
    // A valid call first: the checked path lets successes through.
    co_await s.enqueue([&](cudaStream_t st) {
      (void)cublasSetStream(h, st);
      return cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, 4, 4, 4, &one, d, 4, d, 4, &one, d, 4);
    });
    // m = -1: cuBLAS refuses it with CUBLAS_STATUS_INVALID_VALUE.
    co_await s.enqueue([&](cudaStream_t st) {
      (void)cublasSetStream(h, st);
      return cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, -1, 4, 4, &one, d, 4, d, 4, &one, d, 4);
    });
    ADD_FAILURE() << "the failing call did not throw";
  };
  try {
    cuawait::sync_wait(body());
    FAIL() << "no library_error";
  } catch (const cu::library_error& e) {
    EXPECT_EQ(e.library(), "cuBLAS");
    EXPECT_EQ(e.status_name(), "CUBLAS_STATUS_INVALID_VALUE");
    EXPECT_EQ(e.status(), static_cast<long long>(CUBLAS_STATUS_INVALID_VALUE));
  }
  s.sync();
  (void)cudaFree(d);
  (void)cublasDestroy(h);
}

#else

TEST(LibraryStatus, ACublasFailureReachesTheAwaiterNamed) {
  GTEST_SKIP() << "cuBLAS was not found when this test was built";
}

#endif

} // namespace
