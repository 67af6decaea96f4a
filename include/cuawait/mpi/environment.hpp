// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! `mpi::environment`: MPI started and finished by RAII, at a thread level cuawait can use.

#include <mpi.h>

namespace cuawait::mpi {

//! Initialises MPI (`MPI_Init_thread`) asking for `MPI_THREAD_MULTIPLE`, and finalises it
//! on destruction. If MPI is already initialised, it only checks the thread level and
//! leaves finalisation to whoever initialised it.
//!
//! Thread level: cuawait needs at least `MPI_THREAD_SERIALIZED` (idle pool workers of any
//! thread call `MPI_Testsome`). With `MPI_THREAD_MULTIPLE` user code may call MPI anywhere;
//! with `MPI_THREAD_SERIALIZED` every MPI call must go through an `mpi::reactor` (its
//! awaitables, or `reactor::serialized` for other calls), which serialises them.
//!
//! Errors: `MPI_COMM_WORLD` gets the `MPI_ERRORS_RETURN` handler, so that a failed
//! operation is reported to the coroutine awaiting it (as `mpi_error`) instead of aborting
//! the job. Communicators created from it inherit the handler.
class environment {
public:
  //! @throws mpi_error when MPI cannot be initialised, std::runtime_error when the thread
  //!         level it provides is below `MPI_THREAD_SERIALIZED` (MPI is finalised again
  //!         then, if this object initialised it).
  explicit environment(int& argc, char**& argv, int required = MPI_THREAD_MULTIPLE);
  //! Same, without command-line arguments.
  explicit environment(int required = MPI_THREAD_MULTIPLE);
  environment(const environment&) = delete;
  environment& operator=(const environment&) = delete;
  //! Calls `MPI_Finalize` if this object initialised MPI. Never throws.
  ~environment();

  //! The thread level MPI provides (`MPI_THREAD_SERIALIZED` or `MPI_THREAD_MULTIPLE`).
  [[nodiscard]] int thread_level() const noexcept { return m_provided; }
  //! This process's rank in `MPI_COMM_WORLD`.
  [[nodiscard]] int rank() const noexcept { return m_rank; }
  //! Size of `MPI_COMM_WORLD`.
  [[nodiscard]] int size() const noexcept { return m_size; }

private:
  void init(int* argc, char*** argv, int required);

  int m_provided = MPI_THREAD_SINGLE;
  int m_rank = 0;
  int m_size = 1;
  bool m_owner = false;
};

//! True when this process was started by an MPI launcher (`mpiexec`, `mpirun`, `srun` with
//! PMI): the launcher's variables are in its environment (Open MPI, PMIx, MPICH's Hydra,
//! MVAPICH). Calls no MPI function, so a program can start MPI only under a launcher and
//! run a plain start exactly as a build without MPI would.
[[nodiscard]] bool launched_by_mpi() noexcept;

//! Throws std::runtime_error unless MPI is initialised (and not finalised) at a thread
//! level of at least `MPI_THREAD_SERIALIZED`; returns that level.
int require_thread_level(const char* who);

} // namespace cuawait::mpi
