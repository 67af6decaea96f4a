# SPDX-License-Identifier: Apache-2.0
# The layers, checked on the sources: cmake -DROOT=<repository> -P check_layers.cmake
#
#  - the core (include/cuawait/ outside cuda/ and the NCCL layer's nccl/ and nccl.hpp, and
#    src/core/) includes no CUDA header (the
#    runtime, the driver, the math libraries, NCCL, Thrust/CUB/libcu++) and no header of the
#    CUDA layer (cuawait/cuda/..., cuawait/cuda.hpp, cuawait/runtime.hpp);
#  - no library file (include/, src/) includes a file of apps/, bench/ or examples/.
#
# NVTX: the core may include <nvtx3/...> in src/core/nvtx_ranges.cpp only, and only under
# `#if defined(CUAWAIT_HAS_NVTX)`. NVTX 3 is header-only and needs no CUDA runtime; the
# build defines CUAWAIT_HAS_NVTX only when the header is found, so the core still builds
# and installs without a toolkit, and no public header sees NVTX.
cmake_minimum_required(VERSION 3.25)

# --- Umbrellas ----------------------------------------------------------------------------
# Headers at the top of the include tree that belong to the CUDA layer (target
# cuawait::cuda) and stay there for users: <cuawait/cuda.hpp> (everything) and
# <cuawait/runtime.hpp> (<cuawait/cuda/runtime.hpp>). Each may hold only comments,
# `#pragma once` and includes of cuawait headers: no code of its own.
set(layer_exceptions
    include/cuawait/cuda.hpp
    include/cuawait/runtime.hpp)
# ------------------------------------------------------------------------------------------

if(NOT ROOT)
  message(FATAL_ERROR "usage: cmake -DROOT=<repository> -P check_layers.cmake")
endif()

set(cuda_include_regex
    "^(cuda|cuda_[a-z0-9_]+|cudart_[a-z0-9_]+|cuComplex|cublas[a-zA-Z0-9_]*|cufft[a-zA-Z0-9_]*|curand[a-zA-Z0-9_]*|cusparse[a-zA-Z0-9_]*|cusolver[a-zA-Z0-9_]*|nccl|nvrtc|nvml|driver_types|vector_types)\\.h$|^(cuda|thrust|cub|nvtx3)/|^nvToolsExt|^cuawait/cuda/|^cuawait/(cuda|runtime)\\.hpp$")
set(outside_regex "(^|/)(apps|bench|examples)/")

file(GLOB_RECURSE core_files RELATIVE ${ROOT}
     ${ROOT}/include/cuawait/*.hpp ${ROOT}/include/cuawait/*.h
     ${ROOT}/src/core/*.hpp ${ROOT}/src/core/*.cpp ${ROOT}/src/core/*.h)
list(FILTER core_files EXCLUDE REGEX "^include/cuawait/(cuda|nccl)/|^include/cuawait/nccl\\.hpp$")
file(GLOB_RECURSE library_files RELATIVE ${ROOT}
     ${ROOT}/include/*.hpp ${ROOT}/include/*.h ${ROOT}/include/*.cuh
     ${ROOT}/src/*.hpp ${ROOT}/src/*.h ${ROOT}/src/*.cpp ${ROOT}/src/*.cu ${ROOT}/src/*.cuh)

set(violations)
foreach(rel IN LISTS library_files)
  file(STRINGS ${ROOT}/${rel} lines REGEX "^[ \t]*#[ \t]*include")
  set(is_core OFF)
  if(rel IN_LIST core_files AND NOT rel IN_LIST layer_exceptions)
    set(is_core ON)
  endif()
  set(guarded OFF)
  if(is_core)
    # NVTX is allowed in one file, under its guard (the guard line comes right before).
    file(READ ${ROOT}/${rel} text)
    if(rel STREQUAL "src/core/nvtx_ranges.cpp"
       AND text MATCHES "#if defined\\(CUAWAIT_HAS_NVTX\\)\n#include <nvtx3/[^>]+>\n")
      set(guarded ON)
    endif()
  endif()
  foreach(line IN LISTS lines)
    if(NOT line MATCHES "include[ \t]*[<\"]([^>\"]+)[>\"]")
      continue()
    endif()
    set(inc ${CMAKE_MATCH_1})
    if(inc MATCHES "${outside_regex}")
      list(APPEND violations "${rel}: library file includes ${inc}")
    endif()
    if(is_core AND inc MATCHES "${cuda_include_regex}")
      if(guarded AND inc MATCHES "^nvtx3/")
        continue()
      endif()
      list(APPEND violations "${rel}: core file includes ${inc}")
    endif()
  endforeach()
endforeach()

foreach(rel IN LISTS layer_exceptions)
  if(NOT EXISTS ${ROOT}/${rel})
    continue()
  endif()
  file(STRINGS ${ROOT}/${rel} lines)
  foreach(line IN LISTS lines)
    if(line MATCHES "^[ \t]*$" OR line MATCHES "^[ \t]*//" OR line MATCHES "^#pragma once$"
       OR line MATCHES "^#include \"cuawait/[a-z0-9_/]+\\.hpp\"$")
      continue()
    endif()
    list(APPEND violations "${rel}: an umbrella holds more than includes: ${line}")
  endforeach()
endforeach()

list(LENGTH library_files n)
if(violations)
  list(JOIN violations "\n  " text)
  message(FATAL_ERROR "check_layers: layer violations:\n  ${text}")
endif()
message(STATUS "check_layers: ${n} library files, no layer violation")
