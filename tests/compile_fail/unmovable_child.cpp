// SPDX-License-Identifier: Apache-2.0
// Compiled by CTest, never built (see tests/CMakeLists.txt). With CUAWAIT_FAIL_WHEN_ALL or
// CUAWAIT_FAIL_WHEN_ANY defined it must fail with the message of the overloads in
// when_all.hpp / when_any.hpp that explain a non-movable child; with neither it must
// compile, so that the failures come from those lines alone.
#include <cuawait/async_mutex.hpp>
#include <cuawait/task.hpp>
#include <cuawait/when_all.hpp>
#include <cuawait/when_any.hpp>

cuawait::task<cuawait::async_mutex_lock> locked(cuawait::async_mutex& m) {
  co_return co_await m.scoped_lock();
}

cuawait::task<void> body(cuawait::async_mutex& m) {
#if defined(CUAWAIT_FAIL_WHEN_ALL)
  co_await cuawait::when_all(m.scoped_lock());
#elif defined(CUAWAIT_FAIL_WHEN_ANY)
  co_await cuawait::when_any(m.lock(), m.scoped_lock());
#else
  auto lock = m.scoped_lock();
  co_await cuawait::when_all(lock);      // an lvalue child is referenced, never moved
  co_await cuawait::when_any(locked(m)); // a task is movable
#endif
}
