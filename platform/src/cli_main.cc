// hai: the researcher's command line for HAI-Platform.
//
//   hai submit [--name N] [--nodes N] [--gpus-per-node G] [--priority P] [--env K=V] -- CMD...
//   hai ls [-a] [--all-users] | hai show JOB | hai logs JOB [-f] [--rank R]
//   hai stop JOB | hai suspend JOB | hai nodes [--tree|--health] | hai whoami
//   hai admin user add NAME [--admin] [--quota N] | hai admin user ls
//   hai admin drain NODE --reason TEXT | hai admin undrain NODE
//
// Server and token come from --server / --token, else $HAI_SERVER / $HAI_TOKEN, else
// ~/.hai/config.toml (server = "host:port", token = "..."). Human tables by default, --json for
// scripts; exit code 0 only on success; errors are one line on stderr.
#include <google/protobuf/util/json_util.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <iostream>
#include <nlohmann/json.hpp>

#include "auth.h"
#include "common/config.h"
#include "common/rpc_client.h"
#include "platform/proto/hai.grpc.pb.h"

namespace ff::platform {
namespace {

struct CliConfig {
  std::string server;
  std::string token;
  void Bind(ConfigSection& s) {
    s.Optional("server", server);
    s.Optional("token", token);
  }
};

struct Globals {
  std::string server;
  std::string token;
  bool json = false;
};

[[noreturn]] void Die(const std::string& message, int code = 1) {
  std::fprintf(stderr, "hai: %s\n", message.c_str());
  std::exit(code);
}

std::string Lower(std::string s) {
  for (char& c : s)
    c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::string StateOf(hai::JobState s) {
  return Lower(hai::JobState_Name(s));
}

std::string ToJson(const google::protobuf::Message& m) {
  std::string out;
  google::protobuf::util::JsonPrintOptions o;
  o.add_whitespace = false;
  o.preserve_proto_field_names = true;
  o.always_print_primitive_fields = true;
  (void)google::protobuf::util::MessageToJsonString(m, &out, o);
  return out;
}

std::string Ago(int64_t ms) {
  if (ms <= 0) return "-";
  int64_t s = (NowMs() - ms) / 1000;
  if (s < 0) s = 0;
  if (s < 120) return std::to_string(s) + "s";
  if (s < 7200) return std::to_string(s / 60) + "m";
  if (s < 172800) return std::to_string(s / 3600) + "h";
  return std::to_string(s / 86400) + "d";
}

// "90", "90s", "30m", "2h", "1h30m", "2d12h" -> seconds; -1 when it is none of these.
int64_t ParseDuration(const std::string& text) {
  if (text.empty()) return -1;
  int64_t total = 0, number = -1;
  for (char c : text) {
    if (c >= '0' && c <= '9') {
      number = (number < 0 ? 0 : number) * 10 + (c - '0');
      if (number > 1000000000) return -1;
      continue;
    }
    const int64_t unit = c == 's' ? 1 : c == 'm' ? 60 : c == 'h' ? 3600 : c == 'd' ? 86400 : 0;
    if (unit == 0 || number < 0) return -1;
    total += number * unit;
    number = -1;
  }
  return number >= 0 ? total + number : total;
}

std::string Clock(int64_t ms) {
  if (ms <= 0) return "-";
  std::time_t t = ms / 1000;
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S", std::localtime(&t));
  return buf;
}

class Client {
 public:
  explicit Client(const Globals& g) : g_(g) {
    if (g_.server.empty()) {
      Die("no server: set HAI_SERVER, --server or server in ~/.hai/config.toml");
    }
    stub_ = hai::Hai::NewStub(MakeChannel(g_.server));
  }

  // Runs one call; on failure prints one line and exits 1.
  template <typename Fn>
  void Call(const std::string& what, Fn&& fn, bool idempotent = true) {
    CallOptions o = idempotent ? CallOptions::Idempotent(std::chrono::seconds(10)) : CallOptions{};
    if (!idempotent) o.deadline = std::chrono::seconds(10);
    Status st = CallRpc(what, o, [&](grpc::ClientContext* c) {
      SetBearerToken(c, g_.token);
      return fn(c);
    });
    if (st.ok()) return;
    std::string m = st.message();
    // "hai-server Submit: <server's message>" -> the server's message.
    if (auto colon = m.find(": "); colon != std::string::npos && m.rfind("hai-server", 0) == 0) {
      m = m.substr(colon + 2);
    }
    switch (st.code()) {
      case StatusCode::kUnavailable:
      case StatusCode::kDeadlineExceeded:
        Die("cannot reach hai-server at " + g_.server + " (" + m + ")");
      case StatusCode::kUnauthenticated:
        Die("hai-server refused the token: " + m);
      default:
        Die(m);
    }
  }

  hai::Hai::Stub& stub() { return *stub_; }

 private:
  const Globals& g_;
  std::unique_ptr<hai::Hai::Stub> stub_;
};

std::string Quote(const std::string& arg) {
  if (!arg.empty() &&
      arg.find_first_not_of(
          "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-./=:,+@%") ==
          std::string::npos) {
    return arg;
  }
  std::string q = "'";
  for (char c : arg)
    q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

void PrintJobs(const std::vector<hai::Job>& jobs, bool show_user) {
  std::printf("%-6s %-20s %s%-10s %5s %4s %4s %6s  %s\n", "ID", "NAME",
              show_user ? "USER       " : "", "STATE", "NODES", "GPUS", "PRIO", "AGE",
              "NODES / REASON");
  for (const hai::Job& j : jobs) {
    std::string where;
    if ((j.state() == hai::RUNNING || j.state() == hai::SUSPENDING) && !j.runs().empty()) {
      for (const std::string& n : j.runs(j.runs_size() - 1).nodes())
        where += (where.empty() ? "" : ",") + n;
    } else if (!j.pending_reason().empty()) {
      where = j.pending_reason();
    } else {
      where = j.message();
    }
    std::printf(
        "%-6lld %-20.20s %s%-10s %5d %4d %4d %6s  %s\n", static_cast<long long>(j.id()),
        j.spec().name().c_str(),
        show_user
            ? (j.user() + std::string(11 - std::min<std::size_t>(11, j.user().size()), ' ')).c_str()
            : "",
        StateOf(j.state()).c_str(), j.spec().nodes(), j.spec().gpus_per_node(), j.spec().priority(),
        Ago(j.submit_ms()).c_str(), where.c_str());
  }
}

void PrintJob(const hai::Job& j) {
  const hai::JobSpec& s = j.spec();
  std::printf("job %lld (%s) of %s: %s\n", static_cast<long long>(j.id()), s.name().c_str(),
              j.user().c_str(), StateOf(j.state()).c_str());
  if (!j.pending_reason().empty()) std::printf("  waiting: %s\n", j.pending_reason().c_str());
  if (j.pending_history_size() > 0) {
    std::printf("  why it waited, over time:\n");
    for (const hai::PendingEvent& e : j.pending_history())
      std::printf("    %s  %s\n", Clock(e.time_ms()).c_str(), e.reason().c_str());
  }
  if (!j.message().empty()) std::printf("  %s\n", j.message().c_str());
  std::printf("  command:   %s\n", s.command().c_str());
  std::printf("  workdir:   %s\n", s.workdir().empty() ? "/" : s.workdir().c_str());
  std::printf("  shape:     %d node(s) x %d GPU(s), %d process(es) per node, priority %d, %s\n",
              s.nodes(), s.gpus_per_node(), s.procs_per_node(), s.priority(),
              Lower(hai::CommKind_Name(s.comm())).c_str());
  if (s.expected_runtime_s() > 0) {
    std::printf("  expected:  runs %llds (--time)\n",
                static_cast<long long>(s.expected_runtime_s()));
  }
  std::printf("  submitted: %s\n", Clock(j.submit_ms()).c_str());
  if (j.end_ms() > 0) std::printf("  ended:     %s\n", Clock(j.end_ms()).c_str());
  for (const auto& [k, v] : s.env())
    std::printf("  env:       %s=%s\n", k.c_str(), v.c_str());
  for (const hai::Run& r : j.runs()) {
    std::string nodes;
    for (const std::string& n : r.nodes())
      nodes += (nodes.empty() ? "" : ",") + n;
    std::string codes;
    std::map<int, int> sorted(r.exit_codes().begin(), r.exit_codes().end());
    for (const auto& [rank, code] : sorted)
      codes += (codes.empty() ? "" : " ") + std::to_string(rank) + ":" + std::to_string(code);
    std::printf("  run %d: %s on %s%s%s\n", r.index(), Clock(r.start_ms()).c_str(), nodes.c_str(),
                r.end_ms() > 0 ? (", ended " + Clock(r.end_ms())).c_str() : ", running",
                r.end_reason().empty() ? "" : (" (" + r.end_reason() + ")").c_str());
    if (!codes.empty()) std::printf("         exit codes (rank:code): %s\n", codes.c_str());
  }
}

int64_t ParseJobId(const std::string& s) {
  try {
    std::size_t used = 0;
    long long v = std::stoll(s, &used);
    if (used == s.size() && v > 0) return v;
  } catch (...) {
  }
  Die("'" + s + "' is not a job id", 2);
}

int Main(int argc, char** argv) {
  CLI::App app("HAI-Platform: submit and watch jobs on the cluster", "hai");
  app.require_subcommand(1);
  app.fallthrough();
  Globals g;
  app.add_option("--server", g.server,
                 "hai-server host:port (else $HAI_SERVER, ~/.hai/config.toml)");
  app.add_option("--token", g.token, "Your token (else $HAI_TOKEN, ~/.hai/config.toml)");
  app.add_flag("--json", g.json, "Print JSON instead of tables");

  // submit
  auto* submit = app.add_subcommand("submit", "Submit a job: hai submit [options] -- COMMAND...");
  hai::JobSpec spec;
  std::string name, workdir, comm = "allreduce", restart = "on-node-lost";
  int nodes = 1, gpus = 1, procs = 1, priority = 3, max_restarts = 0;
  int64_t min_runtime = 0;
  bool span_zones = false;
  std::vector<std::string> env, command;
  submit->add_option("--name", name, "Job name (default: the command's first word)");
  submit->add_option("--nodes,-n", nodes, "Nodes (a gang: all start together)")
      ->capture_default_str();
  submit->add_option("--gpus-per-node,-g", gpus, "GPUs on each node")->capture_default_str();
  submit->add_option("--procs-per-node", procs, "Processes started on each node")
      ->capture_default_str();
  submit->add_option("--priority,-p", priority, "0..6, higher first")->capture_default_str();
  submit->add_option("--env,-e", env, "K=V added to the job's environment (repeatable)");
  submit->add_option("--workdir,-C", workdir, "Working directory (default: the current one)");
  submit->add_option("--comm", comm, "allreduce, pipeline or none")->capture_default_str();
  submit->add_flag("--may-span-zones", span_zones, "Allow an allreduce job across zones");
  submit->add_option("--min-runtime", min_runtime, "Seconds before it may be suspended for others");
  std::string expected_time;
  submit->add_option("--time,-t", expected_time,
                     "How long it is expected to run (90s, 30m, 2h, 1h30m, 2d): lets the "
                     "scheduler estimate start times and start it early in a gap it fits");
  submit->add_option("--restart", restart, "on-node-lost, never or on-failure")
      ->capture_default_str();
  submit->add_option("--max-restarts", max_restarts, "on-failure: how many times (default 3)");
  submit->add_option("command", command, "The command (after --)")->required();

  auto* ls = app.add_subcommand("ls", "List your jobs");
  bool ls_finished = false, ls_all_users = false;
  ls->add_flag("-a,--finished", ls_finished, "Include ended jobs");
  ls->add_flag("--all-users", ls_all_users, "Every user's jobs (admins)");

  auto* show = app.add_subcommand("show", "Show a job, its runs and exit codes");
  std::string job_arg;
  show->add_option("job", job_arg, "Job id")->required();

  auto* logs = app.add_subcommand("logs", "Print a rank's output");
  int rank = 0;
  bool follow = false;
  logs->add_option("job", job_arg, "Job id")->required();
  logs->add_option("--rank,-r", rank, "Rank")->capture_default_str();
  logs->add_flag("-f,--follow", follow, "Keep printing while the job runs");

  auto* stop = app.add_subcommand("stop", "Stop a job");
  stop->add_option("job", job_arg, "Job id")->required();
  auto* suspend = app.add_subcommand("suspend", "Suspend a job (it checkpoints and is requeued)");
  suspend->add_option("job", job_arg, "Job id")->required();

  auto* nodes_cmd = app.add_subcommand("nodes", "List the cluster's nodes");
  bool tree = false;
  nodes_cmd->add_flag("--tree", tree, "As the zone / leaf switch / node tree");
  bool health = false;
  nodes_cmd->add_flag("--health", health, "Every check of each node's last hai-health report");
  auto* whoami = app.add_subcommand("whoami", "Who the token belongs to");

  auto* admin = app.add_subcommand("admin", "Administration (admins only)");
  admin->require_subcommand(1);
  auto* user = admin->add_subcommand("user", "Users");
  user->require_subcommand(1);
  auto* user_add = user->add_subcommand("add", "Add a user and print their token");
  std::string user_name;
  bool user_admin = false;
  int quota = 0;
  user_add->add_option("name", user_name, "User name")->required();
  user_add->add_flag("--admin", user_admin, "Make an administrator");
  user_add->add_option("--quota", quota, "Most nodes the user's jobs may hold (0: no limit)");
  auto* user_ls = user->add_subcommand("ls", "List users");
  auto* drain = admin->add_subcommand("drain", "Stop placing jobs on a node");
  std::string node_name, reason;
  drain->add_option("node", node_name, "Node")->required();
  drain->add_option("--reason", reason, "Why (shown in hai nodes)")->required();
  auto* undrain = admin->add_subcommand("undrain", "Place jobs on a node again");
  undrain->add_option("node", node_name, "Node")->required();

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }

  // Where and who: flags, then the environment, then ~/.hai/config.toml.
  if (g.server.empty() && std::getenv("HAI_SERVER")) g.server = std::getenv("HAI_SERVER");
  if (g.token.empty() && std::getenv("HAI_TOKEN")) g.token = std::getenv("HAI_TOKEN");
  if ((g.server.empty() || g.token.empty()) && std::getenv("HOME")) {
    std::string path = std::string(std::getenv("HOME")) + "/.hai/config.toml";
    if (access(path.c_str(), F_OK) == 0) {
      auto cfg = LoadConfigFile<CliConfig>(path, {});
      if (!cfg.ok()) Die(cfg.status().message());
      if (g.server.empty()) g.server = cfg->server;
      if (g.token.empty()) g.token = cfg->token;
    }
  }
  Client client(g);
  auto& stub = client.stub();

  if (*submit) {
    spec.set_name(name);
    std::string cmd;
    if (command.size() == 1) {
      cmd = command[0];  // one argument: a shell command line as written
    } else {
      for (const std::string& a : command)
        cmd += (cmd.empty() ? "" : " ") + Quote(a);
    }
    spec.set_command(cmd);
    if (workdir.empty()) {
      char buf[4096];
      if (getcwd(buf, sizeof buf)) workdir = buf;
    }
    spec.set_workdir(workdir);
    for (const std::string& kv : env) {
      auto eq = kv.find('=');
      if (eq == std::string::npos || eq == 0) Die("--env wants K=V, got '" + kv + "'", 2);
      (*spec.mutable_env())[kv.substr(0, eq)] = kv.substr(eq + 1);
    }
    spec.set_nodes(nodes);
    spec.set_gpus_per_node(gpus);
    spec.set_procs_per_node(procs);
    spec.set_priority(priority);
    if (comm == "allreduce") {
      spec.set_comm(hai::ALLREDUCE);
    } else if (comm == "pipeline") {
      spec.set_comm(hai::PIPELINE);
    } else if (comm == "none") {
      spec.set_comm(hai::NONE);
    } else {
      Die("--comm is allreduce, pipeline or none", 2);
    }
    spec.set_may_span_zones(span_zones);
    spec.set_min_runtime_s(min_runtime);
    if (!expected_time.empty()) {
      const int64_t seconds = ParseDuration(expected_time);
      if (seconds <= 0)
        Die("--time '" + expected_time + "': give a duration like 90s, 30m, 2h or 1h30m", 2);
      spec.set_expected_runtime_s(seconds);
    }
    if (restart == "on-node-lost") {
      spec.set_restart_policy(hai::RESTART_ON_NODE_LOST);
    } else if (restart == "never") {
      spec.set_restart_policy(hai::RESTART_NEVER);
    } else if (restart == "on-failure") {
      spec.set_restart_policy(hai::RESTART_ON_FAILURE);
    } else {
      Die("--restart is on-node-lost, never or on-failure", 2);
    }
    spec.set_max_restarts(max_restarts);
    hai::SubmitRequest req;
    *req.mutable_spec() = spec;
    hai::Job job;
    client.Call(
        "hai-server Submit", [&](grpc::ClientContext* c) { return stub.Submit(c, req, &job); },
        /*idempotent=*/false);
    if (g.json) {
      std::printf("%s\n", ToJson(job).c_str());
    } else {
      std::printf("submitted job %lld (%s)\n", static_cast<long long>(job.id()),
                  job.spec().name().c_str());
    }
    return 0;
  }
  if (*ls) {
    hai::ListJobsRequest req;
    req.set_include_finished(ls_finished);
    req.set_all_users(ls_all_users);
    hai::ListJobsResponse resp;
    client.Call("hai-server ListJobs",
                [&](grpc::ClientContext* c) { return stub.ListJobs(c, req, &resp); });
    if (g.json) {
      std::printf("%s\n", ToJson(resp).c_str());
    } else {
      PrintJobs({resp.jobs().begin(), resp.jobs().end()}, ls_all_users);
    }
    return 0;
  }
  if (*show || *stop || *suspend) {
    hai::JobRef ref;
    ref.set_id(ParseJobId(job_arg));
    hai::Job job;
    if (*show) {
      client.Call("hai-server GetJob",
                  [&](grpc::ClientContext* c) { return stub.GetJob(c, ref, &job); });
    } else if (*stop) {
      client.Call("hai-server StopJob",
                  [&](grpc::ClientContext* c) { return stub.StopJob(c, ref, &job); });
    } else {
      client.Call("hai-server SuspendJob",
                  [&](grpc::ClientContext* c) { return stub.SuspendJob(c, ref, &job); });
    }
    if (g.json) {
      std::printf("%s\n", ToJson(job).c_str());
    } else if (*show) {
      PrintJob(job);
    } else {
      std::printf("job %lld: %s\n", static_cast<long long>(job.id()),
                  *stop ? (job.state() == hai::STOPPED ? "stopped" : "stopping")
                        : "suspending (it checkpoints and is requeued)");
    }
    return 0;
  }
  if (*logs) {
    hai::LogsRequest req;
    req.set_id(ParseJobId(job_arg));
    req.set_rank(rank);
    req.set_follow(follow);
    grpc::ClientContext c;
    SetBearerToken(&c, g.token);
    auto reader = stub.ReadLogs(&c, req);
    hai::LogChunk chunk;
    while (reader->Read(&chunk)) {
      std::fwrite(chunk.data().data(), 1, chunk.data().size(), stdout);
      std::fflush(stdout);
    }
    grpc::Status st = reader->Finish();
    if (!st.ok()) {
      if (st.error_code() == grpc::StatusCode::UNAVAILABLE) {
        Die("cannot reach hai-server at " + g.server + " (" + st.error_message() + ")");
      }
      Die(st.error_message());
    }
    return 0;
  }
  if (*nodes_cmd) {
    hai::ListNodesRequest req;
    hai::ListNodesResponse resp;
    client.Call("hai-server ListNodes",
                [&](grpc::ClientContext* c) { return stub.ListNodes(c, req, &resp); });
    if (g.json) {
      std::printf("%s\n", ToJson(resp).c_str());
      return 0;
    }
    auto state = [](const hai::Node& n) {
      std::string s = n.state();
      if (n.drained()) {
        s += ", drained";
        if (!n.drained_by().empty()) s += " by " + n.drained_by();
        s += ": " + n.drain_reason();
      }
      return s;
    };
    auto health_summary = [](const hai::Node& n) -> std::string {
      if (n.health_report_ms() == 0) return "-";
      std::string failing;
      for (const hai::HealthCheck& c : n.health())
        if (!c.ok()) failing += (failing.empty() ? "" : ",") + c.name();
      return (failing.empty() ? "ok" : "FAIL " + failing) + " (" + Ago(n.health_report_ms()) + ")";
    };
    if (health) {
      for (const hai::Node& n : resp.nodes()) {
        std::printf("%s: %s\n", n.name().c_str(), health_summary(n).c_str());
        for (const hai::HealthCheck& c : n.health())
          std::printf("  %-18s %-4s %s\n", c.name().c_str(), c.ok() ? "ok" : "FAIL",
                      c.message().c_str());
      }
      return 0;
    }
    auto jobs = [](const hai::Node& n) {
      std::string s;
      for (int64_t id : n.jobs())
        s += (s.empty() ? "jobs " : ",") + std::to_string(id);
      return s;
    };
    if (tree) {
      std::string zone, leaf;
      for (const hai::Node& n : resp.nodes()) {
        if (n.zone() != zone) {
          zone = n.zone();
          leaf.clear();
          std::printf("zone %s\n", zone.c_str());
        }
        if (n.leaf() != leaf) {
          leaf = n.leaf();
          std::printf("  leaf %s\n", leaf.c_str());
        }
        std::printf("    %-16s %d GPUs  %s  %s\n", n.name().c_str(), n.gpus(), state(n).c_str(),
                    jobs(n).c_str());
      }
      return 0;
    }
    std::printf("%-16s %-6s %-12s %4s  %-16s %-30s %s\n", "NODE", "ZONE", "LEAF", "GPUS", "HEALTH",
                "STATE", "JOBS");
    for (const hai::Node& n : resp.nodes()) {
      std::printf("%-16s %-6s %-12s %4d  %-16s %-30s %s\n", n.name().c_str(), n.zone().c_str(),
                  n.leaf().c_str(), n.gpus(), health_summary(n).c_str(), state(n).c_str(),
                  jobs(n).c_str());
    }
    return 0;
  }
  if (*whoami) {
    hai::WhoAmIRequest req;
    hai::User u;
    client.Call("hai-server WhoAmI",
                [&](grpc::ClientContext* c) { return stub.WhoAmI(c, req, &u); });
    if (g.json) {
      std::printf("%s\n", ToJson(u).c_str());
    } else {
      std::printf("%s%s\n", u.name().c_str(), u.admin() ? " (admin)" : "");
    }
    return 0;
  }
  if (*user_add) {
    hai::AddUserRequest req;
    req.set_name(user_name);
    req.set_admin(user_admin);
    req.set_node_quota(quota);
    hai::AddUserResponse resp;
    client.Call(
        "hai-server AddUser", [&](grpc::ClientContext* c) { return stub.AddUser(c, req, &resp); },
        /*idempotent=*/false);
    if (g.json) {
      std::printf("%s\n", ToJson(resp).c_str());
    } else {
      std::printf("user %s added; their token (shown only now):\n%s\n", resp.name().c_str(),
                  resp.token().c_str());
    }
    return 0;
  }
  if (*user_ls) {
    hai::ListUsersRequest req;
    hai::ListUsersResponse resp;
    client.Call("hai-server ListUsers",
                [&](grpc::ClientContext* c) { return stub.ListUsers(c, req, &resp); });
    if (g.json) {
      std::printf("%s\n", ToJson(resp).c_str());
    } else {
      std::printf("%-20s %-6s %s\n", "USER", "ADMIN", "NODE QUOTA");
      for (const hai::User& u : resp.users()) {
        std::printf("%-20s %-6s %s\n", u.name().c_str(), u.admin() ? "yes" : "no",
                    u.node_quota() > 0 ? std::to_string(u.node_quota()).c_str() : "-");
      }
    }
    return 0;
  }
  if (*drain || *undrain) {
    hai::DrainRequest req;
    req.set_node(node_name);
    req.set_drain(drain->parsed());
    req.set_reason(reason);
    hai::Node n;
    client.Call("hai-server DrainNode",
                [&](grpc::ClientContext* c) { return stub.DrainNode(c, req, &n); });
    if (g.json) {
      std::printf("%s\n", ToJson(n).c_str());
    } else {
      std::printf("node %s %s\n", n.name().c_str(), *drain ? "drained" : "undrained");
    }
    return 0;
  }
  return 0;
}

}  // namespace
}  // namespace ff::platform

int main(int argc, char** argv) {
  return ff::platform::Main(argc, argv);
}
