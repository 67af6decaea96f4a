// SPDX-License-Identifier: Apache-2.0
// A spread run's pieces without MPI: the shares of the ranks and the report round trip.

#include "distributed.hpp"

#include <gtest/gtest.h>

#include <set>
#include <stdexcept>

namespace ci = cuawait::images;

TEST(Distributed, TheSharesCoverEveryPositionOnceRoundRobin) {
  for (const int size : {1, 2, 3, 4, 7}) {
    std::set<std::size_t> seen;
    std::size_t total = 0;
    for (int rank = 0; rank < size; ++rank) {
      const std::vector<std::size_t> share = ci::share_of(10, rank, size);
      for (const std::size_t t : share) {
        EXPECT_EQ(t % static_cast<std::size_t>(size), static_cast<std::size_t>(rank));
        seen.insert(t);
      }
      total += share.size();
    }
    EXPECT_EQ(total, 10U) << size;
    EXPECT_EQ(seen.size(), 10U) << size;
  }
  EXPECT_TRUE(ci::share_of(2, 3, 4).empty()); // more ranks than images
}

TEST(Distributed, AReportReadsBackExactly) {
  ci::rank_report r;
  r.code = 1;
  r.fatal = "cannot write x:\nrename: Is a directory";
  r.images = 3;
  r.wall_start_us = 1733200000123456.5;
  r.wall_end_us = 1733200000987654.25;
  ci::job_outcome ok{true, "", R"({"file":"a b.png","width":2,"hog":[0.5,1e-07]})"};
  ci::job_outcome bad{true, "not an image: no PNG, JPEG or PGM/PPM signature", ""};
  ci::job_outcome stopped{false, "", ""};
  r.outcomes = {{0, ok}, {4, bad}, {8, stopped}};
  const ci::rank_report back = ci::decode_report(ci::encode_report(r));
  EXPECT_EQ(back.code, 1);
  EXPECT_EQ(back.fatal, "cannot write x: rename: Is a directory"); // one line
  EXPECT_EQ(back.images, 3U);
  EXPECT_EQ(back.wall_start_us, r.wall_start_us);
  EXPECT_EQ(back.wall_end_us, r.wall_end_us);
  ASSERT_EQ(back.outcomes.size(), 3U);
  EXPECT_EQ(back.outcomes[0].first, 0U);
  EXPECT_TRUE(back.outcomes[0].second.done);
  EXPECT_EQ(back.outcomes[0].second.record, ok.record);
  EXPECT_EQ(back.outcomes[1].first, 4U);
  EXPECT_EQ(back.outcomes[1].second.error, bad.error);
  EXPECT_EQ(back.outcomes[2].first, 8U);
  EXPECT_FALSE(back.outcomes[2].second.done);
  EXPECT_THROW((void)ci::decode_report("code 0\nnonsense here\n"), std::runtime_error);
}
