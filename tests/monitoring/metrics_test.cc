#include "monitoring/metrics.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/support/http_get.h"

namespace ff {
namespace {

using ::testing::HasSubstr;

TEST(MetricsTest, ScrapeOverHttpFindsTheIncrementedCounter) {
  Metrics metrics("fs3-test");
  prometheus::Counter& writes =
      metrics.Counter("fs3_test_write_bytes_total", "Bytes written", {{"target", "3"}});
  ASSERT_TRUE(metrics.Serve(MetricsOptions{}).ok());
  ASSERT_FALSE(metrics.address().empty());
  writes.Increment(4096);
  writes.Increment(1);

  auto response = test::HttpGet(metrics.address(), "/metrics");
  ASSERT_TRUE(response.ok()) << response.status();
  EXPECT_EQ(response->status, 200);
  EXPECT_THAT(response->body, HasSubstr("# TYPE fs3_test_write_bytes_total counter"));
  EXPECT_THAT(response->body, HasSubstr("fs3_test_write_bytes_total{target=\"3\"} 4097"));
  EXPECT_THAT(response->body, HasSubstr("ff_build_info{daemon=\"fs3-test\""));
  EXPECT_THAT(response->body, HasSubstr("process_start_time_seconds"));

  // The value is live, not a snapshot taken at Serve.
  writes.Increment(3);
  auto again = test::HttpGet(metrics.address(), "/metrics");
  ASSERT_TRUE(again.ok());
  EXPECT_THAT(again->body, HasSubstr("fs3_test_write_bytes_total{target=\"3\"} 4100"));
}

TEST(MetricsTest, SameNameAndLabelsIsTheSameMetric) {
  Metrics metrics("x");
  prometheus::Counter& a = metrics.Counter("x_ops_total", "ops", {{"op", "read"}});
  prometheus::Counter& b = metrics.Counter("x_ops_total", "ops", {{"op", "read"}});
  prometheus::Counter& c = metrics.Counter("x_ops_total", "ops", {{"op", "write"}});
  EXPECT_EQ(&a, &b);
  EXPECT_NE(&a, &c);
}

TEST(MetricsTest, HistogramsAndGaugesAreExposed) {
  Metrics metrics("hfreduce-test");
  auto& seconds = metrics.Histogram("hfreduce_test_allreduce_seconds", "Allreduce latency",
                                    Metrics::LatencyBuckets());
  seconds.Observe(0.002);
  metrics.Gauge("hfreduce_test_ranks", "Ranks").Set(8);
  ASSERT_TRUE(metrics.Serve(MetricsOptions{}).ok());
  auto response = test::HttpGet(metrics.address(), "/metrics");
  ASSERT_TRUE(response.ok()) << response.status();
  EXPECT_THAT(response->body, HasSubstr("hfreduce_test_allreduce_seconds_count 1"));
  EXPECT_THAT(response->body, HasSubstr("hfreduce_test_ranks 8"));
}

TEST(MetricsTest, BusyPortAndDoubleServeFailClearly) {
  Metrics first("a");
  ASSERT_TRUE(first.Serve(MetricsOptions{}).ok());
  Status twice = first.Serve(MetricsOptions{});
  EXPECT_EQ(twice.code(), StatusCode::kFailedPrecondition);

  Metrics second("b");
  MetricsOptions same;
  same.listen = first.address();
  Status st = second.Serve(same);
  EXPECT_EQ(st.code(), StatusCode::kUnavailable);
  EXPECT_THAT(st.message(), HasSubstr("cannot serve metrics on " + first.address()));
  EXPECT_TRUE(second.address().empty());
}

TEST(MetricsTest, DisabledServesNothing) {
  Metrics metrics("a");
  MetricsOptions off;
  off.enabled = false;
  EXPECT_TRUE(metrics.Serve(off).ok());
  EXPECT_TRUE(metrics.address().empty());
}

TEST(MetricsTest, LatencyBucketsAreIncreasing) {
  std::vector<double> b = Metrics::LatencyBuckets();
  ASSERT_FALSE(b.empty());
  for (std::size_t i = 1; i < b.size(); ++i)
    EXPECT_LT(b[i - 1], b[i]);
  EXPECT_LE(b.front(), 1e-5);
  EXPECT_GE(b.back(), 100);
}

}  // namespace
}  // namespace ff
