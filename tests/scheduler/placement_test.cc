// Placement policies on the small test cluster (2 zones x 2 leaves x 4 nodes x 8 GPUs), with
// answers checked by hand.
#include "scheduler/placement.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "small_cluster.h"

namespace ff::scheduler {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

class PlacementTest : public SmallClusterTest {
 protected:
  static JobRequest Gang(JobId id, int nodes, CommKind comm = CommKind::kAllreduce) {
    JobRequest j;
    j.id = id;
    j.user = "u";
    j.nodes = nodes;
    j.gpus_per_node = 8;
    j.comm = comm;
    j.traffic_gbps = 100;
    return j;
  }

  // Occupies `nodes` with a one-node job each (no traffic).
  void Occupy(std::initializer_list<int> nodes) {
    for (int n : nodes) {
      JobRequest j = Gang(1000 + n, 1, CommKind::kNone);
      ASSERT_TRUE(state_->Allocate(j, Placement{{n}, 8}, 0).ok());
    }
  }

  std::vector<int> Place(const std::string& policy, const JobRequest& job,
                         std::string* why = nullptr) {
    std::string ignored;
    Placement p = MakePlacementPolicy(policy)->Place(job, *state_, why ? why : &ignored);
    return p.nodes;
  }
};

TEST_F(PlacementTest, EmptyClusterSmallJobStaysInOneLeaf) {
  for (const std::string& policy : PlacementPolicyNames()) {
    EXPECT_THAT(Place(policy, Gang(1, 2)), ElementsAre(0, 1)) << policy;
  }
}

TEST_F(PlacementTest, BestFitLeafKeepsWholeLeavesFree) {
  Occupy({0, 1});  // leaf A0 has 2 free, the others 4
  EXPECT_THAT(Place("first-fit", Gang(1, 2)), ElementsAre(2, 3));
  EXPECT_THAT(Place("slurm-tree", Gang(1, 2)), ElementsAre(2, 3));
  EXPECT_THAT(Place("congestion-aware", Gang(1, 2)), ElementsAre(2, 3));
  Occupy({4});  // leaf A1 has 3 free: a 3-node job fits it exactly
  EXPECT_THAT(Place("first-fit", Gang(2, 3)), ElementsAre(2, 3, 5));  // spans two leaves
  EXPECT_THAT(Place("slurm-tree", Gang(2, 3)), ElementsAre(5, 6, 7));
  EXPECT_THAT(Place("congestion-aware", Gang(2, 3)), ElementsAre(5, 6, 7));
}

TEST_F(PlacementTest, JobLargerThanALeafUsesTheFewestLeaves) {
  Occupy({0, 4, 5});  // A0: 3 free, A1: 2 free, B0 and B1: 4 free
  // 6 nodes: zone A has 5 free, so the job must go to zone B (two whole leaves).
  EXPECT_THAT(Place("slurm-tree", Gang(1, 6)), ElementsAre(8, 9, 10, 11, 12, 13));
  EXPECT_THAT(Place("congestion-aware", Gang(1, 6)), ElementsAre(8, 9, 10, 11, 12, 13));
  // first-fit takes the first six free nodes, across both zones.
  EXPECT_THAT(Place("first-fit", Gang(1, 6)), ElementsAre(1, 2, 3, 6, 7, 8));
}

TEST_F(PlacementTest, AllreduceNeverSpansZonesUnlessAllowed) {
  Occupy({0, 1, 8, 9});  // 6 free nodes in each zone
  std::string why;
  EXPECT_TRUE(Place("congestion-aware", Gang(1, 8), &why).empty());
  EXPECT_EQ(why,
            "needs 8 nodes with 8 free GPUs in one zone; the largest such set is 6 nodes "
            "(zone A). An allreduce job stays in one zone because the links between zones are "
            "few and shared; submit it with --may-span-zones to let it span");
  JobRequest spanning = Gang(1, 8);
  spanning.may_span_zones = true;
  EXPECT_EQ(Place("congestion-aware", spanning).size(), 8u);
  // Pipelines may span zones.
  EXPECT_EQ(Place("congestion-aware", Gang(2, 8, CommKind::kPipeline)).size(), 8u);
  // The baselines know nothing of zones.
  EXPECT_EQ(Place("first-fit", Gang(1, 8)).size(), 8u);
}

TEST_F(PlacementTest, CongestionAwarePrefersQuietUplinks) {
  // Leaves A1 and B1 have 3 free nodes each; a running cross-leaf job loads A0's and A1's uplinks.
  JobRequest busy = Gang(50, 2);
  busy.traffic_gbps = 300;
  ASSERT_TRUE(state_->Allocate(busy, Placement{{0, 4}, 8}, 0).ok());
  Occupy({1, 2, 3, 8, 9, 10, 11, 12});  // A0 full; B0 full; A1: 5,6,7 free; B1: 13,14,15 free
  EXPECT_GT(state_->leaf_uplink_load(1), 0);
  EXPECT_EQ(state_->leaf_uplink_load(3), 0);
  // A 3-node job fits either A1 or B1 whole: no uplink traffic either way; the fit is equal, so
  // the quieter leaf wins.
  EXPECT_THAT(Place("congestion-aware", Gang(1, 3)), ElementsAre(13, 14, 15));
  EXPECT_THAT(Place("slurm-tree", Gang(1, 3)), ElementsAre(5, 6, 7));
}

TEST_F(PlacementTest, SubNodeJobsArePacked) {
  JobRequest small;
  small.id = 1;
  small.nodes = 0;
  small.gpus = 2;
  small.comm = CommKind::kNone;
  ASSERT_TRUE(state_->Allocate(small, Placement{{3}, 2}, 0).ok());  // node 3 has 6 free
  small.id = 2;
  EXPECT_THAT(Place("first-fit", small), ElementsAre(0));
  EXPECT_THAT(Place("slurm-tree", small), ElementsAre(3));
  EXPECT_THAT(Place("congestion-aware", small), ElementsAre(3));  // best fit too
  // Node 0 full: the next node with room, in node order.
  JobRequest whole = small;
  whole.id = 3;
  whole.gpus = 8;
  ASSERT_TRUE(state_->Allocate(whole, Placement{{0}, 8}, 0).ok());
  EXPECT_THAT(Place("first-fit", small), ElementsAre(1));
  EXPECT_THAT(Place("congestion-aware", small), ElementsAre(3));
  EXPECT_THAT(Place("slurm-tree", small), ElementsAre(3));
  small.gpus = 9;
  std::string why;
  EXPECT_TRUE(Place("congestion-aware", small, &why).empty());
  EXPECT_EQ(why, "needs 9 GPUs on one node; the most free on any node is 8");
}

TEST_F(PlacementTest, NotEnoughNodesSaysHowManyAreFree) {
  Occupy({0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11});
  for (const std::string& policy : PlacementPolicyNames()) {
    std::string why;
    EXPECT_TRUE(Place(policy, Gang(1, 5), &why).empty());
    EXPECT_EQ(why, "needs 5 nodes with 8 free GPUs; 4 are free") << policy;
  }
}

TEST_F(PlacementTest, DrainedNodesAreNeverChosen) {
  state_->SetDrained(0, true);
  EXPECT_EQ(state_->leaf_free_nodes(0), 3);
  for (const std::string& policy : PlacementPolicyNames()) {
    std::vector<int> nodes = Place(policy, Gang(1, 3));
    EXPECT_EQ(std::count(nodes.begin(), nodes.end(), 0), 0) << policy;
  }
}

TEST_F(PlacementTest, TreesCrossEachLeafBoundaryOncePerTreeWhateverTheRankOrder) {
  // HFReduce builds its trees leaf by leaf (HAI_LEAF): contiguous rank blocks per leaf and
  // interleaved ranks cross the uplinks on the same two edges, one per tree.
  JobRequest job = Gang(1, 8);
  TrafficLoad blocks = EstimateTraffic(*topology_, job, Placement{{0, 1, 2, 3, 4, 5, 6, 7}, 8});
  TrafficLoad interleaved =
      EstimateTraffic(*topology_, job, Placement{{0, 4, 1, 5, 2, 6, 3, 7}, 8});
  EXPECT_EQ(blocks.cross_leaf_edges, 2);
  EXPECT_EQ(interleaved.cross_leaf_edges, 2);
  EXPECT_DOUBLE_EQ(blocks.cross_leaf_gbps, interleaved.cross_leaf_gbps);
  EXPECT_EQ(blocks.cross_zone_gbps, 0);
  TrafficLoad one_leaf = EstimateTraffic(*topology_, Gang(2, 4), Placement{{0, 1, 2, 3}, 8});
  EXPECT_EQ(one_leaf.cross_leaf_edges, 0);
  EXPECT_TRUE(one_leaf.leaf_uplink_gbps.empty());
  // The congestion-aware policy places an 8-node job leaf by leaf.
  EXPECT_THAT(Place("congestion-aware", job), ElementsAre(0, 1, 2, 3, 4, 5, 6, 7));
}

TEST_F(PlacementTest, AllocateRejectsConflictsAndReleaseRestores) {
  JobRequest a = Gang(1, 2);
  ASSERT_TRUE(state_->Allocate(a, Placement{{0, 1}, 8}, 0).ok());
  EXPECT_EQ(state_->leaf_free_nodes(0), 2);
  EXPECT_EQ(state_->Allocate(Gang(2, 1), Placement{{1}, 8}, 0).code(),
            StatusCode::kFailedPrecondition);
  EXPECT_EQ(state_->Allocate(a, Placement{{5}, 8}, 0).code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(state_->Allocate(Gang(3, 2), Placement{{6, 6}, 8}, 0).code(),
            StatusCode::kFailedPrecondition);
  ASSERT_TRUE(state_->Release(1).ok());
  EXPECT_EQ(state_->leaf_free_nodes(0), 4);
  EXPECT_EQ(state_->free_gpus(0), 8);
  EXPECT_EQ(state_->Release(1).code(), StatusCode::kNotFound);
  EXPECT_EQ(state_->leaf_uplink_load(0), 0);
}

TEST_F(PlacementTest, ReleaseAllIsAllOrNothingAndCopiesAreIndependent) {
  ASSERT_TRUE(state_->Allocate(Gang(1, 2), Placement{{0, 1}, 8}, 0).ok());
  ASSERT_TRUE(state_->Allocate(Gang(2, 2), Placement{{2, 4}, 8}, 0).ok());  // crosses leaves
  ASSERT_TRUE(state_->Allocate(Gang(3, 1), Placement{{8}, 8}, 0).ok());
  const double uplink = state_->leaf_uplink_load(0);
  EXPECT_GT(uplink, 0);

  ClusterState copy = *state_;
  // An unknown or repeated id changes nothing.
  EXPECT_EQ(copy.ReleaseAll({1, 99}).code(), StatusCode::kNotFound);
  EXPECT_EQ(copy.ReleaseAll({1, 1}).code(), StatusCode::kNotFound);
  EXPECT_EQ(copy.running().size(), 3u);
  EXPECT_EQ(copy.free_gpus(0), 0);

  ASSERT_TRUE(copy.ReleaseAll({3, 2}).ok());
  EXPECT_EQ(copy.running().size(), 1u);
  EXPECT_EQ(copy.running().begin()->request.id, 1);
  EXPECT_EQ(copy.free_gpus(4), 8);
  EXPECT_EQ(copy.leaf_free_nodes(2), 4);
  EXPECT_EQ(copy.leaf_uplink_load(0), 0);
  ASSERT_TRUE(copy.SetLastCheckpoint(1, 50).ok());
  EXPECT_EQ(copy.SetLastCheckpoint(2, 50).code(), StatusCode::kNotFound);

  // The original is untouched by what happened to its copy.
  EXPECT_EQ(state_->running().size(), 3u);
  EXPECT_EQ(state_->free_gpus(4), 0);
  EXPECT_EQ(state_->leaf_uplink_load(0), uplink);
  EXPECT_EQ(state_->find(1)->last_checkpoint, 0);
  EXPECT_EQ(copy.find(1)->last_checkpoint, 50);
  EXPECT_EQ(state_->find(99), nullptr);
}

}  // namespace
}  // namespace ff::scheduler
