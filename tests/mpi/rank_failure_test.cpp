// SPDX-License-Identifier: Apache-2.0
// A rank that fails mid-run: odd ranks send part of a stream to their even neighbour, then
// die (_exit, no MPI_Finalize). The survivor awaits each message with a deadline; it must
// get the messages that were sent, then a deadline instead of a hang, and the reactor must be
// left with nothing pending. Open MPI 4 reports a dead peer to nobody (its receives just never
// complete), which is why the deadline is the defence; an MPI with fault tolerance would
// resume the receive with an mpi_error instead, and that counts as a pass too.
// Run by mpiexec with --enable-recovery (tests/mpi/CMakeLists.txt); prints the verdict.
// The survivors end without MPI_Finalize (see the end of main).

#include <cuawait/mpi.hpp>

#include <chrono>
#include <cstdio>
#include <unistd.h>

namespace {

namespace ca = cuawait;
namespace mpi = cuawait::mpi;
using namespace std::chrono_literals;

constexpr int sent_before_failure = 3;
constexpr int stream_length = 10;
constexpr int ack_tag = 99;

enum class ending { none, deadline, named_error };

struct verdict {
  int received = 0;
  ending how = ending::none;
};

//! The survivor: takes the stream message by message, each within a deadline.
ca::task<verdict> survive(ca::thread_pool& pool, mpi::reactor& m, int peer) {
  co_await pool.schedule();
  verdict v;
  for (int i = 0; i < stream_length; ++i) {
    int value = -1;
    try {
      const auto st = co_await mpi::with_deadline(m.recv(&value, 1, MPI_INT, peer, i), 500ms);
      if (!st) {
        v.how = ending::deadline;
        break;
      }
    } catch (const mpi::mpi_error& e) {
      std::printf("rank_failure: survivor got %s\n", e.what());
      v.how = ending::named_error;
      break;
    }
    if (value != i * 10) {
      break; // wrong content: reported as a failure below (how stays none)
    }
    ++v.received;
    if (v.received == sent_before_failure) {
      const int ack = 1; // lets the peer die only once its messages are here
      co_await m.send(&ack, 1, MPI_INT, peer, ack_tag);
    }
  }
  co_return v;
}

} // namespace

int main(int argc, char** argv) {
  mpi::environment env(argc, argv);
  const bool dies = env.rank() % 2 == 1;
  MPI_Comm survivors = MPI_COMM_NULL;
  MPI_Comm_split(MPI_COMM_WORLD, dies ? 1 : 0, env.rank(), &survivors);
  if (env.size() < 2 || env.size() % 2 != 0) {
    std::printf("rank_failure: FAIL: needs an even number of ranks\n");
    return 1;
  }
  if (dies) {
    for (int i = 0; i < sent_before_failure; ++i) {
      const int value = i * 10;
      MPI_Send(&value, 1, MPI_INT, env.rank() - 1, i, MPI_COMM_WORLD);
    }
    int ack = 0;
    MPI_Recv(&ack, 1, MPI_INT, env.rank() - 1, ack_tag, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    std::fflush(stdout);
    _exit(3); // mid-run, without MPI_Finalize
  }

  int ok = 0;
  {
    ca::thread_pool pool(2);
    mpi::reactor m;
    m.attach(pool);
    const verdict v = ca::sync_wait(survive(pool, m, env.rank() + 1));
    ok = v.received == sent_before_failure && v.how != ending::none && m.pending() == 0;
    std::printf("rank_failure: rank %d received %d of %d, then %s%s\n", env.rank(), v.received,
                stream_length,
                v.how == ending::deadline      ? "a deadline"
                : v.how == ending::named_error ? "a named error"
                                               : "nothing",
                ok ? "" : " (FAIL)");
    m.detach();
  }
  int all_ok = 0;
  MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, survivors);
  int count = 0;
  MPI_Comm_size(survivors, &count);
  if (env.rank() == 0) {
    if (all_ok != 0) {
      std::printf("rank_failure: all %d survivors ok\n", count);
    } else {
      std::printf("rank_failure: FAIL\n");
    }
  }
  MPI_Comm_free(&survivors);
  // Open MPI 4's MPI_Finalize waits (at random) on the dead ranks in a fence it never
  // completes: a job that lost a rank ends without it (docs/MPI.md, "When a rank fails").
  std::fflush(stdout);
  _exit(all_ok != 0 ? 0 : 1);
}
