// SPDX-License-Identifier: Apache-2.0
// nccl::communicator on one GPU: one-rank collectives and a send/receive to itself, checked
// element by element; refused calls as named errors; a stop request aborting the
// communicator and ending every wait on it, with a spin kernel holding the stream.

#include "common/gpu.hpp"
#include "common/spin_kernel.cuh"

#include <cuawait/nccl.hpp>

#include <gtest/gtest.h>

#include <array>
#include <cstddef>
#include <string>
#include <thread>
#include <vector>

namespace {

namespace ca = cuawait;
namespace cu = cuawait::cuda;
namespace nccl = cuawait::nccl;
using ca::task;

//! Device memory for `n` elements of T, with host copies in and out.
template <class T>
struct device_array {
  explicit device_array(std::size_t n) : size(n) {
    EXPECT_EQ(cudaMalloc(reinterpret_cast<void**>(&data), n * sizeof(T)), cudaSuccess);
  }
  device_array(const device_array&) = delete;
  device_array& operator=(const device_array&) = delete;
  ~device_array() { (void)cudaFree(data); }
  void set(const std::vector<T>& v) {
    ASSERT_EQ(cudaMemcpy(data, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice),
              cudaSuccess);
  }
  [[nodiscard]] std::vector<T> get() const {
    std::vector<T> v(size);
    EXPECT_EQ(cudaMemcpy(v.data(), data, size * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
    return v;
  }
  T* data = nullptr;
  std::size_t size;
};

template <class T>
std::vector<T> ramp(std::size_t n, T scale) {
  std::vector<T> v(n);
  for (std::size_t i = 0; i < n; ++i) {
    v[i] = static_cast<T>(i) * scale;
  }
  return v;
}

std::vector<nccl::communicator> one_rank() {
  const std::array<int, 1> devices{0};
  return nccl::communicator::init_all(devices);
}

constexpr std::size_t n = 1 << 16;

TEST(NcclCommunicator, InitAllMakesAOneRankCommunicator) {
  CUAWAIT_REQUIRE_GPU();
  auto comms = one_rank();
  ASSERT_EQ(comms.size(), 1U);
  EXPECT_EQ(comms[0].rank(), 0);
  EXPECT_EQ(comms[0].size(), 1);
  EXPECT_EQ(comms[0].device(), 0);
  EXPECT_NE(comms[0].get(), nullptr);
  EXPECT_FALSE(comms[0].aborted());
  nccl::communicator moved = std::move(comms[0]);
  EXPECT_EQ(comms[0].get(), nullptr); // NOLINT(bugprone-use-after-move): moved-from is empty
  EXPECT_THROW((void)comms[0].rank(), std::logic_error);
  EXPECT_EQ(moved.size(), 1);
}

TEST(NcclCommunicator, InitRankFromAUniqueId) {
  CUAWAIT_REQUIRE_GPU();
  const nccl::unique_id id = nccl::unique_id::create();
  const nccl::unique_id copy = nccl::unique_id::from_bytes(id.bytes());
  nccl::communicator comm(1, copy, 0, 0);
  EXPECT_EQ(comm.size(), 1);
  EXPECT_EQ(comm.rank(), 0);
}

TEST(NcclCommunicator, AllReduceOfOneRankIsItsInput) {
  CUAWAIT_REQUIRE_GPU();
  auto comms = one_rank();
  cu::stream s;
  device_array<float> in(n), out(n);
  device_array<int> ints(n);
  in.set(ramp<float>(n, 0.5F));
  ints.set(ramp<int>(n, 3));
  ca::sync_wait([&]() -> task<void> {
    co_await comms[0].all_reduce(in.data, out.data, n, ncclSum, s);
    co_await comms[0].all_reduce(ints.data, ints.data, n, ncclMax, s); // in place
  }());
  const auto got = out.get();
  const auto got_ints = ints.get();
  for (std::size_t i = 0; i < n; ++i) {
    ASSERT_EQ(got[i], static_cast<float>(i) * 0.5F) << "at " << i;
    ASSERT_EQ(got_ints[i], static_cast<int>(i) * 3) << "at " << i;
  }
}

TEST(NcclCommunicator, BroadcastAllGatherAndReduceScatterOfOneRank) {
  CUAWAIT_REQUIRE_GPU();
  auto comms = one_rank();
  cu::stream s;
  device_array<double> in(n), b(n), g(n), r(n);
  in.set(ramp<double>(n, 1.25));
  ca::sync_wait([&]() -> task<void> {
    // Three collectives in flight on one stream, awaited together.
    co_await ca::when_all(comms[0].broadcast(in.data, b.data, n, /*root=*/0, s),
                          comms[0].all_gather(in.data, g.data, n, s),
                          comms[0].reduce_scatter(in.data, r.data, n, ncclSum, s));
  }());
  const auto gb = b.get();
  const auto gg = g.get();
  const auto gr = r.get();
  for (std::size_t i = 0; i < n; ++i) {
    const double want = static_cast<double>(i) * 1.25;
    ASSERT_EQ(gb[i], want) << "broadcast at " << i;
    ASSERT_EQ(gg[i], want) << "all_gather at " << i;
    ASSERT_EQ(gr[i], want) << "reduce_scatter at " << i;
  }
}

TEST(NcclCommunicator, GroupSendsAndReceivesToItself) {
  CUAWAIT_REQUIRE_GPU();
  auto comms = one_rank();
  nccl::communicator& c = comms[0];
  cu::stream s;
  device_array<std::uint8_t> a(n), b(n);
  std::vector<std::uint8_t> bytes(n);
  for (std::size_t i = 0; i < n; ++i) {
    bytes[i] = static_cast<std::uint8_t>(i * 7 + 1);
  }
  a.set(bytes);
  ca::sync_wait([&]() -> task<void> {
    co_await c.group(s, [&] {
      (void)c.send(a.data, n, /*peer=*/0, s);
      (void)c.recv(b.data, n, /*peer=*/0, s);
    });
  }());
  const auto got = b.get();
  for (std::size_t i = 0; i < n; ++i) {
    ASSERT_EQ(got[i], bytes[i]) << "at " << i;
  }
}

TEST(NcclCommunicator, RefusedCallsAreNamedErrorsInTheAwaitingCoroutine) {
  CUAWAIT_REQUIRE_GPU();
  auto comms = one_rank();
  cu::stream s;
  device_array<float> buf(16);
  std::vector<std::string> errors;
  std::vector<long long> statuses;
  const auto named = [&](auto&& call) -> task<void> {
    try {
      co_await call();
    } catch (const cu::library_error& e) {
      errors.emplace_back(e.what());
      statuses.push_back(e.status());
    }
  };
  ca::sync_wait(named([&] { return comms[0].broadcast(buf.data, buf.data, 16, /*root=*/1, s); }));
  ca::sync_wait(named([&] {
    return comms[0].all_reduce(buf.data, buf.data, 16, static_cast<ncclDataType_t>(99), ncclSum, s);
  }));
  ASSERT_EQ(errors.size(), 2U);
  EXPECT_NE(errors[0].find("cuawait::nccl::broadcast (NCCL): ncclInvalidArgument"),
            std::string::npos)
      << errors[0];
  EXPECT_NE(errors[1].find("cuawait::nccl::all_reduce (NCCL): ncclInvalidArgument"),
            std::string::npos)
      << errors[1];
  EXPECT_EQ(statuses[0], static_cast<long long>(ncclInvalidArgument));
  EXPECT_EQ(statuses[1], static_cast<long long>(ncclInvalidArgument));
  // A refused call is not a failure of the communicator: it still works.
  EXPECT_FALSE(comms[0].aborted());
  ca::sync_wait(
      [&]() -> task<void> { co_await comms[0].all_reduce(buf.data, buf.data, 16, ncclSum, s); }());
  // A refused call inside a group: the group is ended; the error names the call (or
  // ncclGroupEnd, where NCCL defers the check to the end of the group).
  ca::sync_wait(named([&] {
    return comms[0].group(s, [&] { (void)comms[0].send(buf.data, 16, /*peer=*/5, s); });
  }));
  ASSERT_EQ(errors.size(), 3U);
  EXPECT_TRUE(errors[2].starts_with("cuawait::nccl::send (NCCL): ncclInvalidArgument") ||
              errors[2].starts_with("cuawait::nccl::group (ncclGroupEnd) (NCCL): "))
      << errors[2];
}

TEST(NcclCommunicator, AStopRequestAbortsTheCommunicatorAndEndsEveryWaitOnIt) {
  CUAWAIT_REQUIRE_GPU();
  ca::test::spin_control ctl;
  ASSERT_NE(ctl.device, nullptr);
  auto comms = one_rank();
  nccl::communicator& c = comms[0];
  cu::stream s;
  device_array<float> buf(1024);
  // The stream is held: the all-reduces behind the spin kernel cannot finish. The test takes
  // about 1.5 s alone and took 3.4 s with the GPU suite running in parallel, past the usual
  // bound of the kernel: it holds out ten times longer here, so that a slow abort is not
  // mistaken for waits that ended only because the kernel gave up.
  (void)s.launch(ca::test::spin_until_released_within, dim3(1), dim3(1), ctl.device, ctl.device + 1,
                 10 * ca::test::spin_bound_cycles);
  std::stop_source stop;
  bool cancelled = false;
  std::string other_error;
  auto stopped_wait = [&]() -> task<void> {
    try {
      co_await c.all_reduce(buf.data, buf.data, 1024, ncclSum, s).with_stop_token(stop.get_token());
    } catch (const ca::operation_cancelled&) {
      cancelled = true;
    }
  };
  auto other_wait = [&]() -> task<void> {
    try {
      co_await c.all_reduce(buf.data, buf.data, 1024, ncclSum, s); // no stop token
    } catch (const cu::library_error& e) {
      other_error = e.what();
    }
  };
  ca::completion_reactor& r = cu::current_context().reactor().reactor();
  std::thread stopper([&] {
    while (r.pending() < 2) { // both waits are suspended
      std::this_thread::yield();
    }
    stop.request_stop();
  });
  ca::sync_wait(ca::when_all(stopped_wait(), other_wait()));
  stopper.join();
  EXPECT_TRUE(cancelled);
  EXPECT_NE(other_error.find("cuawait::nccl::all_reduce (NCCL): communicator aborted"),
            std::string::npos)
      << other_error;
  EXPECT_EQ(ctl.outcome(), 0) << "the kernel finished: the waits did not end early";
  EXPECT_TRUE(c.aborted());
  ctl.release(); // before any call that may wait for the abort, which may wait for the GPU
  EXPECT_THROW((void)c.all_reduce(buf.data, buf.data, 1024, ncclSum, s), cu::library_error);
  s.sync();
  EXPECT_EQ(ctl.outcome(), 1);
}

} // namespace
