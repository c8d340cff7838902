#include "common/rpc_status.h"

#include <spdlog/spdlog.h>

#include <array>
#include <exception>
#include <vector>

namespace ff {
namespace {

constexpr std::string_view kDetailsPrefix = "ff-status:";
constexpr char kRecordSeparator = '\x1e';
constexpr char kUnitSeparator = '\x1f';

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

// The error details: "ff-status:<CodeName>", then, when the status has a reason, RS <reason> and
// US <key>=<value> for each of its details (ASCII's record and unit separators, which no reason,
// key or value of ours contains; a pair that does is left out).
grpc::Status ToGrpcStatus(const Status& status) {
  if (status.ok()) return grpc::Status::OK;
  std::string details(kDetailsPrefix);
  details += StatusCodeName(status.code());
  auto clean = [](const std::string& s) {
    return s.find_first_of("\x1e\x1f") == std::string::npos;
  };
  if (!status.reason().empty() && clean(status.reason())) {
    details += kRecordSeparator;
    details += status.reason();
    for (const auto& [key, value] : status.details()) {
      if (!clean(key) || !clean(value) || key.find('=') != std::string::npos) continue;
      details += kUnitSeparator;
      details += key + "=" + value;
    }
  }
  return grpc::Status(ToGrpcCode(status.code()), status.message(), details);
}

Status FromGrpcStatus(const grpc::Status& status) {
  if (status.ok()) return Status::Ok();
  const std::string all_details = status.error_details();  // (a copy: gRPC returns it by value)
  std::string_view details = all_details;
  StatusCode code;
  if (details.rfind(kDetailsPrefix, 0) == 0) {
    details.remove_prefix(kDetailsPrefix.size());
    const std::size_t rs = details.find(kRecordSeparator);
    if (StatusCodeFromName(details.substr(0, rs), &code) && code != StatusCode::kOk) {
      Status result(code, status.error_message());
      if (rs == std::string_view::npos) return result;
      // reason US key=value US key=value ...
      const std::string_view rest = details.substr(rs + 1);
      std::vector<std::string_view> parts;
      for (std::size_t at = 0;;) {
        const std::size_t next = rest.find(kUnitSeparator, at);
        parts.push_back(rest.substr(at, next == std::string_view::npos ? next : next - at));
        if (next == std::string_view::npos) break;
        at = next + 1;
      }
      Status::Details pairs;
      for (std::size_t i = 1; i < parts.size(); ++i) {
        const std::size_t eq = parts[i].find('=');
        if (eq == std::string_view::npos) continue;
        pairs.emplace_back(std::string(parts[i].substr(0, eq)),
                           std::string(parts[i].substr(eq + 1)));
      }
      return result.WithReason(std::string(parts[0]), std::move(pairs));
    }
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
