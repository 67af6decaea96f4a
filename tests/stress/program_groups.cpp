// SPDX-License-Identifier: Apache-2.0
// The synchronisation groups of random programs: small self-contained protocols over one
// primitive each, built so that they always finish (whatever is cancelled) and so that
// what they must conserve can be counted afterwards.

#include "program_context.hpp"

#include <cuawait/async_event.hpp>
#include <cuawait/async_latch.hpp>
#include <cuawait/async_mutex.hpp>
#include <cuawait/async_semaphore.hpp>
#include <cuawait/channel.hpp>
#include <cuawait/when_all.hpp>

#include <algorithm>
#include <chrono>

namespace cuawait::stress {
namespace {

using std::chrono::microseconds;

// The parts of a group start in an order chosen by the program.
void shuffle(std::vector<task<void>>& parts, const node& n) {
  std::rotate(parts.begin(), parts.begin() + static_cast<std::ptrdiff_t>(n.value % parts.size()),
              parts.end());
}

// --- channel: every value ends exactly once as received, given back by a send that the
// close refused, lost with a cancelled send, or still buffered at the end.

struct channel_books {
  explicit channel_books(int n) : fate(static_cast<std::size_t>(n)) {}
  void account(int id) {
    fate[static_cast<std::size_t>(id)].fetch_add(1, std::memory_order_relaxed);
  }
  std::vector<std::atomic<int>> fate;
  std::atomic<int> received{0};
  std::atomic<int> returned{0};
  std::atomic<int> lost{0};
};

task<void> producer(context& ctx, channel<payload>& ch, channel_books& books, int first, int count,
                    std::stop_token token, bool hop) {
  for (int i = 0; i < count; ++i) {
    if (hop && i % 2 == 1) {
      co_await ctx.pool.schedule();
    }
    try {
      // Not `co_await ch.send(payload{...})`: GCC 12 destroys an aggregate temporary in a
      // co_await operand twice (docs/RELIABILITY.md).
      payload value{first + i, {}};
      co_await ch.send(std::move(value), token);
    } catch (const channel_closed_with_value<payload>& e) {
      books.account(e.value().id);
      books.returned.fetch_add(1, std::memory_order_relaxed);
    } catch (const operation_cancelled&) {
      books.account(first + i); // destroyed with the awaiter
      books.lost.fetch_add(1, std::memory_order_relaxed);
    }
  }
}

task<void> produce_then_close(context& ctx, channel<payload>& ch, channel_books& books,
                              const node& n, std::stop_token token) {
  std::vector<task<void>> producers;
  for (int p = 0; p < n.a; ++p) {
    producers.push_back(producer(ctx, ch, books, p * n.d, n.d, token, n.hop));
  }
  co_await when_all(std::move(producers));
  ch.close();
}

task<void> consumer(context& ctx, channel<payload>& ch, channel_books& books, std::vector<int>& got,
                    std::stop_token token, bool hop) {
  try {
    while (auto v = co_await ch.receive(token)) {
      got.push_back(v->id);
      books.account(v->id);
      books.received.fetch_add(1, std::memory_order_relaxed);
      if (hop) {
        co_await ctx.pool.schedule();
      }
    }
  } catch (const operation_cancelled&) {
  }
}

task<void> closer(context& ctx, channel<payload>& ch, bool hop) {
  if (hop) {
    co_await ctx.pool.schedule();
  }
  ch.close();
}

void check_channel(context& ctx, const node& n, channel_books& books,
                   const std::vector<std::vector<int>>& got, int drained) {
  const std::string where = "channel group #" + std::to_string(n.id) + ": ";
  for (std::size_t id = 0; id < books.fate.size(); ++id) {
    if (const int f = books.fate[id].load(); f != 1) {
      ctx.fail(where + "value " + std::to_string(id) + " accounted for " + std::to_string(f) +
               " times");
    }
  }
  if (!n.use_token && (books.lost != 0 || drained != 0)) {
    ctx.fail(where + "values lost or left behind without any cancellation");
  }
  if (!n.use_token && !n.early_close && books.received != n.a * n.d) {
    ctx.fail(where + std::to_string(books.received) + " values received of " +
             std::to_string(n.a * n.d));
  }
  for (const auto& ids : got) { // FIFO: each producer's values in the order it sent them
    std::vector<int> last(static_cast<std::size_t>(n.a), -1);
    for (const int id : ids) {
      int& l = last[static_cast<std::size_t>(id / n.d)];
      if (id <= l) {
        ctx.fail(where + "value " + std::to_string(id) + " received after " + std::to_string(l));
      }
      l = id;
    }
  }
}

// --- mutex: a read-modify-write split by a hop loses no update, and no two holders overlap.

struct mutex_books {
  async_mutex mutex;
  std::atomic<int> inside{0};
  long counter = 0; // only under the lock
  std::atomic<int> cancelled{0};
};

task<void> mutex_worker(context& ctx, mutex_books& b, const node& n, std::stop_token token) {
  for (int r = 0; r < n.b; ++r) {
    try {
      if (r % 2 == 1) {
        co_await ctx.timers.sleep_for(microseconds(n.delay_us % 50)); // inherits the token
      }
      const async_mutex_lock guard = co_await b.mutex.scoped_lock(token);
      if (b.inside.fetch_add(1, std::memory_order_relaxed) != 0) {
        ctx.fail("mutex group #" + std::to_string(n.id) + ": two holders at once");
      }
      const long seen = b.counter;
      if (n.hop) {
        co_await ctx.pool.schedule();
      }
      b.counter = seen + 1;
      b.inside.fetch_sub(1, std::memory_order_relaxed);
    } catch (const operation_cancelled&) {
      b.cancelled.fetch_add(1, std::memory_order_relaxed);
    }
  }
}

// --- semaphore: never more permits in use than exist; all returned at the end.

struct semaphore_books {
  explicit semaphore_books(int permits) : semaphore(permits) {}
  async_semaphore semaphore;
  std::atomic<int> in_use{0};
  std::atomic<int> done{0};
  std::atomic<int> cancelled{0};
};

task<void> semaphore_worker(context& ctx, semaphore_books& b, const node& n, int worker,
                            std::stop_token token) {
  for (int r = 0; r < 2; ++r) {
    const int k = 1 + (worker + r) % n.b;
    try {
      const async_semaphore_permit permit = co_await b.semaphore.acquire_permit(k, token);
      if (b.in_use.fetch_add(k, std::memory_order_relaxed) + k > n.b) {
        ctx.fail("semaphore group #" + std::to_string(n.id) + ": more permits in use than exist");
      }
      if (n.hop) {
        co_await ctx.pool.schedule();
      }
      b.in_use.fetch_sub(k, std::memory_order_relaxed);
      b.done.fetch_add(1, std::memory_order_relaxed);
    } catch (const operation_cancelled&) {
      b.cancelled.fetch_add(1, std::memory_order_relaxed);
    }
  }
}

// --- event and latch: what was written before set() / the last count_down() is visible to
// every waiter that passes (plain, non-atomic data: ThreadSanitizer checks the ordering).

struct wait_books {
  std::vector<int> marks;
  std::atomic<int> passed{0};
  std::atomic<int> cancelled{0};
};

task<void> event_setter(context& ctx, async_event& e, wait_books& b, const node& n) {
  if (n.hop) {
    co_await ctx.pool.schedule();
  }
  try {
    co_await ctx.timers.sleep_for(microseconds(n.delay_us % 50));
  } catch (const operation_cancelled&) {
  }
  b.marks[0] = 1;
  e.set();
}

task<void> event_waiter(context& ctx, async_event& e, wait_books& b, const node& n,
                        std::stop_token token) {
  try {
    co_await e.wait(token);
    if (b.marks[0] != 1) {
      ctx.fail("event group #" + std::to_string(n.id) + ": a waiter passed before set()");
    }
    b.passed.fetch_add(1, std::memory_order_relaxed);
  } catch (const operation_cancelled&) {
    b.cancelled.fetch_add(1, std::memory_order_relaxed);
  }
}

task<void> latch_counter(context& ctx, async_latch& l, wait_books& b, const node& n, int i) {
  if (n.hop && i % 2 == 0) {
    co_await ctx.pool.schedule();
  }
  b.marks[static_cast<std::size_t>(i)] = 1;
  l.count_down();
}

task<void> latch_waiter(context& ctx, async_latch& l, wait_books& b, const node& n,
                        std::stop_token token) {
  try {
    co_await l.wait(token);
    if (std::count(b.marks.begin(), b.marks.end(), 1) != n.a) {
      ctx.fail("latch group #" + std::to_string(n.id) + ": a waiter passed before zero");
    }
    b.passed.fetch_add(1, std::memory_order_relaxed);
  } catch (const operation_cancelled&) {
    b.cancelled.fetch_add(1, std::memory_order_relaxed);
  }
}

void check_waits(context& ctx, const char* what, const node& n, const wait_books& b, int waiters) {
  if (b.passed + b.cancelled != waiters || (!n.use_token && b.cancelled != 0)) {
    ctx.fail(std::string(what) + " group #" + std::to_string(n.id) + ": " +
             std::to_string(b.passed) + " waiters passed and " + std::to_string(b.cancelled) +
             " were cancelled, of " + std::to_string(waiters));
  }
}

task<std::stop_token> token_of(const node& n) {
  if (!n.use_token) {
    co_return std::stop_token{};
  }
  co_return co_await get_stop_token();
}

} // namespace

task<std::uint64_t> channel_group(context& ctx, const node& n) {
  const std::stop_token token = co_await token_of(n);
  channel<payload> ch(static_cast<std::size_t>(n.c));
  channel_books books(n.a * n.d);
  std::vector<std::vector<int>> got(static_cast<std::size_t>(n.b));
  std::vector<task<void>> parts;
  parts.push_back(produce_then_close(ctx, ch, books, n, token));
  for (auto& g : got) {
    parts.push_back(consumer(ctx, ch, books, g, token, n.hop));
  }
  if (n.early_close) {
    parts.push_back(closer(ctx, ch, n.hop));
  }
  shuffle(parts, n);
  co_await when_all(std::move(parts));
  int drained = 0;
  while (auto v = ch.try_receive()) {
    books.account(v->id);
    ++drained;
  }
  check_channel(ctx, n, books, got, drained);
  co_return n.value;
}

task<std::uint64_t> mutex_group(context& ctx, const node& n) {
  const std::stop_token token = co_await token_of(n);
  mutex_books b;
  std::vector<task<void>> workers;
  for (int w = 0; w < n.a; ++w) {
    workers.push_back(mutex_worker(ctx, b, n, token));
  }
  co_await when_all(std::move(workers));
  if (b.counter + b.cancelled != n.a * n.b) {
    ctx.fail("mutex group #" + std::to_string(n.id) + ": counter " + std::to_string(b.counter) +
             " + " + std::to_string(b.cancelled) + " cancelled != " + std::to_string(n.a * n.b));
  }
  if (!b.mutex.try_lock()) {
    ctx.fail("mutex group #" + std::to_string(n.id) + ": still locked at the end");
  } else {
    b.mutex.unlock();
  }
  co_return n.value;
}

task<std::uint64_t> semaphore_group(context& ctx, const node& n) {
  const std::stop_token token = co_await token_of(n);
  semaphore_books b(n.b);
  std::vector<task<void>> workers;
  for (int w = 0; w < n.a; ++w) {
    workers.push_back(semaphore_worker(ctx, b, n, w, token));
  }
  shuffle(workers, n);
  co_await when_all(std::move(workers));
  if (b.done + b.cancelled != 2 * n.a || (!n.use_token && b.cancelled != 0) ||
      b.semaphore.available() != n.b) {
    ctx.fail("semaphore group #" + std::to_string(n.id) + ": " + std::to_string(b.done) +
             " done, " + std::to_string(b.cancelled) + " cancelled, " +
             std::to_string(b.semaphore.available()) + " permits available of " +
             std::to_string(n.b));
  }
  co_return n.value;
}

task<std::uint64_t> event_group(context& ctx, const node& n) {
  const std::stop_token token = co_await token_of(n);
  async_event e;
  wait_books b{std::vector<int>(1, 0)};
  std::vector<task<void>> parts;
  parts.push_back(event_setter(ctx, e, b, n));
  for (int w = 0; w < n.a; ++w) {
    parts.push_back(event_waiter(ctx, e, b, n, token));
  }
  shuffle(parts, n);
  co_await when_all(std::move(parts));
  check_waits(ctx, "event", n, b, n.a);
  co_return n.value;
}

task<std::uint64_t> latch_group(context& ctx, const node& n) {
  const std::stop_token token = co_await token_of(n);
  async_latch l(n.a);
  wait_books b{std::vector<int>(static_cast<std::size_t>(n.a), 0)};
  std::vector<task<void>> parts;
  for (int i = 0; i < n.a; ++i) {
    parts.push_back(latch_counter(ctx, l, b, n, i));
  }
  for (int w = 0; w < n.b; ++w) {
    parts.push_back(latch_waiter(ctx, l, b, n, token));
  }
  shuffle(parts, n);
  co_await when_all(std::move(parts));
  check_waits(ctx, "latch", n, b, n.b);
  if (!l.try_wait()) {
    ctx.fail("latch group #" + std::to_string(n.id) + ": not open at the end");
  }
  co_return n.value;
}

} // namespace cuawait::stress
