# Test registration shared by every directory: the suite-wide timeout, pd_catch_tests() and
# pd_test_code().

# Every test runs under a timeout. ctest reads the default for tests without a TIMEOUT
# property from CTestConfiguration.ini in the build tree (the TimeOut setting of ctest(1)),
# which reaches every test: add_test() ones in any directory and the ones
# catch_discover_tests() adds when ctest runs. Tests that need longer set their own TIMEOUT.
# (The file takes precedence over the DartConfiguration.tcl that include(CTest) would write.)
set(PD_TEST_TIMEOUT 600 CACHE STRING "Timeout in seconds of every test that sets no TIMEOUT")
file(CONFIGURE OUTPUT ${PROJECT_BINARY_DIR}/CTestConfiguration.ini
     CONTENT "# ctest's default timeout per test (cmake/PdTesting.cmake)\nTimeOut: ${PD_TEST_TIMEOUT}\n")

# pd_test_code(<target>...): the targets' own sources are test code (Catch2 test cases and
# their runner, no kernel) and compile at -O1 in the optimised builds instead of -O3: they spend
# their compile time on Catch2's assertion macros, not on code whose speed the tests depend on
# (the kernels, the simulator, the references and the model are libraries that keep the build's
# flags). Measured at -O3 / -O1: catch_session.cpp 22 / 14 s, the first unity file of
# pd_tests_cpu 27 / 17 s, test_layers.cpp 8.6 / 5.9 s; the main build's 47 test objects 309 s
# of compile at -O3, about a quarter less at -O1 (some 35 s of the build on 2 cores). The
# sanitizer build (RelWithDebInfo at -O1) is unchanged. Not for tests/sim: its programs are
# kernels.
# A CUDA test binary (a name ending in _cuda) of a build without a GPU is only compiled, never
# run: -O0 (PD_CUDA_COMPILE_ONLY, cmake/PdBackends.cmake).
function(pd_test_code)
  foreach(target IN LISTS ARGN)
    set(level -O1)
    if(PD_CUDA_COMPILE_ONLY AND target MATCHES "_cuda$")
      set(level -O0)
    endif()
    target_compile_options(${target} PRIVATE $<$<AND:$<COMPILE_LANGUAGE:CXX>,$<CONFIG:Release,RelWithDebInfo>>:${level}>)
  endforeach()
endfunction()

# The kernel and lab tests run again on the simulator under its random schedule, once per
# seed, to expose races that the deterministic schedule hides.
set(PD_SIM_RANDOM_SEEDS "1;2" CACHE STRING
    "Seeds of the extra runs of the kernel and lab tests under the simulator's random schedule (empty: none)")

# pd_catch_tests(<target> <backend> LABELS <label> [PREFIX <prefix>] [TEST_SPEC <spec>...]
#                [WILL_FAIL <bool>] [RANDOM_SCHEDULE])
#
# Registers each Catch2 test case of <target> as the CTest test <backend>.<prefix><case>
# (<backend>: cpu for host-only tests, cuda or sim), with the timeout, and exit code 77 (no
# CUDA device) reported as skipped. RANDOM_SCHEDULE, on the sim backend: each case is also
# registered once per seed of PD_SIM_RANDOM_SEEDS, as sim-random<seed>.<prefix><case>, run
# with PD_SIM_SCHEDULE=random and PD_SIM_SEED=<seed>, with the same labels.
function(pd_catch_tests target backend)
  cmake_parse_arguments(ARG "RANDOM_SCHEDULE" "PREFIX;LABELS;WILL_FAIL;ENVIRONMENT" "TEST_SPEC" ${ARGN})
  set(properties LABELS ${ARG_LABELS} SKIP_RETURN_CODE 77 TIMEOUT ${PD_TEST_TIMEOUT})
  if(DEFINED ARG_ENVIRONMENT)
    list(APPEND properties ENVIRONMENT ${ARG_ENVIRONMENT})
  endif()
  if(DEFINED ARG_WILL_FAIL)
    list(APPEND properties WILL_FAIL ${ARG_WILL_FAIL})
  endif()
  catch_discover_tests(${target} TEST_SPEC ${ARG_TEST_SPEC} TEST_PREFIX "${backend}.${ARG_PREFIX}"
                       PROPERTIES ${properties})
  if(NOT ARG_RANDOM_SCHEDULE OR NOT backend STREQUAL "sim")
    return()
  endif()
  foreach(seed IN LISTS PD_SIM_RANDOM_SEEDS)
    # --name only changes the program name in Catch's report, so a failure names its
    # schedule; as an argument it also gives this registration its own file (the files of
    # catch_discover_tests are named after its arguments). The two variables are two
    # properties: catch_discover_tests splits a list-valued property.
    catch_discover_tests(${target} TEST_SPEC ${ARG_TEST_SPEC} TEST_PREFIX "sim-random${seed}.${ARG_PREFIX}"
                         EXTRA_ARGS --name "${target}, PD_SIM_SCHEDULE=random PD_SIM_SEED=${seed}"
                         PROPERTIES ${properties} ENVIRONMENT PD_SIM_SCHEDULE=random
                                    ENVIRONMENT_MODIFICATION PD_SIM_SEED=set:${seed})
  endforeach()
endfunction()
