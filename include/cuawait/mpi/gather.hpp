// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! `mpi::gather_to_root`: every rank's bytes to one rank, blocking. For the report each
//! process of a program spread over MPI sends at the end of its run (cuawait-images,
//! cuawait-bench-pipeline), where a coroutine has nothing left to overlap it with.

#include <mpi.h>

#include <string>
#include <vector>

namespace cuawait::mpi {

//! Collective and blocking over `comm`: every rank gives `mine`, of any length; `root` gets
//! every rank's, in rank order (its own at its rank), the others an empty vector. The sizes
//! travel first (`MPI_Gather`), then each rank's bytes in pieces of at most 1 GiB (MPI counts
//! are `int`).
//!
//! It calls MPI directly, not through a reactor: under `MPI_THREAD_SERIALIZED`, call it
//! where no other thread calls MPI (before a reactor's pool starts or after it stopped).
//! @throws mpi_error when an MPI call fails (`comm` returning errors, as
//!         `mpi::environment` sets `MPI_COMM_WORLD` to)
[[nodiscard]] std::vector<std::string> gather_to_root(const std::string& mine, int root = 0,
                                                      MPI_Comm comm = MPI_COMM_WORLD);

} // namespace cuawait::mpi
