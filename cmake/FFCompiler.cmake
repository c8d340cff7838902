# Compiler setup shared by every target: warnings, -Werror under CI, sanitizers, ccache.
#
#   FF_WERROR     treat warnings as errors (default: ON when the CI environment variable is set)
#   FF_SANITIZE   "" (default), "address" (ASan + LeakSan), "thread" (TSan) or "undefined" (UBSan)
#   FF_FUZZ       Clang only: every target instrumented for libFuzzer with ASan and UBSan, and the
#                 fuzz targets built as libFuzzer binaries (tests/fuzz/run.sh)

if(DEFINED ENV{CI} AND NOT "$ENV{CI}" STREQUAL "" AND NOT "$ENV{CI}" STREQUAL "false")
  set(_ff_werror_default ON)
else()
  set(_ff_werror_default OFF)
endif()
option(FF_WERROR "Treat compiler warnings as errors" ${_ff_werror_default})

set(FF_SANITIZE "" CACHE STRING "Sanitizer: address, thread, undefined (empty: none)")
set_property(CACHE FF_SANITIZE PROPERTY STRINGS "" address thread undefined)

if(NOT CMAKE_CXX_COMPILER_ID STREQUAL "GNU" AND NOT CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
  message(FATAL_ERROR "fireflyer builds with GCC (12 or newer) or Clang; found ${CMAKE_CXX_COMPILER_ID}")
endif()

# Warnings apply to our own code only; generated protobuf sources get ff_generated_warnings.
set(FF_WARNINGS -Wall -Wextra -Wpedantic -Wshadow=local -Wnon-virtual-dtor -Wold-style-cast
    -Wcast-align -Woverloaded-virtual -Wimplicit-fallthrough -Wformat=2)
if(FF_WERROR)
  list(APPEND FF_WARNINGS -Werror)
endif()
# GCC's flow analysis sees the sanitizers' instrumentation and reports uninitialized reads that
# are not there (in libstdc++'s <regex> and <functional>, for instance); the uninstrumented build
# keeps the warning, so nothing real goes unreported.
if(NOT FF_SANITIZE STREQUAL "" AND CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
  list(APPEND FF_WARNINGS -Wno-maybe-uninitialized)
endif()

option(FF_FUZZ "Build the libFuzzer targets (Clang)" OFF)
if(FF_FUZZ)
  if(NOT CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
    message(FATAL_ERROR "FF_FUZZ needs Clang (CC=clang CXX=clang++); found ${CMAKE_CXX_COMPILER_ID}")
  endif()
  add_compile_options(-fsanitize=fuzzer-no-link,address,undefined -fno-omit-frame-pointer)
  add_link_options(-fsanitize=address,undefined)
endif()
if(CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
  list(REMOVE_ITEM FF_WARNINGS -Wshadow=local)  # GCC's spelling
  list(APPEND FF_WARNINGS -Wshadow-uncaptured-local)
  # The lock discipline of common/thread_annotations.h, checked: a guarded member touched without
  # its mutex, or a REQUIRES function called without it, does not build (the fuzz tree, built
  # with Clang in every CI run, is where it is enforced).
  list(APPEND FF_WARNINGS -Wthread-safety -Werror=thread-safety)
endif()

if(FF_SANITIZE STREQUAL "address")
  set(_ff_san_flags -fsanitize=address -fno-omit-frame-pointer)
elseif(FF_SANITIZE STREQUAL "thread")
  set(_ff_san_flags -fsanitize=thread)
elseif(FF_SANITIZE STREQUAL "undefined")
  set(_ff_san_flags -fsanitize=undefined -fno-sanitize-recover=undefined)
elseif(NOT FF_SANITIZE STREQUAL "")
  message(FATAL_ERROR "FF_SANITIZE must be address, thread or undefined; got '${FF_SANITIZE}'")
endif()
if(_ff_san_flags)
  add_compile_options(${_ff_san_flags})
  add_link_options(${_ff_san_flags})
endif()

find_program(FF_CCACHE ccache)
if(FF_CCACHE AND NOT CMAKE_CXX_COMPILER_LAUNCHER)
  set(CMAKE_C_COMPILER_LAUNCHER ${FF_CCACHE})
  set(CMAKE_CXX_COMPILER_LAUNCHER ${FF_CCACHE})
  set(CMAKE_CUDA_COMPILER_LAUNCHER ${FF_CCACHE})
endif()

# ff_target_warnings(TARGET): our warning set on TARGET's own sources.
function(ff_target_warnings target)
  target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:${FF_WARNINGS}>)
endfunction()
