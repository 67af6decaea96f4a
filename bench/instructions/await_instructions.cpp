// SPDX-License-Identifier: Apache-2.0
// await_instructions MODE N: runs N of one operation with callgrind's collection on only
// around them, so that `valgrind --tool=callgrind --collect-atstart=no` counts the
// instructions of exactly N operations (scripts/callgrind-await divides). Modes:
//   ready_task     co_await of a task that finished at once (no reactor, no pool)
//   ready_wait     co_await of a reactor wait whose work had finished: not suspended
//   wait           co_await of a reactor wait that suspends, completed by the fake source
//                  and resumed by reactor.poll() on the same thread
//   pool_hop       co_await pool.schedule() on a pool of one worker, from that worker
// CPU only (a fake completion source); built from the sources of any commit since the wait
// observers, so that two commits can be compared.

#include "common/fake_completion_source.hpp"
#include "cuawait/completion_reactor.hpp"
#include "cuawait/sync_wait.hpp"
#include "cuawait/task.hpp"
#include "cuawait/thread_pool.hpp"

#if __has_include(<valgrind/callgrind.h>)
#include <valgrind/callgrind.h>
#define CUAWAIT_COLLECT_ON() CALLGRIND_TOGGLE_COLLECT
#define CUAWAIT_COLLECT_OFF() CALLGRIND_TOGGLE_COLLECT
#else
#define CUAWAIT_COLLECT_ON() ((void)0)
#define CUAWAIT_COLLECT_OFF() ((void)0)
#endif

#include <coroutine>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>

namespace ca = cuawait;

namespace {

ca::task<long> one() { co_return 1; }

ca::task<long> ready_tasks(long n) {
  long sum = 0;
  CUAWAIT_COLLECT_ON();
  for (long i = 0; i < n; ++i) {
    sum += co_await one();
  }
  CUAWAIT_COLLECT_OFF();
  co_return sum;
}

ca::reactor_options polled() {
  ca::reactor_options o;
  o.start_thread = false;
  return o;
}

long ready_waits(long n) {
  ca::test::fake_completion_source source;
  ca::completion_reactor reactor(source, polled());
  source.complete(1);
  auto body = [&]() -> ca::task<long> {
    long done = 0;
    CUAWAIT_COLLECT_ON();
    for (long i = 0; i < n; ++i) {
      done += (co_await ca::test::fake_wait(reactor, 1, 1)).state == ca::completion_state::done;
    }
    CUAWAIT_COLLECT_OFF();
    co_return done;
  };
  return ca::sync_wait(body());
}

//! Starts at once and runs to its first suspension; nobody awaits it.
struct eager {
  struct promise_type {
    eager get_return_object() noexcept { return {}; }
    std::suspend_never initial_suspend() noexcept { return {}; }
    std::suspend_never final_suspend() noexcept { return {}; }
    void return_void() noexcept {}
    void unhandled_exception() noexcept { std::terminate(); }
  };
};

eager await_tokens(ca::completion_reactor& reactor, long n, long& done) {
  for (long i = 0; i < n; ++i) {
    done += (co_await ca::test::fake_wait(reactor, 1, static_cast<std::uint64_t>(i))).state ==
            ca::completion_state::done;
  }
}

//! The coroutine suspends on token i; this thread completes it and polls, which resumes
//! the coroutine inline (it has no executor) up to its next suspension. The fake source's
//! own cost (a mutex and a map insertion per completion) is counted too, the same in every
//! build.
long suspended_waits(long n) {
  ca::test::fake_completion_source source;
  ca::completion_reactor reactor(source, polled());
  long done = 0;
  (void)await_tokens(reactor, n, done); // suspended on token 0
  CUAWAIT_COLLECT_ON();
  for (long i = 0; i < n; ++i) {
    source.complete(static_cast<std::uint64_t>(i));
    (void)reactor.poll();
  }
  CUAWAIT_COLLECT_OFF();
  return done;
}

long pool_hops(long n) {
  ca::thread_pool pool(1);
  auto body = [&]() -> ca::task<long> {
    co_await pool.schedule();
    CUAWAIT_COLLECT_ON();
    for (long i = 0; i < n; ++i) {
      co_await pool.schedule();
    }
    CUAWAIT_COLLECT_OFF();
    co_return n;
  };
  return ca::sync_wait(body());
}

} // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: await_instructions ready_task|ready_wait|wait|pool_hop N\n");
    return 2;
  }
  const std::string mode = argv[1];
  const long n = std::atol(argv[2]);
  long r = 0;
  if (mode == "ready_task") {
    r = ca::sync_wait(ready_tasks(n));
  } else if (mode == "ready_wait") {
    r = ready_waits(n);
  } else if (mode == "wait") {
    r = suspended_waits(n);
  } else if (mode == "pool_hop") {
    r = pool_hops(n);
  } else {
    std::fprintf(stderr, "unknown mode %s\n", mode.c_str());
    return 2;
  }
  std::printf("%s %ld: %ld\n", mode.c_str(), n, r);
  return r == n ? 0 : 1;
}
