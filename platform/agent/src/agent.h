// hai-agent: one per node. Heartbeats to hai-server, runs the tasks the server lists for this
// node (each in its own process group, output to a log file per rank), reports how they exit,
// and carries out the suspend protocol: SIGUSR1 plus a flag file, a grace period to checkpoint
// and exit, then SIGKILL to the process group.
//
// Tasks outlive the agent: their state is kept in <state_dir>/tasks.json and a restarted agent
// adopts the processes still running (each task runs under a small /bin/sh wrapper that records
// the exit code in a file), so an agent restart neither orphans nor double-starts a job.
#pragma once

#include <atomic>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "common/config.h"
#include "common/thread_annotations.h"
#include "monitoring/metrics.h"
#include "platform/client.h"
#include "platform/proto/hai.grpc.pb.h"

namespace ff::platform {

struct AgentOptions {
  static constexpr const char* kSection = "agent";  // its section in the config file
  std::string node;                                 // this node's name in cluster.toml
  std::string server;                               // hai-server host:port
  std::string token_file;
  std::string state_dir;
  std::string advertise;  // address hai-server uses to read logs; default: the bound address
  int64_t gpus = 8;
  int64_t heartbeat_interval_ms = 1000;  // until the server says otherwise
  int64_t kill_grace_ms = 5000;          // SIGTERM to SIGKILL for tasks no longer wanted

  void Bind(ConfigSection& s);
};

class Agent final : public hai::HaiAgent::Service {
 public:
  // `metrics` (optional, not owned) gets hai_agent_tasks_running and hai_agent_task_exits_total.
  static Result<std::unique_ptr<Agent>> Create(const AgentOptions& options,
                                               Metrics* metrics = nullptr);
  ~Agent() override;

  // Starts heartbeating; `address` is where this agent's log service listens.
  void Start(const std::string& address);
  void Stop();

  grpc::Status ReadLog(grpc::ServerContext*, const hai::ReadLogRequest*,
                       hai::ReadLogResponse*) override;
  // The records of a rank's metrics file ($HAI_METRICS_FILE, beside its log), parsed here.
  grpc::Status ReadMetrics(grpc::ServerContext*, const hai::ReadMetricsRequest*,
                           hai::ReadMetricsResponse*) override;

 private:
  using Key = std::tuple<int64_t, int, int>;  // job, run, rank
  struct Task {
    int pid = -1;        // the wrapper shell; also the process group id
    bool child = false;  // started by this agent process (else adopted after a restart)
    bool exited = false;
    int exit_code = 0;
    int64_t suspend_deadline_ms = 0;  // SIGKILL after this once suspension was signalled
    int64_t kill_deadline_ms = 0;     // SIGKILL after this once SIGTERM was sent
    // Its ask to write a periodic checkpoint (SlotPath), sent with each heartbeat until granted
    // (slot_id 0: none waiting), and the ask file's last change seen.
    int64_t slot_id = 0;
    double slot_bytes = 0;
    int64_t slot_seen_ns = 0;
  };

  Agent(const AgentOptions& options, std::string token, Metrics* metrics);
  void PollLoop();       // watches the tasks: exits, grace periods
  void HeartbeatLoop();  // long-polls hai-server
  bool HeartbeatOnce();  // false when the server could not be reached
  void Reconcile(const hai::HeartbeatResponse& response) FF_REQUIRES(mu_);
  void PollExits() FF_REQUIRES(mu_);
  void StartTask(const Key& key, const hai::Task& t) FF_REQUIRES(mu_);
  std::string LogPath(int64_t job, int rank) const;
  std::string MetricsPath(int64_t job, int rank) const;
  std::string StepsPath(int64_t job, int rank) const;
  // Reads what the running tasks recorded of their steps since the last heartbeat and adds a
  // summary of each one's last steps to `req` (the heartbeat thread's).
  // Tasks in `exited` (ended, not yet acknowledged) are read one last time for the checkpoints
  // they reported (a suspended job's save just before it exits), without a step summary.
  void SummariseSteps(const std::vector<Key>& tasks, const std::set<Key>& exited,
                      hai::HeartbeatRequest* req);
  Status CheckToken(const grpc::ServerContext& ctx) const;
  std::string ExitPath(const Key& key) const;
  std::string FlagPath(const Key& key) const;
  // A task's ask for a checkpoint slot ({"id", "bytes"}, written by hai_job.checkpoint_slot) and
  // the grant this agent writes back ({"id"}).
  std::string SlotPath(const Key& key) const;
  std::string GrantPath(const Key& key) const;
  // Reads a changed ask of each running task; true when one is new (to send it now).
  bool PollSlotAsks() FF_REQUIRES(mu_);
  void LoadState() FF_EXCLUDES(mu_);
  void SaveState() FF_REQUIRES(mu_);

  const AgentOptions options_;
  const std::string token_;
  Metrics* metrics_;
  std::string address_;
  HaiClient server_;  // hai-server, with the agents' token

  Mutex mu_;
  std::map<Key, Task> tasks_ FF_GUARDED_BY(mu_);
  std::atomic<int64_t> interval_ms_;  // the server's, from its last answer
  bool dirty_ FF_GUARDED_BY(mu_) = false;
  uint64_t generation_ FF_GUARDED_BY(mu_) = 0;  // of the server's last answer
  // Per running task that records its steps: how far its steps file was read, and its last steps
  // (the heartbeat thread's).
  struct StepTail {
    int64_t offset = -1;  // -1: not opened yet
    int64_t recorded = 0;
    std::deque<hai::MetricRecord> last;
    std::optional<hai::CheckpointReport> checkpoint;  // the last one it reported
  };
  std::map<Key, StepTail> step_tails_;
  // The heartbeat in progress, to cut it short.
  grpc::ClientContext* inflight_ FF_GUARDED_BY(mu_) = nullptr;

  std::atomic<bool> stopping_{false};
  std::thread poll_;
  std::thread heartbeat_;
};

}  // namespace ff::platform
