// SPDX-License-Identifier: Apache-2.0
#pragma once

// The model of the random-program stress test: a program is a tree of nodes generated from
// a seed; each node, run as a coroutine, produces a value computed from its own parameters
// and its children's values, or fails with a known marker (the id of the leaf that threw,
// or "cancelled"). What each node produced is recorded while the program runs; `check()`
// then verifies every node against its kind's rule given its children's records, and,
// where the subtree leaves no room for a race (no when_any, no stop request, at most one
// failing leaf under a when_all), against the value computed from the tree alone.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace cuawait::stress {

//! What a node does.
enum class kind : unsigned char {
  value,     //!< leaf: (hop to the pool,) stop if asked, return `value`
  fail,      //!< leaf: (hop to the pool,) throw `test_error{id}`
  sleep,     //!< leaf: sleep `delay_us` on the program's timer, return `value`
  seq,       //!< await the children one after the other
  all,       //!< `when_all` of the children (tuple form when `variadic`, else a vector)
  any,       //!< `when_any` of the children
  scope,     //!< `async_scope`: spawn the children, maybe `request_stop()`, join
  stop,      //!< run the one child with the token of a `std::stop_source` that is stopped
             //!< by `trigger` (and by the node's own token)
  channel,   //!< group: producers and consumers over a `channel<payload>`
  mutex,     //!< group: workers taking an `async_mutex`
  semaphore, //!< group: workers taking permits of an `async_semaphore`
  event,     //!< group: waiters on an `async_event` and one setter
  latch,     //!< group: count-downs and waiters of an `async_latch`
};

//! Who requests stop on a `stop` node's source.
enum class trigger : unsigned char {
  none,    //!< only the node's own token (forwarded)
  program, //!< a sibling coroutine of the child, after `delay_us`
  thread,  //!< a plain thread of the test, after `delay_us`
};

struct node {
  kind what = kind::value;
  int id = 0;
  int parent = -1;
  std::vector<int> children;
  std::uint64_t value = 0; //!< leaves and groups: the value; combinators: a salt
  bool hop = false;        //!< leaves: `co_await pool.schedule()` first; groups: inside
  int delay_us = 0;        //!< sleep leaves, triggers, groups' sleeps: 0-200 µs
  bool variadic = false;   //!< all / any with 2 or 3 children: the tuple form
  trigger stop_by = trigger::none;
  bool scope_stop = false;  //!< scope: `request_stop()` after spawning
  bool use_token = false;   //!< groups: waits take the node's token (cancellable)
  bool early_close = false; //!< channel: a closer races the producers
  int a = 1;                //!< groups: producers / workers / waiters / count-downs
  int b = 1;                //!< groups: consumers / rounds / permits / waiters
  int c = 0; //!< channel: capacity (0 = rendezvous); channel: values per producer in `d`
  int d = 1;
};

struct program {
  std::uint64_t seed = 0;
  int threads = 1;           //!< thread_pool size, 1-4
  bool root_on_pool = false; //!< the root hops onto the pool first (else runs in sync_wait)
  bool known_bugs = false;   //!< generated with `known_bugs` (see generate())
  std::vector<node> nodes;   //!< nodes[0] is the root
};

//! Builds the program of `seed` (the same program for the same seed, on every platform).
//! Unless `known_bugs`, no `when_any` is placed where a stop request can be forwarded to
//! it: that use-after-free (docs/RELIABILITY.md) would fail most runs; with `known_bugs`
//! (CUAWAIT_STRESS_KNOWN_BUGS=1) such programs are generated too, to reproduce it.
[[nodiscard]] program generate(std::uint64_t seed, bool known_bugs = false);

//! A one-line description of the program's shape, to replay and read a failure.
[[nodiscard]] std::string shape(const program& p);

//! What a node was seen to do.
enum class state : unsigned char { not_started, running, value, error, cancelled, other };

struct record {
  state s = state::not_started;
  std::uint64_t value = 0;
  int error = -1;        //!< state::error: the id of the leaf that threw
  std::size_t index = 0; //!< any: the index when_any reported
  std::string other;     //!< state::other: what was thrown
};

//! The value a combinator produces from its children's values.
[[nodiscard]] std::uint64_t combine(std::uint64_t salt, const std::vector<std::uint64_t>& values);

//! Every violation of the model in the records of a finished program (empty: it passed).
[[nodiscard]] std::vector<std::string> check(const program& p, const std::vector<record>& records);

} // namespace cuawait::stress
