#include "platform/lifecycle.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <ctime>

#include "common/status.h"
#include "platform/names.h"
#include "scheduler/scheduler.h"

namespace ff::platform {
namespace {

std::vector<std::string> NodesOf(const hai::Job& job) {
  return HeldNodes(job);
}

std::string JobName(const hai::Job& job) {
  return "job " + std::to_string(job.id());
}

std::string Seconds1(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, s < 10 ? "%.1fs" : "%.0fs", s);
  return buf;
}

// The suspend protocol's start: the run keeps when it was asked and its deadline, and says why.
void AskToSave(hai::Job& job, int64_t grace_ms, const std::string& why, int64_t now_ms) {
  hai::Run& run = *job.mutable_runs(job.runs_size() - 1);
  run.set_suspend_ms(now_ms);
  run.set_suspend_grace_ms(grace_ms);
  std::string text = why;
  if (grace_ms > 0) {
    text += "; given " + Seconds1(static_cast<double>(grace_ms) / 1000) + " to save and exit";
    if (run.checkpoint().ranks() > 0) {
      text += " (its checkpoints take " + Seconds1(run.checkpoint().write_s()) + ")";
    }
  }
  AddRunEvent(run, now_ms, text);
}

// Ends the current run as `end` unless it already ended as a lost node (a rank failing as its
// node drops is the drop's doing, not the job's).
void EndRun(hai::Run& run, hai::RunEnd end, const std::string& reason) {
  if (run.end() == hai::RUN_NODE_LOST) return;
  run.set_end(end);
  run.set_end_reason(reason);
}

// Once every rank's exit is known: the run's end and where the job goes next.
void FinishRunIfDone(Transition& t, int64_t now_ms) {
  hai::Job& job = t.job;
  hai::Run& run = *job.mutable_runs(job.runs_size() - 1);
  const hai::JobSpec& spec = job.spec();
  if (run.exit_codes_size() < run.nodes_size() * ProcsPerNode(spec)) return;
  run.set_end_ms(now_ms);
  auto next = [&](hai::JobState state, const std::string& message) {
    job.set_state(state);
    job.set_message(message);
    if (Terminal(job)) {
      job.set_end_ms(now_ms);
      job.set_pending_reason("");
    } else {
      job.set_pending_reason("waiting for the next scheduling round");
    }
    t.log = JobName(job) + ": " + StateName(state) + " (" + message + ")";
  };
  // A fault-tolerant run's training is done when a group finished; its lost groups' exits are
  // what losing them cost.
  const bool all_zero = FaultTolerant(spec)
                            ? std::any_of(run.groups().begin(), run.groups().end(),
                                          [](const hai::ReplicaGroup& g) { return g.finished(); })
                            : std::all_of(run.exit_codes().begin(), run.exit_codes().end(),
                                          [](const auto& rc) { return rc.second == 0; });
  if (job.stop_requested()) {
    run.set_end(hai::RUN_STOPPED);
    run.set_end_reason("stopped");
    next(hai::STOPPED, "stopped by its user");
  } else if (run.end() == hai::RUN_NODE_LOST) {
    if (spec.restart_policy() == hai::RESTART_NEVER) {
      next(hai::FAILED, run.end_reason() + "; restart policy is never");
    } else {
      next(hai::QUEUED, "requeued: " + run.end_reason());
    }
  } else if (job.state() == hai::SUSPENDING) {
    if (run.end() == hai::RUN_END_UNSPECIFIED) {
      run.set_end(hai::RUN_SUSPENDED);
      run.set_end_reason("suspended");
    }
    const std::string outcome = SuspendOutcome(job, run);
    if (!outcome.empty()) AddRunEvent(run, now_ms, "suspended: " + outcome);
    next(hai::SUSPENDED, "suspended" + (outcome.empty() ? "" : " (" + outcome + ")") +
                             "; resumes from its checkpoint when it is scheduled");
  } else if (all_zero) {
    run.set_end(hai::RUN_EXITED);
    run.set_end_reason("exited");
    next(hai::SUCCEEDED, FaultTolerant(spec) ? "every rank of a replica group exited with 0"
                                             : "every rank exited with 0");
  } else if (spec.restart_policy() == hai::RESTART_ON_FAILURE &&
             job.runs_size() - 1 <
                 (spec.max_restarts() > 0 ? spec.max_restarts() : kDefaultMaxRestarts)) {
    next(hai::QUEUED, "requeued: " + run.end_reason());
  } else {
    next(hai::FAILED, run.end_reason());
  }
  t.run_ended = true;
}

std::string ReplicaName(const hai::ReplicaGroup& g) {
  return "replica " + std::to_string(g.replica()) +
         (g.incarnation() > 0 ? " (replacement " + std::to_string(g.incarnation()) + ")" : "");
}

// Whether the current run is going on as it should: no end decided, not stopping or suspending.
bool RunGoesOn(const hai::Job& job) {
  const hai::Run& run = job.runs(job.runs_size() - 1);
  return job.state() == hai::RUNNING && !job.stop_requested() && !RunEnding(run);
}

// Once every rank of group `g` is accounted for: when it was gone, and whether it finished.
void SettleGroup(hai::Run& run, const hai::JobSpec& spec, int g, int64_t now_ms) {
  hai::ReplicaGroup& group = *run.mutable_groups(g);
  if (group.end_ms() > 0) return;
  const int procs = ProcsPerNode(spec);
  bool all_zero = true;
  for (int r = group.first_node() * procs; r < (group.first_node() + spec.nodes()) * procs; ++r) {
    auto it = run.exit_codes().find(r);
    if (it == run.exit_codes().end()) return;
    all_zero = all_zero && it->second == 0;
  }
  group.set_end_ms(now_ms);
  if (Live(group) && all_zero) {
    group.set_finished(true);
    group.set_end_reason("exited");
    AddRunEvent(run, now_ms, ReplicaName(group) + " finished: every rank exited with 0");
  }
}

// Group `g` of a run that goes on is lost (`why`): its ranks are killed; the others go on unless
// fewer than min_replicas are left (and none finished), when the run ends as `end`.
void LoseGroup(Transition& t, int g, const std::string& why, hai::RunEnd end, int64_t now_ms) {
  hai::Job& job = t.job;
  const hai::JobSpec& spec = job.spec();
  hai::Run& run = *job.mutable_runs(job.runs_size() - 1);
  hai::ReplicaGroup& group = *run.mutable_groups(g);
  group.set_end_reason(why);
  const int live = LiveGroups(run);
  const bool finished = std::any_of(run.groups().begin(), run.groups().end(),
                                    [](const hai::ReplicaGroup& x) { return x.finished(); });
  std::string line = ReplicaName(group) + " lost: " + why;
  if (live < MinReplicas(spec) && !finished) {
    line += "; " + std::to_string(live) + " of " + std::to_string(spec.replicas()) +
            " replica groups left, below min_replicas " + std::to_string(MinReplicas(spec));
    EndRun(run, end, line);
  } else if (!finished) {
    line += "; " + std::to_string(live) + " of " + std::to_string(spec.replicas()) +
            " replica groups go on";
  }
  AddRunEvent(run, now_ms, line);
  t.log = JobName(job) + " run " + std::to_string(run.index()) + ": " + line;
  t.wake = NodesOf(job);
  t.changed = true;
  t.round_due = true;
}

struct Visitor {
  Transition& t;
  int64_t now_ms;

  Status operator()(const Started& e) {
    hai::Job& job = t.job;
    if (Active(job) || Terminal(job)) {
      return FailedPrecondition(JobName(job) + " is " + StateName(job.state()) +
                                "; only a queued or suspended job can start");
    }
    hai::Run* run = job.add_runs();
    *run = e.run;
    run->set_index(job.runs_size() - 1);
    run->set_start_ms(now_ms);
    run->set_end_ms(0);
    run->clear_exit_codes();
    run->set_end(hai::RUN_END_UNSPECIFIED);
    run->clear_end_reason();
    run->clear_events();
    for (hai::ReplicaGroup& g : *run->mutable_groups()) {
      g.set_start_ms(now_ms);
      g.set_end_ms(0);
      g.clear_end_reason();
      g.set_finished(false);
    }
    job.set_state(hai::RUNNING);
    RecordPending(job, now_ms, "started: run " + std::to_string(run->index()));
    job.set_pending_reason("");
    job.set_preempted_by(0);
    job.set_preempted_by_priority(0);
    job.set_preempted_at_ms(0);
    job.set_locality_wait_since_ms(0);  // if it is suspended later, it waits afresh
    job.set_message("");
    std::string where;
    for (const std::string& n : run->nodes())
      where += (where.empty() ? "" : ",") + n;
    t.log = JobName(job) + " run " + std::to_string(run->index()) + " starts on " + where;
    const hai::JobSpec& spec = job.spec();
    if (FaultTolerant(spec) && run->groups_size() < spec.replicas()) {
      const std::string line = "started with " + std::to_string(run->groups_size()) + " of " +
                               std::to_string(spec.replicas()) +
                               " replica groups (no room for more now, min_replicas " +
                               std::to_string(MinReplicas(spec)) +
                               "); the others start as nodes free and join at a step boundary";
      AddRunEvent(*run, now_ms, line);
      t.log += "; " + line;
    }
    t.wake = NodesOf(job);
    t.changed = true;
    return Status::Ok();
  }

  Status operator()(const StopRequested& e) {
    hai::Job& job = t.job;
    if (Terminal(job)) {
      return FailedPrecondition(JobName(job) + " has already ended (" + StateName(job.state()) +
                                ")");
    }
    job.set_stop_requested(true);
    if (!Active(job)) {
      job.set_state(hai::STOPPED);
      job.set_end_ms(now_ms);
      job.set_pending_reason("");
      job.set_message("stopped by " + e.by + " before it ran");
    }
    t.log = JobName(job) + ": stop requested by " + e.by;
    t.wake = NodesOf(job);
    t.changed = true;
    return Status::Ok();
  }

  Status operator()(const SuspendRequested& e) {
    hai::Job& job = t.job;
    if (job.state() != hai::RUNNING || job.stop_requested()) {
      return FailedPrecondition(JobName(job) + " is " + StateName(job.state()) +
                                (job.stop_requested() ? " and stopping" : "") +
                                "; only running jobs can be suspended");
    }
    job.set_state(hai::SUSPENDING);
    AskToSave(job, e.grace_ms, "suspend requested by " + e.by, now_ms);
    t.log = JobName(job) + ": suspend requested by " + e.by;
    t.wake = NodesOf(job);
    t.changed = true;
    return Status::Ok();
  }

  Status operator()(const Preempted& e) {
    hai::Job& job = t.job;
    if (job.state() != hai::RUNNING) {
      return FailedPrecondition(JobName(job) + " is " + StateName(job.state()) +
                                "; only running jobs can be preempted");
    }
    job.set_state(hai::SUSPENDING);
    AskToSave(job, e.grace_ms,
              e.for_job != 0
                  ? "suspended for job " + std::to_string(e.for_job) + " (priority " +
                        std::to_string(e.for_priority) + ")" + (e.why.empty() ? "" : ": " + e.why)
                  : "suspended for a job of higher priority",
              now_ms);
    if (e.for_job != 0) {
      job.set_preempted_by(e.for_job);
      job.set_preempted_by_priority(e.for_priority);
      job.set_preempted_at_ms(now_ms);
      RecordPending(job, now_ms,
                    "suspended for job " + std::to_string(e.for_job) + " (priority " +
                        std::to_string(e.for_priority) + ")");
    }
    t.log = JobName(job) + ": suspending it for a higher-priority job";
    t.wake = NodesOf(job);
    t.changed = true;
    return Status::Ok();
  }

  Status operator()(const RankExited& e) {
    hai::Job& job = t.job;
    if (!Active(job)) return Status::Ok();
    const hai::JobSpec& spec = job.spec();
    hai::Run& run = *job.mutable_runs(job.runs_size() - 1);
    const int procs = ProcsPerNode(spec);
    if (run.index() != e.run || e.rank < 0 || e.rank >= run.nodes_size() * procs ||
        run.exit_codes().count(e.rank) > 0) {
      return Status::Ok();  // an older run's, or already known
    }
    (*run.mutable_exit_codes())[e.rank] = e.code;
    t.changed = true;
    t.log = JobName(job) + " run " + std::to_string(run.index()) + ": rank " +
            std::to_string(e.rank) + " exited with " + std::to_string(e.code);
    std::string exit_line = t.log;
    const std::string why =
        "rank " + std::to_string(e.rank) + " exited with code " + std::to_string(e.code);
    if (FaultTolerant(spec)) {
      const int g = GroupOfNode(run, spec, e.rank / procs);
      if (g >= 0) {
        if (e.code != 0 && Live(run.groups(g)) && RunGoesOn(job)) {
          LoseGroup(t, g, why, hai::RUN_RANK_FAILED, now_ms);
          exit_line = t.log;
        }
        SettleGroup(*job.mutable_runs(job.runs_size() - 1), spec, g, now_ms);
        t.round_due |= job.runs(job.runs_size() - 1).groups(g).end_ms() > 0;
      }
    } else if (e.code != 0 && run.end() == hai::RUN_END_UNSPECIFIED &&
               job.state() == hai::RUNNING && !job.stop_requested()) {
      // A gang fails as a whole: the other ranks are killed.
      EndRun(run, hai::RUN_RANK_FAILED, why);
      t.wake = NodesOf(job);
    }
    FinishRunIfDone(t, now_ms);
    t.log = t.run_ended ? exit_line + "; " + t.log : exit_line;
    return Status::Ok();
  }

  Status operator()(const NodeLost& e) {
    hai::Job& job = t.job;
    if (!Active(job)) return Status::Ok();
    const hai::JobSpec& spec = job.spec();
    const int procs = ProcsPerNode(spec);
    const bool goes_on = RunGoesOn(job);
    std::vector<int> held = HeldNodeSlots(job);
    bool here = false;
    std::string lost_line = JobName(job) + " run " +
                            std::to_string(job.runs(job.runs_size() - 1).index()) + ": node " +
                            e.node + " lost";
    for (int i : held) {
      hai::Run& run = *job.mutable_runs(job.runs_size() - 1);
      if (run.nodes(i) != e.node) continue;
      here = true;
      auto& codes = *run.mutable_exit_codes();
      for (int local = 0; local < procs; ++local)
        codes.insert({i * procs + local, kLostExitCode});  // a known exit stays
      if (!FaultTolerant(spec)) continue;
      const int g = GroupOfNode(run, spec, i);
      if (g < 0) continue;
      if (goes_on && Live(run.groups(g))) {
        LoseGroup(t, g, "node " + e.node + " lost", hai::RUN_NODE_LOST, now_ms);
        lost_line = t.log;
      }
      SettleGroup(*job.mutable_runs(job.runs_size() - 1), spec, g, now_ms);
      t.round_due = true;
    }
    if (!here) return Status::Ok();
    hai::Run& run = *job.mutable_runs(job.runs_size() - 1);
    // A gang, or a fault-tolerant run that was ending anyway (stopping, suspending, below
    // min_replicas): the lost node ends it as lost, which requeues it rather than suspends it.
    if (!FaultTolerant(spec) || !goes_on)
      EndRun(run, hai::RUN_NODE_LOST, "node " + e.node + " lost");
    t.changed = true;
    t.wake = NodesOf(job);
    t.log = lost_line;
    FinishRunIfDone(t, now_ms);
    if (t.run_ended) t.log = lost_line + "; " + t.log;
    return Status::Ok();
  }

  Status operator()(const NodeDrained& e) {
    hai::Job& job = t.job;
    if (!Active(job) || !FaultTolerant(job.spec()) || !RunGoesOn(job)) return Status::Ok();
    const hai::JobSpec& spec = job.spec();
    for (int i : HeldNodeSlots(job)) {
      const hai::Run& run = job.runs(job.runs_size() - 1);
      if (run.nodes(i) != e.node) continue;
      const int g = GroupOfNode(run, spec, i);
      if (g < 0 || !Live(run.groups(g))) continue;
      if (LiveGroups(run) - 1 < MinReplicas(spec)) {
        t.log = JobName(job) + ": node " + e.node + " is drained, but its " +
                ReplicaName(run.groups(g)) + " stays: without it fewer than min_replicas " +
                std::to_string(MinReplicas(spec)) + " groups would be left";
        continue;
      }
      LoseGroup(t, g, "node " + e.node + " drained" + (e.reason.empty() ? "" : ": " + e.reason),
                hai::RUN_NODE_LOST, now_ms);
    }
    return Status::Ok();
  }

  Status operator()(const GroupStraggles& e) {
    hai::Job& job = t.job;
    if (!Active(job) || !FaultTolerant(job.spec()) || !RunGoesOn(job)) return Status::Ok();
    const hai::JobSpec& spec = job.spec();
    for (int i : HeldNodeSlots(job)) {
      hai::Run& run = *job.mutable_runs(job.runs_size() - 1);
      if (run.nodes(i) != e.node) continue;
      const int g = GroupOfNode(run, spec, i);
      if (g < 0 || !Live(run.groups(g))) continue;
      if (LiveGroups(run) - 1 < MinReplicas(spec)) {
        AddRunEvent(run, now_ms,
                    ReplicaName(run.groups(g)) + " straggles on node " + e.node +
                        " but stays: without it fewer than min_replicas " +
                        std::to_string(MinReplicas(spec)) + " groups would be left");
        t.changed = true;
        continue;
      }
      if (std::find(run.straggler_nodes().begin(), run.straggler_nodes().end(), e.node) ==
          run.straggler_nodes().end()) {
        run.add_straggler_nodes(e.node);
      }
      LoseGroup(t, g, "it straggles on node " + e.node + ": " + e.reason, hai::RUN_NODE_LOST,
                now_ms);
    }
    return Status::Ok();
  }

  Status operator()(const QuorumChanged& e) {
    hai::Job& job = t.job;
    if (!Active(job) || !FaultTolerant(job.spec())) return Status::Ok();  // (it ended meanwhile)
    hai::Run& run = *job.mutable_runs(job.runs_size() - 1);
    if (e.event.time_ms < run.start_ms()) return Status::Ok();  // an earlier run's
    AddRunEvent(run, e.event.time_ms, "quorum: " + hfreduce::Describe(e.event));
    t.changed = true;
    return Status::Ok();
  }

  Status operator()(const GroupStarted& e) {
    hai::Job& job = t.job;
    const hai::JobSpec& spec = job.spec();
    if (!FaultTolerant(spec) || !Active(job) || !RunGoesOn(job) ||
        job.runs(job.runs_size() - 1).index() != e.run) {
      return FailedPrecondition(JobName(job) + " has no running fault-tolerant run " +
                                std::to_string(e.run) + " to add a replica group to");
    }
    hai::Run& run = *job.mutable_runs(job.runs_size() - 1);
    const int replica = e.group.replica();
    if (replica < 0 || replica >= spec.replicas()) {
      return InvalidArgument(JobName(job) + " has no replica " + std::to_string(replica));
    }
    if (static_cast<int>(e.nodes.size()) != spec.nodes() || e.gpus.size() != e.nodes.size()) {
      return InvalidArgument(JobName(job) + ": a replica group is " + std::to_string(spec.nodes()) +
                             " node(s), got " + std::to_string(e.nodes.size()));
    }
    for (const hai::ReplicaGroup& g : run.groups()) {
      if (g.finished() || (g.replica() == replica && Live(g))) {
        return FailedPrecondition(
            JobName(job) + ": replica " + std::to_string(replica) +
            (g.finished() ? " cannot be replaced: the training is over" : " is alive"));
      }
    }
    hai::ReplicaGroup* group = run.add_groups();
    *group = e.group;
    group->set_first_node(run.nodes_size());
    group->set_start_ms(now_ms);
    group->set_end_ms(0);
    group->clear_end_reason();
    group->set_finished(false);
    int incarnation = 0;
    for (const hai::ReplicaGroup& g : run.groups())
      incarnation += g.replica() == replica ? 1 : 0;
    group->set_incarnation(incarnation - 1);
    std::string where;
    for (std::size_t i = 0; i < e.nodes.size(); ++i) {
      run.add_nodes(e.nodes[i]);
      run.add_gpus(e.gpus[i]);
      where += (where.empty() ? "" : ",") + e.nodes[i];
    }
    const int procs = ProcsPerNode(spec);
    const std::string line = ReplicaName(*group) + " started on " + where + " (ranks " +
                             std::to_string(group->first_node() * procs) + "-" +
                             std::to_string((group->first_node() + spec.nodes()) * procs - 1) + ")";
    AddRunEvent(run, now_ms, line);
    t.log = JobName(job) + " run " + std::to_string(run.index()) + ": " + line;
    t.wake = e.nodes;
    t.changed = true;
    return Status::Ok();
  }
};

// Drops the oldest entries of a bounded history so that one more keeps it at `kept`.
template <typename Entries>
void MakeRoom(Entries& entries, int kept) {
  if (entries.size() >= kept) entries.DeleteSubrange(0, entries.size() - kept + 1);
}

// A reason with its numbers blanked: "2 jobs ahead" and "3 jobs ahead", or a start estimate
// counting down, are one entry of the history, not one per round.
std::string Shape(const std::string& reason) {
  std::string out;
  for (char c : reason) {
    if (std::isdigit(static_cast<unsigned char>(c))) {
      if (out.empty() || out.back() != '#') out += '#';
    } else {
      out += c;
    }
  }
  return out;
}

}  // namespace

bool Active(const hai::Job& job) {
  return job.state() == hai::RUNNING || job.state() == hai::SUSPENDING;
}

bool Terminal(const hai::Job& job) {
  return job.state() == hai::SUCCEEDED || job.state() == hai::FAILED || job.state() == hai::STOPPED;
}

int ProcsPerNode(const hai::JobSpec& spec) {
  return spec.procs_per_node() > 0 ? spec.procs_per_node() : 1;
}

int WorldSize(const hai::JobSpec& spec) {
  return NodesAsked(spec) * ProcsPerNode(spec);
}

int MaxReplacements(const hai::JobSpec& spec) {
  return (spec.max_restarts() > 0 ? spec.max_restarts() : kDefaultMaxRestarts) * spec.replicas();
}

int LiveGroups(const hai::Run& run) {
  return static_cast<int>(std::count_if(run.groups().begin(), run.groups().end(),
                                        [](const hai::ReplicaGroup& g) { return Live(g); }));
}

std::string UtcClock(int64_t ms) {
  std::time_t t = ms / 1000;
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[16];
  std::strftime(buf, sizeof buf, "%H:%M:%S", &tm);
  return std::string(buf) + " UTC";
}

int RunGpus(const hai::Job& job, const hai::Run& run) {
  return run.nodes_size() * std::max(1, job.spec().gpus_per_node());
}

std::string SuspendOutcome(const hai::Job& job, const hai::Run& run) {
  if (run.suspend_ms() <= 0) return "";
  const hai::CheckpointInfo& c = run.checkpoint();
  const std::string deadline = Seconds1(static_cast<double>(run.suspend_grace_ms()) / 1000);
  if (c.ranks() > 0 && c.time_ms() >= run.suspend_ms()) {
    return "saved step " + std::to_string(c.step()) + " in " + Seconds1(c.write_s()) +
           ", within its " + deadline + " deadline";
  }
  const bool killed = std::any_of(run.exit_codes().begin(), run.exit_codes().end(),
                                  [](const auto& rc) { return rc.second == 128 + 9; });
  const int64_t since_ms = c.ranks() > 0 ? c.time_ms() : run.start_ms();
  const double gpu_s = static_cast<double>(RunGpus(job, run)) *
                       static_cast<double>(std::max<int64_t>(0, run.suspend_ms() - since_ms)) /
                       1000;
  std::string lost =
      "lost ~" + scheduler::FormatGpuSeconds(gpu_s) + " since " +
      (c.ranks() > 0
           ? "its checkpoint of step " + std::to_string(c.step()) + " at " + UtcClock(c.time_ms())
           : "its run started at " + UtcClock(run.start_ms()) + " (no checkpoint reported)");
  return killed ? "missed its " + deadline + " suspend deadline: killed; " + lost
                : "left without a checkpoint reported; " + lost;
}

void AddRunEvent(hai::Run& run, int64_t now_ms, const std::string& text) {
  MakeRoom(*run.mutable_events(), 50);
  hai::RunEvent* e = run.add_events();
  e->set_time_ms(now_ms);
  e->set_text(text);
  // In time order (events come from the lifecycle and, later, from the quorum service).
  for (int i = run.events_size() - 1; i > 0 && run.events(i - 1).time_ms() > now_ms; --i)
    run.mutable_events()->SwapElements(i, i - 1);
}

Result<Transition> Apply(const hai::Job& job, const JobEvent& event, int64_t now_ms) {
  Transition t;
  t.job = job;
  FF_RETURN_IF_ERROR(std::visit(Visitor{t, now_ms}, event));
  return t;
}

void RecordPending(hai::Job& job, int64_t now_ms, const std::string& reason) {
  const bool changed =
      job.pending_history_size() == 0 ||
      Shape(job.pending_history(job.pending_history_size() - 1).reason()) != Shape(reason);
  job.set_pending_reason(reason);
  if (!changed) return;
  MakeRoom(*job.mutable_pending_history(), 20);
  hai::PendingEvent* e = job.add_pending_history();
  e->set_time_ms(now_ms);
  e->set_reason(reason);
}

}  // namespace ff::platform
