// scheduler-bench: the time of one scheduling round on a Fire-Flyer-sized cluster (1,250 nodes of
// 8 GPUs, deploy/config/cluster-fireflyer2.toml) with 500 running and 1,000 queued jobs, for each
// placement policy. Each repetition times exactly one round (one iteration), so the statistics
// are over rounds: the p99 row is the wall-clock p99 of single rounds (the Time column; CPU beside
// it), not of per-repetition averages. The last line gives each policy's wall-clock p99.
//
//   build/scheduler/scheduler-bench [--benchmark_repetitions=N]   # N rounds per policy (100)
#include <benchmark/benchmark.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "scheduler/scheduler.h"

namespace ff::scheduler {
namespace {

struct Scenario {
  std::unique_ptr<Topology> topology;
  std::unique_ptr<ClusterState> state;
  std::vector<JobRequest> queue;
};

JobRequest RandomJob(JobId id, std::mt19937_64& rng) {
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  JobRequest j;
  j.id = id;
  j.user = "user" + std::to_string(pick(0, 49));
  j.priority = pick(0, 6);
  // Sizes after the ITP traces: mostly 1 GPU, then 8, some 16..64 GPUs (2..8 nodes).
  int r = pick(0, 99);
  if (r < 55) {
    j.nodes = 0;
    j.gpus = 1 << pick(0, 2);
    j.comm = CommKind::kNone;
  } else if (r < 85) {
    j.nodes = 1;
  } else {
    j.nodes = 2 << pick(0, 3);
    j.comm = pick(0, 4) == 0 ? CommKind::kPipeline : CommKind::kAllreduce;
    j.traffic_gbps = 50 + pick(0, 100);
  }
  j.expected_runtime = pick(600, 86400);
  j.submit_time = id;
  return j;
}

const Scenario& GetScenario(const std::string& policy) {
  static std::map<std::string, Scenario> cache;
  auto it = cache.find(policy);
  if (it != cache.end()) return it->second;
  Scenario s;
  auto topology =
      Topology::Load(std::string(FF_SOURCE_DIR) + "/deploy/config/cluster-fireflyer2.toml");
  if (!topology.ok()) {
    std::fprintf(stderr, "%s\n", topology.status().ToString().c_str());
    std::exit(1);
  }
  s.topology = std::make_unique<Topology>(std::move(*topology));
  s.state = std::make_unique<ClusterState>(*s.topology);
  std::mt19937_64 rng(2024);
  auto placer = MakePlacementPolicy(policy);
  JobId id = 1;
  int running = 0;
  while (running < 500) {
    JobRequest j = RandomJob(id++, rng);
    std::string why;
    Placement p = placer->Place(j, *s.state, &why);
    if (!p.empty() && s.state->Allocate(j, p, 0).ok()) ++running;
  }
  for (int i = 0; i < 1000; ++i)
    s.queue.push_back(RandomJob(id++, rng));
  return cache.emplace(policy, std::move(s)).first->second;
}

void BM_SchedulingRound(benchmark::State& bench, const std::string& policy) {
  const Scenario& s = GetScenario(policy);
  Scheduler scheduler(MakePlacementPolicy(policy));
  std::size_t started = 0;
  for (auto _ : bench) {
    Decision d = scheduler.Decide(*s.state, s.queue, 1000);
    started = d.starts.size();
    benchmark::DoNotOptimize(d);
  }
  bench.counters["running"] = static_cast<double>(s.state->running().size());
  bench.counters["queued"] = static_cast<double>(s.queue.size());
  bench.counters["started"] = static_cast<double>(started);
}

double P99(const std::vector<double>& v) {
  std::vector<double> sorted = v;
  std::sort(sorted.begin(), sorted.end());
  return sorted[std::min(sorted.size() - 1, static_cast<std::size_t>(0.99 * sorted.size()))];
}

// `repetitions`: 0 leaves it to --benchmark_repetitions.
void Register(int repetitions) {
  for (const std::string& policy : PlacementPolicyNames()) {
    auto* b = benchmark::RegisterBenchmark(("round/" + policy).c_str(), BM_SchedulingRound, policy)
                  ->Unit(benchmark::kMillisecond)
                  ->Iterations(1)
                  ->ComputeStatistics("p99", P99)
                  ->ReportAggregatesOnly(true);
    if (repetitions > 0) b->Repetitions(repetitions);
  }
}

// The console table, then one line with each policy's wall-clock p99.
class Reporter : public benchmark::ConsoleReporter {
 public:
  Reporter() : ConsoleReporter(isatty(STDOUT_FILENO) ? OO_Color : OO_None) {}
  void ReportRuns(const std::vector<Run>& runs) override {
    ConsoleReporter::ReportRuns(runs);
    for (const Run& r : runs) {
      if (r.run_type != Run::RT_Aggregate) continue;
      if (r.aggregate_name == "p99") {
        const std::string name = r.run_name.function_name;
        p99_.push_back(name.substr(name.find('/') + 1) + " " + Format(r.GetAdjustedRealTime()) +
                       " ms");
      }
      if (r.aggregate_name == "mean") rounds_ = r.repetitions;
    }
  }
  void Finalize() override {
    ConsoleReporter::Finalize();
    std::string line;
    for (const std::string& p : p99_)
      line += (line.empty() ? "" : ", ") + p;
    std::printf(
        "scheduler-bench: one round (1,250 nodes, 500 running, 1,000 queued), wall-clock "
        "p99 of %lld rounds: %s\n",
        static_cast<long long>(rounds_), line.c_str());
  }

 private:
  static std::string Format(double ms) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.2f", ms);
    return buf;
  }
  std::vector<std::string> p99_;
  int64_t rounds_ = 0;
};

}  // namespace
}  // namespace ff::scheduler

int main(int argc, char** argv) {
  bool repetitions_given = false;
  for (int i = 1; i < argc; ++i)
    repetitions_given |= std::string(argv[i]).rfind("--benchmark_repetitions", 0) == 0;
  ff::scheduler::Register(repetitions_given ? 0 : 100);
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  ff::scheduler::Reporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  benchmark::Shutdown();
  return 0;
}
