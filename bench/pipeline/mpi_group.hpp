// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! The `process_group` of a run started by an MPI launcher (`mpiexec`, `mpirun`), on the
//! library's MPI layer. Built only where the build has it (CUAWAIT_BENCH_MPI).

#include "spread.hpp"

#include <cuawait/mpi/environment.hpp>

namespace cuawait::bench {

//! `MPI_COMM_WORLD` as a `process_group`. Owns the MPI environment: MPI is finalised when
//! it is destroyed. Only the main thread calls MPI, between mode runs.
class mpi_group final : public process_group {
public:
  //! Initialises MPI (`cuawait::mpi::environment`).
  //! @throws cuawait::mpi::mpi_error or std::runtime_error when MPI cannot be started
  mpi_group(int& argc, char**& argv);

  [[nodiscard]] int rank() const noexcept override { return m_env.rank(); }
  [[nodiscard]] int size() const noexcept override { return m_env.size(); }
  void barrier() override;
  [[nodiscard]] bool all(bool mine) override;
  //! `mpi::gather_to_root` to rank 0.
  [[nodiscard]] std::vector<std::string> gather(const std::string& mine) override;
  //! Ends every process of the job (`MPI_Abort`): for a rank that cannot go on while the
  //! others wait for it in a collective.
  [[noreturn]] static void abort(int code) noexcept;

private:
  cuawait::mpi::environment m_env;
};

} // namespace cuawait::bench
