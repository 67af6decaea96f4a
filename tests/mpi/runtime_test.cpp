// SPDX-License-Identifier: Apache-2.0
// A runtime polls an MPI reactor on its own pool workers when given it in
// `runtime_options::idle_sources`: no idle_source_set, no waker, no attach, no progress
// thread. Nothing else polls the reactor here, so a missing wire hangs and the test times
// out. The runtime is made with `cuda::no_device`, so the test runs on machines without a
// GPU (CI). Run under mpiexec with 2 and 4 ranks (tests/mpi/CMakeLists.txt).

#include <cuawait/mpi.hpp>
#include <cuawait/runtime.hpp>

#include <cstdio>
#include <thread>
#include <vector>

namespace {

namespace ca = cuawait;
namespace mpi = cuawait::mpi;

int failures = 0;

void expect(bool ok, const char* what, int rank) {
  if (!ok) {
    std::printf("runtime_test: rank %d: FAIL: %s\n", rank, what);
    ++failures;
  }
}

struct ring {
  int rank;
  int size;
  [[nodiscard]] int left() const { return (rank + size - 1) % size; }
  [[nodiscard]] int right() const { return (rank + 1) % size; }
};

//! A ring exchange of `n` ints with tag `tag`, awaited on the runtime's pool.
ca::task<bool> exchange(ca::runtime& rt, mpi::reactor& m, ring w, int tag, int n) {
  co_await rt.pool().schedule();
  std::vector<int> out(n, w.rank * 1000 + tag);
  std::vector<int> in(n, -1);
  co_await ca::when_all(m.send(out, w.right(), tag), m.recv(in, w.left(), tag));
  bool ok = rt.pool().on_worker_thread(); // resumed by the worker that polled MPI
  for (int v : in) {
    ok = ok && v == w.left() * 1000 + tag;
  }
  co_return ok;
}

} // namespace

int main(int argc, char** argv) {
  mpi::environment env(argc, argv);
  const ring w{env.rank(), env.size()};
  {
    mpi::reactor m; // polled by nobody but the runtime's workers
    ca::runtime rt(
        ca::runtime_options{.threads = 2, .device = ca::cuda::no_device, .idle_sources = {&m}});

    // One exchange from the run loop's coroutine, through the pool.
    expect(rt.run(exchange(rt, m, w, /*tag=*/1, /*n=*/4)), "ring exchange", w.rank);

    // Many at once from spawned tasks (message sizes past the eager limit included).
    std::vector<int> results(16, 0);
    for (int i = 0; i < 16; ++i) {
      rt.spawn([](ca::runtime& r, mpi::reactor& mr, ring wr, int i, int& out) -> ca::task<void> {
        out = co_await exchange(r, mr, wr, 10 + i, i % 2 == 0 ? 8 : 1 << 16) ? 1 : 2;
      }(rt, m, w, i, results[static_cast<std::size_t>(i)]));
    }
    rt.join_spawned();
    for (int r : results) {
      expect(r == 1, "spawned ring exchange", w.rank);
    }

    // A nonblocking collective through start().
    const int sum = rt.run([](ca::runtime& r, mpi::reactor& mr) -> ca::task<int> {
      co_await r.pool().schedule();
      int v = 0;
      MPI_Comm_rank(MPI_COMM_WORLD, &v);
      co_await mr.start("allreduce", [&](MPI_Request& req) {
        return MPI_Iallreduce(MPI_IN_PLACE, &v, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD, &req);
      });
      co_return v;
    }(rt, m));
    expect(sum == w.size * (w.size - 1) / 2, "allreduce", w.rank);
    expect(m.pending() == 0, "nothing left pending", w.rank);
  } // the runtime unwires the reactor before it goes

  int all = 0;
  MPI_Allreduce(&failures, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (w.rank == 0) {
    std::printf(all == 0 ? "runtime_test: all %d ranks ok\n" : "runtime_test: %d failures\n",
                all == 0 ? w.size : all);
  }
  return all == 0 ? 0 : 1;
}
