#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <set>

#include "platform/lifecycle.h"
#include "platform/server.h"
#include "platform/tokens.h"
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

// A job's checkpoint write rate (GB/s), from its last checkpoint; 0 when unknown.
double WriteGbps(const hai::Job& job) {
  const hai::CheckpointInfo* c = LatestCheckpoint(job);
  return c != nullptr && c->write_s() > 0 ? c->bytes() / c->write_s() / 1e9 : 0;
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
    // Its checkpoint is written: its slot (if it had one) is free for the next.
    if (auto slot = slots_.find(id);
        slot != slots_.end() && info.time_ms() >= slot->second.since_ms) {
      slots_.erase(slot);
    }
    spdlog::debug("job {}: checkpoint of step {} ({} ranks, {:.0f} bytes, {:.2f} s)", id,
                  info.step(), info.ranks(), info.bytes(), info.write_s());
  }
  // Reports of jobs that ended are forgotten. (A loop, not erase_if: clang's thread-safety
  // analysis does not see that a lambda runs under mu_.)
  for (auto r = checkpoint_reports_.begin(); r != checkpoint_reports_.end();) {
    auto job = jobs_.find(r->first);
    r = job == jobs_.end() || !Active(job->second) ? checkpoint_reports_.erase(r) : std::next(r);
  }
  return Status::Ok();
}

void HaiServer::TakeSlotAsks(const hai::HeartbeatRequest& req) {
  const int64_t now_ms = NowMs();
  for (const hai::CheckpointSlotRequest& ask : req.slot_requests()) {
    auto job = jobs_.find(ask.job_id());
    if (job == jobs_.end() || !Active(job->second) ||
        job->second.runs(job->second.runs_size() - 1).index() != ask.run() || ask.id() <= 0) {
      continue;
    }
    if (auto slot = slots_.find(ask.job_id());
        slot != slots_.end() && slot->second.run == ask.run() && slot->second.id >= ask.id()) {
      continue;  // granted already
    }
    auto waiting = std::find_if(slot_asks_.begin(), slot_asks_.end(), [&](const SlotAsk& a) {
      return a.job == ask.job_id() && a.run == ask.run();
    });
    if (waiting != slot_asks_.end()) {  // another rank of the job, or the same ask again
      waiting->id = std::max(waiting->id, ask.id());
      waiting->bytes = std::max(waiting->bytes, ask.bytes());
      continue;
    }
    slot_asks_.push_back({ask.job_id(), ask.run(), ask.id(), std::max(0.0, ask.bytes()), now_ms});
  }
}

bool HaiServer::RunEnded(int64_t id, int run) const {
  auto job = jobs_.find(id);
  return job == jobs_.end() || !Active(job->second) ||
         job->second.runs(job->second.runs_size() - 1).index() != run;
}

void HaiServer::AdmitCheckpoints(int64_t now_ms) {
  for (auto s = slots_.begin(); s != slots_.end();) {
    s = RunEnded(s->first, s->second.run) || now_ms >= s->second.until_ms ? slots_.erase(s)
                                                                          : std::next(s);
  }
  for (auto a = slot_asks_.begin(); a != slot_asks_.end();) {
    a = RunEnded(a->job, a->run) ? slot_asks_.erase(a) : std::next(a);
  }
  if (slot_asks_.empty()) return;
  const double budget = options_.checkpoint_write_gbps;
  double used = 0;
  for (const auto& [id, slot] : slots_)
    used += slot.gbps;
  // A suspended job's save goes first, and counts while it is written.
  for (const auto& [id, job] : jobs_) {
    if (job.state() != hai::SUSPENDING) continue;
    const hai::Run& run = job.runs(job.runs_size() - 1);
    if (run.suspend_ms() > 0 && run.checkpoint().time_ms() < run.suspend_ms()) {
      used += WriteGbps(job) > 0 ? WriteGbps(job) : budget;
    }
  }
  // In the order asked: the first that does not fit holds those behind it (none starves), unless
  // it has waited checkpoint_max_delay_ms. With nothing being written, one always goes.
  while (!slot_asks_.empty()) {
    const SlotAsk ask = slot_asks_.front();
    const hai::Job& job = jobs_.at(ask.job);
    const double gbps = WriteGbps(job) > 0 ? WriteGbps(job) : budget;
    const bool fits = budget <= 0 || used <= 0 || used + gbps <= budget * 1.000001 ||
                      job.state() == hai::SUSPENDING;
    if (!fits && now_ms - ask.since_ms < options_.checkpoint_max_delay_ms) break;
    const hai::CheckpointInfo* last = LatestCheckpoint(job);
    const double write_s = last != nullptr && last->write_s() > 0 ? last->write_s() : 60;
    slots_[ask.job] = Slot{ask.run, ask.id, gbps, now_ms,
                           now_ms + static_cast<int64_t>(std::ceil(3 * write_s * 1000)) + 5000};
    used += gbps;
    slot_asks_.erase(slot_asks_.begin());
    for (const std::string& n : HeldNodes(job)) {
      if (auto node = nodes_.find(n); node != nodes_.end()) ++node->second.generation;
    }
    work_cv_.notify_all();
    spdlog::debug("job {}: checkpoint {} let through after {} ms ({:.3f} of {:.3f} GB/s in use)",
                  ask.job, ask.id, now_ms - ask.since_ms, used, budget);
  }
}

std::vector<hai::CheckpointSlotGrant> HaiServer::SlotGrants(
    const hai::HeartbeatRequest& req) const {
  std::vector<hai::CheckpointSlotGrant> grants;
  std::set<int64_t> seen;
  for (const hai::CheckpointSlotRequest& ask : req.slot_requests()) {
    auto slot = slots_.find(ask.job_id());
    if (slot == slots_.end() || slot->second.run != ask.run() || slot->second.id < ask.id() ||
        !seen.insert(ask.job_id()).second) {
      continue;
    }
    hai::CheckpointSlotGrant& g = grants.emplace_back();
    g.set_job_id(ask.job_id());
    g.set_run(ask.run());
    g.set_id(slot->second.id);
  }
  return grants;
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
