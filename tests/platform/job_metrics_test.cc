// The metrics channel of jobs: what hai::job::Report writes (platform/hai_job.h) is what the
// agent's reader (platform/job_metrics.h) reads back; what is not a record is skipped, counted,
// and never stops the reader; long series are thinned in bounded memory.
#include "platform/job_metrics.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "platform/hai_job.h"

namespace ff::platform {
namespace {

TEST(JobMetricsTest, ALineIsARecordWithAStepAndNumbers) {
  auto r = ParseMetricLine(R"({"step": 12, "time": 1764316800.5, "run": 2, "loss": 2.5, "lr": null,
                              "eval/acc": 1e-3})");
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->step(), 12);
  EXPECT_DOUBLE_EQ(r->time(), 1764316800.5);
  EXPECT_EQ(r->run(), 2);
  EXPECT_DOUBLE_EQ(r->values().at("loss"), 2.5);
  EXPECT_TRUE(std::isnan(r->values().at("lr")));  // reported as not finite
  EXPECT_DOUBLE_EQ(r->values().at("eval/acc"), 1e-3);
  EXPECT_EQ(r->values().size(), 3u);

  for (const char* bad :
       {"", "step 12 loss 2.5", "[1, 2]", R"({"loss": 1})", R"({"step": -1})", R"({"step": 1.5})",
        R"({"step": "3"})", R"({"step": 1, "loss": "low"})", R"({"step": 1, "loss": true})",
        R"({"step": 1, "9lives": 1})", R"({"step": 1, "a b": 1})", R"({"step": 1, "run": -2})",
        R"({"step": 1, "time": "noon"})", R"({"step": 1, "x": {"y": 1}})"}) {
    EXPECT_FALSE(ParseMetricLine(bad).ok()) << bad;
  }
  EXPECT_TRUE(ValidMetricName("_x.y:z/w-1"));
  EXPECT_FALSE(ValidMetricName(std::string(65, 'a')));
}

TEST(JobMetricsTest, OnlyWholeLinesAreReadAndBadOnesAreCountedNotFatal) {
  const std::string data =
      "{\"step\": 1, \"loss\": 3}\n"
      "garbage written by the job\n"
      "\n"
      "{\"step\": 2, \"loss\": 2}\r\n"
      "{\"step\": 3, \"lo";  // being written
  MetricLines lines = ParseMetricLines(data);
  ASSERT_EQ(lines.records.size(), 2u);
  EXPECT_EQ(lines.records[1].step(), 2);
  EXPECT_EQ(lines.unreadable, 1);
  EXPECT_EQ(lines.consumed, static_cast<int64_t>(data.rfind('\n') + 1));
  // A line too long to be a record is passed over even before its end comes.
  const std::string huge(kMaxMetricLine + 10, 'x');
  MetricLines skipped = ParseMetricLines(huge);
  EXPECT_EQ(skipped.unreadable, 1);
  EXPECT_EQ(skipped.consumed, static_cast<int64_t>(huge.size()));
}

TEST(JobMetricsTest, ALongSeriesIsThinnedEvenlyKeepingTheFirstAndTheLast) {
  for (int n : {1, 2, 99, 100, 101, 10000, 123457}) {
    MetricThinner thinner(100);
    for (int i = 1; i <= n; ++i) {
      hai::MetricRecord r;
      r.set_step(i);
      thinner.Add(std::move(r));
    }
    EXPECT_EQ(thinner.seen(), n);
    std::vector<hai::MetricRecord> kept = std::move(thinner).Take();
    ASSERT_EQ(kept.size(), std::min<size_t>(n, 100)) << n;  // as many as asked, or all
    EXPECT_EQ(kept.front().step(), 1);
    EXPECT_EQ(kept.back().step(), n);
    for (size_t i = 1; i < kept.size(); ++i)
      EXPECT_LT(kept[i - 1].step(), kept[i].step());
  }
}

TEST(JobMetricsTest, WhatTheJobReportsIsWhatTheReaderReads) {
  const std::string path =
      (std::filesystem::temp_directory_path() / ("job_metrics_test." + std::to_string(getpid())))
          .string();
  std::filesystem::remove(path);
  setenv("HAI_METRICS_FILE", path.c_str(), 1);
  setenv("HAI_RUN", "3", 1);
  EXPECT_FALSE(hai::job::Report(-1, {{"loss", 1.0}}));
  EXPECT_FALSE(hai::job::Report(1, {{"not a name", 1.0}}));
  EXPECT_FALSE(hai::job::Report(1, {{"step", 1.0}}));
  ASSERT_TRUE(hai::job::Report(7, {{"loss", 0.1 + 0.2}, {"lr", 3e-4}}));
  ASSERT_TRUE(hai::job::Report(8, {{"loss", std::nan("")}}));
  ASSERT_TRUE(hai::job::Report(9, {}));
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  MetricLines lines = ParseMetricLines(text.str());
  EXPECT_EQ(lines.unreadable, 0) << text.str();  // the refused reports wrote nothing
  ASSERT_EQ(lines.records.size(), 3u) << text.str();
  EXPECT_EQ(lines.records[0].step(), 7);
  EXPECT_EQ(lines.records[0].run(), 3);
  EXPECT_EQ(lines.records[0].values().at("loss"), 0.1 + 0.2);  // exactly: 17 digits
  EXPECT_EQ(lines.records[0].values().at("lr"), 3e-4);
  EXPECT_GT(lines.records[0].time(), 1.7e9);
  EXPECT_TRUE(std::isnan(lines.records[1].values().at("loss")));
  EXPECT_TRUE(lines.records[2].values().empty());
  std::filesystem::remove(path);
}

// A completed checkpoint is one line of the steps file, which the agent reads apart from the
// steps (by its ckpt_write_s); the suspend deadline is what the agent wrote into the flag.
TEST(JobMetricsTest, ACheckpointReportIsOneLineAndTheSuspendDeadlineComesFromTheFlag) {
  const auto dir = std::filesystem::temp_directory_path();
  const std::string path = (dir / ("job_ckpt_test." + std::to_string(getpid()))).string();
  const std::string flag = (dir / ("job_flag_test." + std::to_string(getpid()))).string();
  std::filesystem::remove(path);
  std::filesystem::remove(flag);
  setenv("HAI_STEPS_FILE", path.c_str(), 1);
  setenv("HAI_RUN", "4", 1);
  EXPECT_FALSE(hai::job::ReportCheckpoint(-1, 10, 1));
  EXPECT_FALSE(hai::job::ReportCheckpoint(1, std::nan(""), 1));
  EXPECT_FALSE(hai::job::ReportCheckpoint(1, 10, -1));
  ASSERT_TRUE(hai::job::ReportCheckpoint(300, 1.5e9, 2.25));
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  MetricLines lines = ParseMetricLines(text.str());
  EXPECT_EQ(lines.unreadable, 0) << text.str();
  ASSERT_EQ(lines.records.size(), 1u) << text.str();  // the refused ones wrote nothing
  EXPECT_EQ(lines.records[0].step(), 300);
  EXPECT_EQ(lines.records[0].run(), 4);
  EXPECT_EQ(lines.records[0].values().at("ckpt_bytes"), 1.5e9);
  EXPECT_EQ(lines.records[0].values().at("ckpt_write_s"), 2.25);

  setenv("HAI_SUSPEND_FLAG", flag.c_str(), 1);
  EXPECT_EQ(hai::job::SuspendDeadline(), 0);  // not asked yet
  std::ofstream(flag) << "{\"deadline\": 1795884414.571, \"grace_s\": 5.500}\n";
  EXPECT_DOUBLE_EQ(hai::job::SuspendDeadline(), 1795884414.571);
  unsetenv("HAI_SUSPEND_FLAG");
  unsetenv("HAI_STEPS_FILE");
  std::filesystem::remove(path);
  std::filesystem::remove(flag);
}

TEST(JobMetricsTest, AStepRecorderWritesOneRecordPerStepOfWhereItsTimeWent) {
  const std::string path =
      (std::filesystem::temp_directory_path() / ("job_steps_test." + std::to_string(getpid())))
          .string();
  std::filesystem::remove(path);
  setenv("HAI_STEPS_FILE", path.c_str(), 1);
  setenv("HAI_RUN", "2", 1);
  {
    hai::job::StepRecorder steps;
    ASSERT_TRUE(steps.recording());
    {
      auto t = steps.Time(hai::job::Phase::kData);
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    steps.Add(hai::job::Phase::kComm, 0.004);
    steps.Add(hai::job::Phase::kComm, 0.001);
    steps.Add(hai::job::Phase::kCheckpoint, 0.002);
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    ASSERT_TRUE(steps.Done());
    ASSERT_TRUE(steps.Done(41));
  }
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  MetricLines lines = ParseMetricLines(text.str());
  EXPECT_EQ(lines.unreadable, 0) << text.str();
  ASSERT_EQ(lines.records.size(), 2u) << text.str();
  const auto& v = lines.records[0].values();
  EXPECT_EQ(lines.records[0].step(), 1);
  EXPECT_EQ(lines.records[0].run(), 2);
  EXPECT_EQ(lines.records[1].step(), 41);
  EXPECT_GE(v.at("step_s"), 0.03);
  EXPECT_GE(v.at("data_s"), 0.02);
  EXPECT_LT(v.at("data_s"), v.at("step_s"));
  EXPECT_DOUBLE_EQ(v.at("comm_s"), 0.005);
  EXPECT_EQ(v.at("collectives"), 2);
  EXPECT_DOUBLE_EQ(v.at("ckpt_s"), 0.002);
  EXPECT_NEAR(v.at("compute_s"), v.at("step_s") - 0.005 - v.at("data_s") - 0.002, 2e-6);
  EXPECT_EQ(lines.records[1].values().at("collectives"), 0);  // the next step starts afresh
  unsetenv("HAI_STEPS_FILE");
  EXPECT_FALSE(hai::job::StepRecorder().recording());  // outside the platform: nothing
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace ff::platform
