# Configures the source tree in scratch build directories to check the AUTO/ON/OFF logic of
# FF_WITH_CUDA and FF_WITH_VERBS (cmake/FFOptionalPaths.cmake). Run by CTest as
#   cmake -DFF_SOURCE_DIR=... -DSCRATCH=... -P optional_paths_test.cmake

function(configure_tree name expect_success out_var)
  set(dir "${SCRATCH}/${name}")
  file(REMOVE_RECURSE "${dir}")
  execute_process(
    # FF_PYTHON_PTH=OFF: a scratch tree must not point the project's venv at itself.
    COMMAND ${CMAKE_COMMAND} -G Ninja -S "${FF_SOURCE_DIR}" -B "${dir}" -DFF_PYTHON_PTH=OFF ${ARGN}
    RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  file(REMOVE_RECURSE "${dir}")
  if(expect_success AND NOT rc EQUAL 0)
    message(FATAL_ERROR "${name}: configure failed:\n${out}\n${err}")
  elseif(NOT expect_success AND rc EQUAL 0)
    message(FATAL_ERROR "${name}: configure succeeded but should have failed:\n${out}")
  endif()
  set(${out_var} "${out}\n${err}" PARENT_SCOPE)
endfunction()

function(expect_match name text regex)
  if(NOT text MATCHES "${regex}")
    message(FATAL_ERROR "${name}: output does not match '${regex}':\n${text}")
  endif()
  message(STATUS "${name}: ok (${regex})")
endfunction()

# Toolkit and verbs absent: AUTO turns both off and configuring succeeds.
configure_tree(auto_absent TRUE out
  -DFF_CUDA_ROOT=/nonexistent/cuda -DFF_VERBS_ROOT=/nonexistent/verbs)
expect_match(auto_absent "${out}" "cuda +: off \\(no CUDA toolkit at /nonexistent/cuda")
expect_match(auto_absent "${out}" "verbs +: off \\(no libibverbs headers/library under /nonexistent/verbs")

# ON with the dependency absent: a clear configure error.
configure_tree(cuda_on_absent FALSE out -DFF_WITH_CUDA=ON -DFF_CUDA_ROOT=/nonexistent/cuda)
expect_match(cuda_on_absent "${out}" "FF_WITH_CUDA=ON but no CUDA toolkit at /nonexistent/cuda")
configure_tree(verbs_on_absent FALSE out -DFF_WITH_VERBS=ON -DFF_VERBS_ROOT=/nonexistent/verbs)
expect_match(verbs_on_absent "${out}" "FF_WITH_VERBS=ON but no libibverbs")

# OFF wins even where the dependency exists.
configure_tree(off TRUE out -DFF_WITH_CUDA=OFF -DFF_WITH_VERBS=OFF -DFF_WITH_TORCH=OFF)
expect_match(off "${out}" "cuda +: off \\(disabled by FF_WITH_CUDA=OFF\\)")
expect_match(off "${out}" "verbs +: off \\(disabled by FF_WITH_VERBS=OFF\\)")

# Bad values are rejected.
configure_tree(bad_value FALSE out -DFF_WITH_CUDA=maybe)
expect_match(bad_value "${out}" "FF_WITH_CUDA must be AUTO, ON or OFF; got 'maybe'")
configure_tree(bad_sanitizer FALSE out -DFF_SANITIZE=memory)
expect_match(bad_sanitizer "${out}" "FF_SANITIZE must be address, thread or undefined")

# Where the toolkit and libibverbs are installed, ON configures.
if(EXISTS /usr/local/cuda/include/cuda_runtime.h AND EXISTS /usr/include/infiniband/verbs.h)
  configure_tree(on_present TRUE out -DFF_WITH_CUDA=ON -DFF_WITH_VERBS=ON
    -DFF_CUDA_ROOT=/usr/local/cuda)
  expect_match(on_present "${out}" "cuda +: on  \\(CUDA toolkit [0-9.]+ found at /usr/local/cuda\\)")
  expect_match(on_present "${out}" "verbs +: on  \\(libibverbs found at ")
else()
  message(STATUS "on_present: CUDA toolkit or libibverbs-dev not installed here; ON case not run")
endif()
