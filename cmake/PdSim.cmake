# The sim backend: the same kernel sources, rewritten by pd_sim_rewrite (launch chevrons,
# `extern __shared__`, inline PTX, `__CUDA_ARCH__` in device functions) and compiled by the
# host compiler against the CPU simulator of the CUDA execution model (sim/). Everything
# linked with pd_sim gets the simulator header force-included and PD_BACKEND_SIM defined.
option(PD_ENABLE_SIM "Build the sim backend (the CPU simulator of the CUDA execution model)" ON)
option(PD_SIM_SANITIZE "Build the sim backend with AddressSanitizer and UndefinedBehaviorSanitizer" OFF)
# The architecture the simulator models: the value of __CUDA_ARCH__ in the bodies of device
# functions (docs/simulator.md). The simulator header's default is 900 (an H100 or H200); another
# value reaches every sim target and scripts/simcc as the definition PD_SIM_CUDA_ARCH.
set(PD_SIM_CUDA_ARCH 900 CACHE STRING
    "The architecture the simulator models, as __CUDA_ARCH__ spells it (900: H100 and H200, 800: A100)")
if(NOT PD_SIM_CUDA_ARCH MATCHES "^[1-9][0-9]*0$" OR PD_SIM_CUDA_ARCH LESS 300)
  message(FATAL_ERROR "PD_SIM_CUDA_ARCH is '${PD_SIM_CUDA_ARCH}': give an architecture as __CUDA_ARCH__ spells "
                      "it (750, 800, 860, 890, 900, ...)")
endif()
set(PD_SIM_ARCH_DEFINITIONS "")
if(NOT PD_SIM_CUDA_ARCH EQUAL 900)
  set(PD_SIM_ARCH_DEFINITIONS PD_SIM_CUDA_ARCH=${PD_SIM_CUDA_ARCH})
endif()

# The profiler (docs/simulator.md, "The profiler"): the kernels compiled a second time with
# every load and store reported to the simulator, linked into the `*-sim-profile` twins of the
# chapter programs and the profiler's tests. Not with the sanitizers (the instrumentations
# cannot be combined).
option(PD_SIM_PROFILE "Build the profiling twins of the simulator programs (chNN_topic-sim-profile)" ON)
if(PD_SIM_SANITIZE)
  set(PD_SIM_PROFILE OFF)
endif()
# What a profiled translation unit is compiled with: GCC's thread-sanitizer instrumentation,
# which calls __tsan_read4/__tsan_write4 and the other sizes (defined by the simulator, whose
# profiler counts them; ThreadSanitizer's runtime is not linked) before every load and store,
# without function entry and exit hooks (-Wno-tsan: its warning that a fence, __threadfence(),
# is not checked concerns ThreadSanitizer's runtime, which is not there). (Not the address
# sanitizer's instrumentation: it leaves out a check it proves redundant, and so the store of a
# read-modify-write, `s[j] *= inv`.)
# Line tables, so a count names its source line; -O2 without vectorization, store merging or
# scalar replacement, so that each of a thread's accesses stays the access the source makes (a
# loop of 4-byte loads is not turned into 16-byte ones), as nvcc issues them.
set(PD_SIM_PROFILE_FLAGS -fsanitize=thread --param=tsan-instrument-func-entry-exit=0 -Wno-tsan -O2 -fno-tree-vectorize
    -fno-tree-slp-vectorize -fno-store-merging -fno-tree-sra -g1)
set(PD_SIM_PROFILE_DEFINITIONS PD_SIM_PROFILED=1)

if(NOT PD_ENABLE_SIM)
  return()
endif()
find_package(Boost 1.74 CONFIG COMPONENTS context)
find_package(Threads REQUIRED)
if(NOT Boost_FOUND)
  message(STATUS "Boost.Context not found: the sim backend is not built (scripts/install-deps installs it)")
  return()
endif()
list(APPEND PD_BACKENDS sim)

# pd_sim_rewrite_sources(<out_var> <files>...): for each CUDA source or header, a rewritten
# copy under build/sim_src/<path from the repository root> (.cu files get a .cpp suffix so
# the host compiler builds them). Headers are mirrored too, so that `#include "x.cuh"` next
# to a rewritten file finds the rewritten header.
function(pd_sim_rewrite_sources out_var)
  set(outs)
  foreach(src IN LISTS ARGN)
    get_filename_component(abs "${src}" ABSOLUTE)
    cmake_path(IS_PREFIX PROJECT_BINARY_DIR "${abs}" NORMALIZE in_build)
    if(in_build)  # the grader's lab tree: build/sim_src/_build/grade/labs/...
      file(RELATIVE_PATH rel "${PROJECT_BINARY_DIR}" "${abs}")
      set(rel "_build/${rel}")
    else()
      file(RELATIVE_PATH rel "${PROJECT_SOURCE_DIR}" "${abs}")
    endif()
    set(out "${PROJECT_BINARY_DIR}/sim_src/${rel}")
    if(abs MATCHES "\\.cu$")
      string(APPEND out ".cpp")
    endif()
    add_custom_command(OUTPUT "${out}"
                       COMMAND pd_sim_rewrite "${abs}" "${out}"
                       DEPENDS "${abs}" pd_sim_rewrite
                       COMMENT "Rewriting ${rel} for the simulator" VERBATIM)
    list(APPEND outs "${out}")
  endforeach()
  set(${out_var} ${outs} PARENT_SCOPE)
endfunction()

# pd_sim_mirror_path(<out_var> <dir>): where the rewritten copies of the files below <dir> are:
# ${PROJECT_BINARY_DIR}/sim_src/<dir relative to the root>.
function(pd_sim_mirror_path out_var dir)
  file(RELATIVE_PATH rel "${PROJECT_SOURCE_DIR}" "${dir}")
  set(${out_var} "${PROJECT_BINARY_DIR}/sim_src/${rel}" PARENT_SCOPE)
endfunction()

# The profiler's targets are built on demand, not by `cmake --build build`: `--target profile`
# builds the twins of every chapter program, `--target pd_profile_tests` those and what the
# profiler's tests run (CTest builds it first: the fixture test sim.profile.build).
if(PD_SIM_PROFILE)
  add_custom_target(profile)
  add_custom_target(pd_profile_tests)
  add_dependencies(pd_profile_tests profile)  # the chapter pages quote profiled runs
endif()

# pd_sim_profiled(<target>...): the target's own sources compiled for the profiler; built only
# when a target that needs it is (see above).
function(pd_sim_profiled)
  foreach(target IN LISTS ARGN)
    target_compile_options(${target} PRIVATE ${PD_SIM_PROFILE_FLAGS})
    target_compile_definitions(${target} PRIVATE ${PD_SIM_PROFILE_DEFINITIONS})
    set_target_properties(${target} PROPERTIES EXCLUDE_FROM_ALL TRUE)
  endforeach()
endfunction()

# Called by add_chapter() for the sim backend: the program's objects, compiled once, linked into
# <target> (the plain simulator) and, with PD_SIM_PROFILE, into <target>-profile (the kernels
# compiled for the profiler; the program's own code is host code and stays as it is).
function(pd_add_sim_chapter target sources)
  cmake_parse_arguments(ARG "" "" "LIBRARIES" ${ARGN})  # more libraries (chapter 10: pd_collectives_sim)
  set(abs_sources)
  foreach(s IN LISTS sources)
    list(APPEND abs_sources "${CMAKE_CURRENT_SOURCE_DIR}/${s}")
  endforeach()
  pd_sim_rewrite_sources(rewritten ${abs_sources})
  add_library(${target}-objects OBJECT ${rewritten})
  pd_chapter_unity(${target}-objects)
  # the rewritten copies live under build/sim_src: chapter.hpp is found beside the originals
  target_include_directories(${target}-objects PRIVATE ${CMAKE_CURRENT_SOURCE_DIR})
  target_link_libraries(${target}-objects PRIVATE ${ARG_LIBRARIES} pd_model_sim pd_serving pd_runtime_sim pd_reference
                                                  pd_core pd_warnings)
  pd_chapter_code(${target}-objects)
  add_executable(${target} $<TARGET_OBJECTS:${target}-objects>)
  target_link_libraries(${target} PRIVATE ${ARG_LIBRARIES} pd_model_sim pd_kernels_sim pd_serving pd_runtime_sim
                                          pd_reference pd_core)
  if(PD_SIM_PROFILE)
    add_executable(${target}-profile EXCLUDE_FROM_ALL $<TARGET_OBJECTS:${target}-objects>)
    target_link_libraries(${target}-profile PRIVATE ${ARG_LIBRARIES} pd_model_prof pd_kernels_prof pd_serving
                                                    pd_runtime_sim pd_reference pd_core)
    # linked after the program, so that a twin older than its program is out of date (Bench's
    # --profile refuses to run it then)
    add_dependencies(${target}-profile ${target})
    add_dependencies(profile ${target}-profile)
    # The grader's twin (scripts/grade), for a chapter that holds a kernel lab: the same program
    # with the grade tree's labs, which measures a submission beside the reference's twin.
    get_filename_component(chapter "${CMAKE_CURRENT_SOURCE_DIR}" NAME)
    if(PD_GRADE AND chapter IN_LIST PD_KERNEL_LABS)
      add_executable(${target}-grade-profile EXCLUDE_FROM_ALL $<TARGET_OBJECTS:${target}-objects>)
      target_link_libraries(${target}-grade-profile PRIVATE pd_model_grade_prof pd_kernels_grade_prof pd_serving
                                                            pd_runtime_sim pd_reference pd_core)
      add_dependencies(grade ${target}-grade-profile ${target}-profile)
    endif()
  endif()
endfunction()

# Called by tests/kernels, tests/labs and tests/model for the sim backend: the test .cpp files,
# compiled with the simulator header, against @p kernels (default: the sim kernel library) and
# the other libraries named.
function(pd_add_sim_kernel_tests target sources)
  cmake_parse_arguments(ARG "" "KERNELS" "LIBRARIES" ${ARGN})
  if(NOT ARG_KERNELS)
    set(ARG_KERNELS pd_kernels_sim)
  endif()
  add_executable(${target} ${sources})
  target_link_libraries(${target} PRIVATE ${ARG_LIBRARIES} ${ARG_KERNELS} pd_runtime_sim pd_reference pd_core
                                          Catch2::Catch2 pd_warnings)
endfunction()
