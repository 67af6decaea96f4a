// SPDX-License-Identifier: Apache-2.0
#include "mpi_group.hpp"

#include <cuawait/mpi/error.hpp>

#include <algorithm>
#include <cstdint>
#include <cstdlib>

namespace cuawait::images {
namespace {

constexpr const char* who = "cuawait-images: gathering the ranks' results";
constexpr int report_tag = 7301;
constexpr std::size_t piece = std::size_t{1} << 30;

} // namespace

mpi_group::mpi_group(int& argc, char**& argv) : m_env(argc, argv, MPI_THREAD_SERIALIZED) {}

bool mpi_group::launched_by_mpi() noexcept {
  // Open MPI, PMIx launchers, MPICH's Hydra and MVAPICH set these in every rank.
  for (const char* name :
       {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_SIZE", "PMI_RANK", "MV2_COMM_WORLD_SIZE"}) {
    if (std::getenv(name) != nullptr) {
      return true;
    }
  }
  return false;
}

std::vector<std::string> mpi_group::gather(const std::string& mine) {
  const int root = 0;
  std::uint64_t n = mine.size();
  std::vector<std::uint64_t> sizes(rank() == root ? static_cast<std::size_t>(size()) : 0);
  mpi::check(who,
             MPI_Gather(&n, 1, MPI_UINT64_T, sizes.data(), 1, MPI_UINT64_T, root, MPI_COMM_WORLD),
             "MPI_Gather");
  std::vector<std::string> all;
  if (rank() != root) {
    for (std::size_t at = 0; at < mine.size(); at += piece) {
      const auto count = static_cast<int>(std::min(piece, mine.size() - at));
      mpi::check(who, MPI_Send(mine.data() + at, count, MPI_CHAR, root, report_tag, MPI_COMM_WORLD),
                 "MPI_Send");
    }
    return all;
  }
  all.resize(sizes.size());
  all[0] = mine;
  for (std::size_t r = 1; r < sizes.size(); ++r) {
    all[r].resize(sizes[r]);
    for (std::size_t at = 0; at < all[r].size(); at += piece) {
      const auto count = static_cast<int>(std::min(piece, all[r].size() - at));
      mpi::check(who,
                 MPI_Recv(all[r].data() + at, count, MPI_CHAR, static_cast<int>(r), report_tag,
                          MPI_COMM_WORLD, MPI_STATUS_IGNORE),
                 "MPI_Recv");
    }
  }
  return all;
}

} // namespace cuawait::images
