# SPDX-License-Identifier: Apache-2.0
# check_layers.cmake must fail on a tree that breaks each rule, naming every offending line,
# and pass on the same tree without them: cmake -DWORK_DIR=<scratch> -P check_layers_selftest.cmake
set(checker ${CMAKE_CURRENT_LIST_DIR}/check_layers.cmake)
file(REMOVE_RECURSE ${WORK_DIR})

function(write rel text)
  file(WRITE ${WORK_DIR}/${rel} "${text}")
endfunction()
function(run_check expect_fail)
  execute_process(COMMAND ${CMAKE_COMMAND} -DROOT=${WORK_DIR} -P ${checker}
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  set(rc ${rc} PARENT_SCOPE)
  set(out "${out}${err}" PARENT_SCOPE)
endfunction()

# A clean tree: the CUDA layer may include CUDA, the core its own headers, NVTX guarded.
write(include/cuawait/task.hpp "#include <coroutine>\n#include \"cuawait/detail/x.hpp\"\n")
write(include/cuawait/detail/x.hpp "#include <atomic>\n")
write(include/cuawait/cuda/stream.hpp "#include <cuda_runtime_api.h>\n#include \"cuawait/task.hpp\"\n")
write(include/cuawait/runtime.hpp "// SPDX\n#pragma once\n\n//! @file\n#include \"cuawait/cuda/stream.hpp\"\n")
write(src/core/nvtx_ranges.cpp "#if defined(CUAWAIT_HAS_NVTX)\n#include <nvtx3/nvToolsExt.h>\n#endif\n")
write(src/cuda/stream.cpp "#include <cuda_runtime.h>\n")
run_check(OFF)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "check_layers failed on a clean tree:\n${out}")
endif()

# One violation of each kind.
write(include/cuawait/detail/x.hpp "#include <atomic>\n#include <cuda_runtime.h>\n")
write(include/cuawait/when_all.hpp "#  include \"cuawait/cuda/stream.hpp\"\n")
write(src/core/timer.cpp "#include <cublas_v2.h>\n#include <nccl.h>\n")
write(src/core/trace.cpp "#include <nvtx3/nvToolsExt.h>\n")
write(src/cuda/stream.cpp "#include <cuda_runtime.h>\n#include \"../../bench/pipeline/grid.hpp\"\n")
write(include/cuawait/cuda/graph.hpp "#include <examples/helper.hpp>\n")
write(include/cuawait/cuda.hpp "#include \"cuawait/cuda/stream.hpp\"\ninline int helper() { return 1; }\n")
run_check(ON)
set(expected
    "include/cuawait/detail/x.hpp: core file includes cuda_runtime.h"
    "include/cuawait/when_all.hpp: core file includes cuawait/cuda/stream.hpp"
    "src/core/timer.cpp: core file includes cublas_v2.h"
    "src/core/timer.cpp: core file includes nccl.h"
    "src/core/trace.cpp: core file includes nvtx3/nvToolsExt.h"
    "src/cuda/stream.cpp: library file includes ../../bench/pipeline/grid.hpp"
    "include/cuawait/cuda/graph.hpp: library file includes examples/helper.hpp"
    "include/cuawait/cuda.hpp: an umbrella holds more than includes: inline int helper() { return 1; }")
if(rc EQUAL 0)
  message(FATAL_ERROR "check_layers passed a tree with violations:\n${out}")
endif()
foreach(line IN LISTS expected)
  string(FIND "${out}" "${line}" at)
  if(at EQUAL -1)
    message(FATAL_ERROR "check_layers did not report '${line}':\n${out}")
  endif()
endforeach()
message(STATUS "check_layers self-test: ok")
