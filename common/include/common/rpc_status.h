// Conversion between ff::Status and grpc::Status.
//
// ToGrpcStatus maps the code to its gRPC code (status.h's table) and carries the exact ff code in
// the error details, so FromGrpcStatus on the other side restores it (kNotEmpty stays kNotEmpty,
// not FAILED_PRECONDITION). A status from a peer that is not ours maps each gRPC code to the ff
// code of the same name (UNAVAILABLE -> kUnavailable).
#pragma once

#include <grpcpp/support/status.h>

#include <functional>
#include <string_view>

#include "common/status.h"

namespace ff {

grpc::Status ToGrpcStatus(const Status& status);
Status FromGrpcStatus(const grpc::Status& status);
grpc::StatusCode ToGrpcCode(StatusCode code);
// True when `status` was produced by one of our handlers (ServeRpc / ToGrpcStatus), as opposed to
// the transport (connection failures, client-side deadlines).
bool IsHandlerStatus(const grpc::Status& status);
StatusCode FromGrpcCode(grpc::StatusCode code);

// Runs an RPC handler body, turning its Status into a grpc::Status and any exception that escapes
// it into INTERNAL, so a handler bug answers an error instead of taking the daemon down. Use in
// every service method:
//   grpc::Status Echo(grpc::ServerContext*, const Req* req, Resp* resp) override {
//     return ServeRpc("Echo", [&] { return echo_.Handle(*req, resp); });
//   }
grpc::Status ServeRpc(std::string_view method, const std::function<Status()>& body);

}  // namespace ff
