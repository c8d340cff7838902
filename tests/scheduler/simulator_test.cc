#include "scheduler/simulator.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "small_cluster.h"

namespace ff::scheduler {
namespace {

class SimulatorTest : public SmallClusterTest {
 protected:
  static JobRequest Job(JobId id, int nodes, Seconds submit, Seconds duration, int priority = 3) {
    JobRequest j;
    j.id = id;
    j.user = "u" + std::to_string(id);
    j.priority = priority;
    j.nodes = nodes;
    j.gpus_per_node = 8;
    j.comm = nodes > 1 ? CommKind::kAllreduce : CommKind::kNone;
    j.traffic_gbps = 400;
    j.submit_time = submit;
    j.expected_runtime = duration;
    return j;
  }

  SimulationResult Run(const std::vector<JobRequest>& jobs, const std::string& policy) {
    auto r = Simulate(*topology_, jobs, policy, SimulationOptions{});
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? *r : SimulationResult{};
  }
};

TEST_F(SimulatorTest, UncontendedJobsRunForTheirDuration) {
  SimulationResult r = Run({Job(1, 1, 0, 100), Job(2, 4, 10, 200)}, "congestion-aware");
  ASSERT_EQ(r.jobs.size(), 2u);
  EXPECT_EQ(r.jobs[0].finish, 100);
  EXPECT_EQ(r.jobs[1].first_start, 10);
  EXPECT_EQ(r.jobs[1].finish, 210);  // four nodes in one leaf: no uplink traffic
  EXPECT_DOUBLE_EQ(r.cross_leaf_tb, 0);
  EXPECT_EQ(r.makespan, 210);
  EXPECT_GT(r.gpu_utilisation, 0);
  EXPECT_LE(r.gpu_utilisation, 1);
}

// The model's slowdown, as hai-sim place and the simulator use it: two jobs across the same two
// leaves load each 400 Gb/s uplink with 600 Gb/s; only the bandwidth-bound share b slows.
TEST_F(SimulatorTest, CommSlowdownIsTheBandwidthBoundShareOfUplinkOverload) {
  JobRequest a = Job(1, 2, 0, 100), b = Job(2, 2, 0, 100), inside = Job(3, 2, 0, 100);
  a.traffic_gbps = b.traffic_gbps = 300;  // each loads both leaves' uplinks with 300
  ASSERT_TRUE(state_->Allocate(a, Placement{{3, 4}, 8}, 0).ok());
  PerformanceModel model;
  EXPECT_DOUBLE_EQ(CommSlowdown(*state_, 1, model), 1);  // 300 of 400: not congested
  ASSERT_TRUE(state_->Allocate(b, Placement{{2, 5}, 8}, 0).ok());
  ASSERT_TRUE(state_->Allocate(inside, Placement{{0, 1}, 8}, 0).ok());
  EXPECT_DOUBLE_EQ(CommSlowdown(*state_, 1, model), 1.5);  // b = 1 (default): 600 / 400
  EXPECT_DOUBLE_EQ(CommSlowdown(*state_, 3, model), 1);    // under one leaf: no uplink
  EXPECT_DOUBLE_EQ(CommSlowdown(*state_, 99, model), 1);   // not running
  model.bandwidth_bound_share = 0.4;
  EXPECT_DOUBLE_EQ(CommSlowdown(*state_, 2, model), 0.6 + 0.4 * 1.5);
  model.bandwidth_bound_share = 0;
  EXPECT_DOUBLE_EQ(CommSlowdown(*state_, 2, model), 1);
  // The progress rate: f = 0.3 of the step communicates.
  model.bandwidth_bound_share = 1;
  EXPECT_DOUBLE_EQ(ProgressRate(*state_, a, model), 1 / (0.7 + 0.3 * 1.5));
  EXPECT_DOUBLE_EQ(ProgressRate(*state_, inside, model), 1);
}

TEST_F(SimulatorTest, OversubscribedUplinksSlowJobsThatCrossLeaves) {
  // Six nodes cannot fit one leaf (4 nodes): the job crosses a 400 Gb/s uplink with more traffic
  // than that, so its communication slows down and it finishes late.
  SimulationResult r = Run({Job(1, 6, 0, 1000)}, "congestion-aware");
  EXPECT_GT(r.jobs[0].finish, 1000);
  EXPECT_GT(r.cross_leaf_tb, 0);
  // Interleaving ranks across leaves (first-fit fills nodes in order; here equal) is never better.
  SimulationOptions every_100s;
  every_100s.sample_interval = 100;
  auto sampled = Simulate(*topology_, {Job(1, 6, 0, 1000)}, "congestion-aware", every_100s);
  ASSERT_TRUE(sampled.ok());
  ASSERT_GE(sampled->traffic_series.size(), 10u);
  EXPECT_EQ(sampled->traffic_series.size(), sampled->utilisation_series.size());
  EXPECT_EQ(sampled->traffic_series[5].time, 500);
  EXPECT_GT(sampled->traffic_series[5].cross_leaf_gbps, 0);  // while it ran
  SimulationResult ff = Run({Job(1, 6, 0, 1000)}, "first-fit");
  EXPECT_GE(ff.jobs[0].finish, r.jobs[0].finish);
}

TEST_F(SimulatorTest, QueuedJobsWaitAndHighPriorityPreempts) {
  // A long low-priority job takes all 16 nodes (may span zones); a high-priority job arrives.
  JobRequest big = Job(1, 16, 0, 10000, /*priority=*/1);
  big.comm = CommKind::kNone;
  JobRequest urgent = Job(2, 4, 1000, 100, /*priority=*/5);
  SimulationResult r = Run({big, urgent}, "congestion-aware");
  EXPECT_EQ(r.preemptions, 1);
  EXPECT_EQ(r.jobs[1].first_start, 1000);  // started at once, by suspending the big job
  EXPECT_EQ(r.jobs[0].preemptions, 1);
  EXPECT_GT(r.jobs[0].finish, 10000);  // it lost the work since its last checkpoint, and waited
}

TEST_F(SimulatorTest, ReasonsOverTimeNameThePreemptingJob) {
  JobRequest big = Job(1, 16, 0, 10000, /*priority=*/1);
  big.comm = CommKind::kNone;
  JobRequest urgent = Job(2, 4, 1000, 100, /*priority=*/5);
  SimulationOptions options;
  options.record_reasons = true;
  auto r = Simulate(*topology_, {big, urgent}, "congestion-aware", options);
  ASSERT_TRUE(r.ok()) << r.status();
  std::vector<std::string> big_history;
  for (const auto& c : r->pending_history) {
    if (c.job == 1) big_history.push_back(std::to_string(c.time) + " " + c.reason);
  }
  // Started at 0; suspended at 1000 for job 2; started again at 1100 when job 2 ended (no round
  // in between, so no other reason).
  ASSERT_EQ(big_history.size(), 3u) << ::testing::PrintToString(big_history);
  EXPECT_EQ(big_history[0], "0 ");
  EXPECT_EQ(big_history[1], "1000 suspended for job 2 (priority 5)");
  EXPECT_EQ(big_history[2], "1100 ");
  // Off by default: nothing recorded.
  EXPECT_TRUE(Run({big, urgent}, "congestion-aware").pending_history.empty());
}

TEST_F(SimulatorTest, ALocalityWaitEndsWithARoundOfItsOwn) {
  // Four long 3-node jobs leave one node free in every leaf; a 2-node job arrives at t=10 and
  // nothing else happens. Congestion-aware holds it for its locality wait, then starts it across
  // two leaves: the simulator must run a round when the wait runs out, not at the next arrival
  // or completion.
  std::vector<JobRequest> jobs;
  for (int i = 0; i < 4; ++i) {
    JobRequest busy = Job(10 + i, 3, 0, 100000);
    busy.comm = CommKind::kNone;
    jobs.push_back(busy);
  }
  jobs.push_back(Job(1, 2, 10, 1000));
  SimulationOptions options;
  options.policy.locality_wait = 600;
  options.scheduler.preemption = false;
  auto r = Simulate(*topology_, jobs, "congestion-aware", options);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->jobs[4].first_start, 610);
  EXPECT_GT(r->cross_leaf_tb, 0);
  // slurm-tree does not wait.
  auto s = Simulate(*topology_, jobs, "slurm-tree", options);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->jobs[4].first_start, 10);
}

TEST_F(SimulatorTest, DeterministicAndCompleteOnATrace) {
  std::vector<JobRequest> jobs;
  for (int i = 0; i < 200; ++i) {
    jobs.push_back(Job(i + 1, 1 + (i * 7) % 6, i * 30, 200 + (i * 37) % 900, 2 + i % 3));
  }
  for (const std::string& policy : PlacementPolicyNames()) {
    SimulationResult a = Run(jobs, policy);
    SimulationResult b = Run(jobs, policy);
    ASSERT_EQ(a.jobs.size(), jobs.size());
    EXPECT_EQ(a.mean_jct, b.mean_jct) << policy;
    EXPECT_EQ(a.cross_leaf_tb, b.cross_leaf_tb) << policy;
    for (const JobOutcome& j : a.jobs) {
      EXPECT_GE(j.first_start, j.submit) << policy;
      EXPECT_GT(j.finish, j.first_start) << policy;
    }
  }
}

TEST_F(SimulatorTest, RejectsJobsThatCanNeverFitAndUnknownPolicies) {
  EXPECT_EQ(Simulate(*topology_, {Job(1, 17, 0, 10)}, "congestion-aware", {}).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(Simulate(*topology_, {Job(1, 1, 0, 10)}, "random", {}).status().code(),
            StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace ff::scheduler
