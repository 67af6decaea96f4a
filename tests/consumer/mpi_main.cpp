// SPDX-License-Identifier: Apache-2.0
// Built (not run) against cuawait::mpi when the installed cuawait has the mpi component.
#include <cuawait/mpi.hpp>

#include <cstdio>

int main(int argc, char** argv) {
  cuawait::mpi::environment env(argc, argv);
  cuawait::thread_pool pool(1);
  cuawait::mpi::reactor m;
  m.attach(pool);
  int value = env.rank();
  cuawait::sync_wait([&]() -> cuawait::task<void> {
    co_await m.start("allreduce", [&](MPI_Request& r) {
      return MPI_Iallreduce(MPI_IN_PLACE, &value, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD, &r);
    });
  }());
  m.detach();
  std::printf("consumer_mpi: %d\n", value);
  return 0;
}
