#include "agent.h"

#include <fcntl.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string_view>

#include "common/files.h"
#include "common/rpc_client.h"
#include "common/rpc_status.h"
#include "common/subprocess.h"
#include "common/tls.h"
#include "platform/job_metrics.h"
#include "platform/tokens.h"

namespace ff::platform {
namespace {

namespace fs = std::filesystem;

// Runs the job's command and records its exit code in a file, so that an agent that restarted
// (and so cannot wait for the process) still learns it. SIGUSR1 (suspend) is ignored by the
// wrapper and so by the job's processes unless they install a handler: shells between the
// wrapper and the job must not die of it, and a job that does not take part in the protocol
// keeps running until the grace period ends. SIGTERM (stop) keeps its meaning for the job.
constexpr char kWrapper[] =
    "trap '' USR1; trap : TERM INT; /bin/sh -c \"$1\"; rc=$?; "
    "printf '%s\\n' \"$rc\" > \"$2.tmp\" && mv \"$2.tmp\" \"$2\"; exit $rc";

constexpr int kKilledExitCode = 128 + SIGKILL;
constexpr int kNeverStartedExitCode = 128 + SIGTERM;  // stopped before it started

bool Alive(int pid) {
  return pid > 0 && (kill(pid, 0) == 0 || errno == EPERM);
}

std::optional<int> ReadExitFile(const std::string& path) {
  std::ifstream in(path);
  int code;
  if (in >> code) return code;
  return std::nullopt;
}

}  // namespace

void AgentOptions::Bind(ConfigSection& s) {
  s.Required("node", node);
  s.Required("server", server);
  s.Required("token_file", token_file);
  s.Required("state_dir", state_dir);
  s.Optional("advertise", advertise);
  s.Optional("gpus", gpus);
  s.Check(gpus >= 0 && gpus <= 64, "gpus", "must be 0..64");
  s.Optional("heartbeat_interval_ms", heartbeat_interval_ms);
  s.Check(heartbeat_interval_ms > 0, "heartbeat_interval_ms", "must be positive");
  s.Optional("kill_grace_ms", kill_grace_ms);
  s.Check(kill_grace_ms >= 0, "kill_grace_ms", "must not be negative");
}

Result<std::unique_ptr<Agent>> Agent::Create(const AgentOptions& options, Metrics* metrics) {
  FF_ASSIGN_OR_RETURN(std::string token, ReadTokenFile(options.token_file, /*create=*/false));
  std::error_code ec;
  for (const char* sub : {"logs", "run"}) {
    fs::create_directories(fs::path(options.state_dir) / sub, ec);
    if (ec) return IoError("cannot create " + options.state_dir + "/" + sub + ": " + ec.message());
  }
  std::unique_ptr<Agent> agent(new Agent(options, std::move(token), metrics));
  agent->LoadState();
  return agent;
}

Agent::Agent(const AgentOptions& options, std::string token, Metrics* metrics)
    : options_(options),
      token_(std::move(token)),
      metrics_(metrics),
      server_(options.server, token_),
      interval_ms_(options.heartbeat_interval_ms) {}

Agent::~Agent() {
  Stop();
}

void Agent::Start(const std::string& address) {
  address_ = options_.advertise.empty() ? address : options_.advertise;
  poll_ = std::thread([this] { PollLoop(); });
  heartbeat_ = std::thread([this] { HeartbeatLoop(); });
}

void Agent::Stop() {
  stopping_ = true;
  {
    MutexLock lock(&mu_);
    if (inflight_) inflight_->TryCancel();
  }
  if (poll_.joinable()) poll_.join();
  if (heartbeat_.joinable()) heartbeat_.join();
}

std::string Agent::LogPath(int64_t job, int rank) const {
  return options_.state_dir + "/logs/job-" + std::to_string(job) + "/rank-" + std::to_string(rank) +
         ".log";
}

std::string Agent::MetricsPath(int64_t job, int rank) const {
  return options_.state_dir + "/logs/job-" + std::to_string(job) + "/rank-" + std::to_string(rank) +
         ".metrics.jsonl";
}

std::string Agent::StepsPath(int64_t job, int rank) const {
  return options_.state_dir + "/logs/job-" + std::to_string(job) + "/rank-" + std::to_string(rank) +
         ".steps.jsonl";
}

std::string Agent::ExitPath(const Key& key) const {
  auto [job, run, rank] = key;
  return options_.state_dir + "/run/job-" + std::to_string(job) + ".run-" + std::to_string(run) +
         ".rank-" + std::to_string(rank) + ".exit";
}

std::string Agent::FlagPath(const Key& key) const {
  auto [job, run, rank] = key;
  return options_.state_dir + "/run/job-" + std::to_string(job) + ".run-" + std::to_string(run) +
         ".rank-" + std::to_string(rank) + ".suspend";
}

std::string Agent::SlotPath(const Key& key) const {
  return FlagPath(key) + ".slot";
}

std::string Agent::GrantPath(const Key& key) const {
  return FlagPath(key) + ".grant";
}

bool Agent::PollSlotAsks() {
  bool asked = false;
  for (auto& [key, task] : tasks_) {
    if (task.exited) continue;
    struct stat st {};
    if (stat(SlotPath(key).c_str(), &st) != 0) continue;
    const int64_t changed = int64_t{st.st_mtim.tv_sec} * 1'000'000'000 + st.st_mtim.tv_nsec;
    if (changed == task.slot_seen_ns) continue;
    task.slot_seen_ns = changed;
    Result<std::string> text = ReadWholeFile(SlotPath(key), "checkpoint slot ask");
    if (!text.ok()) continue;
    nlohmann::json ask = nlohmann::json::parse(*text, nullptr, /*allow_exceptions=*/false);
    if (!ask.is_object() || !ask["id"].is_number_integer()) continue;  // (being replaced)
    const int64_t id = ask["id"].get<int64_t>();
    if (id <= task.slot_id) continue;
    task.slot_id = id;
    task.slot_bytes = ask.value("bytes", 0.0);
    asked = true;
  }
  return asked;
}

void Agent::PollLoop() {
  while (!stopping_) {
    {
      MutexLock lock(&mu_);
      std::size_t before = 0, after = 0;
      for (const auto& [k, t] : tasks_)
        before += t.exited;
      PollExits();
      for (const auto& [k, t] : tasks_)
        after += t.exited;
      if (dirty_) SaveState();
      if (metrics_) {
        metrics_->Gauge("hai_agent_tasks_running", "Job processes running on this node")
            .Set(static_cast<double>(tasks_.size() - after));
        if (after > before) {
          metrics_->Counter("hai_agent_task_exits_total", "Job processes that ended")
              .Increment(static_cast<double>(after - before));
        }
      }
      // A task ended, or asks for a checkpoint slot: tell the server now rather than when the
      // long poll returns.
      const bool asked = PollSlotAsks();
      if ((after > before || asked) && inflight_) inflight_->TryCancel();
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

void Agent::HeartbeatLoop() {
  while (!stopping_) {
    if (!HeartbeatOnce() && !stopping_) {
      std::this_thread::sleep_for(std::chrono::milliseconds(interval_ms_.load()));
    }
  }
}

bool Agent::HeartbeatOnce() {
  hai::HeartbeatRequest req;
  req.set_node(options_.node);
  req.set_gpus(static_cast<int32_t>(options_.gpus));
  req.set_agent_address(address_);
  std::vector<Key> watched;
  std::set<Key> exited;
  {
    MutexLock lock(&mu_);
    req.set_generation(generation_);
    req.set_wait_ms(interval_ms_.load());
    for (const auto& [key, t] : tasks_) {
      watched.push_back(key);
      if (t.exited) exited.insert(key);
      if (!t.exited && t.slot_id > 0) {
        hai::CheckpointSlotRequest* ask = req.add_slot_requests();
        ask->set_job_id(std::get<0>(key));
        ask->set_run(std::get<1>(key));
        ask->set_rank(std::get<2>(key));
        ask->set_id(t.slot_id);
        ask->set_bytes(t.slot_bytes);
      }
      hai::TaskStatus* s = req.add_tasks();
      s->set_job_id(std::get<0>(key));
      s->set_run(std::get<1>(key));
      s->set_rank(std::get<2>(key));
      s->set_exited(t.exited);
      s->set_exit_code(t.exit_code);
    }
  }
  SummariseSteps(watched, exited, &req);
  hai::HeartbeatResponse resp;
  CallOptions call;
  call.deadline = std::chrono::milliseconds(interval_ms_.load() + 2000);
  call.max_attempts = 1;
  Status st = server_.Call("Heartbeat", call, [&](grpc::ClientContext* c, hai::Hai::Stub& stub) {
    {
      MutexLock lock(&mu_);
      inflight_ = c;
    }
    grpc::Status s = stub.Heartbeat(c, req, &resp);
    MutexLock lock(&mu_);
    inflight_ = nullptr;
    return s;
  });
  if (st.code() == StatusCode::kCancelled) return true;  // cut short to report an exit
  if (!st.ok()) {
    // Tasks keep running while the server is away; it learns their state when it is back.
    static int64_t last_warned = 0;
    if (NowMs() - last_warned > 10000) {
      spdlog::warn("{}", st.message());
      last_warned = NowMs();
    }
    return false;
  }
  MutexLock lock(&mu_);
  if (resp.heartbeat_interval_ms() > 0) interval_ms_ = resp.heartbeat_interval_ms();
  generation_ = resp.generation();
  Reconcile(resp);
  if (dirty_) SaveState();
  return true;
}

void Agent::Reconcile(const hai::HeartbeatResponse& response) {
  const int64_t now = NowMs();
  // Checkpoint slots granted: each of the job's tasks here that asked for that one or an earlier
  // one may write.
  for (const hai::CheckpointSlotGrant& g : response.slot_grants()) {
    for (auto& [key, task] : tasks_) {
      if (std::get<0>(key) != g.job_id() || std::get<1>(key) != g.run() || task.slot_id == 0 ||
          task.slot_id > g.id()) {
        continue;
      }
      Status st = WriteFileAtomically(GrantPath(key), "{\"id\": " + std::to_string(g.id()) + "}\n");
      if (!st.ok()) spdlog::warn("job {} rank {}: {}", g.job_id(), std::get<2>(key), st.message());
      task.slot_id = 0;
    }
  }
  std::set<Key> wanted;
  for (const hai::Task& t : response.tasks()) {
    Key key{t.job_id(), t.run(), t.rank()};
    wanted.insert(key);
    auto it = tasks_.find(key);
    if (it == tasks_.end()) {
      if (t.action() == hai::TASK_KILL) {
        // Stopped before it started here: report it ended without starting it.
        Task never;
        never.exited = true;
        never.exit_code = kNeverStartedExitCode;
        tasks_[key] = never;
        dirty_ = true;
      } else {
        StartTask(key, t);
      }
      continue;
    }
    Task& task = it->second;
    if (t.action() == hai::TASK_KILL && !task.exited && task.kill_deadline_ms == 0) {
      spdlog::info("job {} rank {}: stopping it", t.job_id(), t.rank());
      kill(-task.pid, SIGTERM);
      task.kill_deadline_ms = now + options_.kill_grace_ms;
      dirty_ = true;
    }
    if (t.action() == hai::TASK_SUSPEND && !task.exited && task.suspend_deadline_ms == 0) {
      // The suspend protocol: a flag the job can poll (holding its deadline), the signal, then
      // the deadline.
      task.suspend_deadline_ms = now + t.grace_ms();
      const std::string flag = FlagPath(key);
      char deadline[96];
      std::snprintf(deadline, sizeof deadline, "{\"deadline\": %.3f, \"grace_s\": %.3f}\n",
                    static_cast<double>(task.suspend_deadline_ms) / 1000,
                    static_cast<double>(t.grace_ms()) / 1000);
      // Written whole under another name, then renamed: a job polling the flag never reads half.
      if (Status st = WriteFileAtomically(flag, deadline); !st.ok()) {
        spdlog::warn("job {} rank {}: {}", t.job_id(), t.rank(), st.message());
        int fd = open(flag.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);  // the flag, at least
        if (fd >= 0) close(fd);
      }
      kill(-task.pid, SIGUSR1);
      dirty_ = true;
      spdlog::info("job {} rank {}: asked to checkpoint and exit within {} ms", t.job_id(),
                   t.rank(), t.grace_ms());
    }
  }
  for (auto it = tasks_.begin(); it != tasks_.end();) {
    if (wanted.contains(it->first)) {
      ++it;
      continue;
    }
    Task& task = it->second;
    if (task.exited) {
      // Reported, and no longer wanted: the server has it.
      unlink(FlagPath(it->first).c_str());
      unlink(ExitPath(it->first).c_str());
      unlink(SlotPath(it->first).c_str());
      unlink(GrantPath(it->first).c_str());
      it = tasks_.erase(it);
      dirty_ = true;
      continue;
    }
    if (task.kill_deadline_ms == 0) {
      spdlog::info("job {} rank {}: no longer wanted here; terminating it", std::get<0>(it->first),
                   std::get<2>(it->first));
      kill(-task.pid, SIGTERM);
      task.kill_deadline_ms = now + options_.kill_grace_ms;
      dirty_ = true;
    }
    ++it;
  }
}

void Agent::PollExits() {
  const int64_t now = NowMs();
  for (auto& [key, task] : tasks_) {
    if (task.exited) continue;
    for (int64_t deadline : {task.suspend_deadline_ms, task.kill_deadline_ms}) {
      if (deadline > 0 && now >= deadline) {
        if (kill(-task.pid, SIGKILL) == 0) {
          spdlog::info("job {} rank {}: killed after its grace period", std::get<0>(key),
                       std::get<2>(key));
        }
      }
    }
    std::optional<int> code;
    if (task.child) {
      int status = 0;
      pid_t r = waitpid(task.pid, &status, WNOHANG);
      if (r == task.pid) {
        code = WIFEXITED(status)     ? WEXITSTATUS(status)
               : WIFSIGNALED(status) ? 128 + WTERMSIG(status)
                                     : kKilledExitCode;
      } else if (r < 0 && errno == ECHILD) {
        code = kKilledExitCode;
      }
    } else if (!Alive(task.pid)) {
      code = kKilledExitCode;
    }
    if (!code) continue;
    // The wrapper's record is the job's own exit code (the wrapper's status says the same when
    // it ran to the end; when it was killed there is no record and the kill is the answer).
    if (auto recorded = ReadExitFile(ExitPath(key))) code = *recorded;
    kill(-task.pid, SIGKILL);  // leftovers of the job's process group
    task.exited = true;
    task.exit_code = *code;
    dirty_ = true;
    spdlog::info("job {} run {} rank {}: exited with {}", std::get<0>(key), std::get<1>(key),
                 std::get<2>(key), *code);
  }
}

void Agent::StartTask(const Key& key, const hai::Task& t) {
  auto [job, run, rank] = key;
  const std::string log_path = LogPath(job, rank);
  std::error_code ec;
  fs::create_directories(fs::path(log_path).parent_path(), ec);
  if (auto dir = t.env().find("HAI_CHECKPOINT_DIR"); dir != t.env().end()) {
    fs::create_directories(dir->second, ec);  // best effort: the job reports what it lacks
  }
  unlink(ExitPath(key).c_str());
  unlink(FlagPath(key).c_str());
  unlink(SlotPath(key).c_str());
  unlink(GrantPath(key).c_str());
  int log = open(log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  Task task;
  task.child = true;
  if (log < 0) {
    spdlog::error("job {} rank {}: cannot open {}: {}", job, rank, log_path, std::strerror(errno));
    task.exited = true;
    task.exit_code = 127;
    tasks_[key] = task;
    dirty_ = true;
    return;
  }
  std::string header = "==== hai: job " + std::to_string(job) + " run " + std::to_string(run) +
                       " rank " + std::to_string(rank) + " on " + options_.node + " ====\n";
  (void)!write(log, header.data(), header.size());

  std::map<std::string, std::string> env(t.env().begin(), t.env().end());
  env["HAI_SUSPEND_FLAG"] = FlagPath(key);
  env["HAI_CKPT_SLOT_FILE"] = SlotPath(key);
  env["HAI_CKPT_GRANT_FILE"] = GrantPath(key);
  env["HAI_METRICS_FILE"] = MetricsPath(job, rank);
  env["HAI_STEPS_FILE"] = StepsPath(job, rank);
  // Where the cluster runs TLS, the job's gRPC (HFReduce's rendezvous and quorum stores, fs3's
  // native client) uses the node's certificate, as this agent does (common/tls.h).
  if (const TlsOptions tls = ProcessTlsOptions(); tls.enabled()) {
    env["FF_TLS_CA_FILE"] = tls.ca_file;
    env["FF_TLS_CERT_FILE"] = tls.cert_file;
    env["FF_TLS_KEY_FILE"] = tls.key_file;
  }
  // The job outlives this agent (a restarted agent adopts it), so it does not die with us.
  Result<pid_t> pid =
      Spawn({.argv = {"/bin/sh", "-c", kWrapper, "hai-task", t.command(), ExitPath(key)},
             .env = std::move(env),
             .workdir = t.workdir(),
             .stdout_fd = log,
             .stderr_fd = log,
             .die_with_parent = false});
  close(log);
  if (!pid.ok()) {
    spdlog::error("job {} rank {}: {}", job, rank, pid.status().message());
    task.exited = true;
    task.exit_code = 127;
  } else {
    task.pid = *pid;
    spdlog::info("job {} run {} rank {}: started (pid {})", job, run, rank, *pid);
  }
  tasks_[key] = task;
  dirty_ = true;
}

namespace {

// Up to `max_bytes` of `path` from `offset`, and the file's size then; nothing for a file that
// does not exist (yet).
struct FileRead {
  std::string data;
  int64_t size = 0;
};
Result<FileRead> ReadFileAt(const std::string& path, int64_t offset, int64_t max_bytes) {
  FileRead out;
  if (offset < 0) return InvalidArgument("negative offset");
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return out;
    return Status::FromErrno(errno, "open " + path);
  }
  struct stat st {};
  fstat(fd, &st);
  out.size = st.st_size;
  out.data.resize(static_cast<std::size_t>(max_bytes));
  ssize_t n = pread(fd, out.data.data(), out.data.size(), offset);
  const int error = errno;
  close(fd);
  if (n < 0) return Status::FromErrno(error, "read " + path);
  out.data.resize(static_cast<std::size_t>(n));
  return out;
}

}  // namespace

grpc::Status Agent::ReadLog(grpc::ServerContext* ctx, const hai::ReadLogRequest* req,
                            hai::ReadLogResponse* resp) {
  return ServeRpc("ReadLog", [&]() -> Status {
    FF_RETURN_IF_ERROR(CheckToken(*ctx));
    FF_ASSIGN_OR_RETURN(FileRead read,
                        ReadFileAt(LogPath(req->job_id(), req->rank()), req->offset(),
                                   std::clamp<int64_t>(req->max_bytes(), 1, 4 << 20)));
    resp->set_size(read.size);
    resp->set_data(std::move(read.data));
    return Status::Ok();
  });
}

grpc::Status Agent::ReadMetrics(grpc::ServerContext* ctx, const hai::ReadMetricsRequest* req,
                                hai::ReadMetricsResponse* resp) {
  return ServeRpc("ReadMetrics", [&]() -> Status {
    FF_RETURN_IF_ERROR(CheckToken(*ctx));
    // At least two lines' worth, so that a reader always gets past a line too long to keep.
    FF_ASSIGN_OR_RETURN(
        FileRead read,
        ReadFileAt(req->steps() ? StepsPath(req->job_id(), req->rank())
                                : MetricsPath(req->job_id(), req->rank()),
                   req->offset(),
                   std::clamp<int64_t>(req->max_bytes(), 2 * kMaxMetricLine, 4 << 20)));
    MetricLines lines = ParseMetricLines(read.data);
    for (auto& r : lines.records)
      *resp->add_records() = std::move(r);
    resp->set_next_offset(req->offset() + lines.consumed);
    resp->set_unreadable(lines.unreadable);
    // More whole lines may follow what did not fit in this read.
    const int64_t end = req->offset() + static_cast<int64_t>(read.data.size());
    resp->set_more(lines.consumed > 0 && end < read.size);
    return Status::Ok();
  });
}

namespace {

constexpr std::size_t kStepWindow = 8;         // steps a summary covers
constexpr int64_t kStepReadBytes = 256 << 10;  // read per task and heartbeat

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

}  // namespace

void Agent::SummariseSteps(const std::vector<Key>& tasks, const std::set<Key>& exited,
                           hai::HeartbeatRequest* req) {
  std::map<Key, StepTail> tails;
  for (const Key& key : tasks) {
    auto [job, run, rank] = key;
    StepTail tail;
    if (auto it = step_tails_.find(key); it != step_tails_.end()) tail = std::move(it->second);
    const std::string path = StepsPath(job, rank);
    if (tail.offset < 0) {
      // First sight (a new run, or an agent that restarted): the file holds earlier runs' steps
      // too, so start near its end; the run's own records are told apart by their run number.
      struct stat st {};
      if (stat(path.c_str(), &st) != 0) {
        tails[key] = tail;  // not recording (yet)
        continue;
      }
      tail.offset = std::max<int64_t>(0, st.st_size - 2 * kMaxMetricLine);
      if (tail.offset > 0) {
        Result<FileRead> head = ReadFileAt(path, tail.offset, kMaxMetricLine);
        auto nl = head.ok() ? head->data.find('\n') : std::string::npos;
        tail.offset = nl == std::string::npos ? st.st_size : tail.offset + nl + 1;
      }
    }
    Result<FileRead> read = ReadFileAt(path, tail.offset, kStepReadBytes);
    if (read.ok()) {
      MetricLines lines = ParseMetricLines(read->data);
      tail.offset += lines.consumed;
      for (hai::MetricRecord& r : lines.records) {
        if (r.run() != run) continue;
        // A completed checkpoint (hai_job.report_checkpoint), not a step.
        if (auto w = r.values().find("ckpt_write_s"); w != r.values().end()) {
          auto value = [&](const char* name) {
            auto it = r.values().find(name);
            return it != r.values().end() && std::isfinite(it->second) ? it->second : 0.0;
          };
          hai::CheckpointReport c;
          c.set_job_id(job);
          c.set_run(run);
          c.set_rank(rank);
          c.set_step(r.step());
          c.set_time(r.time());
          c.set_bytes(std::max(0.0, value("ckpt_bytes")));
          c.set_write_s(std::max(0.0, value("ckpt_write_s")));
          tail.checkpoint = std::move(c);
          continue;
        }
        ++tail.recorded;
        tail.last.push_back(std::move(r));
        if (tail.last.size() > kStepWindow) tail.last.pop_front();
      }
    }
    if (tail.checkpoint) *req->add_checkpoints() = *tail.checkpoint;
    if (!tail.last.empty() && !exited.contains(key)) {
      hai::StepSummary* s = req->add_steps();
      s->set_job_id(job);
      s->set_run(run);
      s->set_rank(rank);
      s->set_last_step(tail.last.back().step());
      s->set_last_time(tail.last.back().time());
      s->set_window(static_cast<int32_t>(tail.last.size()));
      s->set_recorded(tail.recorded);
      auto median = [&](const char* name) {
        std::vector<double> v;
        for (const hai::MetricRecord& r : tail.last)
          if (auto it = r.values().find(name); it != r.values().end() && std::isfinite(it->second))
            v.push_back(it->second);
        return Median(std::move(v));
      };
      s->set_step_s(median("step_s"));
      s->set_compute_s(median("compute_s"));
      s->set_comm_s(median("comm_s"));
      s->set_data_s(median("data_s"));
      s->set_ckpt_s(median("ckpt_s"));
      s->set_collectives(median("collectives"));
      // Peer clocks ("{link,read}_{bytes,wait_s,move_s}:PEER"): per step over the window.
      std::map<std::string, hai::PeerTime> links, reads;
      for (const hai::MetricRecord& r : tail.last) {
        for (const auto& [name, value] : r.values()) {
          const auto colon = name.find(':');
          if (colon == std::string::npos || !std::isfinite(value)) continue;
          const std::string_view kind = std::string_view(name).substr(0, colon);
          const std::string peer = name.substr(colon + 1);
          std::map<std::string, hai::PeerTime>* to = kind.starts_with("link_")   ? &links
                                                     : kind.starts_with("read_") ? &reads
                                                                                 : nullptr;
          if (to == nullptr || peer.empty()) continue;
          hai::PeerTime& p = (*to)[peer];
          p.set_peer(peer);
          const std::string_view field = kind.substr(5);
          const double per_step = value / static_cast<double>(tail.last.size());
          if (field == "bytes") p.set_bytes(p.bytes() + per_step);
          if (field == "wait_s") p.set_wait_s(p.wait_s() + per_step);
          if (field == "move_s") p.set_move_s(p.move_s() + per_step);
        }
      }
      for (auto& [peer, p] : links)
        *s->add_links() = std::move(p);
      for (auto& [peer, p] : reads)
        *s->add_reads() = std::move(p);
    }
    tails[key] = std::move(tail);
  }
  step_tails_ = std::move(tails);  // forgets the tasks that ended
}

Status Agent::CheckToken(const grpc::ServerContext& ctx) const {
  if (BearerToken(ctx).empty() || HashToken(BearerToken(ctx)) != HashToken(token_)) {
    return Status(StatusCode::kUnauthenticated, "invalid agent token");
  }
  return Status::Ok();
}

void Agent::LoadState() {
  MutexLock lock(&mu_);
  std::ifstream in(options_.state_dir + "/tasks.json");
  if (!in) return;
  nlohmann::json j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (!j.is_array()) {
    spdlog::warn("ignoring unreadable {}/tasks.json", options_.state_dir);
    return;
  }
  for (const auto& e : j) {
    Key key{e.value("job", int64_t{0}), e.value("run", 0), e.value("rank", 0)};
    Task t;
    t.pid = e.value("pid", -1);
    t.exited = e.value("exited", false);
    t.exit_code = e.value("exit_code", 0);
    t.suspend_deadline_ms = e.value("suspend_deadline_ms", int64_t{0});
    t.kill_deadline_ms = e.value("kill_deadline_ms", int64_t{0});
    t.child = false;  // processes of the previous agent: watched, not waited for
    if (!t.exited) {
      spdlog::info("job {} rank {}: {} (pid {})", std::get<0>(key), std::get<2>(key),
                   Alive(t.pid) ? "adopted, still running" : "ended while the agent was away",
                   t.pid);
    }
    tasks_[key] = t;
  }
}

void Agent::SaveState() {
  nlohmann::json j = nlohmann::json::array();
  for (const auto& [key, t] : tasks_) {
    j.push_back({{"job", std::get<0>(key)},
                 {"run", std::get<1>(key)},
                 {"rank", std::get<2>(key)},
                 {"pid", t.pid},
                 {"exited", t.exited},
                 {"exit_code", t.exit_code},
                 {"suspend_deadline_ms", t.suspend_deadline_ms},
                 {"kill_deadline_ms", t.kill_deadline_ms}});
  }
  const std::string path = options_.state_dir + "/tasks.json";
  {
    std::ofstream out(path + ".tmp", std::ios::trunc);
    out << j.dump() << "\n";
    out.flush();
    if (!out) {
      spdlog::error("cannot write {}.tmp", path);
      return;
    }
  }
  std::rename((path + ".tmp").c_str(), path.c_str());
  dirty_ = false;
}

}  // namespace ff::platform
