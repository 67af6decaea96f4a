// SPDX-License-Identifier: Apache-2.0
// cuawait-mpi-pingpong: what awaiting MPI through cuawait costs, against plain MPI in the same
// run. Two ranks (mpiexec -n 2); rank 0 prints one table.
//
//  1. Ping-pong round trip at 8 B and 1 MiB: a blocking MPI_Send/MPI_Recv loop, then the same
//     exchange as a coroutine (`co_await mpi.send`, `co_await mpi.recv`) on a thread_pool whose
//     idle workers poll the reactor, then on a plain thread with the reactor's progress thread.
//  2. Many outstanding requests: rank 0 posts N receives (MPI_Irecv, untimed), both ranks
//     meet at a barrier, rank 1 sends N 8-byte messages. Rank 0's time from the barrier until
//     every receive is complete, per completion: a hand-written MPI_Testsome loop over the
//     array (compacted as requests complete), then N coroutines each `co_await
//     mpi.wait(request)`.
//
// Options: --iterations N (8 B round trips; 1 MiB uses N/10), --outstanding N (10000),
// --threads N (pool workers, 2), --repeat N (best of N runs per row, 5).

#include <cuawait/async_latch.hpp>
#include <cuawait/mpi.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <functional>
#include <string>
#include <vector>

namespace {

namespace ca = cuawait;
namespace mpi = cuawait::mpi;
using clock_type = std::chrono::steady_clock;

struct options {
  int iterations = 10000;
  int outstanding = 10000;
  std::size_t threads = 2;
  int repeat = 5;
};

options parse(int argc, char** argv) {
  options o;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    const int v = std::atoi(argv[i + 1]);
    if (flag == "--iterations") {
      o.iterations = std::max(10, v);
    } else if (flag == "--outstanding") {
      o.outstanding = std::max(1, v);
    } else if (flag == "--threads") {
      o.threads = static_cast<std::size_t>(std::max(1, v));
    } else if (flag == "--repeat") {
      o.repeat = std::max(1, v);
    } else {
      std::fprintf(stderr, "cuawait-mpi-pingpong: unknown option %s\n", flag.c_str());
      std::exit(2);
    }
  }
  return o;
}

double seconds_since(clock_type::time_point t0) {
  return std::chrono::duration<double>(clock_type::now() - t0).count();
}

//! Microseconds per round trip of a blocking loop.
double blocking_pingpong(int rank, std::vector<char>& buf, int iterations) {
  const int n = static_cast<int>(buf.size());
  MPI_Barrier(MPI_COMM_WORLD);
  const auto t0 = clock_type::now();
  for (int i = 0; i < iterations; ++i) {
    if (rank == 0) {
      MPI_Send(buf.data(), n, MPI_CHAR, 1, 0, MPI_COMM_WORLD);
      MPI_Recv(buf.data(), n, MPI_CHAR, 1, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    } else {
      MPI_Recv(buf.data(), n, MPI_CHAR, 0, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      MPI_Send(buf.data(), n, MPI_CHAR, 0, 0, MPI_COMM_WORLD);
    }
  }
  return seconds_since(t0) * 1e6 / iterations;
}

ca::task<void> pingpong_body(mpi::reactor& m, int rank, std::vector<char>& buf, int iterations) {
  const int n = static_cast<int>(buf.size());
  const int peer = 1 - rank;
  for (int i = 0; i < iterations; ++i) {
    if (rank == 0) {
      co_await m.send(buf.data(), n, MPI_CHAR, peer, 0);
      co_await m.recv(buf.data(), n, MPI_CHAR, peer, 0);
    } else {
      co_await m.recv(buf.data(), n, MPI_CHAR, peer, 0);
      co_await m.send(buf.data(), n, MPI_CHAR, peer, 0);
    }
  }
}

//! Microseconds per round trip, the coroutine running on `pool` (idle workers poll).
double pool_pingpong(ca::thread_pool& pool, mpi::reactor& m, int rank, std::vector<char>& buf,
                     int iterations) {
  auto run = [&]() -> ca::task<void> {
    co_await pool.schedule();
    co_await pingpong_body(m, rank, buf, iterations);
  };
  MPI_Barrier(MPI_COMM_WORLD);
  const auto t0 = clock_type::now();
  ca::sync_wait(run());
  return seconds_since(t0) * 1e6 / iterations;
}

//! Microseconds per round trip, the coroutine on this thread, the reactor's thread polling.
double thread_pingpong(mpi::reactor& m, int rank, std::vector<char>& buf, int iterations) {
  MPI_Barrier(MPI_COMM_WORLD);
  const auto t0 = clock_type::now();
  ca::sync_wait(pingpong_body(m, rank, buf, iterations));
  return seconds_since(t0) * 1e6 / iterations;
}

//! Rank 1's side of the many-requests runs: N sends after the barrier.
void send_burst(int n) {
  std::vector<int> values(static_cast<std::size_t>(n));
  std::vector<MPI_Request> reqs(static_cast<std::size_t>(n));
  MPI_Barrier(MPI_COMM_WORLD);
  for (int i = 0; i < n; ++i) {
    values[static_cast<std::size_t>(i)] = i;
    MPI_Isend(&values[static_cast<std::size_t>(i)], 1, MPI_INT, 0, 1, MPI_COMM_WORLD,
              &reqs[static_cast<std::size_t>(i)]);
  }
  MPI_Waitall(n, reqs.data(), MPI_STATUSES_IGNORE);
  MPI_Barrier(MPI_COMM_WORLD); // the receiver has checked its values
}

void post_receives(std::vector<int>& values, std::vector<MPI_Request>& reqs) {
  for (std::size_t i = 0; i < reqs.size(); ++i) {
    values[i] = -1;
    MPI_Irecv(&values[i], 1, MPI_INT, 1, 1, MPI_COMM_WORLD, &reqs[i]);
  }
}

void check_values(const std::vector<int>& values) {
  for (std::size_t i = 0; i < values.size(); ++i) {
    if (values[i] != static_cast<int>(i)) { // same source and tag: matched in order
      std::fprintf(stderr, "cuawait-mpi-pingpong: wrong value %d at %zu\n", values[i], i);
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
  }
}

//! Nanoseconds per completion of a hand-written MPI_Testsome loop (rank 0).
double testsome_loop(int n) {
  std::vector<int> values(static_cast<std::size_t>(n));
  std::vector<MPI_Request> reqs(static_cast<std::size_t>(n));
  std::vector<int> indices(static_cast<std::size_t>(n));
  std::vector<MPI_Status> statuses(static_cast<std::size_t>(n));
  post_receives(values, reqs);
  MPI_Barrier(MPI_COMM_WORLD);
  const auto t0 = clock_type::now();
  // Completed requests leave the tested array (the last one moves into the hole, highest
  // index first), as the reactor does: otherwise every call rescans the finished ones.
  int live = n;
  while (live > 0) {
    int outcount = 0;
    MPI_Testsome(live, reqs.data(), &outcount, indices.data(), statuses.data());
    if (outcount == MPI_UNDEFINED || outcount == 0) {
      continue;
    }
    std::sort(indices.begin(), indices.begin() + outcount, std::greater<>());
    for (int k = 0; k < outcount; ++k) {
      reqs[static_cast<std::size_t>(indices[static_cast<std::size_t>(k)])] =
          reqs[static_cast<std::size_t>(live - 1)];
      --live;
    }
  }
  const double ns = seconds_since(t0) * 1e9 / n;
  check_values(values);
  MPI_Barrier(MPI_COMM_WORLD);
  return ns;
}

//! A coroutine that starts at once and frees itself; counts the latch down when done.
struct fire_and_forget {
  struct promise_type {
    fire_and_forget get_return_object() noexcept { return {}; }
    std::suspend_never initial_suspend() const noexcept { return {}; }
    std::suspend_never final_suspend() const noexcept { return {}; }
    void return_void() const noexcept {}
    void unhandled_exception() const noexcept { std::terminate(); }
  };
};

fire_and_forget await_one(mpi::reactor& m, MPI_Request& r, ca::async_latch& done) {
  co_await m.wait(r);
  done.count_down();
}

//! Nanoseconds per completion of N coroutines awaiting the same requests, polled by `pool`.
double awaited_requests(ca::thread_pool& pool, mpi::reactor& m, int n) {
  std::vector<int> values(static_cast<std::size_t>(n));
  std::vector<MPI_Request> reqs(static_cast<std::size_t>(n));
  post_receives(values, reqs);
  ca::async_latch done(n);
  auto start_all = [&]() -> ca::task<void> { // registered on a worker, before the barrier
    co_await pool.schedule();
    for (MPI_Request& r : reqs) {
      await_one(m, r, done);
    }
  };
  ca::sync_wait(start_all());
  MPI_Barrier(MPI_COMM_WORLD);
  const auto t0 = clock_type::now();
  ca::sync_wait(done.wait());
  const double ns = seconds_since(t0) * 1e9 / n;
  check_values(values);
  MPI_Barrier(MPI_COMM_WORLD);
  return ns;
}

template <class F>
double best_of(int repeat, F&& f) {
  double best = 1e300;
  for (int i = 0; i < repeat; ++i) {
    best = std::min(best, f());
  }
  return best;
}

} // namespace

int main(int argc, char** argv) {
  mpi::environment env(argc, argv);
  const options o = parse(argc, argv);
  if (env.size() != 2) {
    if (env.rank() == 0) {
      std::fprintf(stderr, "cuawait-mpi-pingpong: run with mpiexec -n 2\n");
    }
    return 2;
  }
  const int rank = env.rank();
  struct row {
    std::string what;
    double blocking, pool, thread;
  };
  std::vector<row> rows;
  for (const std::size_t bytes : {std::size_t{8}, std::size_t{1} << 20}) {
    std::vector<char> buf(bytes, 'x');
    const int iters = bytes > 8 ? std::max(10, o.iterations / 10) : o.iterations;
    row r{bytes > 8 ? "1 MiB round trip (us)" : "8 B round trip (us)", 0, 0, 0};
    blocking_pingpong(rank, buf, iters / 10); // warm-up: connections, registration caches
    r.blocking = best_of(o.repeat, [&] { return blocking_pingpong(rank, buf, iters); });
    {
      ca::thread_pool pool(o.threads);
      mpi::reactor m;
      m.attach(pool);
      r.pool = best_of(o.repeat, [&] { return pool_pingpong(pool, m, rank, buf, iters); });
      m.detach();
    }
    {
      mpi::reactor_options ro;
      ro.progress_thread = true;
      mpi::reactor m(ro);
      r.thread = best_of(o.repeat, [&] { return thread_pingpong(m, rank, buf, iters); });
    }
    rows.push_back(r);
  }

  double hand = 0;
  double awaited = 0;
  if (rank == 1) {
    for (int i = 0; i < 2 * o.repeat; ++i) {
      send_burst(o.outstanding);
    }
  } else {
    hand = best_of(o.repeat, [&] { return testsome_loop(o.outstanding); });
    ca::thread_pool pool(o.threads);
    mpi::reactor m;
    m.attach(pool);
    awaited = best_of(o.repeat, [&] { return awaited_requests(pool, m, o.outstanding); });
    m.detach();
  }

  if (rank == 0) {
    std::printf("cuawait-mpi-pingpong: 2 ranks, %zu pool threads, best of %d\n", o.threads,
                o.repeat);
    std::printf("%-24s %12s %14s %16s %8s %10s\n", "round trip", "blocking", "co_await pool",
                "co_await thread", "pool/blk", "thread/blk");
    for (const row& r : rows) {
      std::printf("%-24s %12.2f %14.2f %16.2f %8.2f %10.2f\n", r.what.c_str(), r.blocking, r.pool,
                  r.thread, r.pool / r.blocking, r.thread / r.blocking);
    }
    std::printf("%d outstanding receives, ns per completion: MPI_Testsome loop %.1f, "
                "co_await mpi.wait %.1f, ratio %.2f\n",
                o.outstanding, hand, awaited, awaited / hand);
  }
  return 0;
}
