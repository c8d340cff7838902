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
  // Six nodes cannot fit one leaf (4 nodes): the job's trees cross a 400 Gb/s uplink once each,
  // with half of its 1000 Gb/s each, more than the uplink carries, so its communication slows
  // down and it finishes late.
  JobRequest heavy = Job(1, 6, 0, 1000);
  heavy.traffic_gbps = 1000;
  SimulationResult r = Run({heavy}, "congestion-aware");
  EXPECT_GT(r.jobs[0].finish, 1000);
  EXPECT_GT(r.cross_leaf_tb, 0);
  // Interleaving ranks across leaves (first-fit fills nodes in order; here equal) is never better.
  SimulationOptions every_100s;
  every_100s.sample_interval = 100;
  auto sampled = Simulate(*topology_, {heavy}, "congestion-aware", every_100s);
  ASSERT_TRUE(sampled.ok());
  ASSERT_GE(sampled->traffic_series.size(), 10u);
  EXPECT_EQ(sampled->traffic_series.size(), sampled->utilisation_series.size());
  EXPECT_EQ(sampled->traffic_series[5].time, 500);
  EXPECT_GT(sampled->traffic_series[5].cross_leaf_gbps, 0);  // while it ran
  SimulationResult ff = Run({heavy}, "first-fit");
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
  options.checkpoints.reporting_share = 0;  // it leaves at once (saving nothing)
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

TEST_F(SimulatorTest, ASuspendedJobThatSavesHoldsItsNodesWhileItWritesAndLosesOnlyARestart) {
  // The big job checkpoints every 300 s, 20 s a save (10 GB a GPU at 0.5 GB/s), and reports them:
  // suspended at t=1000, it is given 1.5 x 20 + 10 = 40 s, saves in 20 s, and the urgent job
  // starts on its nodes at t=1020. It loses no work, but pays the save and a restart (60 s
  // start-up and 20 s reading the checkpoint back): 128 GPUs x 100 s. Not reporting, it leaves at
  // once and loses the 100 s since its checkpoint at t=900, and the restart.
  JobRequest big = Job(1, 16, 0, 10000, /*priority=*/1);
  big.comm = CommKind::kNone;
  JobRequest urgent = Job(2, 4, 1000, 100, /*priority=*/5);
  urgent.comm = CommKind::kNone;
  SimulationOptions options;
  options.checkpoints.spread = 1;
  options.checkpoints.reporting_share = 1;
  auto saves = Simulate(*topology_, {big, urgent}, "first-fit", options);
  ASSERT_TRUE(saves.ok()) << saves.status();
  EXPECT_EQ(saves->saved_on_suspend, 1);
  EXPECT_EQ(saves->jobs[1].first_start, 1000);  // placed (holding the nodes) at once,
  EXPECT_EQ(saves->jobs[1].waited, 20);         // working once the big job has saved
  EXPECT_EQ(saves->jobs[1].finish, 1120);
  EXPECT_EQ(saves->jobs[0].finish, 1120 + 9000 + 80);
  EXPECT_NEAR(saves->preemption_lost_gpu_hours, 128 * 100 / 3600.0, 1e-9);

  options.checkpoints.reporting_share = 0;
  auto unsaved = Simulate(*topology_, {big, urgent}, "first-fit", options);
  ASSERT_TRUE(unsaved.ok()) << unsaved.status();
  EXPECT_EQ(unsaved->suspended_unsaved, 1);
  EXPECT_EQ(unsaved->jobs[1].waited, 0);
  EXPECT_EQ(unsaved->jobs[0].finish, 1100 + 9100 + 80);
  EXPECT_NEAR(unsaved->preemption_lost_gpu_hours, 128 * (100 + 80) / 3600.0, 1e-9);

  // A save longer than the most an admin allows (15 s): it tries, is killed at its deadline, and
  // loses the work since its checkpoint too.
  options.checkpoints.reporting_share = 1;
  options.scheduler.suspend.min_deadline = 10;
  options.scheduler.suspend.max_deadline = 15;
  auto killed = Simulate(*topology_, {big, urgent}, "first-fit", options);
  ASSERT_TRUE(killed.ok()) << killed.status();
  EXPECT_EQ(killed->killed_at_deadline, 1);
  EXPECT_EQ(killed->jobs[1].waited, 15);
  EXPECT_NEAR(killed->preemption_lost_gpu_hours, 128 * (100 + 15 + 80) / 3600.0, 1e-9);
}

TEST_F(SimulatorTest, ALocalityWaitEndsWithARoundOfItsOwn) {
  // Long jobs without traffic fill leaves 0 and 1 but for three nodes, which the 3-node job J
  // (t=1) takes across them, crowding their uplinks; zone B keeps one node free per leaf. The
  // 2-node job H (t=10) sends more than an uplink holds, so spreading would cost it dearly; J is
  // expected to end at t=1001 and free two nodes in leaf 0, so H waits for that, up to the
  // 2000 s cap. J, slowed by its own congestion, ends later than expected: the wait runs out at
  // t=2010 with nothing else happening, and the simulator must run a round then (not at J's end)
  // to start H across leaves 2 and 3.
  auto quiet = [&](JobId id, int nodes) {
    JobRequest j = Job(id, nodes, 0, 100000);
    j.comm = CommKind::kNone;
    return j;
  };
  std::vector<JobRequest> jobs = {quiet(20, 2), quiet(21, 3), quiet(22, 3), quiet(23, 3)};
  JobRequest j = Job(30, 3, 1, 1000);
  j.traffic_gbps = 4000;
  jobs.push_back(j);
  JobRequest h = Job(1, 2, 10, 10000);
  h.traffic_gbps = 1000;
  jobs.push_back(h);
  SimulationOptions options;
  options.policy.locality_wait = 2000;
  options.scheduler.preemption = false;
  auto r = Simulate(*topology_, jobs, "congestion-aware", options);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_GT(r->jobs[4].finish, 2010);  // J ended after H's wait ran out
  EXPECT_EQ(r->jobs[5].first_start, 2010);
  EXPECT_EQ(r->jobs[5].waited, 2000);
  // slurm-tree does not wait.
  auto s = Simulate(*topology_, jobs, "slurm-tree", options);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->jobs[5].first_start, 10);
}

TEST_F(SimulatorTest, WaitsCountEveryWaitAndUtilisationTheArrivalSpan) {
  // A low-priority 4-node job starts at once, is suspended at t=100 for a high-priority one that
  // runs 400 s, and resumes at t=500: it waited 400 s in all, not 0 (its first start). The
  // arrivals span 100 s; after them a low-priority job runs on alone for hours, which must not
  // dilute the utilisation of the span the load arrived in.
  std::vector<JobRequest> jobs = {Job(1, 16, 0, 1000, 1), Job(2, 16, 100, 400, 5),
                                  Job(3, 1, 100, 20000, 0)};
  for (JobRequest& j : jobs)
    j.comm = CommKind::kNone;  // run times as given, not slowed by congestion
  SimulationOptions options;
  options.checkpoints.reporting_share = 0;  // a suspended job leaves at once (saving nothing)
  auto r = Simulate(*topology_, jobs, "first-fit", options);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->jobs[0].first_start, 0);
  EXPECT_EQ(r->jobs[0].preemptions, 1);
  EXPECT_EQ(r->jobs[0].waited, 400);
  EXPECT_EQ(r->arrival_span, 100);
  EXPECT_DOUBLE_EQ(r->gpu_utilisation, 1.0);  // the whole cluster busy from t=0 to t=100
  EXPECT_GT(r->mean_wait, 0);
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

// Failing nodes: a gang on a failed node queues again and loses the work since its checkpoint; a
// fault-tolerant job loses the group there, runs on with the others and gets a replacement from
// the scheduler; the same seed gives the same failures.
TEST_F(SimulatorTest, FailedNodesRequeueGangsAndFaultTolerantJobsGetReplacements) {
  std::vector<JobRequest> jobs;
  for (int i = 0; i < 6; ++i) {
    JobRequest j = Job(i + 1, 2, i * 100, 40000 + i * 1000);
    if (i % 2 == 0) {  // two groups of one node, one needed
      j.node_step = 1;
      j.min_nodes = 1;
    }
    jobs.push_back(j);
  }
  SimulationOptions options;
  options.node_mtbf = 60000;  // 16 nodes: a failure every hour or so
  options.node_repair = 3600;
  options.failure_seed = 7;
  auto a = Simulate(*topology_, jobs, "congestion-aware", options);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_GT(a->node_failures, 5);
  EXPECT_GT(a->failure_requeues, 0);
  EXPECT_GT(a->failure_lost_gpu_hours, 0);
  EXPECT_GT(a->replacements_placed, 0);
  // A replacement goes to its job's zone, where a free node is usually found at once: the lost
  // groups are missing for much less than it takes to repair their nodes.
  EXPECT_LT(a->lost_group_hours, 0.5 * a->replacements_placed * options.node_repair / 3600.0);
  for (const JobOutcome& j : a->jobs)
    EXPECT_GT(j.finish, j.first_start);
  auto b = Simulate(*topology_, jobs, "congestion-aware", options);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(a->node_failures, b->node_failures);
  EXPECT_EQ(a->replacements_placed, b->replacements_placed);
  EXPECT_EQ(a->mean_jct, b->mean_jct);
  // Without failures, nothing of the kind.
  SimulationResult quiet = Run(jobs, "congestion-aware");
  EXPECT_EQ(quiet.node_failures, 0);
  EXPECT_EQ(quiet.replacements_placed, 0);
  EXPECT_EQ(quiet.lost_group_hours, 0);
}

// With no free node, a lost group waits for one (its node's repair): the hours it is missing
// count, and the job runs at the speed of the groups it has meanwhile.
TEST_F(SimulatorTest, ALostGroupWaitsForANodeAndItsJobRunsSlowerMeanwhile) {
  JobRequest ft = Job(1, 16, 0, 100000);  // the whole cluster: 16 groups of a node, 8 needed
  ft.node_step = 1;
  ft.min_nodes = 8;
  ft.comm = CommKind::kNone;
  SimulationOptions options;
  options.node_mtbf = 400000;  // a failure every 25000 s or so
  options.node_repair = 20000;
  options.failure_seed = 3;
  auto r = Simulate(*topology_, {ft}, "first-fit", options);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_GT(r->node_failures, 1);
  EXPECT_EQ(r->failure_requeues, 0);
  // Each replaced once its node is back, unless the job ended first.
  EXPECT_GT(r->replacements_placed, 0);
  EXPECT_LE(r->replacements_placed, r->node_failures);
  // Up to 20000 s each (less for a failure near the job's end).
  EXPECT_GT(r->lost_group_hours, 2);
  EXPECT_LE(r->lost_group_hours, r->node_failures * 20000.0 / 3600 + 1e-9);
  const JobOutcome& job = r->jobs[0];
  // Work of group-seconds missing is made up at the end by all 16 groups.
  EXPECT_NEAR(static_cast<double>(job.finish - job.first_start),
              100000 + r->lost_group_hours * 3600 / 16, 2);
}

}  // namespace
}  // namespace ff::scheduler
