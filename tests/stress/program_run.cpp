// SPDX-License-Identifier: Apache-2.0
// Running a random program: one coroutine per node (see program.hpp for what each does).

#include "program_run.hpp"

#include "program_context.hpp"

#include <cuawait/async_scope.hpp>
#include <cuawait/cancellation.hpp>
#include <cuawait/sync_wait.hpp>
#include <cuawait/when_all.hpp>
#include <cuawait/when_any.hpp>

#include <chrono>
#include <exception>
#include <typeinfo>
#include <variant>

namespace cuawait::stress {
namespace {

using std::chrono::microseconds;

task<std::uint64_t> run_node(context& ctx, int id);

const node& node_of(context& ctx, int id) { return ctx.prog.nodes[static_cast<std::size_t>(id)]; }

task<std::uint64_t> value_leaf(context& ctx, const node& n) {
  if (n.hop) {
    co_await ctx.pool.schedule();
  }
  const std::stop_token token = co_await get_stop_token();
  if (token.stop_requested()) {
    throw operation_cancelled("stress: a value leaf saw its stop request");
  }
  co_return n.value;
}

task<std::uint64_t> fail_leaf(context& ctx, const node& n) {
  if (n.hop) {
    co_await ctx.pool.schedule();
  }
  throw test_error{n.id, {}};
}

task<std::uint64_t> sleep_leaf(context& ctx, const node& n) {
  co_await ctx.timers.sleep_for(microseconds(n.delay_us)); // inherits the node's token
  co_return n.value;
}

task<std::uint64_t> seq_node(context& ctx, const node& n) {
  std::vector<std::uint64_t> values;
  for (const int c : n.children) {
    values.push_back(co_await run_node(ctx, c));
  }
  co_return combine(n.value, values);
}

task<std::uint64_t> all_node(context& ctx, const node& n) {
  const auto& c = n.children;
  if (n.variadic && c.size() == 2) {
    auto [a, b] = co_await when_all(run_node(ctx, c[0]), run_node(ctx, c[1]));
    co_return combine(n.value, {a, b});
  }
  if (n.variadic && c.size() == 3) {
    auto [a, b, d] =
        co_await when_all(run_node(ctx, c[0]), run_node(ctx, c[1]), run_node(ctx, c[2]));
    co_return combine(n.value, {a, b, d});
  }
  std::vector<task<std::uint64_t>> tasks;
  for (const int child : c) {
    tasks.push_back(run_node(ctx, child));
  }
  co_return combine(n.value, co_await when_all(std::move(tasks)));
}

task<std::uint64_t> any_node(context& ctx, const node& n) {
  const auto& c = n.children;
  std::size_t index = 0;
  std::uint64_t value = 0;
  auto get = [](const auto& v) { return std::visit([](std::uint64_t x) { return x; }, v); };
  if (n.variadic && c.size() == 2) {
    auto r = co_await when_any(run_node(ctx, c[0]), run_node(ctx, c[1]));
    index = r.index;
    value = get(r.value);
  } else if (n.variadic && c.size() == 3) {
    auto r = co_await when_any(run_node(ctx, c[0]), run_node(ctx, c[1]), run_node(ctx, c[2]));
    index = r.index;
    value = get(r.value);
  } else {
    std::vector<task<std::uint64_t>> tasks;
    for (const int child : c) {
      tasks.push_back(run_node(ctx, child));
    }
    auto r = co_await when_any(std::move(tasks));
    index = r.index;
    value = r.value;
  }
  ctx.records[static_cast<std::size_t>(n.id)].index = index;
  co_return combine(n.value, {index, value});
}

task<void> spawned(context& ctx, int id, std::uint64_t& slot) { slot = co_await run_node(ctx, id); }

task<std::uint64_t> scope_node(context& ctx, const node& n) {
  async_scope scope;
  std::vector<std::uint64_t> values(n.children.size());
  for (std::size_t i = 0; i < n.children.size(); ++i) {
    scope.spawn(spawned(ctx, n.children[i], values[i]));
    if (n.scope_stop && i == n.value % n.children.size()) {
      scope.request_stop(); // the children spawned after it start stopped
    }
  }
  co_await scope.join();
  co_return combine(n.value, values);
}

task<void> program_trigger(context& ctx, std::stop_source source, const node& n) {
  if (n.hop) {
    co_await ctx.pool.schedule();
  }
  try {
    co_await ctx.timers.sleep_for(microseconds(n.delay_us));
  } catch (const operation_cancelled&) {
  }
  source.request_stop();
}

task<std::uint64_t> stop_node(context& ctx, const node& n) {
  std::stop_source source;
  const std::stop_token outer = co_await get_stop_token();
  // Stopping `source` may finish the child inline and so this frame, `source` with it:
  // request the stop through a copy that keeps the stop state alive until it returns.
  const std::stop_callback forward(outer, [&source]() noexcept {
    const std::stop_source keep = source;
    keep.request_stop();
  });
  auto child = run_node(ctx, n.children[0]).with_stop_token(source.get_token());
  if (n.stop_by == trigger::program) {
    auto [value, ignored] = co_await when_all(std::move(child), program_trigger(ctx, source, n));
    co_return value;
  }
  if (n.stop_by == trigger::thread) {
    ctx.start_canceller(source, n.delay_us);
  }
  co_return co_await std::move(child);
}

task<std::uint64_t> body(context& ctx, const node& n) {
  switch (n.what) {
  case kind::value:
    return value_leaf(ctx, n);
  case kind::fail:
    return fail_leaf(ctx, n);
  case kind::sleep:
    return sleep_leaf(ctx, n);
  case kind::seq:
    return seq_node(ctx, n);
  case kind::all:
    return all_node(ctx, n);
  case kind::any:
    return any_node(ctx, n);
  case kind::scope:
    return scope_node(ctx, n);
  case kind::stop:
    return stop_node(ctx, n);
  case kind::channel:
    return channel_group(ctx, n);
  case kind::mutex:
    return mutex_group(ctx, n);
  case kind::semaphore:
    return semaphore_group(ctx, n);
  case kind::event:
    return event_group(ctx, n);
  case kind::latch:
    return latch_group(ctx, n);
  }
  return value_leaf(ctx, n);
}

std::string describe_current_exception() {
  try {
    throw;
  } catch (const std::exception& e) {
    return std::string(typeid(e).name()) + ": " + e.what();
  } catch (...) {
    return "an exception of unknown type";
  }
}

// Runs node `id`, recording what it did (the record is read once the program is over).
task<std::uint64_t> run_node(context& ctx, int id) {
  const tracked alive;
  record& r = ctx.records[static_cast<std::size_t>(id)];
  r.s = state::running;
  try {
    const std::uint64_t v = co_await body(ctx, node_of(ctx, id));
    r.value = v;
    r.s = state::value;
    co_return v;
  } catch (const test_error& e) {
    r.error = e.id;
    r.s = state::error;
    throw;
  } catch (const operation_cancelled&) {
    r.s = state::cancelled;
    throw;
  } catch (...) {
    r.other = describe_current_exception();
    r.s = state::other;
    throw;
  }
}

task<void> root(context& ctx) {
  if (ctx.prog.root_on_pool) {
    co_await ctx.pool.schedule();
  }
  try {
    (void)co_await run_node(ctx, 0);
  } catch (...) { // recorded in the root's record; check() judges it
  }
}

} // namespace

std::vector<std::string> run_and_check(const program& p) {
  const long live_before = tracked::live();
  std::vector<std::string> failures;
  {
    context ctx(p);
    sync_wait(root(ctx));
    ctx.join_cancellers();
    failures = check(p, ctx.records);
    for (auto& f : ctx.failures()) {
      failures.push_back(std::move(f));
    }
  }
  if (const long leaked = tracked::live() - live_before; leaked != 0) {
    failures.push_back(std::to_string(leaked) +
                       " coroutine frame(s), exception(s) or channel value(s) never destroyed");
  }
  return failures;
}

} // namespace cuawait::stress
