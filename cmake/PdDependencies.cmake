# Finds the dependencies, first as installed packages (scripts/install-deps), then in the
# header-only bundle .deps/ that scripts/bundle-deps fills for machines that cannot install
# packages (the lent GPU machine of scripts/gpu-check).
set(PD_DEPS_DIR "${PROJECT_SOURCE_DIR}/.deps" CACHE PATH "Bundled header-only dependencies")

function(pd_header_only_fallback target header)
  if(NOT TARGET ${target})
    if(EXISTS "${PD_DEPS_DIR}/include/${header}")
      add_library(${target} INTERFACE IMPORTED GLOBAL)
      set_target_properties(${target} PROPERTIES INTERFACE_INCLUDE_DIRECTORIES "${PD_DEPS_DIR}/include")
      message(STATUS "Using ${target} from ${PD_DEPS_DIR}")
    else()
      message(FATAL_ERROR "${target} not found (looked for ${header}). Run scripts/install-deps.")
    endif()
  endif()
endfunction()

find_package(CLI11 CONFIG QUIET)
pd_header_only_fallback(CLI11::CLI11 CLI/CLI.hpp)
find_package(nlohmann_json CONFIG QUIET)
pd_header_only_fallback(nlohmann_json::nlohmann_json nlohmann/json.hpp)
find_package(Catch2 2 CONFIG QUIET)
pd_header_only_fallback(Catch2::Catch2 catch2/catch.hpp)
if(Catch2_DIR)
  list(APPEND CMAKE_MODULE_PATH "${Catch2_DIR}")
else()
  list(APPEND CMAKE_MODULE_PATH "${PD_DEPS_DIR}/cmake")
endif()
include(Catch)  # catch_discover_tests

# The CUDA toolkit's headers (cuda_runtime.h, cuda_fp16.h, Thrust/CUB under cccl/) and, for
# the cuda backend, its libraries.
find_package(CUDAToolkit QUIET)
if(NOT CUDAToolkit_FOUND)
  message(FATAL_ERROR "The CUDA toolkit was not found (nvcc and headers). Install it, or put nvcc "
                      "on the PATH / set CUDAToolkit_ROOT.")
endif()
set(PD_CUDA_INCLUDE_DIRS ${CUDAToolkit_INCLUDE_DIRS})
if(EXISTS "${CUDAToolkit_INCLUDE_DIRS}/cccl")
  list(APPEND PD_CUDA_INCLUDE_DIRS "${CUDAToolkit_INCLUDE_DIRS}/cccl")
endif()

# NCCL for the cuda backend of chapter 10 and the collectives' conformance program: the toolkit
# ships it on some installs (nccl.h beside cuda_runtime.h, libnccl.so beside libcudart); elsewhere
# it comes from NVIDIA's packages (libnccl-dev) or pip's nvidia-nccl-cu12 (point NCCL_ROOT at it).
# It is optional: without it those cuda targets are left out, with this message, and nothing
# else changes. The simulator has its own (sim/shadow/nccl.h).
find_path(PD_NCCL_INCLUDE_DIR nccl.h HINTS ${NCCL_ROOT} $ENV{NCCL_ROOT} ${CUDAToolkit_INCLUDE_DIRS}
          PATH_SUFFIXES include NO_CACHE)
find_library(PD_NCCL_LIBRARY nccl HINTS ${NCCL_ROOT} $ENV{NCCL_ROOT} ${CUDAToolkit_LIBRARY_DIR}
             PATH_SUFFIXES lib lib64 NO_CACHE)
if(PD_NCCL_INCLUDE_DIR AND PD_NCCL_LIBRARY)
  set(PD_NCCL_FOUND TRUE)
  add_library(pd_nccl INTERFACE)
  target_include_directories(pd_nccl INTERFACE ${PD_NCCL_INCLUDE_DIR})
  target_link_libraries(pd_nccl INTERFACE ${PD_NCCL_LIBRARY})
else()
  set(PD_NCCL_FOUND FALSE)
  message(STATUS "NCCL not found (nccl.h and libnccl): the cuda builds of chapter 10 and of the collectives' test "
                 "are left out; set NCCL_ROOT to an NCCL install to build them")
endif()

find_package(Doxygen COMPONENTS dot)

# matplotlib for scripts/plot (the plot tests and the docs' figures). It comes from the
# distribution (scripts/install-deps installs python3-matplotlib), so it belongs to the
# distribution's python, which need not be the first python3 on the PATH. PD_PLOT_PYTHON is
# the first interpreter that imports it, or empty.
find_package(Python3 COMPONENTS Interpreter)
set(PD_PLOT_PYTHON "")
foreach(python IN ITEMS ${Python3_EXECUTABLE} /usr/bin/python3)
  execute_process(COMMAND ${python} -c "import matplotlib" RESULT_VARIABLE rc OUTPUT_QUIET ERROR_QUIET)
  if(rc EQUAL 0)
    set(PD_PLOT_PYTHON ${python})
    break()
  endif()
endforeach()
