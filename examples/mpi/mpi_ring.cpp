// SPDX-License-Identifier: Apache-2.0
// docs/MPI.md's example: each rank passes a vector round the ring, sums it with a
// nonblocking all-reduce, and gives up on a message that never comes after a deadline.
// Run: mpiexec -n 4 build/release/examples/mpi/example_mpi_ring

#include <cuawait/mpi.hpp>

#include <chrono>
#include <cstdio>
#include <vector>

namespace ca = cuawait;
namespace mpi = cuawait::mpi;
using namespace std::chrono_literals;

ca::task<double> ring_step(ca::thread_pool& pool, mpi::reactor& m, int rank, int size) {
  co_await pool.schedule(); // run on the pool; its idle workers poll MPI
  const int right = (rank + 1) % size;
  const int left = (rank + size - 1) % size;

  // A send and a receive at once; each starts when when_all awaits it.
  std::vector<double> out(1024, rank), in(1024);
  co_await ca::when_all(m.send(out, right, /*tag=*/0), m.recv(in, left, /*tag=*/0));

  // Any nonblocking MPI call: start() runs it when awaited and awaits its request.
  double sum = in[0];
  co_await m.start("allreduce", [&](MPI_Request& r) {
    return MPI_Iallreduce(MPI_IN_PLACE, &sum, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD, &r);
  });

  // A message nobody sends: at the deadline the receive is cancelled (MPI_Cancel), and the
  // coroutine resumes once MPI has let go of `never`: nullopt (a status if it had come).
  int never = 0;
  const auto st = co_await mpi::with_deadline(m.recv(&never, 1, MPI_INT, left, /*tag=*/1), 50ms);
  if (!st && rank == 0) {
    std::printf("no message on tag 1 within 50 ms: receive cancelled\n");
  }
  co_return sum;
}

int main(int argc, char** argv) {
  mpi::environment env(argc, argv); // MPI_Init_thread(MPI_THREAD_MULTIPLE), MPI_Finalize
  ca::thread_pool pool(2);
  mpi::reactor m;
  m.attach(pool);
  try {
    const double sum = ca::sync_wait(ring_step(pool, m, env.rank(), env.size()));
    if (env.rank() == 0) {
      std::printf("sum of ranks: %g\n", sum);
    }
  } catch (const mpi::mpi_error& e) { // names the operation and the MPI error
    std::fprintf(stderr, "rank %d: %s\n", env.rank(), e.what());
    m.detach();
    return 1;
  }
  m.detach();
  return 0;
}
