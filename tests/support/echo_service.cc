#include "tests/support/echo_service.h"

#include <chrono>
#include <thread>

#include "common/rpc_status.h"

namespace ff::test {

grpc::Status EchoService::Say(grpc::ServerContext*, const SayRequest* request, SayReply* reply) {
  return ServeRpc("Say", [&]() -> Status {
    int calls;
    {
      std::lock_guard lock(mu_);
      calls = ++calls_by_key_[request->key()];
      ++calls_;
    }
    reply->set_calls(calls);
    if (calls <= request->fail_times()) {
      StatusCode code;
      if (!StatusCodeFromName(request->fail_code(), &code) || code == StatusCode::kOk) {
        return InvalidArgument("unknown fail_code '" + request->fail_code() + "'");
      }
      return Status(code, "injected failure " + std::to_string(calls));
    }
    if (request->delay_ms() > 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(request->delay_ms()));
    }
    if (request->text() == "throw") throw std::runtime_error("asked to throw");
    reply->set_text(prefix_ + request->text());
    return Status::Ok();
  });
}

int EchoService::calls() const {
  std::lock_guard lock(mu_);
  return calls_;
}

}  // namespace ff::test
