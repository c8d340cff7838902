// The straggler detector on summaries shaped like what ranks record: which node, which cause,
// and no finding for a healthy job, an uneven one, or one slower everywhere alike.
#include "platform/step_detector.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace ff::platform {
namespace {

// A rank's summary: its phases per step; step_s is the job's step (the same on every rank of a
// synchronous job), comm_s what is left of it.
hai::StepSummary Rank(int rank, const std::string& node, double step, double compute,
                      double data = 0, double ckpt = 0, int64_t steps = 100) {
  hai::StepSummary s;
  s.set_rank(rank);
  s.set_node(node);
  s.set_window(8);
  s.set_recorded(steps);
  s.set_last_step(steps - 1);
  s.set_step_s(step);
  s.set_compute_s(compute);
  s.set_data_s(data);
  s.set_ckpt_s(ckpt);
  s.set_comm_s(step - compute - data - ckpt);
  s.set_collectives(4);
  return s;
}

// A data-parallel job of `nodes` nodes x 2 ranks, healthy: 0.30 s compute and 20 ms moving bytes a
// step. `slow_node` (or -1) spends `extra` more in `phase` ("compute", "data", "ckpt"); everyone's
// step then takes that much longer and the others wait for it in the collectives.
std::vector<hai::StepSummary> Job(int nodes, int slow_node = -1, double extra = 0,
                                  const std::string& phase = "compute", int64_t steps = 100) {
  std::vector<hai::StepSummary> ranks;
  const double xfer = 0.02, compute = 0.30;
  const double step = compute + xfer + (slow_node >= 0 ? extra : 0);
  for (int n = 0; n < nodes; ++n) {
    for (int l = 0; l < 2; ++l) {
      const bool slow = n == slow_node;
      double c = compute, d = 0.001, k = 0;
      if (slow && phase == "compute") c += extra;
      if (slow && phase == "data") d += extra;
      if (slow && phase == "ckpt") k += extra;
      ranks.push_back(Rank(2 * n + l, "n0" + std::to_string(n), step, c, d, k, steps));
    }
  }
  return ranks;
}

TEST(StepDetector, AHealthyJobHasNoFinding) {
  hai::StepFinding f = Diagnose(Job(4), 0.32);
  EXPECT_EQ(f.cause(), hai::SLOW_NONE);
  EXPECT_NEAR(f.step_s(), 0.32, 1e-9);
  EXPECT_NEAR(f.slowdown(), 1.0, 1e-9);
}

TEST(StepDetector, ANodeWhoseComputeIsSlowerIsNamedWithItsCause) {
  hai::StepFinding f = Diagnose(Job(4, 2, 0.30), 0.32);
  EXPECT_EQ(f.cause(), hai::SLOW_COMPUTE);
  EXPECT_EQ(f.node(), "n02");
  EXPECT_TRUE(f.rank() == 4 || f.rank() == 5) << f.rank();
  EXPECT_NEAR(f.wait_s(), 0.30, 1e-6);
  EXPECT_NEAR(f.phase_ratio(), 2.0, 1e-6);
  EXPECT_NEAR(f.slowdown(), 0.62 / 0.32, 1e-6);
  EXPECT_NE(f.text().find("node n02"), std::string::npos) << f.text();
  EXPECT_NE(f.text().find("compute phase is 2.0x"), std::string::npos) << f.text();
  EXPECT_NE(f.text().find("compute on n02"), std::string::npos) << f.text();
}

TEST(StepDetector, SlowDataLoadingAndCheckpointsAreTheirOwnCauses) {
  hai::StepFinding data = Diagnose(Job(2, 1, 0.2, "data"), 0.32);
  EXPECT_EQ(data.cause(), hai::SLOW_DATA) << data.text();
  EXPECT_EQ(data.node(), "n01");
  EXPECT_NE(data.text().find("data loading on n01"), std::string::npos) << data.text();
  hai::StepFinding ckpt = Diagnose(Job(3, 0, 0.2, "ckpt"), 0.32);
  EXPECT_EQ(ckpt.cause(), hai::SLOW_CHECKPOINT) << ckpt.text();
  EXPECT_EQ(ckpt.node(), "n00");
}

TEST(StepDetector, ALateNodeNoPhaseExplainsIsNamedWithoutACause) {
  // n01 arrives late though its own phases are the others': something outside the step.
  std::vector<hai::StepSummary> ranks = Job(2);
  for (auto& r : ranks) {
    r.set_step_s(0.5);
    r.set_comm_s(r.node() == "n01" ? 0.02 : 0.20);
  }
  hai::StepFinding f = Diagnose(ranks, 0.32);
  EXPECT_EQ(f.cause(), hai::SLOW_UNKNOWN) << f.text();
  EXPECT_EQ(f.node(), "n01");
  EXPECT_NE(f.text().find("no phase it measures is longer"), std::string::npos);
}

TEST(StepDetector, OnOneNodeTheRankIsCompared) {
  std::vector<hai::StepSummary> ranks;
  for (int r = 0; r < 4; ++r)
    ranks.push_back(Rank(r, "n00", 0.6, r == 3 ? 0.58 : 0.30));
  hai::StepFinding f = Diagnose(ranks, 0.32);
  EXPECT_EQ(f.cause(), hai::SLOW_COMPUTE);
  EXPECT_EQ(f.node(), "n00");
  EXPECT_EQ(f.rank(), 3);
}

TEST(StepDetector, AnUnevenButHealthyJobIsNotAStraggler) {
  // Pipeline stages of different cost: n01's ranks always arrive late, by design; at the job's
  // best the unevenness is the same, so nothing is slow.
  std::vector<hai::StepSummary> ranks = Job(2, 1, 0.15);
  hai::StepFinding f = Diagnose(ranks, ranks[0].step_s());
  EXPECT_EQ(f.cause(), hai::SLOW_NONE) << f.text();
  // And with no baseline yet, nothing is compared.
  EXPECT_EQ(Diagnose(ranks, 0).cause(), hai::SLOW_NONE);
}

TEST(StepDetector, OnlyWaitingBeyondTheUsualCounts) {
  // n01 is a heavier stage: the others wait 0.15 s for it at the job's best. The machine is 30%
  // slower now, the wait unchanged: not a straggler. Then n01 slows further: it is.
  std::vector<hai::StepSummary> uneven = Job(2, 1, 0.15);
  Waits waits;
  Diagnose(uneven, uneven[0].step_s(), {}, {}, &waits);
  EXPECT_NEAR(waits["n01"], 0.15, 1e-6);
  EXPECT_NEAR(waits["n00"], -0.15, 1e-6);
  for (auto& r : uneven) {
    r.set_step_s(r.step_s() * 1.3);
    r.set_compute_s(r.compute_s() + 0.3 * 0.47);
  }
  EXPECT_EQ(Diagnose(uneven, 0.47, {}, waits).cause(), hai::SLOW_NONE);
  hai::StepFinding f = Diagnose(Job(2, 1, 0.45), 0.47, {}, waits);
  EXPECT_EQ(f.cause(), hai::SLOW_COMPUTE) << f.text();
  EXPECT_NE(f.text().find("(usually 0.15 s)"), std::string::npos) << f.text();
}

TEST(StepDetector, EveryRankAlikeSlowerIsTheJobItself) {
  std::vector<hai::StepSummary> ranks = Job(3);
  for (auto& r : ranks) {
    r.set_step_s(0.64);
    r.set_compute_s(0.62);
  }
  hai::StepFinding f = Diagnose(ranks, 0.32);
  EXPECT_EQ(f.cause(), hai::SLOW_JOB) << f.text();
  EXPECT_EQ(f.node(), "");
  EXPECT_NE(f.text().find("the job itself"), std::string::npos) << f.text();
}

// Gives each node's first rank (its leader) the tree edges of a job on `nodes` nodes in a ring
// (every node two neighbours), `bytes` each way a step, moved at `s_per_mb`, except edges touching
// `slow_node`, moved `factor` times slower.
void AddLinks(std::vector<hai::StepSummary>& ranks, int nodes, double bytes, double s_per_mb,
              int slow_node = -1, double factor = 1) {
  for (hai::StepSummary& r : ranks) {
    if (r.rank() % 2 != 0) continue;
    const int n = r.rank() / 2;
    for (int peer : {(n + 1) % nodes, (n + nodes - 1) % nodes}) {
      if (peer == n) continue;
      hai::PeerTime* p = r.add_links();
      p->set_peer("n0" + std::to_string(peer));
      p->set_bytes(bytes);
      const bool slow = n == slow_node || peer == slow_node;
      p->set_move_s(bytes / 1e6 * s_per_mb * (slow ? factor : 1));
      p->set_wait_s(0.001);
    }
  }
}

TEST(StepDetector, ANodeWhoseLinkIsSlowIsNamedByItsTreeEdges) {
  // Every rank alike waits in the collectives (0.2 s more a step), no one is late: the edges into
  // and out of n02 move bytes 5x slower than the others.
  std::vector<hai::StepSummary> ranks = Job(4);
  for (auto& r : ranks) {
    r.set_step_s(0.52);
    r.set_comm_s(0.219);
  }
  AddLinks(ranks, 4, 4e6, 0.012, 2, 5.0);
  hai::StepFinding f = Diagnose(ranks, 0.32);
  EXPECT_EQ(f.cause(), hai::SLOW_NETWORK) << f.text();
  EXPECT_EQ(f.node(), "n02");
  EXPECT_EQ(f.rank(), 4);
  EXPECT_NEAR(f.phase_ratio(), 5.0, 0.01);
  EXPECT_NE(f.text().find("node n02's links move bytes 5.0x slower"), std::string::npos)
      << f.text();

  // The same edges on a job at its best are its normal (one node across a slower uplink): no
  // finding; the tracker learns the ratio and names only what goes beyond it.
  std::vector<hai::StepSummary> healthy = Job(4);
  AddLinks(healthy, 4, 4e6, 0.012, 2, 5.0);
  EXPECT_EQ(Diagnose(healthy, 0.32).cause(), hai::SLOW_NONE);
  Waits usual = {{"link:n02", 5.0}};
  EXPECT_NE(Diagnose(ranks, 0.32, {}, usual).cause(), hai::SLOW_NETWORK);
}

TEST(StepDetector, TwoNodesCannotTellWhichEndOfTheirLinkIsSlow) {
  std::vector<hai::StepSummary> ranks = Job(2);
  for (auto& r : ranks) {
    r.set_step_s(0.52);
    r.set_comm_s(0.219);
  }
  AddLinks(ranks, 2, 4e6, 0.012, 1, 5.0);
  hai::StepFinding f = Diagnose(ranks, 0.32);
  // Both nodes see the one edge slow: no node is named, and every rank is alike 1.6x slower.
  EXPECT_EQ(f.cause(), hai::SLOW_JOB) << f.text();
  EXPECT_EQ(f.node(), "");
}

TEST(StepDetector, ALateNodesSlowComputeIsNotBlamedOnItsLinks) {
  // A CPU-starved node is late, and its receive threads are slow too: compute is the cause.
  std::vector<hai::StepSummary> ranks = Job(4, 1, 0.3);
  AddLinks(ranks, 4, 4e6, 0.012, 1, 3.0);
  hai::StepFinding f = Diagnose(ranks, 0.32);
  EXPECT_EQ(f.cause(), hai::SLOW_COMPUTE) << f.text();
  EXPECT_EQ(f.node(), "n01");
}

// Gives every rank reads of `bytes` a step from each of `targets` targets at `s_per_mb`, except
// `slow` (read `factor` times slower).
void AddReads(std::vector<hai::StepSummary>& ranks, int targets, double bytes, double s_per_mb,
              const std::string& slow = "", double factor = 1) {
  for (hai::StepSummary& r : ranks) {
    for (int t = 1; t <= targets; ++t) {
      hai::PeerTime* p = r.add_reads();
      p->set_peer("t" + std::to_string(t));
      p->set_bytes(bytes);
      p->set_move_s(bytes / 1e6 * s_per_mb * (p->peer() == slow ? factor : 1));
    }
  }
}

TEST(StepDetector, AStorageTargetThatServesReadsSlowerIsNamed) {
  // Every rank reads from every target (striped files) and waits for its data alike.
  std::vector<hai::StepSummary> ranks = Job(2);
  for (auto& r : ranks) {
    r.set_step_s(0.62);
    r.set_data_s(0.301);
  }
  AddReads(ranks, 4, 2e6, 0.02, "t3", 8.0);
  hai::StepFinding f = Diagnose(ranks, 0.32);
  EXPECT_EQ(f.cause(), hai::SLOW_STORAGE) << f.text();
  EXPECT_EQ(f.target(), "t3");
  EXPECT_EQ(f.node(), "");
  EXPECT_NE(f.text().find("storage target t3 serves reads 8.0x slower"), std::string::npos)
      << f.text();

  // One rank late for its data, reading from the slow target: storage, not its node.
  std::vector<hai::StepSummary> one = Job(2, 1, 0.3, "data");
  for (auto& r : one) {
    hai::PeerTime* p = r.add_reads();
    p->set_peer(r.node() == "n01" ? "t2" : "t1");
    p->set_bytes(2e6);
    p->set_move_s(r.node() == "n01" ? 0.3 : 0.03);
  }
  f = Diagnose(one, 0.32);
  EXPECT_EQ(f.cause(), hai::SLOW_STORAGE) << f.text();
  EXPECT_EQ(f.target(), "t2");

  // Slow reads that cost no step (prefetched data the ranks never wait for): nothing.
  std::vector<hai::StepSummary> prefetched = Job(2);
  AddReads(prefetched, 4, 2e6, 0.02, "t3", 8.0);
  EXPECT_EQ(Diagnose(prefetched, 0.32).cause(), hai::SLOW_NONE);
}

TEST(StepDetector, TwoLateNodesAreNotOneStraggler) {
  std::vector<hai::StepSummary> ranks = Job(4, 1, 0.3);
  for (auto& r : ranks)
    if (r.node() == "n03") {
      r.set_compute_s(0.6);
      r.set_comm_s(0.02);
    }
  hai::StepFinding f = Diagnose(ranks, 0.32);
  EXPECT_EQ(f.cause(), hai::SLOW_NONE) << f.text();
}

TEST(StepDetector, RanksWithTooFewStepsAreLeftOut) {
  std::vector<hai::StepSummary> ranks = Job(2, 1, 0.3);
  for (auto& r : ranks)
    r.set_window(2);
  EXPECT_EQ(Diagnose(ranks, 0.32).cause(), hai::SLOW_NONE);
}

TEST(StepDetector, WithoutCollectivesTheLongestOwnPhasesAreLate) {
  std::vector<hai::StepSummary> ranks = Job(2, 1, 0.3, "data");
  for (auto& r : ranks) {
    r.set_comm_s(0);
    r.set_collectives(0);
  }
  hai::StepFinding f = Diagnose(ranks, 0.32);
  EXPECT_EQ(f.cause(), hai::SLOW_DATA) << f.text();
  EXPECT_EQ(f.node(), "n01");
}

TEST(StepDetector, RanksThatStoppedWhileTheOthersWentOnAreForgotten) {
  std::map<int32_t, hai::StepSummary> ranks;
  for (int r = 0; r < 4; ++r) {
    ranks[r] = Rank(r, "n0" + std::to_string(r), 0.3, 0.28);
    ranks[r].set_last_time(1000.0 + (r == 2 ? -31 : -r));  // rank 2: its group was replaced
  }
  DropStaleRanks(ranks);
  EXPECT_EQ(ranks.size(), 3u);
  EXPECT_FALSE(ranks.contains(2));
  // All stopped together (a hang): nobody is dropped.
  for (auto& [r, s] : ranks)
    s.set_last_time(500);
  DropStaleRanks(ranks);
  EXPECT_EQ(ranks.size(), 3u);
}

TEST(StepTracker, AFindingIsConfirmedOnlyWithNewStepsAndEndsWhenItClears) {
  StepTracker tracker;
  int64_t steps = 100, now = 1'000'000;
  auto tick = [&](int slow_node) {
    steps += 8;
    now += 1000;
    return tracker.Update(Job(2, slow_node, 0.3, "compute", steps), now);
  };
  // Healthy: the baseline is the job's best.
  EXPECT_TRUE(tick(-1).empty());
  EXPECT_TRUE(tick(-1).empty());
  EXPECT_NEAR(tracker.baseline_s(), 0.32, 1e-9);
  // n01 slows: it takes `confirm` evaluations over confirm_ms; the same evaluation again
  // without new steps does not count.
  EXPECT_TRUE(tick(1).empty());
  EXPECT_TRUE(tracker.Update(Job(2, 1, 0.3, "compute", steps), now + 500).empty());
  EXPECT_TRUE(tracker.Update(Job(2, 1, 0.3, "compute", steps), now + 700).empty());
  EXPECT_TRUE(tick(1).empty());
  EXPECT_EQ(tracker.current().cause(), hai::SLOW_NONE);
  std::vector<StepTracker::Change> began = tick(1);
  ASSERT_EQ(began.size(), 1u);
  EXPECT_TRUE(began[0].began);
  EXPECT_EQ(began[0].finding.node(), "n01");
  EXPECT_EQ(began[0].finding.since_ms(), now - 2000);  // when it was first seen
  EXPECT_NE(began[0].text.find("since "), std::string::npos) << began[0].text;
  EXPECT_NE(began[0].text.find("steps are 1.9x slower"), std::string::npos) << began[0].text;
  EXPECT_EQ(tracker.current().cause(), hai::SLOW_COMPUTE);
  EXPECT_NEAR(tracker.baseline_s(), 0.32, 1e-9);  // a slow period does not move it
  // Healthy again: it ends after `clear` evaluations over clear_ms.
  EXPECT_TRUE(tick(-1).empty());
  EXPECT_TRUE(tick(-1).empty());
  std::vector<StepTracker::Change> ended = tick(-1);
  ASSERT_EQ(ended.size(), 1u);
  EXPECT_FALSE(ended[0].began);
  EXPECT_NE(ended[0].text.find("node n01 no longer makes the others wait"), std::string::npos)
      << ended[0].text;
  EXPECT_EQ(tracker.current().cause(), hai::SLOW_NONE);
  ASSERT_EQ(tracker.past().size(), 1u);
  EXPECT_EQ(tracker.past()[0].until_ms(), now);
  EXPECT_NEAR(tracker.past()[0].late_share(), 3.0 / 6.0, 1e-9);  // 3 of the 6 since
}

TEST(StepTracker, ABriefSlowPatchIsNotAFindingAndALongOneKeepsTheBaseline) {
  StepTracker tracker;
  int64_t steps = 100, now = 1'000'000;
  auto tick = [&](int slow_node, int64_t dt_ms) {
    steps += 8;
    now += dt_ms;
    return tracker.Update(Job(2, slow_node, 0.3, "compute", steps), now);
  };
  for (int i = 0; i < 10; ++i)
    EXPECT_TRUE(tick(-1, 200).empty());
  // Three evaluations in 400 ms: not yet confirm_ms.
  for (int i = 0; i < 3; ++i)
    EXPECT_TRUE(tick(1, 200).empty());
  EXPECT_TRUE(tick(-1, 200).empty());
  EXPECT_EQ(tracker.current().cause(), hai::SLOW_NONE);
  // Slow for ten minutes: found once, held, the baseline where it was.
  int began = 0;
  for (int i = 0; i < 600; ++i) {
    for (const auto& c : tick(1, 1000))
      began += c.began;
  }
  EXPECT_EQ(began, 1);
  EXPECT_EQ(tracker.current().node(), "n01");
  EXPECT_NEAR(tracker.baseline_s(), 0.32, 1e-9);
}

}  // namespace
}  // namespace ff::platform
