// The frame transport against a real server on loopback: answers, a handler's errors as the
// caller sees them through CallRpc, transport failures that are retried, deadlines, concurrency,
// bytes that are not frames, and shutdown with clients connected.
#include "common/frame_rpc.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <thread>

#include "common/net.h"
#include "common/rpc_client.h"
#include "common/rpc_status.h"
#include "tests/support/echo_service.h"

namespace ff {
namespace {

using test::SayReply;
using test::SayRequest;
using ::testing::HasSubstr;

constexpr uint16_t kSay = 1;

class FrameRpcTest : public ::testing::Test {
 protected:
  void SetUp() override { StartServer("127.0.0.1:0"); }

  void StartServer(const std::string& listen) {
    std::map<uint16_t, FrameServer::Handler> handlers;
    handlers[kSay] = FrameServer::Typed<SayRequest, SayReply>(
        [this](const SayRequest& r, SayReply* out) { return service_.Say(nullptr, &r, out); });
    auto server = FrameServer::Start(listen, std::move(handlers));
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
  }

  Status Say(FrameChannel& channel, const SayRequest& request, const CallOptions& options,
             SayReply* reply, uint16_t method = kSay) {
    return CallRpc("Echo.Say", options, [&](grpc::ClientContext* c) {
      return channel.Call(method, request, reply, c->deadline());
    });
  }

  test::EchoService service_{"echo: "};
  std::unique_ptr<FrameServer> server_;
};

TEST_F(FrameRpcTest, AnswersAndReusesTheConnection) {
  FrameChannel channel(server_->address());
  for (int i = 0; i < 3; ++i) {
    SayRequest r;
    r.set_text("hello " + std::to_string(i));
    SayReply reply;
    ASSERT_TRUE(Say(channel, r, CallOptions{}, &reply).ok());
    EXPECT_EQ(reply.text(), "echo: hello " + std::to_string(i));
  }
}

TEST_F(FrameRpcTest, AHandlersErrorKeepsItsCodeAndMessageAndIsNotRetried) {
  FrameChannel channel(server_->address());
  SayRequest r;
  r.set_key("k");
  r.set_fail_times(1);
  r.set_fail_code("NotEmpty");
  SayReply reply;
  Status st = Say(channel, r, CallOptions::Idempotent(), &reply);
  EXPECT_EQ(st.code(), StatusCode::kNotEmpty);
  EXPECT_THAT(st.message(), HasSubstr("Echo.Say"));
  EXPECT_EQ(LastCallAttempts(), 1);
  // A handler that answers Unavailable is retried (as over gRPC), and the retry succeeds.
  r.set_key("u");
  r.set_fail_code("Unavailable");
  ASSERT_TRUE(Say(channel, r, CallOptions::Idempotent(), &reply).ok());
  EXPECT_EQ(LastCallAttempts(), 2);
}

TEST_F(FrameRpcTest, AnUnknownMethodIsUnimplemented) {
  FrameChannel channel(server_->address());
  SayReply reply;
  Status st = Say(channel, SayRequest(), CallOptions{}, &reply, 99);
  EXPECT_EQ(st.code(), StatusCode::kUnimplemented);
  SayRequest r;
  r.set_text("still serving");
  ASSERT_TRUE(Say(channel, r, CallOptions{}, &reply).ok());
}

TEST_F(FrameRpcTest, NoServerIsUnavailableAndRetriedUntilItComesBack) {
  const std::string address = server_->address();
  server_->Shutdown();
  server_.reset();
  FrameChannel channel(address);
  SayReply reply;
  grpc::Status raw = channel.Call(kSay, SayRequest(), &reply,
                                  std::chrono::system_clock::now() + std::chrono::seconds(1));
  EXPECT_EQ(raw.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_FALSE(IsHandlerStatus(raw));  // the transport's, so CallRpc retries it
  // The server comes back on the same address while the call retries.
  std::thread restart([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    StartServer(address);
  });
  CallOptions o = CallOptions::Idempotent(std::chrono::seconds(1));
  o.max_attempts = 100;
  o.initial_backoff = std::chrono::milliseconds(20);
  o.max_backoff = std::chrono::milliseconds(50);
  SayRequest r;
  r.set_text("back");
  Status st = Say(channel, r, o, &reply);
  restart.join();
  ASSERT_TRUE(st.ok()) << st;
  EXPECT_EQ(reply.text(), "echo: back");
  EXPECT_GT(LastCallAttempts(), 1);
}

TEST_F(FrameRpcTest, ASlowAnswerMissesTheDeadlineAndItsConnectionIsNotReused) {
  FrameChannel channel(server_->address());
  SayRequest slow;
  slow.set_text("slow");
  slow.set_delay_ms(500);
  SayReply reply;
  grpc::Status raw = channel.Call(kSay, slow, &reply,
                                  std::chrono::system_clock::now() + std::chrono::milliseconds(50));
  EXPECT_EQ(raw.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  EXPECT_FALSE(IsHandlerStatus(raw));
  // The next call must not read the late answer to the slow one.
  SayRequest fast;
  fast.set_text("fast");
  ASSERT_TRUE(Say(channel, fast, CallOptions{}, &reply).ok());
  EXPECT_EQ(reply.text(), "echo: fast");
}

TEST_F(FrameRpcTest, ConcurrentCallersEachGetTheirOwnAnswer) {
  FrameChannel channel(server_->address());
  std::atomic<int> wrong{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 200; ++i) {
        SayRequest r;
        r.set_text(std::to_string(t) + "/" + std::to_string(i));
        SayReply reply;
        if (!Say(channel, r, CallOptions{}, &reply).ok() || reply.text() != "echo: " + r.text()) {
          ++wrong;
        }
      }
    });
  }
  for (auto& th : threads)
    th.join();
  EXPECT_EQ(wrong.load(), 0);
}

TEST_F(FrameRpcTest, BytesThatAreNotFramesCloseThatConnectionOnly) {
  std::string host;
  int port = 0;
  ASSERT_TRUE(SplitHostPort(server_->address(), &host, &port).ok());
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  const char junk[] = "GET / HTTP/1.1\r\n\r\n";  // its length field reads as far over the limit
  ASSERT_GT(send(fd, junk, sizeof junk - 1, 0), 0);
  char buf[16];
  EXPECT_LE(recv(fd, buf, sizeof buf, 0), 0);  // closed (or reset) without an answer
  close(fd);
  FrameChannel channel(server_->address());
  SayRequest r;
  r.set_text("ok");
  SayReply reply;
  ASSERT_TRUE(Say(channel, r, CallOptions{}, &reply).ok());
}

TEST_F(FrameRpcTest, ShutdownCutsIdleClientsAndTheirNextCallFailsCleanly) {
  FrameChannel channel(server_->address());
  SayReply reply;
  ASSERT_TRUE(Say(channel, SayRequest(), CallOptions{}, &reply).ok());  // one idle connection
  server_->Shutdown();
  grpc::Status raw = channel.Call(kSay, SayRequest(), &reply,
                                  std::chrono::system_clock::now() + std::chrono::seconds(1));
  EXPECT_EQ(raw.error_code(), grpc::StatusCode::UNAVAILABLE);
}

}  // namespace
}  // namespace ff
