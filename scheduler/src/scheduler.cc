#include "scheduler/scheduler.h"

#include <algorithm>
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
                                          Seconds now, bool one_leaf, Placement* placement) const {
  std::vector<const RunningJob*> candidates;
  for (const RunningJob& r : state.running()) {
    if (r.request.priority < job.priority && now - r.start_time >= r.request.min_runtime) {
      candidates.push_back(&r);
    }
  }
  if (candidates.empty()) return {};
  // Least lost work first; then the lowest priority; then the smallest; then id.
  std::sort(candidates.begin(), candidates.end(), [&](const RunningJob* a, const RunningJob* b) {
    Seconds la = now - a->last_checkpoint, lb = now - b->last_checkpoint;
    if (la != lb) return la < lb;
    if (a->request.priority != b->request.priority)
      return a->request.priority < b->request.priority;
    if (a->request.TotalGpus() != b->request.TotalGpus()) {
      return a->request.TotalGpus() < b->request.TotalGpus();
    }
    return a->request.id < b->request.id;
  });
  // Suspending more never hurts, so binary-search the shortest prefix of candidates that makes
  // room (if all of them do not, no subset does).
  std::string why;
  auto without_first = [&](std::size_t k) {
    ClusterState trial = state;
    std::vector<JobId> ids;
    for (std::size_t i = 0; i < k; ++i)
      ids.push_back(candidates[i]->request.id);
    (void)trial.ReleaseAll(std::move(ids));
    return trial;
  };
  auto fits = [&](const ClusterState& trial) {
    return !PlaceJob(job, trial, one_leaf, &why).empty();
  };
  if (!fits(without_first(candidates.size()))) return {};
  std::size_t lo = 1, hi = candidates.size();
  while (lo < hi) {
    std::size_t mid = (lo + hi) / 2;
    if (fits(without_first(mid))) {
      hi = mid;
    } else {
      lo = mid + 1;
    }
  }
  ClusterState trial = without_first(lo);
  std::vector<const RunningJob*> victims(candidates.begin(),
                                         candidates.begin() + static_cast<std::ptrdiff_t>(lo));
  // Give back every victim the job can do without, latest first (the last one is needed).
  for (std::size_t i = victims.size() - 1; i-- > 0;) {
    const RunningJob& v = *victims[i];
    if (!trial.Allocate(v.request, v.placement, v.start_time).ok()) continue;
    if (fits(trial)) {
      victims.erase(victims.begin() + static_cast<std::ptrdiff_t>(i));
    } else {
      (void)trial.Release(v.request.id);  // needed after all
    }
  }
  *placement = PlaceJob(job, trial, one_leaf, &why);
  std::vector<JobId> ids;
  for (const RunningJob* v : victims)
    ids.push_back(v->request.id);
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

Decision Scheduler::Decide(const ClusterState& state, const std::vector<JobRequest>& queue,
                           Seconds now) const {
  Decision decision;
  ClusterState work = state;
  std::vector<const JobRequest*> order;
  for (const JobRequest& j : queue)
    order.push_back(&j);
  std::sort(order.begin(), order.end(),
            [](const JobRequest* a, const JobRequest* b) { return ComesBefore(*a, *b); });

  std::map<std::string, int> held;
  for (const RunningJob& r : work.running())
    held[r.request.user] += NodesHeld(r);

  // Many queued jobs ask for the same shape. While nothing starts, a shape that did not fit
  // still does not, for the same reason: remember failures until the cluster state changes.
  // nodes, GPUs per node or GPUs, comm, spans zones, must stay under one leaf, must keep off the
  // head's reserved nodes
  using Shape = std::tuple<int, int, int, bool, bool, bool>;
  std::map<Shape, std::string> failed;
  auto shape_of = [](const JobRequest& j, bool one_leaf, bool off_reserved) {
    return Shape{j.nodes,
                 j.Gang() ? j.gpus_per_node : j.gpus,
                 static_cast<int>(j.comm),
                 j.may_span_zones,
                 one_leaf,
                 off_reserved};
  };

  const JobRequest* head = nullptr;  // the first job that could not start
  Seconds reservation = -1;
  // The nodes the head is expected to start on at `reservation`: a job behind it that would
  // still run then may start now on other nodes (EASY backfill's "extra nodes"), never on these.
  std::vector<int> reserved;
  auto touches_reserved = [&](const Placement& p) {
    for (int n : p.nodes) {
      if (std::find(reserved.begin(), reserved.end(), n) != reserved.end()) return true;
    }
    return false;
  };
  std::map<int, int> waiting_by_priority;
  int searches = 0;

  // Jobs that wait for GPUs if `taking` more GPUs go to the job at order[i]: those left waiting
  // ahead of it this round, and those behind it beyond what would still be free (demand[k]: the
  // GPUs the first k jobs in order ask for).
  long free_gpus = 0;
  for (std::size_t n = 0; n < work.topology().nodes().size(); ++n) {
    if (!work.drained(static_cast<int>(n))) free_gpus += work.free_gpus(static_cast<int>(n));
  }
  std::vector<long> demand(order.size() + 1, 0);
  for (std::size_t k = 0; k < order.size(); ++k)
    demand[k + 1] = demand[k] + order[k]->TotalGpus();
  auto queued_for_gpus = [&](std::size_t i, int taking) {
    const long beyond = demand[i + 1] + free_gpus - taking;  // behind it, what still fits
    const auto first_left =
        std::upper_bound(demand.begin() + static_cast<std::ptrdiff_t>(i) + 2, demand.end(), beyond);
    return static_cast<int>(decision.pending.size()) +
           static_cast<int>(std::distance(first_left, demand.end()));
  };

  for (std::size_t index = 0; index < order.size(); ++index) {
    const JobRequest* job = order[index];
    int ahead = 0;
    for (const auto& [priority, count] : waiting_by_priority) {
      if (priority > job->priority) ahead += count;
    }
    auto wait = [&](std::string reason) {
      if (job->preempted_by != 0) {
        reason = "preempted " + FormatDuration(std::max<Seconds>(0, now - job->preempted_at)) +
                 " ago for job " + std::to_string(job->preempted_by) + " (priority " +
                 std::to_string(job->preempted_by_priority) + "), it waits to resume: " + reason;
      }
      if (ahead > 0)
        reason += "; " + Plural(ahead, "job") + " with higher priority " +
                  (ahead == 1 ? "is" : "are") + " ahead";
      decision.pending[job->id] = std::move(reason);
      ++waiting_by_priority[job->priority];
    };

    const int needs = NodesHeld(*job);
    int most_nodes = job->nodes;  // what its user's quota leaves it (an elastic gang may start
    std::string over_quota;       // with less)
    if (auto q = options_.node_quota.find(job->user); q != options_.node_quota.end()) {
      int has = held[job->user];
      if (has + needs > q->second) {
        over_quota = "user " + job->user + " may hold " + Plural(q->second, "node") +
                     " and holds " + std::to_string(has) + "; this job needs " +
                     std::to_string(needs) + " more";
        if (!job->Elastic() || has + job->min_nodes > q->second) {
          wait(over_quota);
          continue;
        }
        most_nodes = q->second - has;
      }
    }
    const bool whole = most_nodes >= job->nodes;  // it may start whole

    // The locality wait (placement.h): a job that fits under one leaf is tried there first; one
    // that could start now only across leaves waits for a leaf while that is the cheaper choice
    // (the policy's LocalityWait, from what spreading would cost) and a leaf is expected to free
    // in time. The wait begins in the first round the job could start across leaves, and ends
    // unused in a round where it could not start anywhere: waiting behind other jobs for capacity
    // does not use it up, so a job is never spread the moment nodes free after hours short of
    // them.
    const Seconds cap = policy_->MaxLocalityWait(*job);
    const bool may_wait = whole && cap > 0 && job->nodes <= work.topology().max_leaf_nodes();
    Seconds since = job->locality_wait_since;
    auto place_as = [&](const JobRequest& request, bool within_leaf, std::string* reason,
                        bool off_reserved) {
      const Shape shape = shape_of(request, within_leaf, off_reserved);
      if (auto known = failed.find(shape); known != failed.end()) {
        *reason = known->second;
        return Placement{};
      }
      // Off the reservation: the reserved nodes count as drained while the policy chooses.
      std::vector<int> hidden;
      if (off_reserved) {
        for (int n : reserved) {
          if (work.drained(n)) continue;
          work.SetDrained(n, true);
          hidden.push_back(n);
        }
      }
      Placement p = PlaceJob(request, work, within_leaf, reason);
      for (int n : hidden)
        work.SetDrained(n, false);
      if (p.empty()) failed[shape] = *reason;
      return p;
    };
    auto place = [&](bool within_leaf, std::string* reason, bool off_reserved = false) {
      return place_as(*job, within_leaf, reason, off_reserved);
    };
    std::string why = over_quota;
    Placement placement = whole ? place(may_wait, &why) : Placement{};
    bool within_leaf = may_wait;  // how `placement` was chosen
    bool one_leaf = false;        // held for one leaf this round
    Seconds until = -1;           // when the wait runs out
    Seconds leaf_expected = -1;   // when a leaf is expected to free for it
    Placement leaf_where;         // and where
    // Whether `job`, which could start now on `across` (spread over leaves; `how`: "" or by
    // suspending which jobs), holds out for one leaf this round instead.
    auto hold_for_leaf = [&](const Placement& across, const std::string& how) {
      const int queued = queued_for_gpus(index, job->TotalGpus());
      const LocalityBudget budget = policy_->LocalityWait(*job, work, across, now, queued);
      const Seconds allowed = budget.wait;
      const Seconds waited = since >= 0 ? now - since : 0;
      bool hold = waited < allowed;
      if (hold) {
        leaf_expected = EarliestStart(*job, work, now, /*one_leaf=*/true, &leaf_where);
        hold = leaf_expected < 0 || leaf_expected - now <= allowed - waited;
      }
      if (!hold) return false;
      one_leaf = true;
      if (since < 0) {
        since = now;
        decision.locality_wait_started[job->id] = now;
      }
      until = since + allowed;
      decision.recheck_at = decision.recheck_at < 0 ? until : std::min(decision.recheck_at, until);
      const std::string spread = "; spread over leaves now" + how;
      const std::string cost = FormatDuration(budget.from_share ? budget.spread_cost : allowed);
      why += queued == 0 ? spread + ", it and the jobs sharing those uplinks would lose about " +
                               cost + " of run time to congestion"
                         : spread +
                               ", the run time it and the jobs sharing those uplinks would lose "
                               "to congestion, and the GPU time " +
                               Plural(queued, "job") +
                               " queued for GPUs would wait for, come to about " + cost;
      if (budget.from_share) why += ShareClause(*job, allowed, now);
      if (leaf_expected >= 0)
        why += ", and a leaf is expected to free in " + FormatDuration(leaf_expected - now);
      return true;
    };
    bool short_everywhere = false;  // it could not start on free nodes even across leaves
    if (placement.empty() && may_wait) {
      std::string across_why;
      Placement across = place(false, &across_why);
      if (across.empty()) {
        // Short of nodes wherever they are: that is what it waits for first (unless suspending
        // others would start it, below).
        short_everywhere = true;
        why = across_why + "; then, if its traffic would crowd the uplinks, it may wait up to " +
              FormatDuration(cap) + " for them under one leaf switch";
      } else if (!hold_for_leaf(across, "")) {
        placement = std::move(across);  // waiting would cost more than spreading
        within_leaf = false;
      }
    }
    if (!placement.empty() && head != nullptr) {
      // Backfill: start ahead of the blocked head only if done before its reservation, or on
      // nodes its reservation does not need.
      bool ends_in_time = options_.backfill && job->expected_runtime > 0 && reservation >= 0 &&
                          now + job->expected_runtime <= reservation;
      bool off_reserved = false;  // it leaves the head's nodes alone, however long it runs
      if (!ends_in_time && options_.backfill && reservation >= 0) {
        off_reserved = !touches_reserved(placement);
        if (!off_reserved) {
          std::string ignored;
          Placement elsewhere = place(within_leaf, &ignored, /*off_reserved=*/true);
          if (!elsewhere.empty()) {
            placement = std::move(elsewhere);
            off_reserved = true;
          }
        }
      }
      if (!ends_in_time && !off_reserved) {
        std::string reason = "it fits now, but job " + std::to_string(head->id) + " (priority " +
                             std::to_string(head->priority) + ", " +
                             Plural(NodesHeld(*head), "node") + ") is ahead and ";
        if (reservation < 0) {
          reason += "no running job has an expected end, so nothing can start ahead of it";
        } else if (!options_.backfill) {
          reason +=
              "holds a reservation in " + FormatDuration(reservation - now) + " (backfill is off)";
        } else if (job->expected_runtime <= 0) {
          reason += "holds a reservation in " + FormatDuration(reservation - now) +
                    " on the nodes this job fits on; this job gives no expected run time, so it "
                    "cannot be backfilled there (one of at most " +
                    FormatDuration(reservation - now) + " would start now)";
        } else {
          reason += "holds a reservation in " + FormatDuration(reservation - now) +
                    " on the nodes this job fits on, before this job would end (expected run "
                    "time " +
                    FormatDuration(job->expected_runtime) + "); one of at most " +
                    FormatDuration(reservation - now) + " would start now";
        }
        wait(reason);
        continue;
      }
    }
    if (placement.empty() && whole && options_.preemption &&
        searches < options_.max_preemption_searches) {
      ++searches;
      // Suspending jobs is starting now too: a job that may wait for a leaf suspends jobs under
      // one leaf if that frees one, and across leaves only where the locality wait would spread
      // it on free nodes.
      std::vector<JobId> victims = FindVictims(*job, work, now, may_wait, &placement);
      if (victims.empty() && may_wait && !one_leaf) {
        Placement across;
        std::vector<JobId> spread = FindVictims(*job, work, now, /*one_leaf=*/false, &across);
        if (!spread.empty() &&
            (!SpansLeaves(work.topology(), across) ||
             !hold_for_leaf(across, " by suspending " +
                                        Plural(static_cast<int>(spread.size()), "job") +
                                        " of lower priority"))) {
          victims = std::move(spread);
          placement = std::move(across);
        }
      }
      for (JobId v : victims) {
        decision.suspended_for[v] = job->id;
        const RunningJob& victim = *work.find(v);
        held[victim.request.user] -= NodesHeld(victim);
        free_gpus +=
            static_cast<long>(victim.placement.nodes.size()) * victim.placement.gpus_per_node;
        (void)work.Release(v);
        decision.suspends.push_back(v);
      }
      if (!victims.empty()) failed.clear();
    }
    if (short_everywhere && !one_leaf && since >= 0) {
      // It could not start anywhere this round: the wait ends unused.
      since = -1;
      decision.locality_wait_started[job->id] = -1;
    }
    // An elastic gang that cannot start whole, even by suspending others, starts with the most
    // whole steps that fit (down to min_nodes), spread as the policy places it (it does not
    // wait for a leaf then): behind a blocked head only as a backfill would, ending before the
    // head's reservation or off its nodes.
    if (placement.empty() && job->Elastic() && !one_leaf &&
        (head == nullptr || (options_.backfill && reservation >= 0))) {
      const bool ends_in_time = head == nullptr || (job->expected_runtime > 0 &&
                                                    now + job->expected_runtime <= reservation);
      // Sizes min_nodes + i * node_step for i in 0..most; where one fits, every smaller one
      // does: bisect (a job of a thousand groups costs a round a dozen placements, not a
      // thousand).
      JobRequest part = *job;
      auto fit = [&](int i) {
        part.nodes = job->min_nodes + i * job->node_step;
        std::string ignored;
        return place_as(part, /*within_leaf=*/false, &ignored, !ends_in_time);
      };
      int lo = 0, hi = (std::min(most_nodes, job->nodes - 1) - job->min_nodes) / job->node_step;
      placement = fit(lo);
      while (!placement.empty() && lo < hi) {
        const int mid = (lo + hi + 1) / 2;
        if (Placement more = fit(mid); !more.empty()) {
          placement = std::move(more);
          lo = mid;
        } else {
          hi = mid - 1;
        }
      }
    }
    if (placement.empty() && !whole) {  // not even in part: its user's quota is what it waits for
      wait(over_quota);
      continue;
    }
    if (placement.empty()) {
      bool is_head = false;
      if (head == nullptr) {
        head = job;
        is_head = true;
        Placement where;
        if (!options_.backfill) {
          reservation = -1;
        } else if (leaf_expected >= 0) {
          reservation = leaf_expected;
          where = std::move(leaf_where);
        } else {
          reservation = EarliestStart(*job, work, now, one_leaf, &where);
          if (may_wait && !one_leaf && reservation >= 0 && SpansLeaves(work.topology(), where)) {
            // Short of nodes anywhere, it would start across leaves when they free. Where a leaf
            // frees for it later by less than spreading then would cost, it holds that leaf's
            // nodes instead (backfill keeps off them, so the leaf frees when expected), as it
            // would wait for the leaf once it could start across leaves.
            Placement in_leaf;
            const Seconds leaf_at = EarliestStart(*job, work, now, /*one_leaf=*/true, &in_leaf);
            const LocalityBudget budget =
                leaf_at < 0 ? LocalityBudget{}
                            : policy_->LocalityWait(*job, work, where, now,
                                                    queued_for_gpus(index, job->TotalGpus()));
            const Seconds allowed = budget.wait;
            if (leaf_at >= 0 && leaf_at - reservation <= allowed) {
              why += "; it holds nodes under one leaf switch, expected to free " +
                     FormatDuration(leaf_at - reservation) + " after any nodes would, " +
                     (budget.from_share ? "more than spreading would cost (about " +
                                              FormatDuration(budget.spread_cost) + ")" +
                                              ShareClause(*job, allowed, now)
                                        : "less than spreading would cost (about " +
                                              FormatDuration(allowed) + ")");
              reservation = leaf_at;
              where = std::move(in_leaf);
            }
          }
        }
        reserved = std::move(where.nodes);
      }
      if (until >= 0)
        why += " (after " + FormatDuration(until - now) + " more it takes any leaves)";
      if (is_head && reservation >= 0) {
        why += "; expected to start in " + FormatDuration(reservation - now) +
               ", when running jobs reach their expected run times (nothing that would delay it "
               "starts meanwhile)";
      } else if (is_head && options_.backfill) {
        int unknown = 0;
        for (const RunningJob& r : work.running())
          unknown += r.request.expected_runtime <= 0;
        why += unknown > 0 ? "; no start time can be estimated: " + Plural(unknown, "running job") +
                                 (unknown == 1 ? " gives" : " give") + " no expected run time"
                           : "; it would not fit even with every running job ended (drained "
                             "nodes, or a rule it cannot meet)";
      }
      wait(why);
      continue;
    }
    (void)work.Allocate(*job, placement, now);
    free_gpus -= static_cast<long>(placement.nodes.size()) * placement.gpus_per_node;
    failed.clear();
    held[job->user] += job->Gang() ? static_cast<int>(placement.nodes.size()) : 1;
    decision.starts.push_back({job->id, std::move(placement)});
  }
  decision.reserved = std::move(reserved);
  return decision;
}

}  // namespace ff::scheduler
