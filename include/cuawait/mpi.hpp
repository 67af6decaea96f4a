// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! Umbrella header of the MPI layer (target cuawait::mpi, CUDA-free): the core and every
//! MPI header. See docs/MPI.md.

#include "cuawait/cuawait.hpp"
#include "cuawait/mpi/datatype.hpp"
#include "cuawait/mpi/deadline.hpp"
#include "cuawait/mpi/environment.hpp"
#include "cuawait/mpi/error.hpp"
#include "cuawait/mpi/gather.hpp"
#include "cuawait/mpi/reactor.hpp"
#include "cuawait/mpi/request.hpp"
