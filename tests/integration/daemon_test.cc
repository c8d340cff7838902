// The daemon skeleton as a user meets it: ff-echod started as a real process.
#include <gmock/gmock.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <memory>
#include <nlohmann/json.hpp>
#include <thread>

#include "common/rpc_client.h"
#include "tests/proto/echo.grpc.pb.h"
#include "tests/support/http_get.h"
#include "tests/support/subprocess.h"

namespace ff {
namespace {

using ::testing::HasSubstr;
using ::testing::MatchesRegex;
using namespace std::chrono_literals;

constexpr char kGoodConfig[] = R"(
[server]
listen = "127.0.0.1:0"
[metrics]
listen = "127.0.0.1:0"
[log]
level = "info"
[echo]
prefix = "echod: "
)";

class DaemonTest : public ::testing::Test {
 protected:
  // Runs ff-echod with `args` to completion; returns the exit code.
  int RunToExit(std::vector<std::string> args, test::Subprocess** out = nullptr) {
    args.insert(args.begin(), FF_ECHOD_PATH);
    auto proc = test::Subprocess::Start(args);
    EXPECT_TRUE(proc.ok()) << proc.status();
    last_ = std::make_unique<test::Subprocess>(std::move(*proc));
    auto code = last_->Wait(20s);
    EXPECT_TRUE(code.has_value()) << "ff-echod did not exit";
    if (out) *out = last_.get();
    return code.value_or(-1);
  }

  // The one line ff-echod printed on stderr.
  std::string StderrLine() {
    std::string err = last_->Stderr();
    EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << "stderr: " << err;
    return err.substr(0, err.find('\n'));
  }

  std::string WriteConfig(const std::string& text) {
    std::string path = dir_.File("echod.toml");
    test::WriteFile(path, text);
    return path;
  }

  test::TempDir dir_;
  std::unique_ptr<test::Subprocess> last_;
};

TEST_F(DaemonTest, ServesRpcAndMetricsThenShutsDownCleanlyOnSigterm) {
  std::string config = WriteConfig(kGoodConfig);
  std::string ready = dir_.File("ready.json");
  auto proc = test::Subprocess::Start({FF_ECHOD_PATH, "--config", config, "--ready-file", ready});
  ASSERT_TRUE(proc.ok()) << proc.status();

  auto content = test::WaitForFile(ready, 20s);
  ASSERT_TRUE(content.has_value()) << "no ready file; stderr: " << proc->Stderr();
  nlohmann::json endpoints = nlohmann::json::parse(*content);
  std::string rpc = endpoints["rpc"];
  std::string metrics = endpoints["metrics"];

  auto stub = test::Echo::NewStub(MakeChannel(rpc));
  test::SayRequest request;
  request.set_text("hello");
  test::SayReply reply;
  Status st = CallRpc("Say", CallOptions::Idempotent(),
                      [&](grpc::ClientContext* c) { return stub->Say(c, request, &reply); });
  ASSERT_TRUE(st.ok()) << st;
  EXPECT_EQ(reply.text(), "echod: hello");

  auto scrape = test::HttpGet(metrics, "/metrics");
  ASSERT_TRUE(scrape.ok()) << scrape.status();
  EXPECT_THAT(scrape->body, HasSubstr("ff_echod_up 1"));
  EXPECT_THAT(scrape->body, HasSubstr("ff_build_info{daemon=\"ff-echod\""));

  proc->Signal(SIGTERM);
  auto code = proc->Wait(20s);
  ASSERT_TRUE(code.has_value()) << "ff-echod ignored SIGTERM";
  EXPECT_EQ(*code, 0) << proc->Stderr();
  std::string log = proc->Stderr();
  EXPECT_THAT(log, HasSubstr("ff-echod received SIGTERM, shutting down"));
  EXPECT_THAT(log, HasSubstr("served 1 calls"));
  // Every log line names the daemon.
  std::stringstream lines(log);
  for (std::string line; std::getline(lines, line);) {
    EXPECT_THAT(line, MatchesRegex(".* (info|warning|error) ff-echod\\[[0-9]+\\] .*")) << line;
  }
}

// What a Type=notify systemd unit relies on: READY=1 once serving, STOPPING=1 on SIGTERM.
// A client whose server was killed and started again on the same address gets through soon after
// the server listens again. (Nothing in this process serves gRPC, as in a mount or a tool: before
// the backup poller was made to run every 100 ms, a connection to the restarted server went
// unread for up to 5 s and every retried call waited that long.)
TEST_F(DaemonTest, ARetriedCallGoesThroughSoonAfterItsServerRestarts) {
  std::string config = WriteConfig(kGoodConfig);
  std::string ready = dir_.File("ready.json");
  // Started on this thread: a child dies with the thread that started it (PR_SET_PDEATHSIG).
  auto start = [&](const std::string& listen) -> std::unique_ptr<test::Subprocess> {
    std::remove(ready.c_str());
    std::vector<std::string> args = {FF_ECHOD_PATH, "--config", config, "--ready-file", ready};
    if (!listen.empty()) args.insert(args.end(), {"--listen", listen});
    auto proc = test::Subprocess::Start(args);
    if (!proc.ok() || !test::WaitForFile(ready, 20s)) return nullptr;
    return std::make_unique<test::Subprocess>(std::move(*proc));
  };
  auto server = start("");
  ASSERT_TRUE(server);
  const std::string rpc = nlohmann::json::parse(*test::WaitForFile(ready, 1s))["rpc"];
  auto stub = test::Echo::NewStub(MakeChannel(rpc));
  test::SayRequest request;
  request.set_text("again");
  test::SayReply reply;
  CallOptions options = CallOptions::Idempotent(5s);
  options.max_attempts = 1 << 20;
  options.max_backoff = 500ms;
  options.total_deadline = 60s;
  auto say = [&] {
    return CallRpc("Say", options,
                   [&](grpc::ClientContext* c) { return stub->Say(c, request, &reply); });
  };
  ASSERT_TRUE(say().ok());
  for (int round = 0; round < 3; ++round) {
    server->Signal(SIGKILL);
    server->Wait(10s);
    Status st;
    std::chrono::steady_clock::time_point answered;
    std::thread caller([&] {
      st = say();  // retried while the server is down
      answered = std::chrono::steady_clock::now();
    });
    std::this_thread::sleep_for(1500ms);
    server = start(rpc);
    const auto listening = std::chrono::steady_clock::now();
    caller.join();
    ASSERT_TRUE(server) << "ff-echod did not start again on " << rpc;
    ASSERT_TRUE(st.ok()) << st;
    // The retry after the server is ready is at most max_backoff away; 5 s was the old wait.
    EXPECT_LT(answered - listening, 2500ms) << "round " << round;
  }
}

TEST_F(DaemonTest, TellsSystemdWhenReadyAndWhenStopping) {
  std::string socket_path = dir_.File("notify.sock");
  int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(fd, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  ASSERT_LT(socket_path.size(), sizeof(addr.sun_path));
  std::memcpy(addr.sun_path, socket_path.c_str(), socket_path.size());
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0) << strerror(errno);
  auto receive = [fd]() -> std::string {
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, 20000) != 1) return "(nothing within 20 s)";
    char buf[512];
    ssize_t n = recv(fd, buf, sizeof(buf), 0);
    return n < 0 ? "(recv failed)" : std::string(buf, static_cast<std::size_t>(n));
  };

  test::Subprocess::Options options;
  options.env["NOTIFY_SOCKET"] = socket_path;
  auto proc =
      test::Subprocess::Start({FF_ECHOD_PATH, "--config", WriteConfig(kGoodConfig)}, options);
  ASSERT_TRUE(proc.ok()) << proc.status();
  std::string ready = receive();
  EXPECT_THAT(ready, ::testing::StartsWith("READY=1\nSTATUS=serving {\"metrics\":"));
  EXPECT_THAT(ready, HasSubstr("\"rpc\":\"127.0.0.1:"));
  proc->Signal(SIGTERM);
  EXPECT_EQ(receive(), "STOPPING=1");
  auto code = proc->Wait(20s);
  ASSERT_TRUE(code.has_value());
  EXPECT_EQ(*code, 0) << proc->Stderr();
  close(fd);
}

TEST_F(DaemonTest, FlagsOverrideTheConfigFile) {
  std::string config = WriteConfig(kGoodConfig);
  test::Subprocess* p = nullptr;
  ASSERT_EQ(RunToExit({"--config", config, "--set", "echo.prefix=from flag", "--listen",
                       "127.0.0.1:7777", "--log-level", "debug", "--print-config"},
                      &p),
            0);
  std::string out = p->Stdout();
  EXPECT_THAT(out, HasSubstr("prefix = 'from flag'"));
  EXPECT_THAT(out, HasSubstr("listen = '127.0.0.1:7777'"));
  EXPECT_THAT(out, HasSubstr("level = 'debug'"));
}

TEST_F(DaemonTest, MissingKeyExitsWithConfigError) {
  std::string config = WriteConfig("[server]\nlisten = \"127.0.0.1:0\"\n");
  EXPECT_EQ(RunToExit({"--config", config}), 78);
  EXPECT_EQ(StderrLine(), "ff-echod: " + config + ": missing required key 'echo.prefix' (string)");
}

TEST_F(DaemonTest, WrongTypeExitsWithConfigError) {
  std::string config = WriteConfig("[echo]\nprefix = 42\n");
  EXPECT_EQ(RunToExit({"--config", config}), 78);
  EXPECT_EQ(StderrLine(),
            "ff-echod: " + config + ":2: key 'echo.prefix': expected string, got integer");
}

TEST_F(DaemonTest, UnknownKeyExitsWithConfigError) {
  std::string config = WriteConfig("[echo]\nprefix = \"p\"\nprefx = \"typo\"\n");
  EXPECT_EQ(RunToExit({"--config", config}), 78);
  EXPECT_EQ(StderrLine(), "ff-echod: " + config + ":3: unknown key 'echo.prefx'");
}

TEST_F(DaemonTest, UnreadableFileExitsWithConfigError) {
  std::string missing = dir_.File("absent.toml");
  EXPECT_EQ(RunToExit({"--config", missing}), 78);
  EXPECT_EQ(StderrLine(),
            "ff-echod: cannot read config file '" + missing + "': No such file or directory");
  EXPECT_EQ(RunToExit({"--config", dir_.path()}), 78);
  EXPECT_EQ(StderrLine(),
            "ff-echod: cannot read config file '" + dir_.path() + "': Is a directory");
}

TEST_F(DaemonTest, SyntaxErrorExitsWithConfigError) {
  std::string config = WriteConfig("[echo\nprefix = 1\n");
  EXPECT_EQ(RunToExit({"--config", config}), 78);
  EXPECT_THAT(StderrLine(), HasSubstr("ff-echod: " + config + ":1:"));
}

TEST_F(DaemonTest, BadValueInLogSectionExitsWithConfigError) {
  std::string config = WriteConfig("[echo]\nprefix = \"p\"\n[log]\nformat = \"xml\"\n");
  EXPECT_EQ(RunToExit({"--config", config}), 78);
  EXPECT_EQ(StderrLine(),
            "ff-echod: " + config + ":4: key 'log.format': expected one of text, json; got 'xml'");
}

TEST_F(DaemonTest, BadFlagExitsWithUsageError) {
  EXPECT_EQ(RunToExit({"--no-such-flag"}), 64);
  EXPECT_THAT(StderrLine(), HasSubstr("ff-echod: The following argument was not expected: "
                                      "--no-such-flag (see --help)"));
}

TEST_F(DaemonTest, BusyPortFailsServeWithOneLine) {
  test::Subprocess* first = nullptr;
  std::string config = WriteConfig(kGoodConfig);
  std::string ready = dir_.File("ready.json");
  auto proc = test::Subprocess::Start({FF_ECHOD_PATH, "--config", config, "--ready-file", ready});
  ASSERT_TRUE(proc.ok());
  auto content = test::WaitForFile(ready, 20s);
  ASSERT_TRUE(content.has_value()) << proc->Stderr();
  std::string rpc = nlohmann::json::parse(*content)["rpc"];
  EXPECT_EQ(RunToExit({"--config", config, "--listen", rpc, "--log-level", "off"}, &first), 1);
  EXPECT_EQ(StderrLine(),
            "ff-echod: cannot listen on " + rpc + ": address in use or not available on this host");
}

}  // namespace
}  // namespace ff
