// SPDX-License-Identifier: Apache-2.0
// Gates: gated work the GPU has not started is skipped once the gate's token is stopped;
// gated work that started before, and plain work, runs. Outcomes are checked through what
// each kernel wrote, never through timings.

#include "common/gpu.hpp"
#include "common/spin_kernel.cuh"

#include <cuawait/cancellation.hpp>
#include <cuawait/cuda.hpp>
#include <cuawait/sync_wait.hpp>
#include <cuawait/task.hpp>

#include <gtest/gtest.h>

#include <cstdint>
#include <stdexcept>
#include <stop_token>
#include <string>
#include <vector>

namespace {

namespace ca = cuawait;
namespace cu = cuawait::cuda;
using ca::task;

__global__ void write_one(int* out, int i) { out[i] = 1; }

//! Mapped output words, one per unit, zeroed.
struct outputs {
  explicit outputs(int n) : buf(static_cast<std::size_t>(n)) {}
  [[nodiscard]] int at(int i) const { return reinterpret_cast<volatile int*>(buf.host_data())[i]; }
  cu::mapped_buffer<int> buf;
};

class GateTest : public ::testing::Test {
protected:
  void SetUp() override { CUAWAIT_REQUIRE_GPU(); }
};

//! Runs `unit` once through a gate while the GPU is free, so that the graphs of its shape
//! wait in the context's pool: a gate of the same shape made later, while a spinning
//! kernel holds the GPU, takes them instead of instantiating new ones (an instantiation may
//! wait for the whole device, and so for the spinning kernel: docs/CANCELLATION.md).
template <class Unit>
void warm_shape(cu::stream& s, Unit&& unit) {
  {
    cu::gate warm(s);
    (void)warm.run(unit);
  }
  s.sync();
  cu::current_context().drain_releases(); // its graphs are back in the pool
}

TEST_F(GateTest, AnOpenGateRunsEveryUnit) {
  cu::stream s;
  outputs out(8);
  std::stop_source stop;
  cu::gate g(s, stop.get_token());
  for (int i = 0; i < 8; ++i) {
    (void)g.launch(write_one, dim3(1), dim3(1), out.buf.device_data(), i);
  }
  s.sync();
  for (int i = 0; i < 8; ++i) {
    EXPECT_EQ(out.at(i), 1) << "unit " << i;
  }
  EXPECT_EQ(g.ran(), 8U);
  EXPECT_EQ(g.skipped(), 0U);
  EXPECT_FALSE(g.closed());
  // Units of one shape share one executable graph, updated for each (the cheap path); it is
  // instantiated at most once (an earlier gate's may be reused).
  EXPECT_LE(g.instantiated(), 1U);
  EXPECT_EQ(g.instantiated() + g.updated(), 8U);
}

// A gate gone returns its graphs to the device context; the next gate updates one instead
// of instantiating, and its check reads and counts the new gate's words.
TEST_F(GateTest, ANewGateReusesTheGraphsOfAGateGone) {
  cu::stream s;
  outputs out(2);
  {
    cu::gate a(s);
    (void)a.launch(write_one, dim3(1), dim3(1), out.buf.device_data(), 0);
  }
  s.sync();
  cu::current_context().drain_releases(); // the graphs go back behind the stream's work
  std::stop_source stop;
  cu::gate b(s, stop.get_token());
  (void)b.launch(write_one, dim3(1), dim3(1), out.buf.device_data(), 1);
  s.sync();
  EXPECT_EQ(out.at(0), 1);
  EXPECT_EQ(out.at(1), 1);
  EXPECT_EQ(b.instantiated(), 0U);
  EXPECT_EQ(b.updated(), 1U);
  EXPECT_EQ(b.ran(), 1U);
  stop.request_stop(); // and the reused graph obeys the new gate's word
  (void)b.launch(write_one, dim3(1), dim3(1), out.buf.device_data(), 0);
  s.sync();
  EXPECT_EQ(b.skipped(), 1U);
}

// Units of many shapes (more than a gate keeps instantiated) each run their own work, with
// their own arguments, in order; graphs dropped from the cache are destroyed safely.
TEST_F(GateTest, UnitsOfManyShapesEachRunTheirOwnWork) {
  cu::stream s;
  constexpr int shapes = 6;
  constexpr int rounds = 3;
  outputs out(shapes * rounds * shapes);
  cu::gate g(s);
  int slot = 0;
  for (int r = 0; r < rounds; ++r) {
    for (int k = 0; k < shapes; ++k) {
      (void)g.run([&](cu::stream_ref gs) {
        for (int j = 0; j <= k; ++j) { // shape k: k + 1 kernels
          (void)gs.launch(write_one, dim3(1), dim3(1), out.buf.device_data(), slot++);
        }
      });
    }
  }
  s.sync();
  for (int i = 0; i < slot; ++i) {
    EXPECT_EQ(out.at(i), 1) << "kernel " << i;
  }
  EXPECT_EQ(g.ran(), static_cast<unsigned>(shapes * rounds));
  EXPECT_EQ(g.instantiated() + g.updated(), static_cast<std::uint64_t>(shapes * rounds));
}

// The queue is held behind a spinning kernel; the stop comes before the GPU reaches any
// gated unit: none runs, and plain work enqueued after them still does.
TEST_F(GateTest, AStopSkipsEveryUnitNotYetStarted) {
  ca::test::spin_control ctl;
  ASSERT_NE(ctl.device, nullptr);
  cu::stream s;
  constexpr int n = 20;
  outputs out(n + 1);
  outputs scratch(1);
  warm_shape(s, [&](cu::stream_ref gs) {
    (void)gs.launch(write_one, dim3(1), dim3(1), scratch.buf.device_data(), 0);
  });
  std::stop_source stop;
  cu::gate g(s, stop.get_token());
  (void)s.launch(ca::test::spin_until_released, dim3(1), dim3(1), ctl.device, ctl.device + 1);
  for (int i = 0; i < n; ++i) {
    (void)g.launch(write_one, dim3(1), dim3(1), out.buf.device_data(), i);
  }
  (void)s.launch(write_one, dim3(1), dim3(1), out.buf.device_data(), n); // not gated
  stop.request_stop();
  EXPECT_TRUE(g.closed());
  ctl.release();
  s.sync();
  EXPECT_EQ(ctl.outcome(), 1);
  for (int i = 0; i < n; ++i) {
    EXPECT_EQ(out.at(i), 0) << "gated unit " << i << " ran after the stop";
  }
  EXPECT_EQ(out.at(n), 1) << "plain work after the gated units must run";
  EXPECT_EQ(g.skipped(), static_cast<unsigned>(n));
  EXPECT_EQ(g.ran(), 0U);
}

// Units the GPU passed before the stop ran; those behind the held kernel are skipped.
TEST_F(GateTest, UnitsBeforeTheStopRunAndUnitsAfterItAreSkipped) {
  ca::test::spin_control ctl;
  ASSERT_NE(ctl.device, nullptr);
  cu::stream s;
  outputs out(10);
  outputs scratch(1);
  warm_shape(s, [&](cu::stream_ref gs) {
    (void)gs.launch(write_one, dim3(1), dim3(1), scratch.buf.device_data(), 0);
  });
  std::stop_source stop;
  cu::gate g(s, stop.get_token());
  for (int i = 0; i < 5; ++i) {
    (void)g.launch(write_one, dim3(1), dim3(1), out.buf.device_data(), i);
  }
  (void)s.launch(ca::test::spin_until_released, dim3(1), dim3(1), ctl.device, ctl.device + 1);
  for (int i = 5; i < 10; ++i) {
    (void)g.launch(write_one, dim3(1), dim3(1), out.buf.device_data(), i);
  }
  // The first five are done once the spin kernel runs: wait for them through their outputs.
  for (int i = 0; i < 5; ++i) {
    while (out.at(i) == 0) {
    }
  }
  stop.request_stop();
  ctl.release();
  s.sync();
  EXPECT_EQ(ctl.outcome(), 1) << "the spinning kernel timed out: a gate waited for the device";
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(out.at(i), 1) << "unit " << i << " was passed before the stop";
  }
  for (int i = 5; i < 10; ++i) {
    EXPECT_EQ(out.at(i), 0) << "unit " << i << " was queued behind the held kernel";
  }
  EXPECT_EQ(g.ran(), 5U);
  EXPECT_EQ(g.skipped(), 5U);
}

// run(): several operations behind one check are skipped together.
TEST_F(GateTest, ARunUnitIsSkippedAsAWhole) {
  ca::test::spin_control ctl;
  ASSERT_NE(ctl.device, nullptr);
  cu::stream s;
  outputs out(4);
  cu::device_buffer<int> d(4, s);
  std::vector<int> host(4, 7);
  cu::pinned_buffer<int> pinned(4);
  const auto unit = [&](cu::stream_ref gs) {
    (void)gs.memset(d.data(), 0xff, 4);
    (void)gs.launch(write_one, dim3(1), dim3(1), out.buf.device_data(), 0);
    (void)gs.launch(write_one, dim3(1), dim3(1), out.buf.device_data(), 1);
  };
  warm_shape(s, unit);
  (void)s.memset(out.buf.device_data(), 0, 4); // what the warm-up wrote
  s.sync();
  cu::gate g(s);
  (void)s.memset(d.data(), 0, 4);
  (void)s.launch(ca::test::spin_until_released, dim3(1), dim3(1), ctl.device, ctl.device + 1);
  (void)g.run(unit);
  g.close();
  ctl.release();
  (void)s.copy(pinned.data(), d.data(), 4);
  s.sync();
  EXPECT_EQ(ctl.outcome(), 1) << "the spinning kernel timed out: a gate waited for the device";
  EXPECT_EQ(out.at(0), 0);
  EXPECT_EQ(out.at(1), 0);
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(pinned.data()[i], 0) << "the skipped memset wrote element " << i;
  }
  EXPECT_EQ(g.skipped(), 1U);
}

// A token stopped before the gate is made closes it at once.
TEST_F(GateTest, ATokenAlreadyStoppedClosesTheGate) {
  cu::stream s;
  outputs out(1);
  std::stop_source stop;
  stop.request_stop();
  cu::gate g(s, stop.get_token());
  EXPECT_TRUE(g.closed());
  (void)g.launch(write_one, dim3(1), dim3(1), out.buf.device_data(), 0);
  s.sync();
  EXPECT_EQ(out.at(0), 0);
}

// What f throws leaves nothing enqueued and the stream usable (its capture ended).
TEST_F(GateTest, AThrowingRunEnqueuesNothingAndLeavesTheStreamUsable) {
  cu::stream s;
  outputs out(2);
  cu::gate g(s);
  EXPECT_THROW((void)g.run([&](cu::stream_ref gs) {
    (void)gs.launch(write_one, dim3(1), dim3(1), out.buf.device_data(), 0);
    throw std::runtime_error("planted");
  }),
               std::runtime_error);
  (void)s.launch(write_one, dim3(1), dim3(1), out.buf.device_data(), 1);
  s.sync();
  EXPECT_EQ(out.at(0), 0);
  EXPECT_EQ(out.at(1), 1);
}

// A unit holding what a conditional body may not (a host function) fails with cuda_error
// naming the gated work; nothing of it runs, and the gate and the stream stay usable.
void CUDART_CB never_called(void* flag) { *static_cast<int*>(flag) = 1; }

TEST_F(GateTest, AUnitAConditionalBodyMayNotHoldFailsAndTheGateGoesOn) {
  cu::stream s;
  outputs out(3);
  cu::gate g(s);
  (void)g.launch(write_one, dim3(1), dim3(1), out.buf.device_data(), 0);
  int host_flag = 0;
  try {
    (void)g.run([&](cu::stream_ref gs) {
      (void)gs.launch(write_one, dim3(1), dim3(1), out.buf.device_data(), 1);
      (void)cudaLaunchHostFunc(gs.get(), &never_called, &host_flag);
    });
    ADD_FAILURE() << "a host function in a gated unit was accepted";
  } catch (const cu::cuda_error& e) {
    EXPECT_NE(std::string(e.what()).find("gated work"), std::string::npos) << e.what();
  }
  (void)g.launch(write_one, dim3(1), dim3(1), out.buf.device_data(), 2);
  s.sync();
  EXPECT_EQ(out.at(0), 1);
  EXPECT_EQ(out.at(1), 0) << "the failed unit must not run";
  EXPECT_EQ(out.at(2), 1);
  EXPECT_EQ(host_flag, 0);
  EXPECT_EQ(g.ran(), 2U);
}

// The gate dies while its units are queued: its words go back to the pool behind them
// (run under compute-sanitizer memcheck). The units still see the stop.
TEST_F(GateTest, AGateDestroyedWhileItsUnitsAreQueuedIsSafe) {
  ca::test::spin_control ctl;
  ASSERT_NE(ctl.device, nullptr);
  cu::stream s;
  outputs out(4);
  outputs scratch(1);
  {
    // Blocks for both gates' words, ready in the pool before the GPU is held: neither may
    // need a new page-locked allocation (it may wait for the whole device). And graphs of
    // this unit shape returned last to the context's pool, so that no gate below has to
    // instantiate one while the GPU is held (that may wait for the device too).
    cu::gate warm_a(s);
    cu::gate warm_b(s);
    (void)warm_a.launch(write_one, dim3(1), dim3(1), scratch.buf.device_data(), 0);
    (void)warm_b.launch(write_one, dim3(1), dim3(1), scratch.buf.device_data(), 0);
  }
  s.sync();
  cu::current_context().drain_releases(); // their graphs are back in the pool
  (void)s.launch(ca::test::spin_until_released, dim3(1), dim3(1), ctl.device, ctl.device + 1);
  {
    std::stop_source stop;
    cu::gate g(s, stop.get_token());
    for (int i = 0; i < 4; ++i) {
      (void)g.launch(write_one, dim3(1), dim3(1), out.buf.device_data(), i);
    }
    stop.request_stop();
  }
  // The words are fenced: a new gate cannot get them before the units above have run.
  cu::gate other(s);
  (void)other.launch(write_one, dim3(1), dim3(1), out.buf.device_data(), 3);
  ctl.release();
  s.sync();
  EXPECT_EQ(ctl.outcome(), 1) << "the spinning kernel timed out: a gate waited for the device";
  EXPECT_EQ(out.at(0), 0);
  EXPECT_EQ(out.at(2), 0);
  EXPECT_EQ(out.at(3), 1); // written by the open gate's unit
}

// The job's own token: a coroutine cancelled while its gated work is queued resumes with
// operation_cancelled and the work it had not started never runs.
TEST_F(GateTest, AJobsTokenGatesItsWork) {
  ca::test::spin_control ctl;
  ASSERT_NE(ctl.device, nullptr);
  cu::stream s;
  constexpr int n = 10;
  outputs out(n);
  outputs scratch(1);
  warm_shape(s, [&](cu::stream_ref gs) {
    (void)gs.launch(write_one, dim3(1), dim3(1), scratch.buf.device_data(), 0);
  });
  std::stop_source stop;
  const auto job = [&]() -> task<void> {
    cu::gate g(s, co_await ca::get_stop_token());
    (void)s.launch(ca::test::spin_until_released, dim3(1), dim3(1), ctl.device, ctl.device + 1);
    for (int i = 0; i < n; ++i) {
      (void)g.launch(write_one, dim3(1), dim3(1), out.buf.device_data(), i);
    }
    stop.request_stop(); // as a when_any sibling or a deadline would
    co_await s;
  };
  EXPECT_THROW(ca::sync_wait(job().with_stop_token(stop.get_token())), ca::operation_cancelled);
  ctl.release();
  s.sync();
  EXPECT_EQ(ctl.outcome(), 1) << "the spinning kernel timed out: a gate waited for the device";
  for (int i = 0; i < n; ++i) {
    EXPECT_EQ(out.at(i), 0) << "unit " << i;
  }
}

} // namespace
