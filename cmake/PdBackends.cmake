# Backends. `cuda` is configured when nvcc is found (PD_ENABLE_CUDA=OFF turns it off). The
# `sim` backend (CPU simulator) appends itself to PD_BACKENDS.
#
# CMAKE_CUDA_ARCHITECTURES: a user's value (-D or the CUDAARCHS environment variable) wins.
# Otherwise `native` when a GPU is visible, so the build targets the card it will run on, and
# PD_CUDA_ARCHITECTURES_NO_GPU otherwise: one architecture keeps compile-only builds short,
# and its PTX is embedded so the driver can compile it for newer GPUs.
option(PD_ENABLE_CUDA "Build the cuda backend when nvcc is found" ON)
set(PD_CUDA_ARCHITECTURES_NO_GPU "80" CACHE STRING
    "CUDA architectures compiled when no GPU is visible at configure time")
# PD_CUDA_EXTRA_ARCHITECTURES: more architectures for the kernel library and the simulator's
# conformance programs only, in the same build (scripts/test: PD_CUDA_ARCHITECTURES_NO_GPU
# 75-real, the oldest GPU the project promises, and 90-real here, the benchmark GPU), so that
# code one of them cannot compile is found without a second configure. Ignored beside a special CMAKE_CUDA_ARCHITECTURES
# (native, all, all-major), which cannot be combined with others.
set(PD_CUDA_EXTRA_ARCHITECTURES "" CACHE STRING
    "Extra CUDA architectures compiled for the kernel library and the conformance programs")

# Where the CUDA kernel libraries leave ptxas's resource report (registers, shared memory, stack
# and spills of each kernel for each architecture): the simulator's profiler reads it to give
# the occupancy of a kernel on a named GPU.
set(PD_KERNEL_RESOURCES_DIR ${PROJECT_BINARY_DIR}/kernel-resources)
# pd_record_kernel_resources(<target>...): the target's CUDA compiles report their resources there.
function(pd_record_kernel_resources)
  foreach(target IN LISTS ARGN)
    target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CUDA>:--resource-usage>)
    set_target_properties(${target} PROPERTIES CUDA_COMPILER_LAUNCHER
                                               "${PROJECT_SOURCE_DIR}/cmake/ptxas-resources.sh;${PD_KERNEL_RESOURCES_DIR}")
  endforeach()
endfunction()

# pd_cuda_host_code(<target>...): a CUDA backend's library whose .cpp files (host code) only run
# with a GPU: -O0 in a build without one (PD_CUDA_COMPILE_ONLY), like its .cu files' host code.
function(pd_cuda_host_code)
  if(PD_CUDA_COMPILE_ONLY)
    foreach(target IN LISTS ARGN)
      target_compile_options(${target} PRIVATE $<$<AND:$<COMPILE_LANGUAGE:CXX>,$<CONFIG:Release,RelWithDebInfo>>:-O0>)
    endforeach()
  endif()
endfunction()

# pd_cuda_extra_architectures(<target>...): the build's architectures plus the extra ones.
function(pd_cuda_extra_architectures)
  if(NOT PD_CUDA_EXTRA_ARCHITECTURES OR CMAKE_CUDA_ARCHITECTURES MATCHES "^(native|all|all-major)$")
    return()
  endif()
  foreach(target IN LISTS ARGN)
    set_property(TARGET ${target} PROPERTY CUDA_ARCHITECTURES ${CMAKE_CUDA_ARCHITECTURES} ${PD_CUDA_EXTRA_ARCHITECTURES})
  endforeach()
endfunction()

set(PD_BACKENDS "")
set(PD_CUDA_STATUS "")
include(CheckLanguage)
check_language(CUDA)
if(PD_ENABLE_CUDA AND CMAKE_CUDA_COMPILER)
  if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES AND NOT DEFINED ENV{CUDAARCHS})
    set(_pd_gpu_visible FALSE)
    find_program(PD_NVIDIA_SMI nvidia-smi)
    if(PD_NVIDIA_SMI)
      execute_process(COMMAND ${PD_NVIDIA_SMI} -L RESULT_VARIABLE _rc OUTPUT_VARIABLE _out ERROR_QUIET
                      TIMEOUT 20)
      if(_rc EQUAL 0 AND _out MATCHES "GPU [0-9]")
        set(_pd_gpu_visible TRUE)
      endif()
    endif()
    if(_pd_gpu_visible)
      set(CMAKE_CUDA_ARCHITECTURES native CACHE STRING "CUDA architectures (a GPU was visible)")
    else()
      set(CMAKE_CUDA_ARCHITECTURES ${PD_CUDA_ARCHITECTURES_NO_GPU} CACHE STRING
          "CUDA architectures (no GPU was visible: PD_CUDA_ARCHITECTURES_NO_GPU)")
    endif()
    # Without a GPU the CUDA programs and test binaries are built to be compiled, never run here
    # (their tests are skipped): their host code compiles at -O0 then (pd_test_code(),
    # pd_chapter_code(), pd_cuda_host_code() and nvcc's -O below); the device code and every
    # simulator target keep their flags.
    if(_pd_gpu_visible)
      set(PD_CUDA_COMPILE_ONLY OFF CACHE INTERNAL "")
    else()
      set(PD_CUDA_COMPILE_ONLY ON CACHE INTERNAL "")
    endif()
  endif()
  enable_language(CUDA)
  # C++20 in device code too. CMake 3.25 does not know nvcc's C++20 flag (later versions do),
  # so it is named here; without it CMake refuses CUDA targets of a C++20 project.
  if(NOT CMAKE_CUDA20_STANDARD_COMPILE_OPTION)
    set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "-std=c++20")
    set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "-std=c++20")
  endif()
  set(CMAKE_CUDA_STANDARD 20)
  set(CMAKE_CUDA_STANDARD_REQUIRED ON)
  set(CMAKE_CUDA_EXTENSIONS OFF)
  # Line information lets compute-sanitizer and profilers point at source lines; it does not
  # change the generated code.
  string(APPEND CMAKE_CUDA_FLAGS " -lineinfo")
  # Without a GPU nothing built for it runs here (PD_CUDA_COMPILE_ONLY): nvcc's -O, which sets
  # the host code's optimisation only, is -O0 then (the device code is optimised whatever it
  # says: ptxas reports the same registers, shared memory and spills of every kernel), as is the
  # host code of the CUDA libraries (pd_cuda_host_code()). CPU per compile, -O3 then -O0:
  # flash attention's SIMT kernels (then one file) 11.8 and 10.6 s, model/src/generate.cpp 9.4 and 6.1 s.
  if(PD_CUDA_COMPILE_ONLY)
    foreach(config RELEASE RELWITHDEBINFO)
      string(REGEX REPLACE "(^| )-O[0-9s]" "\\1-O0" CMAKE_CUDA_FLAGS_${config} "${CMAKE_CUDA_FLAGS_${config}}")
    endforeach()
  endif()
  list(APPEND PD_BACKENDS cuda)
  set(PD_CUDA_STATUS ", CUDA architectures ${CMAKE_CUDA_ARCHITECTURES}")
  if(PD_CUDA_EXTRA_ARCHITECTURES)
    string(APPEND PD_CUDA_STATUS " (+ ${PD_CUDA_EXTRA_ARCHITECTURES} for the kernels and the conformance programs)")
  endif()
else()
  message(STATUS "nvcc not found or PD_ENABLE_CUDA=OFF: the cuda backend is not built")
endif()

# Compile options shared by every host translation unit of the project. GCC 12's
# -Wmissing-field-initializers also fires on C++20 designated initializers that leave members
# to their defaults (`pd::Kernel{.name = "v1"}`), which is their point; GCC 14 no longer does.
add_library(pd_warnings INTERFACE)
target_compile_options(pd_warnings INTERFACE
  $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wno-unused-parameter -Wno-missing-field-initializers>
  $<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-Wall,-Wextra,-Wno-unused-parameter>)
# Sanitizer instrumentation makes GCC 12 report false -Wmaybe-uninitialized in the standard
# library (std::function inside <regex>).
if(PD_SIM_SANITIZE)
  target_compile_options(pd_warnings INTERFACE $<$<COMPILE_LANGUAGE:CXX>:-Wno-maybe-uninitialized>)
endif()

include(PdSim)
