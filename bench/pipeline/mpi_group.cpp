// SPDX-License-Identifier: Apache-2.0
#include "mpi_group.hpp"

#include <cuawait/mpi/error.hpp>
#include <cuawait/mpi/gather.hpp>

#include <cstdlib>

namespace cuawait::bench {
namespace {
constexpr const char* who = "cuawait-bench-pipeline: the processes of a spread run";
} // namespace

// The modes call no MPI: serialised calls from the main thread are all the run needs.
mpi_group::mpi_group(int& argc, char**& argv) : m_env(argc, argv, MPI_THREAD_SERIALIZED) {}

void mpi_group::barrier() { mpi::check(who, MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier"); }

bool mpi_group::all(bool mine) {
  int in = mine ? 1 : 0;
  int out = 0;
  mpi::check(who, MPI_Allreduce(&in, &out, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD), "MPI_Allreduce");
  return out == 1;
}

std::vector<std::string> mpi_group::gather(const std::string& mine) {
  return mpi::gather_to_root(mine, 0, MPI_COMM_WORLD);
}

void mpi_group::abort(int code) noexcept {
  MPI_Abort(MPI_COMM_WORLD, code);
  std::_Exit(code); // MPI_Abort does not return; if it did, this process still ends
}

} // namespace cuawait::bench
