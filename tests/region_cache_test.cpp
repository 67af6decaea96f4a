// SPDX-License-Identifier: Apache-2.0
// The region cache's decisions with a fake backend (no CUDA): recordings and their shapes,
// miss / update in place / reuse / re-instantiation with a reason, a refused node update
// falling back to instantiation, LRU and per-key bounds, replicas for concurrent replays,
// stream affinity, failures, captured regions, and many threads at once.

#include <cuawait/cuda/detail/region_cache_core.hpp>
#include <cuawait/cuda/detail/region_ops.hpp>

#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace {

using cuawait::graph_cache_outcome;
using cuawait::region_cache_options;
using cuawait::cuda::detail::describe_shape_change;
using cuawait::cuda::detail::region_cache_core;
using cuawait::cuda::detail::region_ops;

//! What one operation does, as the fake executable stores it: enough to tell any parameter
//! change apart in these tests (a kernel's first argument, a copy's or memset's target).
std::uint64_t value_of(const region_ops& ops, std::size_t i) {
  const auto& op = ops[i];
  std::uint64_t v = reinterpret_cast<std::uintptr_t>(op.dst) ^ op.bytes ^
                    (static_cast<std::uint64_t>(op.value) << 40);
  std::vector<void*> args;
  ops.arg_pointers(op, args);
  if (!args.empty()) {
    v ^= static_cast<std::uint64_t>(*static_cast<const int*>(args[0])) << 20;
  }
  return v;
}

std::vector<std::uint64_t> values_of(const region_ops& ops) {
  std::vector<std::uint64_t> v;
  for (std::size_t i = 0; i < ops.size(); ++i) {
    v.push_back(value_of(ops, i));
  }
  return v;
}

//! A counter the cache's threads may bump at once (replicas update in parallel); movable so
//! that the backend can be moved into the cache.
struct counter {
  std::atomic<int> v{0};
  counter() = default;
  counter(counter&& o) noexcept : v(o.v.load()) {}
  int operator++() noexcept { return ++v; }
  operator int() const noexcept { return v.load(); } // NOLINT: implicit on purpose
};

struct fake_backend {
  struct blueprint {
    region_ops ops;
    int id = 0;
  };
  struct exec {
    int from = 0;                     //!< the blueprint it was instantiated from
    int generation = 0;               //!< which instantiation made it
    std::vector<std::uint64_t> nodes; //!< each node's parameters
  };

  counter builds;
  counter instantiations;
  counter sets;
  counter whole_updates;
  bool fail_instantiate = false;
  //! Operations whose update CUDA would refuse.
  std::function<bool(std::size_t)> refuse = [](std::size_t) { return false; };
  bool refuse_whole = false;

  blueprint build(const region_ops& ops) { return {ops, ++builds}; }
  exec instantiate(const blueprint& b) {
    if (fail_instantiate) {
      throw std::runtime_error("instantiate failed");
    }
    return {b.id, ++instantiations, values_of(b.ops)};
  }
  std::string set(exec& e, const blueprint&, std::size_t i, const region_ops& ops) {
    if (refuse(i)) {
      return "refused operation " + std::to_string(i);
    }
    ++sets;
    e.nodes.at(i) = value_of(ops, i);
    return {};
  }
  std::string update(exec& e, const blueprint& captured) {
    if (refuse_whole) {
      return "the topology changed";
    }
    ++whole_updates;
    e.from = captured.id;
    return {};
  }
};

using core = region_cache_core<fake_backend>;

// Stand-ins for two kernels: only their addresses matter.
const char kernel_a = 0;
const char kernel_b = 0;
const void* const ka = &kernel_a;
const void* const kb = &kernel_b;

float buffer_x[64];
float buffer_y[64];

//! `kernels` launches of kernel A with argument `arg`, then a copy into `dst`.
region_ops job(int arg, int kernels = 2, void* dst = buffer_x) {
  region_ops ops;
  for (int k = 0; k < kernels; ++k) {
    const void* args[] = {&arg};
    const std::uint32_t sizes[] = {sizeof(int)};
    ops.add_kernel(ka, {4, 1, 1}, {128, 1, 1}, 0, args, sizes, 1);
  }
  ops.add_copy(dst, buffer_y, 256);
  return ops;
}

const void* const stream1 = &buffer_x[1];
const void* const stream2 = &buffer_x[2];

//! Replays `ops` and checks that the executable launched holds exactly its parameters.
core::result replay(core& c, const std::string& key, const region_ops& ops,
                    const void* stream = stream1, bool tracked = false,
                    fake_backend::exec* launched = nullptr) {
  return c.replay(key, ops, stream, tracked, [&](fake_backend::exec& e) {
    EXPECT_EQ(e.nodes, values_of(ops)) << "launched with stale parameters";
    if (launched != nullptr) {
      *launched = e;
    }
  });
}

TEST(RegionOps, ParametersAndShapeAreComparedSeparately) {
  const region_ops a = job(1), b = job(2), c = job(1, 3);
  EXPECT_TRUE(a.same_shape(b));
  EXPECT_TRUE(a.same_params(0, job(1)));
  EXPECT_FALSE(a.same_params(0, b)) << "a changed argument byte is a parameter change";
  EXPECT_TRUE(a.same_params(2, b)) << "the copy did not change";
  EXPECT_FALSE(a.same_params(2, job(1, 2, buffer_y)));
  EXPECT_FALSE(a.same_shape(c));
  EXPECT_EQ(describe_shape_change(a, b), "");
  EXPECT_EQ(describe_shape_change(a, c), "the shape changed: operation 2 is a kernel launch "
                                         "instead of a copy");
  region_ops d = job(1);
  d.add_memset(buffer_x, 0, 8);
  EXPECT_EQ(describe_shape_change(a, d), "the shape changed: 4 operations instead of 3");
}

TEST(RegionOps, ArgumentsAreStoredAlignedAndIntact) {
  region_ops ops;
  const char c = 'x';
  const double d = 2.5;
  const void* args[] = {&c, &d};
  const std::uint32_t sizes[] = {1, sizeof(double)};
  ops.add_kernel(kb, {1, 1, 1}, {1, 1, 1}, 0, args, sizes, 2);
  std::vector<void*> p;
  ops.arg_pointers(ops[0], p);
  ASSERT_EQ(p.size(), 2u);
  EXPECT_EQ(*static_cast<const char*>(p[0]), 'x');
  EXPECT_EQ(*static_cast<const double*>(p[1]), 2.5);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(p[1]) % alignof(double), 0u);
}

TEST(RegionCache, FirstReplayInstantiatesLaterOnesUpdateChangedNodesOrReuse) {
  core c(fake_backend{});
  EXPECT_EQ(replay(c, "k", job(1)).outcome, graph_cache_outcome::instantiated);
  EXPECT_EQ(replay(c, "k", job(2)).outcome, graph_cache_outcome::updated);
  EXPECT_EQ(c.backend().sets, 2) << "the two kernels changed, the copy did not";
  EXPECT_EQ(replay(c, "k", job(2)).outcome, graph_cache_outcome::reused);
  EXPECT_EQ(c.backend().sets, 2);
  EXPECT_EQ(c.backend().instantiations, 1);
  const auto s = c.stats();
  EXPECT_EQ(s.misses, 1u);
  EXPECT_EQ(s.hits, 2u);
  EXPECT_EQ(s.updates, 1u);
  EXPECT_EQ(s.reused, 1u);
  EXPECT_EQ(s.node_updates, 2u);
  EXPECT_EQ(s.reinstantiations, 0u);
  EXPECT_EQ(s.size, 1u);
  EXPECT_DOUBLE_EQ(s.in_place_fraction(), 1.0);
}

TEST(RegionCache, ShapeChangeInstantiatesAndSaysWhyAndEachShapeStaysCached) {
  core c(fake_backend{});
  (void)replay(c, "k", job(1, 2));
  EXPECT_EQ(replay(c, "k", job(1, 3)).outcome, graph_cache_outcome::reinstantiated);
  EXPECT_EQ(c.last_reason(), "graph cache: key \"k\" re-instantiated: the shape changed: "
                             "operation 2 is a kernel launch instead of a copy");
  EXPECT_EQ(c.stats().size, 2u);
  // Going back to the first shape finds it: an update, not an instantiation.
  EXPECT_EQ(replay(c, "k", job(5, 2)).outcome, graph_cache_outcome::updated);
  EXPECT_EQ(replay(c, "k", job(5, 3)).outcome, graph_cache_outcome::updated);
  EXPECT_EQ(c.backend().instantiations, 2);
  EXPECT_EQ(c.stats().reinstantiations, 1u);
}

TEST(RegionCache, RefusedNodeUpdateFallsBackToInstantiationWithTheReason) {
  core c(fake_backend{});
  (void)replay(c, "k", job(1, 2, buffer_x));
  c.backend().refuse = [](std::size_t i) { return i == 2; }; // the copy
  fake_backend::exec launched;
  EXPECT_EQ(replay(c, "k", job(1, 2, buffer_y), stream1, false, &launched).outcome,
            graph_cache_outcome::reinstantiated);
  EXPECT_EQ(launched.generation, 2) << "launched the new executable";
  EXPECT_EQ(c.stats().update_failures, 1u);
  EXPECT_EQ(c.stats().hits, 1u);
  EXPECT_EQ(c.stats().reinstantiations, 1u);
  EXPECT_EQ(c.last_reason(), "graph cache: key \"k\" re-instantiated: refused operation 2");
  c.backend().refuse = [](std::size_t) { return false; };
  EXPECT_EQ(replay(c, "k", job(3, 2, buffer_y), stream1, false, &launched).outcome,
            graph_cache_outcome::updated);
  EXPECT_EQ(launched.generation, 2);
}

TEST(RegionCache, LeastRecentlyUsedShapesAreEvicted) {
  core c(fake_backend{}, region_cache_options{.capacity = 2});
  (void)replay(c, "a", job(1));
  (void)replay(c, "b", job(1));
  (void)replay(c, "a", job(1)); // a is now the most recent
  (void)replay(c, "c", job(1)); // evicts b
  EXPECT_EQ(c.stats().evictions, 1u);
  EXPECT_EQ(c.stats().size, 2u);
  EXPECT_EQ(replay(c, "a", job(1)).outcome, graph_cache_outcome::reused);
  EXPECT_EQ(replay(c, "b", job(1)).outcome, graph_cache_outcome::instantiated);
  EXPECT_EQ(c.stats().misses, 4u);
}

TEST(RegionCache, ShapesPerKeyAreBounded) {
  core c(fake_backend{}, region_cache_options{.shapes_per_key = 2});
  (void)replay(c, "k", job(1, 1));
  (void)replay(c, "k", job(1, 2));
  (void)replay(c, "k", job(1, 3)); // drops the 1-kernel shape
  EXPECT_EQ(c.stats().size, 2u);
  EXPECT_EQ(c.stats().evictions, 1u);
  EXPECT_EQ(replay(c, "k", job(1, 1)).outcome, graph_cache_outcome::reinstantiated);
}

TEST(RegionCache, ConcurrentReplaysGetTheirOwnExecutablesUpToTheBound) {
  core c(fake_backend{}, region_cache_options{.replicas = 2});
  auto r1 = replay(c, "k", job(1), stream1, true);
  auto r2 = replay(c, "k", job(2), stream2, true); // r1 still in flight
  EXPECT_EQ(r2.outcome, graph_cache_outcome::replicated);
  EXPECT_EQ(c.executables("k"), 2u);
  fake_backend::exec launched;
  auto r3 = replay(c, "k", job(3), stream1, true, &launched); // bound reached: shares one
  EXPECT_EQ(r3.outcome, graph_cache_outcome::updated);
  EXPECT_EQ(c.executables("k"), 2u);
  EXPECT_EQ(c.stats().replicas, 1u);
  r1.held.reset();
  r2.held.reset();
  r3.held.reset();
  // Idle again: a replay on stream 2 takes the executable last launched there.
  fake_backend::exec on2;
  (void)replay(c, "k", job(2), stream2, true, &on2);
  EXPECT_EQ(on2.generation, 2);
  EXPECT_EQ(c.backend().instantiations, 2);
}

TEST(RegionCache, UntrackedReplaysKeepOneExecutablePerStream) {
  core c(fake_backend{});
  fake_backend::exec e1, e2, e1b;
  (void)replay(c, "k", job(1), stream1, false, &e1);
  (void)replay(c, "k", job(1), stream2, false, &e2);
  (void)replay(c, "k", job(1), stream1, false, &e1b);
  EXPECT_NE(e1.generation, e2.generation) << "streams must not share an executable";
  EXPECT_EQ(e1.generation, e1b.generation);
  EXPECT_EQ(c.executables("k"), 2u);
}

TEST(RegionCache, FailedLaunchReleasesAndTheNextReplayInstantiatesAgain) {
  core c(fake_backend{});
  (void)replay(c, "k", job(1));
  EXPECT_THROW((void)c.replay("k", job(2), stream1, true,
                              [](fake_backend::exec&) { throw std::runtime_error("launch"); }),
               std::runtime_error);
  fake_backend::exec launched;
  EXPECT_EQ(replay(c, "k", job(2), stream1, false, &launched).outcome,
            graph_cache_outcome::replicated);
  EXPECT_EQ(launched.generation, 2) << "the failed executable's state was not trusted";
  EXPECT_EQ(c.executables("k"), 1u) << "the lease of the failed replay was released";
}

TEST(RegionCache, FailedInstantiationLeavesTheCacheUsable) {
  core c(fake_backend{});
  c.backend().fail_instantiate = true;
  EXPECT_THROW((void)replay(c, "k", job(1)), std::runtime_error);
  c.backend().fail_instantiate = false;
  fake_backend::exec launched;
  (void)replay(c, "k", job(1), stream1, false, &launched);
  EXPECT_EQ(launched.generation, 1);
}

TEST(RegionCache, CapturedRegionsUpdateAsAWholeAndMarkTheirKey) {
  core c(fake_backend{});
  auto launch = [](fake_backend::exec&) {};
  EXPECT_FALSE(c.captured("k"));
  EXPECT_EQ(
      c.replay_captured("k", fake_backend::blueprint{{}, 100}, stream1, false, launch).outcome,
      graph_cache_outcome::instantiated);
  EXPECT_TRUE(c.captured("k"));
  EXPECT_EQ(
      c.replay_captured("k", fake_backend::blueprint{{}, 101}, stream1, false, launch).outcome,
      graph_cache_outcome::updated);
  EXPECT_EQ(c.backend().whole_updates, 1);
  c.backend().refuse_whole = true;
  EXPECT_EQ(
      c.replay_captured("k", fake_backend::blueprint{{}, 102}, stream1, false, launch).outcome,
      graph_cache_outcome::reinstantiated);
  EXPECT_EQ(c.last_reason(), "graph cache: key \"k\" re-instantiated: the topology changed");
  EXPECT_EQ(c.stats().captures, 3u);
}

TEST(RegionCache, AHeldExecutableOutlivesEvictionAndClear) {
  core c(fake_backend{}, region_cache_options{.capacity = 1});
  auto held = replay(c, "a", job(1), stream1, true);
  (void)replay(c, "b", job(1));
  c.clear();
  EXPECT_EQ(c.stats().size, 0u);
  held.held.reset(); // releases into an entry no longer indexed: must not crash
  EXPECT_EQ(replay(c, "a", job(1)).outcome, graph_cache_outcome::instantiated);
}

TEST(RegionCache, ManyThreadsReplayingOneKeyKeepTheCountsConsistent) {
  core c(fake_backend{}, region_cache_options{.replicas = 4});
  constexpr int threads = 8;
  constexpr int per_thread = 500;
  std::atomic<int> stale{0};
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      const void* stream = &buffer_y[t];
      for (int i = 0; i < per_thread; ++i) {
        const region_ops ops = job(i % 3, 2);
        auto r = c.replay("k", ops, stream, true, [&](fake_backend::exec& e) {
          if (e.nodes != values_of(ops)) {
            stale.fetch_add(1);
          }
        });
      }
    });
  }
  for (auto& th : pool) {
    th.join();
  }
  EXPECT_EQ(stale.load(), 0);
  const auto s = c.stats();
  EXPECT_EQ(s.hits + s.misses, static_cast<std::uint64_t>(threads * per_thread));
  EXPECT_EQ(s.hits, s.reused + s.updates + s.reinstantiations + s.replicas);
  EXPECT_LE(c.executables("k"), 4u);
}

} // namespace
