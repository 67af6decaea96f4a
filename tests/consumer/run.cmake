# SPDX-License-Identifier: Apache-2.0
# MODE=install: install the build tree into a scratch prefix and find_package it.
# MODE=subdirectory: build cuawait from source inside the consumer (add_subdirectory).
file(REMOVE_RECURSE ${WORK_DIR})
set(prefix ${WORK_DIR}/prefix)
if(MODE STREQUAL "subdirectory")
  set(how -DCUAWAIT_SOURCE_DIR=${SOURCE_DIR})
else()
  execute_process(COMMAND ${CMAKE_COMMAND} --install ${BINARY_DIR} --prefix ${prefix}
                  RESULT_VARIABLE rc)
  if(rc)
    message(FATAL_ERROR "install failed: ${rc}")
  endif()
  set(how -DCMAKE_PREFIX_PATH=${prefix})
endif()
execute_process(COMMAND ${CMAKE_COMMAND} -S ${SOURCE_DIR}/tests/consumer -B ${WORK_DIR}/build
                ${how} RESULT_VARIABLE rc)
if(rc)
  message(FATAL_ERROR "consumer configure failed: ${rc}")
endif()
execute_process(COMMAND ${CMAKE_COMMAND} --build ${WORK_DIR}/build RESULT_VARIABLE rc)
if(rc)
  message(FATAL_ERROR "consumer build failed: ${rc}")
endif()
execute_process(COMMAND ${WORK_DIR}/build/consumer RESULT_VARIABLE rc OUTPUT_VARIABLE out)
if(NOT rc EQUAL 0 OR NOT out MATCHES "consumer: 42")
  message(FATAL_ERROR "consumer run failed: rc=${rc} out=${out}")
endif()
