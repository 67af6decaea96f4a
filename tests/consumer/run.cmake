# SPDX-License-Identifier: Apache-2.0
# Builds tests/consumer the ways a user gets cuawait. Arguments (-D): SOURCE_DIR, BINARY_DIR
# (this build, for the install), WORK_DIR (scratch), CXX_FLAGS / LINKER_FLAGS (the
# build's, so that a sanitizer build's library links), and MODE:
#   install_core         install this build, find_package(cuawait) with CUDA hidden, run
#   install_cuda         install this build, find_package(cuawait COMPONENTS cuda), build
#   install_cuda_hidden  install this build, find_package(cuawait COMPONENTS cuda) with CUDA
#                        hidden: configuring must fail, saying that component cuda is missing
#   fetchcontent_core    FetchContent from SOURCE_DIR with CUDA hidden, run
# "CUDA hidden" is a machine without the toolkit as far as CMake can tell: no nvcc on PATH,
# no CUDACXX, and CMAKE_DISABLE_FIND_PACKAGE_CUDAToolkit=ON.
file(REMOVE_RECURSE ${WORK_DIR})
set(prefix ${WORK_DIR}/prefix)
set(args -DCMAKE_CXX_FLAGS=${CXX_FLAGS} -DCMAKE_EXE_LINKER_FLAGS=${LINKER_FLAGS})

if(MODE MATCHES "^install_")
  execute_process(COMMAND ${CMAKE_COMMAND} --install ${BINARY_DIR} --prefix ${prefix}
                  RESULT_VARIABLE rc OUTPUT_QUIET)
  if(rc)
    message(FATAL_ERROR "install failed: ${rc}")
  endif()
  list(APPEND args -DCMAKE_PREFIX_PATH=${prefix})
elseif(MODE STREQUAL "fetchcontent_core")
  list(APPEND args -DCUAWAIT_SOURCE_DIR=${SOURCE_DIR})
else()
  message(FATAL_ERROR "unknown MODE '${MODE}'")
endif()
if(MODE MATCHES "cuda")
  list(APPEND args -DCUAWAIT_CONSUMER_COMPONENTS=cuda)
endif()

if(MODE MATCHES "_core$|_hidden$")
  list(APPEND args -DCMAKE_DISABLE_FIND_PACKAGE_CUDAToolkit=ON)
  unset(ENV{CUDACXX})
  string(REPLACE ":" ";" path "$ENV{PATH}")
  set(kept)
  foreach(dir IN LISTS path)
    if(NOT EXISTS ${dir}/nvcc)
      list(APPEND kept ${dir})
    endif()
  endforeach()
  string(REPLACE ";" ":" kept "${kept}")
  set(ENV{PATH} "${kept}")
endif()

execute_process(COMMAND ${CMAKE_COMMAND} -S ${SOURCE_DIR}/tests/consumer -B ${WORK_DIR}/build
                ${args} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(MODE STREQUAL "install_cuda_hidden")
  if(rc EQUAL 0)
    message(FATAL_ERROR "find_package(cuawait COMPONENTS cuda) succeeded with CUDA hidden:\n${out}${err}")
  endif()
  if(NOT err MATCHES "component cuda")
    message(FATAL_ERROR "the failure does not name component cuda:\n${err}")
  endif()
  return()
endif()
if(rc)
  message(FATAL_ERROR "consumer configure failed: ${rc}\n${out}${err}")
endif()
if(MODE MATCHES "_core$")
  # Nothing in the consumer's configuration looked for, or found, a CUDA compiler or toolkit.
  file(STRINGS ${WORK_DIR}/build/CMakeCache.txt cuda_entries REGEX "^(CMAKE_CUDA_COMPILER|CUDAToolkit_[A-Z_]+):[A-Z]+=.+")
  if(cuda_entries)
    message(FATAL_ERROR "the core-only consumer found CUDA: ${cuda_entries}")
  endif()
endif()

execute_process(COMMAND ${CMAKE_COMMAND} --build ${WORK_DIR}/build RESULT_VARIABLE rc
                OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(rc)
  message(FATAL_ERROR "consumer build failed: ${rc}\n${out}${err}")
endif()
if(MODE MATCHES "_core$")
  execute_process(COMMAND ${WORK_DIR}/build/consumer RESULT_VARIABLE rc OUTPUT_VARIABLE out)
  if(NOT rc EQUAL 0 OR NOT out MATCHES "consumer: 42")
    message(FATAL_ERROR "consumer run failed: rc=${rc} out=${out}")
  endif()
endif()
message(STATUS "${MODE}: ok")
