#include "scheduler/trace.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>

namespace ff::scheduler {
namespace {

using ::testing::HasSubstr;

TEST(TraceTest, ItpFormatWithoutFinalNewline) {
  auto jobs = ParseTrace("job_id,submission_time,duration,num_gpu\na,5,100,16\nb,3,7,1", "t.csv");
  // The same with a UTF-8 byte-order mark, as spreadsheets save CSV.
  auto with_bom = ParseTrace(
      "\xEF\xBB\xBFjob_id,submission_time,duration,num_gpu\na,5,100,16\nb,3,7,1", "t.csv");
  ASSERT_TRUE(with_bom.ok()) << with_bom.status();
  EXPECT_EQ(with_bom->size(), 2u);
  ASSERT_TRUE(jobs.ok()) << jobs.status();
  ASSERT_EQ(jobs->size(), 2u);
  EXPECT_EQ((*jobs)[0].id, "b");  // sorted by submission
  EXPECT_EQ((*jobs)[0].line, 3);
  EXPECT_EQ((*jobs)[1].gpus, 16);
  EXPECT_EQ((*jobs)[1].duration, 100);
}

TEST(TraceTest, TiresiasFormatAndCrLf) {
  auto jobs = ParseTrace(
      "job_id,num_gpu,submit_time,iterations,model_name,duration,interval\r\n0,8,30,133,vgg11,147,"
      "23\r\n",
      "t.csv");
  ASSERT_TRUE(jobs.ok()) << jobs.status();
  ASSERT_EQ(jobs->size(), 1u);
  EXPECT_EQ((*jobs)[0].submit, 30);
  EXPECT_EQ((*jobs)[0].duration, 147);
  EXPECT_EQ((*jobs)[0].gpus, 8);
}

TEST(TraceTest, MalformedRowsNameTheLine) {
  const std::string header = "job_id,submission_time,duration,num_gpu\n";
  EXPECT_EQ(ParseTrace(header + "a,1,2,1\nb,1,2\n", "t.csv").status().message(),
            "t.csv:3: expected 4 fields, found 3");
  EXPECT_EQ(ParseTrace(header + "a,x,2,1\n", "t.csv").status().message(),
            "t.csv:2: submission time 'x' is not a non-negative integer");
  EXPECT_EQ(ParseTrace(header + "a,1,0,1\n", "t.csv").status().message(),
            "t.csv:2: duration '0' is not a positive integer");
  EXPECT_EQ(ParseTrace(header + "a,1,5,-2\n", "t.csv").status().message(),
            "t.csv:2: num_gpu '-2' is not a positive integer");
  EXPECT_EQ(ParseTrace(header + "a,1,5,2\nb,2,5,1\na,3,5,1\n", "t.csv").status().message(),
            "t.csv:4: job_id 'a' is already on line 2");
  EXPECT_EQ(ParseTrace(header + "a,1,5,1\n\nb,1,5,1\n", "t.csv").status().message(),
            "t.csv:3: expected 4 fields, found 1");
  EXPECT_EQ(ParseTrace("", "t.csv").status().message(), "t.csv: empty trace (no header line)");
  EXPECT_EQ(ParseTrace(header, "t.csv").status().message(),
            "t.csv: the trace has a header but no jobs");
  EXPECT_THAT(ParseTrace("a,b,c\n1,2,3\n", "t.csv").status().message(),
              HasSubstr("t.csv:1: header 'a,b,c' is neither the ITP format"));
}

TEST(TraceTest, SharedTracesParse) {
  const std::string dir = std::string(FF_SOURCE_DIR) + "/../shared/traces/";
  if (!std::filesystem::exists(dir)) {
    GTEST_SKIP() << "../shared/traces is not beside this checkout";
  }
  auto itp = LoadTrace(dir + "microsoft-itp-elasticflow/raw/cluster04.csv");
  ASSERT_TRUE(itp.ok()) << itp.status();
  EXPECT_EQ(itp->size(), 15802u);  // the README's count; the file has no final newline
  auto tiresias = LoadTrace(dir + "tiresias-60job/60_job.csv");
  ASSERT_TRUE(tiresias.ok()) << tiresias.status();
  EXPECT_EQ(tiresias->size(), 60u);
  EXPECT_EQ(LoadTrace(dir + "missing.csv").status().code(), StatusCode::kNotFound);
}

TEST(WorkloadTest, RulesAreSeededAndDocumented) {
  std::vector<TraceJob> trace;
  for (int i = 0; i < 1000; ++i) {
    trace.push_back(TraceJob{std::to_string(i), i, 100, i % 3 == 0 ? 32 : (i % 3 == 1 ? 8 : 2), i});
  }
  WorkloadRules rules;
  std::vector<JobRequest> a = MakeWorkload(trace, rules);
  std::vector<JobRequest> b = MakeWorkload(trace, rules);
  rules.seed = 2;
  std::vector<JobRequest> c = MakeWorkload(trace, rules);
  int differ = 0, priority3 = 0, pipelines = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].user, b[i].user);
    EXPECT_EQ(a[i].priority, b[i].priority);
    differ += a[i].user != c[i].user;
    priority3 += a[i].priority == 3;
    pipelines += a[i].comm == CommKind::kPipeline;
  }
  EXPECT_GT(differ, 500);  // another seed, other users
  EXPECT_NEAR(priority3, 700, 60);
  EXPECT_NEAR(pipelines, 334 * 0.2, 30);
  EXPECT_EQ(a[0].nodes, 4);  // 32 GPUs: 4 nodes of 8
  EXPECT_EQ(a[0].gpus_per_node, 8);
  EXPECT_EQ(a[1].nodes, 1);
  EXPECT_EQ(a[1].comm, CommKind::kNone);
  EXPECT_EQ(a[2].nodes, 0);  // 2 GPUs: a sub-node job
  EXPECT_EQ(a[2].gpus, 2);
  EXPECT_EQ(a[0].expected_runtime, 100);
}

TEST(SyntheticWorkloadTest, SeededWithTheDocumentedDistributionsAndLoad) {
  SyntheticWorkload w;
  w.jobs = 20000;
  w.cluster_gpus = 10000;
  w.load = 2;
  const std::vector<TraceJob> a = GenerateWorkload(w);
  const std::vector<TraceJob> b = GenerateWorkload(w);
  w.seed = 2;
  const std::vector<TraceJob> c = GenerateWorkload(w);
  ASSERT_EQ(a.size(), 20000u);
  int one = 0, sub = 0, node = 0, multi = 0, differ = 0, biggest = 0;
  double gpu_seconds = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].gpus, b[i].gpus);
    EXPECT_EQ(a[i].submit, b[i].submit);
    differ += a[i].gpus != c[i].gpus || a[i].duration != c[i].duration;
    if (i > 0) {
      EXPECT_GE(a[i].submit, a[i - 1].submit);
    }
    EXPECT_GE(a[i].duration, 300);
    EXPECT_LE(a[i].duration, 7 * 86400);
    one += a[i].gpus == 1;
    sub += a[i].gpus == 2 || a[i].gpus == 4;
    node += a[i].gpus == 8;
    if (a[i].gpus > 8) {
      ++multi;
      EXPECT_EQ(a[i].gpus % 8, 0);
      EXPECT_LE(a[i].gpus, 128 * 8);
    }
    biggest = std::max(biggest, a[i].gpus);
    gpu_seconds += static_cast<double>(a[i].gpus) * static_cast<double>(a[i].duration);
  }
  EXPECT_GT(differ, 10000);  // another seed, other jobs
  EXPECT_NEAR(one, 8000, 400);
  EXPECT_NEAR(sub, 3000, 300);
  EXPECT_NEAR(node, 4000, 300);
  EXPECT_NEAR(multi, 5000, 300);
  EXPECT_EQ(biggest, 128 * 8);
  // Offered load: GPU-seconds asked per second of arrivals, against the cluster's GPUs.
  const double span = static_cast<double>(a.back().submit - a.front().submit);
  EXPECT_NEAR(gpu_seconds / span / w.cluster_gpus, 2.0, 0.1);
  // The ITP format, which the trace parser reads back.
  auto parsed = ParseTrace(FormatTrace(a), "synthetic");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  ASSERT_EQ(parsed->size(), a.size());
  EXPECT_EQ((*parsed)[5].gpus, a[5].gpus);
  EXPECT_EQ((*parsed)[5].duration, a[5].duration);
  EXPECT_EQ((*parsed)[5].id, a[5].id);
}

}  // namespace
}  // namespace ff::scheduler
