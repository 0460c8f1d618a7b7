# A second dump into the directory of a first replaces it: cmake -DPROGRAM=<chapter 01 program>
# -DDIR=<dump directory> -P check_redump.cmake. The first run (v1) writes out_v1.npy, the second
# (v2) out_v2.npy; afterwards the directory holds the second run's files only, as its
# .pd-dump list says, and a file the programs did not write is refused as a dump directory.
# With -DREFUSED="a|b" the second run has those arguments instead, must be refused (exit 2), and
# the first run's dump must be there as it was.
file(REMOVE_RECURSE ${DIR})
if(DEFINED REFUSED)
  execute_process(COMMAND ${PROGRAM} --dump ${DIR} --kernel v1 --check-only --seq-len 16 RESULT_VARIABLE rc
                  OUTPUT_QUIET ERROR_VARIABLE err)
  string(REPLACE "|" ";" refused "${REFUSED}")
  execute_process(COMMAND ${PROGRAM} --dump ${DIR} ${refused} RESULT_VARIABLE rc2 OUTPUT_QUIET ERROR_VARIABLE err2)
  file(GLOB present RELATIVE ${DIR} ${DIR}/*.npy)
  file(STRINGS ${DIR}/.pd-dump listed)
  list(SORT present)
  list(SORT listed)
  if(NOT rc EQUAL 0 OR NOT rc2 EQUAL 2 OR NOT EXISTS ${DIR}/out_v1.npy OR NOT present STREQUAL listed)
    message(FATAL_ERROR "exits ${rc} and ${rc2} (0 and 2 expected); ${DIR} holds [${present}], its .pd-dump lists "
                        "[${listed}]: the refused run did not leave the first dump as it was\n${err}${err2}")
  endif()
  message(STATUS "the refused run left the first dump: ${present}")
  return()
endif()
foreach(kernel v1 v2)
  execute_process(COMMAND ${PROGRAM} --dump ${DIR} --kernel ${kernel} --check-only --seq-len 16
                  RESULT_VARIABLE rc OUTPUT_QUIET ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "--dump ${DIR} --kernel ${kernel} exited with ${rc}: ${err}")
  endif()
endforeach()
if(EXISTS ${DIR}/out_v1.npy)
  message(FATAL_ERROR "out_v1.npy of the first dump is still in ${DIR} after the second")
endif()
if(NOT EXISTS ${DIR}/out_v2.npy)
  message(FATAL_ERROR "the second dump wrote no out_v2.npy into ${DIR}")
endif()
file(GLOB present RELATIVE ${DIR} ${DIR}/*.npy)
file(STRINGS ${DIR}/.pd-dump listed)
list(SORT present)
list(SORT listed)
if(NOT present STREQUAL listed)
  message(FATAL_ERROR "${DIR} holds [${present}] but its .pd-dump lists [${listed}]")
endif()
message(STATUS "the second dump replaced the first: ${present}")
