// SPDX-License-Identifier: Apache-2.0
#include "cuawait/mpi/environment.hpp"

#include "cuawait/mpi/error.hpp"

#include <cstdlib>
#include <stdexcept>
#include <string>

namespace cuawait::mpi {

namespace {

const char* level_name(int level) noexcept {
  switch (level) {
  case MPI_THREAD_SINGLE:
    return "MPI_THREAD_SINGLE";
  case MPI_THREAD_FUNNELED:
    return "MPI_THREAD_FUNNELED";
  case MPI_THREAD_SERIALIZED:
    return "MPI_THREAD_SERIALIZED";
  case MPI_THREAD_MULTIPLE:
    return "MPI_THREAD_MULTIPLE";
  default:
    return "an unknown thread level";
  }
}

} // namespace

bool launched_by_mpi() noexcept {
  for (const char* name :
       {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_SIZE", "PMI_RANK", "MV2_COMM_WORLD_SIZE"}) {
    if (std::getenv(name) != nullptr) {
      return true;
    }
  }
  return false;
}

int require_thread_level(const char* who) {
  int initialized = 0;
  int finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (initialized == 0 || finalized != 0) {
    throw std::runtime_error(std::string(who) +
                             ": MPI is not initialised (create a cuawait::mpi::environment)");
  }
  int provided = MPI_THREAD_SINGLE;
  check(who, MPI_Query_thread(&provided), "MPI_Query_thread");
  if (provided < MPI_THREAD_SERIALIZED) {
    throw std::runtime_error(std::string(who) + ": MPI provides " + level_name(provided) +
                             "; cuawait needs MPI_THREAD_SERIALIZED or MPI_THREAD_MULTIPLE");
  }
  return provided;
}

environment::environment(int& argc, char**& argv, int required) { init(&argc, &argv, required); }

environment::environment(int required) { init(nullptr, nullptr, required); }

void environment::init(int* argc, char*** argv, int required) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (initialized == 0) {
    check("cuawait::mpi::environment", MPI_Init_thread(argc, argv, required, &m_provided),
          "MPI_Init_thread");
    m_owner = true;
  }
  try {
    m_provided = require_thread_level("cuawait::mpi::environment");
    check("cuawait::mpi::environment", MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN),
          "MPI_Comm_set_errhandler");
    check("cuawait::mpi::environment", MPI_Comm_rank(MPI_COMM_WORLD, &m_rank), "MPI_Comm_rank");
    check("cuawait::mpi::environment", MPI_Comm_size(MPI_COMM_WORLD, &m_size), "MPI_Comm_size");
  } catch (...) {
    if (m_owner) {
      MPI_Finalize();
    }
    throw;
  }
}

environment::~environment() {
  if (m_owner) {
    MPI_Finalize();
  }
}

} // namespace cuawait::mpi
