// SPDX-License-Identifier: Apache-2.0
// device_buffer, pinned_buffer / pinned_pool, mapped_buffer and device_memory_pool on a GPU:
// round trips of every element, reuse from the pools, release ordering held open by a spin
// kernel, and the out-of-memory path. Synchronizes with cudaStreamSynchronize (tests of
// memory, not of awaiting).

#include "common/gpu.hpp"
#include "common/spin_kernel.cuh"

#include <cuawait/cuda/device_buffer.hpp>
#include <cuawait/cuda/mapped_buffer.hpp>
#include <cuawait/cuda/memory_pool.hpp>
#include <cuawait/cuda/pinned_buffer.hpp>
#include <cuawait/cuda/pinned_pool.hpp>

#include <gtest/gtest.h>

#include <string>
#include <utility>

namespace {

namespace cu = cuawait::cuda;

__global__ void scale_add(float* p, std::size_t n, float a, float b) {
  for (std::size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += std::size_t{blockDim.x} * gridDim.x) {
    p[i] = p[i] * a + b;
  }
}

// Reads every element of `in` (mapped host memory) and writes its square to `out`.
__global__ void square_mapped(const int* in, int* out, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    out[i] = in[i] * in[i];
  }
}

// Waits on the host's release flag, then writes `n` ints: a kernel still using a buffer.
__global__ void spin_then_write(const volatile int* release, int* outcome, int* p, int n) {
  const long long start = clock64();
  while (*release == 0) {
    if (clock64() - start > cuawait::test::spin_bound_cycles) {
      *outcome = 2;
      return;
    }
  }
  for (int i = 0; i < n; ++i) {
    p[i] = i;
  }
  *outcome = 1;
}

void sync(cu::stream_ref s) { CUAWAIT_CUDA_CHECK("test sync", cudaStreamSynchronize(s.get())); }

class BufferTest : public ::testing::Test {
protected:
  void SetUp() override { CUAWAIT_REQUIRE_GPU(); }
};

TEST_F(BufferTest, DeviceAndPinnedRoundTripEveryElement) {
  cu::stream s;
  constexpr std::size_t n = (1 << 20) + 3;
  cu::pinned_buffer<float> in(n, s);
  cu::pinned_buffer<float> out(n, s);
  for (std::size_t i = 0; i < n; ++i) {
    in[i] = static_cast<float>(i % 1000);
    out[i] = -1.0f;
  }
  cu::device_buffer<float> d(n, s);
  ASSERT_NE(d.data(), nullptr);
  EXPECT_EQ(d.size(), n);
  EXPECT_EQ(d.size_bytes(), n * sizeof(float));
  EXPECT_EQ(d.stream(), cu::stream_ref(s));
  CUAWAIT_CUDA_CHECK("h2d", cudaMemcpyAsync(d.data(), in.data(), in.size_bytes(),
                                            cudaMemcpyHostToDevice, s.get()));
  scale_add<<<256, 256, 0, s.get()>>>(d.data(), n, 2.0f, 1.0f);
  CUAWAIT_CUDA_CHECK("kernel", cudaGetLastError());
  CUAWAIT_CUDA_CHECK("d2h", cudaMemcpyAsync(out.data(), d.data(), d.size_bytes(),
                                            cudaMemcpyDeviceToHost, s.get()));
  sync(s);
  for (std::size_t i = 0; i < n; ++i) {
    ASSERT_EQ(out[i], static_cast<float>(i % 1000) * 2.0f + 1.0f) << i;
  }
}

TEST_F(BufferTest, BuffersWorkWithStreamCopies) {
  cu::stream s;
  cu::pinned_buffer<int> in(1000, s);
  cu::pinned_buffer<int> out(1000, s);
  for (int i = 0; i < 1000; ++i) {
    in[i] = i * 3;
  }
  cu::device_buffer<int> d(1000, s);
  (void)s.copy(d, in); // the buffers are contiguous ranges for the stream's copies
  (void)s.copy(out, d);
  sync(s);
  for (int i = 0; i < 1000; ++i) {
    ASSERT_EQ(out[i], i * 3);
  }
}

TEST_F(BufferTest, EmptyAndMovedFromBuffersHoldNothing) {
  cu::stream s;
  cu::device_buffer<int> zero(0, s);
  EXPECT_EQ(zero.data(), nullptr);
  EXPECT_TRUE(zero.empty());
  cu::device_buffer<int> a(16, s);
  int* p = a.data();
  cu::device_buffer<int> b(std::move(a));
  EXPECT_EQ(a.data(), nullptr); // NOLINT(bugprone-use-after-move): checked on purpose
  EXPECT_EQ(b.data(), p);
  cu::pinned_buffer<int> h(16);
  cu::pinned_buffer<int> h2 = std::move(h);
  EXPECT_EQ(h.data(), nullptr); // NOLINT(bugprone-use-after-move)
  EXPECT_EQ(h2.size(), 16u);
  sync(s);
}

TEST_F(BufferTest, DevicePoolReusesFreedMemoryInsteadOfGrowing) {
  cu::stream s;
  cu::device_memory_pool pool;
  std::uint64_t reserved_after_first = 0;
  for (int i = 0; i < 100; ++i) {
    cu::device_buffer<char> b(8 << 20, s, pool);
    if (i == 0) {
      reserved_after_first = pool.reserved_bytes();
      EXPECT_GE(reserved_after_first, 8u << 20);
      EXPECT_GE(pool.used_bytes(), 8u << 20);
    }
    sync(s); // a synchronization would give memory back under a low release threshold
  }
  EXPECT_EQ(pool.reserved_bytes(), reserved_after_first);
  EXPECT_EQ(pool.used_bytes(), 0u);
  sync(s); // the last buffer's free is stream-ordered: trimming only returns freed memory
  pool.trim_to(0);
  EXPECT_EQ(pool.reserved_bytes(), 0u);
}

TEST_F(BufferTest, DeviceOutOfMemoryNamesTheSizeAndLeavesEverythingUsable) {
  cu::stream s;
  constexpr std::size_t huge = std::size_t{1} << 44; // 16 TiB
  try {
    cu::device_buffer<char> b(huge, s);
    FAIL() << "allocating 16 TiB succeeded";
  } catch (const cu::cuda_error& e) {
    EXPECT_EQ(e.code(), cudaErrorMemoryAllocation);
    EXPECT_NE(std::string(e.what()).find("device_buffer: allocate 17592186044416 bytes"),
              std::string::npos)
        << e.what();
    EXPECT_FALSE(e.context_lost());
  }
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  cu::device_buffer<int> ok(1024, s);
  CUAWAIT_CUDA_CHECK("memset", cudaMemsetAsync(ok.data(), 0, ok.size_bytes(), s.get()));
  sync(s);
}

TEST_F(BufferTest, OverflowingElementCountIsRejected) {
  cu::stream s;
  EXPECT_THROW(cu::device_buffer<double>(~std::size_t{0} / 4, s), std::length_error);
  EXPECT_THROW(cu::pinned_buffer<double>(~std::size_t{0} / 4), std::length_error);
}

TEST_F(BufferTest, FreeAfterOrdersTheFreeBehindWorkOnAnotherStream) {
  cu::stream own;
  cu::stream other;
  cuawait::test::spin_control spin;
  ASSERT_NE(spin.device, nullptr);
  {
    cu::device_buffer<int> b(64, own);
    sync(own); // the allocation is visible to `other` from here on
    spin_then_write<<<1, 1, 0, other.get()>>>(spin.device, spin.device + 1, b.data(), 64);
    CUAWAIT_CUDA_CHECK("kernel", cudaGetLastError());
    b.free_after(other);
  } // freed on `own`, after `other`'s kernel
  // The free on `own` now waits for the kernel that still spins on `other`.
  EXPECT_EQ(cudaStreamQuery(own.get()), cudaErrorNotReady);
  spin.release();
  sync(other);
  sync(own);
  EXPECT_EQ(spin.outcome(), 1);
}

TEST_F(BufferTest, PinnedBlockIsNotReusedWhileItsStreamStillRuns) {
  cu::stream s;
  cu::pinned_pool pool;
  cuawait::test::spin_control spin;
  ASSERT_NE(spin.device, nullptr);
  void* first = nullptr;
  {
    cu::pinned_buffer<float> h(1 << 16, s, pool);
    first = h.data();
    cuawait::test::spin_until_released<<<1, 1, 0, s.get()>>>(spin.device, spin.device + 1);
    CUAWAIT_CUDA_CHECK("kernel", cudaGetLastError());
  } // returned fenced: the stream has not passed the kernel yet
  EXPECT_EQ(pool.stats().bytes_fenced, std::size_t{1} << 18);
  {
    cu::pinned_buffer<float> again(1 << 16, pool);
    EXPECT_NE(again.data(), first) << "handed out while a copy from it may be in flight";
  }
  spin.release();
  sync(s);
  // Both blocks come back from the cache now: the ready one, then the fenced one.
  cu::pinned_buffer<float> a(1 << 16, pool);
  cu::pinned_buffer<float> b(1 << 16, pool);
  EXPECT_TRUE(a.data() == first || b.data() == first);
  const auto st = pool.stats();
  EXPECT_EQ(st.backend_allocations, 2u);
  EXPECT_EQ(st.reuses, 2u);
  EXPECT_EQ(st.bytes_fenced, 0u);
  EXPECT_EQ(spin.outcome(), 1);
}

TEST_F(BufferTest, PinnedPoolReusesWithoutNewAllocationsAndReportsBytes) {
  cu::pinned_pool pool;
  for (int i = 0; i < 100; ++i) {
    cu::pinned_buffer<char> h(300'000, pool); // no stream: reusable at once
    h[0] = 1;
  }
  auto st = pool.stats();
  EXPECT_EQ(st.backend_allocations, 1u);
  EXPECT_EQ(st.reuses, 99u);
  EXPECT_EQ(st.bytes_in_use, 0u);
  EXPECT_GE(st.bytes_held, 300'000u);
  EXPECT_EQ(st.bytes_cached, st.bytes_held);
  EXPECT_EQ(pool.trim(), st.bytes_held);
  EXPECT_EQ(pool.stats().bytes_held, 0u);
}

TEST_F(BufferTest, PinnedReserveServesTheNextBuffersWithoutCudaHostAlloc) {
  cu::pinned_pool pool;
  EXPECT_EQ(pool.reserve(1'000'000, 3), 3u);
  EXPECT_EQ(pool.stats().backend_allocations, 3u);
  {
    cu::pinned_buffer<char> a(1'000'000, pool);
    cu::pinned_buffer<char> b(1'000'000, pool);
    cu::pinned_buffer<char> c(1'000'000, pool);
    a[999'999] = b[0] = c[0] = 1; // real, writable page-locked memory
    EXPECT_EQ(pool.stats().backend_allocations, 3u) << "served from the reserve";
    EXPECT_EQ(pool.stats().reuses, 3u);
  }
  try {
    (void)pool.reserve(std::size_t{1} << 40, 1); // the largest pooled class: 1 TiB
    FAIL() << "reserving 1 TiB of pinned memory succeeded";
  } catch (const cu::cuda_error& e) {
    EXPECT_NE(std::string(e.what()).find("pinned_pool: allocate"), std::string::npos) << e.what();
  }
  EXPECT_EQ(pool.stats().bytes_cached, pool.stats().bytes_held);
}

TEST_F(BufferTest, PinnedOutOfMemoryNamesTheSize) {
  cu::pinned_pool pool;
  try {
    (void)pool.allocate(std::size_t{1} << 50);
    FAIL() << "allocating 1 PiB of pinned memory succeeded";
  } catch (const cu::cuda_error& e) {
    EXPECT_NE(std::string(e.what()).find("pinned_pool: allocate"), std::string::npos) << e.what();
  }
  EXPECT_EQ(pool.stats().bytes_held, 0u);
  cu::pinned_buffer<int> ok(10, pool);
  ok[9] = 9;
}

TEST_F(BufferTest, MappedBufferIsReadAndWrittenByAKernel) {
  cu::stream s;
  constexpr int n = 4099;
  cu::mapped_buffer<int> in(n);
  cu::mapped_buffer<int> out(n);
  ASSERT_NE(in.device_data(), nullptr);
  for (int i = 0; i < n; ++i) {
    ASSERT_EQ(out[i], 0) << "mapped memory starts zeroed";
    in[i] = i - 2000;
  }
  square_mapped<<<(n + 255) / 256, 256, 0, s.get()>>>(in.device_data(), out.device_data(), n);
  CUAWAIT_CUDA_CHECK("kernel", cudaGetLastError());
  sync(s);
  for (int i = 0; i < n; ++i) {
    ASSERT_EQ(out.host_data()[i], (i - 2000) * (i - 2000)) << i;
  }
}

} // namespace
