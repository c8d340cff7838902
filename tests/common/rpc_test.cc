// The gRPC helpers against a real server on loopback.
#include <gmock/gmock.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include "common/net.h"
#include "common/replicas.h"
#include "common/rpc_client.h"
#include "common/rpc_server.h"
#include "common/rpc_status.h"
#include "tests/support/echo_service.h"

namespace ff {
namespace {

using test::Echo;
using test::SayReply;
using test::SayRequest;
using ::testing::HasSubstr;

class RpcTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto server = RpcServer::Start(RpcServerOptions{}, {&service_});
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
    stub_ = Echo::NewStub(MakeChannel(server_->address()));
  }

  Status Say(const SayRequest& request, const CallOptions& options, SayReply* reply) {
    return CallRpc("Echo.Say", options, [&](grpc::ClientContext* context) {
      return stub_->Say(context, request, reply);
    });
  }

  test::EchoService service_{"echo: "};
  std::unique_ptr<RpcServer> server_;
  std::unique_ptr<Echo::Stub> stub_;
};

TEST_F(RpcTest, PortZeroPicksAFreePortAndReportsIt) {
  EXPECT_GT(server_->port(), 0);
  EXPECT_EQ(server_->address(), "127.0.0.1:" + std::to_string(server_->port()));
  SayRequest request;
  request.set_text("hi");
  SayReply reply;
  // Idempotent: on a loaded machine (sanitizers) the first connection may need a retry.
  Status st = Say(request, CallOptions::Idempotent(), &reply);
  ASSERT_TRUE(st.ok()) << st;
  EXPECT_EQ(reply.text(), "echo: hi");
}

TEST_F(RpcTest, SecondServerOnTheSamePortFailsClearly) {
  RpcServerOptions options;
  options.listen = server_->address();
  test::EchoService other;
  auto second = RpcServer::Start(options, {&other});
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), StatusCode::kUnavailable);
  EXPECT_THAT(second.status().message(), HasSubstr("cannot listen on " + server_->address()));
}

TEST_F(RpcTest, MalformedListenAddressIsInvalidArgument) {
  RpcServerOptions options;
  options.listen = "127.0.0.1:notaport";
  test::EchoService other;
  auto r = RpcServer::Start(options, {&other});
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
}

TEST_F(RpcTest, ExactStatusCodeSurvivesTheWire) {
  // Every code, including those sharing a gRPC code (NotEmpty and NotADirectory are both
  // FAILED_PRECONDITION on the wire), arrives as itself.
  for (const char* name : {"NotEmpty", "NotADirectory", "NotFound", "PermissionDenied",
                           "StaleVersion", "NameTooLong", "Busy"}) {
    SayRequest request;
    request.set_key(name);
    request.set_fail_times(1);
    request.set_fail_code(name);
    SayReply reply;
    Status st = Say(request, CallOptions{}, &reply);
    StatusCode expected;
    ASSERT_TRUE(StatusCodeFromName(name, &expected));
    EXPECT_EQ(st.code(), expected) << name;
    EXPECT_EQ(st.message(), "Echo.Say: injected failure 1");
  }
}

TEST_F(RpcTest, ForeignGrpcStatusesMapByName) {
  EXPECT_EQ(FromGrpcStatus(grpc::Status(grpc::StatusCode::UNAVAILABLE, "x")).code(),
            StatusCode::kUnavailable);
  EXPECT_EQ(FromGrpcStatus(grpc::Status(grpc::StatusCode::INTERNAL, "x")).code(),
            StatusCode::kInternal);
  EXPECT_EQ(FromGrpcStatus(grpc::Status(grpc::StatusCode::PERMISSION_DENIED, "x")).code(),
            StatusCode::kPermissionDenied);
  EXPECT_EQ(FromGrpcStatus(grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, "x")).code(),
            StatusCode::kFailedPrecondition);
  EXPECT_EQ(FromGrpcStatus(grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED, "x")).code(),
            StatusCode::kDeadlineExceeded);
  // Garbage details fall back to the gRPC code.
  EXPECT_EQ(
      FromGrpcStatus(grpc::Status(grpc::StatusCode::NOT_FOUND, "x", "ff-status:Bogus")).code(),
      StatusCode::kNotFound);
  EXPECT_EQ(ToGrpcStatus(Status(StatusCode::kNotEmpty, "m")).error_code(),
            grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_TRUE(FromGrpcStatus(ToGrpcStatus(Status::Ok())).ok());
}

TEST_F(RpcTest, IdempotentCallsRetryUnavailable) {
  SayRequest request;
  request.set_text("eventually");
  request.set_key("retry");
  request.set_fail_times(2);
  request.set_fail_code("Unavailable");
  SayReply reply;
  Status st = Say(request, CallOptions::Idempotent(), &reply);
  ASSERT_TRUE(st.ok()) << st;
  EXPECT_EQ(LastCallAttempts(), 3);
  EXPECT_EQ(reply.text(), "echo: eventually");
}

TEST_F(RpcTest, NonIdempotentCallsAreTriedOnce) {
  SayRequest request;
  request.set_key("once");
  request.set_fail_times(1);
  request.set_fail_code("Unavailable");
  SayReply reply;
  Status st = Say(request, CallOptions{}, &reply);
  EXPECT_EQ(st.code(), StatusCode::kUnavailable);
  EXPECT_EQ(LastCallAttempts(), 1);
  EXPECT_EQ(service_.calls(), 1);
}

// A channel that never connected sent nothing: even a call that must not be repeated is tried
// again (Replicas moves it to the next replica).
TEST_F(RpcTest, ACallThatNeverReachedAServerIsTriedAgainEvenIfNotIdempotent) {
  auto port = FindFreePort();
  ASSERT_TRUE(port.ok());
  auto nowhere = Echo::NewStub(MakeChannel("127.0.0.1:" + std::to_string(*port)));
  SayRequest request;
  SayReply reply;
  CallOptions options;  // not idempotent
  options.max_attempts = 3;
  options.deadline = std::chrono::milliseconds(500);
  Status st = CallRpc("Echo.Say", options, [&](grpc::ClientContext* context) {
    return nowhere->Say(context, request, &reply);
  });
  EXPECT_EQ(st.code(), StatusCode::kUnavailable);
  EXPECT_EQ(LastCallAttempts(), 3);
}

// The client side of a replicated service: a follower's refusal names the leader, and the next
// attempt goes there; an unreachable replica is passed over.
TEST(Replicas, FollowTheLeaderAFollowerNames) {
  EXPECT_EQ(SplitAddressList(" a:1, b:2 ,,c:3"), (std::vector<std::string>{"a:1", "b:2", "c:3"}));
  Status refused = NotLeader("fs3-mgmtd", "10.0.0.1:8000", "10.0.0.2:8000");
  EXPECT_EQ(refused.code(), StatusCode::kUnavailable);
  EXPECT_EQ(refused.reason(), kNotLeader);
  EXPECT_EQ(refused.detail("leader"), "10.0.0.2:8000");
  EXPECT_EQ(NotLeader("x", "a", "").detail("leader"), "");
  // The reason and its details cross gRPC with the code; the message is for people.
  const Status back = FromGrpcStatus(ToGrpcStatus(refused.WithContext("Echo.Say")));
  EXPECT_EQ(back.code(), StatusCode::kUnavailable);
  EXPECT_EQ(back.reason(), kNotLeader);
  EXPECT_EQ(back.details(), refused.details());
  EXPECT_EQ(back.message(), "Echo.Say: " + refused.message());
  // Several details, a detail with '=' in its value, and a status without a reason.
  const Status quorum = DeadlineExceeded("too few").WithReason(
      "QUORUM_TOO_SMALL", {{"asked", "1"}, {"needed", "2"}, {"expr", "a=b"}});
  const Status quorum_back = FromGrpcStatus(ToGrpcStatus(quorum));
  EXPECT_EQ(quorum_back.reason(), "QUORUM_TOO_SMALL");
  EXPECT_EQ(quorum_back.details(), quorum.details());
  EXPECT_EQ(FromGrpcStatus(ToGrpcStatus(NotFound("x"))).reason(), "");
  EXPECT_EQ(FromGrpcStatus(ToGrpcStatus(NotFound("x"))).code(), StatusCode::kNotFound);

  test::EchoService leader_service{"leader: "};
  auto leader = RpcServer::Start(RpcServerOptions{}, {&leader_service});
  ASSERT_TRUE(leader.ok());
  auto dead = FindFreePort();
  ASSERT_TRUE(dead.ok());
  const std::string dead_address = "127.0.0.1:" + std::to_string(*dead);
  Replicas<Echo> replicas(dead_address + "," + (*leader)->address());
  EXPECT_EQ(replicas.size(), 2u);
  EXPECT_EQ(replicas.current(), dead_address);
  SayRequest request;
  request.set_text("hi");
  SayReply reply;
  CallOptions options;  // not idempotent: a replica that never got it may still be tried
  options.max_attempts = 3;
  Status st = CallRpc("Echo.Say", options, [&](grpc::ClientContext* c) {
    return replicas.Attempt([&](Echo::Stub& s) { return s.Say(c, request, &reply); });
  });
  ASSERT_TRUE(st.ok()) << st;
  EXPECT_EQ(reply.text(), "leader: hi");
  EXPECT_EQ(replicas.current(), (*leader)->address());
}

TEST_F(RpcTest, OtherErrorsAreNotRetried) {
  SayRequest request;
  request.set_key("notfound");
  request.set_fail_times(5);
  request.set_fail_code("NotFound");
  SayReply reply;
  Status st = Say(request, CallOptions::Idempotent(), &reply);
  EXPECT_EQ(st.code(), StatusCode::kNotFound);
  EXPECT_EQ(LastCallAttempts(), 1);
}

TEST_F(RpcTest, DeadlineExceededAnsweredByTheHandlerIsFinal) {
  // A server-side wait that ran out of time is an answer, not a lost attempt.
  SayRequest request;
  request.set_key("server-deadline");
  request.set_fail_times(1);
  request.set_fail_code("DeadlineExceeded");
  SayReply reply;
  Status st = Say(request, CallOptions::Idempotent(), &reply);
  EXPECT_EQ(st.code(), StatusCode::kDeadlineExceeded);
  EXPECT_EQ(LastCallAttempts(), 1);
}

TEST_F(RpcTest, RetriesStopAtMaxAttemptsAndSaySo) {
  SayRequest request;
  request.set_key("always");
  request.set_fail_times(100);
  request.set_fail_code("Unavailable");
  CallOptions options = CallOptions::Idempotent();
  options.max_attempts = 3;
  options.initial_backoff = std::chrono::milliseconds(1);
  SayReply reply;
  Status st = Say(request, options, &reply);
  EXPECT_EQ(st.code(), StatusCode::kUnavailable);
  EXPECT_EQ(LastCallAttempts(), 3);
  EXPECT_EQ(st.message(), "Echo.Say (after 3 attempts): injected failure 3");
}

TEST_F(RpcTest, DeadlineIsEnforcedPerCall) {
  SayRequest request;
  request.set_delay_ms(500);
  CallOptions options;
  options.deadline = std::chrono::milliseconds(50);
  SayReply reply;
  auto start = std::chrono::steady_clock::now();
  Status st = Say(request, options, &reply);
  EXPECT_EQ(st.code(), StatusCode::kDeadlineExceeded);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(450));
}

TEST_F(RpcTest, HandlerExceptionBecomesInternalErrorAndServerKeepsServing) {
  SayRequest request;
  request.set_text("throw");
  SayReply reply;
  Status st = Say(request, CallOptions{}, &reply);
  EXPECT_EQ(st.code(), StatusCode::kInternal);
  EXPECT_THAT(st.message(), HasSubstr("asked to throw"));
  request.set_text("still here");
  EXPECT_TRUE(Say(request, CallOptions{}, &reply).ok());
}

TEST_F(RpcTest, IdempotentCallReachesARestartedServer) {
  int port = server_->port();
  std::string address = server_->address();
  server_->Shutdown();
  SayRequest request;
  request.set_text("back");
  SayReply reply;
  EXPECT_EQ(Say(request, CallOptions{}, &reply).code(), StatusCode::kUnavailable);

  // Restart on the same port while an idempotent call is retrying.
  std::thread restart([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    RpcServerOptions options;
    options.listen = address;
    auto server = RpcServer::Start(options, {&service_});
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
  });
  CallOptions options = CallOptions::Idempotent(std::chrono::milliseconds(500));
  options.max_attempts = 20;
  options.total_deadline = std::chrono::seconds(10);
  Status st = Say(request, options, &reply);
  restart.join();
  ASSERT_TRUE(st.ok()) << st;
  EXPECT_EQ(server_->port(), port);
  EXPECT_EQ(reply.text(), "echo: back");
  EXPECT_GT(LastCallAttempts(), 1);
}

TEST(SplitHostPortTest, AcceptsIpv4Ipv6AndNames) {
  std::string host;
  int port = 0;
  ASSERT_TRUE(SplitHostPort("10.0.0.1:80", &host, &port).ok());
  EXPECT_EQ(host, "10.0.0.1");
  EXPECT_EQ(port, 80);
  ASSERT_TRUE(SplitHostPort("[::1]:0", &host, &port).ok());
  EXPECT_EQ(host, "::1");
  ASSERT_TRUE(SplitHostPort("node-7:65535", &host, &port).ok());
  for (const char* bad : {"nohost", "h:", "h:x", "h:65536", "::1:80", "h:123456"}) {
    EXPECT_EQ(SplitHostPort(bad, &host, &port).code(), StatusCode::kInvalidArgument) << bad;
  }
}

}  // namespace
}  // namespace ff
