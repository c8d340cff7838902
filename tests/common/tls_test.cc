// TLS between gRPC servers and channels (common/tls.h) on loopback, with certificates made by
// deploy/make-certs.sh: mutual TLS between nodes of one authority; everything else refused.
#include "common/tls.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>

#include "common/rpc_client.h"
#include "common/rpc_server.h"
#include "tests/support/echo_service.h"
#include "tests/support/subprocess.h"

namespace ff {
namespace {

using test::Echo;
using test::SayReply;
using test::SayRequest;
using ::testing::HasSubstr;

class TlsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new test::TempDir();
    auto make = [](const std::string& out, const std::string& nodes) {
      const std::string cmd = std::string(FF_SOURCE_DIR) + "/deploy/make-certs.sh " + out + " " +
                              nodes + " > /dev/null";
      ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
    };
    make(dir_->File("cluster"), "n1=127.0.0.1,localhost n2=127.0.0.1 elsewhere=127.0.0.2");
    make(dir_->File("other"), "n1=127.0.0.1");  // another cluster's authority
  }
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
  }
  void TearDown() override { ASSERT_TRUE(SetProcessTls({}).ok()); }  // plain again

  static TlsOptions Node(const std::string& cluster, const std::string& node) {
    return TlsOptions{dir_->File(cluster + "/ca.pem"), dir_->File(cluster + "/" + node + ".pem"),
                      dir_->File(cluster + "/" + node + ".key")};
  }

  // A server started under `tls` (the process's TLS is read when a server or channel is made).
  std::unique_ptr<RpcServer> Serve(const TlsOptions& tls,
                                   ClientCerts client_certs = ClientCerts::kRequire) {
    EXPECT_TRUE(SetProcessTls(tls).ok());
    RpcServerOptions options;
    options.client_certs = client_certs;
    auto server = RpcServer::Start(options, {&service_});
    EXPECT_TRUE(server.ok()) << server.status();
    return server.ok() ? std::move(*server) : nullptr;
  }

  // One call to `address` from a channel made under `tls`.
  Status Say(const TlsOptions& tls, const std::string& address) {
    EXPECT_TRUE(SetProcessTls(tls).ok());
    auto stub = Echo::NewStub(MakeChannel(address));
    SayRequest request;
    request.set_text("hi");
    SayReply reply;
    CallOptions options = CallOptions::Idempotent(std::chrono::seconds(3));
    options.max_attempts = 2;
    Status st = CallRpc("Echo.Say", options, [&](grpc::ClientContext* context) {
      return stub->Say(context, request, &reply);
    });
    if (st.ok()) {
      EXPECT_EQ(reply.text(), "echo: hi");
    }
    return st;
  }

  static test::TempDir* dir_;
  test::EchoService service_{"echo: "};
};

test::TempDir* TlsTest::dir_ = nullptr;

TEST_F(TlsTest, NodesOfOneAuthorityTalkOverMutualTls) {
  auto server = Serve(Node("cluster", "n1"));
  ASSERT_NE(server, nullptr);
  EXPECT_TRUE(ProcessTlsEnabled());
  Status st = Say(Node("cluster", "n2"), server->address());
  EXPECT_TRUE(st.ok()) << st;
}

TEST_F(TlsTest, ASecureServerRefusesPlainCallersAndThoseOfAnotherAuthority) {
  auto server = Serve(Node("cluster", "n1"));
  ASSERT_NE(server, nullptr);
  EXPECT_FALSE(Say(TlsOptions{}, server->address()).ok());         // plain
  EXPECT_FALSE(Say(Node("other", "n1"), server->address()).ok());  // another authority
  TlsOptions no_cert{dir_->File("cluster/ca.pem"), "", ""};        // no certificate shown
  Status st = Say(no_cert, server->address());
  EXPECT_FALSE(st.ok());
  EXPECT_EQ(st.code(), StatusCode::kUnavailable) << st;
}

TEST_F(TlsTest, AServerThatAuthenticatesOtherwiseTakesCallersWithoutACertificate) {
  // hai-server's API: users' `hai` shows no certificate; tokens say who they are.
  auto server = Serve(Node("cluster", "n1"), ClientCerts::kOptional);
  ASSERT_NE(server, nullptr);
  Status st = Say(TlsOptions{dir_->File("cluster/ca.pem"), "", ""}, server->address());
  EXPECT_TRUE(st.ok()) << st;
  st = Say(Node("cluster", "n2"), server->address());
  EXPECT_TRUE(st.ok()) << st;
  // A certificate shown is still checked; plain is still refused.
  EXPECT_FALSE(Say(Node("other", "n1"), server->address()).ok());
  EXPECT_FALSE(Say(TlsOptions{}, server->address()).ok());
}

TEST_F(TlsTest, AClientChecksTheServersAddressAgainstItsCertificate) {
  // "elsewhere" is certified for 127.0.0.2 only; the server answers on 127.0.0.1.
  auto server = Serve(Node("cluster", "elsewhere"));
  ASSERT_NE(server, nullptr);
  EXPECT_FALSE(Say(Node("cluster", "n2"), server->address()).ok());
}

TEST_F(TlsTest, ASecureClientDoesNotTalkToAPlainServer) {
  auto server = Serve(TlsOptions{});
  ASSERT_NE(server, nullptr);
  EXPECT_FALSE(Say(Node("cluster", "n2"), server->address()).ok());
}

TEST_F(TlsTest, AProcessWithOnlyTheAuthorityCannotServe) {
  ASSERT_TRUE(SetProcessTls(TlsOptions{dir_->File("cluster/ca.pem"), "", ""}).ok());
  auto server = RpcServer::Start(RpcServerOptions{}, {&service_});
  ASSERT_FALSE(server.ok());
  EXPECT_EQ(server.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_THAT(server.status().message(), HasSubstr("no certificate of its own"));
}

TEST_F(TlsTest, BadFilesAreRefusedWithWhatIsWrongAndChangeNothing) {
  ASSERT_TRUE(SetProcessTls(Node("cluster", "n1")).ok());
  struct Case {
    TlsOptions tls;
    std::string says;
  };
  const std::string c = dir_->File("cluster/");
  const std::vector<Case> cases = {
      {{c + "ca.pem", c + "n1.pem", c + "n2.key"}, "is not the one of"},
      {{c + "ca.pem", dir_->File("other/n1.pem"), dir_->File("other/n1.key")},
       "does not verify against"},
      {{c + "ca.pem", c + "n1.pem", c + "missing.key"}, "cannot read tls key_file"},
      {{c + "missing.pem", "", ""}, "cannot read tls ca_file"},
      {{c + "n1.key", "", ""}, "holds no PEM certificate"},
      {{c + "ca.pem", c + "n1.pem", c + "n1.pem"}, "holds no PEM private key"},
      {{c + "ca.pem", c + "n1.pem", ""}, "go together"},
      {{"", c + "n1.pem", c + "n1.key"}, "without ca_file"},
  };
  for (const Case& k : cases) {
    Status st = SetProcessTls(k.tls);
    EXPECT_FALSE(st.ok()) << k.says;
    EXPECT_THAT(st.message(), HasSubstr(k.says));
  }
  // The process still runs the TLS it had.
  EXPECT_EQ(ProcessTlsOptions().cert_file, c + "n1.pem");
  RpcServerOptions options;
  auto server = RpcServer::Start(options, {&service_});
  ASSERT_TRUE(server.ok()) << server.status();
  Status st = Say(Node("cluster", "n2"), (*server)->address());
  EXPECT_TRUE(st.ok()) << st;
}

}  // namespace
}  // namespace ff
