# add_chapter(): one line builds a chapter program for every backend, registers its smoke
# tests and lists it in build/chapters.txt, the manifest that scripts/run (the tour) and
# scripts/gpu-check read. A new chapter needs nothing else.
#
#   add_chapter(<NN_topic>
#               [SOURCES <files>]        # default: main.cu, and problem.cu and studies.cu where
#                                        # there are
#               [SMOKE_ARGS <args>...]   # CTest smoke test arguments (small, validating)
#               [TOUR_ARGS <args>...]    # scripts/run: the tour's arguments (default sizes)
#               [BENCH_ARGS <args>...]   # scripts/gpu-check: benchmark-size arguments
#               [SIM_BENCH_ARGS <args>...] # BENCH_ARGS at simulator sizes (default: BENCH_ARGS),
#                                        # for the T4 preset's tests
#               [COLLECTIVES])           # links pd_collectives_<backend> (NCCL; chapter 10): the
#                                        # cuda program is left out, with a message, without NCCL
#
# Program names: ch<NN_topic> on cuda, ch<NN_topic>-sim on the simulator.
#
# On the simulator each program also runs as on the oldest GPU the project supports, a T4 (the
# simulator's PD_SIM_DEVICE=T4 preset: compute capability 7.5, no bf16 tensor cores, no
# cp.async), at its smoke, tour and (simulator-sized) benchmark arguments: <program>.sim.t4.smoke,
# .t4.tour and .t4.bench (labels sim, t4) must exit 0, the versions that need sm_80 reported as
# not run (each argument list once: a run whose arguments an earlier one had is not registered).

function(pd_chapter_target program backend out_var)
  if(backend STREQUAL "cuda")
    set(${out_var} ${program} PARENT_SCOPE)
  else()
    set(${out_var} ${program}-${backend} PARENT_SCOPE)
  endif()
endfunction()

# pd_chapter_code(<target>...): a chapter program's own source is host code (options, the
# harness's calls, tables; its kernels, references, model and cost model are libraries that keep
# the build's flags) and compiles at -O1 in the optimised builds instead of -O3, as the tests'
# code does (pd_test_code()): chapter 07's main.cu 13.1 s at -O3, 9.0 s at -O1, for programs
# that spend their time in the libraries. pd_chapter_code(<target> CUDA): the CUDA program, only
# compiled in a build without a GPU (PD_CUDA_COMPILE_ONLY): -O0 there.
function(pd_chapter_code target)
  set(level -O1)
  if(PD_CUDA_COMPILE_ONLY AND "CUDA" IN_LIST ARGN)
    set(level -O0)
  endif()
  target_compile_options(${target} PRIVATE $<$<AND:$<COMPILE_LANGUAGE:CXX>,$<CONFIG:Release,RelWithDebInfo>>:${level}>)
endfunction()

# pd_chapter_unity(<target>): a chapter's files (main.cu, the lesson; problem.cu, the problem's
# options, inputs, reference and needs, where main.cu would be long without it; studies.cu, its
# further studies; all share chapter.hpp) compile as one unit, as CMake's unity build does: each
# file that includes the harness's headers (CLI11, nlohmann-json) costs about 6 s of CPU per
# backend on its own (measured: a file with pd/bench.hpp and one function, 6.5 s on the simulator
# at -O1, 5.6 s at -O0), so a program in several files builds in the time of one. Each file
# still compiles on its own: they share only chapter.hpp, in a named namespace.
function(pd_chapter_unity target)
  set_target_properties(${target} PROPERTIES UNITY_BUILD ON UNITY_BUILD_MODE BATCH UNITY_BUILD_BATCH_SIZE 0)
endfunction()

function(add_chapter name)
  cmake_parse_arguments(ARG "COLLECTIVES" "" "SOURCES;SMOKE_ARGS;TOUR_ARGS;BENCH_ARGS;SIM_BENCH_ARGS" ${ARGN})
  if(NOT DEFINED ARG_SIM_BENCH_ARGS)
    set(ARG_SIM_BENCH_ARGS ${ARG_BENCH_ARGS})
  endif()
  if(NOT ARG_SOURCES)
    set(ARG_SOURCES main.cu)
    foreach(file IN ITEMS problem.cu studies.cu)
      if(EXISTS ${CMAKE_CURRENT_SOURCE_DIR}/${file})
        list(APPEND ARG_SOURCES ${file})
      endif()
    endforeach()
  endif()
  set(program ch${name})
  foreach(backend IN LISTS PD_BACKENDS)
    pd_chapter_target(${program} ${backend} target)
    set(extra)
    if(ARG_COLLECTIVES)
      if(backend STREQUAL "cuda" AND NOT PD_NCCL_FOUND)
        message(STATUS "${program}: the cuda build is left out (NCCL not found); the simulator's runs")
        continue()
      endif()
      set(extra pd_collectives_${backend})
    endif()
    if(backend STREQUAL "cuda")
      # A chapter program holds no device code (its kernels live in kernels/ and model/ and come
      # in through pd_kernels_cuda and pd_model_cuda), so the host compiler builds it: nvcc took about 50 s per
      # program for CLI11 and nlohmann-json, g++ a third of that.
      set_source_files_properties(${ARG_SOURCES} PROPERTIES LANGUAGE CXX)
      add_executable(${target} ${ARG_SOURCES})
      pd_chapter_unity(${target})
      target_link_libraries(${target} PRIVATE ${extra} pd_model_cuda pd_kernels_cuda pd_serving pd_runtime_cuda
                                              pd_reference pd_core CUDA::cublas pd_warnings)
      pd_chapter_code(${target} CUDA)
      # Smoke test on a GPU; CTest reports it as skipped (exit 77) where there is none.
      add_test(NAME ${program}.cuda.smoke
               COMMAND sh ${PROJECT_SOURCE_DIR}/cmake/run-if-device.sh $<TARGET_FILE:pd_device_query>
                       $<TARGET_FILE:${target}> ${ARG_SMOKE_ARGS})
      set_tests_properties(${program}.cuda.smoke PROPERTIES LABELS "cuda;smoke" SKIP_RETURN_CODE 77)
      # the grader's (scripts/grade on a GPU): the program with the grade tree's labs, timed
      # beside this one
      if(PD_GRADE AND name IN_LIST PD_KERNEL_LABS)
        add_executable(${target}-grade EXCLUDE_FROM_ALL ${ARG_SOURCES})
        pd_chapter_unity(${target}-grade)
        target_link_libraries(${target}-grade PRIVATE pd_model_grade_cuda pd_kernels_grade_cuda pd_serving
                                                      pd_runtime_cuda pd_reference pd_core CUDA::cublas pd_warnings)
        pd_chapter_code(${target}-grade CUDA)
        add_dependencies(grade-cuda ${target}-grade ${target})
      endif()
    else()
      # Backends other than cuda provide pd_add_<backend>_chapter(target sources).
      cmake_language(CALL pd_add_${backend}_chapter ${target} "${ARG_SOURCES}" LIBRARIES ${extra})
      add_test(NAME ${program}.${backend}.smoke COMMAND ${target} ${ARG_SMOKE_ARGS})
      set_tests_properties(${program}.${backend}.smoke PROPERTIES LABELS "${backend};smoke")
      if(backend STREQUAL "sim")  # as on a T4 (see above)
        set(t4_runs)  # the argument lists registered: a run with the same arguments as an earlier
                      # one (chapter 11's benchmark arguments are its smoke test's) is that run
        foreach(run IN ITEMS smoke tour bench)
          string(TOUPPER ${run} kind)
          set(args ${ARG_${kind}_ARGS})
          if(run STREQUAL "bench")
            set(args ${ARG_SIM_BENCH_ARGS})
          endif()
          string(REPLACE ";" " " key "[${args}]")
          if(key IN_LIST t4_runs)
            continue()
          endif()
          list(APPEND t4_runs "${key}")
          add_test(NAME ${program}.sim.t4.${run} COMMAND ${target} ${args})
          set_tests_properties(${program}.sim.t4.${run} PROPERTIES LABELS "sim;t4" ENVIRONMENT PD_SIM_DEVICE=T4)
        endforeach()
      endif()
    endif()
    list(JOIN ARG_TOUR_ARGS " " tour)
    list(JOIN ARG_BENCH_ARGS " " bench)
    set_property(GLOBAL APPEND PROPERTY PD_CHAPTER_MANIFEST
                 "${program}|${backend}|${target}|${tour}|${bench}")
  endforeach()
endfunction()

# Writes build/chapters.txt: program|backend|executable (in build/bin)|tour arguments|benchmark
# arguments; one line per chapter and backend.
function(pd_write_chapter_manifest)
  get_property(lines GLOBAL PROPERTY PD_CHAPTER_MANIFEST)
  set(text "# program|backend|executable|tour_args|bench_args\n")
  foreach(line IN LISTS lines)
    string(APPEND text "${line}\n")
  endforeach()
  file(WRITE ${PROJECT_BINARY_DIR}/chapters.txt "${text}")
endfunction()
