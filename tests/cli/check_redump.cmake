# A second dump into the directory of a first replaces it: cmake -DPROGRAM=<chapter 01 program>
# -DDIR=<dump directory> -P check_redump.cmake. The first run (v1) writes out_v1.npy, the second
# (v2) out_v2.npy; afterwards the directory holds the second run's files only, as its
# .pd-dump list says, and a file the programs did not write is refused as a dump directory.
file(REMOVE_RECURSE ${DIR})
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
