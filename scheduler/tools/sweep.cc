// hai-sim sweep: the congestion-aware policy judged like a held-out test. Every trace is replayed
// at every load (arrival-rate multiplier) and seed under first-fit, slurm-tree and
// congestion-aware; the report gives, per run, congestion-aware's cross-leaf traffic and mean JCT
// as ratios of each baseline's, then per trace and over all runs the median and the worst.
//
//   hai-sim sweep --traces T1.csv,T2.csv [--tuned-on T3.csv,...] [--cluster FILE]
//                 [--loads 3,6,10] [--seeds 1-5] [--limit N] [--threads N] [--csv FILE]
//
// --tuned-on names the traces the policy's parameters were chosen on: they are refused in
// --traces (a held-out report must not include them) and named in the report. With
// --try-locality-waits W1,W2,... the choice is made here: the tuned-on traces are replayed at the
// same loads and seeds with each wait, and the held-out report uses the wait with the lowest
// median cross-leaf traffic against slurm-tree among those whose mean JCT is never worse than
// either baseline's (else the one with the best worst-case JCT).
// Each run's row also gives every policy's mean and p95 wait (every wait of a job, after
// suspensions too); then a table per load level (pooling the loads hides how a policy fares on a
// quiet cluster against a loaded one), per trace and over all runs. The last line:
//   hai-sim sweep: cross-leaf vs first-fit median X (worst W), vs slurm-tree median Y (worst Z);
//   mean JCT vs first-fit median J (worst K), vs slurm-tree median L (worst M)
// A ratio whose baseline moved nothing across leaves (0 / 0) is left out of the statistics and
// counted.
//
// The control. Every run also replays first-fit on the same workload with each arrival moved by 0
// or 1 second (chosen by a hash of the job's place in the trace and the seed): the same policy,
// an input no user could tell apart. Its ratios to first-fit (per run, per load, and their range
// over all runs in the line before the last) are the noise under every ratio: where the cluster
// queues, such a nudge alone moves mean JCT by percents, so a single run's ratio within that band
// says nothing about a policy.
#include "sweep.h"

#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>
#include <thread>

#include "common/cli_exit.h"
#include "scheduler/simulator.h"
#include "scheduler/trace.h"

namespace ff::scheduler {
namespace {

namespace fs = std::filesystem;

std::vector<std::string> SplitList(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  for (std::string item; std::getline(ss, item, ',');) {
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

// "1-5" or "1,3,7".
Result<std::vector<uint64_t>> ParseSeeds(const std::string& s) {
  std::vector<uint64_t> seeds;
  for (const std::string& part : SplitList(s)) {
    try {
      const auto dash = part.find('-');
      if (dash == std::string::npos) {
        seeds.push_back(std::stoull(part));
        continue;
      }
      const uint64_t lo = std::stoull(part.substr(0, dash)),
                     hi = std::stoull(part.substr(dash + 1));
      if (hi < lo || hi - lo > 1000) return InvalidArgument("--seeds: bad range '" + part + "'");
      for (uint64_t v = lo; v <= hi; ++v)
        seeds.push_back(v);
    } catch (const std::exception&) {
      return InvalidArgument("--seeds: '" + part + "' is not a number or a range like 1-5");
    }
  }
  if (seeds.empty()) return InvalidArgument("--seeds: none given");
  return seeds;
}

struct Run {
  std::string trace;  // its name (the file's stem)
  std::string path;
  double load = 1;
  uint64_t seed = 1;
  struct Figures {
    double cross_leaf_tb = 0, mean_jct = 0, mean_wait = 0, p95_wait = 0;
  };
  std::map<std::string, Figures> by_policy;
  // congestion-aware / baseline; NaN when the baseline's figure is 0.
  double cl_ff = NAN, cl_slurm = NAN, jct_ff = NAN, jct_slurm = NAN;
  // The control: first-fit with arrivals nudged / first-fit (NaN when not run).
  double ctl_cl = NAN, ctl_jct = NAN;
  double ff_tb = 0;  // first-fit's cross-leaf traffic: how much the ratios rest on
};

double RatioOf(double a, double b) {
  return b > 0 ? a / b : (a > 0 ? INFINITY : NAN);
}

struct Stats {
  double median = NAN, worst = NAN;
  std::size_t n = 0, skipped = 0;
};

Stats Summarise(std::vector<double> v) {
  Stats s;
  std::vector<double> kept;
  for (double x : v) {
    if (std::isnan(x)) {
      ++s.skipped;
    } else {
      kept.push_back(x);
    }
  }
  s.n = kept.size();
  if (kept.empty()) return s;
  std::sort(kept.begin(), kept.end());
  s.median = kept.size() % 2 ? kept[kept.size() / 2]
                             : (kept[kept.size() / 2 - 1] + kept[kept.size() / 2]) / 2;
  s.worst = kept.back();
  return s;
}

std::string Fmt(double x) {
  if (std::isnan(x)) return "n/a";
  if (std::isinf(x)) return "inf";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f", x);
  return buf;
}

std::vector<Run> MakeRuns(const std::vector<std::string>& traces, const std::vector<double>& loads,
                          const std::vector<uint64_t>& seeds) {
  std::vector<Run> runs;
  for (const std::string& t : traces) {
    for (double load : loads) {
      for (uint64_t seed : seeds)
        runs.push_back({fs::path(t).stem().string(), t, load, seed, {}});
    }
  }
  return runs;
}

// The control's replay: first-fit, arrivals nudged (see the top of this file).
constexpr char kControl[] = "first-fit, arrivals nudged";

// 0 or 1 second for the job at `index`, fixed by it and `seed` (splitmix64's finaliser).
Seconds Nudge(std::size_t index, uint64_t seed) {
  uint64_t z = index * 0x9e3779b97f4a7c15ULL + seed;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return static_cast<Seconds>((z ^ (z >> 31)) & 1);
}

// Runs every (run, policy) simulation on a pool of threads and fills in the runs' figures and
// ratios; with `control`, the control's too.
Status SimulateRuns(std::vector<Run>* runs, const Topology& topology,
                    const std::map<std::string, std::vector<TraceJob>>& loaded,
                    const PolicyOptions& policy_options, unsigned threads, bool control) {
  std::vector<std::string> policies = {"first-fit", "slurm-tree", "congestion-aware"};
  if (control) policies.push_back(kControl);
  std::atomic<std::size_t> next{0}, done{0};
  std::mutex mu;
  Status failure;
  const bool tty = isatty(STDERR_FILENO);
  const std::size_t total = runs->size() * policies.size();
  auto worker = [&] {
    for (std::size_t k; (k = next++) < total;) {
      Run& run = (*runs)[k / policies.size()];
      const std::string& policy = policies[k % policies.size()];
      std::vector<TraceJob> trace = loaded.at(run.path);
      const bool nudged = policy == kControl;
      for (std::size_t i = 0; i < trace.size(); ++i) {
        trace[i].submit = static_cast<Seconds>(static_cast<double>(trace[i].submit) / run.load) +
                          (nudged ? Nudge(i, run.seed) : 0);
      }
      WorkloadRules rules;
      rules.seed = run.seed;
      rules.gpus_per_node = topology.max_gpus_per_node();
      SimulationOptions options;
      options.policy = policy_options;
      auto r =
          Simulate(topology, MakeWorkload(trace, rules), nudged ? "first-fit" : policy, options);
      std::lock_guard lock(mu);
      if (!r.ok()) {
        if (failure.ok()) failure = r.status();
        continue;
      }
      run.by_policy[policy] = {r->cross_leaf_tb, r->mean_jct, r->mean_wait, r->p95_wait};
      const std::size_t n = ++done;
      if (tty) {
        std::fprintf(stderr, "\rhai-sim sweep: %zu of %zu simulations", n, total);
      } else if (n * 10 / total != (n - 1) * 10 / total || n == total) {
        std::fprintf(stderr, "hai-sim sweep: %zu of %zu simulations\n", n, total);
      }
    }
  };
  std::vector<std::thread> pool;
  for (unsigned i = 0; i < threads; ++i)
    pool.emplace_back(worker);
  for (std::thread& t : pool)
    t.join();
  if (tty) std::fprintf(stderr, "\n");
  if (!failure.ok()) return failure;
  for (Run& run : *runs) {
    const Run::Figures &ff = run.by_policy.at("first-fit"), &slurm = run.by_policy.at("slurm-tree"),
                       &ours = run.by_policy.at("congestion-aware");
    run.cl_ff = RatioOf(ours.cross_leaf_tb, ff.cross_leaf_tb);
    run.cl_slurm = RatioOf(ours.cross_leaf_tb, slurm.cross_leaf_tb);
    run.jct_ff = RatioOf(ours.mean_jct, ff.mean_jct);
    run.jct_slurm = RatioOf(ours.mean_jct, slurm.mean_jct);
    run.ff_tb = ff.cross_leaf_tb;
    if (auto m = run.by_policy.find(kControl); m != run.by_policy.end()) {
      run.ctl_cl = RatioOf(m->second.cross_leaf_tb, ff.cross_leaf_tb);
      run.ctl_jct = RatioOf(m->second.mean_jct, ff.mean_jct);
    }
  }
  return Status::Ok();
}

// One figure of the runs of `trace` ("" for all) at `load` (0: all).
std::vector<double> Values(const std::vector<Run>& runs, double Run::*field,
                           const std::string& trace, double load) {
  std::vector<double> v;
  for (const Run& r : runs) {
    if ((trace.empty() || r.trace == trace) && (load == 0 || r.load == load)) v.push_back(r.*field);
  }
  return v;
}

// The median and worst of one ratio over those runs.
Stats Column(const std::vector<Run>& runs, double Run::*field, const std::string& trace,
             double load = 0) {
  return Summarise(Values(runs, field, trace, load));
}

// "lo..hi" of one ratio over those runs (n/a when none has it).
std::string Range(const std::vector<Run>& runs, double Run::*field, const std::string& trace,
                  double load = 0) {
  double lo = INFINITY, hi = -INFINITY;
  for (double x : Values(runs, field, trace, load)) {
    if (std::isnan(x)) continue;
    lo = std::min(lo, x);
    hi = std::max(hi, x);
  }
  return lo > hi ? "n/a" : Fmt(lo) + ".." + Fmt(hi);
}

std::string Hours(double seconds) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f", seconds / 3600);
  return buf;
}

}  // namespace

int SweepMain(int argc, char** argv) {
  CLI::App app("Replay held-out traces at several loads and seeds under every policy",
               "hai-sim sweep");
  std::string traces_arg, tuned_arg, cluster_path = "deploy/config/cluster-itp512.toml";
  std::string loads_arg = "3,6,10", seeds_arg = "1-5", csv_path;
  std::size_t limit = 0;
  unsigned threads = std::max(1u, std::thread::hardware_concurrency());
  PolicyOptions policy_options;
  app.add_option("--traces", traces_arg, "Held-out traces, comma-separated")->required();
  app.add_option("--tuned-on", tuned_arg,
                 "Traces the policy was tuned on (refused in --traces; named in the report)");
  app.add_option("--cluster", cluster_path, "cluster.toml")->capture_default_str();
  app.add_option("--loads", loads_arg, "Arrival-rate multipliers (hai-sim --time-scale)")
      ->capture_default_str();
  app.add_option("--seeds", seeds_arg, "Workload seeds: a range (1-5) or a list")
      ->capture_default_str();
  app.add_option("--limit", limit, "Replay only the first N jobs of each trace (0: all)");
  app.add_option("--threads", threads, "Simulations run at once")->check(CLI::Range(1u, 256u));
  app.add_option("--locality-wait", policy_options.locality_wait,
                 "congestion-aware: seconds a job that fits under one leaf waits for one")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_option("--locality-wait-share", policy_options.locality_wait_share,
                 "congestion-aware: the share of its time since submission a job may also wait "
                 "for one leaf")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 1.0));
  std::string waits_arg;
  app.add_option("--try-locality-waits", waits_arg,
                 "Seconds, comma-separated: choose congestion-aware's locality wait among these "
                 "on the --tuned-on traces, then report the held-out ones with it");
  app.add_option("--csv", csv_path, "Also write every run's ratios here");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return ExitForParseError(app, e);
  }
  auto fail = [](const Status& st) {
    std::fprintf(stderr, "hai-sim sweep: %s\n", st.message().c_str());
    return 1;
  };
  const std::vector<std::string> traces = SplitList(traces_arg), tuned = SplitList(tuned_arg);
  for (const std::string& t : traces) {
    for (const std::string& u : tuned) {
      std::error_code ec;
      if (t == u || fs::equivalent(t, u, ec)) {
        return fail(InvalidArgument("trace " + t +
                                    " was tuned on (--tuned-on): a held-out report cannot use it"));
      }
    }
  }
  std::vector<Seconds> waits;
  for (const std::string& w : SplitList(waits_arg)) {
    char* end = nullptr;
    const long long v = std::strtoll(w.c_str(), &end, 10);
    if (end == w.c_str() || *end != '\0' || v < 0 || v > 7 * 86400) {
      return fail(InvalidArgument("--try-locality-waits: '" + w +
                                  "' is not a number of seconds in 0..604800"));
    }
    waits.push_back(v);
  }
  if (!waits.empty() && tuned.empty()) {
    return fail(InvalidArgument("--try-locality-waits needs --tuned-on: the traces to choose on"));
  }
  std::vector<double> loads;
  for (const std::string& l : SplitList(loads_arg)) {
    char* end = nullptr;
    const double v = std::strtod(l.c_str(), &end);
    if (end == l.c_str() || *end != '\0' || !(v >= 0.01 && v <= 1000)) {
      return fail(InvalidArgument("--loads: '" + l + "' is not a number in 0.01..1000"));
    }
    loads.push_back(v);
  }
  if (loads.empty()) return fail(InvalidArgument("--loads: none given"));
  auto seeds = ParseSeeds(seeds_arg);
  if (!seeds.ok()) return fail(seeds.status());
  std::ofstream csv;
  if (!csv_path.empty()) {
    csv.open(csv_path);
    if (!csv) return fail(InvalidArgument("--csv " + csv_path + ": cannot write there"));
  }
  auto topology = Topology::Load(cluster_path);
  if (!topology.ok()) return fail(topology.status());
  std::map<std::string, std::vector<TraceJob>> loaded;
  std::vector<std::string> to_load = traces;
  if (!waits.empty()) to_load.insert(to_load.end(), tuned.begin(), tuned.end());
  for (const std::string& t : to_load) {
    auto trace = LoadTrace(t);
    if (!trace.ok()) return fail(trace.status());
    if (limit > 0 && trace->size() > limit) trace->resize(limit);
    WorkloadRules rules;
    rules.gpus_per_node = topology->max_gpus_per_node();
    const std::vector<JobRequest> jobs = MakeWorkload(*trace, rules);
    for (std::size_t i = 0; i < jobs.size(); ++i) {
      const TraceJob& j = (*trace)[i];
      if (jobs[i].TotalGpus() > topology->total_gpus()) {
        return fail(InvalidArgument(t + ":" + std::to_string(j.line) + ": job " + j.id +
                                    " asks for " + std::to_string(j.gpus) +
                                    " GPUs, more than cluster '" + topology->name() + "' has (" +
                                    std::to_string(topology->total_gpus()) + ")"));
      }
    }
    loaded[t] = std::move(*trace);
  }

  std::vector<Run> runs = MakeRuns(traces, loads, *seeds);
  if (!waits.empty()) {
    std::vector<Run> tuning_runs = MakeRuns(tuned, loads, *seeds);
    std::printf("tuning the locality wait on %zu traces (%zu runs each):\n", tuned.size(),
                tuning_runs.size());
    std::printf("%-14s %18s %18s %14s %14s\n", "locality wait", "cross-leaf/slurm", "cross-leaf/ff",
                "worst JCT/ff", "worst JCT/slurm");
    double best_score = INFINITY, best_jct = INFINITY;
    Seconds chosen = -1, fallback = -1;
    for (Seconds wait : waits) {
      std::vector<Run> trial = tuning_runs;
      PolicyOptions o = policy_options;
      o.locality_wait = wait;
      if (Status st = SimulateRuns(&trial, *topology, loaded, o, threads, /*control=*/false);
          !st.ok())
        return fail(st);
      const Stats cl_slurm = Column(trial, &Run::cl_slurm, ""),
                  cl_ff = Column(trial, &Run::cl_ff, "");
      const double worst_jct =
          std::max(Column(trial, &Run::jct_ff, "").worst, Column(trial, &Run::jct_slurm, "").worst);
      std::printf("%-14s %18s %18s %14s %14s\n", FormatDuration(wait).c_str(),
                  Fmt(cl_slurm.median).c_str(), Fmt(cl_ff.median).c_str(),
                  Fmt(Column(trial, &Run::jct_ff, "").worst).c_str(),
                  Fmt(Column(trial, &Run::jct_slurm, "").worst).c_str());
      // JCT "never worse" with rounding: within half a percent.
      if (worst_jct <= 1.005 && cl_slurm.median < best_score) {
        best_score = cl_slurm.median;
        chosen = wait;
      }
      if (worst_jct < best_jct) {
        best_jct = worst_jct;
        fallback = wait;
      }
    }
    if (chosen < 0) chosen = fallback;
    policy_options.locality_wait = chosen;
    std::printf("chosen: locality wait %s\n\n", FormatDuration(chosen).c_str());
  }
  if (Status st = SimulateRuns(&runs, *topology, loaded, policy_options, threads,
                               /*control=*/true);
      !st.ok()) {
    return fail(st);
  }
  std::printf(
      "hai-sim sweep on %s (%d GPUs): %zu traces held out%s%s, loads %s, seeds %s, locality wait "
      "%s, share %g\n",
      topology->name().c_str(), topology->total_gpus(), traces.size(),
      tuned.empty() ? "" : "; tuned on ", tuned_arg.c_str(), loads_arg.c_str(), seeds_arg.c_str(),
      FormatDuration(policy_options.locality_wait).c_str(), policy_options.locality_wait_share);
  std::printf(
      "waits in hours, mean / p95 (every wait of a job, after suspensions too); ours: "
      "congestion-aware; control: first-fit with each arrival moved by 0 or 1 s over first-fit, "
      "cross-leaf / mean JCT (the noise under each ratio)\n");
  std::printf("%-12s %6s %5s %14s %16s %8s %10s %10s %13s %13s %13s %13s\n", "trace", "load",
              "seed", "cross-leaf/ff", "cross-leaf/slurm", "JCT/ff", "JCT/slurm", "ff TB",
              "wait ours", "wait ff", "wait slurm", "control");
  if (csv) {
    csv << "trace,load,seed,cross_leaf_vs_ff,cross_leaf_vs_slurm,jct_vs_ff,jct_vs_slurm,"
           "ff_cross_leaf_tb,mean_wait_s,p95_wait_s,ff_mean_wait_s,ff_p95_wait_s,"
           "slurm_mean_wait_s,slurm_p95_wait_s,control_cross_leaf_vs_ff,control_jct_vs_ff\n";
  }
  for (const Run& run : runs) {
    const Run::Figures &ff = run.by_policy.at("first-fit"), &slurm = run.by_policy.at("slurm-tree"),
                       &ours = run.by_policy.at("congestion-aware");
    auto wait_of = [](const Run::Figures& f) {
      return Hours(f.mean_wait) + "/" + Hours(f.p95_wait);
    };
    std::printf("%-12s %5gx %5llu %14s %16s %8s %10s %10.1f %13s %13s %13s %13s\n",
                run.trace.c_str(), run.load, static_cast<unsigned long long>(run.seed),
                Fmt(run.cl_ff).c_str(), Fmt(run.cl_slurm).c_str(), Fmt(run.jct_ff).c_str(),
                Fmt(run.jct_slurm).c_str(), run.ff_tb, wait_of(ours).c_str(), wait_of(ff).c_str(),
                wait_of(slurm).c_str(), (Fmt(run.ctl_cl) + "/" + Fmt(run.ctl_jct)).c_str());
    if (csv) {
      csv << run.trace << "," << run.load << "," << run.seed << "," << run.cl_ff << ","
          << run.cl_slurm << "," << run.jct_ff << "," << run.jct_slurm << "," << run.ff_tb << ","
          << ours.mean_wait << "," << ours.p95_wait << "," << ff.mean_wait << "," << ff.p95_wait
          << "," << slurm.mean_wait << "," << slurm.p95_wait << "," << run.ctl_cl << ","
          << run.ctl_jct << "\n";
    }
  }
  auto cell = [](const Stats& s) { return Fmt(s.median) + " (" + Fmt(s.worst) + ")"; };
  std::vector<std::string> names;
  for (const Run& r : runs) {
    if (std::find(names.begin(), names.end(), r.trace) == names.end()) names.push_back(r.trace);
  }
  names.push_back("");  // all
  auto table = [&](double load) {
    std::printf("%-12s %16s %16s %16s %16s %12s %14s\n", "trace", "cross-leaf/ff",
                "cross-leaf/slurm", "JCT/ff", "JCT/slurm", "mean wait", "control JCT");
    for (const std::string& t : names) {
      std::vector<double> ours_waits;  // congestion-aware's mean wait over these runs, in hours
      for (const Run& r : runs) {
        if ((t.empty() || r.trace == t) && (load == 0 || r.load == load))
          ours_waits.push_back(r.by_policy.at("congestion-aware").mean_wait / 3600);
      }
      const Stats w = Summarise(ours_waits);
      std::printf("%-12s %16s %16s %16s %16s %12s %14s\n", t.empty() ? "all" : t.c_str(),
                  cell(Column(runs, &Run::cl_ff, t, load)).c_str(),
                  cell(Column(runs, &Run::cl_slurm, t, load)).c_str(),
                  cell(Column(runs, &Run::jct_ff, t, load)).c_str(),
                  cell(Column(runs, &Run::jct_slurm, t, load)).c_str(),
                  (Fmt(w.median) + "h").c_str(), Range(runs, &Run::ctl_jct, t, load).c_str());
    }
  };
  for (double load : loads) {
    std::printf(
        "\nat load %gx: median (worst) per trace over seeds; mean wait: congestion-aware's "
        "median over runs; control JCT: the control's mean JCT over first-fit's, lowest..highest\n",
        load);
    table(load);
  }
  std::printf("\nall loads: median (worst) per trace over loads and seeds\n");
  table(0);
  const Stats cl_ff = Column(runs, &Run::cl_ff, ""), cl_slurm = Column(runs, &Run::cl_slurm, ""),
              jct_ff = Column(runs, &Run::jct_ff, ""),
              jct_slurm = Column(runs, &Run::jct_slurm, "");
  if (cl_ff.skipped + cl_slurm.skipped > 0) {
    std::printf(
        "left out: %zu runs where first-fit, %zu where slurm-tree moved nothing across "
        "leaves (0 / 0)\n",
        cl_ff.skipped, cl_slurm.skipped);
  }
  std::printf(
      "control (first-fit, arrivals moved by 0 or 1 s, vs first-fit): cross-leaf %s, mean JCT "
      "%s\n",
      Range(runs, &Run::ctl_cl, "").c_str(), Range(runs, &Run::ctl_jct, "").c_str());
  std::printf(
      "hai-sim sweep: cross-leaf vs first-fit median %s (worst %s), vs slurm-tree median %s "
      "(worst %s); mean JCT vs first-fit median %s (worst %s), vs slurm-tree median %s (worst "
      "%s)\n",
      Fmt(cl_ff.median).c_str(), Fmt(cl_ff.worst).c_str(), Fmt(cl_slurm.median).c_str(),
      Fmt(cl_slurm.worst).c_str(), Fmt(jct_ff.median).c_str(), Fmt(jct_ff.worst).c_str(),
      Fmt(jct_slurm.median).c_str(), Fmt(jct_slurm.worst).c_str());
  return 0;
}

int GenerateMain(int argc, char** argv) {
  CLI::App app("Write a synthetic job trace (ITP format) for a cluster", "hai-sim generate");
  SyntheticWorkload w;
  std::string cluster_path = "deploy/config/cluster-fireflyer2.toml", out;
  app.add_option("--cluster", cluster_path, "cluster.toml: its GPUs and GPUs per node")
      ->capture_default_str();
  app.add_option("--jobs", w.jobs, "How many jobs")
      ->capture_default_str()
      ->check(CLI::Range(std::size_t{1}, std::size_t{10000000}));
  app.add_option("--load", w.load,
                 "Offered load: GPU-seconds asked per second, over the cluster's GPUs (above 1 "
                 "queues)")
      ->capture_default_str()
      ->check(CLI::Range(0.01, 100.0));
  app.add_option("--seed", w.seed, "Seed")->capture_default_str();
  app.add_option("--max-nodes", w.max_nodes, "Largest job, in nodes")
      ->capture_default_str()
      ->check(CLI::Range(1, 100000));
  app.add_option("--median-duration", w.median_duration, "Median job duration, seconds")
      ->capture_default_str()
      ->check(CLI::Range(300, 7 * 86400));
  app.add_option("--out", out, "Trace file to write")->required();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return ExitForParseError(app, e);
  }
  auto topology = Topology::Load(cluster_path);
  if (!topology.ok()) {
    std::fprintf(stderr, "hai-sim generate: %s\n", topology.status().message().c_str());
    return 1;
  }
  w.cluster_gpus = topology->total_gpus();
  w.gpus_per_node = topology->max_gpus_per_node();
  const std::vector<TraceJob> jobs = GenerateWorkload(w);
  std::ofstream file(out);
  file << FormatTrace(jobs);
  file.close();
  if (!file) {
    std::fprintf(stderr, "hai-sim generate: cannot write %s\n", out.c_str());
    return 1;
  }
  std::printf(
      "hai-sim generate: %zu jobs for %s (%d GPUs), load %g, seed %llu, over %.1f days: "
      "%s\n",
      jobs.size(), topology->name().c_str(), w.cluster_gpus, w.load,
      static_cast<unsigned long long>(w.seed), static_cast<double>(jobs.back().submit) / 86400,
      out.c_str());
  return 0;
}

}  // namespace ff::scheduler
