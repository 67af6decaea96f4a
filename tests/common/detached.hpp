// SPDX-License-Identifier: Apache-2.0
#pragma once

// `detached`: the return type of a fire-and-forget test coroutine.

#include <coroutine>
#include <exception>

namespace cuawait::test {

//! A coroutine returning `detached` starts at once, runs on whichever thread resumes it and
//! frees its own frame when it finishes. An exception escaping it terminates the program
//! (a test synchronises with it through a latch, a flag or a counter, never through it).
struct detached {
  struct promise_type {
    detached get_return_object() noexcept { return {}; }
    std::suspend_never initial_suspend() const noexcept { return {}; }
    std::suspend_never final_suspend() const noexcept { return {}; }
    void return_void() const noexcept {}
    void unhandled_exception() const noexcept { std::terminate(); }
  };
};

} // namespace cuawait::test
