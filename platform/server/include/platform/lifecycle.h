// The one home of a job's life: how a job and its current run change on each event, as a pure
// function (no clock, no store, no locks), so that "what happens to a job when its node is lost?"
// is answered here and unit-tested (tests/platform/lifecycle_test.cc), and hai-server only applies
// what it returns: saves the job, wakes the nodes, runs a scheduling round.
//
//   QUEUED ──Started──▶ RUNNING ──(every rank exited 0)──────────────▶ SUCCEEDED
//     ▲  ▲                 │ ├──RankExited≠0 (the gang is killed)──▶ FAILED, or QUEUED again under
//     │  │                 │ │                                         RESTART_ON_FAILURE
//     │  │                 │ ├──NodeLost──▶ QUEUED (FAILED under RESTART_NEVER)
//     │  │                 │ └──StopRequested──▶ STOPPED (once its ranks are gone)
//     │  │     SuspendRequested / Preempted
//     │  │                 ▼
//     │  └── SUSPENDED ◀── SUSPENDING (once its ranks are gone; a lost node requeues it instead)
//     └── (a job stopped before it ran goes straight to STOPPED)
//
// A fault-tolerant job (JobSpec.replicas R > 0) runs as R replica groups (Run.groups). While it
// runs, a group whose node is lost or drained, or one of whose ranks exits non-zero, is lost on
// its own: its other ranks are killed, the run goes on, and the scheduler places a replacement
// (GroupStarted) that joins the others at a step boundary; a run may also start with fewer
// groups than R (at least min_replicas: no room for more), its missing replicas added later by
// GroupStarted as their first incarnations. Only when fewer than min_replicas groups are left
// does the run end as a gang's would (RUN_NODE_LOST or RUN_RANK_FAILED, then the restart
// policy). When every rank of some group exits 0 the training is over: nothing is
// replaced any more, and the job succeeds once every rank's exit is known.
//
// A run ends when every rank's exit is known (a rank on a lost node counts as exited with
// kLostExitCode); how it ended is Run.end (hai.proto's RunEnd), with Run.end_reason the line
// people read.
#pragma once

#include <cstdint>
#include <string>
#include <variant>
#include <vector>

#include "common/result.h"
#include "hfreduce/quorum.h"
#include "platform/proto/hai.pb.h"
#include "platform/runs.h"  // FaultTolerant, GroupOfNode, HeldNodes

namespace ff::platform {

// A rank whose node was lost: its exit is unknown (its process may live on, unreachable).
inline constexpr int kLostExitCode = -1;
// RESTART_ON_FAILURE's restarts when the spec leaves max_restarts at 0.
inline constexpr int kDefaultMaxRestarts = 3;

bool Active(const hai::Job& job);    // RUNNING or SUSPENDING: it has processes on nodes
bool Terminal(const hai::Job& job);  // SUCCEEDED, FAILED or STOPPED: it never runs again
int ProcsPerNode(const hai::JobSpec& spec);
// The ranks a run starts with: nodes x procs_per_node, times replicas for a fault-tolerant job.
int WorldSize(const hai::JobSpec& spec);
// Under fault tolerance, how many replacement groups one run may place (a group that keeps
// failing is not replaced forever): max_restarts (default kDefaultMaxRestarts) per replica.
int MaxReplacements(const hai::JobSpec& spec);
// The groups that neither finished nor were lost.
int LiveGroups(const hai::Run& run);
// "12:00:01 UTC" for messages.
std::string UtcClock(int64_t ms);
// The GPUs a run holds.
int RunGpus(const hai::Job& job, const hai::Run& run);
// What a suspended run lost, for its history: "saved step 40 in 3.2s, within its 8s deadline", or
// "missed its 8s suspend deadline: killed; lost ~12 GPU-min since its checkpoint of step 30 at
// 12:00:01" (by the exit codes: a rank killed by SIGKILL after the deadline).
std::string SuspendOutcome(const hai::Job& job, const hai::Run& run);
// Adds to the run's events (hai show) in time order, keeping the last 50.
void AddRunEvent(hai::Run& run, int64_t now_ms, const std::string& text);

// The events of a job's life.
struct Started {  // the scheduler placed it: `run` (nodes, GPUs, master) becomes its current run
  hai::Run run;
};
struct StopRequested {  // its user (or an admin) stops it
  std::string by;
};
// Suspensions give the job `grace_ms` to save and exit (0: hai-server's suspend_grace_ms), from
// its checkpoints' write time (SuspendGraceMs); its run keeps when it was asked and the deadline.
struct SuspendRequested {  // its user suspends it: checkpoint, leave, wait in the queue
  std::string by;
  int64_t grace_ms = 0;
};
struct Preempted {  // the scheduler suspends it for a job of higher priority (0: for none named)
  int64_t for_job = 0;
  int for_priority = 0;
  int64_t grace_ms = 0;
  std::string why{};  // what it loses, and the cheapest job spared (Decision::suspend_reasons)
};
struct RankExited {  // an agent reports a rank of run `run` gone with `code` (128 + signal)
  int run = 0;
  int rank = 0;
  int code = 0;
};
struct NodeLost {  // `node` stopped heartbeating: its ranks are gone as far as the job is concerned
  std::string node;
};
// An admin or hai-health drained `node`. A gang is unaffected (no new work lands there); a
// fault-tolerant job's group on it is lost and replaced, unless that would leave fewer than
// min_replicas groups.
struct NodeDrained {
  std::string node;
  std::string reason;
};
// Step telemetry found a fault-tolerant job's group on `node` making the others wait (`reason`),
// and moving it pays: the group is lost and replaced off the node (the run's straggler_nodes,
// which its replacements avoid), unless that would leave fewer than min_replicas groups.
struct GroupStraggles {
  std::string node;
  std::string reason;
};
// The scheduler placed a replacement for replica `group.replica` of fault-tolerant run `run`:
// `nodes` (with `gpus`) are appended to the run, group.first_node set accordingly.
struct GroupStarted {
  int run = 0;
  hai::ReplicaGroup group;
  std::vector<std::string> nodes;
  std::vector<std::string> gpus;
};
// The job's quorum service (hai-server's) decided a change of its groups' membership: it goes
// into the current run's events ("quorum: group 1.1 joined the quorum at step 57, ..."), unless it
// happened before the run started.
struct QuorumChanged {
  hfreduce::QuorumEvent event;
};
using JobEvent = std::variant<Started, StopRequested, SuspendRequested, Preempted, RankExited,
                              NodeLost, NodeDrained, GroupStraggles, GroupStarted, QuorumChanged>;

// What an event did.
struct Transition {
  hai::Job job;                   // the job afterwards
  bool changed = false;           // false: the event did not apply (a stale exit); nothing to save
  std::vector<std::string> wake;  // nodes whose tasks changed (their agents' long polls return)
  bool run_ended = false;         // every rank is accounted for: a scheduling round is due
  bool round_due = false;         // a replica group was lost or is gone: a round replaces it
  std::string log;                // one line for the server's log ("" when nothing happened)
};

// The job after `event` at `now_ms`. An event that a job in its state cannot take (suspending a
// queued job, stopping a finished one) is a FailedPrecondition naming the job and its state, and
// changes nothing; an event that no longer applies (an exit of an older run, reported twice, of
// a rank out of range; a lost node the run does not use) returns the job unchanged.
Result<Transition> Apply(const hai::Job& job, const JobEvent& event, int64_t now_ms);

// Sets the job's pending reason; a reason of another shape than the last (numbers aside: "2 jobs
// ahead" and "3 jobs ahead" are one) is added to its history, of which the last 20 are kept.
void RecordPending(hai::Job& job, int64_t now_ms, const std::string& reason);

}  // namespace ff::platform
