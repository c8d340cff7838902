# Required dependencies, all from Debian packages (deploy/install-deps.sh installs them).
# Each failure names the package to install.

find_package(Threads REQUIRED)

macro(ff_require_package name package)
  find_package(${name} ${ARGN} QUIET)
  if(NOT ${name}_FOUND)
    message(FATAL_ERROR "fireflyer: ${name} not found: install the Debian package '${package}' "
                        "(deploy/install-deps.sh installs every dependency)")
  endif()
endmacro()

ff_require_package(Protobuf libprotobuf-dev)
ff_require_package(gRPC libgrpc++-dev CONFIG)
ff_require_package(RocksDB librocksdb-dev CONFIG)
ff_require_package(OpenSSL libssl-dev)
ff_require_package(prometheus-cpp prometheus-cpp-dev CONFIG)
ff_require_package(tomlplusplus libtomlplusplus-dev CONFIG)
ff_require_package(spdlog libspdlog-dev CONFIG)
ff_require_package(fmt libfmt-dev CONFIG)
ff_require_package(CLI11 libcli11-dev CONFIG)
ff_require_package(nlohmann_json nlohmann-json3-dev CONFIG)
ff_require_package(GTest libgtest-dev CONFIG)
ff_require_package(benchmark libbenchmark-dev CONFIG)

find_package(PkgConfig QUIET)
if(PkgConfig_FOUND)
  pkg_check_modules(FUSE3 QUIET IMPORTED_TARGET fuse3)
endif()
if(NOT FUSE3_FOUND)
  message(FATAL_ERROR "fireflyer: fuse3 not found: install the Debian packages 'libfuse3-dev' "
                      "and 'pkg-config'")
endif()

find_program(FF_PROTOC protoc)
find_program(FF_GRPC_CPP_PLUGIN grpc_cpp_plugin)
if(NOT FF_PROTOC OR NOT FF_GRPC_CPP_PLUGIN)
  message(FATAL_ERROR "fireflyer: protoc / grpc_cpp_plugin not found: install the Debian packages "
                      "'protobuf-compiler' and 'protobuf-compiler-grpc'")
endif()
