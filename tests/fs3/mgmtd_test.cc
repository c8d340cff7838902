// fs3-mgmtd as a real process with its RocksDB, and the fs3 admin CLI. The storage services are
// played by this test (heartbeats over gRPC) until fs3-storage lands.
#include <gmock/gmock.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <atomic>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>

#include "common/net.h"
#include "common/rpc_client.h"
#include "fs3/proto/mgmtd.grpc.pb.h"
#include "tests/support/daemons.h"
#include "tests/support/subprocess.h"

namespace ff {
namespace {

using ::testing::HasSubstr;
using json = nlohmann::json;
using namespace std::chrono_literals;

struct CliResult {
  int code = -1;
  std::string out, err;
};

class MgmtdTest : public ::testing::Test {
 protected:
  void SetUp() override {
    daemons_.Write("mgmtd",
                   "[mgmtd]\ndata_dir = \"" + dir_.File("mgmtd") +
                       "\"\nlease_ms = 1000\ncheck_interval_ms = 50\nrestart_grace_ms = 10000\n");
    StartMgmtd();
    address_ = daemons_.ReadyField("mgmtd", "rpc");
    for (const char* s : {"s0", "s1", "s2"}) {
      std::string name = s;
      int base = (name[1] - '0' + 1) * 100;
      services_[name] = {true, {{base + 1, "up-to-date"}, {base + 2, "up-to-date"}}};
    }
    beating_ = std::thread([this] {
      auto stub = fs3rpc::Mgmtd::NewStub(MakeChannel(address_));
      while (!stop_) {
        {
          std::lock_guard lock(mu_);
          for (const auto& [name, svc] : services_) {
            if (!svc.alive) continue;
            fs3rpc::HeartbeatRequest req;
            req.set_node(name);
            req.set_address("127.0.0.1:1" + name.substr(1));
            for (const auto& [id, state] : svc.targets) {
              auto* t = req.add_targets();
              t->set_id(id);
              t->set_path("/data/" + name + "/" + std::to_string(id));
              t->set_local_state(state);
            }
            fs3rpc::HeartbeatResponse resp;
            grpc::ClientContext c;
            c.set_deadline(std::chrono::system_clock::now() + 300ms);
            stub->Heartbeat(&c, req, &resp);
          }
        }
        std::this_thread::sleep_for(100ms);
      }
    });
    ASSERT_TRUE(WaitUntil([&] { return Nodes("up") == 3; }, 10s));
  }

  void TearDown() override {
    stop_ = true;
    if (beating_.joinable()) beating_.join();
  }

  // (Again, at the same address: the config holds the port it bound first.)
  void StartMgmtd() { ASSERT_TRUE(daemons_.Start("mgmtd", FF_FS3_MGMTD_PATH)); }

  CliResult Fs3(std::vector<std::string> args) {
    args.insert(args.begin(), FF_FS3_PATH);
    auto proc = test::Subprocess::Start(
        args, {.env = {{"FS3_MGMTD", address_}}, .output_dir = dir_.path()});
    EXPECT_TRUE(proc.ok());
    if (!proc.ok()) return {};
    auto code = proc->Wait(30s);
    return {code.value_or(-1), proc->Stdout(), proc->Stderr()};
  }

  json Routing() {
    CliResult r = Fs3({"routing"});
    EXPECT_EQ(r.code, 0) << r.err;
    return json::parse(r.out, nullptr, false);
  }

  // "id:state id:state ..." of a chain, head first.
  std::string ChainView(int chain) {
    json r = Routing();
    for (const json& c : r["chains"]) {
      if (c["id"] != chain) continue;
      std::string v;
      for (const json& t : c["targets"]) {
        v += (v.empty() ? "" : " ") + t["target"].get<std::string>() + ":" +
             t["state"].get<std::string>();
      }
      return v;
    }
    return "";
  }

  int Nodes(const std::string& state) {
    int n = 0;
    for (const json& node : Routing().value("nodes", json::array()))
      n += node.value("state", "") == state;
    return n;
  }

  void SetService(const std::string& name, bool alive, const std::string& local = "") {
    std::lock_guard lock(mu_);
    services_[name].alive = alive;
    if (!local.empty()) {
      for (auto& [id, state] : services_[name].targets)
        state = local;
    }
  }

  static bool WaitUntil(const std::function<bool()>& done, std::chrono::milliseconds timeout) {
    auto until = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < until) {
      if (done()) return true;
      std::this_thread::sleep_for(50ms);
    }
    return done();
  }

  struct Service {
    bool alive = true;
    std::map<uint64_t, std::string> targets;
  };
  test::TempDir dir_;
  test::Daemons daemons_{dir_};
  std::string address_;
  std::mutex mu_;
  std::map<std::string, Service> services_;
  std::atomic<bool> stop_{false};
  std::thread beating_;
};

TEST_F(MgmtdTest, ChainsFollowTheirTargetsThroughFailureAndRecovery) {
  CliResult init = Fs3({"init", "--chunk-size", "1MiB", "--replication", "3"});
  ASSERT_EQ(init.code, 0) << init.err;
  EXPECT_THAT(init.out, HasSubstr("chunk size 1048576, replication 3, 2 chains"));
  EXPECT_EQ(ChainView(1), "101:serving 201:serving 301:serving");
  EXPECT_EQ(ChainView(2), "102:serving 202:serving 302:serving");
  // s1 (the middle of both chains) stops heartbeating: after its lease, its targets go offline
  // and to the end of their chains.
  SetService("s1", false);
  ASSERT_TRUE(WaitUntil([&] { return ChainView(1) == "101:serving 301:serving 201:offline"; }, 10s))
      << ChainView(1);
  EXPECT_EQ(ChainView(2), "102:serving 302:serving 202:offline");
  EXPECT_EQ(Nodes("down"), 1);
  // It restarts: its targets are online (not up to date): waiting, then syncing at the tail.
  SetService("s1", true, "online");
  ASSERT_TRUE(WaitUntil([&] { return ChainView(1) == "101:serving 301:serving 201:syncing"; }, 10s))
      << ChainView(1);
  // Recovery done.
  SetService("s1", true, "up-to-date");
  ASSERT_TRUE(WaitUntil([&] { return ChainView(1) == "101:serving 301:serving 201:serving"; }, 10s))
      << ChainView(1);
  // Every change bumped the chain's version (serving -> offline -> waiting -> syncing -> serving).
  json r = Routing();
  EXPECT_EQ(r["chains"][0]["version"], "5");
  // An admin takes the head out of service.
  CliResult off = Fs3({"target", "offline", "101"});
  ASSERT_EQ(off.code, 0) << off.err;
  EXPECT_EQ(ChainView(1), "301:serving 201:serving 101:offline");
  CliResult targets = Fs3({"targets"});
  EXPECT_THAT(targets.out, HasSubstr("(taken offline)"));
}

TEST_F(MgmtdTest, RoutingSurvivesAKilledManagerAndServicesReRegister) {
  ASSERT_EQ(Fs3({"init", "--chunk-size", "4MiB", "--replication", "2"}).code, 0);
  json before = Routing();
  ASSERT_EQ(before["chains"].size(), 3u);  // 6 targets on 3 services, 2 per chain
  daemons_.Kill("mgmtd");
  StartMgmtd();
  json after = Routing();
  EXPECT_EQ(after["chains"], before["chains"]);
  EXPECT_EQ(after["chunk_size"], before["chunk_size"]);
  EXPECT_TRUE(after["initialized"].get<bool>());
  ASSERT_TRUE(WaitUntil([&] { return Nodes("up") == 3; }, 10s));
  // Past the lease, with everyone back, nothing changed.
  std::this_thread::sleep_for(1500ms);
  EXPECT_EQ(Routing()["chains"], before["chains"]) << daemons_.proc("mgmtd").Stderr();
}

TEST_F(MgmtdTest, BadRequestsAreRefusedAndChangeNothing) {
  CliResult r = Fs3({"init", "--chunk-size", "3000"});
  EXPECT_EQ(r.code, 1);
  EXPECT_THAT(r.err, HasSubstr("power of two"));
  r = Fs3({"init", "--replication", "4"});
  EXPECT_THAT(r.err, HasSubstr("replication 4 needs 4 storage services"));
  EXPECT_FALSE(Routing()["initialized"].get<bool>());
  ASSERT_EQ(Fs3({"init"}).code, 0);
  json before = Routing();
  r = Fs3({"init"});
  EXPECT_EQ(r.code, 1);
  EXPECT_THAT(r.err, HasSubstr("already initialised"));
  r = Fs3({"target", "offline", "999"});
  EXPECT_EQ(r.err, "fs3: no target 999\n");
  r = Fs3({"target", "add", "101", "--chain", "2"});
  EXPECT_THAT(r.err, HasSubstr("is in chain 1"));
  r = Fs3({"target", "add", "101", "--chain", "9"});
  EXPECT_THAT(r.err, HasSubstr("no chain 9"));
  // Malformed heartbeats.
  auto stub = fs3rpc::Mgmtd::NewStub(MakeChannel(address_));
  fs3rpc::HeartbeatRequest hb;
  hb.set_node("s9");
  auto* t = hb.add_targets();
  t->set_id(901);
  t->set_local_state("fine");
  fs3rpc::HeartbeatResponse resp;
  grpc::ClientContext c1;
  grpc::Status st = stub->Heartbeat(&c1, hb, &resp);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(st.error_message(), HasSubstr("unknown local state 'fine'"));
  t->set_id(101);  // belongs to s0
  t->set_local_state("online");
  grpc::ClientContext c2;
  st = stub->Heartbeat(&c2, hb, &resp);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(st.error_message(), HasSubstr("belongs to s0"));
  json after = Routing();
  EXPECT_EQ(after["chains"], before["chains"]);
  EXPECT_EQ(after["version"], before["version"]);
  EXPECT_EQ(after["nodes"].size(), 3u);  // s9 was not registered
  CliResult away = Fs3({"--mgmtd", "127.0.0.1:1", "chains"});
  EXPECT_THAT(away.err, HasSubstr("cannot reach fs3-mgmtd"));
}

}  // namespace
}  // namespace ff
