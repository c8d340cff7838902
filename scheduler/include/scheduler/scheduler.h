// One scheduling round: which queued jobs start where, which running jobs are suspended so that
// higher-priority jobs fit (time-sharing), and why every other job waits.
//
// Rules (after HAI-Platform):
//   - Jobs are considered by priority (higher first), then submission time, then id: FIFO within
//     a priority level. Gangs start whole or not at all (an elastic gang: below).
//   - A job may suspend running jobs of strictly lower priority (so never one of the same user and
//     priority) that have run at least their min_runtime, choosing those whose suspension loses
//     the fewest GPU-seconds (LostBySuspending: a checkpoint and a restart for a job that saves
//     within its deadline, else the work since its last checkpoint) and no more than needed.
//   - Per-user quotas cap the nodes a user's running jobs hold.
//   - The first job that cannot start holds a reservation: the earliest time enough nodes free up
//     as running jobs reach their expected run times, on the nodes it would start on then. A job
//     behind it starts now only if it fits and is expected to end before that reservation, or fits
//     on other nodes than those (EASY backfill, as Slurm's backfill scheduler does it); without
//     expected run times there is no reservation and nothing passes it.
//   - A job the policy would rather have under one leaf switch, and that could start now only
//     across leaves, waits for a leaf while the policy says spreading would cost more than
//     waiting (PlacementPolicy::LocalityWait: what the run would lose to shared uplinks, and
//     the GPU time that loss takes from the jobs queued for GPUs, bounded by MaxLocalityWait)
//     and a leaf is expected to free within what remains of that; a round in which it could not
//     start anywhere ends the wait unused. Meanwhile it counts as not fitting (it may hold the
//     reservation, which then is on the leaf's nodes).
//   - Such a job that heads the queue short of nodes anywhere, and would start across leaves when
//     they free, reserves a leaf's nodes instead where that leaf is expected to free for it later
//     by less than the policy's LocalityWait for the spread placement.
//   - An elastic gang (JobRequest::Elastic: a fault-tolerant job's replica groups) that cannot
//     start whole, even by suspending jobs, starts with the most whole groups that fit, down to
//     its min_nodes (and within its user's quota), as a backfill would behind a blocked head; its
//     caller adds the other groups as nodes free, off the head's reserved nodes
//     (Decision::reserved), the way torchelastic's min:max nodes start a job.
//   - A running fault-tolerant job without some of its replica groups is in the queue for those
//     groups (JobRequest::missing_groups), and a round starts them as it starts jobs, under the
//     same quotas, preemption and backfill:
//       - lost groups are replaced in the job's place in the order: a job of higher priority, or
//         submitted first, comes before them, and a replacement behind a blocked job ends before
//         its reservation or keeps off its nodes. A replacement may suspend jobs of lower
//         priority, unless a job ahead of it is blocked (those nodes are better given to it).
//         A run places at most its max_replacements, and a replica whose replacements keep
//         failing soon after they start waits longer each time (ReplacementPolicy);
//       - groups the run began without come after every queued job, and suspend no job: the
//         job runs without them.
//     A group that cannot start does not block others (its job runs): it holds no reservation.
//     Decision::groups_waiting says why each waits.
//
// Decide is pure and deterministic: the same state, queue and time give the same decision.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "scheduler/cluster_state.h"
#include "scheduler/placement.h"

namespace ff::scheduler {

// How lost replica groups are replaced.
struct ReplacementPolicy {
  int per_replica = 3;  // a run's replacements, per replica, when the job gives no most
  // A replacement that ends sooner than this after it started failed at once: the replica's next
  // waits first_backoff, doubling with each such failure up to max_backoff (a bug that hits one
  // shard, a broken node image: not replaced in a tight loop).
  Seconds quick_failure = 60;
  Seconds first_backoff = 1;
  Seconds max_backoff = 64;
};

// What suspending a job costs, and how long it is given to save (checkpoint-aware time-sharing).
// A job that reports its checkpoints (JobRequest::checkpoint_s) gets a deadline of `margin` times
// its checkpoint's write time plus `slack`, within [min_deadline, max_deadline]; one that never
// reported gets min_deadline. It saves in time when that deadline was not cut by max_deadline:
// then suspending it costs its GPUs for the checkpoint and a restart (start-up plus reading the
// checkpoint back, taken to be as long as writing it); otherwise the work since its last
// checkpoint (RunningJob::last_checkpoint; its start when it never reported one) and a restart.
struct SuspendPolicy {
  enum class VictimOrder {
    kLeastLost,    // fewest GPU-seconds lost first (LostBySuspending)
    kNewestFirst,  // the latest started first (what Slurm and Kueue do): the baseline
  };
  VictimOrder order = VictimOrder::kLeastLost;
  Seconds min_deadline = 30;
  Seconds max_deadline = 600;
  double margin = 1.5;
  Seconds slack = 10;
  Seconds restart_s = 60;  // a restart's start-up, before it reads its checkpoint
};

// The seconds `job` is given from its suspend signal to its exit (SuspendPolicy).
Seconds SuspendDeadline(const JobRequest& job, const SuspendPolicy& policy);
// Whether its checkpoint fits its deadline (it reported one, and the deadline was not capped).
bool SavesInTime(const JobRequest& job, const SuspendPolicy& policy);

// What suspending a running job at `now` costs, in GPU-seconds, and why ("~40 GPU-s: a 10 s
// checkpoint and a 30 s restart" or "~3.2 GPU-h since its checkpoint").
struct SuspendCost {
  double gpu_seconds = 0;
  std::string text;
};
SuspendCost LostBySuspending(const RunningJob& job, Seconds now, const SuspendPolicy& policy);

// "40 GPU-s", "12 GPU-min", "3.2 GPU-h".
std::string FormatGpuSeconds(double gpu_seconds);

struct SchedulerOptions {
  // Most nodes a user's running jobs may hold (a sub-node job counts as one node); users not
  // listed are unlimited.
  std::map<std::string, int> node_quota;
  bool backfill = true;
  bool preemption = true;
  // Blocked jobs per round that may search for jobs to suspend (bounds the round's cost).
  int max_preemption_searches = 8;
  SuspendPolicy suspend;
  ReplacementPolicy replacements;
};

struct Decision {
  struct Start {
    JobId job;
    Placement placement;  // an elastic gang's may have fewer nodes than it asked for
  };
  std::vector<JobId> suspends;           // suspend these first; their nodes go to `starts`
  std::map<JobId, JobId> suspended_for;  // each suspended job -> the job it makes room for
  // Each suspended job -> what it loses and why it was chosen over the next candidate ("lost
  // ~40 GPU-s: a 10 s checkpoint and a 30 s restart; rather than job 9: ~3.0 GPU-h since its
  // checkpoint").
  std::map<JobId, std::string> suspend_reasons;
  std::vector<Start> starts;  // in the order decided
  struct GroupStart {
    JobId job;
    int replica;
    bool replacement;  // of a lost group (else one its run began without)
    Placement placement;
  };
  std::vector<GroupStart> group_starts;  // running jobs' replica groups, in the order decided
  // Why each missing group of a running job (JobRequest::missing_groups) did not start: job ->
  // replica -> reason.
  std::map<JobId, std::map<int, std::string>> groups_waiting;
  // Every queued job left waiting, and why: what it waits for and what would change it (an
  // estimated start where running jobs' expected run times give one; how short a job would have
  // to be to backfill; the flag that relaxes a placement rule; who preempted it).
  std::map<JobId, std::string> pending;
  // Jobs whose locality wait began this round (at `now`), or ended unused (-1: it could not start
  // even across leaves, so its wait begins afresh at its next chance): the caller keeps the value
  // in JobRequest::locality_wait_since for later rounds.
  std::map<JobId, Seconds> locality_wait_started;
  // The earliest time at which a waiting job's prospects change by time alone (a locality wait
  // runs out), so a round then may decide differently; -1 if none.
  Seconds recheck_at = -1;
  // The nodes the first job left waiting is expected to start on (its reservation; empty if it
  // has none): what starts between rounds (an elastic gang's missing groups) keeps off them.
  std::vector<int> reserved;
};

class Scheduler {
 public:
  Scheduler(std::unique_ptr<PlacementPolicy> policy, SchedulerOptions options = {});

  const PlacementPolicy& policy() const { return *policy_; }
  const SchedulerOptions& options() const { return options_; }
  Decision Decide(const ClusterState& state, const std::vector<JobRequest>& queue,
                  Seconds now) const;

 private:
  class Round;  // one Decide: its state and stages (scheduler.cc)

  // Running jobs whose suspension lets `job` start, and where it would run; empty if none.
  // `why`, if given, gets each victim's cost and the cheapest candidate spared.
  std::vector<JobId> FindVictims(const JobRequest& job, const ClusterState& state, Seconds now,
                                 bool one_leaf, Placement* placement,
                                 std::map<JobId, std::string>* why = nullptr) const;
  // When `job` could start if running jobs end at their expected times; -1 if never known.
  // `where`, if given, gets the nodes it would start on then.
  Seconds EarliestStart(const JobRequest& job, const ClusterState& state, Seconds now,
                        bool one_leaf, Placement* where = nullptr) const;
  // The policy's placement; with `one_leaf`, empty (and `why` says so) when it spans leaves.
  Placement PlaceJob(const JobRequest& job, const ClusterState& state, bool one_leaf,
                     std::string* why) const;

  std::unique_ptr<PlacementPolicy> policy_;
  SchedulerOptions options_;
};

// Orders jobs as a round considers them: priority (high first), submit time, id.
bool ComesBefore(const JobRequest& a, const JobRequest& b);

// "2h10m", "45s", "3d4h" for messages.
std::string FormatDuration(Seconds s);

}  // namespace ff::scheduler
