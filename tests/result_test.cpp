// SPDX-License-Identifier: Apache-2.0
// result<T, E>: value or error, the non-throwing form of an await.

#include "cuawait/result.hpp"

#include <gtest/gtest.h>

#include <stdexcept>
#include <string>

namespace {

using cuawait::error_tag;
using cuawait::result;

TEST(ResultTest, HoldsAValue) {
  result<int> r = 42;
  ASSERT_TRUE(r.has_value());
  EXPECT_TRUE(static_cast<bool>(r));
  EXPECT_EQ(r.value(), 42);
  EXPECT_EQ(*r, 42);
}

TEST(ResultTest, VoidSuccessByDefault) {
  result<void> r;
  EXPECT_TRUE(r.has_value());
  EXPECT_NO_THROW(r.value());
}

TEST(ResultTest, ExceptionErrorIsThrownByValue) {
  result<int, std::runtime_error> r(error_tag, std::runtime_error("bad"));
  ASSERT_FALSE(r.has_value());
  EXPECT_STREQ(r.error().what(), "bad");
  EXPECT_THROW((void)r.value(), std::runtime_error);
}

TEST(ResultTest, ExceptionPtrErrorRethrowsTheHeldException) {
  result<std::string> r(error_tag, std::make_exception_ptr(std::logic_error("held")));
  EXPECT_THROW((void)r.value(), std::logic_error);
}

TEST(ResultTest, NonExceptionErrorThrowsBadResultAccess) {
  result<int, int> r(error_tag, 7);
  EXPECT_EQ(r.error(), 7);
  EXPECT_THROW((void)r.value(), cuawait::bad_result_access);
}

TEST(ResultTest, MovesTheValueOut) {
  result<std::string> r(std::string(100, 'x'));
  const std::string s = std::move(r).value();
  EXPECT_EQ(s.size(), 100U);
}

#if __cplusplus >= 202302L && defined(__cpp_lib_expected)
TEST(ResultTest, ConvertsToStdExpected) {
  result<int, int> ok = 3;
  result<int, int> bad(error_tag, 9);
  std::expected<int, int> a = ok;
  std::expected<int, int> b = bad;
  EXPECT_EQ(a.value(), 3);
  EXPECT_EQ(b.error(), 9);
}
#endif

} // namespace
