#include "common/status.h"

#include <array>
#include <cstring>
#include <ostream>

namespace ff {
namespace {

struct CodeInfo {
  std::string_view name;  // without the leading 'k'
  int err;
};

constexpr std::array kCodes = {
#define FF_STATUS_INFO(name, err, grpc) CodeInfo{std::string_view(#name).substr(1), err},
    FF_STATUS_CODES(FF_STATUS_INFO)
#undef FF_STATUS_INFO
};

const CodeInfo* Info(StatusCode code) {
  auto i = static_cast<std::size_t>(code);
  return i < kCodes.size() ? &kCodes[i] : nullptr;
}

const std::string& EmptyString() {
  static const std::string* empty = new std::string();
  return *empty;
}

}  // namespace

std::string_view StatusCodeName(StatusCode code) {
  const CodeInfo* info = Info(code);
  return info ? info->name : std::string_view("InvalidStatusCode");
}

bool StatusCodeFromName(std::string_view name, StatusCode* code) {
  for (std::size_t i = 0; i < kCodes.size(); ++i) {
    if (kCodes[i].name == name) {
      *code = static_cast<StatusCode>(i);
      return true;
    }
  }
  return false;
}

int StatusCodeToErrno(StatusCode code) {
  const CodeInfo* info = Info(code);
  return info ? info->err : EIO;
}

StatusCode StatusCodeFromErrno(int err) {
  if (err == 0) return StatusCode::kOk;
  if (err == EWOULDBLOCK) err = EAGAIN;
  if (err == ENOTSUP) err = EOPNOTSUPP;
  for (std::size_t i = 1; i < kCodes.size(); ++i) {
    if (kCodes[i].err == err) return static_cast<StatusCode>(i);
  }
  return StatusCode::kIoError;
}

Status::Status(StatusCode code, std::string message) {
  if (code != StatusCode::kOk) {
    rep_ = std::make_shared<const Rep>(Rep{code, std::move(message), {}, {}});
  }
}

Status Status::WithReason(std::string reason, Details details) const {
  if (ok()) return *this;
  Status s;
  s.rep_ = std::make_shared<const Rep>(
      Rep{rep_->code, rep_->message, std::move(reason), std::move(details)});
  return s;
}

const std::string& Status::reason() const {
  return rep_ ? rep_->reason : EmptyString();
}

const Status::Details& Status::details() const {
  static const Details kNone;
  return rep_ ? rep_->details : kNone;
}

std::string Status::detail(std::string_view key) const {
  for (const auto& [k, v] : details()) {
    if (k == key) return v;
  }
  return "";
}

Status Status::FromErrno(int err, std::string_view context) {
  if (err == 0) return Status();
  std::string message(context);
  message += ": ";
  message += std::strerror(err);
  return Status(StatusCodeFromErrno(err), std::move(message));
}

const std::string& Status::message() const {
  return rep_ ? rep_->message : EmptyString();
}

std::string Status::ToString() const {
  if (ok()) return "OK";
  std::string s(StatusCodeName(code()));
  s += ": ";
  s += rep_->message;
  return s;
}

Status Status::WithContext(std::string_view context) const {
  if (ok()) return *this;
  std::string message(context);
  message += ": ";
  message += rep_->message;
  return Status(code(), std::move(message)).WithReason(rep_->reason, rep_->details);
}

std::ostream& operator<<(std::ostream& os, const Status& status) {
  return os << status.ToString();
}

}  // namespace ff
