// hai-server's options: the shipped config runs the scheduling policy the simulator measured.
#include <gtest/gtest.h>

#include "common/config.h"
#include "monitoring/service_daemon.h"
#include "platform/server.h"
#include "scheduler/placement.h"

namespace ff::platform {
namespace {

TEST(HaiOptionsTest, TheShippedConfigRunsTheSchedulerLibrarysLocalityWait) {
  auto config =
      LoadConfigFile<ServiceConfig<HaiOptions>>(FF_SOURCE_DIR "/deploy/config/hai-server.toml");
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  EXPECT_FALSE(config->options.locality_wait_s.has_value());
  EXPECT_EQ(PolicyOptionsOf(config->options).locality_wait,
            scheduler::PolicyOptions{}.locality_wait);
}

TEST(HaiOptionsTest, AnAdminsLocalityWaitWins) {
  auto config = LoadConfigFile<ServiceConfig<HaiOptions>>(
      FF_SOURCE_DIR "/deploy/config/hai-server.toml", {"hai.locality_wait_s=60"});
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  EXPECT_EQ(PolicyOptionsOf(config->options).locality_wait, 60);
  EXPECT_FALSE(LoadConfigFile<ServiceConfig<HaiOptions>>(
                   FF_SOURCE_DIR "/deploy/config/hai-server.toml", {"hai.locality_wait_s=-5"})
                   .ok());
}

}  // namespace
}  // namespace ff::platform
