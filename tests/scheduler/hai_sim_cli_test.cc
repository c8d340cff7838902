// hai-sim as a user runs it: a bad --out is refused with one line before any policy runs, and a
// good one gets the results.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>

#include "tests/support/subprocess.h"

namespace ff {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using namespace std::chrono_literals;

class HaiSimCliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    test::WriteFile(dir_.File("trace.csv"),
                    "job_id,submission_time,duration,num_gpu\na,0,100,8\nb,10,50,16\nc,20,30,1\n");
  }
  struct Run {
    int code = -1;
    std::string out, err;
  };
  Run Sim(const std::string& out, const std::string& trace = "trace.csv") {
    auto proc = test::Subprocess::Start(
        {FF_HAI_SIM_PATH, "--trace", dir_.File(trace), "--cluster",
         std::string(FF_SOURCE_DIR) + "/deploy/config/cluster-small.toml", "--out", out},
        {.env = {}, .output_dir = dir_.path()});
    EXPECT_TRUE(proc.ok()) << proc.status();
    if (!proc.ok()) return {};
    auto code = proc->Wait(120s);
    EXPECT_TRUE(code.has_value());
    return {code.value_or(-1), proc->Stdout(), proc->Stderr()};
  }
  Run Command(const std::vector<std::string>& args) {
    std::vector<std::string> argv = {FF_HAI_SIM_PATH};
    argv.insert(argv.end(), args.begin(), args.end());
    auto proc = test::Subprocess::Start(argv, {.env = {}, .output_dir = dir_.path()});
    EXPECT_TRUE(proc.ok()) << proc.status();
    if (!proc.ok()) return {};
    auto code = proc->Wait(120s);
    EXPECT_TRUE(code.has_value());
    return {code.value_or(-1), proc->Stdout(), proc->Stderr()};
  }
  const std::string small_ = std::string(FF_SOURCE_DIR) + "/deploy/config/cluster-small.toml";
  test::TempDir dir_;
};

// A synthetic trace for the small cluster (128 GPUs) that the sweep replays at two loads and two
// seeds: a table row per run, the per-trace summary, and the last line in its documented form.
TEST_F(HaiSimCliTest, GenerateThenSweepHeldOutTraces) {
  Run g = Command({"generate", "--cluster", small_, "--jobs", "300", "--load", "2", "--max-nodes",
                   "8", "--out", dir_.File("syn.csv")});
  ASSERT_EQ(g.code, 0) << g.err;
  EXPECT_THAT(g.out, HasSubstr("300 jobs for small (128 GPUs), load 2"));
  Run r = Command({"sweep", "--traces", dir_.File("syn.csv"), "--tuned-on", dir_.File("trace.csv"),
                   "--cluster", small_, "--loads", "1,3", "--seeds", "1-2", "--csv",
                   dir_.File("sweep.csv")});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("1 traces held out; tuned on"));
  // A row per run, with each policy's mean / p95 wait in hours, and the control's cross-leaf /
  // mean JCT over first-fit's (its cross-leaf is n/a or inf where first-fit sent nothing).
  EXPECT_THAT(r.out, ::testing::ContainsRegex("\nsyn +3x +2 +[0-9.]+ +[0-9.]+ +[0-9.]+ +[0-9.]+ "
                                              "+[0-9.]+ +[0-9.]+/[0-9.]+ +[0-9.]+/[0-9.]+ "
                                              "+[0-9.]+/[0-9.]+ +(n/a|[0-9.inf]+)/[0-9.]+\n"));
  // A table per load level, then over all loads.
  EXPECT_THAT(r.out, HasSubstr("\nat load 1x: median (worst) per trace over seeds"));
  EXPECT_THAT(r.out, HasSubstr("\nat load 3x: median (worst) per trace over seeds"));
  EXPECT_THAT(r.out, HasSubstr("\nall loads: median (worst) per trace over loads and seeds"));
  // The control's range over all runs: the noise under every ratio.
  EXPECT_THAT(r.out, ::testing::ContainsRegex(
                         "\ncontrol \\(first-fit, arrivals moved by 0 or 1 s, vs first-fit\\): "
                         "cross-leaf (n/a|[0-9.inf]+), mean JCT [0-9.]+\\.\\.[0-9.]+\n"));
  // The last line: median and worst of both figures against both baselines.
  EXPECT_THAT(r.out, ::testing::ContainsRegex(
                         "\nhai-sim sweep: cross-leaf vs first-fit median [0-9.]+ \\(worst "
                         "[0-9.]+\\), vs slurm-tree median [0-9.]+ \\(worst [0-9.]+\\); mean "
                         "JCT vs first-fit median [0-9.]+ \\(worst [0-9.]+\\), vs slurm-tree "
                         "median [0-9.]+ \\(worst [0-9.]+\\)\n$"));
  const std::string csv = test::ReadFileOrEmpty(dir_.File("sweep.csv"));
  EXPECT_EQ(std::count(csv.begin(), csv.end(), '\n'), 5) << csv;  // a header and 4 runs
  EXPECT_THAT(csv, HasSubstr(",control_cross_leaf_vs_ff,control_jct_vs_ff\n")) << csv;
}

// --try-locality-waits chooses the wait on the --tuned-on traces (one row per wait), then
// reports the held-out traces with the chosen one.
TEST_F(HaiSimCliTest, SweepChoosesTheLocalityWaitOnTheTunedTraces) {
  Run g = Command({"generate", "--cluster", small_, "--jobs", "200", "--load", "2", "--max-nodes",
                   "8", "--seed", "7", "--out", dir_.File("tune.csv")});
  ASSERT_EQ(g.code, 0) << g.err;
  Run r = Command({"sweep", "--traces", dir_.File("trace.csv"), "--tuned-on", dir_.File("tune.csv"),
                   "--try-locality-waits", "0,600", "--cluster", small_, "--loads", "2", "--seeds",
                   "1"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("tuning the locality wait on 1 traces (1 runs each)"));
  EXPECT_THAT(r.out, ::testing::ContainsRegex("\n0s +[0-9.na/]+ +[0-9.na/]+ +[0-9.]+ +[0-9.]+\n"));
  EXPECT_THAT(r.out, ::testing::ContainsRegex("\n10m +[0-9.na/]+ +[0-9.na/]+ +[0-9.]+ +[0-9.]+\n"));
  EXPECT_THAT(r.out, ::testing::ContainsRegex("chosen: locality wait (0s|10m)\n"));
  EXPECT_THAT(r.out, ::testing::ContainsRegex(
                         "1 traces held out; tuned on .*, locality wait (0s|10m), share 0.05\n"));
  r = Command({"sweep", "--traces", dir_.File("trace.csv"), "--try-locality-waits", "600",
               "--cluster", small_});
  EXPECT_EQ(r.code, 1);
  EXPECT_THAT(r.err, HasSubstr("--try-locality-waits needs --tuned-on"));
  r = Command({"sweep", "--traces", dir_.File("trace.csv"), "--tuned-on", dir_.File("tune.csv"),
               "--try-locality-waits", "ten", "--cluster", small_});
  EXPECT_EQ(r.code, 1);
  EXPECT_THAT(r.err, HasSubstr("--try-locality-waits: 'ten' is not a number of seconds"));
}

TEST_F(HaiSimCliTest, SweepRefusesATunedTraceAndBadSeeds) {
  Run r = Command({"sweep", "--traces", dir_.File("trace.csv"), "--tuned-on",
                   dir_.File("trace.csv"), "--cluster", small_});
  EXPECT_EQ(r.code, 1);
  EXPECT_THAT(r.err, HasSubstr("was tuned on (--tuned-on): a held-out report cannot use it"));
  r = Command({"sweep", "--traces", dir_.File("trace.csv"), "--seeds", "5-1", "--cluster", small_});
  EXPECT_EQ(r.code, 1);
  EXPECT_THAT(r.err, HasSubstr("--seeds: bad range '5-1'"));
  r = Command({"sweep", "--traces", dir_.File("trace.csv"), "--loads", "x", "--cluster", small_});
  EXPECT_EQ(r.code, 1);
  EXPECT_THAT(r.err, HasSubstr("--loads: 'x' is not a number"));
}

// hai-sim place, as the network lab's placement experiment runs it: on a fragmented lab tree,
// first-fit spreads two 3-node jobs over a shared uplink, the topology-aware policies keep every
// job under one leaf, and the model's slowdown follows the calibrated share of bandwidth-bound
// communication. Bad input is one line and exit 1.
TEST_F(HaiSimCliTest, PlaceShowsEachPolicysNodesAndTheModelsSlowdown) {
  const std::string lab = std::string(FF_SOURCE_DIR) + "/deploy/config/cluster-lab-place.toml";
  Run r = Command({"place", "--cluster", lab, "--busy", "L00-n01,L01-n02", "--job", "2:200:1",
                   "--job", "3:200:0.5", "--job", "3:200:0.5", "--comm-fraction", "0.5"});
  ASSERT_EQ(r.code, 0) << r.err;
  auto policy = [&](const std::string& name) {
    auto at = r.out.find("\"policy\": \"" + name + "\"");
    EXPECT_NE(at, std::string::npos) << r.out;
    auto end = r.out.find("\"policy\"", at + 1);
    return r.out.substr(at, end == std::string::npos ? std::string::npos : end - at);
  };
  const std::string ff = policy("first-fit"), ca = policy("congestion-aware");
  EXPECT_THAT(ff, HasSubstr("\"nodes\": [\"L00-n03\", \"L01-n00\", \"L01-n01\"], \"leaves\": 2"));
  EXPECT_THAT(ff, HasSubstr("\"nodes\": [\"L01-n03\", \"L02-n00\", \"L02-n01\"], \"leaves\": 2"));
  // L01's 100 Gb/s uplink carries both jobs' 200: load 4, slowdown 0.5 + 0.5 * 4, step
  // 0.5 + 0.5 * 2.5.
  EXPECT_THAT(ff, HasSubstr("\"uplink_load\": 4, \"slowdown\": 2.5, \"step_factor\": 1.75"));
  EXPECT_THAT(ca, ::testing::Not(HasSubstr("\"leaves\": 2"))) << ca;
  EXPECT_THAT(ca, HasSubstr("\"nodes\": [\"L02-n00\", \"L02-n01\", \"L02-n02\"], \"leaves\": 1"));
  EXPECT_THAT(policy("slurm-tree"), ::testing::Not(HasSubstr("\"leaves\": 2")));

  for (const auto& [args, error] : std::vector<std::pair<std::vector<std::string>, std::string>>{
           {{"--busy", "L09-n00", "--job", "2"}, "--busy: no node 'L09-n00'"},
           {{"--busy", "L00-n00,L00-n00", "--job", "2"}, "node 'L00-n00' given twice"},
           {{"--job", "2:x"}, "--job '2:x': expected NODES"},
           {{"--job", "2:100:1.5"}, "--job '2:100:1.5': expected NODES"},
           {{"--job", "13"}, "cannot place job 1 (13 nodes)"},
           {{"--job", "2", "--policies", "random"}, "unknown policy 'random'"}}) {
    std::vector<std::string> argv = {"place", "--cluster", lab};
    argv.insert(argv.end(), args.begin(), args.end());
    Run bad = Command(argv);
    EXPECT_EQ(bad.code, 1) << error;
    EXPECT_THAT(bad.err, HasSubstr(error));
    EXPECT_EQ(bad.out, "");
  }
}

TEST_F(HaiSimCliTest, AnOutPathThatIsAFileOrUncreatableIsRefusedBeforeRunning) {
  test::WriteFile(dir_.File("taken"), "a file");
  for (const std::string& bad :
       {dir_.File("taken"), dir_.File("taken") + "/sub", std::string("/proc/hai-sim-results")}) {
    Run r = Sim(bad);
    EXPECT_EQ(r.code, 1) << bad;
    EXPECT_THAT(r.err, HasSubstr("hai-sim: --out " + bad + ": cannot")) << r.err;
    EXPECT_THAT(r.err, ::testing::Not(HasSubstr("jobs from"))) << "ran before checking --out";
    EXPECT_THAT(r.err, ::testing::Not(HasSubstr("terminate"))) << r.err;
  }
  EXPECT_EQ(test::ReadFileOrEmpty(dir_.File("taken")), "a file");
}

TEST_F(HaiSimCliTest, AJobTooBigIsNamedByItsLineAndIdBeforeRunning) {
  // Sorted by submission, job "huge" would be the first; the message names its line (3) and id.
  test::WriteFile(dir_.File("big.csv"),
                  "job_id,submission_time,duration,num_gpu\na,50,100,8\nhuge,0,100,100000\n");
  Run r = Sim(dir_.File("big-out"), "big.csv");
  EXPECT_EQ(r.code, 1);
  EXPECT_THAT(r.err, HasSubstr("big.csv:3: job huge asks for 100000 GPUs, more than cluster"))
      << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
}

TEST_F(HaiSimCliTest, GpuCountsRoundedToWholeNodesAreReportedOnce) {
  test::WriteFile(dir_.File("odd.csv"),
                  "job_id,submission_time,duration,num_gpu\na,0,100,12\nb,10,50,12\nc,20,30,8\n");
  Run r = Sim(dir_.File("odd-out"), "odd.csv");
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.err, HasSubstr("2 jobs ask for a GPU count that is not a multiple of 8 GPUs per "
                               "node (first: job a at line 2, 12 GPUs): each runs on whole nodes "
                               "(16 GPUs)"))
      << r.err;
  Run plain = Sim(dir_.File("plain-out"));
  EXPECT_THAT(plain.err, ::testing::Not(HasSubstr("not a multiple"))) << plain.err;
}

TEST_F(HaiSimCliTest, ReasonsOverTimeAsCsv) {
  // 16 nodes: job big (16 nodes) runs; job w (8 nodes) waits for it, then starts.
  test::WriteFile(dir_.File("wait.csv"),
                  "job_id,submission_time,duration,num_gpu\nbig,0,100,128\nw,10,50,64\n");
  Run r = Command({"--trace", dir_.File("wait.csv"), "--cluster", small_, "--policies",
                   "congestion-aware", "--out", dir_.File("why"), "--reasons"});
  ASSERT_EQ(r.code, 0) << r.err;
  const std::string csv = test::ReadFileOrEmpty(dir_.File("why/reasons-congestion-aware.csv"));
  EXPECT_THAT(csv, ::testing::StartsWith("time,job,reason\n0,1,\"\"\n"));
  EXPECT_THAT(csv, ::testing::ContainsRegex(
                       "10,2,\"needs 8 nodes with 8 free GPUs; 0 are free; expected to start in "
                       "1m30s, when running jobs reach their expected run times"));
  // Started when job 1 ended (at 100, later if its traffic crossing leaves slowed it).
  EXPECT_THAT(csv, ::testing::ContainsRegex("\n1[0-9][0-9],2,\"\"\n$"));
  // Without --reasons, no such file.
  EXPECT_FALSE(std::filesystem::exists(dir_.File("results/reasons-congestion-aware.csv")));
}

TEST_F(HaiSimCliTest, AGoodOutFolderGetsTheResults) {
  Run r = Sim(dir_.File("results/run1"));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(std::filesystem::exists(dir_.File("results/run1/results.csv")));
  EXPECT_TRUE(std::filesystem::exists(dir_.File("results/run1/jct-cdf.svg")));
  // The headline plot: traffic across leaves and zones over time, a line per policy and kind;
  // every title names trace, cluster, arrival rate and seed.
  const std::string traffic = test::ReadFileOrEmpty(dir_.File("results/run1/traffic.svg"));
  EXPECT_THAT(traffic, HasSubstr("Traffic across leaf uplinks and zones (trace on small, "
                                 "arrivals x1, seed 1)"));
  EXPECT_THAT(traffic, HasSubstr("congestion-aware cross-zone"));
  EXPECT_THAT(test::ReadFileOrEmpty(dir_.File("results/run1/utilisation.svg")),
              HasSubstr("GPU utilisation (trace on small, arrivals x1, seed 1)"));
  EXPECT_THAT(traffic, HasSubstr("stroke-dasharray"));  // overlapping lines stay visible
  EXPECT_FALSE(std::filesystem::exists(dir_.File("results/run1/.hai-sim-write-test")));
}

// Fault-tolerant jobs and failing nodes: the failures table, and its columns in results.csv.
TEST_F(HaiSimCliTest, FailuresAndReplacementsAreReportedPerPolicy) {
  std::string trace = "job_id,submission_time,duration,num_gpu\n";
  for (int i = 0; i < 40; ++i) {
    trace += "j" + std::to_string(i) + "," + std::to_string(i * 600) + "," +
             std::to_string(20000 + i * 500) + "," + std::to_string(i % 2 ? 32 : 16) + "\n";
  }
  test::WriteFile(dir_.File("ft.csv"), trace);
  Run r =
      Command({"--trace", dir_.File("ft.csv"), "--cluster", small_, "--out", dir_.File("ft-out"),
               "--ft-share", "1", "--node-mtbf-hours", "50", "--node-repair-hours", "2"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("failures: a node fails every 50h on average, out 2h; 40 "
                               "fault-tolerant jobs"));
  EXPECT_THAT(r.out, ::testing::ContainsRegex("congestion-aware +[1-9][0-9]* +[0-9]+ +[0-9.]+h +"
                                              "[1-9][0-9]* +[0-9.]+h"));
  const std::string csv = test::ReadFileOrEmpty(dir_.File("ft-out/results.csv"));
  EXPECT_THAT(csv, HasSubstr(",node_failures,failure_requeues,failure_lost_gpu_hours,"
                             "replacements_placed,lost_group_hours\n"));
  // Without --node-mtbf-hours there is no failures table.
  r = Command({"--trace", dir_.File("ft.csv"), "--cluster", small_, "--ft-share", "1"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, ::testing::Not(HasSubstr("failures:")));
}

// Jobs that queue and preempt (priorities are drawn per job): the preemption table has a row of
// the default victim order and one of the newest-first replay, and the last line compares them;
// chosen newest-first, there is nothing to compare.
TEST_F(HaiSimCliTest, PreemptionsCostIsComparedWithNewestFirstVictims) {
  std::string trace = "job_id,submission_time,duration,num_gpu\n";
  for (int i = 0; i < 60; ++i) {
    trace += "j" + std::to_string(i) + "," + std::to_string(i * 300) + "," +
             std::to_string(5000 + i * 200) + "," + std::to_string(i % 3 ? 16 : 32) + "\n";
  }
  test::WriteFile(dir_.File("busy.csv"), trace);
  Run r = Command({"--trace", dir_.File("busy.csv"), "--cluster", small_, "--policies",
                   "congestion-aware", "--checkpoint-interval", "900"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("preemption: checkpoints every 15m, 10 GB a GPU (median; each "
                               "job's x/4) at 0.5 GB/s a GPU, 80% of jobs report theirs"));
  EXPECT_THAT(r.out,
              ::testing::ContainsRegex("congestion-aware +least-lost +[1-9][0-9]* +[0-9.]+"));
  EXPECT_THAT(r.out, ::testing::ContainsRegex("congestion-aware +newest-first +[1-9][0-9]* +"));
  EXPECT_THAT(r.out, ::testing::ContainsRegex(
                         "\npreemption: lost GPU-h [0-9.]+x of newest-first, hp wait [0-9.]+x\n$"));
  r = Command({"--trace", dir_.File("busy.csv"), "--cluster", small_, "--policies",
               "congestion-aware", "--victim-order", "newest-first"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, ::testing::ContainsRegex("congestion-aware +newest-first +[1-9]"));
  EXPECT_THAT(r.out, Not(HasSubstr("x of newest-first")));
}

// A command line that does not parse exits 2 with CLI11's one-line error, as the tools' other
// usage errors do (not CLI11's 100-series codes); --help exits 0.
TEST_F(HaiSimCliTest, ACommandLineThatDoesNotParseExitsTwo) {
  Run r = Command({"--trace", dir_.File("trace.csv"), "--no-such-flag"});
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_THAT(r.err, HasSubstr("--no-such-flag"));
  EXPECT_EQ(Command({"--trace", dir_.File("trace.csv"), "--seed", "many"}).code, 2);
  EXPECT_EQ(Command({"topology"}).code, 2);  // --cluster is required
  EXPECT_EQ(Command({"--help"}).code, 0);
}

}  // namespace
}  // namespace ff
