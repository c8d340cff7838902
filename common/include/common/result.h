// Result<T>: a value of type T, or the Status saying why there is none.
//
// Usage:
//   Result<Config> LoadConfig(const std::string& path);
//   FF_ASSIGN_OR_RETURN(Config cfg, LoadConfig(path));
//
// A Result built from an OK Status is a programming error: it becomes kInternal so the mistake
// surfaces as an error instead of a value-less success. value() on an error aborts with the
// status; check ok() first. Thread-compatible.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <optional>
#include <type_traits>
#include <utility>

#include "common/status.h"

namespace ff {

template <typename T>
class [[nodiscard]] Result {
 public:
  Result(const T& value) : value_(value) {}             // NOLINT(google-explicit-constructor)
  Result(T&& value) : value_(std::move(value)) {}       // NOLINT(google-explicit-constructor)
  Result(Status status) : status_(std::move(status)) {  // NOLINT(google-explicit-constructor)
    if (status_.ok()) status_ = Status(StatusCode::kInternal, "Result built from an OK Status");
  }
  template <typename U, typename = std::enable_if_t<std::is_constructible_v<T, U&&> &&
                                                    !std::is_same_v<std::decay_t<U>, Status> &&
                                                    !std::is_same_v<std::decay_t<U>, Result>>>
  Result(U&& value) : value_(std::forward<U>(value)) {}  // NOLINT(google-explicit-constructor)

  bool ok() const { return value_.has_value(); }
  const Status& status() const { return status_; }

  T& value() & {
    CheckOk();
    return *value_;
  }
  const T& value() const& {
    CheckOk();
    return *value_;
  }
  T&& value() && {
    CheckOk();
    return std::move(*value_);
  }
  T value_or(T fallback) const& { return ok() ? *value_ : std::move(fallback); }

  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T&& operator*() && { return std::move(*this).value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

 private:
  void CheckOk() const {
    if (!ok()) {
      std::fprintf(stderr, "fatal: Result::value() on error: %s\n", status_.ToString().c_str());
      std::abort();
    }
  }

  Status status_;
  std::optional<T> value_;
};

}  // namespace ff

#define FF_RESULT_CONCAT_INNER(a, b) a##b
#define FF_RESULT_CONCAT(a, b) FF_RESULT_CONCAT_INNER(a, b)

// FF_ASSIGN_OR_RETURN(lhs, expr): evaluates `expr` (a Result<T>); on error returns its Status from
// the enclosing function, else assigns the value to `lhs` (which may be a declaration).
#define FF_ASSIGN_OR_RETURN(lhs, expr)                      \
  auto FF_RESULT_CONCAT(ff_result_, __LINE__) = (expr);     \
  if (!FF_RESULT_CONCAT(ff_result_, __LINE__).ok())         \
    return FF_RESULT_CONCAT(ff_result_, __LINE__).status(); \
  lhs = std::move(FF_RESULT_CONCAT(ff_result_, __LINE__)).value()
