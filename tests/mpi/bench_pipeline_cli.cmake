# SPDX-License-Identifier: Apache-2.0
# cuawait-bench-pipeline under mpiexec, without a GPU: what a spread run decides before its
# first GPU call. Help and argument errors are said once (by rank 0) and every rank exits
# with the same code; a machine without a usable GPU is said once, naming the ranks, and
# ends the job with code 4 instead of hanging a rank in a collective.
#
# cmake -DAPP=<cuawait-bench-pipeline> -DMPIEXEC=<mpiexec> -DMPIEXEC_FLAGS=<flags;...>
#       -P bench_pipeline_cli.cmake

cmake_minimum_required(VERSION 3.25)

foreach(var APP MPIEXEC)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "bench_pipeline_cli: -D${var}=... is required")
  endif()
endforeach()
# The benchmarks are built with the default target only when CUAWAIT_COMPILE_CHECKS_IN_ALL
# is ON (the release preset builds them through cuawait_compile_checks).
if(NOT EXISTS ${APP})
  message(STATUS "bench_pipeline_cli: SKIP: ${APP} is not built")
  return()
endif()

set(failures "")
# Runs the program (under mpiexec -np NP unless NP is 0) and checks its exit code and that
# PATTERN occurs exactly once in its output.
function(expect_once name np code pattern)
  if(np EQUAL 0)
    execute_process(COMMAND ${APP} ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out
                    ERROR_VARIABLE err)
  else()
    execute_process(COMMAND ${MPIEXEC} ${MPIEXEC_FLAGS} -np ${np} ${APP} ${ARGN}
                    RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  endif()
  string(REGEX MATCHALL "${pattern}" found "${out}${err}")
  list(LENGTH found n)
  message(STATUS "${name} (exit ${rc}, ${n} x '${pattern}'):\n${out}${err}")
  if(NOT rc EQUAL code OR NOT n EQUAL 1)
    set(failures "${failures}  ${name}: exit ${rc} (expected ${code}), '${pattern}' ${n} times (expected 1)\n"
        PARENT_SCOPE)
  endif()
endfunction()

expect_once(help 2 0 "Usage: cuawait-bench-pipeline" --help)
expect_once(bad_value 2 2 "--jobs: must be between 1 and 1e9" --jobs 0)
expect_once(too_few_jobs 3 2 "--jobs: 2 jobs cannot be split between 3 processes" --jobs 2)
expect_once(grid 2 2 "--grid: not in a run spread over processes" --grid --quick)
# Every GPU hidden (any machine): said once, naming both ranks.
set(ENV{CUDA_VISIBLE_DEVICES} -1)
expect_once(no_gpu 2 4 "cuawait-bench-pipeline: no CUDA device[^\n]*\\(ranks 0, 1\\)" --quick)
# A plain start is a single process, MPI or not.
expect_once(plain_no_gpu 0 4 "cuawait-bench-pipeline: no CUDA device" --quick)

if(failures)
  message(FATAL_ERROR "bench_pipeline_cli: FAIL\n${failures}")
endif()
message(STATUS "bench_pipeline_cli: ok")
