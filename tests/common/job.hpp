// SPDX-License-Identifier: Apache-2.0
#pragma once

// `job`: a test coroutine that does not start until someone resumes its handle.

#include <coroutine>
#include <exception>

namespace cuawait::test {

//! A coroutine returning `job` suspends before its first statement; `handle` is what a test
//! posts to an executor. Once resumed it runs to its end and frees its own frame. If nobody
//! ever resumes it, its frame (and whatever it holds) leaks: tests count that to prove that
//! an executor dropped nothing. An exception escaping it terminates the program.
struct job {
  struct promise_type {
    job get_return_object() noexcept {
      return job{std::coroutine_handle<promise_type>::from_promise(*this)};
    }
    std::suspend_always initial_suspend() const noexcept { return {}; }
    std::suspend_never final_suspend() const noexcept { return {}; }
    void return_void() const noexcept {}
    void unhandled_exception() const noexcept { std::terminate(); }
  };
  std::coroutine_handle<> handle;
};

} // namespace cuawait::test
