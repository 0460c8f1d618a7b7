# Compiles one CUDA file for the simulator (rewritten by pd_sim_rewrite, then checked by the host
# compiler with the flags of pd_sim, read from the simcc-flags.txt that sim writes: the
# one definition of the simulator's flags) and checks the outcome:
#   cmake -DFLAGS=<build>/sim/simcc-flags.txt -DSRC=<file.cu> -DWORK=<dir> [-DEXPECT=<regex>]
#         -P expect_compile.cmake
# Without EXPECT the file must compile. With EXPECT it must fail, and the compiler's output must
# match EXPECT (the simulator's own message, not some other error).
file(STRINGS "${FLAGS}" lines)
set(args)
foreach(line IN LISTS lines)
  if(line MATCHES "^cxx (.*)$")
    set(CXX "${CMAKE_MATCH_1}")
  elseif(line MATCHES "^rewrite (.*)$")
    set(REWRITE "${CMAKE_MATCH_1}")
  elseif(line MATCHES "^compile (.*)$")
    list(APPEND args "${CMAKE_MATCH_1}")
  endif()
endforeach()
get_filename_component(name "${SRC}" NAME_WE)
set(rewritten "${WORK}/${name}.cpp")
file(MAKE_DIRECTORY "${WORK}")
execute_process(COMMAND "${REWRITE}" "${SRC}" "${rewritten}" RESULT_VARIABLE rc ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "pd_sim_rewrite failed on ${SRC}: ${err}")
endif()
list(APPEND args -fsyntax-only)
execute_process(COMMAND "${CXX}" ${args} "${rewritten}" RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
if(EXPECT)
  if(rc EQUAL 0)
    message(FATAL_ERROR "${SRC} compiled for the simulator; it should have been refused with \"${EXPECT}\"")
  endif()
  if(NOT out MATCHES "${EXPECT}")
    message(FATAL_ERROR "${SRC} failed to compile, but without the simulator's message \"${EXPECT}\":\n${out}")
  endif()
  string(REGEX MATCH "[^\n]*${EXPECT}[^\n]*" line "${out}")
  message(STATUS "refused as expected: ${line}")
elseif(NOT rc EQUAL 0)
  message(FATAL_ERROR "${SRC} should compile for the simulator:\n${out}")
endif()
