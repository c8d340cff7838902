// hai-sim: replays a job trace onto a cluster topology through the scheduler, once per placement
// policy, and compares them.
//
//   hai-sim --trace ../shared/traces/microsoft-itp-elasticflow/raw/cluster04.csv
//           --cluster deploy/config/cluster-fireflyer2.toml --out sim-out
//
// Prints a table (job completion time, queueing delay, GPU utilisation, fragmentation, traffic
// across leaf uplinks and zones, preemptions) and last a summary line comparing congestion-aware
// with the baselines. With --out, also writes results.csv, jobs-<policy>.csv and SVG plots
// (jct-cdf.svg, utilisation.svg). Progress goes to stderr.
//
//   hai-sim sweep --traces ... (sweep.cc): held-out traces x loads x seeds, ratios and spread.
//   hai-sim generate --out FILE ... (sweep.cc): a synthetic trace that loads any cluster.
//   hai-sim place --cluster FILE --job N ... (place.cc): each policy's placement of a few jobs and
//     the performance model's prediction for them (the network lab's placement experiment).
//   hai-sim topology --cluster FILE [--json] (topology_main.cc): the cluster as the scheduler reads
//     it, for deploy's tools (one reader of cluster.toml).
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>

#include "common/cli_exit.h"
#include "scheduler/simulator.h"
#include "scheduler/svg_plot.h"
#include "scheduler/trace.h"
#include "sweep.h"

namespace ff::scheduler {
namespace {

namespace fs = std::filesystem;

std::string Hours(double seconds) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2fh", seconds / 3600);
  return buf;
}

// a / b to two decimals; "n/a (both 0)" when neither has any (0 / 0 is no ratio).
std::string Ratio(double a, double b) {
  if (b <= 0) return a <= 0 ? "n/a (both 0)" : "inf";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f", a / b);
  return buf;
}

int Main(int argc, char** argv) {
  CLI::App app("Replay a job trace through the scheduler's placement policies", "hai-sim");
  std::string trace_path, cluster_path = "deploy/config/cluster-fireflyer2.toml", out_dir;
  std::string policies_arg = "first-fit,slurm-tree,congestion-aware";
  WorkloadRules rules;
  std::size_t limit = 0;
  double time_scale = 1;
  PolicyOptions policy_options;
  app.add_option("--trace", trace_path, "Trace CSV (ITP/ElasticFlow or Tiresias format)")
      ->required();
  app.add_option("--cluster", cluster_path, "cluster.toml")->capture_default_str();
  app.add_option("--policies", policies_arg, "Comma-separated placement policies")
      ->capture_default_str();
  app.add_option("--out", out_dir, "Folder for results.csv, per-job CSVs and SVG plots");
  app.add_option("--pipeline-share", rules.pipeline_share,
                 "Share of multi-node jobs that are pipelines (the rest allreduce)")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 1.0));
  app.add_option("--seed", rules.seed, "Seed of the rules that assign users, priorities, traffic")
      ->capture_default_str();
  app.add_option("--limit", limit, "Replay only the first N jobs (0: all)");
  app.add_option("--time-scale", time_scale,
                 "Divide submission times by this (2: jobs arrive twice as fast, doubling the "
                 "load); durations are kept")
      ->capture_default_str()
      ->check(CLI::Range(0.01, 1000.0));
  bool reasons = false;
  app.add_flag("--reasons", reasons,
               "With --out: write reasons-<policy>.csv, every waiting job's reason whenever it "
               "changed (time, job, reason; empty when the job started)");
  app.add_option("--locality-wait", policy_options.locality_wait,
                 "congestion-aware: seconds a multi-node job that fits under one leaf waits for "
                 "one before it spreads over several (0: never waits)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_option("--locality-wait-share", policy_options.locality_wait_share,
                 "congestion-aware: the share of its time since submission a job may also wait "
                 "for one leaf, however little spreading would cost")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 1.0));
  double mtbf_hours = 0, repair_hours = 4;
  app.add_option("--node-mtbf-hours", mtbf_hours,
                 "Node failures: mean hours between one node's failures (0: none). A failed "
                 "node's jobs lose the work since their checkpoint and queue again; a "
                 "fault-tolerant job loses the group there and the scheduler replaces it")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_option("--node-repair-hours", repair_hours, "How long a failed node is out")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  SimulationOptions base;
  CheckpointModel& ckpt = base.checkpoints;
  SuspendPolicy& suspend = base.scheduler.suspend;
  app.add_option("--checkpoint-interval", base.checkpoint_interval,
                 "Seconds between a job's periodic checkpoints")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--checkpoint-interval-spread", ckpt.interval_spread,
                 "Each job's interval is --checkpoint-interval times a seeded factor in "
                 "[1/spread, spread] (1: every job's is the same)")
      ->capture_default_str()
      ->check(CLI::Range(1.0, 1000.0));
  app.add_option("--checkpoint-gb-per-gpu", ckpt.gb_per_gpu,
                 "The median job's checkpoint, GB per GPU (each job's is this times a seeded "
                 "factor in [1/spread, spread])")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_option("--checkpoint-spread", ckpt.spread, "See --checkpoint-gb-per-gpu")
      ->capture_default_str()
      ->check(CLI::Range(1.0, 1000.0));
  app.add_option("--checkpoint-gbps-per-gpu", ckpt.gbps_per_gpu,
                 "Checkpoint write (and read) rate of one GPU's share, GB/s")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--reporting-share", ckpt.reporting_share,
                 "Share of jobs that report their checkpoints to the platform and save when "
                 "suspended (the rest save nothing then)")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 1.0));
  app.add_option("--max-suspend-deadline", suspend.max_deadline,
                 "Most seconds a suspended job is given to save (its deadline: 1.5x its "
                 "checkpoint's write time + 10 s, at least 30 s)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  std::string victim_order = "least-lost";
  app.add_option("--victim-order", victim_order,
                 "least-lost (fewest GPU-seconds lost first) or newest-first (the baseline); with "
                 "least-lost, the last policy is replayed again newest-first for the comparison")
      ->capture_default_str()
      ->check(CLI::IsMember({"least-lost", "newest-first"}));
  app.add_option("--ft-share", rules.ft_share,
                 "Share of multi-node jobs that run as replica groups (fault tolerant: 8, 4 or 2 "
                 "groups, half of them needed)")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 1.0));
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return ExitForParseError(app, e);
  }
  auto fail = [](const Status& st) {
    std::fprintf(stderr, "hai-sim: %s\n", st.message().c_str());
    return 1;
  };
  // The results' folder is checked before the policies run (that can take minutes), not after.
  if (!out_dir.empty()) {
    std::error_code ec;
    fs::create_directories(out_dir, ec);
    if (ec || !fs::is_directory(out_dir)) {
      return fail(InvalidArgument("--out " + out_dir + ": cannot make a folder there (" +
                                  (ec ? ec.message() : std::string("a file is in the way")) + ")"));
    }
    const fs::path probe = fs::path(out_dir) / ".hai-sim-write-test";
    if (!std::ofstream(probe) || (fs::remove(probe, ec), ec)) {
      return fail(InvalidArgument("--out " + out_dir + ": cannot write there"));
    }
  }
  auto topology = Topology::Load(cluster_path);
  if (!topology.ok()) return fail(topology.status());
  auto trace = LoadTrace(trace_path);
  if (!trace.ok()) return fail(trace.status());
  if (limit > 0 && trace->size() > limit) trace->resize(limit);
  for (TraceJob& t : *trace)
    t.submit = static_cast<Seconds>(static_cast<double>(t.submit) / time_scale);
  rules.gpus_per_node = topology->max_gpus_per_node();
  std::vector<JobRequest> jobs = MakeWorkload(*trace, rules);
  // Jobs are numbered in submission order; messages name the trace's own line and job id.
  std::size_t rounded = 0;
  const TraceJob* first_rounded = nullptr;
  for (std::size_t i = 0; i < jobs.size(); ++i) {
    const TraceJob& t = (*trace)[i];
    if (jobs[i].TotalGpus() > topology->total_gpus()) {
      return fail(InvalidArgument(trace_path + ":" + std::to_string(t.line) + ": job " + t.id +
                                  " asks for " + std::to_string(t.gpus) +
                                  " GPUs, more than cluster '" + topology->name() + "' has (" +
                                  std::to_string(topology->total_gpus()) + ")"));
    }
    if (jobs[i].TotalGpus() != t.gpus) {
      if (rounded++ == 0) first_rounded = &t;
    }
  }
  if (rounded > 0) {
    std::fprintf(stderr,
                 "hai-sim: %zu job%s ask for a GPU count that is not a multiple of %d GPUs per "
                 "node (first: job %s at line %d, %d GPUs): each runs on whole nodes (%d GPUs)\n",
                 rounded, rounded == 1 ? "" : "s", rules.gpus_per_node, first_rounded->id.c_str(),
                 first_rounded->line, first_rounded->gpus,
                 (first_rounded->gpus + rules.gpus_per_node - 1) / rules.gpus_per_node *
                     rules.gpus_per_node);
  }
  std::vector<std::string> policies;
  {
    std::stringstream ss(policies_arg);
    for (std::string p; std::getline(ss, p, ',');) {
      if (!MakePlacementPolicy(p)) {
        return fail(InvalidArgument("unknown policy '" + p +
                                    "' (first-fit, slurm-tree, congestion-aware)"));
      }
      policies.push_back(p);
    }
  }
  const std::string trace_name = fs::path(trace_path).stem().string();
  std::fprintf(stderr, "hai-sim: %zu jobs from %s on %s (%zu nodes, %d GPUs)\n", jobs.size(),
               trace_name.c_str(), topology->name().c_str(), topology->nodes().size(),
               topology->total_gpus());

  std::vector<SimulationResult> results;
  const bool tty = isatty(STDERR_FILENO);
  ckpt.seed = rules.seed;
  suspend.order = victim_order == "newest-first" ? SuspendPolicy::VictimOrder::kNewestFirst
                                                 : SuspendPolicy::VictimOrder::kLeastLost;
  // Without victims to choose there is nothing to compare: the newest-first replay runs only when
  // the last policy suspended jobs.
  std::vector<std::string> replays = policies;
  for (std::size_t k = 0; k < replays.size(); ++k) {
    const std::string policy = replays[k];
    const bool baseline = k >= policies.size();
    if (k + 1 == policies.size() && suspend.order == SuspendPolicy::VictimOrder::kLeastLost) {
      replays.push_back(policy);  // decided after it ran (below)
    }
    SimulationOptions options = base;
    if (baseline) options.scheduler.suspend.order = SuspendPolicy::VictimOrder::kNewestFirst;
    options.policy = policy_options;
    options.record_reasons = reasons && !out_dir.empty();
    options.node_mtbf = static_cast<Seconds>(mtbf_hours * 3600);
    options.node_repair = std::max<Seconds>(1, static_cast<Seconds>(repair_hours * 3600));
    options.failure_seed = rules.seed;
    int last_shown = -1;
    options.on_progress = [&](double share) {
      int pct = static_cast<int>(share * 100);
      if (pct / 10 == last_shown / 10 && !tty) return;
      last_shown = pct;
      std::fprintf(stderr, tty ? "\rhai-sim: %-16s %3d%%" : "hai-sim: %-16s %3d%%\n",
                   policy.c_str(), pct);
    };
    auto start = std::chrono::steady_clock::now();
    auto r = Simulate(*topology, jobs, policy, options);
    if (!r.ok()) return fail(r.status());
    double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::fprintf(stderr, "%shai-sim: %-16s done in %.1f s%s\n", tty ? "\r" : "", policy.c_str(),
                 secs, baseline ? " (victims newest-first)" : "");
    if (k + 1 == policies.size() && replays.size() > policies.size() && r->preemptions == 0) {
      replays.pop_back();
    }
    results.push_back(std::move(*r));
  }
  std::optional<SimulationResult> newest_first;
  if (results.size() > policies.size()) {
    newest_first = std::move(results.back());
    results.pop_back();
  }

  std::printf("\nhai-sim %s: %zu jobs on %s, arrivals x%g (arriving over %s)\n", trace_name.c_str(),
              jobs.size(), topology->name().c_str(), time_scale,
              results.empty() ? "-" : Hours(static_cast<double>(results[0].arrival_span)).c_str());
  std::printf("%-17s %10s %10s %10s %10s %10s %10s %7s %7s %12s %12s %7s\n", "policy", "mean JCT",
              "median", "p99 JCT", "mean wait", "p95 wait", "p99 wait", "util", "frag",
              "cross-leaf", "cross-zone", "preempt");
  for (const SimulationResult& r : results) {
    std::printf("%-17s %10s %10s %10s %10s %10s %10s %6.1f%% %6.1f%% %9.1f TB %9.1f TB %7d\n",
                r.policy.c_str(), Hours(r.mean_jct).c_str(), Hours(r.median_jct).c_str(),
                Hours(r.p99_jct).c_str(), Hours(r.mean_wait).c_str(), Hours(r.p95_wait).c_str(),
                Hours(r.p99_wait).c_str(), 100 * r.gpu_utilisation, 100 * r.fragmentation,
                r.cross_leaf_tb, r.cross_zone_tb, r.preemptions);
  }
  std::printf(
      "(wait: every wait of a job, after suspensions too; util: over the span jobs arrive in)\n");
  if (mtbf_hours > 0) {
    int ft_jobs = 0;
    for (const JobRequest& j : jobs)
      ft_jobs += j.node_step > 0;
    std::printf("\nfailures: a node fails every %gh on average, out %gh; %d fault-tolerant jobs\n",
                mtbf_hours, repair_hours, ft_jobs);
    std::printf("%-17s %9s %9s %14s %12s %15s\n", "policy", "failures", "requeued", "lost work",
                "replacements", "lost group-h");
    for (const SimulationResult& r : results) {
      std::printf("%-17s %9d %9d %12.1fh %12d %14.1fh\n", r.policy.c_str(), r.node_failures,
                  r.failure_requeues, r.failure_lost_gpu_hours, r.replacements_placed,
                  r.lost_group_hours);
    }
    std::printf(
        "(requeued: jobs a failure sent back to the queue; lost work: their GPU-hours since the "
        "last checkpoint; lost group-h: hours replica groups were missing before a replacement "
        "started)\n");
  }

  if (!out_dir.empty()) {
    std::ofstream csv(fs::path(out_dir) / "results.csv");
    csv << "policy,mean_jct_s,median_jct_s,p99_jct_s,mean_wait_s,median_wait_s,p95_wait_s,"
           "p99_wait_s,gpu_utilisation,fragmentation,cross_leaf_tb,cross_zone_tb,preemptions,"
           "node_failures,failure_requeues,failure_lost_gpu_hours,replacements_placed,"
           "lost_group_hours\n";
    for (const SimulationResult& r : results) {
      csv << r.policy << "," << r.mean_jct << "," << r.median_jct << "," << r.p99_jct << ","
          << r.mean_wait << "," << r.median_wait << "," << r.p95_wait << "," << r.p99_wait << ","
          << r.gpu_utilisation << "," << r.fragmentation << "," << r.cross_leaf_tb << ","
          << r.cross_zone_tb << "," << r.preemptions << "," << r.node_failures << ","
          << r.failure_requeues << "," << r.failure_lost_gpu_hours << "," << r.replacements_placed
          << "," << r.lost_group_hours << "\n";
      if (reasons) {
        std::ofstream why(fs::path(out_dir) / ("reasons-" + r.policy + ".csv"));
        why << "time,job,reason\n";
        for (const SimulationResult::ReasonChange& c : r.pending_history) {
          std::string quoted;
          for (char ch : c.reason)
            quoted += ch == '"' ? std::string("\"\"") : std::string(1, ch);
          why << c.time << "," << c.job << ",\"" << quoted << "\"\n";
        }
      }
      std::ofstream per_job(fs::path(out_dir) / ("jobs-" + r.policy + ".csv"));
      per_job << "job,gpus,submit,first_start,finish,preemptions,waited,first_nodes\n";
      for (const JobOutcome& j : r.jobs) {
        std::string nodes;
        for (int n : j.first_nodes)
          nodes += (nodes.empty() ? "" : ";") + topology->nodes()[n].name;
        per_job << j.id << "," << j.gpus << "," << j.submit << "," << j.first_start << ","
                << j.finish << "," << j.preemptions << "," << j.waited << "," << nodes << "\n";
      }
    }
    std::vector<PlotSeries> cdf, util, traffic;
    for (const SimulationResult& r : results) {
      std::vector<double> jct;
      for (const JobOutcome& j : r.jobs)
        jct.push_back(static_cast<double>(j.finish - j.submit) / 3600);
      std::sort(jct.begin(), jct.end());
      PlotSeries s{r.policy, {}};
      for (std::size_t i = 0; i < jct.size(); i += std::max<std::size_t>(1, jct.size() / 400)) {
        s.points.emplace_back(jct[i], static_cast<double>(i + 1) / static_cast<double>(jct.size()));
      }
      s.points.emplace_back(jct.back(), 1.0);
      cdf.push_back(std::move(s));
      PlotSeries u{r.policy, {}};
      for (const auto& [t, share] : r.utilisation_series) {
        u.points.emplace_back(static_cast<double>(t) / 86400, 100 * share);
      }
      util.push_back(std::move(u));
      PlotSeries leaf{r.policy + " cross-leaf", {}}, zone{r.policy + " cross-zone", {}};
      for (const auto& t : r.traffic_series) {
        leaf.points.emplace_back(static_cast<double>(t.time) / 86400, t.cross_leaf_gbps);
        zone.points.emplace_back(static_cast<double>(t.time) / 86400, t.cross_zone_gbps);
      }
      traffic.push_back(std::move(leaf));
      traffic.push_back(std::move(zone));
    }
    // Every title names what was simulated: trace, cluster, arrival rate and seed.
    char scale[32];
    std::snprintf(scale, sizeof scale, "%g", time_scale);
    const std::string what = trace_name + " on " + topology->name() + ", arrivals x" + scale +
                             ", seed " + std::to_string(rules.seed);
    Status st = WriteSvgPlot((fs::path(out_dir) / "traffic.svg").string(),
                             "Traffic across leaf uplinks and zones (" + what + ")", "days", "Gb/s",
                             traffic, /*log_x=*/false);
    if (st.ok()) {
      st = WriteSvgPlot((fs::path(out_dir) / "jct-cdf.svg").string(),
                        "Job completion time CDF (" + what + ")", "JCT (hours, log)",
                        "share of jobs", cdf, /*log_x=*/true);
    }
    if (st.ok()) {
      st = WriteSvgPlot((fs::path(out_dir) / "utilisation.svg").string(),
                        "GPU utilisation (" + what + ")", "days", "busy GPUs (%)", util,
                        /*log_x=*/false);
    }
    if (!st.ok()) return fail(st);
    std::printf("\nwrote %s/{results.csv,jobs-*.csv,%straffic.svg,jct-cdf.svg,utilisation.svg}\n",
                out_dir.c_str(), reasons ? "reasons-*.csv," : "");
  }

  auto find = [&](const std::string& name) -> const SimulationResult* {
    for (const SimulationResult& r : results) {
      if (r.policy == name) return &r;
    }
    return nullptr;
  };
  const SimulationResult* ours = find("congestion-aware");
  const SimulationResult* ff = find("first-fit");
  const SimulationResult* slurm = find("slurm-tree");
  if (ours && ff && slurm) {
    std::printf(
        "hai-sim %s: cross-leaf traffic vs first-fit %s, vs slurm-tree %s; mean JCT vs "
        "first-fit %s, vs slurm-tree %s\n",
        trace_name.c_str(), Ratio(ours->cross_leaf_tb, ff->cross_leaf_tb).c_str(),
        Ratio(ours->cross_leaf_tb, slurm->cross_leaf_tb).c_str(),
        Ratio(ours->mean_jct, ff->mean_jct).c_str(),
        Ratio(ours->mean_jct, slurm->mean_jct).c_str());
  }
  bool any_preempted = newest_first.has_value();
  for (const SimulationResult& r : results)
    any_preempted |= r.preemptions > 0;
  if (any_preempted) {
    std::printf(
        "\npreemption: checkpoints every %s, %g GB a GPU (median; each job's x/%g) at %g GB/s a "
        "GPU, %.0f%% of jobs report theirs and save when suspended; deadlines %s..%s\n",
        FormatDuration(base.checkpoint_interval).c_str(), ckpt.gb_per_gpu, ckpt.spread,
        ckpt.gbps_per_gpu, 100 * ckpt.reporting_share, FormatDuration(suspend.min_deadline).c_str(),
        FormatDuration(suspend.max_deadline).c_str());
    std::printf("%-17s %-13s %8s %11s %7s %7s %8s %13s %12s\n", "policy", "victims", "preempt",
                "lost GPU-h", "saved", "killed", "unsaved", "hp mean wait", "hp p95 wait");
    auto row = [&](const SimulationResult& r, const char* order) {
      std::printf("%-17s %-13s %8d %11.1f %7d %7d %8d %13s %12s\n", r.policy.c_str(), order,
                  r.preemptions, r.preemption_lost_gpu_hours, r.saved_on_suspend,
                  r.killed_at_deadline, r.suspended_unsaved, Hours(r.hp_mean_wait).c_str(),
                  Hours(r.hp_p95_wait).c_str());
    };
    for (const SimulationResult& r : results)
      row(r, victim_order.c_str());
    if (newest_first) row(*newest_first, "newest-first");
    std::printf(
        "(lost GPU-h: work since the checkpoint, the checkpoint written or the wait for the "
        "deadline, and the restart, of every suspension; hp: jobs of priority >= 4)\n");
    if (newest_first) {
      const SimulationResult& ours_last = results.back();
      const bool none_waited = ours_last.hp_mean_wait <= 0 && newest_first->hp_mean_wait <= 0;
      std::printf(
          "preemption: lost GPU-h %sx of newest-first, hp wait %sx\n",
          Ratio(ours_last.preemption_lost_gpu_hours, newest_first->preemption_lost_gpu_hours)
              .c_str(),
          none_waited ? "1.00" : Ratio(ours_last.hp_mean_wait, newest_first->hp_mean_wait).c_str());
    }
  }
  return 0;
}

}  // namespace
}  // namespace ff::scheduler

int main(int argc, char** argv) {
  if (argc > 1 && std::string(argv[1]) == "sweep")
    return ff::scheduler::SweepMain(argc - 1, argv + 1);
  if (argc > 1 && std::string(argv[1]) == "generate") {
    return ff::scheduler::GenerateMain(argc - 1, argv + 1);
  }
  if (argc > 1 && std::string(argv[1]) == "place")
    return ff::scheduler::PlaceMain(argc - 1, argv + 1);
  if (argc > 1 && std::string(argv[1]) == "topology")
    return ff::scheduler::TopologyMain(argc - 1, argv + 1);
  return ff::scheduler::Main(argc, argv);
}
