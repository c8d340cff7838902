// hai-server's options: the shipped config runs the scheduling policy the simulator measured.
#include <gtest/gtest.h>

#include "common/config.h"
#include "monitoring/service_daemon.h"
#include "platform/server.h"
#include "scheduler/placement.h"

namespace ff::platform {
namespace {

TEST(HaiOptionsTest, TheShippedConfigRunsTheSchedulerLibrarysLocalityWaitAndShare) {
  auto config =
      LoadConfigFile<ServiceConfig<HaiOptions>>(FF_SOURCE_DIR "/deploy/config/hai-server.toml");
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  EXPECT_FALSE(config->options.locality_wait_s.has_value());
  EXPECT_EQ(PolicyOptionsOf(config->options).locality_wait,
            scheduler::PolicyOptions{}.locality_wait);
  EXPECT_FALSE(config->options.locality_wait_share.has_value());
  EXPECT_EQ(PolicyOptionsOf(config->options).locality_wait_share,
            scheduler::PolicyOptions{}.locality_wait_share);
}

TEST(HaiOptionsTest, AnAdminsLocalityWaitAndShareWin) {
  auto config = LoadConfigFile<ServiceConfig<HaiOptions>>(
      FF_SOURCE_DIR "/deploy/config/hai-server.toml", {"hai.locality_wait_s=60"});
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  EXPECT_EQ(PolicyOptionsOf(config->options).locality_wait, 60);
  EXPECT_FALSE(LoadConfigFile<ServiceConfig<HaiOptions>>(
                   FF_SOURCE_DIR "/deploy/config/hai-server.toml", {"hai.locality_wait_s=-5"})
                   .ok());
  config = LoadConfigFile<ServiceConfig<HaiOptions>>(FF_SOURCE_DIR "/deploy/config/hai-server.toml",
                                                     {"hai.locality_wait_share=0.2"});
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  EXPECT_EQ(PolicyOptionsOf(config->options).locality_wait_share, 0.2);
  for (const char* bad : {"hai.locality_wait_share=-0.1", "hai.locality_wait_share=1.5"}) {
    auto refused = LoadConfigFile<ServiceConfig<HaiOptions>>(
        FF_SOURCE_DIR "/deploy/config/hai-server.toml", {bad});
    ASSERT_FALSE(refused.ok()) << bad;
    EXPECT_NE(refused.status().message().find("locality_wait_share"), std::string::npos)
        << refused.status().message();
  }
}

}  // namespace
}  // namespace ff::platform
