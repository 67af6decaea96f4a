// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! The CUDA-free logic of the region cache (cuda/region.hpp): a bounded LRU of region
//! shapes per key, each with the executables ("replicas") made for it, and the decision of
//! what one replay does: launch a cached executable as it is, update the nodes whose
//! parameters changed, instantiate one more executable for a concurrent replay, or
//! instantiate again (the shape changed, or CUDA refused an update) and keep the reason.
//!
//! What "build a graph", "instantiate" and "set a node" mean comes from a `Backend`, so CPU
//! tests use a fake one:
//! @code
//! struct backend {
//!   struct blueprint { region_ops ops; ... };   // a graph (+ its nodes) made from `ops`
//!   using exec = ...;                           // an executable graph, movable
//!   blueprint build(const region_ops& ops);     // may throw
//!   exec instantiate(const blueprint& b);       // may throw
//!   // Sets node `i` of `e` (made from `b`) to the parameters of ops[i]; "" or why not.
//!   std::string set(exec& e, const blueprint& b, std::size_t i, const region_ops& ops);
//!   // Takes every parameter from `captured` (a whole-graph update); "" or why not.
//!   std::string update(exec& e, const blueprint& captured);
//! };
//! @endcode
//!
//! Locking: one mutex guards the index and the replicas' bookkeeping; each replica has a
//! mutex of its own, held while its parameters are updated and it is launched, so replays
//! of different replicas update and launch in parallel.

#include "cuawait/cuda/detail/graph_cache_core.hpp"
#include "cuawait/cuda/detail/region_ops.hpp"

#include <cstddef>
#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace cuawait::cuda::detail {

//! The region cache proper (see the file comment). Thread-safe.
template <class Backend>
class region_cache_core {
  struct entry;
  struct replica;

public:
  using blueprint = typename Backend::blueprint;
  using exec = typename Backend::exec;

  //! A replay's hold on an executable: while it lives, the executable counts as in flight
  //! (another replay prefers another one). Move-only; release by destroying it.
  class lease {
  public:
    lease() noexcept = default;
    lease(lease&& o) noexcept
        : m_core(std::exchange(o.m_core, nullptr)), m_entry(std::move(o.m_entry)),
          m_replica(std::exchange(o.m_replica, nullptr)) {}
    lease& operator=(lease&& o) noexcept {
      if (this != &o) {
        reset();
        m_core = std::exchange(o.m_core, nullptr);
        m_entry = std::move(o.m_entry);
        m_replica = std::exchange(o.m_replica, nullptr);
      }
      return *this;
    }
    lease(const lease&) = delete;
    lease& operator=(const lease&) = delete;
    ~lease() { reset(); }
    //! Ends the hold now.
    void reset() noexcept {
      if (m_core != nullptr) {
        m_core->release(*m_replica);
        m_core = nullptr;
        m_replica = nullptr;
        m_entry.reset();
      }
    }

  private:
    friend class region_cache_core;
    lease(region_cache_core* c, std::shared_ptr<entry> e, replica* r) noexcept
        : m_core(c), m_entry(std::move(e)), m_replica(r) {}
    region_cache_core* m_core = nullptr;
    std::shared_ptr<entry> m_entry; // keeps an evicted entry alive while held
    replica* m_replica = nullptr;
  };

  //! What a replay did, and its hold on the executable it launched.
  struct result {
    graph_cache_outcome outcome = graph_cache_outcome::instantiated;
    lease held;
  };

  //! @throws std::invalid_argument when a bound is 0
  explicit region_cache_core(Backend backend, region_cache_options options = {})
      : m_backend(std::move(backend)), m_options(options) {
    if (options.capacity == 0 || options.shapes_per_key == 0 || options.replicas == 0) {
      throw std::invalid_argument(
          "cuawait: a region cache needs a capacity, shapes per key and replicas of at least 1");
    }
  }
  region_cache_core(const region_cache_core&) = delete;
  region_cache_core& operator=(const region_cache_core&) = delete;

  //! True when replays under `key` must be captured: an earlier one made a call the cache
  //! cannot record (`enqueue`).
  [[nodiscard]] bool captured(const std::string& key) const {
    const std::lock_guard lock(m_mutex);
    const auto k = m_keys.find(key);
    return k != m_keys.end() && k->second.captured;
  }

  //! A recorded replay: brings an executable of `key` with the shape of `ops` up to date
  //! with `ops` and calls `launch(exec&)` while holding it. `stream` identifies the stream
  //! (a replay prefers the executable last launched on its stream); `tracked`: the caller
  //! holds the returned lease until the launched work finished (false: it drops it at once,
  //! and executables are kept one per stream instead).
  //! @throws whatever building, instantiating or `launch` throws; the cache stays usable.
  template <class Launch>
  result replay(const std::string& key, const region_ops& ops, const void* stream, bool tracked,
                Launch&& launch) {
    std::unique_lock lock(m_mutex);
    key_slot& slot = m_keys[key];
    const auto [e, outcome] = locate_locked(
        key, slot, [&](const entry& x) { return !x.is_captured && x.bp->ops.same_shape(ops); },
        [&] { return std::make_shared<blueprint>(m_backend.build(ops)); },
        [&](const entry& mru) {
          return mru.is_captured ? std::string("the region is recorded now, it was captured before")
                                 : describe_shape_change(mru.bp->ops, ops);
        },
        false);
    replica& r = pick(*e, stream, tracked);
    const std::shared_ptr<const blueprint> template_bp = e->bp;
    lease held(this, e, &r);
    lock.unlock();

    const std::lock_guard rlock(r.mutex);
    try {
      const update_result u = update_recorded(r, template_bp, ops);
      launch(*r.ex);
      const std::lock_guard relock(m_mutex);
      m_stats.node_updates += u.sets;
      if (!u.refused.empty()) {
        e->bp = r.bp; // new replicas start from the latest parameters
        ++m_stats.update_failures;
        note_reinstantiation(key, u.refused);
        return {graph_cache_outcome::reinstantiated, std::move(held)};
      }
      return {outcome != graph_cache_outcome::updated ? outcome : count_hit(u.fresh, u.sets != 0),
              std::move(held)};
    } catch (...) {
      r.ex.reset(); // its parameters may be half updated: the next replay instantiates
      throw;
    }
  }

  //! A captured replay: brings an executable of `key` up to date with the graph `captured`
  //! (a whole-graph update, or an instantiation when refused) and calls `launch(exec&)`.
  //! Marks `key` as captured: later replays of it are captured from the start.
  template <class Launch>
  result replay_captured(const std::string& key, blueprint captured, const void* stream,
                         bool tracked, Launch&& launch) {
    auto bp = std::make_shared<const blueprint>(std::move(captured));
    std::unique_lock lock(m_mutex);
    ++m_stats.captures;
    key_slot& slot = m_keys[key];
    slot.captured = true;
    const auto [e, outcome] = locate_locked(
        key, slot, [](const entry& x) { return x.is_captured; }, [&] { return bp; },
        [](const entry&) {
          return std::string("the region made a call that must be captured (enqueue)");
        },
        true);
    replica& r = pick(*e, stream, tracked);
    lease held(this, e, &r);
    lock.unlock();

    const std::lock_guard rlock(r.mutex);
    try {
      const bool fresh = !r.ex.has_value();
      std::string refused;
      if (fresh) {
        r.ex.emplace(m_backend.instantiate(*bp));
      } else if (refused = m_backend.update(*r.ex, *bp); !refused.empty()) {
        r.ex.emplace(m_backend.instantiate(*bp));
      }
      r.bp = bp;
      launch(*r.ex);
      const std::lock_guard relock(m_mutex);
      if (!refused.empty()) {
        e->bp = bp;
        note_reinstantiation(key, refused);
        return {graph_cache_outcome::reinstantiated, std::move(held)};
      }
      return {outcome != graph_cache_outcome::updated ? outcome : count_hit(fresh, true),
              std::move(held)};
    } catch (...) {
      r.ex.reset();
      throw;
    }
  }

  //! Counters and the number of shapes held.
  [[nodiscard]] graph_cache_stats stats() const {
    const std::lock_guard lock(m_mutex);
    graph_cache_stats s = m_stats;
    s.size = m_lru.size();
    return s;
  }
  //! Why the last re-instantiation happened, or empty.
  [[nodiscard]] std::string last_reason() const {
    const std::lock_guard lock(m_mutex);
    return m_last_reason;
  }
  //! Executables held for the shapes of `key` (all its shapes), for tests and reports.
  [[nodiscard]] std::size_t executables(const std::string& key) const {
    const std::lock_guard lock(m_mutex);
    const auto k = m_keys.find(key);
    std::size_t n = 0;
    if (k != m_keys.end()) {
      for (const auto& e : k->second.shapes) {
        n += e->replicas.size();
      }
    }
    return n;
  }
  //! Drops every shape (replays in flight keep theirs until they finish). Counters stay.
  void clear() {
    const std::lock_guard lock(m_mutex);
    m_keys.clear();
    m_lru.clear();
  }
  //! The backend (e.g. for its own counters in tests).
  [[nodiscard]] Backend& backend() noexcept { return m_backend; }

private:
  struct replica {
    std::mutex mutex;                    // held while updating and launching
    std::optional<exec> ex;              // empty until first used (or after a failure)
    std::shared_ptr<const blueprint> bp; // what `ex` was made from (its nodes)
    region_ops state;                    // the parameters `ex` holds (recorded replays)
    std::size_t in_flight = 0;           // leases held (guarded by the cache's mutex)
    const void* stream = nullptr;        // where it was last launched (same)
  };
  struct entry {
    std::string key;
    bool is_captured = false;
    std::shared_ptr<const blueprint> bp; // new replicas are instantiated from it
    std::vector<std::unique_ptr<replica>> replicas;
    typename std::list<std::shared_ptr<entry>>::iterator lru;
  };
  struct key_slot {
    bool captured = false;
    std::vector<std::shared_ptr<entry>> shapes; // most recently used first
  };

  //! The entry a lookup found (touched) or made, and the outcome so far: `updated` for a
  //! hit (refined later), `instantiated` for a new key, `reinstantiated` for a new shape of
  //! a known key (with the reason `why(most recent shape)`).
  struct located {
    std::shared_ptr<entry> e;
    graph_cache_outcome outcome;
  };

  template <class Matches, class Make, class Why>
  located locate_locked(const std::string& key, key_slot& slot, Matches&& matches, Make&& make,
                        Why&& why, bool is_captured) {
    for (const auto& s : slot.shapes) {
      if (matches(*s)) {
        ++m_stats.hits;
        const std::shared_ptr<entry> e = s; // `touch` reorders slot.shapes
        touch(slot, e);
        return {e, graph_cache_outcome::updated};
      }
    }
    if (slot.shapes.empty()) {
      auto e = add_entry(key, slot, make(), is_captured);
      ++m_stats.misses;
      return {std::move(e), graph_cache_outcome::instantiated};
    }
    std::string reason = why(*slot.shapes.front());
    auto e = add_entry(key, slot, make(), is_captured);
    ++m_stats.hits;
    note_reinstantiation(key, reason);
    return {std::move(e), graph_cache_outcome::reinstantiated};
  }

  //! What bringing a replica up to date with a recording did.
  struct update_result {
    bool fresh = false;     //!< the replica had no executable: one was instantiated
    std::uint64_t sets = 0; //!< nodes set in place
    std::string refused;    //!< why CUDA refused a node update (then: instantiated again)
  };

  //! Under the replica's lock: instantiates it when it has no executable, then sets the
  //! nodes whose parameters differ from `ops`; a refused set builds and instantiates `ops`.
  update_result update_recorded(replica& r, const std::shared_ptr<const blueprint>& template_bp,
                                const region_ops& ops) {
    update_result u;
    u.fresh = !r.ex.has_value();
    if (u.fresh) {
      r.ex.emplace(m_backend.instantiate(*template_bp));
      r.bp = template_bp;
      r.state = template_bp->ops;
    }
    for (std::size_t i = 0; i < ops.size() && u.refused.empty(); ++i) {
      if (!r.state.same_params(i, ops)) {
        u.refused = m_backend.set(*r.ex, *r.bp, i, ops);
        u.sets += u.refused.empty() ? 1 : 0;
      }
    }
    if (!u.refused.empty()) {
      auto bp = std::make_shared<const blueprint>(m_backend.build(ops));
      r.ex.emplace(m_backend.instantiate(*bp));
      r.bp = std::move(bp);
    }
    r.state = ops;
    return u;
  }

  std::shared_ptr<entry> add_entry(const std::string& key, key_slot& slot,
                                   std::shared_ptr<const blueprint> bp, bool is_captured) {
    auto e = std::make_shared<entry>();
    e->key = key;
    e->is_captured = is_captured;
    e->bp = std::move(bp);
    if (slot.shapes.size() >= m_options.shapes_per_key) {
      drop(slot.shapes.back());
      slot.shapes.pop_back();
    }
    slot.shapes.insert(slot.shapes.begin(), e);
    m_lru.push_front(e);
    e->lru = m_lru.begin();
    while (m_lru.size() > m_options.capacity) {
      std::shared_ptr<entry> victim = m_lru.back();
      drop(victim);
      const auto vs = m_keys.find(victim->key); // every indexed entry's key has a slot
      std::erase(vs->second.shapes, victim);
      if (vs->second.shapes.empty() && !vs->second.captured && &vs->second != &slot) {
        m_keys.erase(vs);
      }
    }
    return e;
  }

  void drop(const std::shared_ptr<entry>& e) {
    m_lru.erase(e->lru);
    ++m_stats.evictions;
  }

  void touch(key_slot& slot, const std::shared_ptr<entry>& e) {
    m_lru.splice(m_lru.begin(), m_lru, e->lru);
    for (std::size_t i = 0; i < slot.shapes.size(); ++i) {
      if (slot.shapes[i] == e) {
        for (; i > 0; --i) {
          slot.shapes[i] = slot.shapes[i - 1];
        }
        slot.shapes[0] = e;
        break;
      }
    }
  }

  //! The replica a replay uses: the idle one last launched on `stream`; else (tracked) any
  //! idle one; else a new one while below the bound; else the least busy.
  replica& pick(entry& e, const void* stream, bool tracked) {
    replica* idle = nullptr;
    replica* least = nullptr;
    for (const auto& r : e.replicas) {
      if (r->in_flight == 0 && r->stream == stream) {
        return take(*r, stream);
      }
      if (r->in_flight == 0 && idle == nullptr) {
        idle = r.get();
      }
      if (least == nullptr || r->in_flight < least->in_flight) {
        least = r.get();
      }
    }
    if (tracked && idle != nullptr) {
      return take(*idle, stream);
    }
    if (e.replicas.size() < m_options.replicas) {
      e.replicas.push_back(std::make_unique<replica>());
      return take(*e.replicas.back(), stream);
    }
    return take(idle != nullptr ? *idle : *least, stream);
  }

  static replica& take(replica& r, const void* stream) noexcept {
    ++r.in_flight;
    r.stream = stream;
    return r;
  }

  void release(replica& r) noexcept {
    const std::lock_guard lock(m_mutex);
    --r.in_flight;
  }

  graph_cache_outcome count_hit(bool replicated, bool changed) noexcept {
    if (replicated) {
      ++m_stats.replicas;
      return graph_cache_outcome::replicated;
    }
    if (changed) {
      ++m_stats.updates;
      return graph_cache_outcome::updated;
    }
    ++m_stats.reused;
    return graph_cache_outcome::reused;
  }

  void note_reinstantiation(const std::string& key, const std::string& why) {
    ++m_stats.reinstantiations;
    m_last_reason = "graph cache: key \"" + key + "\" re-instantiated: " + why;
  }

  Backend m_backend;
  region_cache_options m_options;
  mutable std::mutex m_mutex;
  std::unordered_map<std::string, key_slot> m_keys;
  std::list<std::shared_ptr<entry>> m_lru; // most recently used first
  graph_cache_stats m_stats{};
  std::string m_last_reason;
};

} // namespace cuawait::cuda::detail
