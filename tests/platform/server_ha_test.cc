// hai-server highly available: a real three-member etcd cluster, two hai-servers on it (one
// leads, one stands by), three hai-agents and the hai CLI given both addresses. The leader is
// killed -9 while a job runs, `hai logs -f` follows it and jobs are being submitted: the standby
// takes over within the failover bound, no acknowledged submission is lost, no rank is started
// twice, the log is read to its end without a gap or a repeat, and the job finishes.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <atomic>
#include <chrono>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <thread>

#include "tests/support/daemons.h"
#include "tests/support/etcd_cluster.h"
#include "tests/support/subprocess.h"

namespace ff {
namespace {

using ::testing::HasSubstr;
using json = nlohmann::json;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

constexpr char kCluster[] = R"(
name = "test"
node_link_gbps = 200
cross_zone_gbps = 200
[[zones]]
name = "A"
  [[zones.leaves]]
  name = "A-leaf"
  nodes = 3
  gpus_per_node = 2
  cpus_per_node = 8
  memory_gib = 16
)";

struct CliResult {
  int code = -1;
  std::string out, err;
};

class ServerHaTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(etcd_.Start());
    test::WriteFile(dir_.File("cluster.toml"), kCluster);
    std::string endpoints;
    for (const std::string& e : etcd_.endpoints())
      endpoints += (endpoints.empty() ? "\"" : ", \"") + e + "\"";
    for (const char* name : {"server1", "server2"}) {
      daemons_.Write(name, "[hai]\nengine = \"etcd\"\netcd_endpoints = [" + endpoints +
                               "]\nelection_ttl_s = 2\ndata_dir = \"" + dir_.File(name) +
                               "\"\ncluster = \"" + dir_.File("cluster.toml") +
                               "\"\nagent_token_file = \"" + dir_.File("agent.token") +
                               "\"\ncheckpoint_root = \"" + dir_.File("ckpt") +
                               "\"\nheartbeat_timeout_ms = 5000\nheartbeat_interval_ms = 200\n"
                               "schedule_interval_ms = 200\n");
      ASSERT_TRUE(daemons_.Start(name, FF_HAI_SERVER_PATH));
      if (std::string(name) == "server1") {
        // server1 leads first and makes the admin user.
        ASSERT_TRUE(WaitUntil(
            [&] { return !test::ReadFileOrEmpty(dir_.File("server1/admin.token")).empty(); }, 10s));
      }
    }
    servers_ = daemons_.ReadyField("server1", "rpc") + "," + daemons_.ReadyField("server2", "rpc");
    admin_ = test::ReadFileOrEmpty(dir_.File("server1/admin.token"));
    admin_.erase(admin_.find_last_not_of("\n") + 1);
    for (int i = 0; i < 3; ++i) {
      const std::string name = "agent" + std::to_string(i);
      daemons_.WriteRaw(name, "[server]\nlisten = \"127.0.0." + std::to_string(10 + i) +
                                  ":0\"\n[metrics]\nenabled = false\n[agent]\nnode = \"A-leaf-n0" +
                                  std::to_string(i) + "\"\nserver = \"" + servers_ +
                                  "\"\ntoken_file = \"" + dir_.File("agent.token") +
                                  "\"\nstate_dir = \"" + dir_.File(name) +
                                  "\"\ngpus = 2\nkill_grace_ms = 1000\n");
      ASSERT_TRUE(daemons_.Start(name, FF_HAI_AGENT_PATH));
    }
    CliResult u = Hai({"admin", "user", "add", "alice", "--json"}, admin_);
    ASSERT_EQ(u.code, 0) << u.err;
    alice_ = json::parse(u.out).value("token", "");
    ASSERT_TRUE(WaitUntil([&] { return CountNodes("NODE_UP") == 3; }, 20s));
  }

  void TearDown() override {
    daemons_.Clear();
    for (int i = 0; i < 3; ++i) {
      std::ifstream in(dir_.File("agent" + std::to_string(i)) + "/tasks.json");
      json tasks = json::parse(in, nullptr, false);
      if (!tasks.is_array()) continue;
      for (const json& t : tasks) {
        if (t.value("pid", -1) > 0) kill(-t.value("pid", -1), SIGKILL);
      }
    }
  }

  CliResult Hai(std::vector<std::string> args, const std::string& token,
                std::chrono::seconds timeout = 60s) {
    args.insert(args.begin(), FF_HAI_PATH);
    test::Subprocess::Options o;
    o.env = {{"HAI_SERVER", servers_}, {"HAI_TOKEN", token}, {"HOME", dir_.path()}};
    o.output_dir = dir_.path();
    auto proc = test::Subprocess::Start(args, o);
    EXPECT_TRUE(proc.ok()) << proc.status();
    if (!proc.ok()) return {};
    auto code = proc->Wait(timeout);
    EXPECT_TRUE(code.has_value()) << "hai did not exit";
    return {code.value_or(-1), proc->Stdout(), proc->Stderr()};
  }
  int CountNodes(const std::string& state) {
    CliResult r = Hai({"nodes", "--json"}, admin_);
    json j = json::parse(r.out, nullptr, false);
    int n = 0;
    if (j.is_object() && j.contains("nodes")) {
      for (const json& node : j["nodes"])
        n += node.value("state", "") == state;
    }
    return n;
  }
  std::string State(int64_t id) {
    CliResult r = Hai({"show", std::to_string(id), "--json"}, alice_);
    return json::parse(r.out, nullptr, false).value("state", "?");
  }
  // The replica that leads now ("server1"/"server2"), asked directly.
  std::string Leader() {
    for (const char* name : {"server1", "server2"}) {
      if (!daemons_.proc(name).running()) continue;
      test::Subprocess::Options o;
      o.env = {{"HAI_SERVER", daemons_.ReadyField(name, "rpc")},
               {"HAI_TOKEN", admin_},
               {"HOME", dir_.path()}};
      o.output_dir = dir_.path();
      auto proc = test::Subprocess::Start({FF_HAI_PATH, "whoami"}, o);
      if (proc.ok() && proc->Wait(10s) == 0) return name;
    }
    return "";
  }
  static bool WaitUntil(const std::function<bool()>& done, std::chrono::milliseconds timeout) {
    auto until = Clock::now() + timeout;
    while (Clock::now() < until) {
      if (done()) return true;
      std::this_thread::sleep_for(100ms);
    }
    return done();
  }

  test::TempDir dir_;
  test::EtcdCluster etcd_{dir_, 3};
  test::Daemons daemons_{dir_};
  std::string servers_, admin_, alice_;
};

TEST_F(ServerHaTest, TheStandbyRefusesAndNamesTheLeader) {
  const std::string leader = Leader();
  ASSERT_FALSE(leader.empty());
  const std::string standby = leader == "server1" ? "server2" : "server1";
  test::Subprocess::Options o;
  o.env = {{"HAI_SERVER", daemons_.ReadyField(standby, "rpc")},
           {"HAI_TOKEN", alice_},
           {"HOME", dir_.path()}};
  o.output_dir = dir_.path();
  auto proc = test::Subprocess::Start({FF_HAI_PATH, "ls"}, o);
  ASSERT_TRUE(proc.ok());
  EXPECT_NE(proc->Wait(30s), 0);
  EXPECT_THAT(proc->Stderr(), HasSubstr("not the leader"));
  EXPECT_THAT(proc->Stderr(), HasSubstr(daemons_.ReadyField(leader, "rpc")));
  // With both addresses, hai finds the leader whichever is first.
  EXPECT_EQ(Hai({"ls"}, alice_).code, 0);
}

TEST_F(ServerHaTest, KillingTheLeaderLosesNoJobAndStartsNoRankTwice) {
  // Each rank notes its start in a file, then prints 40 numbered lines over about 8 s.
  const std::string starts = dir_.File("starts");
  const int64_t id = [&] {
    CliResult r = Hai({"submit", "--json", "--nodes", "2", "--gpus-per-node", "1", "--",
                       "echo start $RANK $$ >> " + starts +
                           "; for i in $(seq 1 40); do echo line $i; sleep 0.2; done"},
                      alice_);
    EXPECT_EQ(r.code, 0) << r.err;
    return std::stoll(json::parse(r.out, nullptr, false).value("id", "0"));
  }();
  ASSERT_GT(id, 0);
  ASSERT_TRUE(WaitUntil([&] { return State(id) == "RUNNING"; }, 30s));
  // `hai logs -f` from now to the end, across the leader change.
  CliResult logs;
  std::thread follower([&] { logs = Hai({"logs", std::to_string(id), "-f"}, alice_, 90s); });
  // Submissions while the leader dies: every acknowledged one must exist afterwards.
  std::atomic<bool> stop{false};
  std::vector<int64_t> acknowledged;
  std::thread submitter([&] {
    while (!stop) {
      CliResult r = Hai({"submit", "--json", "--", "true"}, alice_, 30s);
      if (r.code == 0) acknowledged.push_back(std::stoll(json::parse(r.out).value("id", "0")));
      std::this_thread::sleep_for(200ms);
    }
  });
  std::this_thread::sleep_for(2s);
  const std::string leader = Leader();
  ASSERT_FALSE(leader.empty());
  const auto killed = Clock::now();
  daemons_.Kill(leader);
  ASSERT_TRUE(WaitUntil([&] { return !Leader().empty(); }, 15s));
  const auto failover = Clock::now() - killed;
  EXPECT_LE(failover, 5s) << "hai-server failover took "
                          << std::chrono::duration_cast<std::chrono::milliseconds>(failover).count()
                          << " ms";
  std::this_thread::sleep_for(2s);
  stop = true;
  submitter.join();
  follower.join();

  ASSERT_TRUE(WaitUntil([&] { return State(id) == "SUCCEEDED"; }, 60s)) << State(id);
  // Each rank started exactly once.
  const std::string noted = test::ReadFileOrEmpty(starts);
  EXPECT_EQ(std::count(noted.begin(), noted.end(), '\n'), 2) << noted;
  // The followed log: every line once, in order, although its stream moved to another server.
  EXPECT_EQ(logs.code, 0) << logs.err;
  std::string want;
  for (int i = 1; i <= 40; ++i)
    want += "line " + std::to_string(i) + "\n";
  EXPECT_THAT(logs.out, HasSubstr(want));
  EXPECT_EQ(logs.out.find("line 1\n"), logs.out.rfind("line 1\n")) << "a part was repeated";
  // Nothing acknowledged was lost.
  EXPECT_FALSE(acknowledged.empty());
  for (int64_t job : acknowledged) {
    EXPECT_TRUE(WaitUntil([&] { return State(job) == "SUCCEEDED"; }, 60s))
        << "job " << job << ": " << State(job);
  }
}

}  // namespace
}  // namespace ff
