// SPDX-License-Identifier: Apache-2.0
// Explicit graphs: every node kind, graph against direct execution on random data (every
// element written and equal), parameter updates in place, refused updates with a reason,
// and awaiting a launch.

#include "common/gpu.hpp"

#include <cuawait/cuda/graph.hpp>
#include <cuawait/cuda/graph_exec.hpp>
#include <cuawait/sync_wait.hpp>
#include <cuawait/task.hpp>

#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <random>
#include <vector>

namespace {

namespace cu = cuawait::cuda;

__global__ void affine(const float* in, float* out, int n, float a, float b) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    out[i] = fmaf(in[i], a, b);
  }
}

//! Device memory of `n` floats, filled with NaN so that an element never written shows.
struct dev_floats {
  float* p = nullptr;
  explicit dev_floats(std::size_t n) {
    CUAWAIT_CUDA_CHECK("test", cudaMalloc(&p, n * sizeof(float)));
    CUAWAIT_CUDA_CHECK("test", cudaMemset(p, 0xff, n * sizeof(float)));
  }
  ~dev_floats() { (void)cudaFree(p); }
};
//! Pinned host memory of `n` floats.
struct host_floats {
  float* p = nullptr;
  std::size_t n;
  explicit host_floats(std::size_t count) : n(count) {
    CUAWAIT_CUDA_CHECK("test", cudaMallocHost(&p, n * sizeof(float)));
  }
  ~host_floats() { (void)cudaFreeHost(p); }
  void randomize(unsigned seed) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> d(-100.0f, 100.0f);
    for (std::size_t i = 0; i < n; ++i) {
      p[i] = d(rng);
    }
  }
  void poison() {
    for (std::size_t i = 0; i < n; ++i) {
      p[i] = std::nanf("");
    }
  }
};

constexpr int n = 100'003; // not a multiple of the block: tails must be written too
constexpr std::size_t bytes = n * sizeof(float);

void expect_affine(const host_floats& in, const host_floats& out, float a, float b) {
  for (int i = 0; i < n; ++i) {
    ASSERT_EQ(out.p[i], std::fmaf(in.p[i], a, b)) << "element " << i;
  }
}

//! copy in -> affine -> copy out, as a graph; the nodes are returned for updates.
struct pipeline_graph {
  cu::graph g;
  cu::graph_node h2d, kernel, d2h;
  pipeline_graph(float* dev_in, float* dev_out, const float* host_in, float* host_out, float a,
                 float b) {
    h2d = g.add_copy({}, dev_in, host_in, bytes);
    kernel = g.add_kernel({h2d}, affine, dim3(64), dim3(256), dev_in, dev_out, n, a, b);
    d2h = g.add_copy({kernel}, host_out, dev_out, bytes);
  }
};

TEST(Graph, ExplicitGraphMatchesDirectExecution) {
  CUAWAIT_REQUIRE_GPU();
  cu::stream s;
  host_floats in(n), out_graph(n), out_direct(n);
  in.randomize(1);
  out_graph.poison();
  out_direct.poison();
  dev_floats d_in(n), d_out(n), d_in2(n), d_out2(n);

  pipeline_graph pg(d_in.p, d_out.p, in.p, out_graph.p, 1.5f, -2.0f);
  EXPECT_EQ(pg.g.node_count(), 3u);
  cu::graph_exec exec = pg.g.instantiate();
  exec.launch(s);
  s.sync();

  CUAWAIT_CUDA_CHECK("test", cudaMemcpyAsync(d_in2.p, in.p, bytes, cudaMemcpyDefault, s.get()));
  affine<<<64, 256, 0, s.get()>>>(d_in2.p, d_out2.p, n, 1.5f, -2.0f);
  CUAWAIT_CUDA_CHECK("test",
                     cudaMemcpyAsync(out_direct.p, d_out2.p, bytes, cudaMemcpyDefault, s.get()));
  s.sync();
  expect_affine(in, out_graph, 1.5f, -2.0f);
  for (int i = 0; i < n; ++i) {
    ASSERT_EQ(out_graph.p[i], out_direct.p[i]) << "element " << i;
  }
}

TEST(Graph, AwaitingALaunchResumesAfterTheWholeGraph) {
  CUAWAIT_REQUIRE_GPU();
  cu::stream s;
  host_floats in(n), out(n);
  in.randomize(2);
  out.poison();
  dev_floats d_in(n), d_out(n);
  pipeline_graph pg(d_in.p, d_out.p, in.p, out.p, 2.0f, 1.0f);
  cu::graph_exec exec = pg.g.instantiate();
  cuawait::sync_wait([&]() -> cuawait::task<void> { co_await exec.launch(s); }());
  expect_affine(in, out, 2.0f, 1.0f); // no stream sync: the await is the synchronisation
}

TEST(Graph, SetKernelAndSetCopyChangeLaterLaunches) {
  CUAWAIT_REQUIRE_GPU();
  cu::stream s;
  host_floats in(n), in2(n), out(n), out2(n);
  in.randomize(3);
  in2.randomize(4);
  dev_floats d_in(n), d_out(n);
  pipeline_graph pg(d_in.p, d_out.p, in.p, out.p, 1.0f, 0.0f);
  cu::graph_exec exec = pg.g.instantiate();
  exec.set_kernel(pg.kernel, affine, dim3(32), dim3(128), d_in.p, d_out.p, n, 3.0f, 0.5f);
  exec.set_copy(pg.h2d, d_in.p, in2.p, bytes);
  exec.set_copy(pg.d2h, out2.p, d_out.p, bytes);
  out2.poison();
  exec.launch(s);
  s.sync();
  expect_affine(in2, out2, 3.0f, 0.5f);
}

TEST(Graph, UpdateFromAGraphOfTheSameShapeTakesItsParameters) {
  CUAWAIT_REQUIRE_GPU();
  cu::stream s;
  host_floats in(n), in2(n), out(n), out2(n);
  in.randomize(5);
  in2.randomize(6);
  dev_floats d_in(n), d_out(n), d_in2(n), d_out2(n);
  pipeline_graph first(d_in.p, d_out.p, in.p, out.p, 1.0f, 1.0f);
  cu::graph_exec exec = first.g.instantiate();
  pipeline_graph second(d_in2.p, d_out2.p, in2.p, out2.p, -1.0f, 4.0f);
  const cu::graph_update_result r = exec.try_update(second.g);
  EXPECT_TRUE(r.ok()) << r.reason();
  out2.poison();
  exec.launch(s);
  s.sync();
  expect_affine(in2, out2, -1.0f, 4.0f);
}

TEST(Graph, UpdateAcrossTopologiesIsRefusedWithAReason) {
  CUAWAIT_REQUIRE_GPU();
  cu::stream s;
  host_floats in(n), out(n);
  dev_floats d_in(n), d_out(n);
  pipeline_graph pg(d_in.p, d_out.p, in.p, out.p, 1.0f, 1.0f);
  cu::graph_exec exec = pg.g.instantiate();
  cu::graph other;
  auto k = other.add_kernel({}, affine, dim3(1), dim3(32), d_in.p, d_out.p, n, 1.0f, 1.0f);
  other.add_copy({k}, out.p, d_out.p, bytes);
  const cu::graph_update_result r = exec.try_update(other);
  EXPECT_FALSE(r.ok());
  EXPECT_STRNE(r.reason(), "updated");
  try {
    exec.update(other);
    ADD_FAILURE() << "update across topologies did not throw";
  } catch (const cu::graph_update_error& e) {
    EXPECT_EQ(e.code(), cudaErrorGraphExecUpdateFailure);
    EXPECT_NE(std::string(e.what()).find("graph update"), std::string::npos) << e.what();
    EXPECT_FALSE(e.update_result().ok());
  }
  // The executable graph is unchanged and still works.
  in.randomize(7);
  out.poison();
  exec.launch(s);
  s.sync();
  expect_affine(in, out, 1.0f, 1.0f);
}

TEST(Graph, MemsetHostEventAndChildNodes) {
  CUAWAIT_REQUIRE_GPU();
  cu::stream s;
  host_floats in(n), out(n);
  in.randomize(8);
  out.poison();
  dev_floats d_in(n), d_out(n);
  cudaEvent_t ev = nullptr;
  CUAWAIT_CUDA_CHECK("test", cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));

  pipeline_graph child(d_in.p, d_out.p, in.p, out.p, 0.5f, 0.25f);
  std::atomic<int> host_runs{0};
  cu::graph g;
  auto clear = g.add_memset({}, d_out.p, 0, bytes);
  auto body = g.add_child({clear}, child.g);
  auto rec = g.add_event_record({body}, ev);
  auto wait = g.add_event_wait({rec}, ev);
  g.add_host(wait, [&host_runs, keep = std::vector<int>(100, 1)] { host_runs += keep[0]; });
  EXPECT_EQ(g.node_count(), 5u);
  cu::graph_exec exec = g.instantiate();
  for (int i = 0; i < 3; ++i) {
    exec.launch(s);
  }
  s.sync();
  EXPECT_EQ(host_runs.load(), 3);
  expect_affine(in, out, 0.5f, 0.25f);
  EXPECT_EQ(cudaEventQuery(ev), cudaSuccess);
  exec = cu::graph_exec(); // the host callable outlives neither the graph nor the exec
  g = cu::graph();
  (void)cudaEventDestroy(ev);
}

TEST(Graph, HandlesAreMoveOnlyOwners) {
  CUAWAIT_REQUIRE_GPU();
  cu::graph g;
  g.add_host(
      {}, +[](void*) {}, nullptr);
  cu::graph moved = std::move(g);
  EXPECT_THROW((void)g.get(), cu::cuda_error) << "a moved-from graph gave out a handle";
  EXPECT_NE(moved.get(), nullptr);
  cu::graph copy = moved.clone();
  EXPECT_EQ(copy.node_count(), 1u);
  cu::graph_exec e = copy.instantiate();
  EXPECT_TRUE(static_cast<bool>(e));
  cu::graph_exec adopted = cu::graph_exec::from_native_handle(e.release());
  EXPECT_FALSE(static_cast<bool>(e));
  EXPECT_TRUE(static_cast<bool>(adopted));
  static_assert(!std::is_copy_constructible_v<cu::graph>);
  static_assert(!std::is_copy_constructible_v<cu::graph_exec>);
  static_assert(!std::is_constructible_v<cu::graph_exec, int>);
}

// A moved-from graph used as a child is refused before any CUDA call, naming the handle.
TEST(Graph, AMovedFromChildGraphIsRefusedNamingIt) {
  CUAWAIT_REQUIRE_GPU();
  cu::graph g;
  cu::graph empty = std::move(g); // `g` now holds no graph
  try {
    (void)empty.add_child({}, g);
    ADD_FAILURE() << "a moved-from child graph was accepted";
  } catch (const cu::cuda_error& e) {
    EXPECT_EQ(e.operation(), "use of a moved-from cuda::graph");
  }
  EXPECT_EQ(empty.node_count(), 0u) << "nothing was added";
}

} // namespace
