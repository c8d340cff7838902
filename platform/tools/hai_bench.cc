// hai-bench: HAI-Platform's two figures, each beside its floor measured in the same run.
//
//   1. Submit-to-running latency on a local cluster (hai-server and two hai-agents started here
//      as processes): from the Submit call until the job's process has started (it records the
//      time itself), over --jobs one-node jobs; beside fork+exec of the same command here.
//   2. One scheduling round in hai-server with 10,000 queued jobs on the Fire-Flyer 2 topology
//      (1,250 nodes): the server and its RocksDB run in this process, every node heartbeats, the
//      jobs are submitted over gRPC, then Tick() is timed (the round that fills the cluster, and
//      rounds with the cluster full and thousands still queued); with our congestion-aware
//      policy and, as the baseline, first-fit.
//
//   build/platform/hai-bench [--jobs 30] [--queued 10000]
#include <grpcpp/grpcpp.h>
#include <spawn.h>
#include <sys/wait.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "common/files.h"
#include "common/logging.h"
#include "common/net.h"
#include "common/rpc_client.h"
#include "common/rpc_server.h"
#include "common/subprocess.h"
#include "platform/server.h"
#include "platform/tokens.h"

extern char** environ;

namespace ff::platform {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

double Percentile(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[std::min(v.size() - 1, static_cast<std::size_t>(p * v.size()))];
}

std::string Temp() {
  std::string t = (fs::temp_directory_path() / "hai-bench.XXXXXX").string();
  return mkdtemp(t.data());
}

std::optional<std::string> WaitFile(const std::string& path, std::chrono::milliseconds timeout) {
  auto until = Clock::now() + timeout;
  while (Clock::now() < until) {
    auto s = ReadWholeFile(path, "file");
    if (s.ok() && !s->empty() && s->back() == '\n') return *s;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return std::nullopt;
}

// ---- 1. submit to running --------------------------------------------------------------------

int SubmitLatency(const std::string& bin, int jobs) {
  const std::string dir = Temp();
  const std::string root = FF_SOURCE_DIR;
  std::ofstream(dir + "/server.toml")
      << "[server]\nlisten = \"127.0.0.1:0\"\n[metrics]\nenabled = false\n[log]\nlevel = \"warn\"\n"
      << "[hai]\ndata_dir = \"" << dir << "/server\"\ncluster = \"" << root
      << "/deploy/config/cluster-local.toml\"\nagent_token_file = \"" << dir
      << "/agent.token\"\nheartbeat_interval_ms = 250\nschedule_interval_ms = 250\n";
  auto server = Subprocess::Start({bin + "/hai-server", "--config", dir + "/server.toml",
                                   "--ready-file", dir + "/server.ready"},
                                  {.env = {}, .output_dir = dir});
  if (!server.ok())
    return std::fprintf(stderr, "hai-bench: %s\n", server.status().message().c_str()), 1;
  auto ready = WaitFile(dir + "/server.ready", std::chrono::seconds(20));
  if (!ready) return std::fprintf(stderr, "hai-bench: hai-server did not start\n"), 1;
  const std::string address = nlohmann::json::parse(*ready)["rpc"];
  std::vector<Subprocess> agents;
  for (const char* node : {"A-leaf-n00", "A-leaf-n01"}) {
    auto a = Subprocess::Start(
        {bin + "/hai-agent", "--node", node, "--set", "agent.server=" + address, "--set",
         "agent.token_file=" + dir + "/agent.token", "--set", "agent.state_dir=" + dir + "/" + node,
         "--set", "metrics.enabled=false", "--log-level", "warn"},
        {.env = {}, .output_dir = dir});
    if (!a.ok()) return 1;
    agents.push_back(std::move(*a));
  }
  std::string token = *ReadTokenFile(dir + "/server/admin.token", false);
  auto stub = hai::Hai::NewStub(MakeChannel(address));
  // Both nodes up.
  for (int i = 0; i < 200; ++i) {
    hai::ListNodesResponse nodes;
    grpc::ClientContext c;
    SetBearerToken(&c, token);
    stub->ListNodes(&c, {}, &nodes);
    int up = 0;
    for (const auto& n : nodes.nodes())
      up += n.state() == hai::NODE_UP;
    if (up == 2) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  std::vector<double> hai_ms, fork_ms;
  for (int i = 0; i < jobs; ++i) {
    const std::string mark = dir + "/started." + std::to_string(i);
    const std::string command = "date +%s%N > " + mark;
    hai::SubmitRequest req;
    req.mutable_spec()->set_command(command);
    req.mutable_spec()->set_nodes(1);
    req.mutable_spec()->set_gpus_per_node(1);
    req.mutable_spec()->set_comm(hai::NONE);
    hai::Job job;
    grpc::ClientContext c;
    SetBearerToken(&c, token);
    int64_t t0 = NowNs();
    grpc::Status st = stub->Submit(&c, req, &job);
    if (!st.ok())
      return std::fprintf(stderr, "hai-bench: submit: %s\n", st.error_message().c_str()), 1;
    auto started = WaitFile(mark, std::chrono::seconds(30));
    if (!started) return std::fprintf(stderr, "hai-bench: job %d never started\n", i), 1;
    hai_ms.push_back(static_cast<double>(std::stoll(*started) - t0) / 1e6);

    // The floor: the same command started here with fork+exec.
    const std::string local = mark + ".local";
    std::string sh_cmd = "date +%s%N > " + local;
    const char* argv[] = {"/bin/sh", "-c", sh_cmd.c_str(), nullptr};
    pid_t pid;
    int64_t t1 = NowNs();
    posix_spawn(&pid, "/bin/sh", nullptr, nullptr, const_cast<char**>(argv), environ);
    int status;
    waitpid(pid, &status, 0);
    fork_ms.push_back(
        static_cast<double>(std::stoll(*WaitFile(local, std::chrono::seconds(5))) - t1) / 1e6);
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  std::printf("\nsubmit -> process running, %d one-node jobs, local cluster (agents long-poll)\n",
              jobs);
  std::printf("%-34s %10s %10s %10s\n", "", "p50 ms", "p90 ms", "max ms");
  std::printf("%-34s %10.1f %10.1f %10.1f\n", "fork+exec here (floor)", Percentile(fork_ms, 0.5),
              Percentile(fork_ms, 0.9), Percentile(fork_ms, 1));
  std::printf("%-34s %10.1f %10.1f %10.1f\n", "hai submit (server + agent)",
              Percentile(hai_ms, 0.5), Percentile(hai_ms, 0.9), Percentile(hai_ms, 1));
  agents.clear();
  server->Signal(SIGTERM);
  server->Wait(std::chrono::seconds(5));
  fs::remove_all(dir);
  return 0;
}

// ---- 2. a round with 10,000 queued jobs ------------------------------------------------------

int RoundWithQueue(int queued, const std::string& policy) {
  const std::string dir = Temp();
  HaiOptions o;
  o.data_dir = dir + "/server";
  o.cluster = std::string(FF_SOURCE_DIR) + "/deploy/config/cluster-fireflyer2.toml";
  o.agent_token_file = dir + "/agent.token";
  o.heartbeat_timeout_ms = 3600 * 1000;
  o.policy = policy;
  auto server = HaiServer::Create(o, nullptr);
  if (!server.ok())
    return std::fprintf(stderr, "hai-bench: %s\n", server.status().message().c_str()), 1;
  auto rpc = RpcServer::Start(RpcServerOptions{}, {server->get()});
  if (!rpc.ok()) return 1;
  auto stub = hai::Hai::NewStub(MakeChannel((*rpc)->address()));
  const std::string agent_token = *ReadTokenFile(o.agent_token_file, false);
  const std::string token = *ReadTokenFile(o.data_dir + "/admin.token", false);
  auto topology = scheduler::Topology::Load(o.cluster);
  for (const scheduler::Node& n : topology->nodes()) {
    hai::HeartbeatRequest hb;
    hb.set_node(n.name);
    hb.set_gpus(n.gpus);
    hb.set_agent_address("127.0.0.1:1");
    hai::HeartbeatResponse resp;
    grpc::ClientContext c;
    SetBearerToken(&c, agent_token);
    stub->Heartbeat(&c, hb, &resp);
  }
  // The ITP mix of shapes (cluster04): mostly one GPU, a fifth whole nodes, some multi-node.
  auto t0 = Clock::now();
  std::vector<std::thread> threads;
  std::atomic<int> next{0};
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&] {
      for (int i; (i = next++) < queued;) {
        hai::SubmitRequest req;
        auto* s = req.mutable_spec();
        s->set_command("train.py");
        const int shape = i % 20;
        s->set_nodes(shape < 15 ? 1 : shape < 18 ? 1 : shape < 19 ? 2 : 4);
        s->set_gpus_per_node(shape < 15 ? 1 : 8);
        s->set_priority(i % 7);
        hai::Job job;
        grpc::ClientContext c;
        SetBearerToken(&c, token);
        stub->Submit(&c, req, &job);
      }
    });
  }
  for (auto& t : threads)
    t.join();
  double submit_s = std::chrono::duration<double>(Clock::now() - t0).count();
  std::printf(
      "\n%s: scheduling rounds in hai-server, fire-flyer-2 (1,250 nodes, 10,000 GPUs), "
      "%d jobs submitted (%.0f submits/s over gRPC, each synced to RocksDB)\n",
      policy.c_str(), queued, queued / submit_s);
  std::printf("%-50s %10s %10s\n", "", "queued", "ms");
  for (int round = 0; round < 6; ++round) {
    hai::ListJobsRequest lr;
    lr.set_all_users(true);
    hai::ListJobsResponse before;
    grpc::ClientContext c;
    SetBearerToken(&c, token);
    stub->ListJobs(&c, lr, &before);
    int waiting = 0;
    for (const auto& j : before.jobs())
      waiting += j.state() == hai::QUEUED;
    auto start = Clock::now();
    (*server)->Tick();
    double ms = std::chrono::duration<double, std::milli>(Clock::now() - start).count();
    std::printf("%-50s %10d %10.1f\n",
                round == 0 ? "round 1: fills the empty cluster" : "next round: cluster full",
                waiting, ms);
  }
  (*rpc)->Shutdown();
  server->reset();
  fs::remove_all(dir);
  return 0;
}

int Main(int argc, char** argv) {
  CLI::App app("HAI-Platform benchmarks", "hai-bench");
  int jobs = 30, queued = 10000;
  app.add_option("--jobs", jobs, "Jobs for the submit-to-running latency")->capture_default_str();
  app.add_option("--queued", queued, "Jobs queued for the scheduling round")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  LogOptions log;
  log.level = "warn";
  (void)InitLogging("hai-bench", log);
  const std::string bin = fs::path(argv[0]).parent_path().string();
  if (int rc = SubmitLatency(bin, jobs); rc != 0) return rc;
  for (const char* policy : {"first-fit", "congestion-aware"}) {
    if (int rc = RoundWithQueue(queued, policy); rc != 0) return rc;
  }
  return 0;
}

}  // namespace
}  // namespace ff::platform

int main(int argc, char** argv) {
  return ff::platform::Main(argc, argv);
}
