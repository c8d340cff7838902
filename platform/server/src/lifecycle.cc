#include "platform/lifecycle.h"

#include <algorithm>
#include <cctype>

#include "common/status.h"
#include "platform/names.h"

namespace ff::platform {
namespace {

std::vector<std::string> NodesOf(const hai::Job& job) {
  if (job.runs().empty()) return {};
  const hai::Run& run = job.runs(job.runs_size() - 1);
  return {run.nodes().begin(), run.nodes().end()};
}

std::string JobName(const hai::Job& job) {
  return "job " + std::to_string(job.id());
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
  if (run.exit_codes_size() < WorldSize(job.spec())) return;
  run.set_end_ms(now_ms);
  const hai::JobSpec& spec = job.spec();
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
  const bool all_zero = std::all_of(run.exit_codes().begin(), run.exit_codes().end(),
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
    next(hai::SUSPENDED, "suspended; resumes from its checkpoint when it is scheduled");
  } else if (all_zero) {
    run.set_end(hai::RUN_EXITED);
    run.set_end_reason("exited");
    next(hai::SUCCEEDED, "every rank exited with 0");
  } else if (spec.restart_policy() == hai::RESTART_ON_FAILURE &&
             job.runs_size() - 1 <
                 (spec.max_restarts() > 0 ? spec.max_restarts() : kDefaultMaxRestarts)) {
    next(hai::QUEUED, "requeued: " + run.end_reason());
  } else {
    next(hai::FAILED, run.end_reason());
  }
  t.run_ended = true;
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
    hai::Run& run = *job.mutable_runs(job.runs_size() - 1);
    if (run.index() != e.run || e.rank < 0 || e.rank >= WorldSize(job.spec()) ||
        run.exit_codes().count(e.rank) > 0) {
      return Status::Ok();  // an older run's, or already known
    }
    (*run.mutable_exit_codes())[e.rank] = e.code;
    t.changed = true;
    t.log = JobName(job) + " run " + std::to_string(run.index()) + ": rank " +
            std::to_string(e.rank) + " exited with " + std::to_string(e.code);
    if (e.code != 0 && run.end() == hai::RUN_END_UNSPECIFIED && job.state() == hai::RUNNING &&
        !job.stop_requested()) {
      // A gang fails as a whole: the other ranks are killed.
      EndRun(run, hai::RUN_RANK_FAILED,
             "rank " + std::to_string(e.rank) + " exited with code " + std::to_string(e.code));
      t.wake = NodesOf(job);
    }
    const std::string exit_line = t.log;
    FinishRunIfDone(t, now_ms);
    if (t.run_ended) t.log = exit_line + "; " + t.log;
    return Status::Ok();
  }

  Status operator()(const NodeLost& e) {
    hai::Job& job = t.job;
    if (!Active(job)) return Status::Ok();
    hai::Run& run = *job.mutable_runs(job.runs_size() - 1);
    const int procs = ProcsPerNode(job.spec());
    bool here = false;
    for (int i = 0; i < run.nodes_size(); ++i) {
      if (run.nodes(i) != e.node) continue;
      here = true;
      auto& codes = *run.mutable_exit_codes();
      for (int local = 0; local < procs; ++local)
        codes.insert({i * procs + local, kLostExitCode});  // a known exit stays
    }
    if (!here) return Status::Ok();
    EndRun(run, hai::RUN_NODE_LOST, "node " + e.node + " lost");
    t.changed = true;
    t.wake = NodesOf(job);
    t.log = JobName(job) + " run " + std::to_string(run.index()) + ": node " + e.node + " lost";
    const std::string lost_line = t.log;
    FinishRunIfDone(t, now_ms);
    if (t.run_ended) t.log = lost_line + "; " + t.log;
    return Status::Ok();
  }
};

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
  return spec.nodes() * ProcsPerNode(spec);
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
  constexpr int kKept = 20;
  if (job.pending_history_size() >= kKept) {
    job.mutable_pending_history()->DeleteSubrange(0, job.pending_history_size() - kKept + 1);
  }
  hai::PendingEvent* e = job.add_pending_history();
  e->set_time_ms(now_ms);
  e->set_reason(reason);
}

}  // namespace ff::platform
