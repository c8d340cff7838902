#include "scheduler/simulator.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>

namespace ff::scheduler {
namespace {

struct JobRun {
  JobRequest request;
  double remaining = 0;   // seconds of work left at full speed
  double rate = 1;        // work seconds per wall second
  Seconds started = 0;    // of the current run's work (after it waited for its nodes to free)
  double idle_until = 0;  // it holds its nodes but waits for suspended jobs to leave them
  Seconds queued = 0;     // when it last joined the queue (submitted, or suspended)
  JobOutcome outcome;
  // A fault-tolerant job's replica groups in its current run: each one's nodes (empty while
  // missing), whether a missing one was lost (else the run began without it), since when it is
  // missing, and the replacements placed.
  std::vector<std::vector<int>> groups;
  std::vector<bool> lost;
  std::vector<double> missing_since;
  int replacements = 0;
  // Its checkpoints (CheckpointModel): seconds to write one, whether it reports them (and saves
  // when suspended), and whether the platform has seen one (it then knows checkpoint_s).
  double checkpoint_s = 0;
  double checkpoint_interval = 300;
  bool reports = false;
  bool reported = false;

  int LiveGroups() const {
    return static_cast<int>(std::count_if(groups.begin(), groups.end(),
                                          [](const std::vector<int>& g) { return !g.empty(); }));
  }
  bool MissesGroups() const { return LiveGroups() < static_cast<int>(groups.size()); }
  // The share of full speed its groups give it (1 for a gang).
  double GroupShare() const {
    return groups.empty() ? 1.0
                          : static_cast<double>(LiveGroups()) / static_cast<double>(groups.size());
  }
};

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  std::size_t i = static_cast<std::size_t>(p * static_cast<double>(v.size() - 1) + 0.5);
  return v[std::min(i, v.size() - 1)];
}

double Mean(const std::vector<double>& v) {
  if (v.empty()) return 0;
  double sum = 0;
  for (double x : v)
    sum += x;
  return sum / static_cast<double>(v.size());
}

// A number in [0, 1) from a seed and a job id (splitmix64): the job's own draws.
double Draw(uint64_t seed, JobId id, uint64_t salt) {
  uint64_t z = seed * 0x9E3779B97F4A7C15ULL + static_cast<uint64_t>(id) * 0xBF58476D1CE4E5B9ULL +
               salt * 0x94D049BB133111EBULL;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  z ^= z >> 31;
  return static_cast<double>(z >> 11) / 9007199254740992.0;  // 2^53
}

// Whether `job` fits an empty cluster at all (else it would wait forever).
bool EverFits(const Topology& topology, const JobRequest& job, const PlacementPolicy& policy) {
  ClusterState empty(topology);
  std::string why;
  return !policy.Place(job, empty, &why).empty();
}

}  // namespace

Result<SimulationResult> Simulate(const Topology& topology, const std::vector<JobRequest>& jobs,
                                  const std::string& policy, const SimulationOptions& options) {
  PolicyOptions policy_options = options.policy;
  policy_options.model = options.model;  // the policy judges by what the replay does
  auto placement = MakePlacementPolicy(policy, policy_options);
  if (!placement) return InvalidArgument("unknown placement policy '" + policy + "'");
  for (const JobRequest& j : jobs) {
    if (!EverFits(topology, j, *placement)) {
      return InvalidArgument("job " + std::to_string(j.id) + " (" + std::to_string(j.TotalGpus()) +
                             " GPUs) can never fit cluster '" + topology.name() + "'");
    }
  }
  Scheduler scheduler(MakePlacementPolicy(policy, policy_options), options.scheduler);
  const PerformanceModel& model = options.model;

  std::vector<JobRun> runs(jobs.size());
  std::vector<std::size_t> arrival_order(jobs.size());
  for (std::size_t i = 0; i < jobs.size(); ++i) {
    runs[i].request = jobs[i];
    runs[i].remaining = static_cast<double>(std::max<Seconds>(1, jobs[i].expected_runtime));
    runs[i].outcome.id = jobs[i].id;
    runs[i].outcome.gpus = jobs[i].TotalGpus();
    runs[i].outcome.submit = jobs[i].submit_time;
    runs[i].queued = jobs[i].submit_time;
    const CheckpointModel& m = options.checkpoints;
    const double factor =
        m.spread > 1 ? std::pow(m.spread, 2 * Draw(m.seed, jobs[i].id, 1) - 1) : 1.0;
    runs[i].checkpoint_s = m.gbps_per_gpu > 0 ? m.gb_per_gpu * factor / m.gbps_per_gpu : 0;
    runs[i].reports = Draw(m.seed, jobs[i].id, 2) < m.reporting_share;
    runs[i].checkpoint_interval =
        static_cast<double>(options.checkpoint_interval) *
        (m.interval_spread > 1 ? std::pow(m.interval_spread, 2 * Draw(m.seed, jobs[i].id, 3) - 1)
                               : 1.0);
    runs[i].request.checkpoint_s = 0;  // the platform knows nothing until it reports one
    arrival_order[i] = i;
  }
  std::stable_sort(arrival_order.begin(), arrival_order.end(), [&](std::size_t a, std::size_t b) {
    return jobs[a].submit_time < jobs[b].submit_time;
  });
  std::map<JobId, std::size_t> index_of;
  for (std::size_t i = 0; i < jobs.size(); ++i)
    index_of[jobs[i].id] = i;
  std::vector<std::string> last_reason(options.record_reasons ? jobs.size() : 0);
  std::vector<bool> reason_seen(options.record_reasons ? jobs.size() : 0, false);

  ClusterState state(topology);
  std::vector<std::size_t> queue;    // indices into runs
  std::vector<std::size_t> running;  // indices into runs
  SimulationResult result;
  result.policy = policy;
  if (jobs.empty()) return result;

  double now = static_cast<double>(jobs[arrival_order[0]].submit_time);
  const double first_submit = now;
  std::size_t next_arrival = 0, finished = 0;
  double busy_gpu_seconds = 0, fragmentation_seconds = 0, cross_leaf_gbit = 0, cross_zone_gbit = 0;
  double arrival_busy_gpu_seconds = 0;
  const double last_submit = static_cast<double>(jobs[arrival_order.back()].submit_time);
  double next_sample = now;
  double recheck = std::numeric_limits<double>::infinity();  // a round the scheduler asked for
  std::size_t progress_step = std::max<std::size_t>(1, jobs.size() / 100);

  auto busy_gpus = [&] {
    int busy = 0;
    for (std::size_t i : running) {
      const RunningJob* r = state.find(runs[i].request.id);
      busy += static_cast<int>(r->placement.nodes.size()) * r->placement.gpus_per_node;
    }
    return busy;
  };
  auto fragmentation = [&] {
    int free_nodes = 0, stranded = 0;
    for (std::size_t l = 0; l < topology.leaves().size(); ++l) {
      int f = state.leaf_free_nodes(static_cast<int>(l));
      free_nodes += f;
      if (f < topology.leaves()[l].num_nodes) stranded += f;
    }
    return free_nodes == 0 ? 0.0 : static_cast<double>(stranded) / free_nodes;
  };
  auto update_rates = [&] {
    for (std::size_t i : running)
      runs[i].rate = ProgressRate(state, runs[i].request, model) * runs[i].GroupShare();
  };
  // Lost groups stop being missing (replaced, or their run ends): the hours they were.
  auto settle_lost = [&](JobRun& r, std::size_t g) {
    if (r.groups[g].empty() && r.lost[g])
      result.lost_group_hours += (now - r.missing_since[g]) / 3600;
  };
  // A running job leaves its nodes and waits in the queue again, losing the work since its last
  // checkpoint; returns that work in GPU-seconds.
  // `saved`: it saved just now (a suspended job, within its deadline): nothing is lost.
  auto requeue = [&](std::size_t i, Seconds now_s, bool saved = false) {
    JobRun& r = runs[i];
    const double ran = std::max(0.0, now - static_cast<double>(r.started));
    const double lost = saved ? 0.0 : std::fmod(ran, r.checkpoint_interval) * r.rate;
    r.remaining += lost;
    (void)state.Release(r.request.id);
    for (std::size_t g = 0; g < r.groups.size(); ++g)
      settle_lost(r, g);
    r.groups.clear();
    r.queued = now_s;  // it waits again
    running.erase(std::find(running.begin(), running.end(), i));
    queue.push_back(i);
    return lost * r.request.TotalGpus();
  };

  // Nodes that suspended jobs are still leaving (saving their checkpoints), until when.
  std::vector<double> leaving_until(topology.nodes().size(), 0);
  // Failures: when each node fails next, and when a failed one is back (infinity: not pending).
  const double never = std::numeric_limits<double>::infinity();
  const std::size_t node_count = topology.nodes().size();
  std::vector<double> fails_at(node_count, never), back_at(node_count, never);
  std::mt19937_64 failure_rng(options.failure_seed);
  std::exponential_distribution<double> lifetime(
      options.node_mtbf > 0 ? 1.0 / static_cast<double>(options.node_mtbf) : 1.0);
  if (options.node_mtbf > 0) {
    for (double& t : fails_at)
      t = now + lifetime(failure_rng);
  }
  // Node `n` fails: the jobs on it lose it (a fault-tolerant job the group there), and it is out
  // until repaired.
  auto fail_node = [&](int n, Seconds now_s) {
    ++result.node_failures;
    for (std::size_t k = 0; k < running.size();) {
      const std::size_t i = running[k];
      JobRun& r = runs[i];
      const std::vector<int>& nodes = state.find(r.request.id)->placement.nodes;
      if (std::find(nodes.begin(), nodes.end(), n) == nodes.end()) {
        ++k;
        continue;
      }
      if (!r.groups.empty()) {
        for (std::size_t g = 0; g < r.groups.size(); ++g) {
          if (std::find(r.groups[g].begin(), r.groups[g].end(), n) == r.groups[g].end()) continue;
          (void)state.Shrink(r.request.id, r.groups[g]);
          r.groups[g].clear();
          r.lost[g] = true;
          r.missing_since[g] = now;
        }
        if (r.LiveGroups() * r.request.node_step >= r.request.min_nodes) {
          ++k;  // it runs on
          continue;
        }
      }
      ++result.failure_requeues;
      result.failure_lost_gpu_hours += requeue(i, now_s) / 3600;  // (running[k] is another now)
    }
    state.SetDrained(n, true);
    fails_at[static_cast<std::size_t>(n)] = never;
    back_at[static_cast<std::size_t>(n)] = now + static_cast<double>(options.node_repair);
  };

  while (finished < jobs.size()) {
    // The next event: an arrival or the first job to finish at current rates.
    double t_next = std::numeric_limits<double>::infinity();
    if (next_arrival < arrival_order.size()) {
      t_next = static_cast<double>(jobs[arrival_order[next_arrival]].submit_time);
    }
    for (std::size_t i : running) {
      t_next =
          std::min(t_next, std::max(now, runs[i].idle_until) + runs[i].remaining / runs[i].rate);
    }
    if (!queue.empty() && recheck > now) t_next = std::min(t_next, recheck);
    if (options.node_mtbf > 0) {
      for (std::size_t n = 0; n < node_count; ++n)
        t_next = std::min({t_next, fails_at[n], back_at[n]});
    }
    if (!std::isfinite(t_next)) {
      return Internal("simulation stalled with " + std::to_string(queue.size()) +
                      " jobs queued and nothing running");
    }
    // Advance.
    const double dt = std::max(0.0, t_next - now);
    busy_gpu_seconds += dt * busy_gpus();
    // Utilisation counts the span where jobs arrive.
    arrival_busy_gpu_seconds +=
        std::max(0.0, std::min(t_next, last_submit) - now) * static_cast<double>(busy_gpus());
    fragmentation_seconds += dt * fragmentation();
    double leaf_gbps = 0, zone_gbps = 0;  // sent across leaf uplinks and zones, until t_next
    for (std::size_t i : running) {
      JobRun& r = runs[i];
      r.remaining -= std::max(0.0, t_next - std::max(now, r.idle_until)) * r.rate;
      const TrafficLoad& load = state.load(r.request.id);
      leaf_gbps += r.rate * load.cross_leaf_gbps;
      zone_gbps += r.rate * load.cross_zone_gbps;
    }
    cross_leaf_gbit += dt * leaf_gbps;
    cross_zone_gbit += dt * zone_gbps;
    while (next_sample <= t_next) {
      result.utilisation_series.emplace_back(
          static_cast<Seconds>(next_sample),
          static_cast<double>(busy_gpus()) / topology.total_gpus());
      result.traffic_series.push_back({static_cast<Seconds>(next_sample), leaf_gbps, zone_gbps});
      next_sample += static_cast<double>(options.sample_interval);
    }
    now = t_next;
    const auto now_s = static_cast<Seconds>(std::llround(now));

    // Completions.
    for (std::size_t k = 0; k < running.size();) {
      JobRun& r = runs[running[k]];
      if (r.remaining <= 1e-6) {
        (void)state.Release(r.request.id);
        for (std::size_t g = 0; g < r.groups.size(); ++g)
          settle_lost(r, g);
        r.outcome.finish = now_s;
        ++finished;
        if (options.on_progress && finished % progress_step == 0) {
          options.on_progress(static_cast<double>(finished) / static_cast<double>(jobs.size()));
        }
        running[k] = running.back();
        running.pop_back();
      } else {
        ++k;
      }
    }
    // Repairs, then failures.
    for (std::size_t n = 0; n < node_count; ++n) {
      if (back_at[n] > now) continue;
      state.SetDrained(static_cast<int>(n), false);
      back_at[n] = never;
      fails_at[n] = now + lifetime(failure_rng);
    }
    for (std::size_t n = 0; n < node_count; ++n) {
      if (fails_at[n] <= now) fail_node(static_cast<int>(n), now_s);
    }
    // Arrivals.
    while (next_arrival < arrival_order.size() &&
           static_cast<double>(jobs[arrival_order[next_arrival]].submit_time) <= now) {
      queue.push_back(arrival_order[next_arrival++]);
    }
    // A scheduling round: the queue, and running fault-tolerant jobs' missing groups.
    std::vector<JobRequest> waiting;
    waiting.reserve(queue.size());
    for (std::size_t i : queue) {
      JobRequest j = runs[i].request;
      j.expected_runtime = static_cast<Seconds>(std::ceil(runs[i].remaining));
      waiting.push_back(std::move(j));
    }
    for (std::size_t i : running) {
      const JobRun& r = runs[i];
      if (!r.MissesGroups()) continue;
      JobRequest j = r.request;
      for (std::size_t g = 0; g < r.groups.size(); ++g) {
        if (!r.groups[g].empty()) continue;
        MissingGroup missing;
        missing.replica = static_cast<int>(g);
        missing.lost = r.lost[g];
        missing.last_end = static_cast<Seconds>(r.missing_since[g]);
        j.missing_groups.push_back(missing);
      }
      j.replacements_placed = r.replacements;
      waiting.push_back(std::move(j));
    }
    if (waiting.empty()) {
      update_rates();
      continue;
    }
    // What the platform knows of running jobs' checkpoints: those that report theirs, from their
    // first one on (a resumed job has saved before).
    for (std::size_t i : running) {
      JobRun& r = runs[i];
      const double interval = r.checkpoint_interval;
      const double ran = now - static_cast<double>(r.started);
      if (!r.reports || interval <= 0 || (!r.reported && ran < interval)) continue;
      const auto last =
          r.started + static_cast<Seconds>(std::floor(std::max(0.0, ran) / interval) * interval);
      const auto seconds = static_cast<Seconds>(std::ceil(r.checkpoint_s));
      const RunningJob* known = state.find(r.request.id);
      if (known->last_checkpoint != last || known->request.checkpoint_s != seconds) {
        (void)state.SetLastCheckpoint(r.request.id, last, seconds);
        r.request.checkpoint_s = seconds;
      }
      r.reported = true;
    }
    Decision d = scheduler.Decide(state, waiting, now_s);
    recheck = d.recheck_at >= 0 ? static_cast<double>(d.recheck_at)
                                : std::numeric_limits<double>::infinity();
    if (options.record_reasons) {
      for (std::size_t i : queue) {
        const JobId id = runs[i].request.id;
        auto p = d.pending.find(id);
        const std::string& reason = p == d.pending.end() ? std::string() : p->second;
        if (last_reason[i] != reason || !reason_seen[i]) {
          result.pending_history.push_back({now_s, id, reason});
          last_reason[i] = reason;
          reason_seen[i] = true;
        }
      }
    }
    for (const auto& [id, since] : d.locality_wait_started)
      runs[index_of.at(id)].request.locality_wait_since = since;
    for (JobId v : d.suspends) {
      std::size_t i = index_of.at(v);
      JobRun& r = runs[i];
      // Its reasons name the job it makes room for.
      const JobId for_job = d.suspended_for.count(v) ? d.suspended_for.at(v) : 0;
      r.request.preempted_by = for_job;
      r.request.preempted_by_priority =
          for_job != 0 ? runs[index_of.at(for_job)].request.priority : 0;
      r.request.preempted_at = now_s;
      if (options.record_reasons) {
        last_reason[i] = "suspended for job " + std::to_string(for_job) + " (priority " +
                         std::to_string(r.request.preempted_by_priority) + ")";
        result.pending_history.push_back({now_s, v, last_reason[i]});
      }
      // It is given its deadline: it saves within it (holding its nodes while it writes), or is
      // killed at it, or does not save; then it pays a restart when it resumes.
      const SuspendPolicy& suspend = options.scheduler.suspend;
      const double deadline = static_cast<double>(SuspendDeadline(r.request, suspend));
      const bool saved = r.reports && r.checkpoint_s <= deadline;
      const double hold = saved ? r.checkpoint_s : r.reports ? deadline : 0;
      ++(saved       ? result.saved_on_suspend
         : r.reports ? result.killed_at_deadline
                     : result.suspended_unsaved);
      const RunningJob* held = state.find(v);
      const double gpus =
          static_cast<double>(held->placement.nodes.size()) * held->placement.gpus_per_node;
      for (int n : held->placement.nodes) {
        double& until = leaving_until[static_cast<std::size_t>(n)];
        until = std::max(until, now + hold);
      }
      const double restart = static_cast<double>(suspend.restart_s) + r.checkpoint_s;
      const double lost_work = requeue(i, now_s, saved);  // (GPU-seconds; none if it saved)
      r.remaining += restart;
      r.reported |= saved;
      result.preemption_lost_gpu_hours += (lost_work + gpus * (hold + restart)) / 3600;
      ++r.outcome.preemptions;
      ++result.preemptions;
    }
    for (const Decision::Start& s : d.starts) {
      std::size_t i = index_of.at(s.job);
      JobRun& r = runs[i];
      Status st = state.Allocate(r.request, s.placement, now_s);
      if (!st.ok()) return Internal("simulator: the scheduler's decision failed: " + st.message());
      // It holds its nodes from now, and works once the jobs suspended for it have left them.
      double begins = now;
      for (int n : s.placement.nodes)
        begins = std::max(begins, leaving_until[static_cast<std::size_t>(n)]);
      r.idle_until = begins;
      r.started = static_cast<Seconds>(std::llround(begins));
      if (r.request.node_step > 0) {  // replica groups: those it starts with, the rest missing
        const std::size_t replicas = static_cast<std::size_t>(r.request.Replicas());
        r.groups.assign(replicas, {});
        r.lost.assign(replicas, false);
        r.missing_since.assign(replicas, now);
        r.replacements = 0;
        const auto step = static_cast<std::size_t>(r.request.node_step);
        for (std::size_t g = 0; g * step < s.placement.nodes.size(); ++g) {
          r.groups[g].assign(
              s.placement.nodes.begin() + static_cast<std::ptrdiff_t>(g * step),
              s.placement.nodes.begin() + static_cast<std::ptrdiff_t>((g + 1) * step));
        }
      }
      r.request.preempted_by = 0;
      r.request.locality_wait_since = -1;  // if it is suspended, it waits afresh
      if (r.outcome.first_start < 0) {
        r.outcome.first_start = now_s;
        r.outcome.first_nodes = s.placement.nodes;
      }
      r.outcome.waited += r.started - r.queued;
      running.push_back(i);
      queue.erase(std::find(queue.begin(), queue.end(), i));
    }
    for (const Decision::GroupStart& g : d.group_starts) {
      JobRun& r = runs[index_of.at(g.job)];
      Status st = state.Grow(g.job, g.placement.nodes);
      if (!st.ok())
        return Internal("simulator: the scheduler's group start failed: " + st.message());
      const auto replica = static_cast<std::size_t>(g.replica);
      settle_lost(r, replica);
      r.groups[replica] = g.placement.nodes;
      if (g.replacement) {
        ++r.replacements;
        ++result.replacements_placed;
      }
    }
    update_rates();
  }

  std::vector<double> jct, wait, hp_wait;
  Seconds last_finish = 0;
  for (const JobRun& r : runs) {
    jct.push_back(static_cast<double>(r.outcome.finish - r.outcome.submit));
    wait.push_back(static_cast<double>(r.outcome.waited));
    if (r.request.priority >= options.high_priority)
      hp_wait.push_back(static_cast<double>(r.outcome.waited));
    last_finish = std::max(last_finish, r.outcome.finish);
    result.jobs.push_back(r.outcome);
  }
  result.mean_jct = Mean(jct);
  result.median_jct = Percentile(jct, 0.5);
  result.p99_jct = Percentile(jct, 0.99);
  result.mean_wait = Mean(wait);
  result.median_wait = Percentile(wait, 0.5);
  result.p95_wait = Percentile(wait, 0.95);
  result.p99_wait = Percentile(wait, 0.99);
  result.hp_mean_wait = Mean(hp_wait);
  result.hp_p95_wait = Percentile(hp_wait, 0.95);
  result.makespan = last_finish - static_cast<Seconds>(first_submit);
  double span = std::max(1.0, now - first_submit);
  result.arrival_span = static_cast<Seconds>(last_submit - first_submit);
  result.gpu_utilisation =
      result.arrival_span > 0
          ? arrival_busy_gpu_seconds /
                (static_cast<double>(result.arrival_span) * topology.total_gpus())
          : busy_gpu_seconds / (span * topology.total_gpus());
  result.fragmentation = fragmentation_seconds / span;
  result.cross_leaf_tb = cross_leaf_gbit / 8 / 1000;
  result.cross_zone_tb = cross_zone_gbit / 8 / 1000;
  return result;
}

}  // namespace ff::scheduler
