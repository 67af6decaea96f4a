// SPDX-License-Identifier: Apache-2.0
#include "mpi_group.hpp"

#include <cuawait/mpi/gather.hpp>

namespace cuawait::images {

mpi_group::mpi_group(int& argc, char**& argv) : m_env(argc, argv, MPI_THREAD_SERIALIZED) {}

std::vector<std::string> mpi_group::gather(const std::string& mine) {
  return mpi::gather_to_root(mine, 0, MPI_COMM_WORLD);
}

} // namespace cuawait::images
