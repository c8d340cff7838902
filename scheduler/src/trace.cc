#include "scheduler/trace.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <random>
#include <unordered_map>

#include "common/files.h"

namespace ff::scheduler {
namespace {

std::vector<std::string_view> Split(std::string_view line, char sep) {
  std::vector<std::string_view> out;
  std::size_t start = 0;
  while (true) {
    std::size_t pos = line.find(sep, start);
    out.push_back(line.substr(start, pos == std::string_view::npos ? pos : pos - start));
    if (pos == std::string_view::npos) return out;
    start = pos + 1;
  }
}

bool ParseCount(std::string_view field, int64_t* out) {
  if (field.empty()) return false;
  auto [end, ec] = std::from_chars(field.data(), field.data() + field.size(), *out);
  return ec == std::errc() && end == field.data() + field.size() && *out >= 0;
}

}  // namespace

Result<std::vector<TraceJob>> ParseTrace(std::string_view text, const std::string& source) {
  // A UTF-8 byte-order mark (spreadsheets write one) is not part of the header.
  if (text.substr(0, 3) == "\xEF\xBB\xBF") text.remove_prefix(3);
  std::vector<std::string_view> lines = Split(text, '\n');
  if (!lines.empty() && lines.back().empty()) lines.pop_back();  // the final newline
  for (auto& l : lines) {
    if (!l.empty() && l.back() == '\r') l.remove_suffix(1);
  }
  if (lines.empty()) return InvalidArgument(source + ": empty trace (no header line)");

  std::vector<std::string_view> header = Split(lines[0], ',');
  auto column = [&](std::initializer_list<std::string_view> names) {
    for (std::size_t i = 0; i < header.size(); ++i) {
      for (std::string_view n : names) {
        if (header[i] == n) return static_cast<int>(i);
      }
    }
    return -1;
  };
  const int id_col = column({"job_id"});
  const int submit_col = column({"submission_time", "submit_time"});
  const int duration_col = column({"duration"});
  const int gpu_col = column({"num_gpu"});
  if (id_col < 0 || submit_col < 0 || duration_col < 0 || gpu_col < 0) {
    return InvalidArgument(source + ":1: header '" + std::string(lines[0]) +
                           "' is neither the ITP format (job_id,submission_time,duration,num_gpu) "
                           "nor the Tiresias one (job_id,num_gpu,submit_time,...,duration,...)");
  }

  std::vector<TraceJob> jobs;
  jobs.reserve(lines.size());
  std::unordered_map<std::string, int> line_of_id;
  for (std::size_t i = 1; i < lines.size(); ++i) {
    const int line_no = static_cast<int>(i + 1);
    const std::string where = source + ":" + std::to_string(line_no) + ": ";
    std::vector<std::string_view> fields = Split(lines[i], ',');
    if (fields.size() != header.size()) {
      return InvalidArgument(where + "expected " + std::to_string(header.size()) +
                             " fields, found " + std::to_string(fields.size()));
    }
    TraceJob job;
    job.line = line_no;
    job.id = std::string(fields[id_col]);
    if (job.id.empty()) return InvalidArgument(where + "empty job_id");
    if (auto [it, fresh] = line_of_id.emplace(job.id, line_no); !fresh) {
      return InvalidArgument(where + "job_id '" + job.id + "' is already on line " +
                             std::to_string(it->second));
    }
    int64_t submit = 0, duration = 0, gpus = 0;
    if (!ParseCount(fields[submit_col], &submit)) {
      return InvalidArgument(where + "submission time '" + std::string(fields[submit_col]) +
                             "' is not a non-negative integer");
    }
    if (!ParseCount(fields[duration_col], &duration) || duration == 0) {
      return InvalidArgument(where + "duration '" + std::string(fields[duration_col]) +
                             "' is not a positive integer");
    }
    if (!ParseCount(fields[gpu_col], &gpus) || gpus == 0 || gpus > 100000) {
      return InvalidArgument(where + "num_gpu '" + std::string(fields[gpu_col]) +
                             "' is not a positive integer");
    }
    job.submit = submit;
    job.duration = duration;
    job.gpus = static_cast<int>(gpus);
    jobs.push_back(std::move(job));
  }
  if (jobs.empty()) return InvalidArgument(source + ": the trace has a header but no jobs");
  std::stable_sort(jobs.begin(), jobs.end(),
                   [](const TraceJob& a, const TraceJob& b) { return a.submit < b.submit; });
  return jobs;
}

Result<std::vector<TraceJob>> LoadTrace(const std::string& path) {
  FF_ASSIGN_OR_RETURN(std::string text, ReadWholeFile(path, "cannot read trace"));
  return ParseTrace(text, path);
}

std::vector<JobRequest> MakeWorkload(const std::vector<TraceJob>& trace,
                                     const WorkloadRules& rules) {
  std::vector<JobRequest> jobs;
  jobs.reserve(trace.size());
  for (std::size_t i = 0; i < trace.size(); ++i) {
    const TraceJob& t = trace[i];
    std::mt19937_64 rng(rules.seed * 0x9e3779b97f4a7c15ull + i);
    JobRequest j;
    j.id = static_cast<JobId>(i + 1);
    j.submit_time = t.submit;
    j.expected_runtime = t.duration;
    j.min_runtime = rules.min_runtime;
    j.user = "user" + std::to_string(rng() % static_cast<uint64_t>(rules.users));
    uint64_t p = rng() % 100;
    j.priority = p < 70 ? 3 : p < 85 ? 4 : p < 95 ? 2 : 5;
    if (t.gpus >= rules.gpus_per_node) {
      j.nodes = (t.gpus + rules.gpus_per_node - 1) / rules.gpus_per_node;
      j.gpus_per_node = rules.gpus_per_node;
    } else {
      j.nodes = 0;
      j.gpus = t.gpus;
    }
    if (j.nodes > 1) {
      bool pipeline = static_cast<double>(rng() % 1000) < rules.pipeline_share * 1000;
      j.comm = pipeline ? CommKind::kPipeline : CommKind::kAllreduce;
      j.traffic_gbps = pipeline ? rules.traffic_gbps / 2 : rules.traffic_gbps;
      j.may_span_zones = pipeline;
    } else {
      j.comm = CommKind::kNone;
    }
    if (j.nodes > 1 && rules.ft_share > 0 &&
        static_cast<double>(rng() % 1000) < rules.ft_share * 1000) {
      int replicas = j.nodes;
      for (int r : {8, 4, 2}) {
        if (j.nodes % r == 0) {
          replicas = r;
          break;
        }
      }
      j.node_step = j.nodes / replicas;
      j.min_nodes = std::max(1, replicas / 2) * j.node_step;
    }
    jobs.push_back(std::move(j));
  }
  return jobs;
}

std::vector<TraceJob> GenerateWorkload(const SyntheticWorkload& w) {
  std::mt19937_64 rng(w.seed);
  std::uniform_real_distribution<double> unit(0, 1);
  const int max_nodes =
      std::max(1, std::min(w.max_nodes, w.cluster_gpus / std::max(1, w.gpus_per_node)));
  int max_k = 0;
  while ((2 << max_k) <= max_nodes)
    ++max_k;  // 2^max_k <= max_nodes
  std::lognormal_distribution<double> duration(std::log(static_cast<double>(w.median_duration)),
                                               1.5);
  std::vector<TraceJob> jobs(w.jobs);
  double gpu_seconds = 0;
  for (std::size_t i = 0; i < jobs.size(); ++i) {
    TraceJob& j = jobs[i];
    j.id = "syn" + std::to_string(i + 1);
    j.line = static_cast<int>(i) + 2;
    const double r = unit(rng);
    bool multi = false;
    if (r < 0.40) {
      j.gpus = 1;
    } else if (r < 0.55) {
      j.gpus = unit(rng) < 0.5 ? 2 : 4;
    } else if (r < 0.75 || max_k == 0) {
      j.gpus = w.gpus_per_node;
    } else {
      const int k = 1 + static_cast<int>(unit(rng) * max_k);
      j.gpus = (1 << std::min(k, max_k)) * w.gpus_per_node;
      multi = true;
    }
    j.gpus = std::min(j.gpus, w.cluster_gpus);
    const double d = duration(rng) * (multi ? 2 : 1);
    j.duration = static_cast<Seconds>(std::clamp(d, 300.0, 7 * 86400.0));
    gpu_seconds += static_cast<double>(j.gpus) * static_cast<double>(j.duration);
  }
  // Poisson arrivals at the rate that offers `load` x the cluster's GPUs.
  const double per_job = jobs.empty() ? 1 : gpu_seconds / static_cast<double>(jobs.size());
  const double rate = w.load * w.cluster_gpus / per_job;  // jobs per second
  std::exponential_distribution<double> gap(rate);
  double t = 0;
  for (TraceJob& j : jobs) {
    j.submit = static_cast<Seconds>(t);
    t += gap(rng);
  }
  return jobs;
}

std::string FormatTrace(const std::vector<TraceJob>& trace) {
  std::string out = "job_id,submission_time,duration,num_gpu\n";
  for (const TraceJob& j : trace) {
    out += j.id + "," + std::to_string(j.submit) + "," + std::to_string(j.duration) + "," +
           std::to_string(j.gpus) + "\n";
  }
  return out;
}

}  // namespace ff::scheduler
