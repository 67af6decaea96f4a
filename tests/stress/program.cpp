// SPDX-License-Identifier: Apache-2.0
// Generating, printing and checking random programs (see program.hpp).

#include "program.hpp"

#include <algorithm>

namespace cuawait::stress {
namespace {

// splitmix64: the same stream on every platform (std distributions are not portable).
class rng {
public:
  explicit rng(std::uint64_t seed) : m_state(seed) {}
  std::uint64_t next() {
    std::uint64_t z = (m_state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }
  int below(int n) { return static_cast<int>(next() % static_cast<std::uint64_t>(n)); }
  int between(int lo, int hi) { return lo + below(hi - lo + 1); }
  bool chance(int percent) { return below(100) < percent; }

private:
  std::uint64_t m_state;
};

constexpr int max_depth = 4;
constexpr int max_nodes = 40;

// Picks from `weights` (relative) the index of one entry.
int pick(rng& r, std::initializer_list<int> weights) {
  int total = 0;
  for (const int w : weights) {
    total += w;
  }
  int x = r.below(total);
  int i = 0;
  for (const int w : weights) {
    if (x < w) {
      return i;
    }
    x -= w;
    ++i;
  }
  return i - 1;
}

class generator {
public:
  generator(std::uint64_t seed, bool known_bugs) : m_rng(seed) {
    m_prog.seed = seed;
    m_prog.known_bugs = known_bugs;
  }

  program run() {
    m_prog.threads = m_rng.between(1, 4);
    m_prog.root_on_pool = m_rng.chance(50);
    make(-1, 0, false);
    return std::move(m_prog);
  }

private:
  // `stoppable`: a stop request can reach the node through the token it inherits.
  int make(int parent, int depth, bool stoppable) {
    const int id = static_cast<int>(m_prog.nodes.size());
    m_prog.nodes.emplace_back();
    node& n = m_prog.nodes.back();
    n.id = id;
    n.parent = parent;
    n.value = m_rng.next();
    n.hop = m_rng.chance(50);
    n.delay_us = m_rng.between(0, 200);
    n.use_token = m_rng.chance(50);
    const bool leaf = depth >= max_depth || static_cast<int>(m_prog.nodes.size()) >= max_nodes ||
                      (depth > 0 && m_rng.chance(45));
    if (leaf) {
      make_leaf(id);
    } else {
      make_combinator(id, depth, stoppable);
    }
    return id;
  }

  void make_leaf(int id) {
    static constexpr kind leaves[] = {kind::value, kind::fail,      kind::sleep, kind::channel,
                                      kind::mutex, kind::semaphore, kind::event, kind::latch};
    node& n = m_prog.nodes[static_cast<std::size_t>(id)];
    n.what = leaves[pick(m_rng, {30, 7, 23, 10, 8, 8, 7, 7})];
    n.a = m_rng.between(1, 4);
    n.b = m_rng.between(1, 4);
    n.c = m_rng.between(0, 3);
    n.d = m_rng.between(1, 6);
    n.early_close = m_rng.chance(30);
  }

  void make_combinator(int id, int depth, bool stoppable) {
    static constexpr kind combinators[] = {kind::seq, kind::all, kind::any, kind::scope,
                                           kind::stop};
    kind k = combinators[pick(m_rng, {15, 30, 25, 15, 15})];
    if (k == kind::any && stoppable && !m_prog.known_bugs) {
      k = kind::all;
    }
    const int count = k == kind::stop ? 1 : m_rng.between(1, 4);
    bool children_stoppable = stoppable;
    {
      node& n = m_prog.nodes[static_cast<std::size_t>(id)];
      n.what = k;
      n.variadic = (count == 2 || count == 3) && m_rng.chance(50);
      n.stop_by = static_cast<trigger>(m_rng.below(3));
      n.scope_stop = m_rng.chance(30);
      if (k == kind::scope) {
        children_stoppable = n.scope_stop;
      } else if ((k == kind::any && count > 1) || (k == kind::stop && n.stop_by != trigger::none)) {
        children_stoppable = true;
      }
    }
    for (int i = 0; i < count; ++i) {
      const int child = make(id, depth + 1, children_stoppable); // may reallocate nodes
      m_prog.nodes[static_cast<std::size_t>(id)].children.push_back(child);
    }
  }

  rng m_rng;
  program m_prog;
};

const char* name_of(kind k) {
  switch (k) {
  case kind::value:
    return "v";
  case kind::fail:
    return "throw";
  case kind::sleep:
    return "sleep";
  case kind::seq:
    return "seq";
  case kind::all:
    return "all";
  case kind::any:
    return "any";
  case kind::scope:
    return "scope";
  case kind::stop:
    return "stop";
  case kind::channel:
    return "chan";
  case kind::mutex:
    return "mutex";
  case kind::semaphore:
    return "sem";
  case kind::event:
    return "event";
  case kind::latch:
    return "latch";
  }
  return "?";
}

void describe(const program& p, int id, std::string& out) {
  const node& n = p.nodes[static_cast<std::size_t>(id)];
  out += '#' + std::to_string(id) + name_of(n.what);
  switch (n.what) {
  case kind::value:
  case kind::fail:
    out += n.hop ? "^" : "";
    return;
  case kind::sleep:
    out += std::to_string(n.delay_us) + "us";
    return;
  case kind::channel:
    out += "{p" + std::to_string(n.a) + " c" + std::to_string(n.b) + " cap" + std::to_string(n.c) +
           " n" + std::to_string(n.d) + (n.early_close ? " early" : "") +
           (n.use_token ? " tok" : "") + "}";
    return;
  case kind::mutex:
  case kind::semaphore:
  case kind::event:
  case kind::latch:
    out += "{" + std::to_string(n.a) + "," + std::to_string(n.b) + (n.hop ? " hop" : "") +
           (n.use_token ? " tok" : "") + "}";
    return;
  case kind::stop:
    out += n.stop_by == trigger::none ? "" : n.stop_by == trigger::program ? "@prog" : "@thread";
    out += std::to_string(n.delay_us) + "us";
    break;
  case kind::scope:
    out += n.scope_stop ? "@stop" : "";
    break;
  default:
    out += n.variadic ? "<>" : "";
    break;
  }
  out += '(';
  for (std::size_t i = 0; i < n.children.size(); ++i) {
    out += i == 0 ? "" : ",";
    describe(p, n.children[i], out);
  }
  out += ')';
}

// Whether a stop request can reach node `id` (through the tokens it inherits).
bool cancellable(const program& p, int id) {
  for (int par = p.nodes[static_cast<std::size_t>(id)].parent; par >= 0;
       par = p.nodes[static_cast<std::size_t>(par)].parent) {
    const node& q = p.nodes[static_cast<std::size_t>(par)];
    if (q.what == kind::any && q.children.size() > 1) {
      return true;
    }
    if (q.what == kind::stop && q.stop_by != trigger::none) {
      return true;
    }
    if (q.what == kind::scope) {
      return q.scope_stop; // spawned work inherits the scope's token only
    }
  }
  return false;
}

struct outcome {
  state s = state::value;
  std::uint64_t value = 0;
  int error = -1;
};

bool finished(state s) { return s == state::value || s == state::error || s == state::cancelled; }

bool same(const record& a, const record& b) {
  return a.s == b.s && (a.s != state::value || a.value == b.value) &&
         (a.s != state::error || a.error == b.error);
}

// The outcome the tree alone determines, or nullopt where a race may decide it.
std::optional<outcome> expected(const program& p, int id) {
  const node& n = p.nodes[static_cast<std::size_t>(id)];
  switch (n.what) {
  case kind::value:
  case kind::sleep:
    if (cancellable(p, id)) {
      return std::nullopt;
    }
    return outcome{state::value, n.value};
  case kind::fail:
    return outcome{state::error, 0, id};
  case kind::channel:
  case kind::mutex:
  case kind::semaphore:
  case kind::event:
  case kind::latch:
    return outcome{state::value, n.value};
  case kind::stop:
    return expected(p, n.children[0]);
  case kind::any:
    if (n.children.size() == 1) {
      const auto e = expected(p, n.children[0]);
      if (e && e->s == state::value) {
        return outcome{state::value, combine(n.value, {0, e->value})};
      }
      return e;
    }
    return std::nullopt;
  case kind::seq:
  case kind::all:
  case kind::scope: {
    std::vector<std::uint64_t> values;
    std::optional<outcome> failure;
    int failures = 0;
    for (const int c : n.children) {
      const auto e = expected(p, c);
      if (!e) {
        return std::nullopt;
      }
      if (e->s != state::value) {
        if (n.what == kind::seq) {
          return e;
        }
        failure = e;
        ++failures;
      }
      values.push_back(e->value);
    }
    if (failures > 1) {
      return std::nullopt;
    }
    return failure ? failure : outcome{state::value, combine(n.value, values)};
  }
  }
  return std::nullopt;
}

std::string show(const record& r) {
  switch (r.s) {
  case state::not_started:
    return "not started";
  case state::running:
    return "never finished";
  case state::value:
    return "value " + std::to_string(r.value);
  case state::error:
    return "error of #" + std::to_string(r.error);
  case state::cancelled:
    return "cancelled";
  case state::other:
    return "unexpected exception: " + r.other;
  }
  return "?";
}

class checker {
public:
  checker(const program& p, const std::vector<record>& r) : m_p(p), m_r(r) {}

  std::vector<std::string> run() {
    if (!finished(m_r[0].s)) {
      fail(0, "the root ended as: " + show(m_r[0]));
    }
    for (std::size_t id = 0; id < m_p.nodes.size(); ++id) {
      check_node(static_cast<int>(id));
    }
    return std::move(m_failures);
  }

private:
  void fail(int id, const std::string& what) {
    if (m_failures.size() < 20) {
      m_failures.push_back("#" + std::to_string(id) + ": " + what);
    }
  }

  const record& rec(int id) const { return m_r[static_cast<std::size_t>(id)]; }

  void check_node(int id) {
    const node& n = m_p.nodes[static_cast<std::size_t>(id)];
    const record& r = rec(id);
    if (r.s == state::not_started) {
      for (const int c : n.children) {
        if (rec(c).s != state::not_started) {
          fail(c, "ran although its parent never started");
        }
      }
      return;
    }
    if (!finished(r.s)) {
      fail(id, show(r));
      return;
    }
    // A combinator may pass on a child's cancellation; a leaf needs a stop request.
    if (r.s == state::cancelled && n.children.empty() && !cancellable(m_p, id)) {
      fail(id, "cancelled, but no stop request can reach it");
    }
    if (const auto e = expected(m_p, id)) {
      const record want{e->s, e->value, e->error};
      if (!same(r, want)) {
        fail(id, "ended as " + show(r) + ", the program must produce " + show(want));
      }
    }
    check_rule(n, r);
  }

  void check_rule(const node& n, const record& r) {
    switch (n.what) {
    case kind::value:
    case kind::sleep:
      if (r.s != state::cancelled && !(r.s == state::value && r.value == n.value)) {
        fail(n.id, "leaf ended as " + show(r));
      }
      return;
    case kind::fail:
      if (r.s != state::error || r.error != n.id) {
        fail(n.id, "throwing leaf ended as " + show(r));
      }
      return;
    case kind::stop:
      if (!same(r, rec(n.children[0]))) {
        fail(n.id, "stop node ended as " + show(r) + ", its child as " + show(rec(n.children[0])));
      }
      return;
    case kind::seq:
      check_seq(n, r);
      return;
    case kind::all:
    case kind::scope:
    case kind::any:
      check_concurrent(n, r);
      return;
    default: // groups: the expected() check above is exact
      return;
    }
  }

  void check_seq(const node& n, const record& r) {
    std::vector<std::uint64_t> values;
    for (std::size_t i = 0; i < n.children.size(); ++i) {
      const record& c = rec(n.children[i]);
      if (c.s == state::value) {
        values.push_back(c.value);
        continue;
      }
      if (!same(r, c)) {
        fail(n.id, "seq ended as " + show(r) + ", its failing child as " + show(c));
      }
      for (std::size_t j = i + 1; j < n.children.size(); ++j) {
        if (rec(n.children[j]).s != state::not_started) {
          fail(n.children[j], "ran after an earlier child of its seq failed");
        }
      }
      return;
    }
    if (r.s != state::value || r.value != combine(n.value, values)) {
      fail(n.id, "seq of values ended as " + show(r));
    }
  }

  void check_concurrent(const node& n, const record& r) {
    std::vector<std::uint64_t> values;
    bool all_values = true;
    bool matches_a_failure = false;
    for (const int c : n.children) {
      const record& cr = rec(c);
      if (!finished(cr.s)) {
        fail(c, "child of a finished when_all/when_any/scope " + show(cr));
        return;
      }
      all_values = all_values && cr.s == state::value;
      matches_a_failure = matches_a_failure || (cr.s != state::value && same(r, cr));
      values.push_back(cr.value);
    }
    if (n.what == kind::any) {
      if (r.s == state::value) {
        const bool ok = r.index < values.size() && rec(n.children[r.index]).s == state::value &&
                        r.value == combine(n.value, {r.index, values[r.index]});
        if (!ok) {
          fail(n.id, "when_any returned index " + std::to_string(r.index) + " and " + show(r) +
                         ", which no child produced");
        }
      } else if (!matches_a_failure) {
        fail(n.id, "when_any ended as " + show(r) + ", which no child did");
      }
      return;
    }
    if (all_values) {
      if (r.s != state::value || r.value != combine(n.value, values)) {
        fail(n.id, "all children produced values but the node ended as " + show(r));
      }
    } else if (!matches_a_failure) {
      fail(n.id, "a child failed and the node ended as " + show(r) + ", which no child did");
    }
  }

  const program& m_p;
  const std::vector<record>& m_r;
  std::vector<std::string> m_failures;
};

} // namespace

program generate(std::uint64_t seed, bool known_bugs) { return generator(seed, known_bugs).run(); }

std::string shape(const program& p) {
  std::string out = "seed " + std::to_string(p.seed) + ", " + std::to_string(p.threads) +
                    " thread(s), root " + (p.root_on_pool ? "on the pool" : "in sync_wait") +
                    (p.known_bugs ? ", CUAWAIT_STRESS_KNOWN_BUGS=1" : "") + ": ";
  describe(p, 0, out);
  return out;
}

std::uint64_t combine(std::uint64_t salt, const std::vector<std::uint64_t>& values) {
  std::uint64_t h = salt;
  for (const std::uint64_t v : values) {
    h ^= v + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2); // order matters: results in order
  }
  return h;
}

std::vector<std::string> check(const program& p, const std::vector<record>& records) {
  return checker(p, records).run();
}

} // namespace cuawait::stress
