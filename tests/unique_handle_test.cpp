// SPDX-License-Identifier: Apache-2.0
// unique_handle, the owner of every CUDA handle, with fake traits: a move leaves the
// moved-from sentinel (never null), using a moved-from handle throws the error naming it,
// each handle is destroyed exactly once, and a view copied from a moved-from owner refuses.

#include <cuawait/cuda/detail/unique_handle.hpp>

#include <gtest/gtest.h>

#include <cstdint>
#include <source_location>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace {

namespace cd = cuawait::cuda::detail;

struct fake_resource {
  int id = 0;
};
using fake_handle = fake_resource*;

// Handles destroyed so far, in order.
std::vector<fake_handle>& destroyed() {
  static std::vector<fake_handle> d;
  return d;
}

// Shared by both traits below: the sentinel and the error, like the CUDA traits.
template <class Derived>
struct fake_traits_base {
  using handle_type = fake_handle;
  static fake_handle moved_from() noexcept { return cd::sentinel_handle<fake_handle>(); }
  static bool is_moved_from(fake_handle h) noexcept { return cd::is_sentinel_handle(h); }
  static void destroy(fake_handle h) noexcept { destroyed().push_back(h); }
  [[noreturn]] static void throw_moved_from(fake_handle /*h*/, std::source_location /*where*/) {
    throw std::logic_error(std::string("use of a moved-from ") + Derived::name);
  }
};

// A handle without a view (like graph and graph_exec).
struct holder_traits : fake_traits_base<holder_traits>, cd::handle_holder_access {
  using base_type = cd::handle_holder<fake_handle>;
  static constexpr const char* name = "fake::holder";
};

class fake_owner : public cd::unique_handle<holder_traits> {
public:
  explicit fake_owner(fake_handle h) noexcept : unique_handle(h) {}
  [[nodiscard]] fake_handle get() const { return checked_handle(); }
};

// A handle with a non-owning view that stores it (like stream and stream_ref).
class fake_view;
struct view_traits : fake_traits_base<view_traits> {
  using base_type = fake_view;
  static constexpr const char* name = "fake::stream";
  static fake_handle& storage(fake_view& v) noexcept;
};

class fake_view {
public:
  constexpr fake_view() noexcept = default;
  fake_view(fake_handle h) noexcept : m_handle(h) {} // NOLINT: implicit like stream_ref
  [[nodiscard]] fake_handle get() const { return cd::checked<view_traits>(m_handle); }

private:
  friend struct view_traits;
  fake_handle m_handle = nullptr;
};

fake_handle& view_traits::storage(fake_view& v) noexcept { return v.m_handle; }

using fake_stream = cd::unique_handle<view_traits>;

std::string error_of(const auto& f) {
  try {
    (void)f();
  } catch (const std::logic_error& e) {
    return e.what();
  }
  return "no error";
}

class UniqueHandle : public ::testing::Test {
protected:
  void SetUp() override { destroyed().clear(); }
  fake_resource a{1};
  fake_resource b{2};
};

TEST_F(UniqueHandle, CostsOneHandleAndIsMoveOnly) {
  static_assert(sizeof(fake_owner) == sizeof(fake_handle));
  static_assert(sizeof(fake_stream) == sizeof(fake_view));
  static_assert(!std::is_copy_constructible_v<fake_owner>);
  static_assert(!std::is_copy_assignable_v<fake_owner>);
  static_assert(std::is_nothrow_move_constructible_v<fake_owner>);
  static_assert(std::is_nothrow_move_assignable_v<fake_owner>);
  static_assert(std::is_nothrow_move_constructible_v<fake_stream>);
}

TEST_F(UniqueHandle, DestroysItsHandleOnce) {
  {
    const fake_owner o(&a);
    EXPECT_EQ(o.get(), &a);
    EXPECT_TRUE(o.owns_handle());
  }
  EXPECT_EQ(destroyed(), std::vector<fake_handle>{&a});
}

TEST_F(UniqueHandle, MoveLeavesTheSentinelNotNull) {
  fake_owner from(&a);
  const fake_owner to(std::move(from));
  EXPECT_EQ(to.get(), &a);
  EXPECT_FALSE(from.owns_handle()); // NOLINT(bugprone-use-after-move): the point of the test
  EXPECT_TRUE(destroyed().empty());
}

TEST_F(UniqueHandle, UsingAMovedFromHandleThrowsTheNamedError) {
  fake_owner from(&a);
  const fake_owner to(std::move(from));
  EXPECT_EQ(error_of([&] { return from.get(); }), // NOLINT(bugprone-use-after-move)
            "use of a moved-from fake::holder");
}

TEST_F(UniqueHandle, MoveAssignmentDestroysTheOldHandleAndTakesTheNew) {
  fake_owner target(&a);
  fake_owner source(&b);
  target = std::move(source);
  EXPECT_EQ(destroyed(), std::vector<fake_handle>{&a});
  EXPECT_EQ(target.get(), &b);
  EXPECT_FALSE(source.owns_handle()); // NOLINT(bugprone-use-after-move)
}

TEST_F(UniqueHandle, MoveAssigningIntoAMovedFromHandleRevivesIt) {
  fake_owner first(&a);
  const fake_owner keeper(std::move(first));
  first = fake_owner(&b); // NOLINT(bugprone-use-after-move): assignment into it is fine
  EXPECT_TRUE(first.owns_handle());
  EXPECT_EQ(first.get(), &b);
  EXPECT_TRUE(destroyed().empty()); // the sentinel is never destroyed
}

TEST_F(UniqueHandle, DestroyingMovedFromHandlesDestroysNothing) {
  {
    fake_owner o(&a);
    fake_owner p(std::move(o));
    fake_owner q(std::move(p));
    EXPECT_TRUE(destroyed().empty());
  }
  EXPECT_EQ(destroyed(), std::vector<fake_handle>{&a});
}

TEST_F(UniqueHandle, SelfMoveAssignmentKeepsTheHandle) {
  fake_owner o(&a);
  fake_owner& alias = o;
  o = std::move(alias);
  EXPECT_EQ(o.get(), &a);
  EXPECT_TRUE(destroyed().empty());
}

TEST_F(UniqueHandle, ReleaseGivesUpOwnershipAndLeavesTheSentinel) {
  fake_handle h = nullptr;
  {
    fake_owner o(&a);
    h = o.release();
    EXPECT_FALSE(o.owns_handle());
    EXPECT_EQ(error_of([&] { return o.get(); }), "use of a moved-from fake::holder");
  }
  EXPECT_EQ(h, &a);
  EXPECT_TRUE(destroyed().empty());
}

TEST_F(UniqueHandle, ANullOwnerDestroysNothingAndIsNotMovedFrom) {
  {
    const fake_owner o(nullptr);
    EXPECT_TRUE(o.owns_handle());
    EXPECT_EQ(o.get(), nullptr);
  }
  EXPECT_TRUE(destroyed().empty());
}

TEST_F(UniqueHandle, AViewOfAMovedFromOwnerRefuses) {
  fake_stream s(&a);
  const fake_view before = s; // a view of the live handle, taken before the move
  const fake_stream moved(std::move(s));
  const fake_view after = s; // NOLINT(bugprone-use-after-move): a view of the moved-from owner
  EXPECT_EQ(before.get(), &a);
  EXPECT_EQ(static_cast<const fake_view&>(moved).get(), &a);
  EXPECT_EQ(error_of([&] { return after.get(); }), "use of a moved-from fake::stream");
  EXPECT_EQ(error_of([&] { return s.get(); }), "use of a moved-from fake::stream");
}

TEST_F(UniqueHandle, ADefaultViewIsNullNotMovedFrom) {
  const fake_view v; // like the legacy default stream: null is a handle, not a misuse
  EXPECT_EQ(v.get(), nullptr);
}

TEST_F(UniqueHandle, SentinelsAreTheTopSixteenAddressesOnly) {
  for (unsigned n = 0; n < 16; ++n) {
    EXPECT_TRUE(cd::is_sentinel_handle(cd::sentinel_handle<fake_handle>(n))) << n;
  }
  EXPECT_NE(cd::sentinel_handle<fake_handle>(0), cd::sentinel_handle<fake_handle>(1));
  EXPECT_FALSE(cd::is_sentinel_handle(fake_handle{}));
  // cudaStreamLegacy and cudaStreamPerThread are the addresses 1 and 2.
  EXPECT_FALSE(cd::is_sentinel_handle(reinterpret_cast<fake_handle>(std::uintptr_t{1})));
  EXPECT_FALSE(cd::is_sentinel_handle(reinterpret_cast<fake_handle>(std::uintptr_t{2})));
  EXPECT_FALSE(cd::is_sentinel_handle(&a));
  EXPECT_FALSE(cd::is_sentinel_handle(reinterpret_cast<fake_handle>(~std::uintptr_t{0} - 16)));
}

} // namespace
