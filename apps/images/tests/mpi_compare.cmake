# SPDX-License-Identifier: Apache-2.0
# cuawait-images run once as a single process and once under mpiexec with NP processes, on
# the CPU backend: features.jsonl and every edge image must be equal byte for byte, each
# bad file reported once with the same line, and only rank 0 prints the summary.
#
# cmake -DAPP=<cuawait-images> -DMPIEXEC=<mpiexec> -DMPIEXEC_FLAGS=<flags;...> -DNP=4
#       -DCASE=synthetic|files -DWORK=<scratch directory> -P mpi_compare.cmake

cmake_minimum_required(VERSION 3.25)

foreach(var APP MPIEXEC NP CASE WORK)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "mpi_compare: -D${var}=... is required")
  endif()
endforeach()
file(REMOVE_RECURSE ${WORK})
file(MAKE_DIRECTORY ${WORK})

set(common --backend=cpu --threads 2 --progress=none)
if(CASE STREQUAL "synthetic")
  set(inputs --count 11 --size 64x48)
  set(expected_code 0)
elseif(CASE STREQUAL "rankfail")
  # Rank 2 cannot write its trace (a directory has its name): the run goes on, rank 0 names
  # rank 2, and the job exits non-zero instead of hanging.
  file(MAKE_DIRECTORY ${WORK}/trace.rank2.json)
  execute_process(COMMAND ${MPIEXEC} ${MPIEXEC_FLAGS} -np ${NP} ${APP} ${common} --count 6
                          --size 32 --trace ${WORK}/trace.json -o ${WORK}/many
                  RESULT_VARIABLE rcn OUTPUT_VARIABLE outn ERROR_VARIABLE errn)
  message(STATUS "${NP} processes (exit ${rcn}):\n${outn}${errn}")
  if(rcn EQUAL 0 OR NOT errn MATCHES "cuawait-images: rank 2 failed: "
     OR NOT outn MATCHES "6 ok, 0 failed" OR NOT EXISTS ${WORK}/trace.rank1.json
     OR NOT EXISTS ${WORK}/trace.json OR NOT EXISTS ${WORK}/many/features.jsonl)
    message(FATAL_ERROR "mpi_compare rankfail: FAIL")
  endif()
  message(STATUS "mpi_compare rankfail: ok")
  file(REMOVE_RECURSE ${WORK})
  return()
elseif(CASE STREQUAL "files")
  # PNG inputs: the edge images of a small synthetic run, renamed so that the scan takes
  # them; PGM inputs written here; one file in a nested folder with a stem seen before; and
  # a corrupt PNG, which must fail alone.
  execute_process(COMMAND ${APP} ${common} --count 7 --size 40x30 -o ${WORK}/gen
                  RESULT_VARIABLE rc OUTPUT_QUIET)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "mpi_compare: making the inputs failed (${rc})")
  endif()
  file(MAKE_DIRECTORY ${WORK}/in/nested)
  file(GLOB made ${WORK}/gen/*.edges.png)
  list(SORT made)
  set(n 0)
  foreach(png IN LISTS made)
    math(EXPR n "${n} + 1")
    file(COPY_FILE ${png} ${WORK}/in/img-${n}.png)
  endforeach()
  file(COPY_FILE ${WORK}/in/img-2.png ${WORK}/in/nested/img-1.png)
  file(WRITE ${WORK}/in/gray-a.pgm "P2 4 3 9\n0 1 2 3\n4 5 6 7\n8 9 0 1\n")
  file(WRITE ${WORK}/in/gray-b.pgm "P2 3 3 255\n10 200 30\n40 50 160\n70 80 90\n")
  file(WRITE ${WORK}/in/bad.png "this is not a PNG file")
  set(inputs -r ${WORK}/in)
  set(expected_code 1)
else()
  message(FATAL_ERROR "mpi_compare: unknown CASE ${CASE}")
endif()

execute_process(COMMAND ${APP} ${common} ${inputs} -o ${WORK}/one
                RESULT_VARIABLE rc1 OUTPUT_VARIABLE out1 ERROR_VARIABLE err1)
execute_process(COMMAND ${MPIEXEC} ${MPIEXEC_FLAGS} -np ${NP} ${APP} ${common} ${inputs}
                        -o ${WORK}/many
                RESULT_VARIABLE rcn OUTPUT_VARIABLE outn ERROR_VARIABLE errn)
message(STATUS "single process (exit ${rc1}):\n${out1}${err1}")
message(STATUS "${NP} processes (exit ${rcn}):\n${outn}${errn}")

set(failures "")
macro(fail what)
  string(APPEND failures "  ${what}\n")
endmacro()

if(NOT rc1 EQUAL expected_code)
  fail("single process: exit ${rc1}, expected ${expected_code}")
endif()
if(NOT rcn EQUAL expected_code)
  fail("${NP} processes: exit ${rcn}, expected ${expected_code}")
endif()

# One summary, from rank 0, which says the run was spread.
string(REGEX MATCHALL "images/s" summaries "${outn}")
list(LENGTH summaries n_summaries)
if(NOT n_summaries EQUAL 1)
  fail("${NP} processes: ${n_summaries} summaries on stdout, expected 1")
endif()
if(NOT outn MATCHES "spread over ${NP} processes")
  fail("${NP} processes: the summary does not say the run was spread")
endif()
string(REGEX MATCH "[0-9]+ ok, [0-9]+ failed" counts1 "${out1}")
string(REGEX MATCH "[0-9]+ ok, [0-9]+ failed" countsn "${outn}")
if(NOT counts1 STREQUAL countsn OR counts1 STREQUAL "")
  fail("counts differ: '${counts1}' against '${countsn}'")
endif()

# Each bad file: the same line in both runs, once each.
if(CASE STREQUAL "files")
  string(REGEX MATCHALL "cuawait-images: [^\n]*bad\\.png: [^\n]*" bad1 "${err1}")
  string(REGEX MATCHALL "cuawait-images: [^\n]*bad\\.png: [^\n]*" badn "${errn}")
  list(LENGTH bad1 nbad1)
  list(LENGTH badn nbadn)
  if(NOT nbad1 EQUAL 1 OR NOT nbadn EQUAL 1 OR NOT bad1 STREQUAL badn)
    fail("the bad file's line differs: '${bad1}' against '${badn}'")
  endif()
  if(errn MATCHES "rank [0-9]")
    fail("${NP} processes: a rank reported an error")
  endif()
endif()

# The outputs, byte for byte.
file(GLOB_RECURSE files1 RELATIVE ${WORK}/one ${WORK}/one/*)
file(GLOB_RECURSE filesn RELATIVE ${WORK}/many ${WORK}/many/*)
list(SORT files1)
list(SORT filesn)
if(NOT files1 STREQUAL filesn)
  fail("different files:\n    ${files1}\n    ${filesn}")
endif()
list(LENGTH files1 n_files)
if(n_files LESS 3 OR NOT "features.jsonl" IN_LIST files1)
  fail("too few outputs: ${files1}")
endif()
foreach(f IN LISTS files1)
  execute_process(COMMAND ${CMAKE_COMMAND} -E compare_files ${WORK}/one/${f} ${WORK}/many/${f}
                  RESULT_VARIABLE same)
  if(NOT same EQUAL 0)
    fail("${f} differs")
  endif()
endforeach()

if(failures)
  message(FATAL_ERROR "mpi_compare ${CASE}: FAIL\n${failures}")
endif()
message(STATUS "mpi_compare ${CASE}: ${n_files} files equal; ok")
file(REMOVE_RECURSE ${WORK})
