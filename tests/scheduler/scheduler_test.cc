// Scheduling rounds on the small cluster (2 zones x 2 leaves x 4 nodes), checked by hand, and
// property tests on random clusters and queues.
#include "scheduler/scheduler.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>
#include <random>
#include <set>

#include "small_cluster.h"

namespace ff::scheduler {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;
using ::testing::UnorderedElementsAre;

SchedulerOptions NoPreemption() {
  SchedulerOptions o;
  o.preemption = false;
  return o;
}

JobRequest Job(JobId id, int nodes, int priority = 3, const std::string& user = "alice") {
  JobRequest j;
  j.id = id;
  j.user = user;
  j.priority = priority;
  j.nodes = nodes;
  j.gpus_per_node = 8;
  j.comm = CommKind::kAllreduce;
  j.traffic_gbps = 100;
  j.submit_time = id;
  return j;
}

// A fault-tolerant job of `groups` replica groups of `group_nodes` nodes, `min_groups` of which
// may start without the others.
JobRequest Elastic(JobId id, int groups, int group_nodes, int min_groups,
                   const std::string& user = "alice") {
  JobRequest j = Job(id, groups * group_nodes, 3, user);
  j.node_step = group_nodes;
  j.min_nodes = min_groups * group_nodes;
  return j;
}

class SchedulerTest : public SmallClusterTest {
 protected:
  Decision Decide(const std::vector<JobRequest>& queue, Seconds now = 100,
                  SchedulerOptions options = {}) {
    PolicyOptions policy;
    policy.locality_wait = 3600;
    Scheduler s(MakePlacementPolicy("congestion-aware", policy), options);
    return s.Decide(*state_, queue, now);
  }

  void Run(const JobRequest& job, std::vector<int> nodes, Seconds start = 0,
           Seconds checkpoint = 0) {
    ASSERT_TRUE(state_->Allocate(job, Placement{nodes, 8}, start).ok());
    // Allocate records the start as the last checkpoint; move it where the test wants it.
    ASSERT_TRUE(state_->SetLastCheckpoint(job.id, checkpoint).ok());
  }

  // Bob's jobs on nodes 0-5 (expected to end at t=1000) and 8-11 (at t=5000): free now are
  // nodes 6 and 7 (zone A) and 12-15 (zone B).
  void RunTwoJobsWithExpectedEnds() {
    JobRequest long_running = Job(10, 6, 3, "bob");
    long_running.expected_runtime = 1000;
    Run(long_running, {0, 1, 2, 3, 4, 5});
    JobRequest other = Job(11, 4, 3, "bob");
    other.expected_runtime = 5000;
    Run(other, {8, 9, 10, 11});
  }

  // Runs a 2-node job of bob's on the first two nodes of every leaf (ids from `id`); returns the
  // next free id.
  JobId BusyTwoNodesPerLeaf(JobId id) {
    for (int leaf = 0; leaf < 4; ++leaf) {
      Run(Job(id++, 2, 3, "bob"), {leaf * 4, leaf * 4 + 1});
    }
    return id;
  }

  // Two nodes busy in every leaf, by bob's jobs inside their leaves (the uplinks carry nothing),
  // started at t=0: leaf 0's expected to end at `leaf0_ends`, the others' in 100,000 s. Replaces
  // the cluster state.
  void BusyTwoNodesInEveryLeaf(Seconds leaf0_ends) {
    state_ = std::make_unique<ClusterState>(*topology_);
    JobId id = 10;
    for (int leaf = 0; leaf < 4; ++leaf) {
      JobRequest busy = Job(id++, 2, 3, "bob");
      busy.expected_runtime = leaf == 0 ? leaf0_ends : 100000;
      Run(busy, {leaf * 4, leaf * 4 + 1});
    }
  }

  static std::vector<JobId> Started(const Decision& d) {
    std::vector<JobId> ids;
    for (const auto& s : d.starts)
      ids.push_back(s.job);
    return ids;
  }
};

TEST_F(SchedulerTest, HigherPriorityFirstThenFifo) {
  // Room for 16 nodes: 8 + 8 start; the later 8-node job of equal priority waits.
  Decision d = Decide({Job(3, 8, 3), Job(1, 8, 3), Job(2, 8, 5)});
  EXPECT_THAT(Started(d), ElementsAre(2, 1));
  EXPECT_THAT(d.pending.at(3), HasSubstr("needs 8 nodes with 8 free GPUs; 0 are free"));
}

TEST_F(SchedulerTest, GangIsAllOrNothing) {
  Decision d = Decide({Job(1, 20)});
  EXPECT_THAT(d.starts, IsEmpty());
  EXPECT_EQ(d.pending.at(1),
            "needs 20 nodes with 8 free GPUs; 16 are free; it would not fit even with every "
            "running job ended (drained nodes, or a rule it cannot meet)");
}

TEST_F(SchedulerTest, ExplainsZoneLimitAndJobsAhead) {
  Run(Job(10, 2, 1, "bob"), {0, 1});
  Run(Job(11, 2, 1, "bob"), {8, 9});
  // Two 8-node jobs: none fits a zone (6 free in each). The first waits for the zone; the second
  // also has one job of higher priority ahead.
  Decision d = Decide({Job(1, 8, 6), Job(2, 8, 4)}, 100, NoPreemption());
  const std::string zone_rule =
      "needs 8 nodes with 8 free GPUs in one zone; the largest such set is 6 nodes (zone A). An "
      "allreduce job stays in one zone because the links between zones are few and shared; "
      "submit it with --may-span-zones to let it span";
  EXPECT_EQ(d.pending.at(1), zone_rule +
                                 "; no start time can be estimated: 2 running jobs give no "
                                 "expected run time");
  EXPECT_EQ(d.pending.at(2), zone_rule + "; 1 job with higher priority is ahead");
}

TEST_F(SchedulerTest, TimeSharingSuspendsLowerPriorityJobs) {
  Run(Job(10, 8, 1, "bob"), {0, 1, 2, 3, 4, 5, 6, 7});
  Run(Job(11, 8, 1, "carol"), {8, 9, 10, 11, 12, 13, 14, 15});
  Decision d = Decide({Job(1, 4, 5)});
  ASSERT_EQ(d.suspends.size(), 1u);  // one victim is enough
  ASSERT_THAT(Started(d), ElementsAre(1));
  EXPECT_EQ(d.suspended_for.at(d.suspends[0]), 1);
  EXPECT_THAT(d.pending, IsEmpty());
}

TEST_F(SchedulerTest, VictimIsTheJobThatLosesTheLeastWork) {
  Run(Job(10, 8, 1, "bob"), {0, 1, 2, 3, 4, 5, 6, 7}, 0, /*checkpoint=*/10);
  Run(Job(11, 8, 1, "carol"), {8, 9, 10, 11, 12, 13, 14, 15}, 0, /*checkpoint=*/90);
  Decision d = Decide({Job(1, 4, 5)}, 100);
  EXPECT_THAT(d.suspends, ElementsAre(11));  // 10 s lost instead of 90 s
}

TEST_F(SchedulerTest, VictimsAreChosenByGpuSecondsLostAndTheReasonSaysWhy) {
  // Job 10 saves in 20 s (it reported its checkpoints) and last saved long ago; job 11 never
  // reported one and has run 50 minutes. Suspending 10 costs its 64 GPUs a save and a restart
  // (60 s + 20 s reading it back): ~107 GPU-min; suspending 11, 50 minutes and a minute's
  // restart: ~54 GPU-h. Newest-first (the baseline) takes job 11, started later.
  JobRequest saves = Job(10, 8, 1, "bob");
  saves.checkpoint_s = 20;
  Run(saves, {0, 1, 2, 3, 4, 5, 6, 7}, 0, /*checkpoint=*/60);
  Run(Job(11, 8, 1, "carol"), {8, 9, 10, 11, 12, 13, 14, 15}, /*start=*/60, /*checkpoint=*/60);
  Decision d = Decide({Job(1, 4, 5)}, 3060);
  ASSERT_THAT(d.suspends, ElementsAre(10));
  EXPECT_EQ(d.suspend_reasons.at(10),
            "lost ~107 GPU-min: a 20s checkpoint and a 1m20s restart; rather than job 11 (~54.4 "
            "GPU-h: 50m since it started (it reports no checkpoints))");
  SchedulerOptions newest;
  newest.suspend.order = SuspendPolicy::VictimOrder::kNewestFirst;
  EXPECT_THAT(Decide({Job(1, 4, 5)}, 3060, newest).suspends, ElementsAre(11));
}

TEST_F(SchedulerTest, ASuspendDeadlineComesFromTheCheckpointsWriteTimeWithinAdminBounds) {
  SuspendPolicy policy;  // 1.5 x + 10 s, within 30 s .. 10 min
  JobRequest job = Job(1, 1);
  EXPECT_EQ(SuspendDeadline(job, policy), 30);  // never reported: the least
  EXPECT_FALSE(SavesInTime(job, policy));
  job.checkpoint_s = 4;
  EXPECT_EQ(SuspendDeadline(job, policy), 30);
  EXPECT_TRUE(SavesInTime(job, policy));
  job.checkpoint_s = 100;
  EXPECT_EQ(SuspendDeadline(job, policy), 160);
  EXPECT_TRUE(SavesInTime(job, policy));
  job.checkpoint_s = 500;
  EXPECT_EQ(SuspendDeadline(job, policy), 600);  // capped: it would not make it
  EXPECT_FALSE(SavesInTime(job, policy));
  // A job that cannot save in time loses what it did since its checkpoint.
  ASSERT_TRUE(state_->Allocate(job, Placement{{0}, 8}, 0).ok());
  ASSERT_TRUE(state_->SetLastCheckpoint(1, 1000).ok());
  SuspendCost cost = LostBySuspending(*state_->find(1), 1600, policy);
  EXPECT_DOUBLE_EQ(cost.gpu_seconds, 8 * (600 + 60 + 500));
  EXPECT_EQ(cost.text,
            "~155 GPU-min: 10m since its checkpoint (a save takes 8m20s, more than its deadline "
            "allows)");
}

TEST_F(SchedulerTest, NeverSuspendsForEqualPriorityOrBeforeMinRuntime) {
  Run(Job(10, 8, 3, "alice"), {0, 1, 2, 3, 4, 5, 6, 7});
  JobRequest young = Job(11, 8, 1, "bob");
  young.min_runtime = 600;
  Run(young, {8, 9, 10, 11, 12, 13, 14, 15}, /*start=*/50);
  Decision d = Decide({Job(1, 4, 3, "alice"), Job(2, 4, 3, "dave")}, 100);
  EXPECT_THAT(d.suspends, IsEmpty());
  EXPECT_THAT(d.starts, IsEmpty());
  EXPECT_EQ(d.pending.size(), 2u);
  // Once the young job has run its minimum, a priority-3 job may suspend it (priority 1).
  d = Decide({Job(1, 4, 3, "alice")}, 700);
  EXPECT_THAT(d.suspends, ElementsAre(11));
}

TEST_F(SchedulerTest, QuotasCapNodesPerUser) {
  Run(Job(10, 2, 3, "alice"), {0, 1});
  SchedulerOptions options;
  options.node_quota["alice"] = 4;
  Decision d =
      Decide({Job(1, 4, 3, "alice"), Job(2, 4, 3, "bob"), Job(3, 2, 3, "alice")}, 100, options);
  EXPECT_THAT(Started(d), ElementsAre(2, 3));
  EXPECT_EQ(d.pending.at(1), "user alice may hold 4 nodes and holds 2; this job needs 4 more");
}

TEST_F(SchedulerTest, AnElasticGangStartsWithTheGroupsThatFitDownToItsMinimum) {
  Run(Job(10, 4, 3, "bob"), {0, 1, 2, 3});
  Run(Job(11, 4, 3, "bob"), {8, 9, 10, 11});
  // 4 nodes free in each zone; an allreduce job stays in one. Four groups of 2 nodes (8 nodes) do
  // not fit: two groups start, in one zone. A gang of the same size waits whole, and so does an
  // elastic job whose minimum (three groups) does not fit.
  Decision d = Decide({Elastic(1, 4, 2, 2), Job(2, 8), Elastic(3, 4, 2, 3)}, 100, NoPreemption());
  ASSERT_THAT(Started(d), ElementsAre(1));
  ASSERT_EQ(d.starts[0].placement.nodes.size(), 4u);
  const int zone = topology_->nodes()[d.starts[0].placement.nodes[0]].zone;
  for (int n : d.starts[0].placement.nodes)
    EXPECT_EQ(topology_->nodes()[n].zone, zone);
  EXPECT_THAT(d.pending.at(2), HasSubstr("needs 8 nodes with 8 free GPUs; 4 are free"));
  EXPECT_THAT(d.pending.at(3), HasSubstr("needs 8 nodes with 8 free GPUs; 4 are free"));
  // With room for three groups (6 nodes in zone B), three start; whole when all four fit.
  state_ = std::make_unique<ClusterState>(*topology_);
  Run(Job(10, 4, 3, "bob"), {0, 1, 2, 3});
  Run(Job(11, 2, 3, "bob"), {8, 9});
  d = Decide({Elastic(1, 4, 2, 2)}, 100, NoPreemption());
  ASSERT_THAT(Started(d), ElementsAre(1));
  EXPECT_EQ(d.starts[0].placement.nodes.size(), 6u);
  state_ = std::make_unique<ClusterState>(*topology_);
  d = Decide({Elastic(1, 4, 2, 2)}, 100, NoPreemption());
  ASSERT_THAT(Started(d), ElementsAre(1));
  EXPECT_EQ(d.starts[0].placement.nodes.size(), 8u);
  // Sixty-four groups of one node: as many as one zone holds.
  d = Decide({Elastic(1, 64, 1, 1)}, 100, NoPreemption());
  ASSERT_THAT(Started(d), ElementsAre(1));
  EXPECT_EQ(d.starts[0].placement.nodes.size(), 8u);
}

TEST_F(SchedulerTest, AnElasticGangStartsWithTheGroupsItsUsersQuotaLeaves) {
  Run(Job(10, 2, 3, "alice"), {0, 1});
  SchedulerOptions options = NoPreemption();
  options.node_quota["alice"] = 6;
  // Alice holds 2 of her 6 nodes: two of the four groups start; one that needs three waits on
  // her quota.
  Decision d = Decide({Elastic(1, 4, 2, 2), Elastic(2, 4, 2, 3)}, 100, options);
  ASSERT_THAT(Started(d), ElementsAre(1));
  EXPECT_EQ(d.starts[0].placement.nodes.size(), 4u);
  EXPECT_EQ(d.pending.at(2), "user alice may hold 6 nodes and holds 6; this job needs 8 more");
}

TEST_F(SchedulerTest, AnElasticGangBehindABlockedHeadKeepsOffItsReservation) {
  RunTwoJobsWithExpectedEnds();
  // The head needs all of zone A, free at t=1000: it reserves nodes 0-7. Free now: 6 and 7 (zone
  // A), 12-15 (zone B). The elastic job (no expected run time) starts with two of its four
  // groups, in zone B, off the reservation.
  Decision d = Decide({Job(1, 8), Elastic(2, 4, 2, 1)}, 100, NoPreemption());
  ASSERT_THAT(Started(d), ElementsAre(2));
  EXPECT_THAT(d.starts[0].placement.nodes, UnorderedElementsAre(12, 13, 14, 15));
  EXPECT_THAT(d.reserved, UnorderedElementsAre(0, 1, 2, 3, 4, 5, 6, 7));
  // Without backfill nothing passes the head, an elastic job neither.
  SchedulerOptions no_backfill = NoPreemption();
  no_backfill.backfill = false;
  d = Decide({Job(1, 8), Elastic(2, 4, 2, 1)}, 100, no_backfill);
  EXPECT_THAT(d.starts, IsEmpty());
}

TEST_F(SchedulerTest, BackfillWhatEndsBeforeTheReservationOrKeepsOffItsNodes) {
  RunTwoJobsWithExpectedEnds();
  // Free now: nodes 6 and 7 (zone A) and 12-15 (zone B). The head needs all of zone A (8 nodes),
  // free at t=1000: it reserves nodes 0-7.
  JobRequest head = Job(1, 8, 3);
  auto two_nodes = [&](JobId id, Seconds runtime) {
    JobRequest j = Job(id, 2, 3);
    j.expected_runtime = runtime;
    return j;
  };
  // Two long jobs fit in zone B, off the reservation: they start, however long they run. A third
  // fits only on nodes 6 and 7, which the head needs at t=1000: it would still run then, so it
  // waits. A quick one ends at 600 < 1000: it may use them.
  Decision d =
      Decide({head, two_nodes(2, 5000), two_nodes(3, 5000), two_nodes(4, 5000), two_nodes(5, 500)},
             100, NoPreemption());
  ASSERT_THAT(Started(d), ElementsAre(2, 3, 5));
  for (int i = 0; i < 2; ++i) {
    for (int n : d.starts[i].placement.nodes)
      EXPECT_GE(n, 12) << "job " << d.starts[i].job << " took a node the head needs";
  }
  EXPECT_THAT(d.starts[2].placement.nodes, ElementsAre(6, 7));
  EXPECT_EQ(d.pending.at(4),
            "it fits now, but job 1 (priority 3, 8 nodes) is ahead and holds a reservation in "
            "15m on the nodes this job fits on, before this job would end (expected run time "
            "1h23m); one of at most 15m would start now");
  // The head: when it is expected to start.
  EXPECT_EQ(d.pending.at(1),
            "needs 8 nodes with 8 free GPUs; 6 are free; expected to start in 15m, when running "
            "jobs reach their expected run times (nothing that would delay it starts "
            "meanwhile)");
  // A job that gives no expected run time starts only off the reserved nodes, and is told so
  // where it cannot.
  JobRequest unknown = Job(6, 2, 3);
  d = Decide({head, two_nodes(2, 5000), two_nodes(3, 5000), unknown}, 100, NoPreemption());
  EXPECT_THAT(Started(d), ElementsAre(2, 3));
  EXPECT_THAT(d.pending.at(6),
              HasSubstr("holds a reservation in 15m on the nodes this job fits on; this job "
                        "gives no expected run time, so it cannot be backfilled there (one of at "
                        "most 15m would start now)"));
  d = Decide({head, unknown}, 100, NoPreemption());
  ASSERT_THAT(Started(d), ElementsAre(6));
  for (int n : d.starts[0].placement.nodes)
    EXPECT_GE(n, 12);
}

TEST_F(SchedulerTest, APreemptedJobIsToldByWhomAndWhen) {
  Run(Job(10, 8, 5, "bob"), {0, 1, 2, 3, 4, 5, 6, 7});
  Run(Job(11, 8, 5, "bob"), {8, 9, 10, 11, 12, 13, 14, 15});
  JobRequest victim = Job(1, 4, 1);
  victim.preempted_by = 11;
  victim.preempted_by_priority = 5;
  victim.preempted_at = 40;
  Decision d = Decide({victim}, 100);
  EXPECT_EQ(d.pending.at(1),
            "preempted 1m ago for job 11 (priority 5), it waits to resume: needs 4 nodes with 8 "
            "free GPUs; 0 are free; then, if its traffic would crowd the uplinks, it may wait up "
            "to 1h for them under one leaf switch; no "
            "start time can be estimated: 2 running jobs give no expected run time");
  EXPECT_THAT(d.locality_wait_started, IsEmpty());  // short of nodes: its wait has not begun
}

TEST_F(SchedulerTest, SubNodeJobsShareNodes) {
  JobRequest a = Job(1, 0);
  a.gpus = 3;
  a.comm = CommKind::kNone;
  JobRequest b = a;
  b.id = 2;
  Decision d = Decide({a, b});
  ASSERT_EQ(d.starts.size(), 2u);
  EXPECT_EQ(d.starts[0].placement.nodes, d.starts[1].placement.nodes);  // packed on one node
}

TEST_F(SchedulerTest, OnAQuietClusterASpreadableJobStartsAtOnce) {
  // Two nodes busy in every leaf, by jobs inside their leaves: the uplinks carry nothing. A
  // 3-node allreduce job (5.5 h) fits only across leaves, where its traffic would take 37% of an
  // uplink: spreading would cost it 0.3 x 0.37 of its run (37 min). No leaf is expected to free
  // within that (the first in 1 h), so it starts now.
  BusyTwoNodesInEveryLeaf(/*leaf0_ends=*/3700);
  JobRequest job = Job(1, 3);
  job.expected_runtime = 20000;
  Decision d = Decide({job}, /*now=*/100, NoPreemption());
  ASSERT_THAT(Started(d), ElementsAre(1));
  EXPECT_THAT(d.locality_wait_started, IsEmpty());
  EXPECT_EQ(d.recheck_at, -1);
  std::set<int> leaves;
  for (int n : d.starts[0].placement.nodes)
    leaves.insert(topology_->nodes()[n].leaf);
  EXPECT_EQ(leaves.size(), 2u);

  // A leaf expected to free in 10 minutes is worth those minutes: it waits for it.
  BusyTwoNodesInEveryLeaf(/*leaf0_ends=*/700);
  d = Decide({job}, /*now=*/100, NoPreemption());
  EXPECT_THAT(Started(d), IsEmpty());
  EXPECT_THAT(d.pending.at(1), HasSubstr("a leaf is expected to free in 10m"));
}

TEST_F(SchedulerTest, AJobSubmittedLongAgoMayWaitAShareOfThatForALeaf) {
  // The quiet cluster above at t=36,000 (10 h), leaf 0 expected to free in 50 min: spreading
  // would cost the 3-node job 25 min. Submitted at t=0, it may wait that, or 5% of its 10 h (30
  // min): it spreads now.
  BusyTwoNodesInEveryLeaf(/*leaf0_ends=*/36000 + 3000);
  JobRequest job = Job(1, 3);
  job.submit_time = 0;
  job.expected_runtime = 20000;
  Decision d = Decide({job}, /*now=*/36000, NoPreemption());
  ASSERT_THAT(Started(d), ElementsAre(1));
  EXPECT_THAT(d.locality_wait_started, IsEmpty());

  // At t=72,000 (20 h), with the leaf again 50 min away, it may wait 60 min (the cap of these
  // tests): it waits for leaf 0, and says why.
  BusyTwoNodesInEveryLeaf(/*leaf0_ends=*/72000 + 3000);
  d = Decide({job}, /*now=*/72000, NoPreemption());
  EXPECT_THAT(Started(d), IsEmpty());
  EXPECT_EQ(d.locality_wait_started, (std::map<JobId, Seconds>{{1, 72000}}));
  EXPECT_THAT(d.pending.at(1),
              HasSubstr("; spread over leaves now, it and the jobs sharing those uplinks would "
                        "lose about 25m of run time to congestion, but it was submitted 20h ago "
                        "and may wait up to 1h, a share of that, for one leaf, and a leaf is "
                        "expected to free in 50m (after 1h more it takes any leaves)"));

  // No share: only what spreading would cost.
  PolicyOptions no_share;
  no_share.locality_wait = 3600;
  no_share.locality_wait_share = 0;
  Scheduler cost_only(MakePlacementPolicy("congestion-aware", no_share), NoPreemption());
  EXPECT_THAT(Started(cost_only.Decide(*state_, {job}, 72000)), ElementsAre(1));
}

TEST_F(SchedulerTest, UnderLoadASpreadWaitsForALeafWhenTheQueueWouldPayForIt) {
  // The quiet cluster above, leaf 0 expected to free in 1 h: alone, the 3-node job spreads at
  // once (37 min of its run time lost against an hour's wait). Behind it, twenty 1-node jobs
  // queue; after it, 40 GPUs would be free, so 15 of them wait for GPUs, and the 37 min x 24 GPUs
  // it would lose is GPU time they wait for: 15 x 53,280 / 128 GPUs, 104 min more. Waiting the
  // hour for leaf 0 (the cap of these tests) is now the cheaper choice, and the 1-node jobs start
  // meanwhile on the nodes its reservation (nodes 0-2, leaf 0) does not need.
  BusyTwoNodesInEveryLeaf(/*leaf0_ends=*/3700);
  JobRequest job = Job(1, 3);
  job.expected_runtime = 20000;
  std::vector<JobRequest> queue{job};
  for (JobId single = 30; single < 50; ++single) {
    JobRequest j = Job(single, 1, 3, "carol");
    j.comm = CommKind::kNone;
    j.expected_runtime = 100000;
    queue.push_back(j);
  }
  Decision d = Decide(queue, /*now=*/100, NoPreemption());
  EXPECT_EQ(d.locality_wait_started, (std::map<JobId, Seconds>{{1, 100}}));
  EXPECT_THAT(d.pending.at(1),
              HasSubstr("spread over leaves now, the run time it and the jobs sharing those "
                        "uplinks would lose to congestion, and the GPU time 15 jobs queued for "
                        "GPUs would wait for, come to about 1h, and a leaf is expected to free in "
                        "1h"));
  std::set<int> used;
  for (const auto& s : d.starts) {
    EXPECT_NE(s.job, 1);
    used.insert(s.placement.nodes.begin(), s.placement.nodes.end());
  }
  EXPECT_EQ(used, (std::set<int>{3, 6, 7, 10, 11, 14, 15}));
}

TEST_F(SchedulerTest, AJobShortOfNodesHoldsALeafThatFreesSoonAfterAnyNodesWould) {
  // Zone B full for a day. In zone A, nodes 0, 1 (leaf 0) and 4, 5 (leaf 1) free at t=1000, nodes
  // 2, 3 (leaf 0) at 2000, nodes 6, 7 (leaf 1) in a day. A 3-node allreduce job could start at
  // 1000 across leaves 0 and 1, or at 2000 under leaf 0.
  auto busy = [&](JobId id, std::vector<int> nodes, Seconds ends) {
    JobRequest j = Job(id, static_cast<int>(nodes.size()), 3, "bob");
    j.expected_runtime = ends;
    Run(j, std::move(nodes));
  };
  busy(10, {0, 1}, 1000);
  busy(11, {2, 3}, 2000);
  busy(12, {4, 5}, 1000);
  busy(13, {6, 7}, 86400);
  busy(14, {8, 9, 10, 11, 12, 13, 14, 15}, 86400);
  // Spread over the empty uplinks, a 5.5 h run would lose 25 min (it communicates 0.3 of its
  // time, and its trees would cross an uplink once each): more than the 16m40s the leaf comes
  // later, so it holds leaf 0's nodes for t=2000.
  JobRequest job = Job(1, 3);
  job.expected_runtime = 20000;
  Decision d = Decide({job}, /*now=*/100, NoPreemption());
  EXPECT_THAT(Started(d), IsEmpty());
  EXPECT_THAT(d.pending.at(1),
              HasSubstr("it holds nodes under one leaf switch, expected to free 16m after any "
                        "nodes would, less than spreading would cost (about 25m); expected to "
                        "start in 31m"));
  // A 100-minute run would lose 11 min spread: less than the leaf's 16m40s. It takes any nodes,
  // at t=1000.
  job.expected_runtime = 6000;
  d = Decide({job}, /*now=*/100, NoPreemption());
  EXPECT_THAT(d.pending.at(1), Not(HasSubstr("under one leaf switch, expected")));
  EXPECT_THAT(d.pending.at(1), HasSubstr("expected to start in 15m"));
}

// Zone A's uplinks congested: job 20 (nodes 3 and 7, leaves 0 and 1) sends 500 Gb/s through
// uplinks of 400. Free: node 2 (leaf 0) and node 6 (leaf 1); zone B full. Job 21 holds nodes 0
// and 1 of leaf 0 and is expected to end at `leaf_frees_at`, the others at `others_end` (0: no
// expected run time given).
class CongestedSchedulerTest : public SchedulerTest {
 protected:
  void Congest(Seconds leaf_frees_at, Seconds others_end = 100000) {
    JobRequest congestor = Job(20, 2, 3, "bob");
    congestor.traffic_gbps = 500;
    congestor.expected_runtime = others_end;
    Run(congestor, {3, 7});
    JobRequest ending = Job(21, 2, 3, "bob");
    ending.expected_runtime = leaf_frees_at;
    Run(ending, {0, 1});
    JobRequest rest = Job(22, 2, 3, "bob");
    rest.expected_runtime = others_end;
    Run(rest, {4, 5});
    for (int leaf = 2; leaf < 4; ++leaf) {
      JobRequest full = Job(21 + leaf, 4, 3, "bob");
      full.expected_runtime = others_end;
      Run(full, {leaf * 4, leaf * 4 + 1, leaf * 4 + 2, leaf * 4 + 3});
    }
  }
  // A 2-node allreduce job that fits one leaf but now only across leaves 0 and 1.
  static JobRequest Pair() {
    JobRequest job = Job(1, 2);
    job.expected_runtime = 20000;
    return job;
  }
};

TEST_F(CongestedSchedulerTest, UnderLoadAJobWaitsForALeafAboutToFree) {
  Congest(/*leaf_frees_at=*/600);
  JobRequest job = Pair();
  Decision d = Decide({job}, /*now=*/100, NoPreemption());
  EXPECT_THAT(Started(d), IsEmpty());
  // Spread, it would share the congested uplinks for hours (and slow job 20 further): far more
  // than the 1 h cap, so it may wait the cap; the leaf is expected to free in 8m20s.
  EXPECT_EQ(d.pending.at(1),
            "needs 2 nodes under one leaf switch, so that its traffic stays off the shared "
            "uplinks; the freest leaf has 1 free node; spread over leaves now, it and the jobs "
            "sharing those uplinks would lose about 1h of run time to congestion, and a leaf is "
            "expected to free in 8m20s (after 1h more it takes any leaves); expected to start in "
            "8m20s, when running jobs reach their expected run times (nothing that would delay "
            "it starts meanwhile)");
  EXPECT_EQ(d.locality_wait_started, (std::map<JobId, Seconds>{{1, 100}}));
  EXPECT_EQ(d.recheck_at, 100 + 3600);
  job.locality_wait_since = 100;
  // The leaf frees: it starts there.
  ASSERT_TRUE(state_->Release(21).ok());
  d = Decide({job}, /*now=*/600, NoPreemption());
  ASSERT_THAT(Started(d), ElementsAre(1));
  EXPECT_EQ(topology_->nodes()[d.starts[0].placement.nodes[0]].leaf,
            topology_->nodes()[d.starts[0].placement.nodes[1]].leaf);
}

TEST_F(CongestedSchedulerTest, AJobSpreadsWhenNoLeafFreesWithinWhatWaitingMayCost) {
  // The leaf frees only in 5 hours: longer than the wait may last, so it spreads now.
  Congest(/*leaf_frees_at=*/5 * 3600);
  Decision d = Decide({Pair()}, /*now=*/100, NoPreemption());
  ASSERT_THAT(Started(d), ElementsAre(1));
  EXPECT_THAT(d.locality_wait_started, IsEmpty());
  EXPECT_NE(topology_->nodes()[d.starts[0].placement.nodes[0]].leaf,
            topology_->nodes()[d.starts[0].placement.nodes[1]].leaf);
}

TEST_F(CongestedSchedulerTest, AWaitLastsNoLongerThanSpreadingWouldCost) {
  // No running job gives an expected run time, so no leaf is expected to free at a known time;
  // the job runs 10 minutes. Spread now, by the model it would lose 90 s (600 s, 0.3 of it
  // communicating, 1.5x slower: (500 + 100) / 400) and slow job 20 from 1.25x to 1.5x for the
  // hour a job without an expected run time is assumed to have left (0.3 x 0.25 x 3600 = 270 s):
  // it waits those 6 minutes for a leaf, not the 1 h cap.
  Congest(/*leaf_frees_at=*/0, /*others_end=*/0);
  JobRequest job = Pair();
  job.expected_runtime = 600;
  Decision d = Decide({job}, /*now=*/100, NoPreemption());
  EXPECT_THAT(Started(d), IsEmpty());
  ASSERT_EQ(d.locality_wait_started, (std::map<JobId, Seconds>{{1, 100}}));
  EXPECT_EQ(d.recheck_at, 100 + 90 + 270);
  EXPECT_THAT(d.pending.at(1), HasSubstr("would lose about 6m of run time to congestion (after 6m "
                                         "more it takes any leaves)"));
  job.locality_wait_since = 100;
  d = Decide({job}, /*now=*/400, NoPreemption());
  EXPECT_THAT(Started(d), IsEmpty());
  d = Decide({job}, /*now=*/100 + 360, NoPreemption());
  ASSERT_THAT(Started(d), ElementsAre(1));

  // The baselines, a job without traffic and a zero cap never wait.
  JobRequest quiet = Pair();
  quiet.comm = CommKind::kNone;
  EXPECT_THAT(Started(Decide({quiet}, 100, NoPreemption())), ElementsAre(1));
  Scheduler slurm(MakePlacementPolicy("slurm-tree"), NoPreemption());
  EXPECT_THAT(Started(slurm.Decide(*state_, {Pair()}, 100)), ElementsAre(1));
  PolicyOptions no_wait;
  no_wait.locality_wait = 0;
  Scheduler eager(MakePlacementPolicy("congestion-aware", no_wait), NoPreemption());
  EXPECT_THAT(Started(eager.Decide(*state_, {Pair()}, 100)), ElementsAre(1));
}

TEST_F(CongestedSchedulerTest, ALocalityWaitEndsUnusedWhenTheJobIsShortOfNodesAgain) {
  Congest(/*leaf_frees_at=*/600);
  JobRequest job = Pair();
  Decision d = Decide({job}, /*now=*/100, NoPreemption());
  EXPECT_EQ(d.locality_wait_started, (std::map<JobId, Seconds>{{1, 100}}));
  job.locality_wait_since = 100;

  // Another job takes node 6: too few nodes are free in any zone for the job to start even
  // across leaves, so its wait ends unused.
  JobRequest other = Job(30, 1, 3, "bob");
  other.comm = CommKind::kNone;
  Run(other, {6});
  d = Decide({job}, /*now=*/200, NoPreemption());
  EXPECT_THAT(Started(d), IsEmpty());
  EXPECT_EQ(d.locality_wait_started, (std::map<JobId, Seconds>{{1, -1}}));
  EXPECT_THAT(d.pending.at(1),
              HasSubstr("then, if its traffic would crowd the uplinks, it may wait up to 1h for "
                        "them under one leaf switch"));
  EXPECT_EQ(d.recheck_at, -1);
  job.locality_wait_since = -1;

  // Later node 6 frees again: the job could spread again, and its wait begins afresh.
  ASSERT_TRUE(state_->Release(30).ok());
  d = Decide({job}, /*now=*/300, NoPreemption());
  EXPECT_THAT(Started(d), IsEmpty());
  EXPECT_EQ(d.locality_wait_started, (std::map<JobId, Seconds>{{1, 300}}));
  EXPECT_THAT(d.pending.at(1), HasSubstr("(after 1h more it takes any leaves)"));
}

TEST_F(CongestedSchedulerTest, SuspendingOthersToStartAJobKeepsItUnderOneLeafAsFreeNodesWould) {
  // The congested zone A, with free nodes 2 (leaf 0) and 6 (leaf 1) taken by two of carol's
  // priority-1 jobs: the pair (priority 3) could start now only by suspending both, across
  // leaves 0 and 1. That is starting across leaves as surely as on free nodes, and the locality
  // wait judges it the same way: leaf 0 is expected to free in 8m20s, within what spreading
  // would cost, so nothing is suspended and the pair holds out for leaf 0.
  Congest(/*leaf_frees_at=*/600);
  JobRequest low = Job(30, 1, 1, "carol");
  low.comm = CommKind::kNone;
  Run(low, {2});
  low.id = 31;
  Run(low, {6});
  JobRequest job = Pair();
  Decision d = Decide({job}, /*now=*/100);
  EXPECT_THAT(d.suspends, IsEmpty());
  EXPECT_THAT(Started(d), IsEmpty());
  EXPECT_THAT(d.pending.at(1),
              HasSubstr("; spread over leaves now by suspending 2 jobs of lower priority, it and "
                        "the jobs sharing those uplinks would lose about 1h of run time to "
                        "congestion, and a leaf is expected to free in 8m20s (after 1h more it "
                        "takes any leaves)"));
  EXPECT_EQ(d.locality_wait_started, (std::map<JobId, Seconds>{{1, 100}}));

  // Its wait runs out (1 h later, the leaf still busy): it suspends both and spreads.
  ASSERT_TRUE(state_->Release(21).ok());
  JobRequest ending = Job(21, 2, 3, "bob");
  ending.expected_runtime = 100000;
  Run(ending, {0, 1});
  job.locality_wait_since = 100;
  d = Decide({job}, /*now=*/100 + 3600);
  EXPECT_THAT(d.suspends, UnorderedElementsAre(30, 31));
  ASSERT_THAT(Started(d), ElementsAre(1));
  EXPECT_NE(topology_->nodes()[d.starts[0].placement.nodes[0]].leaf,
            topology_->nodes()[d.starts[0].placement.nodes[1]].leaf);

  // Where suspending jobs under one leaf frees room there, it suspends those instead, though
  // the two across leaves would lose less work: job 21 (leaf 0, now priority 1 too).
  state_ = std::make_unique<ClusterState>(*topology_);
  Congest(/*leaf_frees_at=*/100000);
  ASSERT_TRUE(state_->Release(21).ok());
  JobRequest leaf_job = Job(21, 2, 1, "carol");
  leaf_job.comm = CommKind::kNone;
  Run(leaf_job, {0, 1}, /*start=*/0, /*checkpoint=*/0);
  low.id = 30;
  Run(low, {2}, /*start=*/0, /*checkpoint=*/90);
  low.id = 31;
  Run(low, {6}, /*start=*/0, /*checkpoint=*/90);
  d = Decide({Pair()}, /*now=*/100);
  EXPECT_THAT(d.suspends, ElementsAre(21));
  ASSERT_THAT(Started(d), ElementsAre(1));
  EXPECT_EQ(topology_->nodes()[d.starts[0].placement.nodes[0]].leaf, 0);
  EXPECT_EQ(topology_->nodes()[d.starts[0].placement.nodes[1]].leaf, 0);
}

TEST_F(SchedulerTest, WaitingForOneLeafStillBackfillsAroundIt) {
  // Free: nodes 0 and 1 (leaf 0) until job 10 ends at t=900, and node 7 (leaf 1). Job 10 spans
  // leaves 0 and 1 and crowds their uplinks. The 3-node job could spread over both leaves now
  // but, with the uplinks congested, waits for leaf 0, holding a reservation for it; a 1-node job
  // that ends before that may start (on node 7), a longer one may not.
  JobRequest first = Job(10, 2, 3, "bob");
  first.expected_runtime = 900;
  first.traffic_gbps = 500;
  Run(first, {2, 4});
  JobRequest partly = Job(11, 3, 3, "bob");
  partly.comm = CommKind::kNone;
  partly.expected_runtime = 100000;
  Run(partly, {3, 5, 6});
  for (int leaf = 2; leaf < 4; ++leaf) {
    JobRequest busy = Job(12 + leaf, 4, 3, "bob");
    busy.expected_runtime = 100000;
    Run(busy, {leaf * 4, leaf * 4 + 1, leaf * 4 + 2, leaf * 4 + 3});
  }
  JobRequest job = Job(1, 3);
  job.submit_time = 0;
  job.expected_runtime = 20000;
  JobRequest quick = Job(2, 1);
  quick.comm = CommKind::kNone;
  quick.expected_runtime = 500;
  JobRequest slow = Job(3, 1);
  slow.comm = CommKind::kNone;
  slow.expected_runtime = 5000;
  Decision d = Decide({job, quick, slow}, 100, NoPreemption());
  ASSERT_THAT(Started(d), ElementsAre(2));
  EXPECT_THAT(d.starts[0].placement.nodes, ElementsAre(7));  // leaf 0 stays whole for job 1
  EXPECT_THAT(d.pending.at(1), HasSubstr("under one leaf switch"));
  EXPECT_THAT(d.pending.at(3), HasSubstr("holds a reservation in 13m"));
}

// ---- Properties on random clusters and queues ------------------------------------------------

struct RandomCase {
  std::unique_ptr<Topology> topology;
  std::unique_ptr<ClusterState> state;
  std::vector<JobRequest> queue;
};

RandomCase MakeRandomCase(uint64_t seed) {
  std::mt19937_64 rng(seed);
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  ClusterConfig config;
  int zones = pick(1, 3);
  for (int z = 0; z < zones; ++z) {
    ZoneConfig zone;
    zone.name = "z" + std::to_string(z);
    LeafGroupConfig leaves;
    leaves.name = zone.name + "-leaf";
    leaves.count = pick(1, 4);
    leaves.nodes = pick(1, 6);
    leaves.gpus_per_node = 8;
    zone.leaves.push_back(leaves);
    config.zones.push_back(zone);
  }
  RandomCase c;
  c.topology = std::make_unique<Topology>(*Topology::Build(config));
  c.state = std::make_unique<ClusterState>(*c.topology);
  const int nodes = static_cast<int>(c.topology->nodes().size());
  // Some running jobs placed by first-fit, some nodes drained.
  auto first_fit = MakePlacementPolicy("first-fit");
  for (int i = 0; i < pick(0, 6); ++i) {
    JobRequest j = Job(1000 + i, pick(1, std::max(1, nodes / 3)), pick(0, 6),
                       "user" + std::to_string(pick(0, 3)));
    j.comm = CommKind::kNone;
    j.expected_runtime = pick(0, 1) ? pick(10, 5000) : 0;
    std::string why;
    Placement p = first_fit->Place(j, *c.state, &why);
    if (p.empty()) continue;
    if (pick(0, 2) == 0) {
      // A fault-tolerant job of one-node groups, some of them missing (lost, or not started):
      // it asks the round for those.
      const int missing = pick(1, 3);
      j.nodes += missing;
      j.node_step = 1;
      j.min_nodes = 1;
      JobRequest asks = j;
      for (int r = 0; r < missing; ++r) {
        MissingGroup g;
        g.replica = static_cast<int>(p.nodes.size()) + r;
        g.lost = pick(0, 1) == 1;
        asks.missing_groups.push_back(g);
      }
      c.queue.push_back(asks);
    }
    (void)c.state->Allocate(j, p, pick(0, 50));
  }
  for (int i = 0; i < pick(0, 2); ++i)
    c.state->SetDrained(pick(0, nodes - 1), true);
  for (int i = 0; i < pick(1, 25); ++i) {
    JobRequest j = Job(i + 1, pick(0, 1) ? pick(1, nodes) : 0, pick(0, 6),
                       "user" + std::to_string(pick(0, 3)));
    if (j.nodes == 0) j.gpus = pick(1, 8);
    if (j.nodes > 1 && pick(0, 3) == 0) {  // an elastic gang: groups of 1 or 2 nodes
      j.node_step = j.nodes % 2 == 0 ? pick(1, 2) : 1;
      j.min_nodes = j.node_step * pick(1, j.nodes / j.node_step);
    }
    j.comm = static_cast<CommKind>(pick(0, 2));
    j.may_span_zones = pick(0, 3) == 0;
    j.expected_runtime = pick(0, 1) ? pick(10, 5000) : 0;
    j.submit_time = pick(0, 100);
    c.queue.push_back(j);
  }
  return c;
}

TEST(SchedulerPropertyTest, DecisionsAreSoundOnRandomClusters) {
  for (uint64_t seed = 1; seed <= 300; ++seed) {
    RandomCase c = MakeRandomCase(seed);
    for (const std::string& policy : PlacementPolicyNames()) {
      SchedulerOptions options;
      options.node_quota["user0"] = 3;
      Scheduler scheduler(MakePlacementPolicy(policy), options);
      Decision d = scheduler.Decide(*c.state, c.queue, 100);
      Decision again = scheduler.Decide(*c.state, c.queue, 100);
      // Deterministic.
      ASSERT_EQ(d.suspends, again.suspends) << seed << " " << policy;
      ASSERT_EQ(d.starts.size(), again.starts.size());
      for (std::size_t i = 0; i < d.starts.size(); ++i) {
        ASSERT_EQ(d.starts[i].job, again.starts[i].job);
        ASSERT_EQ(d.starts[i].placement.nodes, again.starts[i].placement.nodes);
      }
      // Applying the decision never over-allocates: every suspend and start succeeds in order.
      ClusterState after = *c.state;
      for (JobId v : d.suspends)
        ASSERT_TRUE(after.Release(v).ok()) << seed << " " << policy << " victim " << v;
      std::map<JobId, const JobRequest*> by_id;
      for (const JobRequest& j : c.queue)
        by_id[j.id] = &j;
      for (const auto& g : d.group_starts) {
        const JobRequest& j = *by_id.at(g.job);
        ASSERT_TRUE(j.AsksForGroups());
        ASSERT_EQ(static_cast<int>(g.placement.nodes.size()), j.node_step);
        ASSERT_TRUE(after.find(g.job) != nullptr) << "a suspended job's group never starts";
        Status grown = after.Grow(g.job, g.placement.nodes);
        ASSERT_TRUE(grown.ok()) << seed << " " << policy << ": " << grown.message();
      }
      for (const auto& s : d.starts) {
        const JobRequest& j = *by_id.at(s.job);
        // Gangs are all or nothing (an elastic one: whole groups, at least its minimum);
        // sub-node jobs get their GPUs on one node.
        const int got = static_cast<int>(s.placement.nodes.size());
        if (j.Elastic()) {
          ASSERT_TRUE(got <= j.nodes && got >= j.min_nodes && got % j.node_step == 0)
              << seed << " " << policy << ": " << got << " of " << j.nodes;
          ASSERT_EQ(s.placement.gpus_per_node, j.gpus_per_node);
        } else if (j.Gang()) {
          ASSERT_EQ(got, j.nodes) << seed << " " << policy;
          ASSERT_EQ(s.placement.gpus_per_node, j.gpus_per_node);
        } else {
          ASSERT_EQ(s.placement.nodes.size(), 1u);
          ASSERT_EQ(s.placement.gpus_per_node, j.gpus);
        }
        ASSERT_TRUE(after.Allocate(j, s.placement, 100).ok()) << seed << " " << policy;
        // Our policy keeps allreduce gangs in one zone unless allowed.
        if (policy == "congestion-aware" && j.comm == CommKind::kAllreduce && !j.may_span_zones) {
          for (int n : s.placement.nodes) {
            ASSERT_EQ(c.topology->nodes()[n].zone, c.topology->nodes()[s.placement.nodes[0]].zone);
          }
        }
      }
      // Quotas hold after the round.
      int user0 = 0;
      for (const RunningJob& r : after.running()) {
        if (r.request.user == "user0")
          user0 += r.request.Gang() ? static_cast<int>(r.placement.nodes.size()) : 1;
      }
      int user0_before = 0;
      for (const RunningJob& r : c.state->running()) {
        if (r.request.user == "user0")
          user0_before += r.request.Gang() ? static_cast<int>(r.placement.nodes.size()) : 1;
      }
      ASSERT_LE(user0, std::max(3, user0_before)) << seed << " " << policy;
      // Suspended jobs always had lower priority than some started job.
      for (JobId v : d.suspends) {
        int victim_priority = c.state->find(v)->request.priority;
        bool justified = false;
        for (const auto& s : d.starts)
          justified |= by_id.at(s.job)->priority > victim_priority;
        for (const auto& g : d.group_starts)
          justified |= by_id.at(g.job)->priority > victim_priority;
        ASSERT_TRUE(justified) << seed << " " << policy;
      }
      // Every queued job is either started or explained; so is every missing group.
      std::size_t asking = 0, groups = 0, groups_explained = 0;
      for (const JobRequest& j : c.queue) {
        asking += j.AsksForGroups();
        groups += j.missing_groups.size();
      }
      for (const auto& [id, waiting] : d.groups_waiting) {
        groups_explained += waiting.size();
        for (const auto& [replica, why] : waiting)
          ASSERT_FALSE(why.empty());
      }
      ASSERT_EQ(d.starts.size() + d.pending.size(), c.queue.size() - asking)
          << seed << " " << policy;
      ASSERT_EQ(d.group_starts.size() + groups_explained, groups) << seed << " " << policy;
      for (const auto& [id, why] : d.pending)
        ASSERT_FALSE(why.empty());
    }
  }
}

// ---- running fault-tolerant jobs' replica groups ---------------------------------------------

// Alice's fault-tolerant job 5: three replica groups of 2 nodes (min 2), running replicas 0 and 1
// on nodes 12-15 (zone B), asking for replica 2 (lost, or never started with `lost` false).
JobRequest RunningReplicas(int priority = 3, bool lost = true) {
  JobRequest j = Elastic(5, 3, 2, 2);
  j.priority = priority;
  MissingGroup group;
  group.replica = 2;
  group.lost = lost;
  j.missing_groups.push_back(group);
  return j;
}

std::vector<std::pair<JobId, int>> GroupsStarted(const Decision& d) {
  std::vector<std::pair<JobId, int>> started;
  for (const auto& g : d.group_starts)
    started.emplace_back(g.job, g.replica);
  return started;
}

TEST_F(SchedulerTest, ALostReplicaGroupIsReplacedByTheRound) {
  JobRequest ft = RunningReplicas();
  Run(ft, {12, 13, 14, 15});
  state_->SetDrained(6, true);  // where the lost group ran
  Decision d = Decide({ft}, 100, NoPreemption());
  ASSERT_THAT(GroupsStarted(d), ElementsAre(std::pair<JobId, int>(5, 2)));
  EXPECT_TRUE(d.group_starts[0].replacement);
  EXPECT_EQ(d.group_starts[0].placement.nodes.size(), 2u);
  for (int n : d.group_starts[0].placement.nodes) {
    EXPECT_NE(n, 6);
    EXPECT_EQ(n < 12 || n > 15, true) << "not on the job's own nodes";
  }
  // It asked for a group, not to start: nothing else is said of it.
  EXPECT_THAT(d.starts, IsEmpty());
  EXPECT_THAT(d.pending, IsEmpty());
  EXPECT_THAT(d.groups_waiting, IsEmpty());
}

TEST_F(SchedulerTest, AReplacementAvoidsTheNodesItsGroupsStraggledOn) {
  // Free in zone B: nodes 8-11. The group straggled on 8 and 9: the replacement takes 10 and 11,
  // and the avoided nodes are free again for everyone after the round.
  JobRequest ft = RunningReplicas();
  ft.avoid_nodes = {8, 9};
  Run(ft, {12, 13, 14, 15});
  Run(Job(10, 8, 3, "bob"), {0, 1, 2, 3, 4, 5, 6, 7});
  Decision d = Decide({ft}, 100, NoPreemption());
  ASSERT_THAT(GroupsStarted(d), ElementsAre(std::pair<JobId, int>(5, 2)));
  EXPECT_THAT(d.group_starts[0].placement.nodes, ElementsAre(10, 11));
  EXPECT_FALSE(state_->drained(8));
  // Only the avoided nodes free: it waits, saying why.
  ft.avoid_nodes = {8, 9, 10, 11};
  d = Decide({ft}, 100, NoPreemption());
  EXPECT_THAT(d.group_starts, IsEmpty());
  ASSERT_EQ(d.groups_waiting.count(5), 1u);
  EXPECT_THAT(d.groups_waiting.at(5).at(2), HasSubstr("off the 4 nodes its groups straggled on"));
}

TEST_F(SchedulerTest, AReplacementComesInItsJobsPlaceInTheOrder) {
  // Free: nodes 8 and 9 only (zone B, the job's). A queued job of higher priority takes them; one
  // of lower priority waits behind the replacement.
  JobRequest ft = RunningReplicas();
  Run(ft, {12, 13, 14, 15});
  Run(Job(10, 8, 3, "bob"), {0, 1, 2, 3, 4, 5, 6, 7});
  Run(Job(11, 2, 3, "bob"), {10, 11});
  Decision d = Decide({ft, Job(1, 2, /*priority=*/5, "carol")}, 100, NoPreemption());
  EXPECT_THAT(Started(d), ElementsAre(1));
  EXPECT_THAT(d.group_starts, IsEmpty());
  EXPECT_EQ(
      d.groups_waiting.at(5).at(2),
      "replica 2 is not replaced: it needs 2 nodes with 8 free GPUs; 0 are free in zone B (where "
      "its other groups run)");
  d = Decide({ft, Job(1, 2, /*priority=*/1, "carol")}, 100, NoPreemption());
  EXPECT_THAT(GroupsStarted(d), ElementsAre(std::pair<JobId, int>(5, 2)));
  EXPECT_THAT(d.group_starts[0].placement.nodes, UnorderedElementsAre(8, 9));
  EXPECT_THAT(Started(d), IsEmpty());
}

TEST_F(SchedulerTest, AReplacementBehindABlockedJobOfHigherPriorityKeepsOffItsReservation) {
  // Bob's jobs end at t=1000 (nodes 0-5) and t=5000 (8-11); free: 6 and 7. Job 1 (priority 5)
  // needs all of zone A: it reserves nodes 0-7 for t=1000. The replacement (its job gives no
  // expected end) may not take 6 and 7. (It may span zones: its groups' zone is another matter.)
  JobRequest ft = RunningReplicas();
  ft.may_span_zones = true;
  Run(ft, {12, 13, 14, 15});
  RunTwoJobsWithExpectedEnds();
  Decision d = Decide({ft, Job(1, 8, /*priority=*/5, "carol")}, 100, NoPreemption());
  EXPECT_THAT(d.group_starts, IsEmpty());
  EXPECT_THAT(d.reserved, UnorderedElementsAre(0, 1, 2, 3, 4, 5, 6, 7));
  EXPECT_THAT(
      d.groups_waiting.at(5).at(2),
      HasSubstr("replica 2 is not replaced: it needs 2 nodes with 8 free GPUs; 0 are "
                "free off the nodes reserved for job 1 (priority 5, 8 nodes), which is ahead and "
                "expected to start in 15m"));
  // A job that ends before the reservation may take them (a backfill).
  ft.expected_runtime = 500;
  state_ = std::make_unique<ClusterState>(*topology_);
  Run(ft, {12, 13, 14, 15});
  RunTwoJobsWithExpectedEnds();
  d = Decide({ft, Job(1, 8, /*priority=*/5, "carol")}, 100, NoPreemption());
  EXPECT_THAT(GroupsStarted(d), ElementsAre(std::pair<JobId, int>(5, 2)));
}

TEST_F(SchedulerTest, AReplacementMaySuspendJobsOfLowerPriority) {
  JobRequest ft = RunningReplicas(/*priority=*/5);
  Run(ft, {12, 13, 14, 15});
  Run(Job(10, 8, 3, "bob"), {0, 1, 2, 3, 4, 5, 6, 7}, 0, 50);
  Run(Job(11, 2, 3, "bob"), {8, 9}, 0, 90);  // loses the least work
  Run(Job(12, 2, 3, "bob"), {10, 11}, 0, 20);
  Decision d = Decide({ft}, 100);
  EXPECT_THAT(d.suspends, ElementsAre(11));
  EXPECT_EQ(d.suspended_for.at(11), 5);
  ASSERT_THAT(GroupsStarted(d), ElementsAre(std::pair<JobId, int>(5, 2)));
  EXPECT_THAT(d.group_starts[0].placement.nodes, UnorderedElementsAre(8, 9));
  // Of the same priority: it waits.
  ft.priority = 3;
  d = Decide({ft}, 100);
  EXPECT_THAT(d.suspends, IsEmpty());
  EXPECT_THAT(d.group_starts, IsEmpty());
}

TEST_F(SchedulerTest, AReplacementKeepsToItsUsersQuota) {
  JobRequest ft = RunningReplicas();
  Run(ft, {12, 13, 14, 15});
  SchedulerOptions options = NoPreemption();
  options.node_quota["alice"] = 6;
  EXPECT_THAT(GroupsStarted(Decide({ft}, 100, options)), ElementsAre(std::pair<JobId, int>(5, 2)));
  Run(Job(10, 1, 3, "alice"), {0});
  Decision d = Decide({ft}, 100, options);
  EXPECT_THAT(d.group_starts, IsEmpty());
  EXPECT_EQ(d.groups_waiting.at(5).at(2),
            "replica 2 is not replaced: user alice may hold 6 nodes and holds 5; a group needs 2 "
            "more");
}

TEST_F(SchedulerTest, ReplacementsThatFailAtOnceWaitLongerAndARunPlacesAtMostItsBudget) {
  JobRequest ft = RunningReplicas();
  Run(ft, {12, 13, 14, 15});
  // One replacement that lived 10 s: the next waits 1 s after it ended; two, 2 s.
  ft.missing_groups[0].ended_replacements = {{100, 110}};
  ft.missing_groups[0].last_end = 110;
  Decision d = Decide({ft}, 110, NoPreemption());
  EXPECT_THAT(d.group_starts, IsEmpty());
  EXPECT_EQ(d.groups_waiting.at(5).at(2),
            "replica 2 is not replaced yet: 1 of its replacements failed within 1m of starting; "
            "the next in 1 s");
  EXPECT_THAT(Decide({ft}, 111, NoPreemption()).group_starts, Not(IsEmpty()));
  ft.missing_groups[0].ended_replacements.push_back({105, 110});
  EXPECT_THAT(Decide({ft}, 111, NoPreemption()).group_starts, IsEmpty());
  EXPECT_THAT(Decide({ft}, 112, NoPreemption()).group_starts, Not(IsEmpty()));
  // One that ran for an hour is no quick failure.
  ft.missing_groups[0].ended_replacements = {{100, 3700}};
  ft.missing_groups[0].last_end = 3700;
  EXPECT_THAT(Decide({ft}, 3700, NoPreemption()).group_starts, Not(IsEmpty()));
  // The policy sets the waits.
  SchedulerOptions slow = NoPreemption();
  slow.replacements.quick_failure = 7200;
  slow.replacements.first_backoff = 30;
  EXPECT_THAT(Decide({ft}, 3720, slow).group_starts, IsEmpty());
  EXPECT_THAT(Decide({ft}, 3730, slow).group_starts, Not(IsEmpty()));
  // The run's budget: its own most, else per_replica per replica.
  ft.replacements_placed = 2;
  ft.max_replacements = 2;
  d = Decide({ft}, 5000, NoPreemption());
  EXPECT_THAT(d.group_starts, IsEmpty());
  EXPECT_EQ(d.groups_waiting.at(5).at(2),
            "replica 2 is not replaced: the run has placed 2 replacements, its most "
            "(max_restarts per replica)");
  ft.max_replacements = 0;
  EXPECT_THAT(Decide({ft}, 5000, NoPreemption()).group_starts, Not(IsEmpty()));  // 3 x 3
  ft.replacements_placed = 9;
  EXPECT_THAT(Decide({ft}, 5000, NoPreemption()).group_starts, IsEmpty());
}

TEST_F(SchedulerTest, AnAllreduceJobsNewGroupGoesToTheZoneOfItsOtherGroups) {
  // Its groups run in zone B (nodes 12-15); zone A is all free, zone B has nodes 8 and 9.
  JobRequest ft = RunningReplicas();
  Run(ft, {12, 13, 14, 15});
  Run(Job(10, 2, 3, "bob"), {10, 11});
  Decision d = Decide({ft}, 100, NoPreemption());
  ASSERT_THAT(GroupsStarted(d), ElementsAre(std::pair<JobId, int>(5, 2)));
  EXPECT_THAT(d.group_starts[0].placement.nodes, UnorderedElementsAre(8, 9));
  // With zone B full, it waits rather than averaging gradients across zones ...
  Run(Job(11, 2, 3, "bob"), {8, 9});
  d = Decide({ft}, 100, NoPreemption());
  EXPECT_THAT(d.group_starts, IsEmpty());
  EXPECT_THAT(d.groups_waiting.at(5).at(2), HasSubstr("in zone B (where its other groups run)"));
  // ... unless the job may span zones (or is not an allreduce job).
  ft.may_span_zones = true;
  state_ = std::make_unique<ClusterState>(*topology_);
  Run(ft, {12, 13, 14, 15});
  Run(Job(10, 2, 3, "bob"), {10, 11});
  Run(Job(11, 2, 3, "bob"), {8, 9});
  EXPECT_THAT(GroupsStarted(Decide({ft}, 100, NoPreemption())),
              ElementsAre(std::pair<JobId, int>(5, 2)));
}

TEST_F(SchedulerTest, GroupsARunBeganWithoutComeAfterTheQueuedJobs) {
  // Free: nodes 8 and 9. A job queued behind the fault-tolerant one (same priority, submitted
  // later) takes them first: the run does not need the group to go on.
  JobRequest ft = RunningReplicas(3, /*lost=*/false);
  Run(ft, {12, 13, 14, 15});
  Run(Job(10, 8, 3, "bob"), {0, 1, 2, 3, 4, 5, 6, 7});
  Run(Job(11, 2, 3, "bob"), {10, 11});
  Decision d = Decide({ft, Job(20, 2, 3, "carol")}, 100, NoPreemption());
  EXPECT_THAT(Started(d), ElementsAre(20));
  EXPECT_THAT(d.group_starts, IsEmpty());
  EXPECT_THAT(d.groups_waiting.at(5).at(2),
              HasSubstr("replica 2 waits to start (the run started without it): it needs 2 "
                        "nodes"));
  d = Decide({ft}, 100, NoPreemption());
  ASSERT_THAT(GroupsStarted(d), ElementsAre(std::pair<JobId, int>(5, 2)));
  EXPECT_FALSE(d.group_starts[0].replacement);
}

}  // namespace
}  // namespace ff::scheduler
