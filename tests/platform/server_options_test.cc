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

// The suspend options become the scheduler's suspend policy (in whole seconds); bad ones are
// refused with the option named.
TEST(HaiOptionsTest, SuspendDeadlinesAndTheVictimOrderReachTheScheduler) {
  auto config = LoadConfigFile<ServiceConfig<HaiOptions>>(
      FF_SOURCE_DIR "/deploy/config/hai-server.toml",
      {"hai.suspend_grace_ms=2500", "hai.suspend_max_grace_ms=120000", "hai.suspend_grace_margin=2",
       "hai.suspend_grace_slack_ms=500", "hai.victim_order=newest-first", "hai.restart_cost_s=20"});
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  const scheduler::SuspendPolicy s = SchedulerOptionsOf(config->options).suspend;
  EXPECT_EQ(s.order, scheduler::SuspendPolicy::VictimOrder::kNewestFirst);
  EXPECT_EQ(s.min_deadline, 3);
  EXPECT_EQ(s.max_deadline, 120);
  EXPECT_EQ(s.margin, 2);
  EXPECT_EQ(s.slack, 1);
  EXPECT_EQ(s.restart_s, 20);
  // The shipped config: least-lost victims.
  config =
      LoadConfigFile<ServiceConfig<HaiOptions>>(FF_SOURCE_DIR "/deploy/config/hai-server.toml");
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  EXPECT_EQ(SchedulerOptionsOf(config->options).suspend.order,
            scheduler::SuspendPolicy::VictimOrder::kLeastLost);
  for (const char* bad : {"hai.victim_order=oldest-first", "hai.suspend_grace_margin=0.5",
                          "hai.suspend_max_grace_ms=1000", "hai.restart_cost_s=-1"}) {
    auto refused = LoadConfigFile<ServiceConfig<HaiOptions>>(
        FF_SOURCE_DIR "/deploy/config/hai-server.toml", {bad});
    ASSERT_FALSE(refused.ok()) << bad;
    const std::string option = std::string(bad).substr(4, std::string(bad).find('=') - 4);
    EXPECT_NE(refused.status().message().find(option), std::string::npos)
        << refused.status().message();
  }
}

}  // namespace
}  // namespace ff::platform
