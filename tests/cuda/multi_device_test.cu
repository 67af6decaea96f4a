// SPDX-License-Identifier: Apache-2.0
// A runtime serving several devices, exercised on one GPU: the list {0}, and {0, 0} (two
// contexts on device 0, each with its own reactor, pools and streams, polled by the same
// workers). Jobs spread by `device_scheduler`, `when_all` across contexts, `copy_peer`
// along each of its paths between buffers of device 0; results checked element by
// element. The paths between distinct devices wait for a machine with several GPUs.

#include "common/gpu.hpp"
#include "common/spin_kernel.cuh"

#include <cuawait/cuda.hpp>
#include <cuawait/runtime.hpp>
#include <cuawait/when_all.hpp>

#include <gtest/gtest.h>

#include <atomic>
#include <cstddef>
#include <numeric>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace multi_device_test {

namespace cu = cuawait::cuda;

//! p[i] = p[i] * 2 + v, after spinning about `cycles` clock cycles (so awaiting it suspends).
__global__ void scale_add(float* p, std::size_t n, float v, long long cycles) {
  const long long t0 = clock64();
  while (clock64() - t0 < cycles) {
  }
  for (std::size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    p[i] = p[i] * 2.0f + v;
  }
}

constexpr std::size_t job_elements = 4096;

//! One job on the device the lease names: H2D, kernel, D2H through that device's stream
//! and pools; returns how many elements came back wrong.
cuawait::task<std::size_t> one_job(cu::device_lease& d, int id) {
  EXPECT_EQ(cu::current_context_or_null(), &d.context());
  cu::stream_lease s = co_await d.acquire_stream();
  EXPECT_EQ(s.device(), d.device());
  cu::pinned_buffer<float> host(job_elements);
  for (std::size_t i = 0; i < job_elements; ++i) {
    host[i] = static_cast<float>(i) + static_cast<float>(id);
  }
  cu::device_buffer<float> dev(job_elements, s);
  co_await s.copy(dev, host);
  co_await s.launch(scale_add, dim3(8), dim3(128), dev.data(), job_elements, static_cast<float>(id),
                    100'000LL);
  co_await s.copy(host.data(), dev.data(), job_elements);
  std::size_t wrong = 0;
  for (std::size_t i = 0; i < job_elements; ++i) {
    const float expected =
        (static_cast<float>(i) + static_cast<float>(id)) * 2.0f + static_cast<float>(id);
    wrong += host[i] == expected ? 0 : 1;
  }
  co_return wrong;
}

//! The job `device_scheduler::run` is given (a named type: gcc warns about a lambda, which
//! has no linkage, held in the frame of the scheduler's coroutine).
struct job_of {
  int id;
  cuawait::task<std::size_t> operator()(cu::device_lease& d) const { return one_job(d, id); }
};

//! `jobs` jobs spread by a scheduler over `rt`'s devices, all in flight at once.
std::vector<std::size_t> run_jobs(cuawait::runtime& rt, cu::device_scheduler& sched, int jobs) {
  return rt.run([&]() -> cuawait::task<std::vector<std::size_t>> {
    std::vector<cuawait::task<std::size_t>> all;
    for (int j = 0; j < jobs; ++j) {
      all.push_back(
          [](cuawait::runtime& r, cu::device_scheduler& sc, int id) -> cuawait::task<std::size_t> {
            co_await r.pool().schedule();
            co_return co_await sc.run(job_of{id});
          }(rt, sched, j));
    }
    co_return co_await cuawait::when_all(std::move(all));
  }());
}

cuawait::runtime_options on_devices(std::vector<int> devices) {
  cuawait::runtime_options o;
  o.threads = 4;
  o.devices = std::move(devices);
  return o;
}

TEST(MultiDevice, ARuntimeGivenTheListZeroServesDeviceZero) {
  CUAWAIT_REQUIRE_GPU();
  cuawait::runtime rt(on_devices({0}));
  ASSERT_EQ(rt.devices(), std::vector<int>{0});
  ASSERT_EQ(rt.contexts().size(), 1u);
  EXPECT_EQ(&rt.context(0), &rt.context());
  EXPECT_THROW((void)rt.context(1), std::out_of_range);
  cu::device_scheduler sched(rt);
  const auto wrong = run_jobs(rt, sched, 16);
  for (std::size_t w : wrong) {
    EXPECT_EQ(w, 0u);
  }
  EXPECT_EQ(sched.completed(0), 16u);
  EXPECT_EQ(sched.in_flight(0), 0u);
}

TEST(MultiDevice, TwoContextsOnOneDeviceShareTheJobsAndThePool) {
  CUAWAIT_REQUIRE_GPU();
  cuawait::runtime rt(on_devices({0, 0}));
  ASSERT_EQ(rt.devices(), (std::vector<int>{0, 0}));
  ASSERT_NE(&rt.context(0), &rt.context(1));
  EXPECT_EQ(rt.context(1).device(), 0);
  EXPECT_NE(&rt.context(0).reactor(), &rt.context(1).reactor());
  EXPECT_NE(&rt.context(0).streams(), &rt.context(1).streams());
  cu::device_scheduler sched(rt);
  constexpr int jobs = 64;
  const auto wrong = run_jobs(rt, sched, jobs);
  ASSERT_EQ(wrong.size(), std::size_t{jobs});
  for (std::size_t j = 0; j < wrong.size(); ++j) {
    EXPECT_EQ(wrong[j], 0u) << "job " << j;
  }
  EXPECT_EQ(sched.completed(0) + sched.completed(1), std::size_t{jobs});
  EXPECT_GT(sched.completed(0), 0u);
  EXPECT_GT(sched.completed(1), 0u);
  // Each context's reactor resumed waits: the first await of a job goes to its context.
  EXPECT_GT(rt.stats(0).submitted, 0u);
  EXPECT_GT(rt.stats(1).submitted, 0u);
}

TEST(MultiDevice, WhenAllAcrossContexts) {
  CUAWAIT_REQUIRE_GPU();
  cuawait::runtime rt(on_devices({0, 0}));
  cu::device_scheduler sched(rt);
  const auto [a, b] = rt.run([&]() -> cuawait::task<std::pair<std::size_t, std::size_t>> {
    // The first child holds its device while the second picks: one each.
    auto on = [&](int id) -> cuawait::task<std::size_t> {
      cu::device_lease d = sched.acquire();
      co_return co_await one_job(d, id);
    };
    auto [x, y] = co_await cuawait::when_all(on(1), on(2));
    co_return std::pair{x, y};
  }());
  EXPECT_EQ(a, 0u);
  EXPECT_EQ(b, 0u);
  EXPECT_EQ(sched.completed(0), 1u);
  EXPECT_EQ(sched.completed(1), 1u);
}

TEST(MultiDevice, AStreamLeaseFromAContextMakesItCurrent) {
  CUAWAIT_REQUIRE_GPU();
  cuawait::runtime rt(on_devices({0, 0}));
  const bool ok = rt.run([&]() -> cuawait::task<bool> {
    cu::stream_lease s = co_await rt.context(1).acquire_stream();
    const bool here = cu::current_context_or_null() == &rt.context(1);
    co_await s; // routed to the stream's device: context 1 stays current
    co_return here&& cu::current_context_or_null() == &rt.context(1);
  }());
  EXPECT_TRUE(ok);
}

// A wait pending on the second context's reactor is ended by `stop()`, which reaches every
// context; the kernel is then released and the runtime shuts down cleanly.
TEST(MultiDevice, StopEndsTheWaitsOfEveryContext) {
  CUAWAIT_REQUIRE_GPU();
  cuawait::test::spin_control spin;
  ASSERT_NE(spin.device, nullptr);
  std::atomic<int> cancelled{0};
  {
    cuawait::runtime rt(on_devices({0, 0}));
    std::atomic<bool> waiting{false};
    rt.spawn([](cuawait::runtime& r, cuawait::test::spin_control& sc, std::atomic<bool>& w,
                std::atomic<int>& c) -> cuawait::task<void> {
      co_await r.pool().schedule();
      cu::stream_lease s = co_await r.context(1).acquire_stream();
      s.launch(cuawait::test::spin_until_released, dim3(1), dim3(1), sc.device, sc.device + 1);
      w = true;
      try {
        co_await s;
      } catch (const cuawait::operation_cancelled&) {
        c.fetch_add(1);
      }
      sc.release();
      co_await s.drain(); // the kernel finished before the stream goes back
    }(rt, spin, waiting, cancelled));
    while (!waiting.load() || rt.stats(1).submitted == 0) {
      std::this_thread::yield(); // until the wait is queued on context 1's reactor
    }
    EXPECT_GE(rt.stop(), 1u);
    rt.join_spawned();
  }
  EXPECT_EQ(cancelled.load(), 1);
  EXPECT_EQ(spin.outcome(), 1);
}

//! `n` floats iota'd on device 0, copied with `copy_peer` along `path`, read back.
std::size_t copy_peer_mismatches(cu::peer_path path, std::size_t n) {
  cuawait::runtime rt(on_devices({0}));
  return rt.run([&]() -> cuawait::task<std::size_t> {
    cu::stream_lease s = co_await rt.context().acquire_stream();
    std::vector<float> host(n);
    std::iota(host.begin(), host.end(), 1.0f);
    cu::device_buffer<float> src(n, s);
    cu::device_buffer<float> dst(n, s);
    co_await s.copy(src, host);
    co_await s.memset(dst.data(), 0, n);
    co_await cu::copy_peer(s, dst.data(), 0, src.data(), 0, n, path);
    std::vector<float> back(n, -1.0f);
    co_await s.copy(back.data(), dst.data(), n);
    std::size_t wrong = 0;
    for (std::size_t i = 0; i < n; ++i) {
      wrong += back[i] == host[i] ? 0 : 1;
    }
    co_return wrong;
  }());
}

TEST(MultiDevice, CopyPeerOnOneDeviceIsADeviceToDeviceCopy) {
  CUAWAIT_REQUIRE_GPU();
  EXPECT_EQ(copy_peer_mismatches(cu::peer_path::automatic, 100'003), 0u);
}

TEST(MultiDevice, CopyPeerDirectPathOnOneDevice) {
  CUAWAIT_REQUIRE_GPU();
  EXPECT_EQ(copy_peer_mismatches(cu::peer_path::direct, 100'003), 0u);
}

TEST(MultiDevice, CopyPeerStagedPathInSeveralChunks) {
  CUAWAIT_REQUIRE_GPU();
  // 9M floats: 36 MB, more than one 32 MiB staging chunk.
  EXPECT_EQ(copy_peer_mismatches(cu::peer_path::staged, 9'000'001), 0u);
}

TEST(MultiDevice, CopyPeerNamesItsError) {
  CUAWAIT_REQUIRE_GPU();
  cuawait::runtime rt(on_devices({0}));
  cu::stream s;
  cu::device_buffer<float> a(16, s);
  try {
    (void)cu::copy_peer(s, a.data(), 0, a.data(), 4096, 16, cu::peer_path::direct);
    FAIL() << "a copy from device 4096 was enqueued";
  } catch (const cu::cuda_error& e) {
    EXPECT_NE(std::string(e.what()).find("copy_peer"), std::string::npos) << e.what();
  }
  s.sync();
}

TEST(MultiDevice, PeerAccessOfADeviceWithItself) {
  CUAWAIT_REQUIRE_GPU();
  EXPECT_TRUE(cu::can_access_peer(0, 0));
  EXPECT_TRUE(cu::enable_peer_access(0, 0));
  EXPECT_FALSE(cu::can_access_peer(0, 4096));
}

TEST(MultiDevice, AllDevicesListsEveryVisibleDevice) {
  CUAWAIT_REQUIRE_GPU();
  const std::vector<int> all = cu::all_devices();
  ASSERT_EQ(static_cast<int>(all.size()), cu::device_count());
  for (std::size_t i = 0; i < all.size(); ++i) {
    EXPECT_EQ(all[i], static_cast<int>(i));
  }
}

} // namespace multi_device_test
