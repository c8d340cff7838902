// Training metrics that jobs report: the one reading of the metrics file, for hai-agent (which
// serves it), hai-server (which gathers a rank's from every node that ran it), `hai metrics` and
// hai-web (which plots it).
//
// A rank reports with hai_job.report(step, loss=...) (Python) or hai::job::Report (C++,
// platform/hai_job.h). Each report is one line of $HAI_METRICS_FILE, beside the rank's log, a JSON
// object:
//
//   {"step": 120, "time": 1764316800.25, "run": 0, "loss": 2.31, "lr": 0.0003}
//
// "step" (an integer >= 0) is required; "time" (seconds since the epoch) and "run" (the job's run,
// $HAI_RUN) are optional; every other member is a metric: its name is 1 to 64 of [A-Za-z0-9_.:/-]
// beginning with a letter or '_', its value a number, or null where the value was not finite
// (NaN, a diverged loss). A line that is anything else is skipped and counted, never fatal: the
// file is the job's, and a job may write what it likes.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "common/result.h"
#include "platform/proto/hai.pb.h"

namespace ff::platform {

inline constexpr std::size_t kMaxMetricLine = 16 << 10;  // longer lines are skipped
inline constexpr std::size_t kMaxMetricName = 64;

bool ValidMetricName(std::string_view name);

// One line (without its newline) as a record; InvalidArgument says what is wrong with it.
Result<hai::MetricRecord> ParseMetricLine(std::string_view line);

// The whole lines of `data`, read from a metrics file: the records, how many bytes they end at
// (a last line without its newline is left for the next read: it may be being written), and the
// lines skipped. A line longer than kMaxMetricLine is skipped even before its newline comes, so
// that a reader always moves on.
struct MetricLines {
  std::vector<hai::MetricRecord> records;
  int64_t consumed = 0;
  int64_t unreadable = 0;
};
MetricLines ParseMetricLines(std::string_view data);

// Keeps `max_points` of a series fed one record at a time (all of a shorter one), evenly spread,
// in memory bounded by twice that whatever the series' length: every stride-th record, the stride
// doubling whenever the kept ones reach the bound; Take() then picks evenly among them. The first
// and the last record fed are always kept.
class MetricThinner {
 public:
  explicit MetricThinner(std::size_t max_points)
      : max_points_(max_points < 2 ? 2 : max_points), bound_(2 * max_points_) {}
  void Add(hai::MetricRecord record);
  int64_t seen() const { return seen_; }
  std::vector<hai::MetricRecord> Take() &&;

 private:
  std::size_t max_points_;
  std::size_t bound_;  // kept before Take()
  std::size_t stride_ = 1;
  int64_t seen_ = 0;
  std::vector<hai::MetricRecord> kept_;
  hai::MetricRecord last_;
  bool last_kept_ = true;
};

// The points of one metric over a series of records, (step, value), finite values only.
std::vector<std::pair<int64_t, double>> MetricSeries(const std::vector<hai::MetricRecord>& records,
                                                     std::string_view name);
// Every metric name in the records, "loss" first, then by name.
std::vector<std::string> MetricNames(const std::vector<hai::MetricRecord>& records);

}  // namespace ff::platform
