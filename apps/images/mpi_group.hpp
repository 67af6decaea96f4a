// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! The `rank_group` of a run started by an MPI launcher (`mpiexec`, `mpirun`), on the
//! library's MPI layer. Built only where the build found MPI.

#include "distributed.hpp"

#include <cuawait/mpi/environment.hpp>

#include <memory>

namespace cuawait::images {

//! `MPI_COMM_WORLD` as a `rank_group`. Owns the MPI environment: MPI is finalised when it
//! is destroyed.
class mpi_group final : public rank_group {
public:
  //! Initialises MPI (`cuawait::mpi::environment`).
  //! @throws cuawait::mpi::mpi_error or std::runtime_error when MPI cannot be started
  mpi_group(int& argc, char**& argv);

  //! True when this process was started by an MPI launcher (`mpi::launched_by_mpi`). A
  //! plain start does not initialise MPI at all, so that a single-process run is the run of
  //! a build without MPI.
  [[nodiscard]] static bool launched_by_mpi() noexcept { return cuawait::mpi::launched_by_mpi(); }

  [[nodiscard]] int rank() const noexcept override { return m_env.rank(); }
  [[nodiscard]] int size() const noexcept override { return m_env.size(); }
  //! `mpi::gather_to_root` to rank 0 (blocking).
  [[nodiscard]] std::vector<std::string> gather(const std::string& mine) override;

private:
  cuawait::mpi::environment m_env;
};

} // namespace cuawait::images
