#include "scheduler/topology.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "common/config.h"

namespace ff::scheduler {
namespace {

using ::testing::HasSubstr;

std::string ConfigPath(const std::string& name) {
  return std::string(FF_SOURCE_DIR) + "/deploy/config/" + name;
}

TEST(TopologyTest, SmallExample) {
  auto t = Topology::Load(ConfigPath("cluster-small.toml"));
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->name(), "small");
  ASSERT_EQ(t->zones().size(), 2u);
  ASSERT_EQ(t->leaves().size(), 4u);
  ASSERT_EQ(t->nodes().size(), 16u);
  EXPECT_EQ(t->total_gpus(), 128);
  EXPECT_EQ(t->leaves()[1].name, "A-leaf01");
  EXPECT_EQ(t->leaves()[1].first_node, 4);
  EXPECT_EQ(t->leaves()[2].zone, 1);
  EXPECT_EQ(t->nodes()[5].name, "A-leaf01-n01");
  EXPECT_EQ(t->nodes()[5].leaf, 1);
  EXPECT_EQ(t->nodes()[12].zone, 1);
  EXPECT_DOUBLE_EQ(t->leaves()[0].uplink_gbps, 400);
  EXPECT_EQ(t->FindNode("B-leaf01-n03"), 15);
  EXPECT_EQ(t->FindNode("nope"), -1);
  EXPECT_EQ(t->max_leaf_nodes(), 4);
}

TEST(TopologyTest, ItpSizedExampleHas512Gpus) {
  auto t = Topology::Load(ConfigPath("cluster-itp512.toml"));
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->total_gpus(), 512);
  EXPECT_EQ(t->zones().size(), 2u);
  EXPECT_EQ(t->leaves().size(), 8u);
  EXPECT_EQ(t->max_leaf_nodes(), 8);
  EXPECT_DOUBLE_EQ(t->leaves()[7].uplink_gbps, 800);
}

TEST(TopologyTest, FireFlyerExampleHas1250NodesOf8Gpus) {
  auto t = Topology::Load(ConfigPath("cluster-fireflyer2.toml"));
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->nodes().size(), 1250u);
  EXPECT_EQ(t->total_gpus(), 10000);
  EXPECT_EQ(t->zones().size(), 2u);
  EXPECT_EQ(t->zones()[0].num_nodes, 625);
  EXPECT_EQ(t->leaves().size(), 80u);
  EXPECT_EQ(t->max_gpus_per_node(), 8);
}

Result<Topology> FromText(const std::string& text) {
  FF_ASSIGN_OR_RETURN(ClusterConfig config, LoadConfigString<ClusterConfig>(text, "c.toml"));
  return Topology::Build(config);
}

TEST(TopologyTest, ExplicitNodeNames) {
  auto t = FromText(R"(
[[zones]]
name = "z"
[[zones.leaves]]
name = "rack1"
node_names = ["gpu-a", "gpu-b"]
gpus_per_node = 4
)");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->nodes()[1].name, "gpu-b");
  EXPECT_EQ(t->total_gpus(), 8);
  EXPECT_DOUBLE_EQ(t->leaves()[0].uplink_gbps, 400);  // non-blocking by default
}

TEST(TopologyTest, BadTopologiesNameTheProblem) {
  EXPECT_THAT(FromText("name = \"x\"\n").status().message(), HasSubstr("cluster 'x' has no zones"));
  EXPECT_THAT(FromText("[[zones]]\nname = \"z\"\n").status().message(),
              HasSubstr("zone z has no leaves"));
  EXPECT_THAT(
      FromText("[[zones]]\nname = \"z\"\n[[zones.leaves]]\nname = \"l\"\n").status().message(),
      HasSubstr("leaf l has no nodes"));
  EXPECT_THAT(FromText(R"(
[[zones]]
name = "z"
[[zones.leaves]]
name = "l"
nodes = 1
[[zones.leaves]]
name = "l"
nodes = 1
)")
                  .status()
                  .message(),
              HasSubstr("leaf name 'l' is empty or used twice"));
  EXPECT_THAT(FromText("[[zones]]\nname = \"z\"\n[[zones.leaves]]\nname = \"l\"\nnodes = -1\n")
                  .status()
                  .message(),
              HasSubstr("key 'zones[0].leaves[0].nodes': must be in 0..10000"));
  EXPECT_THAT(
      FromText("[[zones]]\nname = \"z\"\n[[zones.leaves]]\nname = \"l\"\nnodes = 1\nspeed = 3\n")
          .status()
          .message(),
      HasSubstr("unknown key 'zones[0].leaves[0].speed'"));
}

}  // namespace
}  // namespace ff::scheduler
