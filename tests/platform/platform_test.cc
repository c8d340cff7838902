// HAI-Platform as researchers and admins meet it: a real hai-server, three hai-agents acting as
// nodes, and the hai CLI, all as processes on loopback.
#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "common/net.h"
#include "hfreduce/store.h"
#include "tests/support/daemons.h"
#include "tests/support/full_disk.h"
#include "tests/support/subprocess.h"

namespace ff {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using json = nlohmann::json;
using namespace std::chrono_literals;

constexpr char kCluster[] = R"(
name = "test"
node_link_gbps = 200
cross_zone_gbps = 200
[[zones]]
name = "A"
  [[zones.leaves]]
  name = "A-leaf"
  nodes = 3          # A-leaf-n00 .. A-leaf-n02
  gpus_per_node = 2
  cpus_per_node = 8
  memory_gib = 16
)";

struct CliResult {
  int code = -1;
  std::string out, err;
};

class PlatformTest : public ::testing::Test {
 protected:
  // The cluster the server schedules on, and each agent's node, in order.
  virtual std::string ClusterToml() const { return kCluster; }
  virtual std::vector<std::string> NodeNames() const {
    return {"A-leaf-n00", "A-leaf-n01", "A-leaf-n02"};
  }
  int Nodes() const { return static_cast<int>(NodeNames().size()); }
  // More config for the server ("server") or an agent (its node's name): SecurePlatformTest's
  // [tls].
  virtual std::string MoreConfig(const std::string& /*who*/) const { return ""; }

  // The first master port hai-server hands out (its own: see SetUp).
  const int master_port_base_ = *FindFreePort();

  void SetUp() override {
    test::WriteFile(dir_.File("cluster.toml"), ClusterToml());
    daemons_.Write("server", "[hai]\ndata_dir = \"" + dir_.File("server") + "\"\ncluster = \"" +
                                 dir_.File("cluster.toml") + "\"\nagent_token_file = \"" +
                                 dir_.File("agent.token") + "\"\ncheckpoint_root = \"" +
                                 dir_.File("ckpt") +
                                 "\"\nheartbeat_timeout_ms = 2500\nheartbeat_interval_ms = 200\n"
                                 "schedule_interval_ms = 200\nsuspend_grace_ms = 2000\n" +
                                 // Its own masters' ports: another platform on this machine (a
                                 // test beside this one) would hand out the same ones.
                                 "master_port_base = " + std::to_string(master_port_base_) + "\n" +
                                 MoreConfig("server"));
    StartServer();
    server_address_ = daemons_.ReadyField("server", "rpc");
    admin_token_ = test::ReadFileOrEmpty(dir_.File("server/admin.token"));
    admin_token_.erase(admin_token_.find_last_not_of("\n") + 1);
    ASSERT_FALSE(admin_token_.empty());
    for (int i = 0; i < Nodes(); ++i)
      StartAgent(i);
    alice_ = AddUser("alice");
    bob_ = AddUser("bob");
    // Every node reports in.
    ASSERT_TRUE(WaitUntil([&] { return CountNodes("NODE_UP") == Nodes(); }, 20s));
  }

  void TearDown() override {
    daemons_.Clear();
    // Job processes live in their own process groups (they outlive agents on purpose).
    for (int i = 0; i < Nodes(); ++i) {
      std::ifstream in(dir_.File("agent" + std::to_string(i)) + "/tasks.json");
      json tasks = json::parse(in, nullptr, false);
      if (!tasks.is_array()) continue;
      for (const json& t : tasks) {
        if (t.value("pid", -1) > 0) kill(-t.value("pid", -1), SIGKILL);
      }
    }
  }

  // (Again, at the same address: the config holds the port it bound first.)
  void StartServer() { ASSERT_TRUE(daemons_.Start("server", FF_HAI_SERVER_PATH)); }
  test::Subprocess& server() { return daemons_.proc("server"); }
  test::Subprocess& agent(int i) { return daemons_.proc("agent" + std::to_string(i)); }

  // Each node's agent has its own address (as on a cluster), all on loopback.
  static std::string AgentHost(int i) { return "127.0.0." + std::to_string(10 + i); }

  void StartAgent(int i) {
    const std::string name = "agent" + std::to_string(i);
    daemons_.WriteRaw(name,
                      "[server]\nlisten = \"" + AgentHost(i) +
                          ":0\"\n[metrics]\nenabled = false\n[agent]\nnode = \"" + NodeNames()[i] +
                          "\"\nserver = \"" + server_address_ + "\"\ntoken_file = \"" +
                          dir_.File("agent.token") + "\"\nstate_dir = \"" + dir_.File(name) +
                          "\"\ngpus = 2\nkill_grace_ms = 1000\n" + MoreConfig(NodeNames()[i]));
    ASSERT_TRUE(daemons_.Start(name, FF_HAI_AGENT_PATH));
  }

  CliResult Hai(std::vector<std::string> args, const std::string& token,
                const std::string& server = "") {
    args.insert(args.begin(), FF_HAI_PATH);
    std::map<std::string, std::string> env = cli_env_;
    env["HAI_SERVER"] = server.empty() ? server_address_ : server == " " ? "" : server;
    env["HAI_TOKEN"] = token;
    env["HOME"] = dir_.path();
    auto proc = test::Subprocess::Start(args, {.env = env, .output_dir = dir_.path()});
    EXPECT_TRUE(proc.ok()) << proc.status();
    if (!proc.ok()) return {};
    auto code = proc->Wait(60s);
    EXPECT_TRUE(code.has_value()) << "hai did not exit";
    return {code.value_or(-1), proc->Stdout(), proc->Stderr()};
  }

  std::string AddUser(const std::string& name) {
    CliResult r = Hai({"admin", "user", "add", name, "--json"}, admin_token_);
    EXPECT_EQ(r.code, 0) << r.err;
    return json::parse(r.out, nullptr, false).value("token", "");
  }

  int64_t Submit(const std::string& token, std::vector<std::string> args) {
    args.insert(args.begin(), {"submit", "--json"});
    CliResult r = Hai(args, token);
    EXPECT_EQ(r.code, 0) << r.err;
    json j = json::parse(r.out, nullptr, false);
    return j.is_object() ? std::stoll(j.value("id", "0")) : 0;
  }

  json Show(int64_t id, const std::string& token) {
    CliResult r = Hai({"show", std::to_string(id), "--json"}, token);
    EXPECT_EQ(r.code, 0) << r.err;
    return json::parse(r.out, nullptr, false);
  }

  std::string State(int64_t id, const std::string& token) {
    return Show(id, token).value("state", "?");
  }

  int CountNodes(const std::string& state) {
    CliResult r = Hai({"nodes", "--json"}, admin_token_);
    json j = json::parse(r.out, nullptr, false);
    int n = 0;
    if (j.is_object() && j.contains("nodes")) {
      for (const json& node : j["nodes"])
        n += node.value("state", "") == state;
    }
    return n;
  }

  static bool WaitUntil(const std::function<bool()>& done, std::chrono::milliseconds timeout) {
    auto until = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < until) {
      if (done()) return true;
      std::this_thread::sleep_for(100ms);
    }
    return done();
  }

  bool WaitForState(int64_t id, const std::string& token, const std::string& state,
                    std::chrono::milliseconds timeout = 30s) {
    bool ok = WaitUntil([&] { return State(id, token) == state; }, timeout);
    if (!ok) ADD_FAILURE() << "job " << id << " is " << Show(id, token).dump() << ", not " << state;
    return ok;
  }

  std::string Logs(int64_t id, const std::string& token, int rank = 0) {
    CliResult r = Hai({"logs", std::to_string(id), "--rank", std::to_string(rank)}, token);
    EXPECT_EQ(r.code, 0) << r.err;
    return r.out;
  }

  // `hai metrics --json` (rank `rank`, at most `points` records).
  json Metrics(int64_t id, const std::string& token, int rank = 0, int points = 2000,
               bool steps = false) {
    std::vector<std::string> args = {
        "metrics",  std::to_string(id),     "--rank", std::to_string(rank),
        "--points", std::to_string(points), "--json"};
    if (steps) args.push_back("--steps");
    CliResult r = Hai(args, token);
    EXPECT_EQ(r.code, 0) << r.err;
    return json::parse(r.out, nullptr, false);
  }

  test::TempDir dir_;
  std::string server_address_;
  std::map<std::string, std::string> cli_env_;  // for every `hai`
  test::Daemons daemons_{dir_};
  std::string admin_token_, alice_, bob_;
};

TEST_F(PlatformTest, GangJobRunsWithTheEnvironmentTrainingCodeExpects) {
  int64_t id =
      Submit(alice_, {"--name", "env", "--nodes", "2", "--gpus-per-node", "2", "--",
                      "echo RANK=$RANK WORLD_SIZE=$WORLD_SIZE LOCAL_RANK=$LOCAL_RANK "
                      "MASTER=$MASTER_ADDR:$MASTER_PORT NODE_ID=$HFREDUCE_NODE_ID "
                      "LISTEN=$HFREDUCE_LISTEN_HOST LEAF=$HAI_LEAF "
                      "JOB=$HAI_JOB_ID RESTARTS=$HAI_RESTART_COUNT GPUS=$CUDA_VISIBLE_DEVICES "
                      "CKPT=$HAI_CHECKPOINT_DIR; sleep 0.5"});
  ASSERT_GT(id, 0);
  ASSERT_TRUE(WaitForState(id, alice_, "SUCCEEDED"));
  json job = Show(id, alice_);
  ASSERT_EQ(job["runs"].size(), 1u);
  const json& run = job["runs"][0];
  ASSERT_EQ(run["nodes"].size(), 2u);
  EXPECT_NE(run["nodes"][0], run["nodes"][1]);
  const std::string master =
      run["master_addr"].get<std::string>() + ":" + std::to_string(run["master_port"].get<int>());
  // Rank 0's node serves the rendezvous at its agent's host; each rank listens at its own.
  const std::string node0 = run["nodes"][0];
  EXPECT_EQ(run["master_addr"], AgentHost(node0.back() - '0'));
  for (int rank = 0; rank < 2; ++rank) {
    std::string log = Logs(id, alice_, rank);
    const std::string node = run["nodes"][rank];
    EXPECT_THAT(
        log,
        HasSubstr("RANK=" + std::to_string(rank) + " WORLD_SIZE=2 LOCAL_RANK=0 MASTER=" + master +
                  " NODE_ID=" + std::to_string(rank) + " LISTEN=" + AgentHost(node.back() - '0') +
                  " LEAF=A/A-leaf JOB=" + std::to_string(id) + " RESTARTS=0 GPUS=0,1 CKPT=" +
                  dir_.File("ckpt") + "/alice/" + std::to_string(id)));
  }
  // The human views.
  CliResult ls = Hai({"ls", "-a"}, alice_);
  EXPECT_EQ(ls.code, 0);
  EXPECT_THAT(ls.out, HasSubstr("succeeded"));
  CliResult show = Hai({"show", std::to_string(id)}, alice_);
  EXPECT_THAT(show.out, HasSubstr("exit codes (rank:code): 0:0 1:0"));
}

// Each --env takes one K=V; after "--" everything is the command, its own options included.
TEST_F(PlatformTest, EnvOptionsThenACommandWithOptionsOfItsOwn) {
  int64_t id = Submit(alice_, {"--env", "A=1", "-e", "B=2 3", "--", "sh", "-c", "echo A=$A B=$B"});
  ASSERT_GT(id, 0);
  ASSERT_TRUE(WaitForState(id, alice_, "SUCCEEDED"));
  EXPECT_THAT(Logs(id, alice_), HasSubstr("A=1 B=2 3\n"));
}

TEST_F(PlatformTest, LogsFollowUntilTheJobEnds) {
  int64_t id = Submit(alice_, {"--", "for i in 1 2 3 4 5; do echo line $i; sleep 0.3; done"});
  ASSERT_TRUE(WaitForState(id, alice_, "RUNNING"));
  CliResult r = Hai({"logs", std::to_string(id), "-f"}, alice_);
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("line 1\nline 2\nline 3\nline 4\nline 5\n"));
  EXPECT_EQ(State(id, alice_), "SUCCEEDED");
}

TEST_F(PlatformTest, TimeSharingSuspendsCheckpointsAndResumes) {
  // A low-priority job on the whole cluster that sums 1..60, checkpointing when asked.
  const std::string script = R"(
import os, time, hai_job
hai_job.install_suspend_handler()
ck = os.path.join(hai_job.checkpoint_dir(), "state." + os.environ["RANK"])
step, total = (map(int, open(ck).read().split()) if os.path.exists(ck) else (0, 0))
print("start step=%d restart=%d" % (step, hai_job.restart_count()), flush=True)
while step < 60:
    step += 1
    total += step
    time.sleep(0.05)
    if hai_job.should_suspend():
        open(ck, "w").write("%d %d" % (step, total))
        print("checkpointed step=%d" % step, flush=True)
        hai_job.suspend_now()
print("result=%d" % total, flush=True)
)";
  test::WriteFile(dir_.File("train.py"), script);
  const std::string env = "PYTHONPATH=" FF_SOURCE_DIR "/platform/python";
  int64_t low = Submit(alice_, {"--priority", "1", "--nodes", "3", "--gpus-per-node", "2", "--env",
                                env, "--", "/usr/bin/python3 " + dir_.File("train.py")});
  ASSERT_TRUE(WaitForState(low, alice_, "RUNNING"));
  ASSERT_TRUE(
      WaitUntil([&] { return Logs(low, alice_).find("start step=0") != std::string::npos; }, 20s));
  // A high-priority job that does not fit next to it.
  int64_t high = Submit(bob_, {"--priority", "5", "--nodes", "2", "--gpus-per-node", "2", "--",
                               "sleep 1; echo high done"});
  ASSERT_TRUE(WaitForState(high, bob_, "SUCCEEDED"));
  ASSERT_TRUE(WaitForState(low, alice_, "SUCCEEDED", 60s));
  json job = Show(low, alice_);
  ASSERT_GE(job["runs"].size(), 2u);
  EXPECT_EQ(job["runs"][0]["end_reason"], "suspended");
  // The high job started only once the low job had left the nodes (no two jobs on one GPU).
  EXPECT_GE(std::stoll(Show(high, bob_)["runs"][0]["start_ms"].get<std::string>()),
            std::stoll(job["runs"][0]["end_ms"].get<std::string>()));
  std::string log = Logs(low, alice_, 2);
  EXPECT_THAT(log, HasSubstr("checkpointed step="));
  EXPECT_THAT(log, HasSubstr("restart=1"));
  EXPECT_THAT(log, Not(HasSubstr("start step=0 restart=1")));  // resumed, not restarted
  EXPECT_THAT(log, HasSubstr("result=1830"));                  // 1 + 2 + ... + 60
  // hai show tells why it waited: suspended for the high job, then started again.
  CliResult shown = Hai({"show", std::to_string(low)}, alice_);
  EXPECT_THAT(shown.out, HasSubstr("why it waited, over time:"));
  EXPECT_THAT(shown.out, HasSubstr("suspended for job " + std::to_string(high) + " (priority 5)"));
  EXPECT_THAT(shown.out, HasSubstr("started: run 1"));
  EXPECT_EQ(job.value("preempted_by", "0"), "0");  // cleared once it runs again
}

TEST_F(PlatformTest, AnExpectedRunTimeGivesTheJobBehindAStartEstimate) {
  int64_t first =
      Submit(alice_, {"--nodes", "3", "--gpus-per-node", "2", "--time", "1h", "--", "sleep 120"});
  ASSERT_TRUE(WaitForState(first, alice_, "RUNNING"));
  EXPECT_EQ(Show(first, alice_)["spec"].value("expected_runtime_s", ""), "3600");
  int64_t next = Submit(bob_, {"--nodes", "3", "--gpus-per-node", "2", "--", "true"});
  std::string reason;
  EXPECT_TRUE(WaitUntil(
      [&] {
        reason = Show(next, bob_).value("pending_reason", "");
        return reason.find("expected to start in") != std::string::npos;
      },
      20s))
      << reason;
  EXPECT_THAT(reason, ::testing::ContainsRegex(
                          "needs 3 nodes with 2 free GPUs; 0 are free; then, if its traffic "
                          "would crowd the uplinks, it may wait up to 1d for them under one leaf "
                          "switch; expected to start in (59m|1h), when "
                          "running jobs reach their expected run times"));
  EXPECT_THAT(Hai({"show", std::to_string(next)}, bob_).out,
              HasSubstr("why it waited, over time:"));
  EXPECT_EQ(Hai({"stop", std::to_string(next)}, bob_).code, 0);
  EXPECT_EQ(Hai({"stop", std::to_string(first)}, alice_).code, 0);
}

TEST_F(PlatformTest, DemoTrainingJobOverHFReduceSuspendsAndResumes) {
  // The C++ side of the suspend protocol (platform/include/platform/hai_job.h) in a real
  // data-parallel job: two ranks average gradients with HFReduce, agree on the epoch to stop at,
  // checkpoint and resume.
  int64_t id = Submit(
      alice_, {"--nodes", "2", "--gpus-per-node", "2", "--", FF_HAI_DEMO_TRAIN_PATH " 30 0.1"});
  ASSERT_TRUE(
      WaitUntil([&] { return Logs(id, alice_).find("epoch 3:") != std::string::npos; }, 30s));
  ASSERT_EQ(Hai({"suspend", std::to_string(id)}, alice_).code, 0);
  ASSERT_TRUE(WaitForState(id, alice_, "SUCCEEDED", 60s));
  json job = Show(id, alice_);
  ASSERT_EQ(job["runs"].size(), 2u);
  EXPECT_EQ(job["runs"][0]["end_reason"], "suspended");
  EXPECT_EQ(job["runs"][0]["exit_codes"]["0"], 0);  // it left by itself, within the grace
  std::string log = Logs(id, alice_);
  EXPECT_THAT(log, HasSubstr("; suspending"));
  EXPECT_THAT(log, Not(HasSubstr("starting at epoch 0 (restart 1)")));
  EXPECT_THAT(log, HasSubstr("(restart 1)"));
  EXPECT_THAT(log, HasSubstr("epoch 30: loss"));
  EXPECT_THAT(log, HasSubstr("trained w = 1.0"));  // converged towards (1, 2, ..., 8)

  // Rank 0 reported each epoch's loss (hai::job::Report): `hai metrics` has both runs' reports.
  json metrics = Metrics(id, alice_);
  ASSERT_TRUE(metrics.is_object()) << metrics;
  EXPECT_EQ(metrics["reported"], "30") << metrics;  // each epoch once: none lost, none twice
  EXPECT_EQ(metrics["unreadable"], "0");
  const json& records = metrics["records"];
  ASSERT_EQ(records.size(), 30u);
  EXPECT_EQ(records.front()["run"], 0);
  EXPECT_EQ(records.front()["step"], "1");
  EXPECT_EQ(records.back()["run"], 1);
  EXPECT_EQ(records.back()["step"], "30");
  EXPECT_LT(records.back()["values"]["loss"].get<double>(),
            records.front()["values"]["loss"].get<double>() / 10);
  // Each rank recorded every epoch as a step (hai::job::StepRecorder), both runs: hai metrics
  // --steps reads them, two collectives a step.
  for (int rank : {0, 1}) {
    json steps = Metrics(id, alice_, rank, 2000, /*steps=*/true);
    ASSERT_TRUE(steps.is_object()) << steps;
    EXPECT_EQ(steps["reported"], "30") << steps;
    EXPECT_EQ(steps["records"].back()["values"]["collectives"], 2) << steps;
    EXPECT_GT(steps["records"].back()["values"]["step_s"].get<double>(), 0.1) << steps;
  }
  // Rank 1 reported nothing; nobody else reads alice's; a rank the job never had is refused.
  EXPECT_EQ(Metrics(id, alice_, 1)["reported"], "0");
  CliResult other = Hai({"metrics", std::to_string(id)}, bob_);
  EXPECT_NE(other.code, 0);
  EXPECT_EQ(Hai({"metrics", std::to_string(id), "--rank", "4"}, alice_).code, 1);
}

// What a job writes to its metrics file that is not a record is skipped and counted; the records
// around it are read, and a long series comes back thinned to the points asked for, the last kept.
TEST_F(PlatformTest, MetricsAreReadFromTheJobsRecordsAndWhatIsNotOneIsSkipped) {
  int64_t id =
      Submit(alice_, {"--",
                      "i=0; while [ $i -lt 5000 ]; do i=$((i+1)); "
                      "echo \"{\\\"step\\\": $i, \\\"loss\\\": 1.$i}\"; done >> $HAI_METRICS_FILE; "
                      "echo 'step 5001 loss 0.1' >> $HAI_METRICS_FILE; "
                      "echo '{\"step\": 5002, \"loss\": \"low\"}' >> $HAI_METRICS_FILE"});
  ASSERT_TRUE(WaitForState(id, alice_, "SUCCEEDED"));
  json m = Metrics(id, alice_, 0, 100);
  EXPECT_EQ(m["reported"], "5000") << m.dump().substr(0, 500);
  EXPECT_EQ(m["unreadable"], "2");
  ASSERT_EQ(m["records"].size(), 100u);
  EXPECT_EQ(m["records"].front()["step"], "1");
  EXPECT_EQ(m["records"].back()["step"], "5000");
  CliResult table = Hai({"metrics", std::to_string(id), "--points", "5"}, alice_);
  ASSERT_EQ(table.code, 0) << table.err;
  EXPECT_THAT(table.out, HasSubstr("5000 records, 5 shown (spread over the run), 2 unreadable"));
  EXPECT_THAT(table.out, HasSubstr("loss"));
  EXPECT_THAT(table.out, HasSubstr(" 5000 "));
  EXPECT_EQ(Hai({"metrics", std::to_string(id), "--points", "-1"}, alice_).code, 2);
}

TEST_F(PlatformTest, CliReadsServerAndTokenFromItsConfigFile) {
  std::filesystem::create_directories(dir_.File(".hai"));
  test::WriteFile(dir_.File(".hai/config.toml"),
                  "server = \"" + server_address_ + "\"\ntoken = \"" + alice_ + "\"\n");
  CliResult r = Hai({"whoami"}, "", " ");  // HAI_SERVER / HAI_TOKEN empty: the file decides
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, "alice\n");
  test::WriteFile(dir_.File(".hai/config.toml"), "sever = \"typo\"\n");
  r = Hai({"whoami"}, "", " ");
  EXPECT_EQ(r.code, 1);
  EXPECT_THAT(r.err, HasSubstr("sever"));
}

TEST_F(PlatformTest, AJobThatIgnoresTheSignalIsKilledAfterTheGrace) {
  int64_t id = Submit(alice_, {"--", "trap '' USR1; echo started; sleep 60"});
  ASSERT_TRUE(
      WaitUntil([&] { return Logs(id, alice_).find("started") != std::string::npos; }, 20s));
  auto asked = std::chrono::steady_clock::now();
  CliResult r = Hai({"suspend", std::to_string(id)}, alice_);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("suspending"));
  // Suspended once killed; the scheduler then resumes it, since the cluster is free.
  ASSERT_TRUE(
      WaitUntil([&] { return Show(id, alice_)["runs"][0].value("end_ms", "0") != "0"; }, 20s));
  auto took = std::chrono::steady_clock::now() - asked;
  EXPECT_GE(took, 1800ms);  // the 2 s grace, less the CLI's own start-up
  json job = Show(id, alice_);
  EXPECT_EQ(job["runs"][0]["end_reason"], "suspended");
  EXPECT_EQ(job["runs"][0]["exit_codes"]["0"], 137);  // SIGKILL
  EXPECT_EQ(Hai({"stop", std::to_string(id)}, alice_).code, 0);
  ASSERT_TRUE(WaitForState(id, alice_, "STOPPED"));
}

TEST_F(PlatformTest, LostNodeRequeuesItsJobElsewhere) {
  int64_t id = Submit(alice_, {"--gpus-per-node", "2", "--",
                               "echo \"{\\\"step\\\": $HAI_RUN, \\\"run\\\": $HAI_RUN}\" "
                               ">> $HAI_METRICS_FILE; echo on $HAI_NODE; sleep 20"});
  ASSERT_TRUE(WaitForState(id, alice_, "RUNNING"));
  std::string node = Show(id, alice_)["runs"][0]["nodes"][0];
  int agent = node.back() - '0';
  daemons_.Kill("agent" + std::to_string(agent));
  ASSERT_TRUE(WaitUntil([&] { return CountNodes("NODE_LOST") == 1; }, 20s));
  ASSERT_TRUE(WaitUntil([&] { return Show(id, alice_)["runs"].size() == 2; }, 20s));
  json job = Show(id, alice_);
  EXPECT_EQ(job["state"], "RUNNING");
  EXPECT_EQ(job["runs"][0]["end_reason"], "node " + node + " lost");
  EXPECT_NE(job["runs"][1]["nodes"][0], node);
  // Its metrics are on both nodes: the lost one is named, the other one's read.
  ASSERT_TRUE(WaitUntil([&] { return Metrics(id, alice_)["reported"] == "1"; }, 10s));
  json m = Metrics(id, alice_);
  EXPECT_EQ(m["unreachable"], json::array({node})) << m;
  EXPECT_EQ(m["records"][0]["run"], 1);
  // Back, its agent serves run 0's record again, and the two runs come in order.
  StartAgent(agent);
  ASSERT_TRUE(WaitUntil([&] { return Metrics(id, alice_)["reported"] == "2"; }, 20s));
  m = Metrics(id, alice_);
  EXPECT_EQ(m["unreachable"], json::array()) << m;
  EXPECT_EQ(m["records"][0]["run"], 0);
  EXPECT_EQ(m["records"][1]["run"], 1);
  EXPECT_EQ(Hai({"stop", std::to_string(id)}, alice_).code, 0);
  ASSERT_TRUE(WaitForState(id, alice_, "STOPPED"));
}

// An agent that stops answering with its connection still open (SIGSTOP: as when a cable is cut)
// is found lost only after heartbeat_timeout_ms; until then its node is silent and gets no new
// job, which would otherwise start there and fail once the node is found lost.
TEST_F(PlatformTest, ASilentNodeGetsNoNewJobBeforeItIsFoundLost) {
  agent(2).Signal(SIGSTOP);
  // Silent 0.4 s (two 200 ms intervals) after its last heartbeat ends, lost 2.5 s after it.
  std::this_thread::sleep_for(1500ms);
  int64_t id = Submit(alice_, {"--nodes", "3", "--", "echo on $HAI_NODE"});
  ASSERT_GT(id, 0);
  ASSERT_TRUE(WaitUntil([&] { return CountNodes("NODE_LOST") == 1; }, 20s));
  json job = Show(id, alice_);
  EXPECT_EQ(job["state"], "QUEUED");
  EXPECT_EQ(job.value("runs", json::array()).size(), 0u) << job.dump();
  agent(2).Signal(SIGCONT);
  ASSERT_TRUE(WaitForState(id, alice_, "SUCCEEDED"));
  EXPECT_EQ(Show(id, alice_)["runs"].size(), 1u);
}

// A node back from lost gets no new work until it has been heard from steadily for the heartbeat
// timeout (a link that comes back often comes back in fits).
TEST_F(PlatformTest, ANodeBackFromLostWaitsOutItsProbation) {
  agent(2).Signal(SIGSTOP);
  ASSERT_TRUE(WaitUntil([&] { return CountNodes("NODE_LOST") == 1; }, 20s));
  agent(2).Signal(SIGCONT);
  ASSERT_TRUE(WaitUntil([&] { return CountNodes("NODE_UP") == Nodes(); }, 20s));
  const int64_t back_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                              std::chrono::system_clock::now().time_since_epoch())
                              .count();
  int64_t id = Submit(alice_, {"--nodes", "3", "--", "echo on $HAI_NODE"});
  ASSERT_TRUE(WaitForState(id, alice_, "SUCCEEDED"));
  json job = Show(id, alice_);
  ASSERT_EQ(job["runs"].size(), 1u);
  // Up again at most ~0.2 s before back_ms (the polling above), so it starts 2.3 s after at least.
  EXPECT_GE(std::stoll(job["runs"][0]["start_ms"].get<std::string>()) - back_ms, 2000);
}

// hai-health on node n00 reads a kernel log file the test appends to (a recorded Xid 79 line):
// the node is drained with the error as its reason, gets no new job, and is undrained when the
// error's hold has passed; an admin's drain is left alone by health reports.
// A fault-tolerant job (--replicas): each group has its own rank numbering and master; a drained
// node's group is killed and replaced elsewhere while the other runs on; a replacement that
// keeps failing at once is replaced after a wait that doubles, not in a tight loop.
TEST_F(PlatformTest, AFaultTolerantJobsGroupsMoveOffADrainedNodeAndFailingReplacementsBackOff) {
  const std::string script =
      "echo \"group=$HAI_REPLICA_GROUP replica=$HAI_REPLICA_ID rank=$RANK world=$WORLD_SIZE "
      "master=$MASTER_ADDR:$MASTER_PORT replicas=$HAI_REPLICAS min=$HAI_MIN_REPLICAS "
      "ft=${HAI_FT_STORE:+set}\"; "
      "if [ \"$HAI_REPLICA_GROUP\" = \"$HAI_REPLICA_ID\" ]; then sleep 60; else exit 3; fi";
  int64_t id = Submit(alice_, {"--replicas", "2", "--min-replicas", "1", "--", script});
  ASSERT_TRUE(WaitForState(id, alice_, "RUNNING"));
  ASSERT_TRUE(
      WaitUntil([&] { return Logs(id, alice_, 1).find("group=1 ") != std::string::npos; }, 20s));
  // Each group is its own torch.distributed job, led from its own node.
  const json nodes = Show(id, alice_)["runs"][0]["nodes"];
  const std::string node0 = nodes[0], node1 = nodes[1];
  EXPECT_THAT(Logs(id, alice_, 0),
              HasSubstr("group=0 replica=0 rank=0 world=1 master=" + AgentHost(node0.back() - '0') +
                        ":" + std::to_string(master_port_base_) + " replicas=2 min=1 ft=set"));
  EXPECT_THAT(Logs(id, alice_, 1),
              HasSubstr("group=1 replica=1 rank=0 world=1 master=" + AgentHost(node1.back() - '0') +
                        ":" + std::to_string(master_port_base_) + " replicas=2 min=1 ft=set"));
  ASSERT_EQ(Hai({"admin", "drain", node1, "--reason", "maintenance"}, admin_token_).code, 0);
  // Replica 1 moves to the free node, where its replacements fail at once: 1, 2, 4, ... s apart.
  ASSERT_TRUE(WaitUntil(
      [&] {
        return Show(id, alice_)["runs"][0].dump().find("the next in 2 s") != std::string::npos;
      },
      20s))
      << Show(id, alice_).dump();
  std::this_thread::sleep_for(4s);
  json run = Show(id, alice_)["runs"][0];
  const std::string events = run["events"].dump();
  EXPECT_THAT(events, HasSubstr("replica 1 lost: node " + node1 +
                                " drained: maintenance; 1 of 2 replica groups go on"));
  EXPECT_THAT(events, HasSubstr("replica 1 (replacement 1) started on"));
  EXPECT_THAT(events, HasSubstr("replica 1 (replacement 1) lost: rank 2 exited with code 3"));
  EXPECT_THAT(events, Not(HasSubstr("started on " + node1)));
  // In about 5 s of failing at once: no more than 4 replacements (1 + 2 s apart, then 4).
  EXPECT_LE(run["groups"].size(), 2u + 4u) << events;
  EXPECT_EQ(State(id, alice_), "RUNNING") << "replica 0 trains on";
  CliResult shown = Hai({"show", std::to_string(id)}, alice_);
  EXPECT_THAT(shown.out, HasSubstr("replica 0: ranks 0-0 on"));
  EXPECT_THAT(shown.out, HasSubstr("lost, started"));
  EXPECT_EQ(Hai({"stop", std::to_string(id)}, alice_).code, 0);
  ASSERT_TRUE(WaitForState(id, alice_, "STOPPED"));
  EXPECT_EQ(Hai({"admin", "undrain", node1}, admin_token_).code, 0);
}

// hai-server's quorum service serves from the job record: a group of a running fault-tolerant job
// joins with the job's R and M whatever it sends (here it claims min_replicas 9, which would never
// form); a group that is not live, a job that is not fault tolerant and an unknown job are refused
// with a reason to decide by, not only text.
TEST_F(PlatformTest, TheQuorumServiceChecksGroupsAgainstTheJobRecord) {
  const int64_t id = Submit(alice_, {"--replicas", "2", "--min-replicas", "1", "--", "sleep 60"});
  ASSERT_TRUE(WaitForState(id, alice_, "RUNNING"));
  const std::string store = Show(id, alice_)["runs"][0]["ft_store"];
  ASSERT_FALSE(store.empty());
  hfreduce::StoreClient client(store, 5s);
  hfreduce::QuorumRequest r;
  r.job = std::to_string(id);
  r.replica_id = "0";
  r.replicas = 9;
  r.min_replicas = 9;
  r.join_timeout = 200ms;
  Result<hfreduce::Quorum> q = client.JoinQuorum(r, 20s);
  ASSERT_TRUE(q.ok()) << q.status();  // decided by the record's min_replicas 1 after the timeout
  ASSERT_EQ(q->members.size(), 1u);
  EXPECT_EQ(q->members[0].replica_id, "0");

  r.replica_id = "1.3";  // no such group
  q = client.JoinQuorum(r, 20s);
  ASSERT_FALSE(q.ok());
  EXPECT_EQ(q.status().code(), StatusCode::kFailedPrecondition) << q.status();
  EXPECT_EQ(q.status().reason(), "GROUP_NOT_LIVE") << q.status();
  EXPECT_EQ(q.status().detail("live"), "0,1") << q.status();

  r.job = "999999";
  q = client.JoinQuorum(r, 20s);
  EXPECT_EQ(q.status().reason(), "UNKNOWN_JOB") << q.status();
  r.job = "not-a-job-id";
  q = client.JoinQuorum(r, 20s);
  EXPECT_EQ(q.status().reason(), "UNKNOWN_JOB") << q.status();
  const int64_t gang = Submit(bob_, {"--", "sleep 60"});
  ASSERT_TRUE(WaitForState(gang, bob_, "RUNNING"));
  r.job = std::to_string(gang);
  r.replica_id = "0";
  q = client.JoinQuorum(r, 20s);
  EXPECT_EQ(q.status().reason(), "UNKNOWN_JOB") << q.status();
  EXPECT_THAT(q.status().message(), HasSubstr("is not fault tolerant"));
  EXPECT_EQ(Hai({"stop", std::to_string(id)}, alice_).code, 0);
  EXPECT_EQ(Hai({"stop", std::to_string(gang)}, bob_).code, 0);
  ASSERT_TRUE(WaitForState(id, alice_, "STOPPED"));
}

// A fault-tolerant job with room for only min_replicas of its groups starts with those (as
// torchelastic's min:max nodes do); the others start as nodes free, after the jobs queued then,
// as the replicas' first incarnations (not replacements).
TEST_F(PlatformTest, AnElasticFaultTolerantJobStartsWithTheGroupsThatFitAndGrows) {
  const int64_t first = Submit(bob_, {"--gpus-per-node", "2", "--", "sleep 600"});
  ASSERT_TRUE(WaitForState(first, bob_, "RUNNING"));
  const std::string script =
      "echo \"group=$HAI_REPLICA_GROUP replica=$HAI_REPLICA_ID rank=$RANK replicas=$HAI_REPLICAS "
      "min=$HAI_MIN_REPLICAS\"; sleep 600";
  const int64_t id = Submit(
      alice_, {"--replicas", "3", "--min-replicas", "2", "--gpus-per-node", "2", "--", script});
  ASSERT_TRUE(WaitForState(id, alice_, "RUNNING"));
  json run = Show(id, alice_)["runs"][0];
  EXPECT_EQ(run["groups"].size(), 2u) << run.dump();
  EXPECT_THAT(run["events"].dump(),
              HasSubstr("started with 2 of 3 replica groups (no room for more now, min_replicas "
                        "2); the others start as nodes free"));
  EXPECT_THAT(Hai({"show", std::to_string(id)}, alice_).out,
              HasSubstr("replica 2: not started yet (the run began without it; it starts as "
                        "nodes free)"));
  ASSERT_TRUE(
      WaitUntil([&] { return Logs(id, alice_, 1).find("group=1 ") != std::string::npos; }, 20s));
  // A job queued meanwhile comes first when bob's node frees: the group is not needed to run.
  const int64_t second = Submit(bob_, {"--gpus-per-node", "2", "--", "sleep 600"});
  std::this_thread::sleep_for(1s);
  EXPECT_EQ(State(second, bob_), "QUEUED");
  ASSERT_EQ(Hai({"stop", std::to_string(first)}, bob_).code, 0);
  ASSERT_TRUE(WaitForState(second, bob_, "RUNNING"));
  EXPECT_EQ(Show(id, alice_)["runs"][0]["groups"].size(), 2u);
  EXPECT_THAT(Show(id, alice_)["runs"][0].dump(), HasSubstr("replica 2 waits to start"));
  // Then replica 2 starts on the node bob's second job leaves, as itself (group "2"), with the
  // run's next ranks.
  ASSERT_EQ(Hai({"stop", std::to_string(second)}, bob_).code, 0);
  // (Rank 2 has no logs to ask for until its group starts.)
  ASSERT_TRUE(WaitUntil([&] { return Show(id, alice_)["runs"][0]["groups"].size() == 3u; }, 30s))
      << Show(id, alice_).dump();
  ASSERT_TRUE(
      WaitUntil([&] { return Logs(id, alice_, 2).find("group=2 ") != std::string::npos; }, 30s))
      << Show(id, alice_).dump();
  EXPECT_THAT(Logs(id, alice_, 2), HasSubstr("group=2 replica=2 rank=0 replicas=3 min=2"));
  run = Show(id, alice_)["runs"][0];
  EXPECT_EQ(run["groups"].size(), 3u);
  EXPECT_THAT(run["events"].dump(), HasSubstr("replica 2 started on"));
  EXPECT_THAT(run["events"].dump(), Not(HasSubstr("replacement")));
  EXPECT_EQ(Hai({"stop", std::to_string(id)}, alice_).code, 0);
  ASSERT_TRUE(WaitForState(id, alice_, "STOPPED"));
}

TEST_F(PlatformTest, HealthCheckFailureDrainsTheNodeUntilItPassesAgain) {
  const std::string kmsg = dir_.File("kmsg");
  test::WriteFile(kmsg, "6,1,100,-;Linux version 6.1.0\n");
  test::WriteFile(dir_.File("health.toml"),
                  "[metrics]\nenabled = false\n[health]\nnode = \"A-leaf-n00\"\nserver = \"" +
                      server_address_ + "\"\ntoken_file = \"" + dir_.File("agent.token") +
                      "\"\ninterval_ms = 200\nkernel_log = \"" + kmsg +
                      "\"\nhardware_error_hold_s = 4\nvalidator_interval_s = 0\n"
                      "min_free_disk_mib = 0\nmin_available_memory_mib = 0\n");
  auto proc = test::Subprocess::Start({FF_HAI_HEALTH_PATH, "--config", dir_.File("health.toml"),
                                       "--ready-file", dir_.File("health.ready")},
                                      {.env = {}, .output_dir = dir_.path()});
  ASSERT_TRUE(proc.ok()) << proc.status();
  test::Subprocess health = std::move(*proc);
  auto node = [&](const std::string& name) {
    json j = json::parse(Hai({"nodes", "--json"}, admin_token_).out, nullptr, false);
    for (const json& n : j.value("nodes", json::array()))
      if (n.value("name", "") == name) return n;
    return json::object();
  };
  // Healthy: reports arrive, nothing is drained.
  ASSERT_TRUE(
      WaitUntil([&] { return node("A-leaf-n00").value("health_report_ms", "0") != "0"; }, 20s))
      << health.Stderr();
  EXPECT_FALSE(node("A-leaf-n00").value("drained", false));

  // An admin drains n01 for maintenance: health reports of other nodes do not touch it.
  ASSERT_EQ(Hai({"admin", "drain", "A-leaf-n01", "--reason", "new DIMMs"}, admin_token_).code, 0);

  // The GPU falls off the bus.
  {
    std::ofstream out(kmsg, std::ios::app);
    out << "3,2,200,-;NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python, GPU has fallen off "
           "the bus.\n";
  }
  ASSERT_TRUE(WaitUntil([&] { return node("A-leaf-n00").value("drained", false); }, 10s))
      << health.Stderr();
  json n0 = node("A-leaf-n00");
  EXPECT_EQ(n0.value("drained_by", ""), "hai-health");
  EXPECT_THAT(n0.value("drain_reason", ""), HasSubstr("kernel: Xid 79 on 0000:3b:00"));
  EXPECT_THAT(n0.value("drain_reason", ""), HasSubstr("fallen off the bus"));
  CliResult listing = Hai({"nodes"}, admin_token_);
  EXPECT_THAT(listing.out, HasSubstr("drained by hai-health: health: kernel: Xid 79"));
  EXPECT_THAT(listing.out, HasSubstr("FAIL kernel"));

  // With n00 and n01 drained, a 1-node job lands on n02 and a 2-node job waits.
  int64_t one = Submit(alice_, {"--", "sleep 30"});
  ASSERT_TRUE(WaitForState(one, alice_, "RUNNING"));
  EXPECT_EQ(Show(one, alice_)["runs"][0]["nodes"][0], "A-leaf-n02");
  EXPECT_EQ(Hai({"stop", std::to_string(one)}, alice_).code, 0);
  ASSERT_TRUE(WaitForState(one, alice_, "STOPPED"));
  int64_t two = Submit(alice_, {"--nodes", "2", "--", "sleep 0.5"});
  std::this_thread::sleep_for(1s);
  EXPECT_EQ(State(two, alice_), "QUEUED");

  // The error's hold passes: n00 is undrained and the job starts; the admin's drain stands.
  ASSERT_TRUE(WaitUntil([&] { return !node("A-leaf-n00").value("drained", false); }, 15s))
      << health.Stderr();
  ASSERT_TRUE(WaitForState(two, alice_, "SUCCEEDED"));
  json run = Show(two, alice_)["runs"][0];
  EXPECT_THAT(run["nodes"].dump(), HasSubstr("A-leaf-n00"));
  EXPECT_THAT(run["nodes"].dump(), Not(HasSubstr("A-leaf-n01")));
  json n1 = node("A-leaf-n01");
  EXPECT_TRUE(n1.value("drained", false));
  EXPECT_EQ(n1.value("drained_by", ""), "admin");
  EXPECT_EQ(n1.value("drain_reason", ""), "new DIMMs");
  health.Signal(SIGTERM);
  EXPECT_EQ(health.Wait(10s), 0) << health.Stderr();
}

TEST_F(PlatformTest, AgentRestartAdoptsItsJobsWithoutStartingThemTwice) {
  int64_t id = Submit(alice_, {"--", "echo started; sleep 3; echo finished"});
  ASSERT_TRUE(
      WaitUntil([&] { return Logs(id, alice_).find("started") != std::string::npos; }, 20s));
  std::string node = Show(id, alice_)["runs"][0]["nodes"][0];
  int agent = node.back() - '0';
  daemons_.Kill("agent" +
                std::to_string(agent));  // the job's processes stay (their own process group)
  StartAgent(agent);  // back before the heartbeat timeout: the node is never lost
  ASSERT_TRUE(WaitForState(id, alice_, "SUCCEEDED"));
  json job = Show(id, alice_);
  EXPECT_EQ(job["runs"].size(), 1u);
  EXPECT_EQ(job["runs"][0]["exit_codes"]["0"], 0);  // its real exit code, learnt after adoption
  std::string log = Logs(id, alice_);
  EXPECT_EQ(log.find("started"), log.rfind("started"));  // started once
  EXPECT_THAT(log, HasSubstr("finished"));
}

TEST_F(PlatformTest, ServerCrashLosesNothingAndJobsKeepRunning) {
  ASSERT_EQ(Hai({"admin", "drain", "A-leaf-n02", "--reason", "bad DIMM"}, admin_token_).code, 0);
  int64_t id = Submit(alice_, {"--", "sleep 3; echo finished"});
  ASSERT_TRUE(WaitForState(id, alice_, "RUNNING"));
  json before = Show(id, alice_);
  server().Signal(SIGKILL);
  server().Wait(5s);
  StartServer();
  json after = Show(id, alice_);  // alice's token still works: users survived
  EXPECT_EQ(after["id"], before["id"]);
  EXPECT_EQ(after["spec"], before["spec"]);
  EXPECT_EQ(after["runs"][0]["nodes"], before["runs"][0]["nodes"]);
  ASSERT_TRUE(WaitForState(id, alice_, "SUCCEEDED"));  // it kept running and was not restarted
  EXPECT_EQ(Show(id, alice_)["runs"].size(), 1u);
  EXPECT_THAT(Logs(id, alice_), HasSubstr("finished"));
  CliResult nodes = Hai({"nodes", "--tree"}, admin_token_);
  EXPECT_THAT(nodes.out, HasSubstr("drained by admin: bad DIMM"));
}

TEST_F(PlatformTest, UsersSeeAndChangeOnlyTheirOwnJobs) {
  int64_t id = Submit(alice_, {"--", "sleep 20"});
  for (const std::vector<std::string>& verb :
       {std::vector<std::string>{"show"}, {"stop"}, {"suspend"}, {"logs"}}) {
    std::vector<std::string> args = verb;
    args.push_back(std::to_string(id));
    CliResult r = Hai(args, bob_);
    EXPECT_EQ(r.code, 1) << verb[0];
    EXPECT_EQ(r.err, "hai: no job " + std::to_string(id) + "\n") << verb[0];
  }
  CliResult ls = Hai({"ls", "--json"}, bob_);
  EXPECT_THAT(ls.out, Not(HasSubstr("\"alice\"")));
  EXPECT_EQ(Hai({"ls", "--all-users"}, bob_).code, 1);
  EXPECT_EQ(Hai({"admin", "user", "add", "mallory"}, bob_).err, "hai: only admins may add users\n");
  CliResult wrong = Hai({"ls"}, "hai_0000");
  EXPECT_EQ(wrong.code, 1);
  EXPECT_EQ(wrong.err, "hai: hai-server refused the token: invalid token\n");
  CliResult none = Hai({"ls"}, "");
  EXPECT_THAT(none.err, HasSubstr("no token"));
  CliResult away = Hai({"ls"}, alice_, "127.0.0.1:1");
  EXPECT_EQ(away.code, 1);
  EXPECT_THAT(away.err, HasSubstr("hai: cannot reach hai-server at 127.0.0.1:1"));
  // Tokens are never logged.
  EXPECT_THAT(server().Stderr(), Not(HasSubstr(alice_)));
  EXPECT_THAT(server().Stderr(), Not(HasSubstr(admin_token_)));
  EXPECT_EQ(Hai({"stop", std::to_string(id)}, alice_).code, 0);
}

TEST_F(PlatformTest, BadSubmissionsAreRefusedAndCreateNothing) {
  struct Case {
    std::vector<std::string> args;
    std::string error;
  };
  const std::string long_name(200, 'x');
  std::vector<Case> cases = {
      {{"--nodes", "0", "--", "true"}, "nodes must be at least 1 (got 0)"},
      {{"--nodes", "-2", "--", "true"}, "nodes must be at least 1 (got -2)"},
      {{"--nodes", "9", "--", "true"}, "asks for 9 nodes; the cluster has 3"},
      {{"--gpus-per-node", "3", "--", "true"}, "gpus per node must be 1..2 (got 3"},
      {{"--", ""}, "the command is empty"},
      {{"--priority", "9", "--", "true"}, "unknown priority 9"},
      {{"--name", long_name, "--", "true"}, "the name is longer than 128 bytes"},
      {{"--env", "HAI_JOB_ID=7", "--", "true"}, "HAI_JOB_ID is set by the platform"},
      {{"--workdir", "relative", "--", "true"}, "must be an absolute path"},
      {{"--env", "1X=7", "--", "true"}, "environment variable name '1X' is not valid"},
      {{"--env", "A-B=7", "--", "true"}, "environment variable name 'A-B' is not valid"},
      {{"--replicas", "-1", "--", "true"}, "replicas must be 0 (one gang) or 1..1024 (got -1)"},
      {{"--replicas", "2", "--min-replicas", "3", "--", "true"},
       "min replicas must be 1..replicas, and only with replicas (got 3 of 2)"},
      {{"--min-replicas", "1", "--", "true"}, "only with replicas (got 1 of 0)"},
      {{"--replicas", "2", "--nodes", "2", "--", "true"},
       "asks for 4 nodes (2 replica groups of 2); the cluster has 3"},
  };
  for (const Case& c : cases) {
    std::vector<std::string> args = c.args;
    args.insert(args.begin(), "submit");
    CliResult r = Hai(args, alice_);
    EXPECT_EQ(r.code, 1) << c.error;
    EXPECT_THAT(r.err, HasSubstr(c.error));
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  }
  CliResult bad_time = Hai({"submit", "--time", "soon", "--", "true"}, alice_);
  EXPECT_EQ(bad_time.code, 2);
  EXPECT_THAT(bad_time.err, HasSubstr("--time 'soon': give a duration like 90s, 30m, 2h or 1h30m"));
  CliResult ls = Hai({"ls", "-a", "--json"}, alice_);
  EXPECT_EQ(json::parse(ls.out, nullptr, false).value("jobs", json::array()).size(), 0u);
  EXPECT_EQ(Hai({"show", "abc"}, alice_).code, 2);

  for (const std::string& bad :
       std::vector<std::string>{"Carol", "9lives", "a b", "x/y", std::string(33, 'a')}) {
    CliResult r = Hai({"admin", "user", "add", bad}, admin_token_);
    EXPECT_EQ(r.code, 1) << bad;
    EXPECT_THAT(r.err, HasSubstr("user names are 1-32 of a-z")) << bad;
  }
  EXPECT_EQ(Hai({"admin", "user", "add", "c-3_po"}, admin_token_).code, 0);
}

// A cluster that runs TLS (common/tls.h), with the certificates deploy/make-certs.sh makes: each
// node's daemons name its certificate in [tls]; users' `hai` has only the authority.
class SecurePlatformTest : public PlatformTest {
 protected:
  void SetUp() override {
    std::string nodes = "server=127.0.0.1";
    for (int i = 0; i < Nodes(); ++i)
      nodes += " " + NodeNames()[i] + "=" + AgentHost(i);
    const std::string cmd = std::string(FF_SOURCE_DIR) + "/deploy/make-certs.sh " +
                            dir_.File("tls") + " " + nodes + " > /dev/null";
    ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
    cli_env_["FF_TLS_CA_FILE"] = dir_.File("tls/ca.pem");
    PlatformTest::SetUp();
  }
  std::string MoreConfig(const std::string& who) const override {
    return "[tls]\nca_file = \"" + dir_.File("tls/ca.pem") + "\"\ncert_file = \"" +
           dir_.File("tls/" + who + ".pem") + "\"\nkey_file = \"" +
           dir_.File("tls/" + who + ".key") + "\"\n";
  }
};

TEST_F(SecurePlatformTest, EveryCallIsOverTlsAndJobsTalkOverTheirNodesCertificates) {
  // SetUp's nodes reported in over TLS (agents to hai-server), and `hai` reached it. A training
  // job over HFReduce: rank 0 serves the rendezvous store with its node's certificate, rank 1
  // calls it with its own (FF_TLS_* from its agent); `hai logs` comes from the agents through
  // hai-server, which shows its certificate.
  int64_t id = Submit(alice_, {"--nodes", "2", "--gpus-per-node", "2", "--",
                               "echo cert=$FF_TLS_CERT_FILE; " FF_HAI_DEMO_TRAIN_PATH " 5 0.1"});
  ASSERT_GT(id, 0);
  ASSERT_TRUE(WaitForState(id, alice_, "SUCCEEDED", 60s));
  const json run = Show(id, alice_)["runs"][0];
  const std::string node1 = run["nodes"][1];
  const std::string log1 = Logs(id, alice_, 1);
  EXPECT_THAT(log1, HasSubstr("cert=" + dir_.File("tls/" + node1 + ".pem")));
  const std::string log0 = Logs(id, alice_);
  EXPECT_THAT(log0, HasSubstr("epoch 5: loss"));
  // (rank 0's rendezvous store, from common/rpc_server.cc's line)
  EXPECT_THAT(log0, testing::ContainsRegex("rpc server listening on [0-9.:]+ \\(TLS\\)"));
  EXPECT_THAT(server().Stderr() + server().Stdout(), HasSubstr("(TLS)"));

  // Without the authority, `hai` speaks plain gRPC, which the server does not answer; with a
  // file that is not one, it says so and calls nothing.
  cli_env_.erase("FF_TLS_CA_FILE");
  CliResult plain = Hai({"ls"}, alice_);
  EXPECT_NE(plain.code, 0);
  EXPECT_THAT(plain.err, HasSubstr("cannot reach hai-server"));
  cli_env_["FF_TLS_CA_FILE"] = dir_.File("tls/server.key");
  CliResult bad = Hai({"ls"}, alice_);
  EXPECT_EQ(bad.code, 2);
  EXPECT_THAT(bad.err, HasSubstr("holds no PEM certificate"));
  // Another cluster's authority does not vouch for this server.
  const std::string other = std::string(FF_SOURCE_DIR) + "/deploy/make-certs.sh " +
                            dir_.File("other") + " x=127.0.0.1 > /dev/null";
  ASSERT_EQ(std::system(other.c_str()), 0);
  cli_env_["FF_TLS_CA_FILE"] = dir_.File("other/ca.pem");
  EXPECT_NE(Hai({"ls"}, alice_).code, 0);
}

// hai-server on a disk that fills up: what it cannot write durably it neither acknowledges nor
// keeps serving. A new job is refused with the cause; a rank's exit that cannot be recorded stops
// the server (exit 1, the cause on stderr) instead of living on in memory only; once there is room
// again a restarted server learns the exit from the agent, which kept reporting it.
class PlatformFullDiskTest : public PlatformTest {
 protected:
  void SetUp() override {
    ASSERT_EQ(geteuid(), 0u)
        << "mounts a small tmpfs under hai-server's data: run as root (CI does)";
    ASSERT_EQ(mkdir(dir_.File("server").c_str(), 0700), 0);
    ASSERT_EQ(mount("tmpfs", dir_.File("server").c_str(), "tmpfs", 0, "size=16m"), 0)
        << strerror(errno);
    mounted_ = true;
    PlatformTest::SetUp();
  }
  void TearDown() override {
    PlatformTest::TearDown();
    if (mounted_) umount2(dir_.File("server").c_str(), MNT_DETACH);
  }
  // Fills the data directory's file system; returns the filler's path.
  std::string Fill() { return test::FillFileSystem(dir_.File("server")); }
  bool mounted_ = false;
};

TEST_F(PlatformFullDiskTest, WhatCannotBeWrittenIsNeitherAcknowledgedNorServedFromMemory) {
  const std::string flag = dir_.File("go");
  int64_t id = Submit(alice_, {"--name", "waits", "--", "sh", "-c",
                               "while [ ! -e " + flag + " ]; do sleep 0.1; done"});
  ASSERT_GT(id, 0);
  ASSERT_TRUE(WaitUntil([&] { return State(id, alice_) == "RUNNING"; }, 20s)) << State(id, alice_);
  const std::string filler = Fill();
  // RocksDB's log has the rest of its last page: small writes fit there until it is used up.
  CliResult add;
  int added = 0;
  for (; added < 500; ++added) {
    add = Hai({"admin", "user", "add", "u" + std::to_string(added)}, admin_token_);
    if (add.code != 0) break;
  }
  EXPECT_EQ(add.code, 1) << "the disk never filled up";
  EXPECT_THAT(add.err, HasSubstr("No space left on device")) << add.err;
  EXPECT_EQ(std::count(add.err.begin(), add.err.end(), '\n'), 1) << add.err;

  CliResult refused = Hai({"submit", "--", "true"}, alice_);
  EXPECT_EQ(refused.code, 1);
  EXPECT_THAT(refused.err, HasSubstr("No space left on device")) << refused.err;

  test::WriteFile(flag, "");  // the job's rank exits 0; hai-server cannot record it
  auto code = server().Wait(30s);
  ASSERT_TRUE(code.has_value()) << "hai-server kept serving an exit it could not write";
  EXPECT_EQ(*code, 1) << server().Stderr();
  EXPECT_THAT(server().Stderr(), HasSubstr("could not write job " + std::to_string(id)));
  EXPECT_THAT(server().Stderr(), HasSubstr("stopped so that a restart serves what is on disk"));

  ASSERT_EQ(unlink(filler.c_str()), 0);
  StartServer();
  EXPECT_TRUE(WaitUntil([&] { return State(id, alice_) == "SUCCEEDED"; }, 30s))
      << State(id, alice_);
  // The refused submission and user left nothing behind; the acknowledged users are there.
  CliResult ls = Hai({"ls", "-a", "--json"}, alice_);
  EXPECT_EQ(json::parse(ls.out, nullptr, false).value("jobs", json::array()).size(), 1u);
  CliResult users = Hai({"admin", "user", "ls", "--json"}, admin_token_);
  const std::string users_out = users.out;
  if (added > 0) {
    EXPECT_THAT(users_out, HasSubstr("\"u" + std::to_string(added - 1) + "\""));
  }
  EXPECT_THAT(users_out, ::testing::Not(HasSubstr("\"u" + std::to_string(added) + "\"")));
}

// ---- one scheduler: hai-server and hai-sim -----------------------------------------------------

constexpr char kTwoLeaves[] = R"(
name = "two-leaves"
node_link_gbps = 200
cross_zone_gbps = 200
[[zones]]
name = "A"
  [[zones.leaves]]
  name = "L"          # L00 and L01, two nodes each
  count = 2
  nodes = 2
  gpus_per_node = 2
  uplink_gbps = 200
  cpus_per_node = 8
  memory_gib = 16
)";

// hai-server and hai-sim decide the same placements for the same cluster and queue: both run the
// scheduler library with its defaults (congestion-aware placement, its locality wait and
// performance model) on jobs they describe alike (an allreduce job sends half its NIC's rate).
// The queue: a 2-node job (a) that takes a leaf and ends; a long 1-node job (b), which lands in
// the other leaf; a 1-node job (c) in the first leaf; then a 2-node allreduce job of an hour (d),
// which can start at once only across the two leaves, its traffic on both uplinks.
class PlacementAgreementTest : public PlatformTest {
 protected:
  std::string ClusterToml() const override { return kTwoLeaves; }
  std::vector<std::string> NodeNames() const override {
    return {"L00-n00", "L00-n01", "L01-n00", "L01-n01"};
  }

  struct Placed {
    std::vector<std::string> nodes;  // where it first ran
    bool waited = false;             // held although it could have started across leaves
  };

  // hai-sim's replay of TRACE (ITP format: id,submit,duration,gpus) on the same cluster, every
  // multi-node job an allreduce: each job's first placement, in trace order.
  std::vector<Placed> Simulate(const std::string& trace) {
    const std::string path = dir_.File("trace.csv");
    test::WriteFile(path, "job_id,submission_time,duration,num_gpu\n" + trace);
    const std::string out = dir_.File("sim");
    auto proc = test::Subprocess::Start(
        {FF_HAI_SIM_PATH, "--trace", path, "--cluster", dir_.File("cluster.toml"), "--policies",
         "congestion-aware", "--pipeline-share", "0", "--out", out},
        {.env = {}, .output_dir = dir_.path()});
    EXPECT_TRUE(proc.ok()) << proc.status();
    if (!proc.ok()) return {};
    EXPECT_EQ(proc->Wait(60s).value_or(-1), 0) << proc->Stderr();
    std::ifstream in(out + "/jobs-congestion-aware.csv");
    std::vector<Placed> placed;
    std::string line;
    std::getline(in, line);
    EXPECT_EQ(line, "job,gpus,submit,first_start,finish,preemptions,waited,first_nodes");
    while (std::getline(in, line)) {
      std::vector<std::string> fields;
      std::stringstream ss(line);
      for (std::string f; std::getline(ss, f, ',');)
        fields.push_back(f);
      if (fields.size() == 7) fields.emplace_back();
      EXPECT_EQ(fields.size(), 8u) << line;
      if (fields.size() != 8) return {};
      Placed p;
      std::stringstream nodes(fields[7]);
      for (std::string n; std::getline(nodes, n, ';');)
        p.nodes.push_back(n);
      p.waited = std::stoll(fields[3]) > std::stoll(fields[2]);
      placed.push_back(std::move(p));
    }
    return placed;
  }

  std::vector<std::string> NodesOf(int64_t id) {
    json job = Show(id, alice_);
    std::vector<std::string> nodes;
    if (job.contains("runs") && !job["runs"].empty()) {
      for (const json& n : job["runs"][0]["nodes"])
        nodes.push_back(n.get<std::string>());
    }
    return nodes;
  }

  // On the server, in turn, each once the one before runs: a (two nodes, a few seconds: a whole
  // leaf), b and c (one node each: the other leaf), then, a done, e (one node, expected to run
  // e_time: a's leaf), and c stopped. One node is then free in each leaf. Returns {a, b, c, e}.
  std::vector<int64_t> Prepare(const std::string& e_time) {
    auto submit = [&](std::vector<std::string> args) {
      int64_t id = Submit(alice_, args);
      EXPECT_TRUE(WaitForState(id, alice_, "RUNNING"));
      return id;
    };
    int64_t a = submit({"--nodes", "2", "--gpus-per-node", "2", "--time", "10s", "--", "sleep 3"});
    int64_t b =
        submit({"--nodes", "1", "--gpus-per-node", "2", "--time", "28h", "--", "sleep 300"});
    int64_t c =
        submit({"--nodes", "1", "--gpus-per-node", "2", "--time", "10s", "--", "sleep 300"});
    EXPECT_TRUE(WaitForState(a, alice_, "SUCCEEDED"));
    int64_t e =
        submit({"--nodes", "1", "--gpus-per-node", "2", "--time", e_time, "--", "sleep 300"});
    EXPECT_EQ(Hai({"stop", std::to_string(c)}, alice_).code, 0);
    EXPECT_TRUE(WaitUntil([&] { return State(c, alice_) != "RUNNING"; }, 20s));
    return {a, b, c, e};
  }
};

// The same queue in hai-sim: c ends (is stopped) after e starts and before d arrives.
std::string Trace(int e_duration) {
  return "a,0,3,4\n"
         "b,1,100800,2\n"
         "c,2,10,2\n"
         "e,5," +
         std::to_string(e_duration) +
         ",2\n"
         "d,14,3600,4\n";
}

// A leaf is about to free (e is expected to end in 40 s) and spreading d would cost far more (an
// hour's run with its traffic on shared uplinks): both hold d, and start it on e's leaf.
TEST_F(PlacementAgreementTest, ALoadedClusterWaitsForALeafAboutToFreeInBoth) {
  const std::vector<Placed> sim = Simulate(Trace(40));
  ASSERT_EQ(sim.size(), 5u);
  std::vector<int64_t> ids = Prepare("40s");
  ASSERT_FALSE(HasFailure());
  EXPECT_NE(NodesOf(ids[1])[0].substr(0, 3), NodesOf(ids[3])[0].substr(0, 3))
      << "b and e should be in different leaves, so that d could start at once across them";
  int64_t d =
      Submit(alice_, {"--nodes", "2", "--gpus-per-node", "2", "--time", "1h", "--", "sleep 1"});
  std::string reason;
  EXPECT_TRUE(WaitUntil(
      [&] {
        reason = Show(d, alice_).value("pending_reason", "");
        return reason.find("a leaf is expected to free in") != std::string::npos;
      },
      20s))
      << reason;
  EXPECT_EQ(State(d, alice_), "QUEUED");
  // e ends early (stopped): its leaf frees, and d starts there at once.
  EXPECT_EQ(Hai({"stop", std::to_string(ids[3])}, alice_).code, 0);
  ASSERT_TRUE(WaitUntil([&] { return !NodesOf(d).empty(); }, 30s));
  ids.push_back(d);
  for (std::size_t j = 0; j < ids.size(); ++j)
    EXPECT_EQ(NodesOf(ids[j]), sim[j].nodes) << "job "
                                             << "abced"[j];
  EXPECT_TRUE(sim[4].waited);
  EXPECT_EQ(Hai({"stop", std::to_string(ids[1])}, alice_).code, 0);
}

// No leaf is expected to free for a day: both start d at once, across the leaves.
TEST_F(PlacementAgreementTest, AQuietClusterStartsASpreadableJobAtOnceInBoth) {
  const std::vector<Placed> sim = Simulate(Trace(100800));
  ASSERT_EQ(sim.size(), 5u);
  std::vector<int64_t> ids = Prepare("28h");
  ASSERT_FALSE(HasFailure());
  int64_t d =
      Submit(alice_, {"--nodes", "2", "--gpus-per-node", "2", "--time", "1h", "--", "sleep 1"});
  ASSERT_TRUE(WaitUntil([&] { return !NodesOf(d).empty(); }, 10s))
      << Show(d, alice_).value("pending_reason", "");
  ids.push_back(d);
  for (std::size_t j = 0; j < ids.size(); ++j)
    EXPECT_EQ(NodesOf(ids[j]), sim[j].nodes) << "job "
                                             << "abced"[j];
  EXPECT_FALSE(sim[4].waited);
  const std::vector<std::string> spread = NodesOf(d);
  ASSERT_EQ(spread.size(), 2u);
  EXPECT_NE(spread[0].substr(0, 3), spread[1].substr(0, 3)) << "d should span both leaves";
  EXPECT_EQ(Hai({"stop", std::to_string(ids[1])}, alice_).code, 0);
  EXPECT_EQ(Hai({"stop", std::to_string(ids[3])}, alice_).code, 0);
}

}  // namespace
}  // namespace ff
