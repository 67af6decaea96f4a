// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! The CUDA-free logic of the graph cache: a bounded LRU map from a key to an executable
//! graph, and the decision of what to do with a new graph for a key: instantiate it (new
//! key), reuse the cached one as is (same parameters), update it in place (same shape, new
//! parameters), or re-instantiate it (the shape changed; the reason is kept). What
//! "instantiate" and "update" mean comes from the caller, so CPU tests use fakes.

#include "cuawait/gpu_counters.hpp"
#include <cstddef>
#include <cstdint>
#include <list>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <utility>

namespace cuawait::cuda::detail {

//! The cache proper. Not thread-safe: the owner locks around `acquire` and around every use
//! of the returned executable (which stays valid until the next `acquire` or `clear`).
template <class Exec>
class graph_cache_core {
public:
  //! `capacity`: entries kept before the least recently used one is dropped (>= 1).
  //! @throws std::invalid_argument when `capacity` is 0
  explicit graph_cache_core(std::size_t capacity) : m_capacity(capacity) {
    if (capacity == 0) {
      throw std::invalid_argument("cuawait: a graph cache needs a capacity of at least 1");
    }
  }

  //! Makes the executable cached for `key` match `g` and returns it with what was done.
  //! - `instantiate(g)` returns a new `Exec` (may throw: nothing is cached then);
  //! - `update(exec, g)` applies `g`'s parameters to `exec` and returns nullptr, or returns
  //!   a reason (static string) when it cannot, leaving `exec` usable as it was.
  //! `fingerprint` summarises `g`'s parameters when the caller knows them; equal non-zero
  //! fingerprints skip the update. 0 means unknown (always update).
  template <class Graph, class Instantiate, class Update>
  std::pair<Exec&, graph_cache_outcome> acquire(const std::string& key, const Graph& g,
                                                std::uint64_t fingerprint,
                                                Instantiate&& instantiate, Update&& update) {
    const auto found = m_index.find(key);
    if (found == m_index.end()) {
      Exec e = instantiate(g);
      evict_to(m_capacity - 1);
      m_entries.push_front(entry{key, std::move(e), fingerprint});
      m_index.emplace(key, m_entries.begin());
      ++m_stats.misses;
      return {m_entries.front().exec, graph_cache_outcome::instantiated};
    }
    m_entries.splice(m_entries.begin(), m_entries, found->second); // most recently used
    entry& en = m_entries.front();
    ++m_stats.hits;
    if (fingerprint != 0 && fingerprint == en.fingerprint) {
      ++m_stats.reused;
      return {en.exec, graph_cache_outcome::reused};
    }
    if (const char* reason = update(en.exec, g); reason == nullptr) {
      en.fingerprint = fingerprint;
      ++m_stats.updates;
      return {en.exec, graph_cache_outcome::updated};
    } else {
      m_last_reason = "graph cache: key \"" + key + "\" re-instantiated: " + reason;
    }
    en.fingerprint = 0; // in case instantiate throws: the old exec stays, fingerprint unknown
    en.exec = instantiate(g);
    en.fingerprint = fingerprint;
    ++m_stats.reinstantiations;
    return {en.exec, graph_cache_outcome::reinstantiated};
  }

  //! Counters and the current size.
  [[nodiscard]] graph_cache_stats stats() const noexcept {
    graph_cache_stats s = m_stats;
    s.size = m_entries.size();
    return s;
  }
  //! Why the last re-instantiation happened ("graph cache: key "k" re-instantiated: the
  //! topology changed ..."), or empty.
  [[nodiscard]] const std::string& last_reason() const noexcept { return m_last_reason; }
  //! The capacity given at construction.
  [[nodiscard]] std::size_t capacity() const noexcept { return m_capacity; }
  //! True when `key` is cached.
  [[nodiscard]] bool contains(const std::string& key) const { return m_index.contains(key); }
  //! Drops every entry (counters stay).
  void clear() noexcept {
    m_index.clear();
    m_entries.clear();
  }

private:
  struct entry {
    std::string key;
    Exec exec;
    std::uint64_t fingerprint;
  };

  void evict_to(std::size_t n) noexcept {
    while (m_entries.size() > n) {
      m_index.erase(m_entries.back().key);
      m_entries.pop_back();
      ++m_stats.evictions;
    }
  }

  std::size_t m_capacity;
  std::list<entry> m_entries; // most recently used first
  std::unordered_map<std::string, typename std::list<entry>::iterator> m_index;
  graph_cache_stats m_stats{};
  std::string m_last_reason;
};

} // namespace cuawait::cuda::detail
