# SPDX-License-Identifier: Apache-2.0
# Runs cuawait-doctor and checks its exit status and output:
#   cmake -DDOCTOR=<cuawait-doctor> [-DARGS=--json] -DEXPECT=<regex> -P doctor_cli_run.cmake
# The test hides every GPU (CUDA_VISIBLE_DEVICES=-1), so on any machine it checks what CI
# sees: exit status 0 and a message saying there is nothing to probe.
cmake_minimum_required(VERSION 3.25)
execute_process(COMMAND ${DOCTOR} ${ARGS} RESULT_VARIABLE rc OUTPUT_VARIABLE out
                ERROR_VARIABLE err TIMEOUT 60)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "cuawait-doctor ${ARGS}: exit status ${rc}, expected 0\n${out}${err}")
endif()
if(NOT out MATCHES "${EXPECT}")
  message(FATAL_ERROR "cuawait-doctor ${ARGS}: output does not match '${EXPECT}':\n${out}${err}")
endif()
message(STATUS "cuawait-doctor ${ARGS}: ${out}")
