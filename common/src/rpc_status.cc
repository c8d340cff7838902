#include "common/rpc_status.h"

#include <spdlog/spdlog.h>

#include <array>
#include <exception>

namespace ff {
namespace {

constexpr std::string_view kDetailsPrefix = "ff-status:";

constexpr std::array kGrpcCodes = {
#define FF_STATUS_GRPC(name, err, g) grpc::StatusCode::g,
    FF_STATUS_CODES(FF_STATUS_GRPC)
#undef FF_STATUS_GRPC
};

// The ff code whose name matches each gRPC code: the row "kFooBar" whose gRPC column is FOO_BAR.
constexpr std::array kCanonical = {
#define FF_STATUS_CANONICAL(name, err, g) std::pair{std::string_view(#name), std::string_view(#g)},
    FF_STATUS_CODES(FF_STATUS_CANONICAL)
#undef FF_STATUS_CANONICAL
};

bool SameName(std::string_view ff_name, std::string_view grpc_name) {
  // "kDeadlineExceeded" vs "DEADLINE_EXCEEDED"
  std::string upper;
  for (std::size_t i = 1; i < ff_name.size(); ++i) {
    char c = ff_name[i];
    if (c >= 'A' && c <= 'Z' && i > 1) upper += '_';
    upper += static_cast<char>(c >= 'a' && c <= 'z' ? c - 'a' + 'A' : c);
  }
  return upper == grpc_name;
}

}  // namespace

grpc::StatusCode ToGrpcCode(StatusCode code) {
  auto i = static_cast<std::size_t>(code);
  return i < kGrpcCodes.size() ? kGrpcCodes[i] : grpc::StatusCode::UNKNOWN;
}

StatusCode FromGrpcCode(grpc::StatusCode code) {
  for (std::size_t i = 0; i < kCanonical.size(); ++i) {
    if (kGrpcCodes[i] == code && SameName(kCanonical[i].first, kCanonical[i].second)) {
      return static_cast<StatusCode>(i);
    }
  }
  return StatusCode::kUnknown;
}

bool IsHandlerStatus(const grpc::Status& status) {
  return status.error_details().rfind(kDetailsPrefix, 0) == 0;
}

grpc::Status ToGrpcStatus(const Status& status) {
  if (status.ok()) return grpc::Status::OK;
  std::string details(kDetailsPrefix);
  details += StatusCodeName(status.code());
  return grpc::Status(ToGrpcCode(status.code()), status.message(), details);
}

Status FromGrpcStatus(const grpc::Status& status) {
  if (status.ok()) return Status::Ok();
  const std::string& details = status.error_details();
  StatusCode code;
  if (details.rfind(kDetailsPrefix, 0) == 0 &&
      StatusCodeFromName(std::string_view(details).substr(kDetailsPrefix.size()), &code) &&
      code != StatusCode::kOk) {
    return Status(code, status.error_message());
  }
  return Status(FromGrpcCode(status.error_code()), status.error_message());
}

grpc::Status ServeRpc(std::string_view method, const std::function<Status()>& body) {
  Status status;
  try {
    status = body();
  } catch (const std::exception& e) {
    spdlog::error("rpc {}: handler threw: {}", method, e.what());
    status = Internal(std::string(method) + ": internal error: " + e.what());
  } catch (...) {
    spdlog::error("rpc {}: handler threw a non-standard exception", method);
    status = Internal(std::string(method) + ": internal error");
  }
  if (!status.ok()) spdlog::debug("rpc {}: {}", method, status.ToString());
  return ToGrpcStatus(status);
}

}  // namespace ff
