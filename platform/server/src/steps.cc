// Step telemetry in hai-server: the agents' summaries of their ranks' last steps (with each
// heartbeat), one StepTracker per running job evaluated every round, and what it finds written
// where users look: the job's run events (hai show), the straggler node's events (hai nodes), the
// Steps RPC (hai top, hai-web) and Prometheus.
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstdio>
#include <set>

#include "common/rpc_server.h"
#include "common/rpc_status.h"
#include "platform/lifecycle.h"
#include "platform/names.h"
#include "platform/runs.h"
#include "platform/server.h"
#include "platform/tokens.h"
#include "store.h"

namespace ff::platform {
namespace {

constexpr int kNodeEvents = 20;

// A running job's current run (the last one), or null.
const hai::Run* CurrentRun(const hai::Job& job) {
  if (!Active(job) || job.runs().empty()) return nullptr;
  return &job.runs(job.runs_size() - 1);
}

prometheus::Family<prometheus::Gauge>& GaugeFamily(Metrics& metrics, const std::string& name,
                                                   const std::string& help) {
  return prometheus::BuildGauge().Name(name).Help(help).Register(*metrics.registry());
}

constexpr const char* kStepSecondsHelp =
    "A running job's step time now: the median over its ranks of their last steps' median";
constexpr const char* kSlowdownHelp = "A running job's step time over its best this run";
constexpr const char* kStragglerHelp =
    "Running jobs whose ranks wait for this node now (it is their straggler)";

}  // namespace

void HaiServer::TakeStepSummaries(const hai::HeartbeatRequest& req) {
  for (const hai::StepSummary& s : req.steps()) {
    auto job = jobs_.find(s.job_id());
    if (job == jobs_.end()) continue;
    const hai::Run* run = CurrentRun(job->second);
    if (run == nullptr || run->index() != s.run()) continue;  // an older run's last words
    JobSteps& steps = steps_[s.job_id()];
    if (steps.tracker == nullptr || steps.run != s.run()) {
      steps = JobSteps();
      steps.run = s.run();
      steps.tracker = std::make_unique<StepTracker>();
    }
    hai::StepSummary& kept = steps.ranks[s.rank()];
    kept = s;
    kept.set_node(req.node());
  }
}

void HaiServer::DetectStragglers() {
  const int64_t now_ms = NowMs();
  std::vector<hai::Job*> changed;
  std::map<std::string, int> straggler_jobs;
  std::vector<std::pair<std::string, int64_t>> stragglers;  // findings that began: node, job
  for (auto it = steps_.begin(); it != steps_.end();) {
    auto job = jobs_.find(it->first);
    const hai::Run* run = job == jobs_.end() ? nullptr : CurrentRun(job->second);
    if (run == nullptr || run->index() != it->second.run) {
      if (metrics_) {
        const MetricLabels labels{{"job", std::to_string(it->first)}};
        auto& seconds = GaugeFamily(*metrics_, "hai_job_step_seconds", kStepSecondsHelp);
        seconds.Remove(&seconds.Add(labels));
        auto& slowdown = GaugeFamily(*metrics_, "hai_job_step_slowdown", kSlowdownHelp);
        slowdown.Remove(&slowdown.Add(labels));
      }
      it = steps_.erase(it);
      continue;
    }
    JobSteps& steps = it->second;
    hai::Job& j = job->second;
    DropStaleRanks(steps.ranks);
    if (FaultTolerant(j.spec())) {
      // A lost group's ranks are gone: their last summaries must not stand for the job.
      const std::vector<std::string> held = HeldNodes(j);
      std::erase_if(steps.ranks, [&](const auto& r) {
        return std::find(held.begin(), held.end(), r.second.node()) == held.end();
      });
    }
    std::vector<hai::StepSummary> ranks;
    for (const auto& [rank, s] : steps.ranks)
      ranks.push_back(s);
    for (const StepTracker::Change& c : steps.tracker->Update(ranks, now_ms)) {
      hai::Run& r = *j.mutable_runs(j.runs_size() - 1);
      AddRunEvent(r, now_ms, c.text);
      spdlog::info("job {}: {}", j.id(), c.text);
      changed.push_back(&j);
      if (c.began && !c.finding.node().empty()) {
        auto node = nodes_.find(c.finding.node());
        if (node != nodes_.end()) {
          hai::Node& rec = node->second.record;
          hai::NodeEvent* e = rec.add_events();
          e->set_time_ms(now_ms);
          e->set_job_id(j.id());
          e->set_text("job " + std::to_string(j.id()) + ": " + DescribeFinding(c.finding));
          if (rec.events_size() > kNodeEvents)
            rec.mutable_events()->erase(rec.mutable_events()->begin());
        }
        stragglers.emplace_back(c.finding.node(), j.id());
      }
    }
    const hai::StepFinding& now = steps.tracker->current();
    if (!now.node().empty()) ++straggler_jobs[now.node()];
    if (!now.node().empty() && FaultTolerant(j.spec()) && j.state() == hai::RUNNING &&
        steps.replaced_since_ms != now.since_ms()) {
      ReplaceStragglingGroup(j, steps, now_ms);
    }
    if (metrics_ && steps.tracker->step_s() > 0) {
      const MetricLabels labels{{"job", std::to_string(j.id())}};
      metrics_->Gauge("hai_job_step_seconds", kStepSecondsHelp, labels)
          .Set(steps.tracker->step_s());
      if (steps.tracker->baseline_s() > 0) {
        metrics_->Gauge("hai_job_step_slowdown", kSlowdownHelp, labels)
            .Set(steps.tracker->step_s() / steps.tracker->baseline_s());
      }
    }
    ++it;
  }
  for (const auto& [node, job] : stragglers)
    NoteStraggler(node, job, now_ms);
  // Suspicion ages out with the findings behind it (a drained node waits for its validators).
  const int64_t window_ms = options_.straggler_window_s * 1000;
  for (auto& [name, node] : nodes_) {
    while (!node.straggler_findings.empty() && node.straggler_findings.front() < now_ms - window_ms)
      node.straggler_findings.pop_front();
    hai::Node& rec = node.record;
    if (rec.suspect() && !(rec.drained() && rec.drained_by() == kStragglerDrainer) &&
        static_cast<int64_t>(node.straggler_findings.size()) <
            options_.straggler_suspect_findings) {
      rec.set_suspect(false);
      rec.clear_suspect_reason();
      spdlog::info("node {} is no longer suspect: fewer findings name it", name);
    }
  }
  if (metrics_) {
    for (const auto& [name, node] : nodes_) {
      auto n = straggler_jobs.find(name);
      metrics_->Gauge("hai_node_straggler_jobs", kStragglerHelp, {{"node", name}})
          .Set(n == straggler_jobs.end() ? 0 : n->second);
    }
  }
  if (changed.empty()) return;
  std::vector<const hai::Job*> jobs(changed.begin(), changed.end());
  std::sort(jobs.begin(), jobs.end());
  jobs.erase(std::unique(jobs.begin(), jobs.end()), jobs.end());
  // The events are news, not decisions: one that cannot be written is logged, the job goes on.
  for (const hai::Job* job : jobs)
    (void)Save(*job);
}

void HaiServer::NoteStraggler(const std::string& name, int64_t job, int64_t now_ms) {
  auto it = nodes_.find(name);
  if (it == nodes_.end()) return;
  NodeRuntime& node = it->second;
  node.straggler_findings.push_back(now_ms);
  const int64_t window_ms = options_.straggler_window_s * 1000;
  while (node.straggler_findings.front() < now_ms - window_ms)
    node.straggler_findings.pop_front();
  const int64_t named = static_cast<int64_t>(node.straggler_findings.size());
  if (options_.straggler_suspect_findings == 0 || named < options_.straggler_suspect_findings ||
      node.record.suspect()) {
    return;
  }
  // The straggler of every job on it: a job there whose ranks do not wait for it (no finding,
  // or one naming another node) says the node is fine and something else is slow.
  for (const auto& [id, j] : jobs_) {
    const hai::Run* run = CurrentRun(j);
    if (run == nullptr ||
        std::find(run->nodes().begin(), run->nodes().end(), name) == run->nodes().end()) {
      continue;
    }
    auto steps = steps_.find(id);
    if (steps == steps_.end() || steps->second.ranks.empty()) continue;  // records no steps
    if (steps->second.tracker->current().node() != name) return;
  }
  std::string reason = "named the straggler " + std::to_string(named) + " times in " +
                       std::to_string(options_.straggler_window_s) + " s, last by job " +
                       std::to_string(job) +
                       " (every job on it that records its steps waits for it)";
  hai::Node& rec = node.record;
  rec.set_suspect(true);
  rec.set_suspect_reason(reason);
  hai::NodeEvent* e = rec.add_events();
  e->set_time_ms(now_ms);
  e->set_job_id(job);
  e->set_text("suspect: " + reason);
  if (rec.events_size() > kNodeEvents) rec.mutable_events()->erase(rec.mutable_events()->begin());
  spdlog::warn("node {} is suspect: {}", name, reason);
  if (!options_.straggler_drain || rec.drained()) return;
  hai::Node drained = rec;
  drained.set_drained(true);
  drained.set_drain_reason("straggler: " + reason);
  drained.set_drained_by(kStragglerDrainer);
  drained.set_drained_ms(now_ms);
  if (Status st = MustPersist(store_->PutNode(drained), "node " + name); !st.ok()) return;
  rec = drained;
  spdlog::warn("node {} drained by {} until its validators pass", name, kStragglerDrainer);
  (void)EvictReplicaGroups(name, rec.drain_reason());
  RequeueGangsOff(name, now_ms);
}

void HaiServer::RequeueGangsOff(const std::string& name, int64_t now_ms) {
  for (auto& [id, job] : jobs_) {
    const hai::Run* run = CurrentRun(job);
    if (run == nullptr || job.state() != hai::RUNNING || FaultTolerant(job.spec()) ||
        std::find(run->nodes().begin(), run->nodes().end(), name) == run->nodes().end()) {
      continue;
    }
    // What it would save: the rest of its run at the speed it would have without the straggler.
    double slowdown = 1;
    if (auto steps = steps_.find(id);
        steps != steps_.end() && steps->second.tracker && steps->second.tracker->baseline_s() > 0) {
      slowdown =
          std::max(1.0, steps->second.tracker->step_s() / steps->second.tracker->baseline_s());
    }
    int64_t ran_ms = 0;
    for (const hai::Run& r : job.runs())
      ran_ms += (r.end_ms() > 0 ? r.end_ms() : now_ms) - r.start_ms();
    const int64_t left_s = job.spec().expected_runtime_s() - ran_ms / 1000;
    const double saves_s = static_cast<double>(left_s) * (1 - 1 / slowdown);
    char figures[160];
    std::snprintf(figures, sizeof figures, "%llds left at %.1fx its best saves ~%.0f s",
                  static_cast<long long>(left_s), slowdown, saves_s);
    std::string text = "node " + name + " is drained as a straggler: ";
    bool requeue = false;
    if (!options_.straggler_requeue_gangs) {
      text += "the job stays (hai-server's straggler_requeue_gangs is off)";
    } else if (job.spec().expected_runtime_s() <= 0) {
      text += "the job stays (its run time is unknown: hai submit --time would tell)";
    } else if (saves_s <= static_cast<double>(options_.straggler_requeue_cost_s)) {
      text += "the job stays (" + std::string(figures) + ", no more than the ~" +
              std::to_string(options_.straggler_requeue_cost_s) + " s a restart costs)";
    } else {
      text += "suspended to be requeued elsewhere (" + std::string(figures) + ", more than the ~" +
              std::to_string(options_.straggler_requeue_cost_s) + " s a restart costs)";
      requeue = true;
    }
    hai::Job& j = job;
    AddRunEvent(*j.mutable_runs(j.runs_size() - 1), now_ms, text);
    spdlog::info("job {}: {}", id, text);
    if (requeue) {
      if (Status st = ApplyEvent(j, SuspendRequested{kStragglerDrainer, SuspendGraceMs(j)},
                                 OnWriteFailure::kReturnError);
          !st.ok()) {
        spdlog::warn("job {}: not suspended: {}", id, st.message());
      }
    } else {
      (void)Save(j);
    }
  }
}

void HaiServer::ReplaceStragglingGroup(hai::Job& job, JobSteps& steps, int64_t now_ms) {
  const hai::StepFinding f = steps.tracker->current();
  const hai::Run& run = job.runs(job.runs_size() - 1);
  const int live = LiveGroups(run);
  if (live < 2 || steps.tracker->baseline_s() <= 0 || steps.tracker->step_s() <= 0) return;
  const bool told = steps.told_since_ms == f.since_ms();
  steps.told_since_ms = f.since_ms();
  // Shares of the best speed: now, with the straggling group, and with the others alone.
  const double now_share = std::min(1.0, steps.tracker->baseline_s() / steps.tracker->step_s());
  const double without = static_cast<double>(live - 1) / live;
  int64_t ran_ms = 0;
  for (const hai::Run& r : job.runs())
    ran_ms += (r.end_ms() > 0 ? r.end_ms() : now_ms) - r.start_ms();
  const bool known = job.spec().expected_runtime_s() > 0;
  const double left_s =
      known ? std::max<double>(0, job.spec().expected_runtime_s() - ran_ms / 1000.0) : 3600;
  const double gains_s = left_s * (1 - now_share);
  const double loses_s =
      static_cast<double>(options_.straggler_replace_cost_s) * std::max(0.0, now_share - without);
  char figures[200];
  if (without >= now_share) {
    std::snprintf(figures, sizeof figures,
                  "the other %d groups alone step at %.0f%% of the best, all of them now at %.0f%%",
                  live - 1, without * 100, now_share * 100);
  } else {
    std::snprintf(figures, sizeof figures,
                  "%.0f s %s at the best speed gain ~%.0f s, a replacement's ~%lld s to join "
                  "loses ~%.0f s",
                  left_s, known ? "left" : "(an hour: its run time is unknown)", gains_s,
                  static_cast<long long>(options_.straggler_replace_cost_s), loses_s);
  }
  const bool move =
      options_.straggler_replace_groups && (without >= now_share || gains_s > loses_s);
  if (!move) {
    if (told) return;
    const std::string text =
        "its group on node " + f.node() + " stays (" +
        (options_.straggler_replace_groups ? std::string(figures)
                                           : "hai-server's straggler_replace_groups is off") +
        ")";
    AddRunEvent(*job.mutable_runs(job.runs_size() - 1), now_ms, text);
    spdlog::info("job {}: {}", job.id(), text);
    (void)Save(job);
    return;
  }
  steps.replaced_since_ms = f.since_ms();
  const std::string reason = "steps " + StepSecondsText(steps.tracker->step_s()) + ", best " +
                             StepSecondsText(steps.tracker->baseline_s()) + "; " + figures;
  if (Status st = ApplyEvent(job, GroupStraggles{f.node(), reason}, OnWriteFailure::kReturnError);
      !st.ok()) {
    spdlog::warn("job {}: its group on {} not moved: {}", job.id(), f.node(), st.message());
  }
}

grpc::Status HaiServer::Steps(grpc::ServerContext* ctx, const hai::JobStepsRequest* req,
                              hai::JobSteps* resp) {
  return ServeRpc("Steps", [&]() -> Status {
    FF_ASSIGN_OR_RETURN(hai::User user, Authenticate(*ctx));
    MutexLock lock(&mu_);
    FF_ASSIGN_OR_RETURN(hai::Job * job, OwnJob(user, req->id()));
    resp->set_job_id(job->id());
    const hai::Run* run = CurrentRun(*job);
    if (run == nullptr) {
      return FailedPrecondition("job " + std::to_string(job->id()) +
                                " is not running: its steps are recorded only while it runs");
    }
    resp->set_run(run->index());
    resp->mutable_finding()->set_rank(-1);  // nothing found (yet)
    auto it = steps_.find(job->id());
    if (it == steps_.end() || it->second.run != run->index()) return Status::Ok();
    const JobSteps& steps = it->second;
    for (const auto& [rank, s] : steps.ranks)
      *resp->add_ranks() = s;
    resp->set_step_s(steps.tracker->step_s());
    resp->set_baseline_s(steps.tracker->baseline_s());
    *resp->mutable_finding() = steps.tracker->current();
    for (const hai::StepFinding& f : steps.tracker->past())
      *resp->add_past() = f;
    return Status::Ok();
  });
}

}  // namespace ff::platform
