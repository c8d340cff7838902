// The Echo test service (tests/proto/echo.proto): replies "<prefix><text>", with fault injection.
#pragma once

#include <map>
#include <mutex>
#include <string>

#include "tests/proto/echo.grpc.pb.h"

namespace ff::test {

class EchoService final : public Echo::Service {
 public:
  explicit EchoService(std::string prefix = "") : prefix_(std::move(prefix)) {}

  grpc::Status Say(grpc::ServerContext* context, const SayRequest* request,
                   SayReply* reply) override;

  // Total calls served.
  int calls() const;

 private:
  std::string prefix_;
  mutable std::mutex mu_;
  std::map<std::string, int> calls_by_key_;
  int calls_ = 0;
};

}  // namespace ff::test
