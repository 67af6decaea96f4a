// SPDX-License-Identifier: Apache-2.0
#include "cuawait/mpi/gather.hpp"

#include "cuawait/mpi/error.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdint>

namespace cuawait::mpi {
namespace {

constexpr const char* who = "cuawait::mpi::gather_to_root";
constexpr int gather_tag = 7301;
constexpr std::size_t piece = std::size_t{1} << 30;

int piece_at(std::size_t size, std::size_t at) {
  return static_cast<int>(std::min(piece, size - at));
}

} // namespace

std::vector<std::string> gather_to_root(const std::string& mine, int root, MPI_Comm comm) {
  int rank = 0;
  int size = 1;
  check(who, MPI_Comm_rank(comm, &rank), "MPI_Comm_rank");
  check(who, MPI_Comm_size(comm, &size), "MPI_Comm_size");
  std::uint64_t n = mine.size();
  std::vector<std::uint64_t> sizes(rank == root ? static_cast<std::size_t>(size) : 0);
  check(who, MPI_Gather(&n, 1, MPI_UINT64_T, sizes.data(), 1, MPI_UINT64_T, root, comm),
        "MPI_Gather");
  std::vector<std::string> all;
  if (rank != root) {
    for (std::size_t at = 0; at < mine.size(); at += piece) {
      check(who,
            MPI_Send(mine.data() + at, piece_at(mine.size(), at), MPI_CHAR, root, gather_tag, comm),
            "MPI_Send");
    }
    return all;
  }
  all.resize(sizes.size());
  for (std::size_t r = 0; r < sizes.size(); ++r) {
    if (static_cast<int>(r) == root) {
      all[r] = mine;
      continue;
    }
    all[r].resize(sizes[r]);
    for (std::size_t at = 0; at < all[r].size(); at += piece) {
      check(who,
            MPI_Recv(all[r].data() + at, piece_at(all[r].size(), at), MPI_CHAR, static_cast<int>(r),
                     gather_tag, comm, MPI_STATUS_IGNORE),
            "MPI_Recv");
    }
  }
  return all;
}

} // namespace cuawait::mpi
