// SPDX-License-Identifier: Apache-2.0
// mpi::gather_to_root and mpi::launched_by_mpi, under mpiexec with 2 and 4 processes.

#include <cuawait/mpi/environment.hpp>
#include <cuawait/mpi/error.hpp>
#include <cuawait/mpi/gather.hpp>

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace {

namespace mpi = cuawait::mpi;

int world_rank() {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  return rank;
}

int world_size() {
  int size = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  return size;
}

// Rank r's text: r lines, so that rank 0's is empty and every length differs; a NUL and a
// newline inside, which must arrive unchanged.
std::string text_of(int rank) {
  std::string s;
  for (int i = 0; i < rank; ++i) {
    s += "rank " + std::to_string(rank) + " line " + std::to_string(i) + '\0' + '\n';
  }
  return s;
}

TEST(mpi_launched_by_mpi, true_under_mpiexec) { EXPECT_TRUE(mpi::launched_by_mpi()); }

TEST(mpi_gather_to_root, root_zero_gets_every_rank_in_rank_order) {
  const std::vector<std::string> all = mpi::gather_to_root(text_of(world_rank()));
  if (world_rank() != 0) {
    EXPECT_TRUE(all.empty());
    return;
  }
  ASSERT_EQ(all.size(), static_cast<std::size_t>(world_size()));
  for (int r = 0; r < world_size(); ++r) {
    EXPECT_EQ(all[static_cast<std::size_t>(r)], text_of(r)) << "rank " << r;
  }
}

TEST(mpi_gather_to_root, another_root_keeps_its_own_at_its_rank) {
  const int root = world_size() - 1;
  const std::vector<std::string> all = mpi::gather_to_root(text_of(world_rank()), root);
  if (world_rank() != root) {
    EXPECT_TRUE(all.empty());
    return;
  }
  ASSERT_EQ(all.size(), static_cast<std::size_t>(world_size()));
  for (int r = 0; r < world_size(); ++r) {
    EXPECT_EQ(all[static_cast<std::size_t>(r)], text_of(r)) << "rank " << r;
  }
}

TEST(mpi_gather_to_root, a_bad_root_throws_mpi_error_on_every_rank) {
  // MPI_COMM_WORLD returns errors (mpi::environment): the first call fails on every rank.
  EXPECT_THROW((void)mpi::gather_to_root("x", world_size()), mpi::mpi_error);
}

} // namespace

int main(int argc, char** argv) {
  mpi::environment env(argc, argv);
  ::testing::InitGoogleTest(&argc, argv);
  const int failed = RUN_ALL_TESTS();
  int any = 0;
  MPI_Allreduce(&failed, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  return any;
}
