# Builds tests/sim/profile_simcc.cu with `scripts/simcc --profile` and checks both ways its
# counts come out (cmake -P):
#   -DSIMCC=scripts/simcc -DSOURCE=profile_simcc.cu -DPROGRAM=out/profile_simcc -DFILE=out/profile.json
# 1. without PD_SIM_PROFILE: the readable report on stderr at exit (the kernel and its counts);
# 2. with PD_SIM_PROFILE=FILE: the JSON list, one object per kernel, with the keys
#    docs/simulator.md names, and the counts the program's comment works out;
# 3. built without --profile, the program is not instrumented: PD_SIM_PROFILE=FILE writes nothing.
execute_process(COMMAND ${SIMCC} --profile ${SOURCE} -o ${PROGRAM} RESULT_VARIABLE rc OUTPUT_VARIABLE out
                ERROR_VARIABLE err TIMEOUT 600)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "simcc --profile failed (${rc}):\n${out}${err}")
endif()
execute_process(COMMAND ${PROGRAM} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 120)
if(NOT rc EQUAL 0 OR NOT err MATCHES "kernel strided_copy: 1 launch, 1 blocks, 32 threads"
   OR NOT err MATCHES "global loads: 1 requests, 8 sectors per request \\(ideal 4\\)")
  message(FATAL_ERROR "the report at exit is not there (exit ${rc}):\n${out}${err}")
endif()
file(REMOVE ${FILE})
execute_process(COMMAND ${CMAKE_COMMAND} -E env PD_SIM_PROFILE=${FILE} ${PROGRAM} RESULT_VARIABLE rc
                OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 120)
if(NOT rc EQUAL 0 OR NOT EXISTS ${FILE})
  message(FATAL_ERROR "PD_SIM_PROFILE=${FILE}: no file (exit ${rc}):\n${out}${err}")
endif()
file(READ ${FILE} json)
string(JSON kernels LENGTH "${json}")
if(NOT kernels EQUAL 1)
  message(FATAL_ERROR "${kernels} kernels in ${FILE}, expected 1:\n${json}")
endif()
foreach(check IN ITEMS "kernel=strided_copy" "launches=1" "global_load.requests=1" "global_load.sectors=8"
                       "global_load.bytes=128" "global_store.requests=1" "global_store.sectors=4"
                       "shared_store.requests=2" "shared_store.wavefronts=2" "shared_load.requests=1"
                       "shared_load.wavefronts=2")
  string(REGEX MATCH "^([^=]+)=(.*)$" _ "${check}")
  string(REPLACE "." ";" keys "${CMAKE_MATCH_1}")
  string(JSON got ERROR_VARIABLE e GET "${json}" 0 ${keys})
  if(e OR NOT got STREQUAL "${CMAKE_MATCH_2}")
    message(FATAL_ERROR "${FILE}: ${CMAKE_MATCH_1} = '${got}' ${e}, expected ${CMAKE_MATCH_2}:\n${json}")
  endif()
endforeach()
# every site names its file, line and access, with its counts
string(JSON sites LENGTH "${json}" 0 sites)
if(sites LESS 4)
  message(FATAL_ERROR "${sites} sites, expected one per load and store (5):\n${json}")
endif()
math(EXPR last "${sites} - 1")
foreach(i RANGE ${last})
  foreach(key IN ITEMS file line op requests sectors wavefronts)
    string(JSON got ERROR_VARIABLE e GET "${json}" 0 sites ${i} ${key})
    if(e)
      message(FATAL_ERROR "site ${i} has no ${key}:\n${json}")
    endif()
  endforeach()
  string(JSON file GET "${json}" 0 sites ${i} file)
  if(NOT file MATCHES "profile_simcc.cu$")
    message(FATAL_ERROR "site ${i} is in ${file}, not the program's source:\n${json}")
  endif()
endforeach()
file(REMOVE ${FILE}-plain)
execute_process(COMMAND ${SIMCC} ${SOURCE} -o ${PROGRAM}-plain RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err
                TIMEOUT 600)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "simcc failed (${rc}):\n${out}${err}")
endif()
execute_process(COMMAND ${CMAKE_COMMAND} -E env PD_SIM_PROFILE=${FILE}-plain ${PROGRAM}-plain RESULT_VARIABLE rc
                OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 120)
if(NOT rc EQUAL 0 OR EXISTS ${FILE}-plain)
  message(FATAL_ERROR "a build without --profile is instrumented (exit ${rc}):\n${out}${err}")
endif()
message(STATUS "simcc --profile: the report at exit and ${FILE} as documented; a plain build is not instrumented")
