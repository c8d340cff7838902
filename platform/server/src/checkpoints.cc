#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>

#include "platform/lifecycle.h"
#include "platform/server.h"
#include "store.h"

// Checkpoint-aware time-sharing: what jobs report of their checkpoints, and the deadline a
// suspended job is given from it.
namespace ff::platform {

namespace {

// The latest checkpoint a job reported (in its current run, or an earlier one: its write time
// carries over a resume), or nullptr.
const hai::CheckpointInfo* LatestCheckpoint(const hai::Job& job) {
  for (int i = job.runs_size() - 1; i >= 0; --i) {
    if (job.runs(i).checkpoint().ranks() > 0) return &job.runs(i).checkpoint();
  }
  return nullptr;
}

}  // namespace

Status HaiServer::TakeCheckpoints(const hai::HeartbeatRequest& req) {
  std::set<int64_t> touched;
  for (const hai::CheckpointReport& c : req.checkpoints()) {
    auto job = jobs_.find(c.job_id());
    if (job == jobs_.end() || !Active(job->second)) continue;
    const hai::Run& run = job->second.runs(job->second.runs_size() - 1);
    if (run.index() != c.run() || c.step() < 0 || !std::isfinite(c.time()) ||
        !std::isfinite(c.bytes()) || !std::isfinite(c.write_s())) {
      continue;  // an older run's last words, or nonsense
    }
    checkpoint_reports_[c.job_id()][{c.run(), c.rank()}] = c;
    touched.insert(c.job_id());
  }
  for (int64_t id : touched) {
    auto& reports = checkpoint_reports_[id];
    hai::Job& job = jobs_.at(id);
    const int current = job.runs(job.runs_size() - 1).index();
    std::erase_if(reports, [&](const auto& r) { return r.first.first != current; });
    // The latest step any rank reported: every rank's bytes of it, the slowest one's write.
    hai::CheckpointInfo info;
    for (const auto& [key, c] : reports)
      info.set_step(std::max(info.step(), c.step()));
    for (const auto& [key, c] : reports) {
      if (c.step() != info.step()) continue;
      info.set_ranks(info.ranks() + 1);
      info.set_bytes(info.bytes() + std::max(0.0, c.bytes()));
      info.set_write_s(std::max(info.write_s(), std::max(0.0, c.write_s())));
      info.set_time_ms(
          std::max(info.time_ms(), static_cast<int64_t>(std::llround(c.time() * 1000))));
    }
    const hai::CheckpointInfo& kept = job.runs(job.runs_size() - 1).checkpoint();
    if (kept.step() == info.step() && kept.ranks() == info.ranks() &&
        kept.time_ms() == info.time_ms()) {
      continue;  // (the same reports again: every heartbeat carries the latest)
    }
    hai::Job changed = job;
    *changed.mutable_runs(changed.runs_size() - 1)->mutable_checkpoint() = info;
    // Written before memory changes: a failed write fails the heartbeat, whose reports come again.
    FF_RETURN_IF_ERROR(Save(changed));
    job = std::move(changed);
    spdlog::debug("job {}: checkpoint of step {} ({} ranks, {:.0f} bytes, {:.2f} s)", id,
                  info.step(), info.ranks(), info.bytes(), info.write_s());
  }
  // Reports of jobs that ended are forgotten.
  std::erase_if(checkpoint_reports_, [&](const auto& r) {
    auto job = jobs_.find(r.first);
    return job == jobs_.end() || !Active(job->second);
  });
  return Status::Ok();
}

int64_t HaiServer::SuspendGraceMs(const hai::Job& job) const {
  const hai::CheckpointInfo* c = LatestCheckpoint(job);
  if (c == nullptr) return options_.suspend_grace_ms;
  const double wanted = options_.suspend_grace_margin * c->write_s() * 1000 +
                        static_cast<double>(options_.suspend_grace_slack_ms);
  return std::clamp(static_cast<int64_t>(std::ceil(wanted)), options_.suspend_grace_ms,
                    options_.suspend_max_grace_ms);
}

}  // namespace ff::platform
