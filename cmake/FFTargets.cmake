# Helpers every part uses to declare its targets.

set(FF_PROTO_OUT "${CMAKE_BINARY_DIR}/proto_gen")
file(MAKE_DIRECTORY "${FF_PROTO_OUT}")

# ff_add_proto_library(NAME PROTOS a.proto ... [DEPS other_proto_lib ...])
#
# Generates protobuf and gRPC C++ code for PROTOS (paths relative to the current source dir) into
# the build tree and builds them as static library NAME. Protos import each other by their path
# from the repository root ("fs3/proto/common.proto"); generated headers are included the same way
# ("fs3/proto/common.pb.h"). Generated code is compiled without our warning flags.
function(ff_add_proto_library name)
  cmake_parse_arguments(ARG "" "" "PROTOS;DEPS" ${ARGN})
  set(_srcs)
  foreach(_proto ${ARG_PROTOS})
    get_filename_component(_abs "${_proto}" ABSOLUTE)
    file(RELATIVE_PATH _rel "${CMAKE_SOURCE_DIR}" "${_abs}")
    string(REGEX REPLACE "\\.proto$" "" _stem "${_rel}")
    set(_out
      "${FF_PROTO_OUT}/${_stem}.pb.cc" "${FF_PROTO_OUT}/${_stem}.pb.h"
      "${FF_PROTO_OUT}/${_stem}.grpc.pb.cc" "${FF_PROTO_OUT}/${_stem}.grpc.pb.h")
    add_custom_command(
      OUTPUT ${_out}
      COMMAND ${FF_PROTOC}
        --proto_path=${CMAKE_SOURCE_DIR}
        --cpp_out=${FF_PROTO_OUT}
        --grpc_out=${FF_PROTO_OUT}
        --plugin=protoc-gen-grpc=${FF_GRPC_CPP_PLUGIN}
        ${_rel}
      WORKING_DIRECTORY ${CMAKE_SOURCE_DIR}
      DEPENDS "${_abs}" ${FF_PROTOC} ${FF_GRPC_CPP_PLUGIN}
      COMMENT "protoc ${_rel}"
      VERBATIM)
    list(APPEND _srcs "${FF_PROTO_OUT}/${_stem}.pb.cc" "${FF_PROTO_OUT}/${_stem}.grpc.pb.cc")
  endforeach()
  add_library(${name} STATIC ${_srcs})
  target_include_directories(${name} SYSTEM PUBLIC "${FF_PROTO_OUT}")
  target_link_libraries(${name} PUBLIC gRPC::grpc++ protobuf::libprotobuf ${ARG_DEPS})
endfunction()

# ff_add_library(NAME SOURCES ... [PUBLIC_LIBS ...] [PRIVATE_LIBS ...])
#
# A part's library: public headers in <part>/include, our warnings on.
function(ff_add_library name)
  cmake_parse_arguments(ARG "" "" "SOURCES;PUBLIC_LIBS;PRIVATE_LIBS" ${ARGN})
  add_library(${name} STATIC ${ARG_SOURCES})
  target_include_directories(${name} PUBLIC "${CMAKE_CURRENT_SOURCE_DIR}/include")
  target_link_libraries(${name} PUBLIC ff::config ${ARG_PUBLIC_LIBS} PRIVATE ${ARG_PRIVATE_LIBS})
  ff_target_warnings(${name})
endfunction()

# ff_add_executable(NAME SOURCES ... [LIBS ...])
function(ff_add_executable name)
  cmake_parse_arguments(ARG "" "" "SOURCES;LIBS" ${ARGN})
  add_executable(${name} ${ARG_SOURCES})
  target_link_libraries(${name} PRIVATE ff::config ${ARG_LIBS})
  ff_target_warnings(${name})
endfunction()

# ff_add_test(NAME SOURCES ... [LIBS ...] [LABELS unit|integration ...] [TIMEOUT seconds])
#
# A GoogleTest executable registered with CTest as one test per executable (the executable runs
# all its cases; failures name the case). Labels select suites: "unit" tests are pure and fast
# and are also run under sanitizers; "integration" tests start real processes.
# Every unit test executable is added to the aggregate target `unit-tests`.
add_custom_target(unit-tests)
function(ff_add_test name)
  cmake_parse_arguments(ARG "" "TIMEOUT" "SOURCES;LIBS;LABELS" ${ARGN})
  add_executable(${name} ${ARG_SOURCES})
  target_link_libraries(${name} PRIVATE ff::config ${ARG_LIBS} GTest::gtest GTest::gmock
                                        GTest::gtest_main)
  ff_target_warnings(${name})
  if(NOT ARG_LABELS)
    set(ARG_LABELS unit)
  endif()
  if(NOT ARG_TIMEOUT)
    set(ARG_TIMEOUT 300)
  endif()
  add_test(NAME ${name} COMMAND ${name} --gtest_color=no)
  set(_env "FF_BUILD_DIR=${CMAKE_BINARY_DIR};FF_SOURCE_DIR=${CMAKE_SOURCE_DIR}")
  if(FF_SANITIZE STREQUAL "thread")
    # Races inside Debian's uninstrumented gRPC/abseil are not ours (tests/tsan.supp says why).
    list(APPEND _env "TSAN_OPTIONS=suppressions=${CMAKE_SOURCE_DIR}/tests/tsan.supp halt_on_error=0")
  endif()
  set_tests_properties(${name} PROPERTIES LABELS "${ARG_LABELS}" TIMEOUT ${ARG_TIMEOUT}
    ENVIRONMENT "${_env}")
  if("unit" IN_LIST ARG_LABELS)
    add_dependencies(unit-tests ${name})
  endif()
endfunction()
