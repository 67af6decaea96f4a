// SPDX-License-Identifier: Apache-2.0
// The graph cache's decisions (instantiate, reuse, update, re-instantiate, evict) with a fake
// executable graph: no CUDA needed.

#include "common/counted.hpp"

#include <cuawait/cuda/detail/graph_cache_core.hpp>

#include <gtest/gtest.h>

#include <stdexcept>
#include <string>

namespace {

using cuawait::graph_cache_outcome;
using cuawait::cuda::detail::graph_cache_core;

//! A graph: its topology ("shape") and its parameters.
struct fake_graph {
  int shape = 0;
  int params = 0;
};

//! An executable graph: remembers which shape it was built for and its current parameters.
struct fake_exec {
  int shape = 0;
  int params = 0;
  int generation = 0; //!< which instantiation made it
};

struct fake_driver {
  int instantiations = 0;
  int update_calls = 0;
  bool fail_instantiate = false;

  auto instantiate() {
    return [this](const fake_graph& g) {
      if (fail_instantiate) {
        throw std::runtime_error("instantiate failed");
      }
      return fake_exec{g.shape, g.params, ++instantiations};
    };
  }
  auto update() {
    return [this](fake_exec& e, const fake_graph& g) -> const char* {
      ++update_calls;
      if (e.shape != g.shape) {
        return "the topology changed";
      }
      e.params = g.params;
      return nullptr;
    };
  }
};

TEST(GraphCache, FirstLookupInstantiatesLaterOnesUpdateInPlace) {
  graph_cache_core<fake_exec> cache(4);
  fake_driver d;
  auto [e1, o1] = cache.acquire("job", fake_graph{1, 10}, 0, d.instantiate(), d.update());
  EXPECT_EQ(o1, graph_cache_outcome::instantiated);
  EXPECT_EQ(e1.params, 10);
  auto [e2, o2] = cache.acquire("job", fake_graph{1, 20}, 0, d.instantiate(), d.update());
  EXPECT_EQ(o2, graph_cache_outcome::updated);
  EXPECT_EQ(&e1, &e2);
  EXPECT_EQ(e2.params, 20);
  EXPECT_EQ(e2.generation, 1);
  EXPECT_EQ(d.instantiations, 1);
  const auto s = cache.stats();
  EXPECT_EQ(s.misses, 1u);
  EXPECT_EQ(s.hits, 1u);
  EXPECT_EQ(s.updates, 1u);
  EXPECT_EQ(s.reinstantiations, 0u);
  EXPECT_EQ(s.size, 1u);
  EXPECT_TRUE(cache.last_reason().empty());
}

TEST(GraphCache, EqualFingerprintsSkipTheUpdate) {
  graph_cache_core<fake_exec> cache(4);
  fake_driver d;
  (void)cache.acquire("job", fake_graph{1, 10}, 77, d.instantiate(), d.update());
  auto [e, o] = cache.acquire("job", fake_graph{1, 10}, 77, d.instantiate(), d.update());
  EXPECT_EQ(o, graph_cache_outcome::reused);
  EXPECT_EQ(d.update_calls, 0);
  auto [e2, o2] = cache.acquire("job", fake_graph{1, 11}, 78, d.instantiate(), d.update());
  EXPECT_EQ(o2, graph_cache_outcome::updated);
  EXPECT_EQ(e2.params, 11);
  EXPECT_EQ(cache.stats().reused, 1u);
}

TEST(GraphCache, UnknownFingerprintAlwaysUpdates) {
  graph_cache_core<fake_exec> cache(4);
  fake_driver d;
  (void)cache.acquire("job", fake_graph{1, 10}, 0, d.instantiate(), d.update());
  (void)cache.acquire("job", fake_graph{1, 10}, 0, d.instantiate(), d.update());
  EXPECT_EQ(d.update_calls, 1);
  EXPECT_EQ(cache.stats().reused, 0u);
}

TEST(GraphCache, ShapeChangeReinstantiatesWithReason) {
  graph_cache_core<fake_exec> cache(4);
  fake_driver d;
  (void)cache.acquire("job", fake_graph{1, 10}, 0, d.instantiate(), d.update());
  auto [e, o] = cache.acquire("job", fake_graph{2, 30}, 0, d.instantiate(), d.update());
  EXPECT_EQ(o, graph_cache_outcome::reinstantiated);
  EXPECT_EQ(e.shape, 2);
  EXPECT_EQ(e.params, 30);
  EXPECT_EQ(e.generation, 2);
  EXPECT_NE(cache.last_reason().find("\"job\""), std::string::npos);
  EXPECT_NE(cache.last_reason().find("the topology changed"), std::string::npos);
  EXPECT_EQ(cache.stats().reinstantiations, 1u);
  EXPECT_EQ(cache.stats().size, 1u);
  // The new shape is cached from now on.
  auto [e3, o3] = cache.acquire("job", fake_graph{2, 31}, 0, d.instantiate(), d.update());
  EXPECT_EQ(o3, graph_cache_outcome::updated);
  EXPECT_EQ(e3.generation, 2);
}

TEST(GraphCache, KeysAreIndependent) {
  graph_cache_core<fake_exec> cache(4);
  fake_driver d;
  auto [a, oa] = cache.acquire("a", fake_graph{1, 1}, 0, d.instantiate(), d.update());
  auto [b, ob] = cache.acquire("b", fake_graph{2, 2}, 0, d.instantiate(), d.update());
  EXPECT_EQ(oa, graph_cache_outcome::instantiated);
  EXPECT_EQ(ob, graph_cache_outcome::instantiated);
  EXPECT_NE(&a, &b);
  auto [a2, oa2] = cache.acquire("a", fake_graph{1, 5}, 0, d.instantiate(), d.update());
  EXPECT_EQ(oa2, graph_cache_outcome::updated);
  EXPECT_EQ(a2.shape, 1);
  EXPECT_EQ(cache.stats().misses, 2u);
}

TEST(GraphCache, EvictsTheLeastRecentlyUsedKey) {
  graph_cache_core<fake_exec> cache(2);
  fake_driver d;
  (void)cache.acquire("a", fake_graph{1, 1}, 0, d.instantiate(), d.update());
  (void)cache.acquire("b", fake_graph{1, 1}, 0, d.instantiate(), d.update());
  (void)cache.acquire("a", fake_graph{1, 2}, 0, d.instantiate(), d.update()); // a is recent
  (void)cache.acquire("c", fake_graph{1, 1}, 0, d.instantiate(), d.update()); // evicts b
  EXPECT_TRUE(cache.contains("a"));
  EXPECT_FALSE(cache.contains("b"));
  EXPECT_TRUE(cache.contains("c"));
  EXPECT_EQ(cache.stats().evictions, 1u);
  EXPECT_EQ(cache.stats().size, 2u);
  auto [b, ob] = cache.acquire("b", fake_graph{1, 1}, 0, d.instantiate(), d.update());
  EXPECT_EQ(ob, graph_cache_outcome::instantiated);
  (void)b;
}

TEST(GraphCache, FailedInstantiationCachesNothing) {
  graph_cache_core<fake_exec> cache(2);
  fake_driver d;
  d.fail_instantiate = true;
  EXPECT_THROW((void)cache.acquire("a", fake_graph{1, 1}, 0, d.instantiate(), d.update()),
               std::runtime_error);
  EXPECT_FALSE(cache.contains("a"));
  EXPECT_EQ(cache.stats().misses, 0u);
  d.fail_instantiate = false;
  auto [e, o] = cache.acquire("a", fake_graph{1, 1}, 0, d.instantiate(), d.update());
  EXPECT_EQ(o, graph_cache_outcome::instantiated);
  (void)e;
}

TEST(GraphCache, FailedReinstantiationKeepsTheOldExecutable) {
  graph_cache_core<fake_exec> cache(2);
  fake_driver d;
  (void)cache.acquire("a", fake_graph{1, 1}, 5, d.instantiate(), d.update());
  d.fail_instantiate = true;
  EXPECT_THROW((void)cache.acquire("a", fake_graph{2, 1}, 6, d.instantiate(), d.update()),
               std::runtime_error);
  d.fail_instantiate = false;
  // Still cached, with an unknown fingerprint: the next lookup updates rather than reuses.
  auto [e, o] = cache.acquire("a", fake_graph{1, 9}, 5, d.instantiate(), d.update());
  EXPECT_EQ(o, graph_cache_outcome::updated);
  EXPECT_EQ(e.params, 9);
}

TEST(GraphCache, ZeroCapacityIsRefused) {
  EXPECT_THROW(graph_cache_core<fake_exec>(0), std::invalid_argument);
}

TEST(GraphCache, EntriesAreDestroyedOnEvictionAndClear) {
  using cuawait::test::counted;
  counted::reset();
  {
    graph_cache_core<counted> cache(1);
    auto inst = [](int g) { return counted(g); };
    auto upd = [](counted&, int) -> const char* { return nullptr; };
    (void)cache.acquire("a", 1, 0, inst, upd);
    (void)cache.acquire("b", 2, 0, inst, upd); // evicts a
    EXPECT_EQ(counted::alive(), 1);
    cache.clear();
    EXPECT_EQ(counted::alive(), 0);
    (void)cache.acquire("c", 3, 0, inst, upd);
  }
  EXPECT_EQ(counted::alive(), 0);
}

} // namespace
