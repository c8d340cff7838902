// hai's job subcommands, one function each: submit, ls, show, stop, suspend, logs, metrics, top.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <thread>

#include "cli.h"
#include "platform/job_metrics.h"
#include "platform/names.h"
#include "platform/runs.h"

namespace ff::platform::cli {
namespace {

void PrintJobs(const std::vector<hai::Job>& jobs, bool show_user) {
  std::printf("%-6s %-20s %s%-10s %5s %4s %4s %6s  %s\n", "ID", "NAME",
              show_user ? "USER       " : "", "STATE", "NODES", "GPUS", "PRIO", "AGE",
              "NODES / REASON");
  for (const hai::Job& j : jobs) {
    std::string where;
    if ((j.state() == hai::RUNNING || j.state() == hai::SUSPENDING) && !j.runs().empty()) {
      for (const std::string& n : HeldNodes(j))
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
        StateName(j.state()).c_str(), NodesAsked(j.spec()), j.spec().gpus_per_node(),
        j.spec().priority(), Ago(j.submit_ms()).c_str(), where.c_str());
  }
}

void PrintJob(const hai::Job& j) {
  const hai::JobSpec& s = j.spec();
  std::printf("job %lld (%s) of %s: %s\n", static_cast<long long>(j.id()), s.name().c_str(),
              j.user().c_str(), StateName(j.state()).c_str());
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
  if (s.replicas() > 0) {
    std::printf(
        "  replicas:  %d group(s) of the shape above, starting and going on with %d or more "
        "(fault tolerance)\n",
        s.replicas(), MinReplicas(s));
  }
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
    if (const hai::CheckpointInfo& c = r.checkpoint(); c.ranks() > 0) {
      std::printf("         checkpoint: step %lld at %s, %.1f MB written in %.1fs by %d rank(s)\n",
                  static_cast<long long>(c.step()), Clock(c.time_ms()).c_str(), c.bytes() / 1e6,
                  c.write_s(), c.ranks());
    }
    if (r.suspend_ms() > 0) {
      std::printf("         suspend: asked at %s to save and exit within %.1fs%s\n",
                  Clock(r.suspend_ms()).c_str(), static_cast<double>(r.suspend_grace_ms()) / 1000,
                  r.end_ms() > 0 ? "" : " (saving now)");
    }
    const int procs = std::max(1, s.procs_per_node());
    if (!r.ft_store().empty()) std::printf("         quorum service: %s\n", r.ft_store().c_str());
    for (const hai::ReplicaGroup& g : r.groups()) {
      std::string where;
      for (int i = g.first_node(); i < g.first_node() + s.nodes() && i < r.nodes_size(); ++i)
        where += (where.empty() ? "" : ",") + r.nodes(i);
      std::printf(
          "         replica %d%s: ranks %d-%d on %s, master %s:%d, %s%s\n", g.replica(),
          g.incarnation() > 0 ? (" (replacement " + std::to_string(g.incarnation()) + ")").c_str()
                              : "",
          g.first_node() * procs, (g.first_node() + s.nodes()) * procs - 1, where.c_str(),
          g.master_addr().c_str(), g.master_port(),
          Live(g) ? "running since " : (g.finished() ? "finished, started " : "lost, started "),
          (Clock(g.start_ms()) + (Live(g) || g.finished() ? "" : " (" + g.end_reason() + ")"))
              .c_str());
    }
    if (s.replicas() > 0 && r.end_ms() == 0) {  // an elastic start's replicas yet to come
      const std::set<int> started = StartedReplicas(r);
      for (int replica = 0; replica < s.replicas(); ++replica) {
        if (started.contains(replica)) continue;
        std::printf(
            "         replica %d: not started yet (the run began without it; it starts "
            "as nodes free)\n",
            replica);
      }
    }
    for (const hai::RunEvent& e : r.events())
      std::printf("         %s  %s\n", Clock(e.time_ms()).c_str(), e.text().c_str());
  }
}

struct SubmitArgs {
  std::string name, workdir, comm = "allreduce", restart = "on-node-lost", expected_time;
  int nodes = 1, gpus = 1, procs = 1, priority = 3, max_restarts = 0, replicas = 0,
      min_replicas = 0;
  int64_t min_runtime = 0;
  bool span_zones = false;
  std::vector<std::string> env, command;
};

hai::JobSpec SpecOf(const SubmitArgs& a) {
  hai::JobSpec spec;
  spec.set_name(a.name);
  std::string cmd;
  if (a.command.size() == 1) {
    cmd = a.command[0];  // one argument: a shell command line as written
  } else {
    for (const std::string& arg : a.command)
      cmd += (cmd.empty() ? "" : " ") + Quote(arg);
  }
  spec.set_command(cmd);
  std::string workdir = a.workdir;
  if (workdir.empty()) {
    char buf[4096];
    if (getcwd(buf, sizeof buf)) workdir = buf;
  }
  spec.set_workdir(workdir);
  for (const std::string& kv : a.env) {
    auto eq = kv.find('=');
    if (eq == std::string::npos || eq == 0) Die("--env wants K=V, got '" + kv + "'", 2);
    (*spec.mutable_env())[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  spec.set_nodes(a.nodes);
  spec.set_gpus_per_node(a.gpus);
  spec.set_procs_per_node(a.procs);
  spec.set_priority(a.priority);
  const std::map<std::string, hai::CommKind> comms = {
      {"allreduce", hai::ALLREDUCE}, {"pipeline", hai::PIPELINE}, {"none", hai::NONE}};
  auto comm = comms.find(a.comm);
  if (comm == comms.end()) Die("--comm is allreduce, pipeline or none", 2);
  spec.set_comm(comm->second);
  spec.set_may_span_zones(a.span_zones);
  spec.set_min_runtime_s(a.min_runtime);
  if (!a.expected_time.empty()) {
    const int64_t seconds = ParseDuration(a.expected_time);
    if (seconds <= 0)
      Die("--time '" + a.expected_time + "': give a duration like 90s, 30m, 2h or 1h30m", 2);
    spec.set_expected_runtime_s(seconds);
  }
  const std::map<std::string, hai::RestartPolicy> policies = {
      {"on-node-lost", hai::RESTART_ON_NODE_LOST},
      {"never", hai::RESTART_NEVER},
      {"on-failure", hai::RESTART_ON_FAILURE}};
  auto policy = policies.find(a.restart);
  if (policy == policies.end()) Die("--restart is on-node-lost, never or on-failure", 2);
  spec.set_restart_policy(policy->second);
  spec.set_max_restarts(a.max_restarts);
  spec.set_replicas(a.replicas);
  spec.set_min_replicas(a.min_replicas);
  return spec;
}

int Submit(SubmitArgs a, const Globals& g, Client& client) {
  a.command.insert(a.command.end(), g.after_dashes.begin(), g.after_dashes.end());
  if (a.command.empty()) Die("no command: hai submit [options] -- COMMAND...", 2);
  hai::SubmitRequest req;
  *req.mutable_spec() = SpecOf(a);
  hai::Job job;
  client.Call(
      "Submit",
      [&](grpc::ClientContext* c, hai::Hai::Stub& stub) { return stub.Submit(c, req, &job); },
      /*idempotent=*/false);
  if (g.json) {
    std::printf("%s\n", ToJson(job).c_str());
  } else {
    std::printf("submitted job %lld (%s)\n", static_cast<long long>(job.id()),
                job.spec().name().c_str());
  }
  return 0;
}

struct ListArgs {
  bool finished = false, all_users = false;
};

int List(const ListArgs& a, const Globals& g, Client& client) {
  hai::ListJobsRequest req;
  req.set_include_finished(a.finished);
  req.set_all_users(a.all_users);
  hai::ListJobsResponse resp;
  client.Call("ListJobs", [&](grpc::ClientContext* c, hai::Hai::Stub& stub) {
    return stub.ListJobs(c, req, &resp);
  });
  if (g.json) {
    std::printf("%s\n", ToJson(resp).c_str());
  } else {
    PrintJobs({resp.jobs().begin(), resp.jobs().end()}, a.all_users);
  }
  return 0;
}

// A running job's steps, or nothing (not running, not recording, or a server without the call).
std::optional<hai::JobSteps> ReadSteps(int64_t id, Client& client) {
  hai::JobStepsRequest req;
  req.set_id(id);
  hai::JobSteps steps;
  Status st = client.hai().Call(
      "Steps", CallOptions::Idempotent(std::chrono::seconds(10)),
      [&](grpc::ClientContext* c, hai::Hai::Stub& stub) { return stub.Steps(c, req, &steps); });
  if (!st.ok()) return std::nullopt;
  return steps;
}

// The "slow steps" lines of hai show (a running job that records its steps).
void PrintStepsSummary(const hai::JobSteps& steps) {
  if (steps.ranks().empty() || steps.step_s() <= 0) {
    std::printf(
        "  steps:     not recorded (haiscale, the hfreduce backend or "
        "hai_job.record_steps() record them)\n");
    return;
  }
  std::printf("  steps:     %s a step over %d rank(s)", StepSecondsText(steps.step_s()).c_str(),
              steps.ranks_size());
  if (steps.baseline_s() > 0) {
    std::printf(", %.2fx its best this run (%s)", steps.step_s() / steps.baseline_s(),
                StepSecondsText(steps.baseline_s()).c_str());
  }
  std::printf("\n");
  if (steps.finding().cause() != hai::SLOW_NONE) {
    std::printf("  slow steps: %s\n", steps.finding().text().c_str());
  } else {
    std::printf("  slow steps: none now (hai top %lld shows each rank)\n",
                static_cast<long long>(steps.job_id()));
  }
}

int Show(const std::string& job_arg, const Globals& g, Client& client) {
  hai::JobRef ref;
  ref.set_id(ParseJobId(job_arg));
  hai::Job job;
  client.Call("GetJob", [&](grpc::ClientContext* c, hai::Hai::Stub& stub) {
    return stub.GetJob(c, ref, &job);
  });
  if (g.json) {
    std::printf("%s\n", ToJson(job).c_str());
  } else {
    PrintJob(job);
    if (job.state() == hai::RUNNING) {
      if (auto steps = ReadSteps(job.id(), client)) PrintStepsSummary(*steps);
    }
  }
  return 0;
}

struct TopArgs {
  std::string job;
  bool once = false;
  double interval_s = 2;
};

void PrintTop(const hai::JobSteps& steps) {
  std::printf("job %lld run %d", static_cast<long long>(steps.job_id()), steps.run());
  if (steps.step_s() > 0) {
    std::printf(": %s a step", StepSecondsText(steps.step_s()).c_str());
    if (steps.baseline_s() > 0) {
      std::printf(", %.2fx its best (%s)", steps.step_s() / steps.baseline_s(),
                  StepSecondsText(steps.baseline_s()).c_str());
    }
  }
  std::printf("   [%s]\n", Clock(NowMs()).c_str());
  const hai::StepFinding& f = steps.finding();
  std::printf("slow steps: %s\n", f.cause() == hai::SLOW_NONE ? "none now" : f.text().c_str());
  if (steps.ranks().empty()) {
    std::printf(
        "(no rank has recorded a step yet: haiscale, the hfreduce backend or "
        "hai_job.record_steps() record them)\n");
    return;
  }
  // Who waits for whom: the rank with the least time in the collectives arrives last; what the
  // others spend there beyond it is waiting for it.
  double least = -1;
  int last = -1;
  for (const hai::StepSummary& r : steps.ranks()) {
    if (r.collectives() > 0 && (least < 0 || r.comm_s() < least)) {
      least = r.comm_s();
      last = r.rank();
    }
  }
  std::printf("%-16s %5s %9s %8s %8s %8s %8s %8s %8s %5s\n", "NODE", "RANK", "STEP", "STEP_S",
              "COMPUTE", "COMM", "WAITING", "DATA", "CKPT", "COLL");
  for (const hai::StepSummary& r : steps.ranks()) {
    std::printf("%-16.16s %5d %9lld %8s %8s %8s %8s %8s %8s %5.0f%s\n", r.node().c_str(), r.rank(),
                static_cast<long long>(r.last_step()), StepSecondsText(r.step_s()).c_str(),
                StepSecondsText(r.compute_s()).c_str(), StepSecondsText(r.comm_s()).c_str(),
                least >= 0 ? StepSecondsText(r.comm_s() - least).c_str() : "-",
                StepSecondsText(r.data_s()).c_str(), StepSecondsText(r.ckpt_s()).c_str(),
                r.collectives(),
                r.rank() == last && steps.ranks_size() > 1 ? "  <- arrives last" : "");
  }
  std::printf(
      "(medians of each rank's last %d steps; WAITING: its time in the collectives beyond "
      "the latest rank's)\n",
      std::max_element(steps.ranks().begin(), steps.ranks().end(),
                       [](const auto& a, const auto& b) { return a.window() < b.window(); })
          ->window());
  // The network and storage classes' evidence: each tree edge's rate into a node's leader, and
  // each fs3 target's over every rank's reads.
  auto rate = [](double bytes, double s) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.1f MB/s", s > 0 ? bytes / s / 1e6 : 0.0);
    return std::string(buf);
  };
  bool links = false;
  for (const hai::StepSummary& r : steps.ranks()) {
    for (const hai::PeerTime& p : r.links()) {
      if (!links) std::printf("tree edges (into each node's leader, per step):\n");
      links = true;
      std::printf("  %-16.16s <- %-16.16s %8.2f MB  %12s  waiting %s\n", r.node().c_str(),
                  p.peer().c_str(), p.bytes() / 1e6, rate(p.bytes(), p.move_s()).c_str(),
                  StepSecondsText(p.wait_s()).c_str());
    }
  }
  std::map<std::string, std::pair<double, double>> targets;
  for (const hai::StepSummary& r : steps.ranks()) {
    for (const hai::PeerTime& p : r.reads()) {
      targets[p.peer()].first += p.bytes();
      targets[p.peer()].second += p.move_s();
    }
  }
  if (!targets.empty()) std::printf("fs3 targets (every rank's reads, per step):\n");
  for (const auto& [target, t] : targets) {
    std::printf("  %-8s %8.2f MB  %12s  %s reading\n", target.c_str(), t.first / 1e6,
                rate(t.first, t.second).c_str(), StepSecondsText(t.second).c_str());
  }
  for (const hai::StepFinding& p : steps.past())
    std::printf("earlier (until %s): %s\n", Clock(p.until_ms()).c_str(), p.text().c_str());
}

int Top(const TopArgs& a, const Globals& g, Client& client) {
  if (!(a.interval_s >= 0.2 && a.interval_s <= 3600)) Die("--interval is 0.2..3600 seconds", 2);
  hai::JobStepsRequest req;
  req.set_id(ParseJobId(a.job));
  const bool live = !a.once && !g.json && isatty(STDOUT_FILENO);
  for (;;) {
    hai::JobSteps steps;
    client.Call("Steps", [&](grpc::ClientContext* c, hai::Hai::Stub& stub) {
      return stub.Steps(c, req, &steps);
    });
    if (g.json) {
      std::printf("%s\n", ToJson(steps).c_str());
    } else {
      if (live) std::printf("\033[H\033[2J");  // a fresh screen each time, as top does
      PrintTop(steps);
    }
    std::fflush(stdout);
    if (!live) return 0;
    std::this_thread::sleep_for(
        std::chrono::milliseconds(static_cast<int64_t>(a.interval_s * 1000)));
  }
}

int Stop(const std::string& job_arg, const Globals& g, Client& client) {
  hai::JobRef ref;
  ref.set_id(ParseJobId(job_arg));
  hai::Job job;
  client.Call("StopJob", [&](grpc::ClientContext* c, hai::Hai::Stub& stub) {
    return stub.StopJob(c, ref, &job);
  });
  if (g.json) {
    std::printf("%s\n", ToJson(job).c_str());
  } else {
    std::printf("job %lld: %s\n", static_cast<long long>(job.id()),
                job.state() == hai::STOPPED ? "stopped" : "stopping");
  }
  return 0;
}

int Suspend(const std::string& job_arg, const Globals& g, Client& client) {
  hai::JobRef ref;
  ref.set_id(ParseJobId(job_arg));
  hai::Job job;
  client.Call("SuspendJob", [&](grpc::ClientContext* c, hai::Hai::Stub& stub) {
    return stub.SuspendJob(c, ref, &job);
  });
  if (g.json) {
    std::printf("%s\n", ToJson(job).c_str());
  } else {
    std::printf("job %lld: suspending (it checkpoints and is requeued)\n",
                static_cast<long long>(job.id()));
  }
  return 0;
}

struct LogsArgs {
  std::string job;
  int rank = 0;
  bool follow = false;
};

int Logs(const LogsArgs& a, const Globals& g, Client& client) {
  hai::LogsRequest req;
  req.set_id(ParseJobId(a.job));
  req.set_rank(a.rank);
  req.set_follow(a.follow);
  // The stream may break (hai-server restarting, or another replica taking over as leader):
  // it resumes where it stopped, on whichever server leads, for up to 30 s without progress.
  int64_t printed = 0;
  auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  for (;;) {
    req.set_offset(printed);
    grpc::ClientContext c;
    client.hai().Authorize(&c);
    hai::LogChunk chunk;
    grpc::Status st = client.hai().Attempt([&](hai::Hai::Stub& s) {
      auto reader = s.ReadLogs(&c, req);
      while (reader->Read(&chunk)) {
        std::fwrite(chunk.data().data(), 1, chunk.data().size(), stdout);
        std::fflush(stdout);
        printed += static_cast<int64_t>(chunk.data().size());
        give_up = std::chrono::steady_clock::now() + std::chrono::seconds(30);
      }
      return reader->Finish();
    });
    if (st.ok()) return 0;
    if (st.error_code() == grpc::StatusCode::UNAVAILABLE &&
        std::chrono::steady_clock::now() < give_up) {
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
      continue;
    }
    if (st.error_code() == grpc::StatusCode::UNAVAILABLE) {
      Die("cannot reach hai-server at " + g.server + " (" + st.error_message() + ")");
    }
    Die(st.error_message());
  }
}

struct MetricsArgs {
  std::string job;
  int rank = 0;
  int points = 0;  // 0: 20 in a table, 2000 with --json
  bool steps = false;
};

int ShowMetrics(const MetricsArgs& a, const Globals& g, Client& client) {
  hai::MetricsRequest req;
  req.set_id(ParseJobId(a.job));
  req.set_rank(a.rank);
  if (a.points < 0 || a.points > 100000) Die("--points is 1..100000", 2);
  req.set_max_points(a.points > 0 ? a.points : g.json ? 2000 : 20);
  req.set_steps(a.steps);
  hai::JobMetrics m;
  client.Call("ReadMetrics", [&](grpc::ClientContext* c, hai::Hai::Stub& stub) {
    return stub.ReadMetrics(c, req, &m);
  });
  if (g.json) {
    std::printf("%s\n", ToJson(m).c_str());
    return 0;
  }
  std::vector<hai::MetricRecord> records(m.records().begin(), m.records().end());
  std::printf("job %lld rank %d: %lld records", static_cast<long long>(req.id()), a.rank,
              static_cast<long long>(m.reported()));
  if (static_cast<int64_t>(records.size()) < m.reported())
    std::printf(", %zu shown (spread over the run)", records.size());
  if (m.unreadable() > 0)
    std::printf(", %lld unreadable lines skipped", static_cast<long long>(m.unreadable()));
  std::printf("\n");
  for (const auto& node : m.unreachable())
    std::printf("(node %s did not answer: its records are missing)\n", node.c_str());
  if (records.empty()) {
    std::printf(a.steps
                    ? "(no step recorded: haiscale, the hfreduce backend or "
                      "hai_job.record_steps() record them)\n"
                    : "(nothing reported: a job reports with hai_job.report(step, loss=...))\n");
    return 0;
  }
  const std::vector<std::string> names = MetricNames(records);
  std::printf("%-4s %-10s %-19s", "RUN", "STEP", "TIME");
  for (const auto& n : names)
    std::printf(" %12s", n.c_str());
  std::printf("\n");
  for (const auto& r : records) {
    std::printf("%-4d %-10lld %-19s", r.run(), static_cast<long long>(r.step()),
                r.time() > 0 ? Clock(static_cast<int64_t>(r.time() * 1000)).c_str() : "-");
    for (const auto& n : names) {
      auto v = r.values().find(n);
      if (v == r.values().end()) {
        std::printf(" %12s", "-");
      } else {
        std::printf(" %12.6g", v->second);
      }
    }
    std::printf("\n");
  }
  return 0;
}

}  // namespace

void AddJobCommands(CLI::App& app, std::vector<Command>& out) {
  auto s = std::make_shared<SubmitArgs>();
  CLI::App* submit =
      app.add_subcommand("submit", "Submit a job: hai submit [options] -- COMMAND...");
  submit->add_option("--name", s->name, "Job name (default: the command's first word)");
  submit->add_option("--nodes,-n", s->nodes, "Nodes (a gang: all start together)")
      ->capture_default_str();
  submit->add_option("--gpus-per-node,-g", s->gpus, "GPUs on each node")->capture_default_str();
  submit->add_option("--procs-per-node", s->procs, "Processes started on each node")
      ->capture_default_str();
  submit->add_option("--priority,-p", s->priority, "0..6, higher first")->capture_default_str();
  // One value each time (CLI11's vector options otherwise take words up to "--", and then read the
  // command's own options as hai's).
  submit->add_option("--env,-e", s->env, "K=V added to the job's environment (repeatable)")
      ->expected(1)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  submit->add_option("--workdir,-C", s->workdir, "Working directory (default: the current one)");
  submit->add_option("--comm", s->comm, "allreduce, pipeline or none")->capture_default_str();
  submit->add_flag("--may-span-zones", s->span_zones, "Allow an allreduce job across zones");
  submit->add_option("--min-runtime", s->min_runtime,
                     "Seconds before it may be suspended for others");
  submit->add_option("--time,-t", s->expected_time,
                     "How long it is expected to run (90s, 30m, 2h, 1h30m, 2d): lets the "
                     "scheduler estimate start times and start it early in a gap it fits");
  submit->add_option("--restart", s->restart, "on-node-lost, never or on-failure")
      ->capture_default_str();
  submit->add_option("--max-restarts", s->max_restarts, "on-failure: how many times (default 3)");
  submit->add_option("--replicas", s->replicas,
                     "Fault tolerance (haiscale.ft): run as this many replica groups of --nodes "
                     "nodes each; a lost group is replaced while the others go on");
  submit->add_option("--min-replicas", s->min_replicas,
                     "With --replicas: it starts with this many groups when all do not fit (the "
                     "others join as nodes free); below this many live groups it is requeued from "
                     "its checkpoint (default 1)");
  submit->add_option("command", s->command, "The command (after --)");
  out.push_back({submit, [s](const Globals& g, Client& c) { return Submit(*s, g, c); }});

  auto l = std::make_shared<ListArgs>();
  CLI::App* ls = app.add_subcommand("ls", "List your jobs");
  ls->add_flag("-a,--finished", l->finished, "Include ended jobs");
  ls->add_flag("--all-users", l->all_users, "Every user's jobs (admins)");
  out.push_back({ls, [l](const Globals& g, Client& c) { return List(*l, g, c); }});

  using JobFn = int (*)(const std::string&, const Globals&, Client&);
  for (auto [name, help, fn] :
       {std::tuple<const char*, const char*, JobFn>{"show", "Show a job, its runs and exit codes",
                                                    Show},
        {"stop", "Stop a job", Stop},
        {"suspend", "Suspend a job (it checkpoints and is requeued)", Suspend}}) {
    auto job = std::make_shared<std::string>();
    CLI::App* cmd = app.add_subcommand(name, help);
    cmd->add_option("job", *job, "Job id")->required();
    out.push_back({cmd, [job, f = fn](const Globals& g, Client& c) { return f(*job, g, c); }});
  }

  auto lg = std::make_shared<LogsArgs>();
  CLI::App* logs = app.add_subcommand("logs", "Print a rank's output");
  logs->add_option("job", lg->job, "Job id")->required();
  logs->add_option("--rank,-r", lg->rank, "Rank")->capture_default_str();
  logs->add_flag("-f,--follow", lg->follow, "Keep printing while the job runs");
  out.push_back({logs, [lg](const Globals& g, Client& c) { return Logs(*lg, g, c); }});

  auto mt = std::make_shared<MetricsArgs>();
  CLI::App* metrics =
      app.add_subcommand("metrics", "Print the training metrics a rank reported (hai_job.report)");
  metrics->add_option("job", mt->job, "Job id")->required();
  metrics->add_option("--rank,-r", mt->rank, "Rank")->capture_default_str();
  metrics->add_option("--points", mt->points,
                      "At most this many records, spread over the run (default 20; 2000 with "
                      "--json); the last one is always among them");
  metrics->add_flag("--steps", mt->steps,
                    "The rank's step records instead (step time, compute, time in collectives, "
                    "data loading, checkpoints: what hai top summarises)");
  out.push_back({metrics, [mt](const Globals& g, Client& c) { return ShowMetrics(*mt, g, c); }});

  auto tp = std::make_shared<TopArgs>();
  CLI::App* top = app.add_subcommand(
      "top",
      "A running job's steps, rank by rank: step time, compute, time in collectives, "
      "waiting, data loading, checkpoints, who arrives last, and why steps are slow");
  top->add_option("job", tp->job, "Job id")->required();
  top->add_flag("--once", tp->once, "Print once and exit (the default when not on a terminal)");
  top->add_option("--interval", tp->interval_s, "Seconds between refreshes")->capture_default_str();
  out.push_back({top, [tp](const Globals& g, Client& c) { return Top(*tp, g, c); }});
}

}  // namespace ff::platform::cli
