# Optional hardware paths. Each option is AUTO (default), ON or OFF:
#   AUTO  on when the dependency is found, off otherwise (the build passes either way);
#   ON    the dependency is required: configuring fails with a clear message without it;
#   OFF   never built.
#
#   FF_WITH_CUDA   CUDA runtime (device-pointer copies in HFReduce). Looked for under FF_CUDA_ROOT
#                  (default: $CUDA_HOME, else /usr/local/cuda).
#   FF_WITH_VERBS  ibverbs RDMA transport. Looked for under FF_VERBS_ROOT (default: /usr), which
#                  must hold include/infiniband/verbs.h and the libibverbs library.
#   FF_WITH_TORCH  PyTorch integration (the "hfreduce" torch.distributed backend in haiscale), built
#                  against the torch that FF_PYTHON imports (default: the project's .venv, made by
#                  deploy/install-deps.sh). Off under FF_SANITIZE: a Python extension cannot bring
#                  a sanitizer runtime into the interpreter.
#
# Every path that is on defines FF_WITH_<NAME>=1 on the interface target ff::config, and the
# reason for the choice is printed by ff_print_summary().

add_library(ff_config INTERFACE)
add_library(ff::config ALIAS ff_config)

function(_ff_tristate name doc)
  set(${name} AUTO CACHE STRING "${doc} (AUTO, ON or OFF)")
  set_property(CACHE ${name} PROPERTY STRINGS AUTO ON OFF)
  string(TOUPPER "${${name}}" _value)
  if(_value MATCHES "^(1|TRUE|YES)$")
    set(_value ON)
  elseif(_value MATCHES "^(0|FALSE|NO)$")
    set(_value OFF)
  endif()
  if(NOT _value MATCHES "^(AUTO|ON|OFF)$")
    message(FATAL_ERROR "${name} must be AUTO, ON or OFF; got '${${name}}'")
  endif()
  set(${name}_REQUEST ${_value} PARENT_SCOPE)
endfunction()

# _ff_decide(NAME FOUND REASON): sets FF_WITH_<NAME>_ON and FF_WITH_<NAME>_WHY.
function(_ff_decide name found reason)
  set(_request ${FF_WITH_${name}_REQUEST})
  if(_request STREQUAL "OFF")
    set(_on OFF)
    set(_why "disabled by FF_WITH_${name}=OFF")
  elseif(found)
    set(_on ON)
    set(_why "${reason}")
  elseif(_request STREQUAL "ON")
    message(FATAL_ERROR "FF_WITH_${name}=ON but ${reason}")
  else()
    set(_on OFF)
    set(_why "${reason}")
  endif()
  if(_on)
    target_compile_definitions(ff_config INTERFACE FF_WITH_${name}=1)
  endif()
  set(FF_WITH_${name}_ON ${_on} PARENT_SCOPE)
  set(FF_WITH_${name}_WHY "${_why}" PARENT_SCOPE)
endfunction()

# --- CUDA ---------------------------------------------------------------------------------------
_ff_tristate(FF_WITH_CUDA "Build the CUDA paths")
if(DEFINED ENV{CUDA_HOME})
  set(_ff_cuda_default "$ENV{CUDA_HOME}")
else()
  set(_ff_cuda_default "/usr/local/cuda")
endif()
set(FF_CUDA_ROOT "${_ff_cuda_default}" CACHE PATH "Where the CUDA toolkit is installed")
set(_found FALSE)
if(NOT FF_WITH_CUDA_REQUEST STREQUAL "OFF")
  if(EXISTS "${FF_CUDA_ROOT}/include/cuda_runtime.h")
    set(CUDAToolkit_ROOT "${FF_CUDA_ROOT}")
    find_package(CUDAToolkit QUIET)
    if(CUDAToolkit_FOUND AND TARGET CUDA::cudart_static)
      set(_found TRUE)
      set(_reason "CUDA toolkit ${CUDAToolkit_VERSION} found at ${FF_CUDA_ROOT}")
      # The static runtime: the binaries start on nodes without the toolkit (it loads the
      # driver, libcuda.so.1, at run time; no driver means no GPUs, not a failure to start).
      target_link_libraries(ff_config INTERFACE CUDA::cudart_static)
    else()
      set(_reason "${FF_CUDA_ROOT} has cuda_runtime.h but no usable CUDA runtime library")
    endif()
  else()
    set(_reason "no CUDA toolkit at ${FF_CUDA_ROOT} (set FF_CUDA_ROOT or CUDA_HOME)")
  endif()
endif()
_ff_decide(CUDA "${_found}" "${_reason}")

# --- ibverbs ------------------------------------------------------------------------------------
_ff_tristate(FF_WITH_VERBS "Build the ibverbs RDMA transport")
set(FF_VERBS_ROOT "/usr" CACHE PATH "Prefix holding include/infiniband/verbs.h and libibverbs")
set(_found FALSE)
if(NOT FF_WITH_VERBS_REQUEST STREQUAL "OFF")
  find_path(FF_VERBS_INCLUDE_DIR infiniband/verbs.h
    PATHS "${FF_VERBS_ROOT}/include" NO_DEFAULT_PATH NO_CACHE)
  find_library(FF_VERBS_LIBRARY ibverbs
    PATHS "${FF_VERBS_ROOT}/lib" "${FF_VERBS_ROOT}/lib64"
          "${FF_VERBS_ROOT}/lib/${CMAKE_LIBRARY_ARCHITECTURE}" NO_DEFAULT_PATH NO_CACHE)
  if(FF_VERBS_INCLUDE_DIR AND FF_VERBS_LIBRARY)
    set(_found TRUE)
    set(_reason "libibverbs found at ${FF_VERBS_LIBRARY}")
    add_library(ff_verbs INTERFACE)
    target_include_directories(ff_verbs SYSTEM INTERFACE "${FF_VERBS_INCLUDE_DIR}")
    target_link_libraries(ff_verbs INTERFACE "${FF_VERBS_LIBRARY}")
    add_library(ff::verbs ALIAS ff_verbs)
  else()
    set(_reason "no libibverbs headers/library under ${FF_VERBS_ROOT} (Debian: libibverbs-dev)")
  endif()
endif()
_ff_decide(VERBS "${_found}" "${_reason}")

# --- PyTorch ------------------------------------------------------------------------------------
_ff_tristate(FF_WITH_TORCH "Build the PyTorch integration")
# Under pip (scikit-build-core sets SKBUILD), the interpreter pip runs is the one to build for.
if(DEFINED SKBUILD AND Python3_EXECUTABLE)
  set(_ff_python_default "${Python3_EXECUTABLE}")
else()
  set(_ff_python_default "${CMAKE_SOURCE_DIR}/.venv/bin/python")
endif()
set(FF_PYTHON "${_ff_python_default}" CACHE FILEPATH
    "Python interpreter whose torch the PyTorch integration is built against")
set(_found FALSE)
if(NOT FF_WITH_TORCH_REQUEST STREQUAL "OFF")
  if(FF_SANITIZE)
    set(_reason "not built under FF_SANITIZE=${FF_SANITIZE} (an extension module cannot load a sanitizer runtime)")
  elseif(NOT EXISTS "${FF_PYTHON}")
    set(_reason "no Python at ${FF_PYTHON} (deploy/install-deps.sh makes .venv; or set FF_PYTHON)")
  else()
    execute_process(
      COMMAND "${FF_PYTHON}" -c
        "import torch, torch.utils; print(torch.__version__); print(torch.utils.cmake_prefix_path); print(torch.version.cuda or '')"
      OUTPUT_VARIABLE _torch_probe ERROR_VARIABLE _torch_error RESULT_VARIABLE _torch_rc
      OUTPUT_STRIP_TRAILING_WHITESPACE)
    if(NOT _torch_rc EQUAL 0)
      string(REGEX REPLACE "\n.*" "" _torch_error "${_torch_error}")
      set(_reason "${FF_PYTHON} cannot import torch (${_torch_rc})")
    else()
      string(REPLACE "\n" ";" _torch_probe "${_torch_probe}")
      list(GET _torch_probe 0 FF_TORCH_VERSION)
      list(GET _torch_probe 1 _torch_prefix)
      list(LENGTH _torch_probe _n)
      set(FF_TORCH_CUDA_VERSION "")
      if(_n GREATER 2)
        list(GET _torch_probe 2 FF_TORCH_CUDA_VERSION)
      endif()
      set(Python3_EXECUTABLE "${FF_PYTHON}")
      find_package(Python3 COMPONENTS Interpreter Development.Module QUIET)
      if(NOT Python3_Development.Module_FOUND)
        set(_reason "torch ${FF_TORCH_VERSION} imports, but the headers of ${FF_PYTHON} are missing (Debian: python3-dev)")
      else()
        # TorchConfig looks for CUDA itself when the wheel is a CUDA build; its messages are noise.
        find_package(Torch CONFIG QUIET PATHS "${_torch_prefix}" NO_DEFAULT_PATH)
        if(Torch_FOUND)
          set(_found TRUE)
          set(_reason "torch ${FF_TORCH_VERSION} from ${FF_PYTHON}")
        else()
          set(_reason "torch ${FF_TORCH_VERSION} imports, but its CMake package under ${_torch_prefix} does not load")
        endif()
      endif()
    endif()
  endif()
endif()
_ff_decide(TORCH "${_found}" "${_reason}")

function(ff_print_summary)
  message(STATUS "")
  message(STATUS "fireflyer ${PROJECT_VERSION} configuration")
  message(STATUS "  build type : ${CMAKE_BUILD_TYPE}")
  message(STATUS "  compiler   : ${CMAKE_CXX_COMPILER_ID} ${CMAKE_CXX_COMPILER_VERSION}")
  message(STATUS "  ccache     : ${FF_CCACHE}")
  message(STATUS "  -Werror    : ${FF_WERROR}")
  if(FF_SANITIZE)
    message(STATUS "  sanitizer  : ${FF_SANITIZE}")
  else()
    message(STATUS "  sanitizer  : none")
  endif()
  foreach(_p CUDA VERBS TORCH)
    if(FF_WITH_${_p}_ON)
      set(_state "on ")
    else()
      set(_state "off")
    endif()
    string(TOLOWER ${_p} _lp)
    string(SUBSTRING "${_lp}       " 0 7 _lp)
    message(STATUS "  ${_lp}    : ${_state} (${FF_WITH_${_p}_WHY})")
  endforeach()
  message(STATUS "")
endfunction()
