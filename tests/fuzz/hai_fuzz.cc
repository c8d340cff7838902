// Fuzz target: hai-server's request handlers (every method of the Hai service: Submit, ListJobs,
// GetJob, StopJob, SuspendJob, ReadLogs, ListNodes, WhoAmI, AddUser, ListUsers, DrainNode,
// Heartbeat, ReportHealth) as raw request bytes through its real gRPC server, over its RocksDB in
// a temporary directory, on a small cluster (2 leaves x 2 nodes x 8 GPUs). A call's flags pick
// its token: none, the admin's, a researcher's, the agents', or a wrong one. The scheduling pass
// (Tick) runs after every call, so fuzzed jobs are placed, and agents' fuzzed reports end them.
//
// After each input:
//   - no durable write failed (the server would have stopped);
//   - every job's state agrees with its runs (an active job has one open run, a queued or ended
//     one none) and no GPU of a node is handed to two open runs;
//   - every 32 inputs the server is reopened from its directory and has every job (id, user,
//     state, runs, stop request), user and drain it had acknowledged.
// A fresh directory every 1024 inputs. Heartbeat timeouts are short (500 ms) so nodes are lost
// too.
#include <spdlog/spdlog.h>

#include <memory>
#include <set>
#include <sstream>

#include "grpc_fuzz.h"
#include "persistent_fixture.h"
#include "platform/server.h"
#include "platform/tokens.h"

namespace {

using namespace ff;
using namespace ff::platform;

const std::vector<std::string> kMethods = {
    "/hai.Hai/Submit",      "/hai.Hai/ListJobs",  "/hai.Hai/GetJob",    "/hai.Hai/StopJob",
    "/hai.Hai/SuspendJob",  "/hai.Hai/ReadLogs",  "/hai.Hai/ListNodes", "/hai.Hai/WhoAmI",
    "/hai.Hai/AddUser",     "/hai.Hai/ListUsers", "/hai.Hai/DrainNode", "/hai.Hai/Heartbeat",
    "/hai.Hai/ReportHealth"};

constexpr const char* kCluster = R"(name = "fuzz"
node_link_gbps = 200
cross_zone_gbps = 200
[[zones]]
name = "A"
  [[zones.leaves]]
  name = "leaf"
  count = 2
  nodes = 2
  gpus_per_node = 8
  cpus_per_node = 32
  memory_gib = 128
  uplink_gbps = 400
)";

enum Caller { kNone, kAdmin, kResearcher, kAgent, kWrongToken, kCallers };

struct Fixture {
  std::string dir;
  std::unique_ptr<HaiServer> server;
  std::unique_ptr<RpcServer> rpc;
  std::shared_ptr<grpc::Channel> channel;
  std::string token[kCallers];
  int inputs = 0;

  std::multimap<std::string, std::string> As(int caller) const {
    if (token[caller].empty()) return {};
    return {{"authorization", "Bearer " + token[caller]}};
  }

  void Open() {
    rpc.reset();
    if (server) server->Stop();
    server.reset();
    HaiOptions o;
    o.data_dir = dir + "/data";
    o.cluster = dir + "/cluster.toml";
    o.agent_token_file = dir + "/agent.token";
    o.checkpoint_root = dir + "/checkpoints";
    o.heartbeat_timeout_ms = 500;
    o.suspend_grace_ms = 200;
    auto created = HaiServer::Create(o, nullptr);
    if (!created.ok()) fuzz::Fail("cannot open hai-server: " + created.status().message());
    server = std::move(*created);
    auto started = RpcServer::Start({}, {server.get()});
    if (!started.ok()) fuzz::Fail("cannot serve hai-server: " + started.status().message());
    rpc = std::move(*started);
    channel = rpc->InProcessChannel();
  }

  void Reset() {
    rpc.reset();
    if (server) server->Stop();
    server.reset();
    if (!dir.empty()) std::filesystem::remove_all(dir);
    dir = fuzz::MakeScratchDir("hai-server-fuzz");
    std::ofstream(dir + "/cluster.toml") << kCluster;
    Open();
    token[kAdmin] = *ReadTokenFile(dir + "/data/admin.token", false);
    token[kAgent] = *ReadTokenFile(dir + "/agent.token", false);
    token[kWrongToken] = "not-a-token";
    hai::AddUserRequest add;
    add.set_name("alice");
    add.set_node_quota(3);
    hai::AddUserResponse added;
    grpc::Status st = fuzz::Call(channel.get(), kMethods[8], add, &added, As(kAdmin));
    if (!st.ok()) fuzz::Fail("AddUser: " + st.error_message());
    token[kResearcher] = added.token();
  }

  hai::ListJobsResponse Jobs() {
    hai::ListJobsRequest all;
    all.set_all_users(true);
    all.set_include_finished(true);
    hai::ListJobsResponse jobs;
    grpc::Status st = fuzz::Call(channel.get(), kMethods[1], all, &jobs, As(kAdmin));
    if (!st.ok()) fuzz::Fail("ListJobs: " + st.error_message());
    return jobs;
  }

  // What must survive a restart, as text.
  std::string Durable() {
    std::ostringstream s;
    const hai::ListJobsResponse jobs = Jobs();
    for (const hai::Job& j : jobs.jobs()) {
      s << "job " << j.id() << " " << j.user() << " " << hai::JobState_Name(j.state()) << " runs "
        << j.runs_size() << (j.stop_requested() ? " stop" : "") << "\n";
    }
    hai::ListUsersResponse users;
    fuzz::Call(channel.get(), kMethods[9], hai::ListUsersRequest{}, &users, As(kAdmin));
    for (const hai::User& u : users.users())
      s << "user " << u.name() << (u.admin() ? " admin" : "") << " quota " << u.node_quota()
        << "\n";
    hai::ListNodesResponse nodes;
    fuzz::Call(channel.get(), kMethods[6], hai::ListNodesRequest{}, &nodes, As(kAdmin));
    for (const hai::Node& n : nodes.nodes()) {
      if (n.drained()) s << "drained " << n.name() << " by " << n.drained_by() << "\n";
    }
    return s.str();
  }
};

Fixture& Get() {
  return ff::fuzz::PersistentFixture<Fixture>(1024);
}

bool Active(hai::JobState s) {
  return s == hai::RUNNING || s == hai::SUSPENDING;
}

void CheckJobs(const hai::ListJobsResponse& jobs) {
  std::set<std::pair<std::string, std::string>> gpus_in_use;  // (node, gpu)
  for (const hai::Job& j : jobs.jobs()) {
    const std::string name =
        "job " + std::to_string(j.id()) + " (" + hai::JobState_Name(j.state()) + ")";
    const bool open = j.runs_size() > 0 && j.runs(j.runs_size() - 1).end_ms() == 0;
    if (Active(j.state()) != open)
      fuzz::Fail(name + (open ? " has an open run" : " has no open run"));
    if (!open) continue;
    const hai::Run& run = j.runs(j.runs_size() - 1);
    for (int i = 0; i < run.nodes_size() && i < run.gpus_size(); ++i) {
      std::stringstream list(run.gpus(i));
      for (std::string gpu; std::getline(list, gpu, ',');) {
        if (!gpus_in_use.insert({run.nodes(i), gpu}).second)
          fuzz::Fail(name + ": GPU " + gpu + " of " + run.nodes(i) + " is given twice");
      }
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Fixture& f = Get();
  for (const fuzz::FuzzCall& c : fuzz::SplitCalls(data, size)) {
    fuzz::Invoke(f.channel.get(), kMethods[c.method % kMethods.size()], c.messages,
                 f.As(c.flags % kCallers), std::chrono::milliseconds(50));
    f.server->Tick();
  }
  if (!f.server->WriteFailure().ok())
    fuzz::Fail("a durable write failed: " + f.server->WriteFailure().message());
  CheckJobs(f.Jobs());
  if (f.inputs % 32 == 31) {
    const std::string before = f.Durable();
    f.Open();
    const std::string after = f.Durable();
    if (after != before)
      fuzz::Fail("reopened hai-server lost what it had:\n--- before\n" + before + "--- after\n" +
                 after);
  }
  return 0;
}

extern "C" void FuzzWriteSeeds(const char* dir) {
  using fuzz::FuzzCall;
  auto heartbeat = [](const std::string& node, std::vector<hai::TaskStatus> tasks = {}) {
    hai::HeartbeatRequest h;
    h.set_node(node);
    h.set_gpus(8);
    h.set_agent_address("127.0.0.1:1");
    for (auto& t : tasks)
      *h.add_tasks() = t;
    return FuzzCall{11, kAgent, {h.SerializeAsString()}};
  };
  auto submit = [](int nodes, int gpus, int priority) {
    hai::SubmitRequest s;
    s.mutable_spec()->set_name("train");
    s.mutable_spec()->set_command("python train.py");
    s.mutable_spec()->set_nodes(nodes);
    s.mutable_spec()->set_gpus_per_node(gpus);
    s.mutable_spec()->set_priority(priority);
    (*s.mutable_spec()->mutable_env())["SEED"] = "1";
    return s.SerializeAsString();
  };
  auto job = [](int64_t id) {
    hai::JobRef r;
    r.set_id(id);
    return r.SerializeAsString();
  };
  hai::TaskStatus exited;
  exited.set_job_id(1);
  exited.set_run(1);
  exited.set_rank(0);
  exited.set_exited(true);
  std::vector<FuzzCall> nodes = {heartbeat("leaf00-n00"), heartbeat("leaf00-n01"),
                                 heartbeat("leaf01-n00"), heartbeat("leaf01-n01")};
  std::vector<FuzzCall> calls = nodes;
  calls.push_back({0, kResearcher, {submit(1, 8, 3)}});
  calls.push_back({0, kResearcher, {submit(2, 4, 3)}});
  calls.push_back({0, kAdmin, {submit(4, 8, 6)}});  // preempts
  calls.push_back(heartbeat("leaf00-n00", {exited}));
  hai::ListJobsRequest list;
  list.set_include_finished(true);
  calls.push_back({1, kResearcher, {list.SerializeAsString()}});
  calls.push_back({2, kResearcher, {job(2)}});
  calls.push_back({4, kResearcher, {job(2)}});
  calls.push_back({3, kAdmin, {job(3)}});
  fuzz::WriteSeed(dir, "jobs.bin", calls);

  hai::DrainRequest drain;
  drain.set_node("leaf01-n01");
  drain.set_drain(true);
  drain.set_reason("bad GPU");
  hai::HealthReport health;
  health.set_node("leaf00-n01");
  auto* check = health.add_checks();
  check->set_name("gpus");
  check->set_ok(false);
  check->set_message("7 GPUs");
  hai::AddUserRequest add;
  add.set_name("bob");
  hai::LogsRequest logs;
  logs.set_id(1);
  calls = nodes;
  calls.push_back({10, kAdmin, {drain.SerializeAsString()}});
  calls.push_back({12, kAgent, {health.SerializeAsString()}});
  calls.push_back({8, kAdmin, {add.SerializeAsString()}});
  calls.push_back({8, kResearcher, {add.SerializeAsString()}});  // refused
  calls.push_back({9, kAdmin, {hai::ListUsersRequest{}.SerializeAsString()}});
  calls.push_back({7, kWrongToken, {hai::WhoAmIRequest{}.SerializeAsString()}});
  calls.push_back({6, kNone, {hai::ListNodesRequest{}.SerializeAsString()}});
  calls.push_back({0, kResearcher, {submit(1, 8, 3)}});
  calls.push_back({5, kResearcher, {logs.SerializeAsString()}});
  fuzz::WriteSeed(dir, "admin.bin", calls);
}
