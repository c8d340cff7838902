// Test fixture: the small cluster of deploy/config/cluster-small.toml (2 zones x 2 leaves x 4
// nodes x 8 GPUs) and an empty cluster state on it.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "scheduler/cluster_state.h"

namespace ff::scheduler {

class SmallClusterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto t = Topology::Load(std::string(FF_SOURCE_DIR) + "/deploy/config/cluster-small.toml");
    ASSERT_TRUE(t.ok()) << t.status();
    topology_ = std::make_unique<Topology>(std::move(*t));
    state_ = std::make_unique<ClusterState>(*topology_);
  }

  std::unique_ptr<Topology> topology_;
  std::unique_ptr<ClusterState> state_;
};

}  // namespace ff::scheduler
