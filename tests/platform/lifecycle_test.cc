// The job lifecycle (platform/lifecycle.h): every event in every state it can meet, as a pure
// function of a job and an event, the way scheduler_test tests the scheduler.
#include "platform/lifecycle.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace ff::platform {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

constexpr int64_t kNow = 1'000'000;

hai::Job Queued(int nodes = 2, int procs = 1, hai::RestartPolicy policy = hai::RESTART_ON_NODE_LOST,
                int max_restarts = 0) {
  hai::Job job;
  job.set_id(7);
  job.set_user("alice");
  job.set_state(hai::QUEUED);
  job.mutable_spec()->set_nodes(nodes);
  job.mutable_spec()->set_procs_per_node(procs);
  job.mutable_spec()->set_restart_policy(policy);
  job.mutable_spec()->set_max_restarts(max_restarts);
  return job;
}

hai::Run On(std::vector<std::string> nodes) {
  hai::Run run;
  for (const std::string& n : nodes) {
    run.add_nodes(n);
    run.add_gpus("0");
  }
  run.set_master_addr("10.0.0.1");
  run.set_master_port(29500);
  return run;
}

Transition Must(const hai::Job& job, const JobEvent& event, int64_t now = kNow) {
  Result<Transition> t = Apply(job, event, now);
  EXPECT_TRUE(t.ok()) << t.status().ToString();
  if (t.ok()) return *t;
  Transition unchanged;
  unchanged.job = job;
  return unchanged;
}

hai::Job Running(int nodes = 2, int procs = 1,
                 hai::RestartPolicy policy = hai::RESTART_ON_NODE_LOST, int max_restarts = 0) {
  std::vector<std::string> names;
  for (int i = 0; i < nodes; ++i)
    names.push_back("n" + std::to_string(i));
  return Must(Queued(nodes, procs, policy, max_restarts), Started{On(names)}).job;
}

TEST(LifecycleTest, StartingMakesTheRunCurrentAndWakesItsNodes) {
  hai::Job job = Queued();
  job.set_preempted_by(3);
  job.set_locality_wait_since_ms(5);
  job.set_message("requeued: node n9 lost");
  Transition t = Must(job, Started{On({"n0", "n1"})});
  EXPECT_TRUE(t.changed);
  EXPECT_EQ(t.job.state(), hai::RUNNING);
  ASSERT_EQ(t.job.runs_size(), 1);
  EXPECT_EQ(t.job.runs(0).index(), 0);
  EXPECT_EQ(t.job.runs(0).start_ms(), kNow);
  EXPECT_EQ(t.job.runs(0).end(), hai::RUN_END_UNSPECIFIED);
  EXPECT_EQ(t.job.preempted_by(), 0);
  EXPECT_EQ(t.job.locality_wait_since_ms(), 0);  // a later suspension waits afresh
  EXPECT_EQ(t.job.message(), "");
  EXPECT_EQ(t.job.pending_history(0).reason(), "started: run 0");
  EXPECT_THAT(t.wake, ElementsAre("n0", "n1"));
  EXPECT_FALSE(t.run_ended);
  EXPECT_EQ(t.log, "job 7 run 0 starts on n0,n1");
}

TEST(LifecycleTest, OnlyAQueuedOrSuspendedJobStarts) {
  Result<Transition> again = Apply(Running(), Started{On({"n2", "n3"})}, kNow);
  ASSERT_FALSE(again.ok());
  EXPECT_EQ(again.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_THAT(again.status().message(), HasSubstr("job 7 is running"));
}

TEST(LifecycleTest, EveryRankExitingZeroSucceeds) {
  hai::Job job = Running(2, 2);
  for (int rank : {0, 1, 2}) {
    Transition t = Must(job, RankExited{0, rank, 0});
    EXPECT_TRUE(t.changed);
    EXPECT_FALSE(t.run_ended);
    EXPECT_THAT(t.wake, IsEmpty());  // the others go on running
    job = t.job;
  }
  Transition t = Must(job, RankExited{0, 3, 0}, kNow + 5);
  EXPECT_TRUE(t.run_ended);
  EXPECT_EQ(t.job.state(), hai::SUCCEEDED);
  EXPECT_EQ(t.job.end_ms(), kNow + 5);
  EXPECT_EQ(t.job.runs(0).end(), hai::RUN_EXITED);
  EXPECT_EQ(t.job.runs(0).end_ms(), kNow + 5);
  EXPECT_EQ(t.job.message(), "every rank exited with 0");
  EXPECT_THAT(t.log, HasSubstr("succeeded"));
}

TEST(LifecycleTest, ARankFailingEndsTheGangAndTheJobFails) {
  Transition t = Must(Running(), RankExited{0, 1, 3});
  EXPECT_EQ(t.job.state(), hai::RUNNING);  // rank 0 is still being killed
  EXPECT_EQ(t.job.runs(0).end(), hai::RUN_RANK_FAILED);
  EXPECT_EQ(t.job.runs(0).end_reason(), "rank 1 exited with code 3");
  EXPECT_THAT(t.wake, ElementsAre("n0", "n1"));  // its nodes kill the rest
  t = Must(t.job, RankExited{0, 0, 143});
  EXPECT_TRUE(t.run_ended);
  EXPECT_EQ(t.job.state(), hai::FAILED);
  EXPECT_EQ(t.job.message(), "rank 1 exited with code 3");  // the cause, not the killed rank
}

TEST(LifecycleTest, RestartOnFailureRequeuesUpToMaxRestarts) {
  hai::Job job = Running(1, 1, hai::RESTART_ON_FAILURE, 2);
  for (int run = 0; run < 2; ++run) {
    Transition t = Must(job, RankExited{run, 0, 1});
    EXPECT_EQ(t.job.state(), hai::QUEUED) << "run " << run;
    EXPECT_EQ(t.job.message(), "requeued: rank 0 exited with code 1");
    job = Must(t.job, Started{On({"n0"})}).job;
  }
  Transition t = Must(job, RankExited{2, 0, 1});
  EXPECT_EQ(t.job.state(), hai::FAILED);
  EXPECT_EQ(t.job.runs_size(), 3);
}

TEST(LifecycleTest, ALostNodeEndsTheRunAndRequeuesTheJob) {
  hai::Job job = Running(2, 2);
  Transition t = Must(job, NodeLost{"n1"});
  EXPECT_TRUE(t.changed);
  EXPECT_EQ(t.job.runs(0).end(), hai::RUN_NODE_LOST);
  EXPECT_EQ(t.job.runs(0).end_reason(), "node n1 lost");
  EXPECT_EQ(t.job.runs(0).exit_codes().at(2), kLostExitCode);
  EXPECT_EQ(t.job.runs(0).exit_codes().at(3), kLostExitCode);
  EXPECT_EQ(t.job.state(), hai::RUNNING);  // n0's ranks are being killed
  EXPECT_THAT(t.wake, ElementsAre("n0", "n1"));
  // n0's ranks die of the broken gang: the run still ended because of the node.
  t = Must(t.job, RankExited{0, 0, 1});
  EXPECT_EQ(t.job.runs(0).end(), hai::RUN_NODE_LOST);
  t = Must(t.job, RankExited{0, 1, 137});
  EXPECT_TRUE(t.run_ended);
  EXPECT_EQ(t.job.state(), hai::QUEUED);
  EXPECT_EQ(t.job.message(), "requeued: node n1 lost");
  EXPECT_EQ(t.job.end_ms(), 0);
}

TEST(LifecycleTest, ANodeLostAfterARankFailedIsTheCause) {
  Transition t = Must(Running(), RankExited{0, 0, 1});
  t = Must(t.job, NodeLost{"n1"});
  EXPECT_EQ(t.job.runs(0).end(), hai::RUN_NODE_LOST);
  EXPECT_EQ(t.job.state(), hai::QUEUED);  // rank 0 failed because n1 went away
}

TEST(LifecycleTest, ALostNodeFailsAJobThatNeverRestarts) {
  Transition t = Must(Running(1, 1, hai::RESTART_NEVER), NodeLost{"n0"});
  EXPECT_TRUE(t.run_ended);
  EXPECT_EQ(t.job.state(), hai::FAILED);
  EXPECT_EQ(t.job.message(), "node n0 lost; restart policy is never");
}

TEST(LifecycleTest, ANodeTheRunDoesNotUseChangesNothing) {
  hai::Job job = Running();
  Transition t = Must(job, NodeLost{"n9"});
  EXPECT_FALSE(t.changed);
  EXPECT_THAT(t.wake, IsEmpty());
  EXPECT_EQ(t.log, "");
  EXPECT_FALSE(Must(Queued(), NodeLost{"n0"}).changed);
}

TEST(LifecycleTest, StaleExitsChangeNothing) {
  hai::Job job = Running(1, 1, hai::RESTART_ON_FAILURE, 3);
  job = Must(job, RankExited{0, 0, 1}).job;              // run 0 failed: requeued
  job = Must(job, Started{On({"n1"})}).job;              // run 1
  EXPECT_FALSE(Must(job, RankExited{0, 0, 0}).changed);  // run 0's, reported late
  EXPECT_FALSE(Must(job, RankExited{1, 5, 0}).changed);  // no rank 5
  EXPECT_FALSE(Must(job, RankExited{1, -1, 0}).changed);
  hai::Job exited = Must(job, RankExited{1, 0, 0}).job;
  EXPECT_EQ(exited.state(), hai::SUCCEEDED);
  EXPECT_FALSE(Must(exited, RankExited{1, 0, 1}).changed);  // reported twice
}

TEST(LifecycleTest, StoppingAQueuedJobEndsItAtOnce) {
  Transition t = Must(Queued(), StopRequested{"alice"});
  EXPECT_EQ(t.job.state(), hai::STOPPED);
  EXPECT_EQ(t.job.end_ms(), kNow);
  EXPECT_EQ(t.job.message(), "stopped by alice before it ran");
  EXPECT_THAT(t.wake, IsEmpty());
}

TEST(LifecycleTest, StoppingARunningJobKillsItsRanksThenStopsIt) {
  Transition t = Must(Running(), StopRequested{"admin"});
  EXPECT_TRUE(t.job.stop_requested());
  EXPECT_EQ(t.job.state(), hai::RUNNING);
  EXPECT_THAT(t.wake, ElementsAre("n0", "n1"));
  t = Must(t.job, RankExited{0, 0, 143});
  EXPECT_EQ(t.job.runs(0).end(), hai::RUN_END_UNSPECIFIED);  // a killed rank is no failure
  t = Must(t.job, RankExited{0, 1, 143});
  EXPECT_EQ(t.job.state(), hai::STOPPED);
  EXPECT_EQ(t.job.runs(0).end(), hai::RUN_STOPPED);
  EXPECT_EQ(t.job.message(), "stopped by its user");
}

TEST(LifecycleTest, AFinishedJobCannotBeStopped) {
  hai::Job done = Must(Must(Running(1), RankExited{0, 0, 0}).job, RankExited{0, 0, 0}).job;
  Result<Transition> t = Apply(done, StopRequested{"alice"}, kNow);
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(t.status().message(), "job 7 has already ended (succeeded)");
}

TEST(LifecycleTest, ASuspendedJobCheckpointsLeavesAndWaitsToResume) {
  Transition t = Must(Running(), SuspendRequested{"alice"});
  EXPECT_EQ(t.job.state(), hai::SUSPENDING);
  EXPECT_THAT(t.wake, ElementsAre("n0", "n1"));
  t = Must(t.job, RankExited{0, 0, 0});
  t = Must(t.job, RankExited{0, 1, 0});
  EXPECT_TRUE(t.run_ended);
  EXPECT_EQ(t.job.state(), hai::SUSPENDED);
  EXPECT_EQ(t.job.runs(0).end(), hai::RUN_SUSPENDED);
  EXPECT_EQ(t.job.end_ms(), 0);
  // It resumes as run 1.
  t = Must(t.job, Started{On({"n2", "n3"})});
  EXPECT_EQ(t.job.state(), hai::RUNNING);
  EXPECT_EQ(t.job.runs(1).index(), 1);
}

TEST(LifecycleTest, ANodeLostWhileSuspendingRequeuesTheJob) {
  Transition t = Must(Must(Running(), SuspendRequested{"alice"}).job, NodeLost{"n0"});
  t = Must(t.job, RankExited{0, 1, 0});
  EXPECT_EQ(t.job.state(), hai::QUEUED);
  EXPECT_EQ(t.job.runs(0).end(), hai::RUN_NODE_LOST);
}

TEST(LifecycleTest, OnlyARunningJobIsSuspended) {
  for (const hai::Job& job : {Queued(), Must(Running(), SuspendRequested{"a"}).job,
                              Must(Running(), StopRequested{"a"}).job}) {
    Result<Transition> t = Apply(job, SuspendRequested{"alice"}, kNow);
    ASSERT_FALSE(t.ok());
    EXPECT_EQ(t.status().code(), StatusCode::kFailedPrecondition);
    EXPECT_THAT(t.status().message(), HasSubstr("only running jobs can be suspended"));
  }
}

TEST(LifecycleTest, APreemptedJobRecordsWhoForAndWhen) {
  Transition t = Must(Running(), Preempted{12, 6});
  EXPECT_EQ(t.job.state(), hai::SUSPENDING);
  EXPECT_EQ(t.job.preempted_by(), 12);
  EXPECT_EQ(t.job.preempted_by_priority(), 6);
  EXPECT_EQ(t.job.preempted_at_ms(), kNow);
  EXPECT_EQ(t.job.pending_reason(), "suspended for job 12 (priority 6)");
  EXPECT_THAT(t.wake, ElementsAre("n0", "n1"));
}

TEST(LifecycleTest, ASuspendedRunSaysWhetherItSavedWithinItsDeadlineOrWhatItLost) {
  hai::Job job = Running();  // 2 nodes x 8 GPUs
  job.mutable_spec()->set_gpus_per_node(8);
  job = Must(job, Preempted{12, 6, 8000, "lost ~20 GPU-s: a 1s checkpoint and a 1s restart"}).job;
  const hai::Run& asked = job.runs(0);
  EXPECT_EQ(asked.suspend_ms(), kNow);
  EXPECT_EQ(asked.suspend_grace_ms(), 8000);
  ASSERT_GT(asked.events_size(), 0);
  EXPECT_EQ(asked.events(asked.events_size() - 1).text(),
            "suspended for job 12 (priority 6): lost ~20 GPU-s: a 1s checkpoint and a 1s "
            "restart; given 8.0s to save and exit");
  auto end = [](hai::Job j, int64_t step, int64_t time_ms, int code) {
    hai::CheckpointInfo& c = *j.mutable_runs(0)->mutable_checkpoint();
    c.set_step(step);
    c.set_time_ms(time_ms);
    c.set_write_s(3.25);
    c.set_ranks(2);
    j = Must(j, RankExited{0, 0, code}).job;
    return Must(j, RankExited{0, 1, code}).job;
  };
  // Its ranks reported the checkpoint of step 40 after they were asked: saved in time.
  hai::Job saved = end(job, 40, kNow + 3500, 0);
  EXPECT_EQ(saved.state(), hai::SUSPENDED);
  EXPECT_EQ(saved.message(),
            "suspended (saved step 40 in 3.2s, within its 8.0s deadline); resumes from its "
            "checkpoint when it is scheduled");
  EXPECT_EQ(saved.runs(0).events(saved.runs(0).events_size() - 1).text(),
            "suspended: saved step 40 in 3.2s, within its 8.0s deadline");
  // Killed at the deadline (SIGKILL), its last checkpoint 10 minutes before: 16 GPUs x 600 s.
  hai::Job killed = end(job, 30, kNow - 600'000, 128 + 9);
  EXPECT_EQ(killed.state(), hai::SUSPENDED);
  EXPECT_EQ(killed.runs(0).events(killed.runs(0).events_size() - 1).text(),
            "suspended: missed its 8.0s suspend deadline: killed; lost ~160 GPU-min since its "
            "checkpoint of step 30 at 00:06:40 UTC");
  EXPECT_EQ(killed.runs(0).end_reason(), "suspended");  // what decisions read stays the same
}

TEST(LifecycleTest, ThePendingHistoryKeepsOneEntryPerShapeAndTheLastTwenty) {
  hai::Job job = Queued();
  RecordPending(job, 1, "2 jobs ahead");
  RecordPending(job, 2, "1 jobs ahead");  // the same shape: the reason changes, no new entry
  EXPECT_EQ(job.pending_reason(), "1 jobs ahead");
  ASSERT_EQ(job.pending_history_size(), 1);
  for (int i = 0; i < 30; ++i)
    RecordPending(job, 10 + i, i % 2 ? "waiting for nodes" : "quota of user alice");
  EXPECT_EQ(job.pending_history_size(), 20);
  EXPECT_EQ(job.pending_history(19).time_ms(), 39);
}

// ---- fault-tolerant jobs: replica groups ------------------------------------------------------

// A running job of `replicas` groups of `nodes` nodes x `procs` ranks on n0, n1, ...; `started`
// of them (all by default) run: an elastic start.
hai::Job RunningGroups(int replicas = 3, int min_replicas = 2, int nodes = 1, int procs = 2,
                       int started = 0) {
  hai::Job job = Queued(nodes, procs);
  job.mutable_spec()->set_replicas(replicas);
  job.mutable_spec()->set_min_replicas(min_replicas);
  hai::Run run = On({});
  for (int g = 0; g < (started > 0 ? started : replicas); ++g) {
    for (int i = 0; i < nodes; ++i) {
      run.add_nodes("n" + std::to_string(g * nodes + i));
      run.add_gpus("0");
    }
    hai::ReplicaGroup* group = run.add_groups();
    group->set_replica(g);
    group->set_first_node(g * nodes);
    group->set_master_port(29500 + g);
  }
  return Must(job, Started{run}).job;
}

GroupStarted Replacement(int replica, std::vector<std::string> nodes) {
  GroupStarted e;
  e.run = 0;
  e.group.set_replica(replica);
  e.group.set_master_port(29600);
  e.nodes = nodes;
  e.gpus.assign(nodes.size(), "0");
  return e;
}

TEST(LifecycleTest, AKilledRankLosesItsReplicaGroupOnlyAndTheOthersGoOn) {
  hai::Job job = RunningGroups();
  EXPECT_EQ(WorldSize(job.spec()), 6);
  EXPECT_EQ(job.runs(0).groups(1).start_ms(), kNow);
  Transition t = Must(job, RankExited{0, 2, 137});  // replica 1's first rank, on n1
  EXPECT_EQ(t.job.state(), hai::RUNNING);
  EXPECT_FALSE(t.run_ended);
  EXPECT_TRUE(t.round_due);
  EXPECT_TRUE(t.job.runs(0).end_reason().empty());
  EXPECT_EQ(t.job.runs(0).groups(1).end_reason(), "rank 2 exited with code 137");
  EXPECT_EQ(t.job.runs(0).groups(1).end_ms(), 0) << "rank 3 is still to be killed";
  EXPECT_EQ(LiveGroups(t.job.runs(0)), 2);
  EXPECT_THAT(t.job.runs(0).events(0).text(), HasSubstr("replica 1 lost: rank 2 exited"));
  EXPECT_THAT(t.job.runs(0).events(0).text(), HasSubstr("2 of 3 replica groups go on"));
  EXPECT_THAT(HeldNodes(t.job), ElementsAre("n0", "n1", "n2"));
  t = Must(t.job, RankExited{0, 3, 143}, kNow + 5);  // killed by the agent
  EXPECT_EQ(t.job.runs(0).groups(1).end_ms(), kNow + 5);
  EXPECT_FALSE(t.job.runs(0).groups(1).finished());
  EXPECT_THAT(HeldNodes(t.job), ElementsAre("n0", "n2")) << "n1 is free for a replacement";
  EXPECT_EQ(t.job.state(), hai::RUNNING);
}

TEST(LifecycleTest, AReplacementGroupGetsNewRanksAndTheLostReplicasNumber) {
  hai::Job job = Must(Must(RunningGroups(), RankExited{0, 2, 137}).job, RankExited{0, 3, 143}).job;
  Transition t = Must(job, Replacement(1, {"n5"}), kNow + 10);
  const hai::Run& run = t.job.runs(0);
  ASSERT_EQ(run.groups_size(), 4);
  EXPECT_EQ(run.groups(3).replica(), 1);
  EXPECT_EQ(run.groups(3).incarnation(), 1);
  EXPECT_EQ(run.groups(3).first_node(), 3);
  EXPECT_EQ(run.groups(3).start_ms(), kNow + 10);
  EXPECT_THAT(run.nodes(), ElementsAre("n0", "n1", "n2", "n5"));
  EXPECT_THAT(t.wake, ElementsAre("n5"));
  EXPECT_THAT(run.events(run.events_size() - 1).text(),
              HasSubstr("replica 1 (replacement 1) started on n5 (ranks 6-7)"));
  EXPECT_THAT(HeldNodes(t.job), ElementsAre("n0", "n2", "n5"));
  // Its ranks are the run's: they exit like any.
  t = Must(t.job, RankExited{0, 6, 1});
  EXPECT_EQ(t.job.runs(0).groups(3).end_reason(), "rank 6 exited with code 1");
}

TEST(LifecycleTest, AnElasticStartSaysSoAndTheGroupsItLeftOutJoinAsTheirFirstIncarnation) {
  hai::Job job = RunningGroups(/*replicas=*/3, /*min_replicas=*/2, 1, 2, /*started=*/2);
  const hai::Run& run = job.runs(0);
  ASSERT_EQ(run.groups_size(), 2);
  EXPECT_EQ(LiveGroups(run), 2);
  ASSERT_EQ(run.events_size(), 1);
  EXPECT_EQ(run.events(0).text(),
            "started with 2 of 3 replica groups (no room for more now, min_replicas 2); the "
            "others start as nodes free and join at a step boundary");
  Transition t = Must(job, Replacement(2, {"n7"}), kNow + 10);
  ASSERT_EQ(t.job.runs(0).groups_size(), 3);
  const hai::ReplicaGroup& third = t.job.runs(0).groups(2);
  EXPECT_EQ(third.replica(), 2);
  EXPECT_EQ(third.incarnation(), 0) << "not a replacement: replica 2 never ran";
  EXPECT_EQ(third.first_node(), 2);
  EXPECT_THAT(t.job.runs(0).events(1).text(), HasSubstr("replica 2 started on n7 (ranks 4-5)"));
  EXPECT_EQ(LiveGroups(t.job.runs(0)), 3);
  // Losing one of the two it started with leaves fewer than min_replicas: the run ends.
  t = Must(job, RankExited{0, 2, 137});
  EXPECT_THAT(t.job.runs(0).end_reason(), HasSubstr("below min_replicas 2"));
}

TEST(LifecycleTest, ALiveReplicaIsNotReplacedNorAnyOnceTheTrainingFinished) {
  hai::Job job = RunningGroups();
  Result<Transition> t = Apply(job, Replacement(0, {"n5"}), kNow);
  ASSERT_FALSE(t.ok());
  EXPECT_THAT(t.status().message(), HasSubstr("replica 0 is alive"));
  t = Apply(job, Replacement(3, {"n5"}), kNow);
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), StatusCode::kInvalidArgument);
  t = Apply(job, Replacement(1, {"n5", "n6"}), kNow);  // a group is one node here
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), StatusCode::kInvalidArgument);
  // Replica 0 finishes (both ranks exit 0); replica 1 is then lost: the training is over.
  job = Must(Must(job, RankExited{0, 0, 0}).job, RankExited{0, 1, 0}).job;
  EXPECT_TRUE(job.runs(0).groups(0).finished());
  job = Must(job, RankExited{0, 2, 137}).job;
  EXPECT_EQ(job.state(), hai::RUNNING);
  t = Apply(job, Replacement(1, {"n5"}), kNow);
  ASSERT_FALSE(t.ok());
  EXPECT_THAT(t.status().message(), HasSubstr("the training is over"));
  EXPECT_FALSE(Apply(Queued(), Replacement(0, {"n5"}), kNow).ok()) << "not running";
}

TEST(LifecycleTest, AFaultTolerantJobSucceedsWhenAGroupFinishedDespiteItsLostGroups) {
  hai::Job job = Must(RunningGroups(), NodeLost{"n1"}).job;  // replica 1 lost with its node
  EXPECT_EQ(job.state(), hai::RUNNING);
  EXPECT_EQ(job.runs(0).groups(1).end_reason(), "node n1 lost");
  EXPECT_GT(job.runs(0).groups(1).end_ms(), 0) << "a lost node's ranks are gone at once";
  for (int rank : {0, 1, 4})
    job = Must(job, RankExited{0, rank, 0}).job;
  Transition t = Must(job, RankExited{0, 5, 0});
  EXPECT_TRUE(t.run_ended);
  EXPECT_EQ(t.job.state(), hai::SUCCEEDED);
  EXPECT_EQ(t.job.runs(0).end(), hai::RUN_EXITED);
  EXPECT_EQ(t.job.message(), "every rank of a replica group exited with 0");
}

TEST(LifecycleTest, BelowMinReplicasTheRunEndsAsAGangsWouldAndIsRequeued) {
  hai::Job job = Must(RunningGroups(3, 2), NodeLost{"n1"}).job;
  Transition t = Must(job, NodeLost{"n2"});  // 1 of 3 left, min 2
  EXPECT_EQ(t.job.runs(0).end(), hai::RUN_NODE_LOST);
  EXPECT_THAT(t.job.runs(0).end_reason(),
              HasSubstr("1 of 3 replica groups left, below min_replicas 2"));
  EXPECT_THAT(t.wake, ElementsAre("n0")) << "the last group's ranks are killed";
  EXPECT_EQ(t.job.state(), hai::RUNNING) << "until n0's ranks are gone";
  t = Must(Must(t.job, RankExited{0, 0, 143}).job, RankExited{0, 1, 143});
  EXPECT_TRUE(t.run_ended);
  EXPECT_EQ(t.job.state(), hai::QUEUED);
  EXPECT_THAT(t.job.message(), HasSubstr("requeued"));
}

TEST(LifecycleTest, ARankFailureBelowMinReplicasFollowsTheRestartPolicy) {
  hai::Job job = RunningGroups(2, 2);
  Transition t = Must(job, RankExited{0, 0, 1});
  EXPECT_EQ(t.job.runs(0).end(), hai::RUN_RANK_FAILED);
  for (int rank : {1, 2, 3})
    t = Must(t.job, RankExited{0, rank, 143});
  EXPECT_EQ(t.job.state(), hai::FAILED) << "restart policy on-node-lost";
}

TEST(LifecycleTest, ADrainedNodesGroupIsReplacedUnlessTooFewWouldBeLeft) {
  Transition t = Must(RunningGroups(3, 2), NodeDrained{"n1", "health: gpus: Xid 79"});
  EXPECT_EQ(t.job.runs(0).groups(1).end_reason(), "node n1 drained: health: gpus: Xid 79");
  EXPECT_THAT(t.wake, ElementsAre("n0", "n1", "n2"));
  t = Must(t.job, NodeDrained{"n2", "maintenance"});  // would leave 1 of min 2: it stays
  EXPECT_FALSE(t.changed);
  EXPECT_TRUE(t.job.runs(0).groups(2).end_reason().empty());
  // A gang is not touched by a drain.
  EXPECT_FALSE(Must(Running(), NodeDrained{"n0", "maintenance"}).changed);
}

TEST(LifecycleTest, AStragglingGroupIsMovedOffItsNodeUnlessTooFewWouldBeLeft) {
  Transition t = Must(RunningGroups(3, 2), GroupStraggles{"n1", "steps 0.4 s, best 0.2 s"});
  EXPECT_EQ(t.job.runs(0).groups(1).end_reason(),
            "it straggles on node n1: steps 0.4 s, best 0.2 s");
  EXPECT_THAT(t.job.runs(0).straggler_nodes(), ElementsAre("n1"));
  EXPECT_TRUE(t.round_due);
  // Another would leave 1 of min 2: it stays, and the history says so.
  t = Must(t.job, GroupStraggles{"n2", "steps 0.4 s, best 0.2 s"});
  EXPECT_TRUE(t.job.runs(0).groups(2).end_reason().empty());
  EXPECT_THAT(t.job.runs(0).straggler_nodes(), ElementsAre("n1"));
  EXPECT_THAT(t.job.runs(0).events(t.job.runs(0).events_size() - 1).text(),
              HasSubstr("straggles on node n2 but stays: without it fewer than min_replicas 2"));
  // A gang is not touched.
  EXPECT_FALSE(Must(Running(), GroupStraggles{"n0", "x"}).changed);
}

TEST(LifecycleTest, StoppingAFaultTolerantJobKillsEveryGroupAndEndsIt) {
  hai::Job job = Must(RunningGroups(2, 1), StopRequested{"alice"}).job;
  job = Must(job, RankExited{0, 0, 143}).job;
  EXPECT_TRUE(job.runs(0).groups(0).end_reason().empty()) << "stopping is not losing a group";
  for (int rank : {1, 2})
    job = Must(job, RankExited{0, rank, 143}).job;
  Transition t = Must(job, RankExited{0, 3, 143});
  EXPECT_EQ(t.job.state(), hai::STOPPED);
  // A node lost while it suspends requeues it, as a gang's would.
  job = Must(Must(RunningGroups(2, 1), SuspendRequested{"alice"}).job, NodeLost{"n0"}).job;
  EXPECT_EQ(job.runs(0).end(), hai::RUN_NODE_LOST);
}

// The quorum's membership changes are typed events; the run's events say them as people read
// them, and one from before the run started (an earlier run's) is not the run's.
TEST(LifecycleTest, QuorumChangesEnterTheRunsEventsAsTheyHappen) {
  hai::Job job = RunningGroups();
  hfreduce::QuorumEvent joined;
  joined.time_ms = kNow + 5;
  joined.kind = hfreduce::QuorumEvent::Kind::kJoined;
  joined.groups = {"1.1"};
  joined.step = 57;
  joined.source = "0";
  Transition t = Must(job, QuorumChanged{joined}, kNow + 6);
  EXPECT_TRUE(t.changed);
  const hai::Run& run = t.job.runs(0);
  EXPECT_EQ(run.events(run.events_size() - 1).text(),
            "quorum: group 1.1 joined the quorum at step 57, taking group 0's state");
  EXPECT_EQ(run.events(run.events_size() - 1).time_ms(), kNow + 5);
  hfreduce::QuorumEvent left = joined;
  left.kind = hfreduce::QuorumEvent::Kind::kLeft;
  left.groups = {"1", "2"};
  left.source.clear();
  t = Must(t.job, QuorumChanged{left}, kNow + 7);
  EXPECT_EQ(t.job.runs(0).events(t.job.runs(0).events_size() - 1).text(),
            "quorum: groups 1, 2 left the quorum at step 57");
  hfreduce::QuorumEvent earlier = joined;
  earlier.time_ms = kNow - 1000;
  t = Must(t.job, QuorumChanged{earlier}, kNow + 8);
  EXPECT_FALSE(t.changed);
}

TEST(LifecycleTest, AnExitOfARankNoRunHasIsIgnored) {
  hai::Job job = RunningGroups();
  Transition t = Must(job, RankExited{0, 6, 1});  // no replacement yet: ranks are 0..5
  EXPECT_FALSE(t.changed);
}

}  // namespace
}  // namespace ff::platform
