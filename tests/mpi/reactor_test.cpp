// SPDX-License-Identifier: Apache-2.0
// MPI requests as a completion source, run under `mpirun -np 2` and `-np 4` (tests/mpi/
// CMakeLists.txt). Every rank runs every test in the same order; each test talks to its ring
// neighbours with tags of its own. Idle pool workers poll the reactor (attach), except where
// a test says otherwise.

#include <cuawait/idle_source_set.hpp>
#include <cuawait/mpi.hpp>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>
#include <stop_token>
#include <string>
#include <vector>

namespace {

namespace ca = cuawait;
namespace mpi = cuawait::mpi;
using namespace std::chrono_literals;

struct ring {
  int rank = 0;
  int size = 1;
  [[nodiscard]] int left() const { return (rank + size - 1) % size; }
  [[nodiscard]] int right() const { return (rank + 1) % size; }
};

ring world() {
  ring r;
  MPI_Comm_rank(MPI_COMM_WORLD, &r.rank);
  MPI_Comm_size(MPI_COMM_WORLD, &r.size);
  return r;
}

//! A pool whose idle workers poll the reactor; the test's coroutines hop onto it first.
class mpi_reactor : public ::testing::Test {
protected:
  mpi_reactor() { mpi.attach(pool); }
  ~mpi_reactor() override {
    mpi.detach();
    MPI_Barrier(MPI_COMM_WORLD); // the next test starts together on every rank
  }

  ring w = world();
  ca::thread_pool pool{2};
  mpi::reactor mpi;
};

TEST_F(mpi_reactor, ring_exchange_through_when_all) {
  auto body = [&]() -> ca::task<int> {
    co_await pool.schedule();
    const std::vector<int> out{w.rank, 100 + w.rank};
    std::vector<int> in(2, -1);
    auto [sent, got] =
        co_await ca::when_all(mpi.send(out, w.right(), 1), mpi.recv(in, w.left(), 1));
    int count = 0;
    MPI_Get_count(&got, MPI_INT, &count);
    EXPECT_EQ(got.MPI_SOURCE, w.left());
    EXPECT_EQ(got.MPI_TAG, 1);
    EXPECT_EQ(count, 2);
    EXPECT_EQ(in[1], 100 + w.left());
    co_return in[0];
  };
  EXPECT_EQ(ca::sync_wait(body()), w.left());
  EXPECT_EQ(mpi.pending(), 0u);
}

ca::task<int> receive_one(ca::thread_pool& pool, mpi::reactor& mpi, int source, int tag) {
  co_await pool.schedule();
  int v = -1;
  co_await mpi.recv(&v, 1, MPI_INT, source, tag);
  co_return v;
}

TEST_F(mpi_reactor, thousand_outstanding_receives_each_get_their_own_message) {
  constexpr int n = 1000;
  auto body = [&]() -> ca::task<void> {
    co_await pool.schedule();
    std::vector<ca::task<int>> receives;
    for (int tag = 0; tag < n; ++tag) {
      receives.push_back(receive_one(pool, mpi, w.left(), 1000 + tag));
    }
    auto sends = [&]() -> ca::task<void> {
      std::vector<int> values(n);
      std::vector<ca::task<void>> all;
      for (int tag = n - 1; tag >= 0; --tag) { // the reverse of the receives' order
        values[static_cast<std::size_t>(tag)] = w.rank * n + tag;
        all.push_back([](mpi::reactor& m, const int* v, int dest, int t) -> ca::task<void> {
          co_await m.send(v, 1, MPI_INT, dest, t);
        }(mpi, &values[static_cast<std::size_t>(tag)], w.right(), 1000 + tag));
      }
      co_await ca::when_all(std::move(all));
    };
    auto [got, none] = co_await ca::when_all(ca::when_all(std::move(receives)), sends());
    (void)none;
    for (int tag = 0; tag < n; ++tag) {
      EXPECT_EQ(got[static_cast<std::size_t>(tag)], w.left() * n + tag) << "tag " << tag;
    }
  };
  ca::sync_wait(body());
  EXPECT_EQ(mpi.pending(), 0u);
}

TEST_F(mpi_reactor, nonblocking_collectives_through_start_and_wait) {
  auto body = [&]() -> ca::task<void> {
    co_await pool.schedule();
    long sum = w.rank;
    co_await mpi.start("allreduce", [&](MPI_Request& r) {
      return MPI_Iallreduce(MPI_IN_PLACE, &sum, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD, &r);
    });
    EXPECT_EQ(sum, static_cast<long>(w.size) * (w.size - 1) / 2);

    // A request the caller started itself: wait() adopts it and writes the final handle back.
    int root_value = w.rank == 0 ? 4242 : 0;
    MPI_Request req = MPI_REQUEST_NULL;
    EXPECT_EQ(MPI_Ibcast(&root_value, 1, MPI_INT, 0, MPI_COMM_WORLD, &req), MPI_SUCCESS);
    co_await mpi.wait(req);
    EXPECT_EQ(req, MPI_REQUEST_NULL);
    EXPECT_EQ(root_value, 4242);

    MPI_Request null_request = MPI_REQUEST_NULL; // completes at once, as MPI_Wait would
    co_await mpi.wait(null_request);
  };
  ca::sync_wait(body());
}

TEST_F(mpi_reactor, truncated_message_is_a_named_error_for_its_receiver_only) {
  auto body = [&]() -> ca::task<std::string> {
    co_await pool.schedule();
    const std::vector<int> out(8, w.rank);
    std::vector<int> in(4);
    auto receive = [&]() -> ca::task<std::string> {
      try {
        co_await mpi.recv(in, w.left(), 2);
      } catch (const mpi::mpi_error& e) {
        EXPECT_EQ(e.error_class(), MPI_ERR_TRUNCATE);
        EXPECT_EQ(e.operation(), "cuawait::mpi::recv");
        EXPECT_EQ(e.api(), "MPI_Irecv");
        co_return e.what();
      }
      co_return "no error";
    };
    auto [sent, what] = co_await ca::when_all(mpi.send(out, w.right(), 2), receive());
    (void)sent;
    co_return what;
  };
  const std::string what = ca::sync_wait(body());
  if (w.rank == 0) {
    std::printf("truncation reported as: %s\n", what.c_str());
  }
  EXPECT_NE(what.find("cuawait::mpi::recv"), std::string::npos) << what;
  EXPECT_NE(what.find("MPI_ERR_TRUNCATE"), std::string::npos) << what;
  EXPECT_EQ(mpi.pending(), 0u);
}

TEST_F(mpi_reactor, invalid_rank_fails_at_start_with_a_named_error) {
  auto body = [&]() -> ca::task<void> {
    co_await pool.schedule();
    const int v = 1;
    try {
      co_await mpi.send(&v, 1, MPI_INT, w.size + 3, 3);
      ADD_FAILURE() << "a send to a rank that does not exist succeeded";
    } catch (const mpi::mpi_error& e) {
      EXPECT_EQ(e.error_class(), MPI_ERR_RANK);
      EXPECT_EQ(e.api(), "MPI_Isend");
      EXPECT_NE(std::string(e.what()).find("MPI_ERR_RANK"), std::string::npos) << e.what();
    }
  };
  ca::sync_wait(body());
  EXPECT_EQ(mpi.pending(), 0u);
}

TEST_F(mpi_reactor, message_that_never_arrives_is_cancelled_by_a_deadline) {
  auto body = [&]() -> ca::task<void> {
    co_await pool.schedule();
    int v = -1;
    auto r = co_await ca::when_any(mpi.recv(&v, 1, MPI_INT, w.left(), 4), ca::sleep_for(100ms));
    EXPECT_EQ(r.index, 1u) << "the receive completed although nothing was sent";
    EXPECT_EQ(mpi.pending(), 0u) << "the cancelled receive is still pending";
    EXPECT_EQ(v, -1);
  };
  ca::sync_wait(body());
  // The cancelled receive took nothing: a message sent now goes to the next receive.
  MPI_Barrier(MPI_COMM_WORLD);
  auto again = [&]() -> ca::task<int> {
    co_await pool.schedule();
    const int out = 40 + w.rank;
    int in = -1;
    co_await ca::when_all(mpi.send(&out, 1, MPI_INT, w.right(), 4),
                          mpi.recv(&in, 1, MPI_INT, w.left(), 4));
    co_return in;
  };
  EXPECT_EQ(ca::sync_wait(again()), 40 + w.left());
}

TEST_F(mpi_reactor, stop_request_cancels_a_pending_receive) {
  std::stop_source stop;
  auto body = [&]() -> ca::task<bool> {
    co_await pool.schedule();
    int v = -1;
    auto receive = [&]() -> ca::task<bool> {
      try {
        co_await mpi.recv(&v, 1, MPI_INT, w.left(), 5, MPI_COMM_WORLD, stop.get_token());
      } catch (const ca::operation_cancelled&) {
        co_return true;
      }
      co_return false;
    };
    auto requester = [&]() -> ca::task<void> {
      while (mpi.pending() == 0) { // until the receive is queued, so MPI_Cancel is what ends it
        co_await pool.schedule();
      }
      stop.request_stop();
    };
    auto [cancelled, none] = co_await ca::when_all(receive(), requester());
    (void)none;
    co_return cancelled;
  };
  EXPECT_TRUE(ca::sync_wait(body()));
  EXPECT_EQ(mpi.pending(), 0u);
}

TEST_F(mpi_reactor, stop_requested_before_the_await_never_starts_the_operation) {
  auto body = [&]() -> ca::task<void> {
    co_await pool.schedule();
    std::stop_source stop;
    stop.request_stop();
    int v = -1;
    EXPECT_THROW(co_await mpi.recv(&v, 1, MPI_INT, w.left(), 6, MPI_COMM_WORLD, stop.get_token()),
                 ca::operation_cancelled);
    EXPECT_EQ(mpi.pending(), 0u);
  };
  ca::sync_wait(body());
}

//! Posts its receive before its first suspension (so when_all has posted them all before it
//! starts the next child).
ca::task<int> receive_by(mpi::reactor& mpi, int source, int tag, MPI_Comm comm,
                         std::chrono::microseconds deadline) {
  int v = -1;
  const auto st =
      co_await mpi::with_deadline(mpi.recv(&v, 1, MPI_INT, source, tag, comm), deadline);
  if (!st) {
    EXPECT_EQ(v, -1) << "a cancelled receive wrote into its buffer";
    co_return -1;
  }
  EXPECT_EQ(st->MPI_TAG, tag);
  co_return v;
}

// Deadlines of 0 to 20 ms race the arrivals: each receive either gets its message (perhaps
// after its cancellation was asked for: with_deadline reports it, when_any would drop it) or
// is cancelled and leaves the message to a later receive. No message is lost or taken twice.
TEST_F(mpi_reactor, random_deadlines_race_arrivals_and_every_message_is_received_once) {
  constexpr int n = 200;
  MPI_Comm comm = MPI_COMM_NULL;
  MPI_Comm_dup(MPI_COMM_WORLD, &comm); // leftovers cannot reach the other tests
  std::mt19937 rng(static_cast<unsigned>(12345 + w.rank));
  std::uniform_int_distribution<int> micros(0, 20000);
  std::vector<int> values(n);
  for (int tag = 0; tag < n; ++tag) {
    values[static_cast<std::size_t>(tag)] = w.rank * 100000 + tag;
  }
  auto body = [&]() -> ca::task<std::vector<int>> {
    co_await pool.schedule();
    MPI_Barrier(comm); // blocks a worker briefly: the other one polls meanwhile
    std::vector<ca::task<int>> receives;
    for (int tag = 0; tag < n; ++tag) {
      receives.push_back(
          receive_by(mpi, w.left(), tag, comm, std::chrono::microseconds(micros(rng))));
    }
    auto sends = [&]() -> ca::task<void> { // even tags only: odd ones never arrive
      // The messages come spread over the deadlines (the ranks left a barrier together).
      for (int tag = 0; tag < n; tag += 2) {
        co_await ca::sleep_for(30us);
        co_await mpi.send(&values[static_cast<std::size_t>(tag)], 1, MPI_INT, w.right(), tag, comm);
      }
    };
    auto [got, none] = co_await ca::when_all(ca::when_all(std::move(receives)), sends());
    (void)none;
    co_return std::move(got);
  };
  const std::vector<int> got = ca::sync_wait(body());
  EXPECT_EQ(mpi.pending(), 0u);
  int raced = 0;
  for (int tag = 0; tag < n; ++tag) {
    const int expected = w.left() * 100000 + tag;
    const int g = got[static_cast<std::size_t>(tag)];
    if (tag % 2 == 1) {
      EXPECT_EQ(g, -1) << "tag " << tag << " was never sent";
    } else if (g == -1) {
      // The deadline won and the receive was cancelled: the message is still MPI's.
      int v = -1;
      MPI_Recv(&v, 1, MPI_INT, w.left(), tag, comm, MPI_STATUS_IGNORE);
      EXPECT_EQ(v, expected) << "tag " << tag;
    } else {
      EXPECT_EQ(g, expected) << "tag " << tag;
      ++raced;
    }
  }
  MPI_Barrier(comm);
  int left_over = 0;
  MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, comm, &left_over, MPI_STATUS_IGNORE);
  EXPECT_EQ(left_over, 0) << "a message was neither received nor left for a later receive";
  MPI_Comm_free(&comm);
  std::printf("rank %d: %d of %d sent messages received before their deadline\n", w.rank, raced,
              n / 2);
}

TEST(mpi_progress_thread, plain_thread_awaits_through_sync_wait) {
  const ring w = world();
  mpi::reactor_options options;
  options.progress_thread = true;
  mpi::reactor mpi(options);
  auto body = [&]() -> ca::task<double> {
    const double out = 0.5 + w.rank;
    double in = -1;
    co_await ca::when_all(mpi.send(&out, 1, MPI_DOUBLE, w.right(), 7),
                          mpi.recv(&in, 1, MPI_DOUBLE, w.left(), 7));
    co_return in;
  };
  EXPECT_EQ(ca::sync_wait(body()), 0.5 + w.left());
  MPI_Barrier(MPI_COMM_WORLD);
}

//! An idle source with nothing pending that counts its polls.
class counting_source final : public ca::idle_source {
public:
  std::size_t poll_idle() noexcept override {
    polls.fetch_add(1);
    return 0;
  }
  [[nodiscard]] bool idle_keep_spinning() const noexcept override { return false; }
  [[nodiscard]] bool idle_pending() const noexcept override { return false; }
  [[nodiscard]] std::chrono::nanoseconds idle_park_period() const noexcept override { return 1ms; }
  std::atomic<std::size_t> polls{0};
};

void wake(void* pool) noexcept { static_cast<ca::thread_pool*>(pool)->wake_idle_poller(); }

TEST(mpi_idle_source_set, one_pool_polls_mpi_beside_another_source) {
  const ring w = world();
  ca::thread_pool pool(2);
  mpi::reactor_options options;
  options.test_on_start = false; // every completion is found by a poll of the set
  mpi::reactor mpi(options);
  counting_source other;
  ca::idle_source_set sources{&other, &mpi};
  mpi.set_idle_waker(&wake, &pool);
  pool.set_idle_source(&sources);
  auto body = [&]() -> ca::task<int> {
    co_await pool.schedule();
    const int out = w.rank;
    int in = -1;
    co_await ca::when_all(mpi.send(&out, 1, MPI_INT, w.right(), 8),
                          mpi.recv(&in, 1, MPI_INT, w.left(), 8));
    co_return in;
  };
  EXPECT_EQ(ca::sync_wait(body()), w.left());
  pool.set_idle_source(nullptr);
  mpi.set_idle_waker(nullptr, nullptr);
  EXPECT_GT(other.polls.load(), 0u); // the set polled both members
  MPI_Barrier(MPI_COMM_WORLD);
}

} // namespace

int main(int argc, char** argv) {
  mpi::environment env(argc, argv);
  ::testing::InitGoogleTest(&argc, argv);
  const int failed = RUN_ALL_TESTS();
  int any = 0;
  MPI_Allreduce(&failed, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  return any;
}
