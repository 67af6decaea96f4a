// SPDX-License-Identifier: Apache-2.0
// Use after move: a moved-from stream, event, graph, graph_exec, device memory pool or stream
// lease (and a view
// copied from one) refuses every use with a cuda_error naming the handle, before any CUDA
// call, and nothing runs anywhere (in particular not on the legacy default stream); the
// moved-into handles work.

#include "common/gpu.hpp"

#include <cuawait/cuda/device_buffer.hpp>
#include <cuawait/cuda/event.hpp>
#include <cuawait/cuda/graph.hpp>
#include <cuawait/cuda/graph_exec.hpp>
#include <cuawait/cuda/memory_pool.hpp>
#include <cuawait/cuda/operation.hpp>
#include <cuawait/cuda/stream.hpp>
#include <cuawait/cuda/stream_pool.hpp>

#include <gtest/gtest.h>

#include <atomic>
#include <string>
#include <utility>
#include <vector>

namespace {

namespace cu = cuawait::cuda;

__global__ void bump(int* counter) { atomicAdd(counter, 1); }

//! One device int, zeroed.
struct device_int {
  int* p = nullptr;
  device_int() {
    CUAWAIT_CUDA_CHECK("test", cudaMalloc(&p, sizeof(int)));
    CUAWAIT_CUDA_CHECK("test", cudaMemset(p, 0, sizeof(int)));
  }
  ~device_int() { (void)cudaFree(p); }
  [[nodiscard]] int value() const {
    CUAWAIT_CUDA_CHECK("test", cudaDeviceSynchronize());
    int v = -1;
    CUAWAIT_CUDA_CHECK("test", cudaMemcpy(&v, p, sizeof(int), cudaMemcpyDeviceToHost));
    return v;
  }
};

//! The operation named by the cuda_error `f` throws, or why it did not fit.
template <class F>
std::string refusal(F&& f) {
  try {
    (void)f();
  } catch (const cu::cuda_error& e) {
    if (e.code() != cudaErrorInvalidResourceHandle) {
      return std::string("wrong code: ") + e.what();
    }
    return e.operation();
  } catch (...) {
    return "another exception";
  }
  return "no error";
}

constexpr const char* moved_stream = "use of a moved-from cuda::stream";
constexpr const char* moved_lease = "use of a moved-from cuda::stream_lease";
constexpr const char* moved_event = "use of a moved-from cuda::event";
constexpr const char* moved_graph = "use of a moved-from cuda::graph";
constexpr const char* moved_exec = "use of a moved-from cuda::graph_exec";
constexpr const char* moved_pool = "use of a moved-from cuda::device_memory_pool";

//! Every operation of `s` must be refused as `expected`, and none may reach the GPU.
void expect_every_operation_refused(cu::stream_ref s, const char* expected) {
  device_int counter;
  std::atomic<int> host_calls{0};
  bool enqueued = false;
  const cu::event ev;
  std::vector<int> host(4, 7);
  EXPECT_EQ(refusal([&] { return s.get(); }), expected);
  EXPECT_EQ(refusal([&] { return s.launch(bump, 1, 1, counter.p); }), expected);
  EXPECT_EQ(refusal([&] { return s.launch(cu::launch_config{}, bump, counter.p); }), expected);
  EXPECT_EQ(refusal([&] { return s.memset(counter.p, 0xff, 1); }), expected);
  EXPECT_EQ(refusal([&] { return s.copy(counter.p, host.data(), 1); }), expected);
  EXPECT_EQ(refusal([&] { return s.copy_2d(counter.p, 4, host.data(), 4, 1, 1); }), expected);
  EXPECT_EQ(refusal([&] { return s.host_func([&] { ++host_calls; }); }), expected);
  EXPECT_EQ(refusal([&] { return s.enqueue([&](cudaStream_t) { enqueued = true; }); }), expected);
  EXPECT_EQ(refusal([&] {
              s.record(ev);
              return 0;
            }),
            expected);
  EXPECT_EQ(refusal([&] {
              s.wait(ev);
              return 0;
            }),
            expected);
  EXPECT_EQ(refusal([&] {
              s.sync();
              return 0;
            }),
            expected);
  EXPECT_EQ(refusal([&] { return s.ready(); }), expected);
  EXPECT_EQ(refusal([&] { return s.priority(); }), expected);
  EXPECT_EQ(refusal([&] { return s.device(); }), expected);
  EXPECT_EQ(refusal([&] { return s.operator co_await(); }), expected);
  EXPECT_EQ(refusal([&] { return s.drain(); }), expected);
  // Nothing ran, on the legacy default stream or elsewhere.
  EXPECT_EQ(counter.value(), 0);
  EXPECT_EQ(host_calls.load(), 0);
  EXPECT_FALSE(enqueued);
}

class MovedFromTest : public ::testing::Test {
protected:
  void SetUp() override { CUAWAIT_REQUIRE_GPU(); }
};

TEST_F(MovedFromTest, AMovedFromStreamRefusesEveryOperation) {
  cu::stream from;
  const cu::stream to(std::move(from));
  expect_every_operation_refused(from, moved_stream); // NOLINT(bugprone-use-after-move)
  EXPECT_FALSE(from.owns_handle());                   // NOLINT(bugprone-use-after-move)
}

TEST_F(MovedFromTest, AViewOfAMovedFromStreamRefusesAndAnEarlierViewStillWorks) {
  cu::stream from;
  const cu::stream_ref before = from;
  cu::stream to(std::move(from));
  const cu::stream_ref after = from; // NOLINT(bugprone-use-after-move)
  expect_every_operation_refused(after, moved_stream);
  device_int counter;
  (void)before.launch(bump, 1, 1, counter.p); // `before` names the stream `to` owns now
  EXPECT_EQ(counter.value(), 1);
  EXPECT_EQ(before, cu::stream_ref(to));
}

TEST_F(MovedFromTest, AReleasedStreamRefuses) {
  cu::stream s;
  const cudaStream_t raw = s.release();
  expect_every_operation_refused(s, moved_stream);
  CUAWAIT_CUDA_CHECK("test", cudaStreamDestroy(raw));
}

TEST_F(MovedFromTest, AMovedIntoStreamWorks) {
  cu::stream first;
  cu::stream second(std::move(first));
  device_int counter;
  (void)second.launch(bump, 1, 1, counter.p);
  first = std::move(second); // move-assigning into a moved-from stream is fine
  (void)first.launch(bump, 1, 1, counter.p);
  first.sync();
  EXPECT_EQ(counter.value(), 2);
  expect_every_operation_refused(second, moved_stream); // NOLINT(bugprone-use-after-move)
}

TEST_F(MovedFromTest, MoveAssignmentReplacesALiveStream) {
  cu::stream a;
  cu::stream b;
  const cudaStream_t b_native = b.get();
  a = std::move(b); // destroys a's stream
  EXPECT_EQ(a.get(), b_native);
  device_int counter;
  (void)a.launch(bump, 1, 1, counter.p);
  EXPECT_EQ(counter.value(), 1);
}

TEST_F(MovedFromTest, AMovedFromEventRefusesEveryUse) {
  cu::event from;
  cu::event to(std::move(from));
  const cu::event_ref view = from; // NOLINT(bugprone-use-after-move)
  const cu::stream s;
  EXPECT_EQ(refusal([&] { return from.get(); }), moved_event);
  EXPECT_EQ(refusal([&] { return view.get(); }), moved_event);
  EXPECT_EQ(refusal([&] {
              s.record(from);
              return 0;
            }),
            moved_event);
  EXPECT_EQ(refusal([&] {
              s.wait(view);
              return 0;
            }),
            moved_event);
  EXPECT_EQ(refusal([&] { return view.ready(); }), moved_event);
  EXPECT_EQ(refusal([&] {
              view.sync();
              return 0;
            }),
            moved_event);
  EXPECT_EQ(refusal([&] { return operator co_await(view); }), moved_event);
  // The moved-into event works, and so does one move-assigned into the moved-from one.
  device_int counter;
  (void)s.launch(bump, 1, 1, counter.p);
  s.record(to);
  to.sync();
  EXPECT_TRUE(to.ready());
  from = std::move(to);
  s.record(from);
  from.sync();
  EXPECT_EQ(counter.value(), 1);
}

// A moved-from pool refuses to allocate (no buffer comes out of a null pool) and to report;
// the moved-into pool allocates on the same device, and a pool move-assigned into the
// moved-from one works too.
TEST_F(MovedFromTest, AMovedFromMemoryPoolRefusesEveryUseAndTheMovedIntoOneAllocates) {
  const cu::stream s;
  cu::device_memory_pool from;
  const int device = from.device();
  cu::device_memory_pool to(std::move(from));
  EXPECT_FALSE(
      from.owns_handle()); // NOLINT(bugprone-use-after-move): checking the moved-from state
  EXPECT_TRUE(to.owns_handle());
  EXPECT_EQ(to.device(), device);
  EXPECT_EQ(refusal([&] { return from.get(); }), moved_pool);
  EXPECT_EQ(refusal([&] { return cu::device_buffer<int>(16, s, from); }), moved_pool);
  EXPECT_EQ(refusal([&] { return from.reserved_bytes(); }), moved_pool);
  EXPECT_EQ(refusal([&] { return from.used_bytes(); }), moved_pool);
  EXPECT_EQ(refusal([&] {
              from.trim_to(0);
              return 0;
            }),
            moved_pool);
  EXPECT_EQ(refusal([&] {
              from.set_release_threshold(0);
              return 0;
            }),
            moved_pool);
  {
    const cu::device_buffer<int> b(16, s, to);
    EXPECT_NE(b.data(), nullptr);
    EXPECT_GE(to.used_bytes(), 16 * sizeof(int));
  }
  from = cu::device_memory_pool{};
  const cu::device_buffer<int> again(16, s, from);
  EXPECT_NE(again.data(), nullptr);
  s.sync();
}

TEST_F(MovedFromTest, AMovedFromGraphRefusesEveryUse) {
  device_int counter;
  cu::graph from;
  (void)from.add_kernel({}, bump, dim3(1), dim3(1), counter.p);
  cu::graph to(std::move(from));
  cu::graph other;
  EXPECT_EQ(refusal([&] { return from.get(); }), moved_graph);
  EXPECT_EQ(refusal([&] { return from.node_count(); }), moved_graph);
  EXPECT_EQ(refusal([&] { return from.clone(); }), moved_graph);
  EXPECT_EQ(refusal([&] { return from.instantiate(); }), moved_graph);
  EXPECT_EQ(refusal([&] { return from.add_kernel({}, bump, dim3(1), dim3(1), counter.p); }),
            moved_graph);
  EXPECT_EQ(refusal([&] { return from.add_memset({}, counter.p, 0xff, sizeof(int)); }),
            moved_graph);
  EXPECT_EQ(refusal([&] { return from.add_host({}, [] {}); }), moved_graph);
  EXPECT_EQ(refusal([&] { return other.add_child({}, from); }), moved_graph);
  EXPECT_EQ(other.node_count(), 0u);
  // The moved-into graph works.
  EXPECT_EQ(to.node_count(), 1u);
  const cu::stream s;
  (void)to.instantiate().launch(s);
  s.sync();
  EXPECT_EQ(counter.value(), 1);
}

TEST_F(MovedFromTest, AMovedFromGraphExecRefusesToLaunchAndNothingRuns) {
  device_int counter;
  cu::graph g;
  (void)g.add_kernel({}, bump, dim3(1), dim3(1), counter.p);
  cu::graph_exec from = g.instantiate();
  cu::graph_exec to(std::move(from));
  const cu::stream s;
  EXPECT_FALSE(from); // NOLINT(bugprone-use-after-move)
  EXPECT_EQ(refusal([&] { return from.get(); }), moved_exec);
  EXPECT_EQ(refusal([&] { return from.launch(s); }), moved_exec);
  EXPECT_EQ(refusal([&] { return from.launch(cu::stream_ref{cudaStream_t{}}); }), moved_exec);
  EXPECT_EQ(refusal([&] {
              from.upload(s);
              return 0;
            }),
            moved_exec);
  EXPECT_EQ(refusal([&] { return from.try_update(g); }), moved_exec);
  EXPECT_EQ(counter.value(), 0);
  // The moved-into one launches; one move-assigned into the moved-from one too.
  ASSERT_TRUE(to);
  (void)to.launch(s);
  from = std::move(to);
  (void)from.launch(s);
  s.sync();
  EXPECT_EQ(counter.value(), 2);
}

TEST_F(MovedFromTest, AGraphExecRefusesAMovedFromStream) {
  device_int counter;
  cu::graph g;
  (void)g.add_kernel({}, bump, dim3(1), dim3(1), counter.p);
  const cu::graph_exec exec = g.instantiate();
  cu::stream from;
  const cu::stream to(std::move(from));
  EXPECT_EQ(refusal([&] { return exec.launch(from); }), moved_stream); // NOLINT
  EXPECT_EQ(refusal([&] {
              exec.upload(from); // NOLINT(bugprone-use-after-move)
              return 0;
            }),
            moved_stream);
  EXPECT_EQ(counter.value(), 0);
}

TEST_F(MovedFromTest, AnEmptyGraphExecIsNotMovedFrom) {
  const cu::graph_exec empty;
  EXPECT_FALSE(empty);
  EXPECT_EQ(empty.get(), nullptr);
}

TEST_F(MovedFromTest, AMovedLeaseRefusesAndTheMovedIntoLeaseWorks) {
  cu::stream_pool pool(1);
  auto first = pool.try_acquire();
  ASSERT_TRUE(first);
  cu::stream_lease from = std::move(*first);
  cu::stream_lease to = std::move(from);
  EXPECT_FALSE(from.holds()); // NOLINT(bugprone-use-after-move)
  expect_every_operation_refused(from, moved_lease);
  device_int counter;
  (void)to.launch(bump, 1, 1, counter.p);
  EXPECT_EQ(counter.value(), 1);
  EXPECT_EQ(to.get(), pool.at(0).get());
}

TEST_F(MovedFromTest, AResetLeaseForgetsItsStreamWhichMayBeLeasedAgain) {
  cu::stream_pool pool(1);
  auto lease = pool.try_acquire();
  ASSERT_TRUE(lease);
  lease->reset();
  EXPECT_FALSE(lease->holds());
  auto next = pool.try_acquire(); // the same stream, now leased to someone else
  ASSERT_TRUE(next);
  expect_every_operation_refused(*lease, moved_lease);
  lease->reset(); // resetting again is fine
  // Move-assigning a live lease into the reset one works.
  *lease = std::move(*next);
  device_int counter;
  (void)lease->launch(bump, 1, 1, counter.p);
  EXPECT_EQ(counter.value(), 1);
  expect_every_operation_refused(*next, moved_lease);
}

} // namespace
