// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! The `cuawait-images` program as a function, so tests can run it in-process.

#include "distributed.hpp"
#include "engine.hpp"

#include <atomic>

namespace cuawait::images {

//! Exit codes of the program.
enum exit_code : int {
  exit_ok = 0,          //!< every image was processed
  exit_some_failed = 1, //!< the batch ran, but some images failed (each was reported)
  exit_usage = 2,       //!< bad arguments, unusable output directory, no GPU for --backend=cuda
  exit_interrupted = 130,
};

//! Runs the program with command-line arguments `argv[0..argc)`. `gpu` is the CUDA backend
//! when the executable was built with one, else nullptr. Writes progress and errors to
//! stderr and the summary to stdout; returns the exit code.
//!
//! With a `group` of several processes, every process calls it with the same arguments:
//! each runs its share of the batch (`share_of`) and writes its edge images, then rank 0
//! gathers the outcomes, writes the features file in input order and prints the one
//! summary. Other ranks print only their errors, prefixed with their rank. nullptr (or a
//! group of one): the run is this process's alone.
[[nodiscard]] int run_program(int argc, const char* const* argv, gpu_backend* gpu,
                              rank_group* group = nullptr);

//! The flag SIGINT and SIGTERM set: the run starts no new image, finishes those in flight,
//! writes what it has and exits with `exit_interrupted`.
[[nodiscard]] std::atomic<bool>& stop_flag() noexcept;

//! Installs the SIGINT/SIGTERM handlers that set `stop_flag()`.
void install_stop_handlers() noexcept;

} // namespace cuawait::images
