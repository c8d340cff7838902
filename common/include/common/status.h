// Status: the outcome of every fallible call in the project.
//
// A Status is either OK or carries an error code and a message that names the thing and the cause
// ("fs3-meta: rename /a -> /b/c: destination's parent does not exist"). The codes are one table
// (FF_STATUS_CODES below) from which every mapping is derived:
//   - each code has one errno, so FUSE and POSIX-facing code can answer precisely;
//   - each code has one gRPC code; a Status sent over gRPC by ToGrpcStatus and read back by
//     FromGrpcStatus keeps its exact code (carried in the gRPC error details), and a gRPC status
//     from a foreign peer maps to the nearest code;
//   - StatusCodeFromErrno maps an errno back to the first code in the table with that errno
//     (unknown errnos: kIoError), so specific rows come before generic ones sharing an errno.
//
// Beside the message people read, an error may carry a reason that callers decide by (as
// google.rpc.ErrorInfo's reason and metadata), which travels over gRPC with the code: decide by
// code() and reason(), never by the message's text (.ci/check-error-text names the exceptions).
//
// Status is a value type; copies are cheap when OK. Thread-compatible.
#pragma once

#include <cerrno>
#include <iosfwd>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace ff {

// X(name, errno, grpc code name). The first row is OK. Codes travel over the wire by name, so a
// name never changes meaning; rows may be reordered (errno preference) or added.
#define FF_STATUS_CODES(X)                           \
  X(kOk, 0, OK)                                      \
  X(kCancelled, ECANCELED, CANCELLED)                \
  X(kIoError, EIO, INTERNAL)                         \
  X(kUnknown, EIO, UNKNOWN)                          \
  X(kNotPermitted, EPERM, PERMISSION_DENIED)         \
  X(kInvalidArgument, EINVAL, INVALID_ARGUMENT)      \
  X(kDeadlineExceeded, ETIMEDOUT, DEADLINE_EXCEEDED) \
  X(kNotFound, ENOENT, NOT_FOUND)                    \
  X(kAlreadyExists, EEXIST, ALREADY_EXISTS)          \
  X(kPermissionDenied, EACCES, PERMISSION_DENIED)    \
  X(kResourceExhausted, ENOSPC, RESOURCE_EXHAUSTED)  \
  X(kFailedPrecondition, EPERM, FAILED_PRECONDITION) \
  X(kAborted, EAGAIN, ABORTED)                       \
  X(kOutOfRange, ERANGE, OUT_OF_RANGE)               \
  X(kUnimplemented, ENOSYS, UNIMPLEMENTED)           \
  X(kInternal, EPROTO, INTERNAL)                     \
  X(kUnavailable, EHOSTUNREACH, UNAVAILABLE)         \
  X(kDataLoss, EBADMSG, DATA_LOSS)                   \
  X(kUnauthenticated, EKEYREJECTED, UNAUTHENTICATED) \
  X(kNotADirectory, ENOTDIR, FAILED_PRECONDITION)    \
  X(kIsADirectory, EISDIR, FAILED_PRECONDITION)      \
  X(kNotEmpty, ENOTEMPTY, FAILED_PRECONDITION)       \
  X(kNameTooLong, ENAMETOOLONG, INVALID_ARGUMENT)    \
  X(kBusy, EBUSY, UNAVAILABLE)                       \
  X(kCrossDevice, EXDEV, FAILED_PRECONDITION)        \
  X(kTooManyLinks, EMLINK, RESOURCE_EXHAUSTED)       \
  X(kSymlinkLoop, ELOOP, FAILED_PRECONDITION)        \
  X(kNoAttribute, ENODATA, NOT_FOUND)                \
  X(kFileTooLarge, EFBIG, OUT_OF_RANGE)              \
  X(kReadOnly, EROFS, FAILED_PRECONDITION)           \
  X(kBadHandle, EBADF, INVALID_ARGUMENT)             \
  X(kNotSupported, EOPNOTSUPP, UNIMPLEMENTED)        \
  X(kStaleVersion, ESTALE, FAILED_PRECONDITION)      \
  X(kConnectionRefused, ECONNREFUSED, UNAVAILABLE)   \
  X(kConnectionReset, ECONNRESET, UNAVAILABLE)

enum class StatusCode : int {
#define FF_STATUS_ENUM(name, err, grpc) name,
  FF_STATUS_CODES(FF_STATUS_ENUM)
#undef FF_STATUS_ENUM
};

// "kNotFound" -> "NotFound": the name used in messages and on the wire.
std::string_view StatusCodeName(StatusCode code);
// Inverse of StatusCodeName; false when `name` is not a code.
bool StatusCodeFromName(std::string_view name, StatusCode* code);
// The errno a POSIX caller should see for `code` (0 for kOk).
int StatusCodeToErrno(StatusCode code);
// The code for an errno value (e.g. from a failed syscall). Unknown values give kIoError.
StatusCode StatusCodeFromErrno(int err);

class [[nodiscard]] Status {
 public:
  Status() = default;  // OK
  Status(StatusCode code, std::string message);

  static Status Ok() { return Status(); }
  // Builds a Status from `err` (an errno value) with `context` naming what failed;
  // the message becomes "<context>: <strerror(err)>".
  static Status FromErrno(int err, std::string_view context);

  bool ok() const { return rep_ == nullptr; }
  StatusCode code() const { return rep_ ? rep_->code : StatusCode::kOk; }
  // The message without the code name; empty when OK.
  const std::string& message() const;
  int ToErrno() const { return StatusCodeToErrno(code()); }

  // "OK" or "<CodeName>: <message>".
  std::string ToString() const;

  // Returns a copy whose message is "<context>: <message>"; OK stays OK.
  Status WithContext(std::string_view context) const;

  bool Is(StatusCode c) const { return code() == c; }

  // A copy that carries `reason` ("NOT_LEADER", upper case) and its details ({"leader",
  // "10.0.0.2:7000"}); OK stays OK.
  using Details = std::vector<std::pair<std::string, std::string>>;
  Status WithReason(std::string reason, Details details = {}) const;
  const std::string& reason() const;  // "" when none
  const Details& details() const;
  std::string detail(std::string_view key) const;  // "" when absent
  bool HasReason(std::string_view r) const { return !ok() && reason() == r; }

  friend bool operator==(const Status& a, const Status& b) {
    return a.code() == b.code() && a.message() == b.message();
  }

 private:
  struct Rep {
    StatusCode code;
    std::string message;
    std::string reason;
    Details details;
  };
  std::shared_ptr<const Rep> rep_;
};

std::ostream& operator<<(std::ostream& os, const Status& status);

// Shorthands for the common codes.
inline Status InvalidArgument(std::string m) {
  return Status(StatusCode::kInvalidArgument, std::move(m));
}
inline Status NotFound(std::string m) {
  return Status(StatusCode::kNotFound, std::move(m));
}
inline Status AlreadyExists(std::string m) {
  return Status(StatusCode::kAlreadyExists, std::move(m));
}
inline Status FailedPrecondition(std::string m) {
  return Status(StatusCode::kFailedPrecondition, std::move(m));
}
inline Status Unavailable(std::string m) {
  return Status(StatusCode::kUnavailable, std::move(m));
}
inline Status DataLoss(std::string m) {
  return Status(StatusCode::kDataLoss, std::move(m));
}
inline Status Internal(std::string m) {
  return Status(StatusCode::kInternal, std::move(m));
}
inline Status IoError(std::string m) {
  return Status(StatusCode::kIoError, std::move(m));
}
inline Status ResourceExhausted(std::string m) {
  return Status(StatusCode::kResourceExhausted, std::move(m));
}
inline Status DeadlineExceeded(std::string m) {
  return Status(StatusCode::kDeadlineExceeded, std::move(m));
}
inline Status PermissionDenied(std::string m) {
  return Status(StatusCode::kPermissionDenied, std::move(m));
}

}  // namespace ff

// Returns from the enclosing function when `expr` (a Status) is not OK.
#define FF_RETURN_IF_ERROR(expr)                     \
  do {                                               \
    ::ff::Status ff_status_tmp_ = (expr);            \
    if (!ff_status_tmp_.ok()) return ff_status_tmp_; \
  } while (0)
