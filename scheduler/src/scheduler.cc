#include "scheduler/scheduler.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <optional>
#include <tuple>

namespace ff::scheduler {
namespace {

int NodesHeld(const JobRequest& job) {
  return job.Gang() ? job.nodes : 1;
}

// What a running job holds (an elastic gang: what it started with).
int NodesHeld(const RunningJob& r) {
  return r.request.Gang() ? static_cast<int>(r.placement.nodes.size()) : 1;
}

bool SpansLeaves(const Topology& topo, const Placement& p) {
  for (int n : p.nodes) {
    if (topo.nodes()[n].leaf != topo.nodes()[p.nodes.front()].leaf) return true;
  }
  return false;
}

std::string Plural(int n, const std::string& word) {
  return std::to_string(n) + " " + word + (n == 1 ? "" : "s");
}

// Why a job waits longer for a leaf than spreading would cost: the share of its time since
// submission (PolicyOptions::locality_wait_share) that it may wait, `allowed`.
std::string ShareClause(const JobRequest& job, Seconds allowed, Seconds now) {
  return ", but it was submitted " + FormatDuration(std::max<Seconds>(0, now - job.submit_time)) +
         " ago and may wait up to " + FormatDuration(allowed) + ", a share of that, for one leaf";
}

}  // namespace

bool ComesBefore(const JobRequest& a, const JobRequest& b) {
  if (a.priority != b.priority) return a.priority > b.priority;
  if (a.submit_time != b.submit_time) return a.submit_time < b.submit_time;
  return a.id < b.id;
}

std::string FormatDuration(Seconds s) {
  if (s < 60) return std::to_string(s) + "s";
  if (s < 600 && s % 60 != 0) return std::to_string(s / 60) + "m" + std::to_string(s % 60) + "s";
  if (s < 3600) return std::to_string(s / 60) + "m";
  if (s < 86400) {
    return std::to_string(s / 3600) + "h" +
           (s % 3600 >= 60 ? std::to_string(s % 3600 / 60) + "m" : "");
  }
  return std::to_string(s / 86400) + "d" +
         (s % 86400 >= 3600 ? std::to_string(s % 86400 / 3600) + "h" : "");
}

Seconds SuspendDeadline(const JobRequest& job, const SuspendPolicy& policy) {
  if (job.checkpoint_s <= 0) return policy.min_deadline;
  const auto wanted =
      static_cast<Seconds>(std::ceil(policy.margin * static_cast<double>(job.checkpoint_s))) +
      policy.slack;
  return std::clamp(wanted, policy.min_deadline,
                    std::max(policy.min_deadline, policy.max_deadline));
}

bool SavesInTime(const JobRequest& job, const SuspendPolicy& policy) {
  return job.checkpoint_s > 0 && policy.margin * static_cast<double>(job.checkpoint_s) +
                                         static_cast<double>(policy.slack) <=
                                     static_cast<double>(SuspendDeadline(job, policy));
}

std::string FormatGpuSeconds(double gpu_seconds) {
  char buf[32];
  if (gpu_seconds < 600) {
    std::snprintf(buf, sizeof buf, "%.0f GPU-s", gpu_seconds);
  } else if (gpu_seconds < 3 * 3600) {
    std::snprintf(buf, sizeof buf, "%.0f GPU-min", gpu_seconds / 60);
  } else {
    std::snprintf(buf, sizeof buf, "%.1f GPU-h", gpu_seconds / 3600);
  }
  return buf;
}

SuspendCost LostBySuspending(const RunningJob& r, Seconds now, const SuspendPolicy& policy) {
  const JobRequest& job = r.request;
  const double gpus = static_cast<double>(r.placement.nodes.size()) * r.placement.gpus_per_node;
  const Seconds restart = policy.restart_s + job.checkpoint_s;  // start-up, then reading it back
  SuspendCost cost;
  if (SavesInTime(job, policy)) {
    cost.gpu_seconds = gpus * static_cast<double>(job.checkpoint_s + restart);
    cost.text = "~" + FormatGpuSeconds(cost.gpu_seconds) + ": a " +
                FormatDuration(job.checkpoint_s) + " checkpoint and a " + FormatDuration(restart) +
                " restart";
    return cost;
  }
  const Seconds since = std::max<Seconds>(0, now - r.last_checkpoint);
  cost.gpu_seconds = gpus * static_cast<double>(since + restart);
  cost.text = "~" + FormatGpuSeconds(cost.gpu_seconds) + ": " + FormatDuration(since) +
              (job.checkpoint_s <= 0
                   ? " since it started (it reports no checkpoints)"
                   : " since its checkpoint (a save takes " + FormatDuration(job.checkpoint_s) +
                         ", more than its deadline allows)");
  return cost;
}

Scheduler::Scheduler(std::unique_ptr<PlacementPolicy> policy, SchedulerOptions options)
    : policy_(std::move(policy)), options_(std::move(options)) {}

Placement Scheduler::PlaceJob(const JobRequest& job, const ClusterState& state, bool one_leaf,
                              std::string* why) const {
  Placement p = policy_->Place(job, state, why);
  if (!one_leaf || p.empty()) return p;
  const Topology& topo = state.topology();
  if (!SpansLeaves(topo, p)) return p;
  int freest = 0;
  for (std::size_t l = 0; l < topo.leaves().size(); ++l)
    freest = std::max(freest, state.leaf_free_nodes(static_cast<int>(l)));
  *why = "needs " + Plural(job.nodes, "node") + " under one leaf switch, so that its traffic " +
         "stays off the shared uplinks; the freest leaf has " + Plural(freest, "free node");
  return {};
}

std::vector<JobId> Scheduler::FindVictims(const JobRequest& job, const ClusterState& state,
                                          Seconds now, bool one_leaf, Placement* placement,
                                          std::map<JobId, std::string>* reasons) const {
  const SuspendPolicy& suspend = options_.suspend;
  std::vector<const RunningJob*> candidates;
  std::map<JobId, SuspendCost> cost;
  for (const RunningJob& r : state.running()) {
    if (r.request.priority < job.priority && now - r.start_time >= r.request.min_runtime) {
      candidates.push_back(&r);
      cost[r.request.id] = LostBySuspending(r, now, suspend);
    }
  }
  if (candidates.empty()) return {};
  auto lost = [&](const RunningJob* r) { return cost[r->request.id].gpu_seconds; };
  auto per_gpu = [&](const RunningJob* r) { return lost(r) / std::max(1, r->request.TotalGpus()); };
  // Ties: the lowest priority; then the smallest; then id.
  auto tie = [](const RunningJob* a, const RunningJob* b) {
    if (a->request.priority != b->request.priority)
      return a->request.priority < b->request.priority;
    if (a->request.TotalGpus() != b->request.TotalGpus()) {
      return a->request.TotalGpus() < b->request.TotalGpus();
    }
    return a->request.id < b->request.id;
  };
  std::string why;
  auto fits = [&](const ClusterState& trial) {
    return !PlaceJob(job, trial, one_leaf, &why).empty();
  };
  // The victims taken in `order`: the shortest prefix that makes room (suspending more never
  // hurts, so it is binary-searched; if all of them do not, no subset does), less every one the
  // job can do without, given back in `give_back` order. Empty if none makes room.
  struct Choice {
    std::vector<const RunningJob*> victims;
    ClusterState trial;
    double lost = 0;
  };
  auto choose = [&](const std::vector<const RunningJob*>& order,
                    const std::function<bool(const RunningJob*, const RunningJob*)>& give_back)
      -> std::optional<Choice> {
    auto without_first = [&](std::size_t k) {
      ClusterState trial = state;
      std::vector<JobId> ids;
      for (std::size_t i = 0; i < k; ++i)
        ids.push_back(order[i]->request.id);
      (void)trial.ReleaseAll(std::move(ids));
      return trial;
    };
    if (!fits(without_first(order.size()))) return std::nullopt;
    std::size_t lo = 1, hi = order.size();
    while (lo < hi) {
      std::size_t mid = (lo + hi) / 2;
      if (fits(without_first(mid))) {
        hi = mid;
      } else {
        lo = mid + 1;
      }
    }
    Choice c{{order.begin(), order.begin() + static_cast<std::ptrdiff_t>(lo)}, without_first(lo)};
    // The last one taken is needed; the others are tried in give_back order.
    std::vector<const RunningJob*> others(c.victims.begin(), c.victims.end() - 1);
    std::stable_sort(others.begin(), others.end(), give_back);
    for (const RunningJob* v : others) {
      if (!c.trial.Allocate(v->request, v->placement, v->start_time).ok()) continue;
      if (fits(c.trial)) {
        c.victims.erase(std::find(c.victims.begin(), c.victims.end(), v));
      } else {
        (void)c.trial.Release(v->request.id);  // needed after all
      }
    }
    for (const RunningJob* v : c.victims)
      c.lost += lost(v);
    return c;
  };
  std::optional<Choice> best;
  if (suspend.order == SuspendPolicy::VictimOrder::kNewestFirst) {
    std::sort(candidates.begin(), candidates.end(), [&](const RunningJob* a, const RunningJob* b) {
      return a->start_time != b->start_time ? a->start_time > b->start_time : tie(a, b);
    });
    // Latest taken, first given back.
    std::map<const RunningJob*, std::size_t> rank;
    for (std::size_t i = 0; i < candidates.size(); ++i)
      rank[candidates[i]] = i;
    best = choose(candidates,
                  [&](const RunningJob* a, const RunningJob* b) { return rank[a] > rank[b]; });
  } else {
    // The fewest GPU-seconds lost: taken by what each loses, and by what each loses per GPU it
    // frees (one big job that just saved can beat many small ones that did not); the cheaper
    // set wins. The dearest are given back first.
    auto dearest = [&](const RunningJob* a, const RunningJob* b) { return lost(a) > lost(b); };
    for (int by_gpu = 0; by_gpu < 2; ++by_gpu) {
      std::sort(candidates.begin(), candidates.end(),
                [&](const RunningJob* a, const RunningJob* b) {
                  const double la = by_gpu ? per_gpu(a) : lost(a);
                  const double lb = by_gpu ? per_gpu(b) : lost(b);
                  return la != lb ? la < lb : tie(a, b);
                });
      std::optional<Choice> c = choose(candidates, dearest);
      if (c && (!best || c->lost < best->lost)) best = std::move(c);
      if (!best) break;  // (no subset makes room)
    }
  }
  if (!best) return {};
  *placement = PlaceJob(job, best->trial, one_leaf, &why);
  std::vector<JobId> ids;
  for (const RunningJob* v : best->victims)
    ids.push_back(v->request.id);
  if (reasons != nullptr) {
    // The cheapest candidate spared, for comparison.
    const RunningJob* spared = nullptr;
    for (const RunningJob* c : candidates) {
      if (std::find(best->victims.begin(), best->victims.end(), c) != best->victims.end()) continue;
      if (spared == nullptr || lost(c) < lost(spared)) spared = c;
    }
    for (const RunningJob* v : best->victims) {
      std::string& text = (*reasons)[v->request.id];
      text = "lost " + cost[v->request.id].text;
      if (spared != nullptr) {
        text += "; rather than job " + std::to_string(spared->request.id) + " (" +
                cost[spared->request.id].text + ")";
      }
    }
  }
  return ids;
}

Seconds Scheduler::EarliestStart(const JobRequest& job, const ClusterState& state, Seconds now,
                                 bool one_leaf, Placement* where) const {
  std::vector<std::pair<Seconds, JobId>> ends;
  for (const RunningJob& r : state.running()) {
    if (r.request.expected_runtime <= 0) continue;  // unknown: cannot be counted on
    ends.emplace_back(std::max(now, r.start_time + r.request.expected_runtime), r.request.id);
  }
  std::sort(ends.begin(), ends.end());
  // Freeing more never hurts, so binary-search the shortest prefix of endings that makes room.
  std::string why;
  // `found`: the placement after the shortest prefix found so far (the search ends on it).
  Placement found;
  auto fits_after = [&](std::size_t k) {
    ClusterState future = state;
    std::vector<JobId> ids;
    for (std::size_t i = 0; i < k; ++i)
      ids.push_back(ends[i].second);
    (void)future.ReleaseAll(std::move(ids));
    Placement p = PlaceJob(job, future, one_leaf, &why);
    if (p.empty()) return false;
    found = std::move(p);
    return true;
  };
  if (ends.empty() || !fits_after(ends.size())) return -1;
  std::size_t lo = 1, hi = ends.size();
  while (lo < hi) {
    std::size_t mid = (lo + hi) / 2;
    if (fits_after(mid)) {
      hi = mid;
    } else {
      lo = mid + 1;
    }
  }
  if (where != nullptr) *where = std::move(found);
  return ends[lo - 1].first;
}

// One Decide: the state a round builds up as it goes down the queue, and the stages each queued
// job goes through (Consider): its user's quota, where it starts whole (with the locality wait),
// whether it may pass the blocked head (backfill), whom it suspends (victims), an elastic gang's
// start in part, and else why it waits (the head's reservation). Running fault-tolerant jobs'
// missing groups go through StartGroups.
class Scheduler::Round {
 public:
  Round(const Scheduler& scheduler, const ClusterState& state, const std::vector<JobRequest>& queue,
        Seconds now);
  Decision Run();

 private:
  // What the stages know of the queued job being considered.
  struct Candidate {
    Candidate(const JobRequest& j, std::size_t i) : job(j), index(i) {}
    const JobRequest& job;
    std::size_t index;       // in order_
    int most_nodes = 0;      // what its user's quota leaves it (an elastic gang may start with
    std::string over_quota;  // less)
    bool whole = true;       // it may start whole
    Seconds cap = 0;         // the policy's longest locality wait for it
    bool may_wait = false;   // it may wait for one leaf
    Seconds since = -1;      // its locality wait began
    std::string why;         // why it does not start (so far)
    Placement placement;
    bool within_leaf = false;       // how `placement` was chosen
    bool one_leaf = false;          // held for one leaf this round
    Seconds until = -1;             // when the locality wait runs out
    Seconds leaf_expected = -1;     // when a leaf is expected to free for it
    Placement leaf_where;           // and where
    bool short_everywhere = false;  // it could not start on free nodes even across leaves
  };
  // A line of the round's order: a queued job, or a running job's missing groups of one kind.
  enum class Ask : uint8_t { kJob, kReplacements, kGrowth };
  struct Entry {
    const JobRequest* job;
    Ask ask;
  };
  // nodes, GPUs per node or GPUs, comm, spans zones, must stay under one leaf, must keep off the
  // head's reserved nodes, must stay in this zone (-1: any)
  using Shape = std::tuple<int, int, int, bool, bool, bool, int>;

  void Consider(std::size_t index);
  bool WithinQuota(Candidate& c);
  void PlaceWhole(Candidate& c);
  bool HoldForLeaf(Candidate& c, const Placement& across, const std::string& how);
  bool PassesHead(Candidate& c);
  void Preempt(Candidate& c);
  void PlaceInPart(Candidate& c);
  void Block(Candidate& c);
  void Start(const JobRequest& job, Placement placement);
  void StartGroups(const JobRequest& job, bool lost);
  bool StartGroup(const JobRequest& job, const MissingGroup& group, const std::string& waits);
  void Suspend(const std::vector<JobId>& victims, JobId for_job,
               const std::map<JobId, std::string>& why);
  void Wait(const JobRequest& job, std::string reason);

  Placement PlaceAs(const JobRequest& request, bool within_leaf, std::string* reason,
                    bool off_reserved, int zone = -1);
  int QueuedForGpus(std::size_t index, int taking) const;
  bool TouchesReserved(const Placement& p) const;
  std::string Head() const;  // "job 3 (priority 5, 4 nodes)"

  const Scheduler& scheduler_;
  const SchedulerOptions& options_;
  const PlacementPolicy& policy_;
  const Seconds now_;
  Decision decision_;
  ClusterState work_;
  std::vector<Entry> order_;
  std::map<std::string, int> held_;  // nodes each user's running jobs hold
  // Many queued jobs ask for the same shape. While nothing starts, a shape that did not fit
  // still does not, for the same reason: failures are remembered until the cluster state changes.
  std::map<Shape, std::string> failed_;
  const JobRequest* head_ = nullptr;  // the first job that could not start
  Seconds reservation_ = -1;
  // The nodes the head is expected to start on at reservation_: a job behind it that would still
  // run then may start now on other nodes (EASY backfill's "extra nodes"), never on these.
  std::vector<int> reserved_;
  std::map<int, int> waiting_by_priority_;
  int searches_ = 0;  // preemption searches so far
  // Jobs that wait for GPUs if more GPUs go to the entry at order_[i]: those left waiting ahead
  // of it, and those behind it beyond what would still be free (demand_[k]: the GPUs the first k
  // entries ask for).
  long free_gpus_ = 0;
  std::vector<long> demand_;
};

Scheduler::Round::Round(const Scheduler& scheduler, const ClusterState& state,
                        const std::vector<JobRequest>& queue, Seconds now)
    : scheduler_(scheduler),
      options_(scheduler.options_),
      policy_(*scheduler.policy_),
      now_(now),
      work_(state) {
  for (const JobRequest& j : queue) {
    if (!j.AsksForGroups()) {
      order_.push_back({&j, Ask::kJob});
      continue;
    }
    if (!j.Gang() || j.node_step <= 0) continue;  // (not a fault-tolerant job: nothing to ask)
    const auto& groups = j.missing_groups;
    if (std::any_of(groups.begin(), groups.end(), [](const MissingGroup& g) { return g.lost; }))
      order_.push_back({&j, Ask::kReplacements});
    if (std::any_of(groups.begin(), groups.end(), [](const MissingGroup& g) { return !g.lost; }))
      order_.push_back({&j, Ask::kGrowth});
  }
  // Groups a run began without come after everything else; the rest by ComesBefore.
  std::stable_sort(order_.begin(), order_.end(), [](const Entry& a, const Entry& b) {
    const bool a_later = a.ask == Ask::kGrowth, b_later = b.ask == Ask::kGrowth;
    if (a_later != b_later) return b_later;
    return ComesBefore(*a.job, *b.job);
  });
  for (const RunningJob& r : work_.running())
    held_[r.request.user] += NodesHeld(r);
  for (std::size_t n = 0; n < work_.topology().nodes().size(); ++n) {
    if (!work_.drained(static_cast<int>(n))) free_gpus_ += work_.free_gpus(static_cast<int>(n));
  }
  demand_.assign(order_.size() + 1, 0);
  for (std::size_t k = 0; k < order_.size(); ++k) {
    const Entry& e = order_[k];
    long asks = e.job->TotalGpus();
    if (e.ask != Ask::kJob) {
      const auto wanted = std::count_if(
          e.job->missing_groups.begin(), e.job->missing_groups.end(),
          [&](const MissingGroup& g) { return g.lost == (e.ask == Ask::kReplacements); });
      asks = static_cast<long>(wanted) * e.job->node_step * e.job->gpus_per_node;
    }
    demand_[k + 1] = demand_[k] + asks;
  }
}

Decision Scheduler::Round::Run() {
  for (std::size_t index = 0; index < order_.size(); ++index) {
    const Entry& e = order_[index];
    if (e.ask == Ask::kJob) {
      Consider(index);
    } else {
      StartGroups(*e.job, e.ask == Ask::kReplacements);
    }
  }
  decision_.reserved = std::move(reserved_);
  return std::move(decision_);
}

// A queued job through the stages: it starts, or waits with its reason.
void Scheduler::Round::Consider(std::size_t index) {
  Candidate c(*order_[index].job, index);
  if (!WithinQuota(c)) return;
  PlaceWhole(c);
  if (!c.placement.empty() && head_ != nullptr && !PassesHead(c)) return;
  if (c.placement.empty() && c.whole) Preempt(c);
  if (c.short_everywhere && !c.one_leaf && c.since >= 0) {
    // It could not start anywhere this round: the wait ends unused.
    c.since = -1;
    decision_.locality_wait_started[c.job.id] = -1;
  }
  if (c.placement.empty()) PlaceInPart(c);
  if (c.placement.empty() && !c.whole) {  // not even in part: its user's quota it waits for
    Wait(c.job, c.over_quota);
    return;
  }
  if (c.placement.empty()) {
    Block(c);
    return;
  }
  Start(c.job, std::move(c.placement));
}

// Order: the nodes its user's quota leaves it. False (it waits) when that is too few.
bool Scheduler::Round::WithinQuota(Candidate& c) {
  const JobRequest& job = c.job;
  c.most_nodes = job.nodes;
  if (auto q = options_.node_quota.find(job.user); q != options_.node_quota.end()) {
    const int has = held_[job.user], needs = NodesHeld(job);
    if (has + needs > q->second) {
      c.over_quota = "user " + job.user + " may hold " + Plural(q->second, "node") + " and holds " +
                     std::to_string(has) + "; this job needs " + std::to_string(needs) + " more";
      if (!job.Elastic() || has + job.min_nodes > q->second) {
        Wait(job, c.over_quota);
        return false;
      }
      c.most_nodes = q->second - has;
    }
  }
  c.whole = c.most_nodes >= job.nodes;
  return true;
}

// Shape: where it starts whole on free nodes now, if anywhere. The locality wait (placement.h):
// a job that fits under one leaf is tried there first; one that could start now only across
// leaves waits for a leaf while that is the cheaper choice (the policy's LocalityWait, from what
// spreading would cost) and a leaf is expected to free in time. The wait begins in the first
// round the job could start across leaves, and ends unused in a round where it could not start
// anywhere: waiting behind other jobs for capacity does not use it up, so a job is never spread
// the moment nodes free after hours short of them.
void Scheduler::Round::PlaceWhole(Candidate& c) {
  const JobRequest& job = c.job;
  c.cap = policy_.MaxLocalityWait(job);
  c.may_wait = c.whole && c.cap > 0 && job.nodes <= work_.topology().max_leaf_nodes();
  c.since = job.locality_wait_since;
  c.why = c.over_quota;
  c.within_leaf = c.may_wait;
  if (c.whole) c.placement = PlaceAs(job, c.may_wait, &c.why, /*off_reserved=*/false);
  if (!c.placement.empty() || !c.may_wait) return;
  std::string across_why;
  Placement across = PlaceAs(job, /*within_leaf=*/false, &across_why, /*off_reserved=*/false);
  if (across.empty()) {
    // Short of nodes wherever they are: that is what it waits for first (unless suspending
    // others would start it).
    c.short_everywhere = true;
    c.why = across_why + "; then, if its traffic would crowd the uplinks, it may wait up to " +
            FormatDuration(c.cap) + " for them under one leaf switch";
  } else if (!HoldForLeaf(c, across, "")) {
    c.placement = std::move(across);  // waiting would cost more than spreading
    c.within_leaf = false;
  }
}

// Whether the job, which could start now on `across` (spread over leaves; `how`: "" or by
// suspending which jobs), holds out for one leaf this round instead.
bool Scheduler::Round::HoldForLeaf(Candidate& c, const Placement& across, const std::string& how) {
  const JobRequest& job = c.job;
  const int queued = QueuedForGpus(c.index, job.TotalGpus());
  const LocalityBudget budget = policy_.LocalityWait(job, work_, across, now_, queued);
  const Seconds allowed = budget.wait;
  const Seconds waited = c.since >= 0 ? now_ - c.since : 0;
  bool hold = waited < allowed;
  if (hold) {
    c.leaf_expected = scheduler_.EarliestStart(job, work_, now_, /*one_leaf=*/true, &c.leaf_where);
    hold = c.leaf_expected < 0 || c.leaf_expected - now_ <= allowed - waited;
  }
  if (!hold) return false;
  c.one_leaf = true;
  if (c.since < 0) {
    c.since = now_;
    decision_.locality_wait_started[job.id] = now_;
  }
  c.until = c.since + allowed;
  decision_.recheck_at =
      decision_.recheck_at < 0 ? c.until : std::min(decision_.recheck_at, c.until);
  const std::string spread = "; spread over leaves now" + how;
  const std::string cost = FormatDuration(budget.from_share ? budget.spread_cost : allowed);
  c.why += queued == 0 ? spread + ", it and the jobs sharing those uplinks would lose about " +
                             cost + " of run time to congestion"
                       : spread +
                             ", the run time it and the jobs sharing those uplinks would lose "
                             "to congestion, and the GPU time " +
                             Plural(queued, "job") +
                             " queued for GPUs would wait for, come to about " + cost;
  if (budget.from_share) c.why += ShareClause(job, allowed, now_);
  if (c.leaf_expected >= 0)
    c.why += ", and a leaf is expected to free in " + FormatDuration(c.leaf_expected - now_);
  return true;
}

// Backfill: a job that fits now starts ahead of the blocked head only if it is done before the
// head's reservation, or on nodes the reservation does not need. False: it waits.
bool Scheduler::Round::PassesHead(Candidate& c) {
  const JobRequest& job = c.job;
  const bool ends_in_time = options_.backfill && job.expected_runtime > 0 && reservation_ >= 0 &&
                            now_ + job.expected_runtime <= reservation_;
  if (ends_in_time) return true;
  if (options_.backfill && reservation_ >= 0) {
    if (!TouchesReserved(c.placement)) return true;
    std::string ignored;
    Placement elsewhere = PlaceAs(job, c.within_leaf, &ignored, /*off_reserved=*/true);
    if (!elsewhere.empty()) {
      c.placement = std::move(elsewhere);
      return true;
    }
  }
  std::string reason = "it fits now, but " + Head() + " is ahead and ";
  if (reservation_ < 0) {
    reason += "no running job has an expected end, so nothing can start ahead of it";
  } else if (!options_.backfill) {
    reason +=
        "holds a reservation in " + FormatDuration(reservation_ - now_) + " (backfill is off)";
  } else if (job.expected_runtime <= 0) {
    reason += "holds a reservation in " + FormatDuration(reservation_ - now_) +
              " on the nodes this job fits on; this job gives no expected run time, so it "
              "cannot be backfilled there (one of at most " +
              FormatDuration(reservation_ - now_) + " would start now)";
  } else {
    reason += "holds a reservation in " + FormatDuration(reservation_ - now_) +
              " on the nodes this job fits on, before this job would end (expected run time " +
              FormatDuration(job.expected_runtime) + "); one of at most " +
              FormatDuration(reservation_ - now_) + " would start now";
  }
  Wait(job, reason);
  return false;
}

// Victims: running jobs of lower priority to suspend so that it starts whole. Suspending jobs is
// starting now too: a job that may wait for a leaf suspends jobs under one leaf if that frees
// one, and across leaves only where the locality wait would spread it on free nodes.
void Scheduler::Round::Preempt(Candidate& c) {
  if (!options_.preemption || searches_ >= options_.max_preemption_searches) return;
  ++searches_;
  const JobRequest& job = c.job;
  std::map<JobId, std::string> why;
  std::vector<JobId> victims =
      scheduler_.FindVictims(job, work_, now_, c.may_wait, &c.placement, &why);
  if (victims.empty() && c.may_wait && !c.one_leaf) {
    Placement across;
    std::vector<JobId> spread = scheduler_.FindVictims(job, work_, now_, false, &across, &why);
    if (!spread.empty() &&
        (!SpansLeaves(work_.topology(), across) ||
         !HoldForLeaf(c, across,
                      " by suspending " + Plural(static_cast<int>(spread.size()), "job") +
                          " of lower priority"))) {
      victims = std::move(spread);
      c.placement = std::move(across);
    }
  }
  Suspend(victims, job.id, why);
}

// An elastic gang that cannot start whole, even by suspending others, starts with the most whole
// groups that fit (down to min_nodes), spread as the policy places it (it does not wait for a
// leaf then): behind a blocked head only as a backfill would, ending before the head's
// reservation or off its nodes.
void Scheduler::Round::PlaceInPart(Candidate& c) {
  const JobRequest& job = c.job;
  if (!job.Elastic() || c.one_leaf) return;
  if (head_ != nullptr && !(options_.backfill && reservation_ >= 0)) return;
  const bool ends_in_time =
      head_ == nullptr || (job.expected_runtime > 0 && now_ + job.expected_runtime <= reservation_);
  // Sizes min_nodes + i * node_step for i in 0..most; where one fits, every smaller one does:
  // bisect (a job of a thousand groups costs a round a dozen placements, not a thousand).
  JobRequest part = job;
  auto fit = [&](int i) {
    part.nodes = job.min_nodes + i * job.node_step;
    std::string ignored;
    return PlaceAs(part, /*within_leaf=*/false, &ignored, !ends_in_time);
  };
  int lo = 0, hi = (std::min(c.most_nodes, job.nodes - 1) - job.min_nodes) / job.node_step;
  c.placement = fit(lo);
  while (!c.placement.empty() && lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (Placement more = fit(mid); !more.empty()) {
      c.placement = std::move(more);
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
}

// It waits. The first job that waits becomes the head and holds a reservation: when and where it
// is expected to start as running jobs reach their expected run times.
void Scheduler::Round::Block(Candidate& c) {
  const JobRequest& job = c.job;
  const bool is_head = head_ == nullptr;
  if (is_head) {
    head_ = &job;
    Placement where;
    if (!options_.backfill) {
      reservation_ = -1;
    } else if (c.leaf_expected >= 0) {
      reservation_ = c.leaf_expected;
      where = std::move(c.leaf_where);
    } else {
      reservation_ = scheduler_.EarliestStart(job, work_, now_, c.one_leaf, &where);
      if (c.may_wait && !c.one_leaf && reservation_ >= 0 && SpansLeaves(work_.topology(), where)) {
        // Short of nodes anywhere, it would start across leaves when they free. Where a leaf
        // frees for it later by less than spreading then would cost, it holds that leaf's nodes
        // instead (backfill keeps off them, so the leaf frees when expected), as it would wait
        // for the leaf once it could start across leaves.
        Placement in_leaf;
        const Seconds leaf_at =
            scheduler_.EarliestStart(job, work_, now_, /*one_leaf=*/true, &in_leaf);
        const LocalityBudget budget =
            leaf_at < 0 ? LocalityBudget{}
                        : policy_.LocalityWait(job, work_, where, now_,
                                               QueuedForGpus(c.index, job.TotalGpus()));
        const Seconds allowed = budget.wait;
        if (leaf_at >= 0 && leaf_at - reservation_ <= allowed) {
          c.why +=
              "; it holds nodes under one leaf switch, expected to free " +
              FormatDuration(leaf_at - reservation_) + " after any nodes would, " +
              (budget.from_share
                   ? "more than spreading would cost (about " + FormatDuration(budget.spread_cost) +
                         ")" + ShareClause(job, allowed, now_)
                   : "less than spreading would cost (about " + FormatDuration(allowed) + ")");
          reservation_ = leaf_at;
          where = std::move(in_leaf);
        }
      }
    }
    reserved_ = std::move(where.nodes);
  }
  if (c.until >= 0)
    c.why += " (after " + FormatDuration(c.until - now_) + " more it takes any leaves)";
  if (is_head && reservation_ >= 0) {
    c.why += "; expected to start in " + FormatDuration(reservation_ - now_) +
             ", when running jobs reach their expected run times (nothing that would delay it "
             "starts meanwhile)";
  } else if (is_head && options_.backfill) {
    int unknown = 0;
    for (const RunningJob& r : work_.running())
      unknown += r.request.expected_runtime <= 0;
    c.why += unknown > 0 ? "; no start time can be estimated: " + Plural(unknown, "running job") +
                               (unknown == 1 ? " gives" : " give") + " no expected run time"
                         : "; it would not fit even with every running job ended (drained "
                           "nodes, or a rule it cannot meet)";
  }
  Wait(job, std::move(c.why));
}

void Scheduler::Round::Start(const JobRequest& job, Placement placement) {
  (void)work_.Allocate(job, placement, now_);
  free_gpus_ -= static_cast<long>(placement.nodes.size()) * placement.gpus_per_node;
  failed_.clear();
  held_[job.user] += job.Gang() ? static_cast<int>(placement.nodes.size()) : 1;
  decision_.starts.push_back({job.id, std::move(placement)});
}

// A running job's missing groups of one kind (lost ones, or those its run began without), each
// as a gang of node_step nodes at the job's priority.
void Scheduler::Round::StartGroups(const JobRequest& job, bool lost) {
  const ReplacementPolicy& policy = options_.replacements;
  const int most =
      job.max_replacements > 0 ? job.max_replacements : policy.per_replica * job.Replicas();
  int placed = job.replacements_placed;
  for (const MissingGroup& group : job.missing_groups) {
    if (group.lost != lost) continue;
    const std::string replica = "replica " + std::to_string(group.replica);
    const std::string waits =
        replica + (lost ? " is not replaced: " : " waits to start (the run started without it): ");
    std::string& reason = decision_.groups_waiting[job.id][group.replica];
    if (lost && placed >= most) {
      reason = waits + "the run has placed " + Plural(placed, "replacement") +
               ", its most (max_restarts per replica)";
      continue;
    }
    if (lost) {
      // Replacements that failed at once, and the wait they earn.
      int quick = 0;
      for (const auto& [start, end] : group.ended_replacements)
        quick += end - start < policy.quick_failure;
      Seconds backoff = policy.first_backoff;
      for (int i = 1; i < quick && backoff < policy.max_backoff; ++i)
        backoff = std::min(policy.max_backoff, backoff * 2);
      if (quick > 0 && now_ - group.last_end < backoff) {
        reason = replica + " is not replaced yet: " + std::to_string(quick) +
                 " of its replacements failed within " + FormatDuration(policy.quick_failure) +
                 " of starting; the next in " + std::to_string(backoff) + " s";
        continue;
      }
    }
    if (!StartGroup(job, group, waits)) continue;
    decision_.groups_waiting[job.id].erase(group.replica);
    placed += lost;
  }
  if (auto w = decision_.groups_waiting.find(job.id);
      w != decision_.groups_waiting.end() && w->second.empty()) {
    decision_.groups_waiting.erase(w);
  }
}

// One group, under its user's quota, behind the head as a backfill; a replacement suspends jobs
// of lower priority where nothing ahead is blocked. False (with its reason) when it does not
// start.
bool Scheduler::Round::StartGroup(const JobRequest& job, const MissingGroup& group,
                                  const std::string& waits) {
  std::string& reason = decision_.groups_waiting[job.id][group.replica];
  if (auto f = decision_.suspended_for.find(job.id); f != decision_.suspended_for.end()) {
    reason = waits + "the job is suspended for job " + std::to_string(f->second);
    return false;
  }
  if (auto q = options_.node_quota.find(job.user); q != options_.node_quota.end()) {
    if (held_[job.user] + job.node_step > q->second) {
      reason = waits + "user " + job.user + " may hold " + Plural(q->second, "node") +
               " and holds " + std::to_string(held_[job.user]) + "; a group needs " +
               std::to_string(job.node_step) + " more";
      return false;
    }
  }
  const RunningJob* running = work_.find(job.id);
  const Seconds ends = running != nullptr && running->request.expected_runtime > 0
                           ? running->start_time + running->request.expected_runtime
                           : -1;
  const bool ends_in_time = head_ == nullptr || (options_.backfill && reservation_ >= 0 &&
                                                 ends >= 0 && ends <= reservation_);
  if (head_ != nullptr && !(options_.backfill && reservation_ >= 0)) {
    reason = waits + Head() + " is ahead and nothing may start ahead of it" +
             (options_.backfill ? " (no running job has an expected end)" : " (backfill is off)");
    return false;
  }
  JobRequest part = job;
  part.nodes = job.node_step;
  part.min_nodes = 0;
  part.missing_groups.clear();
  // The groups of an allreduce job average their gradients every step: one that may not span
  // zones has its new group where its other groups are.
  const int zone = running != nullptr && job.comm == CommKind::kAllreduce && !job.may_span_zones
                       ? work_.topology().nodes()[running->placement.nodes.front()].zone
                       : -1;
  std::string why;
  // The nodes it avoids count as drained while it is placed.
  std::vector<int> avoided;
  for (int n : job.avoid_nodes) {
    if (n >= 0 && n < static_cast<int>(work_.topology().nodes().size()) && !work_.drained(n)) {
      work_.SetDrained(n, true);
      avoided.push_back(n);
    }
  }
  Placement placement = PlaceAs(part, /*within_leaf=*/false, &why, !ends_in_time, zone);
  // A replacement may suspend jobs of lower priority (none of them started this round: it comes
  // in its job's place in the order); a group the run began without does not.
  if (placement.empty() && group.lost && head_ == nullptr && options_.preemption &&
      searches_ < options_.max_preemption_searches) {
    ++searches_;
    ClusterState where = work_;  // (in its zone: the other zones' nodes count as drained)
    for (int n = 0; zone >= 0 && n < static_cast<int>(where.topology().nodes().size()); ++n) {
      if (where.topology().nodes()[n].zone != zone) where.SetDrained(n, true);
    }
    std::map<JobId, std::string> costs;
    std::vector<JobId> victims =
        scheduler_.FindVictims(part, where, now_, false, &placement, &costs);
    Suspend(victims, job.id, costs);
  }
  for (int n : avoided)
    work_.SetDrained(n, false);
  if (placement.empty()) {
    reason = waits + "it " + why;
    if (!avoided.empty())
      reason += " (off the " + Plural(static_cast<int>(avoided.size()), "node") +
                " its groups straggled on)";
    if (zone >= 0) {
      reason += " in zone " + work_.topology().zones()[zone].name + " (where its other groups run)";
    }
    if (!ends_in_time) {
      reason += " off the nodes reserved for " + Head() +
                ", which is ahead and expected to start in " + FormatDuration(reservation_ - now_);
    }
    return false;
  }
  if (running != nullptr) {
    (void)work_.Grow(job.id, placement.nodes);
  } else {
    (void)work_.Allocate(job, placement, now_);
  }
  free_gpus_ -= static_cast<long>(placement.nodes.size()) * placement.gpus_per_node;
  failed_.clear();
  held_[job.user] += job.node_step;
  decision_.group_starts.push_back({job.id, group.replica, group.lost, std::move(placement)});
  return true;
}

void Scheduler::Round::Suspend(const std::vector<JobId>& victims, JobId for_job,
                               const std::map<JobId, std::string>& why) {
  for (JobId v : victims) {
    decision_.suspended_for[v] = for_job;
    if (auto w = why.find(v); w != why.end()) decision_.suspend_reasons[v] = w->second;
    const RunningJob& victim = *work_.find(v);
    held_[victim.request.user] -= NodesHeld(victim);
    free_gpus_ += static_cast<long>(victim.placement.nodes.size()) * victim.placement.gpus_per_node;
    (void)work_.Release(v);
    decision_.suspends.push_back(v);
  }
  if (!victims.empty()) failed_.clear();
}

void Scheduler::Round::Wait(const JobRequest& job, std::string reason) {
  int ahead = 0;
  for (const auto& [priority, count] : waiting_by_priority_) {
    if (priority > job.priority) ahead += count;
  }
  if (job.preempted_by != 0) {
    reason = "preempted " + FormatDuration(std::max<Seconds>(0, now_ - job.preempted_at)) +
             " ago for job " + std::to_string(job.preempted_by) + " (priority " +
             std::to_string(job.preempted_by_priority) + "), it waits to resume: " + reason;
  }
  if (ahead > 0) {
    reason += "; " + Plural(ahead, "job") + " with higher priority " + (ahead == 1 ? "is" : "are") +
              " ahead";
  }
  decision_.pending[job.id] = std::move(reason);
  ++waiting_by_priority_[job.priority];
}

// The policy's placement of `request` on the nodes left (with `within_leaf`, under one leaf;
// with `off_reserved`, off the head's reserved nodes; with a `zone`, in that zone), remembering
// failures by shape.
Placement Scheduler::Round::PlaceAs(const JobRequest& request, bool within_leaf,
                                    std::string* reason, bool off_reserved, int zone) {
  const Shape shape{request.nodes,
                    request.Gang() ? request.gpus_per_node : request.gpus,
                    static_cast<int>(request.comm),
                    request.may_span_zones,
                    within_leaf,
                    off_reserved,
                    zone};
  if (auto known = failed_.find(shape); known != failed_.end()) {
    *reason = known->second;
    return Placement{};
  }
  // Nodes it may not take count as drained while the policy chooses: the reserved ones, those
  // of other zones.
  std::vector<int> hidden;
  auto hide = [&](int n) {
    if (work_.drained(n)) return;
    work_.SetDrained(n, true);
    hidden.push_back(n);
  };
  if (off_reserved) {
    for (int n : reserved_)
      hide(n);
  }
  if (zone >= 0) {
    for (int n = 0; n < static_cast<int>(work_.topology().nodes().size()); ++n) {
      if (work_.topology().nodes()[n].zone != zone) hide(n);
    }
  }
  Placement p = scheduler_.PlaceJob(request, work_, within_leaf, reason);
  for (int n : hidden)
    work_.SetDrained(n, false);
  if (p.empty()) failed_[shape] = *reason;
  return p;
}

int Scheduler::Round::QueuedForGpus(std::size_t index, int taking) const {
  const long beyond = demand_[index + 1] + free_gpus_ - taking;  // behind it, what still fits
  const auto first_left = std::upper_bound(demand_.begin() + static_cast<std::ptrdiff_t>(index) + 2,
                                           demand_.end(), beyond);
  return static_cast<int>(decision_.pending.size()) +
         static_cast<int>(std::distance(first_left, demand_.end()));
}

bool Scheduler::Round::TouchesReserved(const Placement& p) const {
  return std::any_of(p.nodes.begin(), p.nodes.end(), [&](int n) {
    return std::find(reserved_.begin(), reserved_.end(), n) != reserved_.end();
  });
}

std::string Scheduler::Round::Head() const {
  return "job " + std::to_string(head_->id) + " (priority " + std::to_string(head_->priority) +
         ", " + Plural(NodesHeld(*head_), "node") + ")";
}

Decision Scheduler::Decide(const ClusterState& state, const std::vector<JobRequest>& queue,
                           Seconds now) const {
  return Round(*this, state, queue, now).Run();
}

}  // namespace ff::scheduler
