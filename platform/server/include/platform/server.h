// hai-server: the job API, the node registry and the scheduling loop.
//
// State lives in memory under one mutex and every change that must survive a crash (jobs, runs,
// users, drains) is written to the Store before the call that made it returns. Agents pull their
// work: each heartbeat reports the node's processes and gets back the tasks that should run there
// (anything else the agent kills), so a restarted server or agent converges without replaying
// messages.
//
// Highly available (engine = "etcd"): two or more hai-servers share their records in etcd; one,
// elected (common/leader_election.h), leads: it runs the scheduling loop and serves; the others
// answer every call with kUnavailable naming the leader, and clients (HaiClient, agents, hai,
// hai-health, hai-web) follow it. A new leader loads the records from etcd and gives the agents a
// heartbeat timeout to find it, so no node is judged lost for the leader change; agents converge
// on what it says as on a restarted server's, and it says what its predecessor said (the same
// records), so no rank is started twice. Every write is fenced by the leader key: a deposed leader
// changes nothing.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "common/config.h"
#include "common/etcd.h"
#include "common/leader_election.h"
#include "common/thread_annotations.h"
#include "monitoring/metrics.h"
#include "platform/lifecycle.h"
#include "platform/proto/hai.grpc.pb.h"
#include "platform/step_detector.h"
#include "scheduler/scheduler.h"

namespace ff::hfreduce {
class StoreServer;
struct QuorumRequest;
}  // namespace ff::hfreduce

namespace ff::platform {

class Store;  // the durable records (RocksDB or etcd), private to hai-server

struct HaiOptions {
  static constexpr const char* kSection = "hai";  // its section in the config file
  // Where the records live: "rocksdb" (in data_dir) or "etcd" (replicas sharing etcd_prefix).
  std::string engine = "rocksdb";
  std::string data_dir;  // RocksDB (engine "rocksdb") and the bootstrap admin token
  std::vector<std::string> etcd_endpoints;
  std::string etcd_prefix = "/fireflyer/hai/";
  std::string advertise;       // the address clients dial this replica at ("" = its RPC address)
  int64_t election_ttl_s = 3;  // a dead leader is replaced within about this
  std::string cluster = "deploy/config/cluster-small.toml";
  std::string agent_token_file;  // shared with the agents; created if missing
  std::string checkpoint_root = "/tmp/hai-checkpoints";  // HAI_CHECKPOINT_DIR = <root>/<user>/<job>
  int64_t heartbeat_timeout_ms = 10000;                  // a node silent this long is lost
  int64_t heartbeat_interval_ms = 1000;                  // told to agents
  int64_t schedule_interval_ms = 500;
  // A suspended job's deadline to save and exit: suspend_grace_margin x its checkpoints' write
  // time (as it reported them: hai_job.report_checkpoint) + suspend_grace_slack_ms, within
  // [suspend_grace_ms, suspend_max_grace_ms]; suspend_grace_ms for a job that never reported one.
  int64_t suspend_grace_ms = 30000;
  int64_t suspend_max_grace_ms = 600000;
  double suspend_grace_margin = 1.5;
  int64_t suspend_grace_slack_ms = 10000;
  // Victims of preemption: "least-lost" (the fewest GPU-seconds lost: a save and a restart for a
  // job that saves within its deadline, else the work since its checkpoint) or "newest-first";
  // restart_cost_s is a restart's start-up before it reads its checkpoint back.
  std::string victim_order = "least-lost";
  int64_t restart_cost_s = 60;
  // Staggered checkpoints: the periodic checkpoints of running jobs (hai_job.checkpoint_slot) are
  // let through so that their writes, at each job's last measured rate, stay within
  // checkpoint_write_gbps (what fs3 sustains for them; 0: every ask is granted at once); one
  // waits at most checkpoint_max_delay_ms. A suspended job's save is never held, and counts.
  double checkpoint_write_gbps = 0;
  int64_t checkpoint_max_delay_ms = 60000;
  int64_t master_port_base = 29500;
  std::string policy = "congestion-aware";
  // Unset: the scheduler library's default (scheduler::PolicyOptions::locality_wait), the wait the
  // simulator measured; an admin may set another.
  std::optional<int64_t> locality_wait_s;
  // Unset: the library's default (scheduler::PolicyOptions::locality_wait_share).
  std::optional<double> locality_wait_share;
  bool preemption = true;
  bool backfill = true;
  // Lost replica groups: a replacement that ends sooner than replacement_quick_failure_s after
  // it started failed at once, and the replica's next waits replacement_backoff_s, doubling with
  // each such failure up to replacement_backoff_max_s (scheduler::ReplacementPolicy).
  int64_t replacement_quick_failure_s = 60;
  int64_t replacement_backoff_s = 1;
  int64_t replacement_backoff_max_s = 64;
  // Stragglers (step telemetry): a node named the straggler straggler_suspect_findings times within
  // straggler_window_s, by every job on it that records its steps, is suspect (0: never); with
  // straggler_drain it is also drained (drained_by "hai-straggler") until a report of its
  // hai-health carries a validator (memory bandwidth, HFReduce loopback) that ran after the drain
  // and every check passes.
  int64_t straggler_suspect_findings = 3;
  int64_t straggler_window_s = 3600;
  bool straggler_drain = false;
  // When a straggler drain leaves a gang job running on the node: suspend it (it checkpoints and
  // is requeued, off the drained node) if what it would save, its remaining run time (--time,
  // less what it ran) times the share of each step lost to the straggler, beats
  // straggler_requeue_cost_s (a suspend, checkpoint and restart); otherwise its history says why
  // it stays.
  bool straggler_requeue_gangs = false;
  int64_t straggler_requeue_cost_s = 300;
  // A fault-tolerant job (--replicas) whose finding names the node of one of its groups: that
  // group is lost and replaced off the node (which only this run's replacements avoid) when it
  // pays: at once if the other groups alone step faster than all of them wait now
  // ((live - 1) / live >= best / now), else when the rest of the run (--time less what it ran; an
  // hour when unknown) at the best speed gains more than the straggler_replace_cost_s a
  // replacement takes to start and join loses.
  bool straggler_replace_groups = true;
  int64_t straggler_replace_cost_s = 30;

  void Bind(ConfigSection& s);
};

// The placement policy's options: the scheduler library's defaults, with what the config sets.
scheduler::PolicyOptions PolicyOptionsOf(const HaiOptions& options);
// The scheduling rounds' options from the config (users' quotas are added per round).
scheduler::SchedulerOptions SchedulerOptionsOf(const HaiOptions& options);

class HaiServer final : public hai::Hai::Service {
 public:
  static Result<std::unique_ptr<HaiServer>> Create(const HaiOptions& options, Metrics* metrics);
  ~HaiServer() override;

  // Starts / stops the scheduling loop (and, on etcd, the campaign for leadership); `address`
  // is where this replica serves.
  void Start(const std::string& address = "");
  void Stop();
  // Not OK once a durable write failed after memory had changed: the server then refuses every
  // call and asks its process to stop (SIGTERM), and the daemon exits 1 with this status, so a
  // restart serves only what is on disk. Agents keep reporting what the failed write lost.
  Status WriteFailure() const;

  grpc::Status Submit(grpc::ServerContext*, const hai::SubmitRequest*, hai::Job*) override;
  grpc::Status ListJobs(grpc::ServerContext*, const hai::ListJobsRequest*,
                        hai::ListJobsResponse*) override;
  grpc::Status GetJob(grpc::ServerContext*, const hai::JobRef*, hai::Job*) override;
  grpc::Status StopJob(grpc::ServerContext*, const hai::JobRef*, hai::Job*) override;
  grpc::Status SuspendJob(grpc::ServerContext*, const hai::JobRef*, hai::Job*) override;
  grpc::Status ReadLogs(grpc::ServerContext*, const hai::LogsRequest*,
                        grpc::ServerWriter<hai::LogChunk>*) override;
  grpc::Status ReadMetrics(grpc::ServerContext*, const hai::MetricsRequest*,
                           hai::JobMetrics*) override;
  grpc::Status Steps(grpc::ServerContext*, const hai::JobStepsRequest*, hai::JobSteps*) override;
  grpc::Status ListNodes(grpc::ServerContext*, const hai::ListNodesRequest*,
                         hai::ListNodesResponse*) override;
  grpc::Status WhoAmI(grpc::ServerContext*, const hai::WhoAmIRequest*, hai::User*) override;
  grpc::Status AddUser(grpc::ServerContext*, const hai::AddUserRequest*,
                       hai::AddUserResponse*) override;
  grpc::Status ListUsers(grpc::ServerContext*, const hai::ListUsersRequest*,
                         hai::ListUsersResponse*) override;
  grpc::Status DrainNode(grpc::ServerContext*, const hai::DrainRequest*, hai::Node*) override;
  grpc::Status Heartbeat(grpc::ServerContext*, const hai::HeartbeatRequest*,
                         hai::HeartbeatResponse*) override;
  grpc::Status ReportHealth(grpc::ServerContext*, const hai::HealthReport*,
                            hai::HealthReportResponse*) override;

  // The drained_by of drains made by hai-health.
  static constexpr const char* kHealthDrainer = "hai-health";
  // ... and of drains of suspect stragglers (HaiOptions::straggler_drain).
  static constexpr const char* kStragglerDrainer = "hai-straggler";

  // One scheduling pass (lost nodes, then a round); the loop calls it, tests may too.
  void Tick();

 private:
  struct NodeRuntime {
    hai::Node record;  // persisted part: drained, drain_reason
    std::chrono::steady_clock::time_point last_heartbeat;
    int held = 0;  // heartbeats held open now (a long poll): the agent is in touch
    // Back from lost: no new work until heard from without a silence since this time for
    // heartbeat_timeout_ms (a link coming back comes back in fits). Unset: never lost.
    std::optional<std::chrono::steady_clock::time_point> probation_since;
    std::set<std::tuple<int64_t, int, int>> reported_running;  // (job, run, rank)
    uint64_t generation = 1;  // bumped whenever the node's work changes (long polls wake)
    std::deque<int64_t> straggler_findings;  // when jobs' findings named it, within the window
  };

  HaiServer(const HaiOptions& options, scheduler::Topology topology, std::unique_ptr<Store> store,
            Metrics* metrics);
  Status Load() FF_REQUIRES(mu_);
  // OK on the leader (and on a lone RocksDB hai-server); kUnavailable naming the leader elsewhere.
  Status Leading() const FF_REQUIRES(mu_);
  void OnLeadership(bool leader) FF_EXCLUDES(mu_);

  Result<hai::User> Authenticate(const grpc::ServerContext& context) const;  // a user
  Status AuthenticateAgent(const grpc::ServerContext& context) const;
  Result<hai::Job*> OwnJob(const hai::User& user, int64_t id) FF_REQUIRES(mu_);

  Status DoSubmit(const hai::User& user, const hai::JobSpec& spec, hai::Job* out) FF_EXCLUDES(mu_);
  // Applies a lifecycle event to the job (platform/lifecycle.h), saves it, then changes
  // it in memory, wakes the nodes whose tasks changed and, when its run ended, asks for a
  // scheduling round. A failed save changes nothing in memory; it is the caller's error
  // (a user's request: nothing happened) or stops the server (an event the cluster will not
  // repeat, such as a lost node: see MustPersist).
  enum class OnWriteFailure { kReturnError, kStopServer };
  Status ApplyEvent(hai::Job& job, const JobEvent& event, OnWriteFailure on_failure)
      FF_REQUIRES(mu_);
  void Kick() FF_EXCLUDES(loop_mu_);  // a scheduling round as soon as possible
  Status ValidateSpec(const hai::JobSpec& spec) const;
  Status Save(const hai::Job& job) FF_REQUIRES(mu_);
  // `st` is the result of a durable write made after memory changed; a failure stops the server
  // (see WriteFailure) and is returned.
  Status MustPersist(Status st, const std::string& what) FF_REQUIRES(mu_);

  void CheckLostNodes() FF_REQUIRES(mu_);
  // `node` was drained: fault-tolerant jobs' replica groups on it are lost and replaced
  // (NodeDrained); gangs stay.
  Status EvictReplicaGroups(const std::string& node, const std::string& reason) FF_REQUIRES(mu_);
  void ScheduleRound() FF_REQUIRES(mu_);
  // GPUs handed out per node and master ports in use per host, over the active runs.
  struct InUse {
    std::map<std::string, std::set<int>> gpus;
    std::map<std::string, std::set<int>> ports;
  };
  InUse ComputeInUse() const FF_REQUIRES(mu_);
  // The run a placement becomes: GPUs on each node and a master port free, taken from in_use;
  // for a fault-tolerant job, its replica groups, each with its own master port.
  hai::Run PlaceRun(const hai::JobSpec& spec, const scheduler::Placement& placement,
                    InUse& in_use) const FF_REQUIRES(mu_);
  // GPUs on `node` for one placement, taken from in_use ("0,1").
  std::string TakeGpus(const std::string& node, int count, InUse& in_use) const;
  // A master for ranks led from `first_node`: its host and the lowest port free there.
  std::pair<std::string, int> TakeMaster(const std::string& first_node, InUse& in_use) const
      FF_REQUIRES(mu_);
  // A running fault-tolerant job's request for its missing replica groups (lost ones, and those
  // its run began without), for the round's Decide; none when it asks for nothing.
  std::optional<scheduler::JobRequest> GroupsAskedFor(const hai::Job& job) const;
  // Starts a group Decide placed (GroupStarted, through `apply`).
  void StartGroup(hai::Job& job, const scheduler::Decision::GroupStart& start, InUse& in_use,
                  const std::function<bool(hai::Job&, const JobEvent&)>& apply) FF_REQUIRES(mu_);
  std::vector<hai::Task> TasksFor(const std::string& node) const FF_REQUIRES(mu_);
  // A group's request to join its job's quorum, against the job's record (ReplicaQuorum::Check):
  // the job is active and fault tolerant and the group one of its current run's live groups
  // (else kNotFound or kFailedPrecondition, reason kGroupNotLive for a group that is not); R and
  // M become the record's, whatever the group sent.
  static constexpr const char* kUnknownJob = "UNKNOWN_JOB";
  static constexpr const char* kGroupNotLive = "GROUP_NOT_LIVE";
  Status CheckQuorumRequest(hfreduce::QuorumRequest& request) FF_EXCLUDES(mu_);
  scheduler::JobRequest RequestOf(const hai::Job& job) const;
  void UpdateGauges() FF_REQUIRES(mu_);
  // Step telemetry (steps.cc): a node's heartbeat's summaries, kept for their jobs' current runs;
  // and, every round, each running job's evaluation (StepTracker), whose findings go into the
  // job's run events and the straggler node's events.
  void TakeStepSummaries(const hai::HeartbeatRequest& req) FF_REQUIRES(mu_);
  // Checkpoints (checkpoints.cc): a heartbeat's reports, into each job's current run
  // (Run.checkpoint: the latest step, every rank's bytes, the slowest rank's write time), written
  // when that changes; and the deadline a suspended job is given.
  Status TakeCheckpoints(const hai::HeartbeatRequest& req) FF_REQUIRES(mu_);
  int64_t SuspendGraceMs(const hai::Job& job) const;
  // Staggered checkpoints (checkpoints.cc): a heartbeat's asks join the queue; AdmitCheckpoints
  // lets through what the budget allows (waking the nodes of the jobs let through); the grants
  // for `req`'s asks. A job's next checkpoint report ends its slot.
  void TakeSlotAsks(const hai::HeartbeatRequest& req) FF_REQUIRES(mu_);
  void AdmitCheckpoints(int64_t now_ms) FF_REQUIRES(mu_);
  // Whether job `id`'s run `run` is no longer its live run (the job ended, or it runs anew).
  bool RunEnded(int64_t id, int run) const FF_REQUIRES(mu_);
  std::vector<hai::CheckpointSlotGrant> SlotGrants(const hai::HeartbeatRequest& req) const
      FF_REQUIRES(mu_);
  void DetectStragglers() FF_REQUIRES(mu_);
  // A finding of `job` named `node` the straggler: counted, and the node made suspect (and
  // drained, with straggler_drain) when that is its straggler_suspect_findings-th in the window
  // and every job on it that records steps names it now.
  void NoteStraggler(const std::string& node, int64_t job, int64_t now_ms) FF_REQUIRES(mu_);
  // `node` was drained as a straggler: each gang job on it is told, and suspended to be requeued
  // elsewhere when straggler_requeue_gangs and it pays.
  void RequeueGangsOff(const std::string& node, int64_t now_ms) FF_REQUIRES(mu_);
  struct JobSteps;
  // The finding of fault-tolerant job `job` names the node of one of its groups: move the group
  // off it when that pays (HaiOptions::straggler_replace_groups); its history says either way.
  void ReplaceStragglingGroup(hai::Job& job, JobSteps& steps, int64_t now_ms) FF_REQUIRES(mu_);

  const HaiOptions options_;
  const scheduler::Topology topology_;
  std::unique_ptr<etcd::Client> etcd_;  // the etcd engine's client (outlives store_, election_)
  std::unique_ptr<Store> store_;
  std::unique_ptr<LeaderElection> election_;
  std::string self_;  // this replica's address
  // The replica quorums of fault-tolerant jobs (haiscale.ft) and their rendezvous store, served
  // on this replica's host; its address is every task's HAI_FT_STORE.
  std::unique_ptr<hfreduce::StoreServer> quorum_server_;
  std::string quorum_address_ FF_GUARDED_BY(mu_);  // every replica's, this one's first
  std::atomic<bool> ft_leading_{true};             // whether this replica's quorums serve
  int64_t ft_fence_revision_ = 0;  // the fence its quorums were decided under (election thread's)
  std::chrono::steady_clock::time_point ft_stores_read_;  // the loop thread's
  // Reads every replica's quorum service address from etcd into quorum_address_.
  void RefreshFtStores() FF_EXCLUDES(mu_);
  // Per fault-tolerant job, the last of its quorum's events copied into its run.
  std::map<int64_t, uint64_t> quorum_events_seen_ FF_GUARDED_BY(mu_);
  std::unique_ptr<scheduler::Scheduler> scheduler_;
  std::string agent_token_hash_;
  Metrics* metrics_;

  mutable Mutex mu_;
  CondVar work_cv_;  // with mu_: a node's generation changed, or stopping
  bool shutting_down_ FF_GUARDED_BY(mu_) = false;
  bool loaded_ FF_GUARDED_BY(mu_) = false;  // the records in memory are this leader's
  Status write_failure_ FF_GUARDED_BY(mu_);
  std::map<int64_t, hai::Job> jobs_ FF_GUARDED_BY(mu_);
  std::map<std::string, hai::User> users_ FF_GUARDED_BY(mu_);            // by name
  std::map<std::string, std::string> user_by_token_ FF_GUARDED_BY(mu_);  // token hash -> name
  std::map<std::string, NodeRuntime> nodes_ FF_GUARDED_BY(mu_);  // every node of cluster.toml
  // Per running job, its current run's step summaries (by rank) and its tracker. Soft state: a
  // restarted or new leader rebuilds it from the heartbeats (and a new baseline).
  struct JobSteps {
    int32_t run = 0;
    std::map<int32_t, hai::StepSummary> ranks;
    std::unique_ptr<StepTracker> tracker;
    int64_t replaced_since_ms = -1;  // the finding (its since_ms) whose group was moved off
    int64_t told_since_ms = -1;      // the finding whose group's staying was told
  };
  std::map<int64_t, JobSteps> steps_ FF_GUARDED_BY(mu_);
  // Staggered checkpoints: asks waiting (in arrival order), and slots let through, per job.
  struct SlotAsk {
    int64_t job = 0;
    int run = 0;
    int64_t id = 0;
    double bytes = 0;
    int64_t since_ms = 0;
  };
  struct Slot {
    int run = 0;
    int64_t id = 0;        // asks up to this one are granted
    double gbps = 0;       // what its writes are taken to use
    int64_t since_ms = 0;  // when it was let through
    int64_t until_ms = 0;  // it ends by then at the latest (else at its next checkpoint report)
  };
  std::vector<SlotAsk> slot_asks_ FF_GUARDED_BY(mu_);
  std::map<int64_t, Slot> slots_ FF_GUARDED_BY(mu_);
  // The last checkpoint each rank of a running job reported: job -> (run, rank) -> report.
  std::map<int64_t, std::map<std::pair<int, int>, hai::CheckpointReport>> checkpoint_reports_
      FF_GUARDED_BY(mu_);
  // SUSPENDING jobs, as UpdateGauges saw them.
  std::map<int64_t, int64_t> suspending_since_ms_ FF_GUARDED_BY(mu_);
  int64_t next_id_ FF_GUARDED_BY(mu_) = 1;

  Mutex loop_mu_;
  CondVar loop_cv_;
  bool stopping_ FF_GUARDED_BY(loop_mu_) = false;
  bool kicked_ FF_GUARDED_BY(loop_mu_) = false;
  std::thread loop_;
};

}  // namespace ff::platform
