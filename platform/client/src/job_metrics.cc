#include "platform/job_metrics.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>

namespace ff::platform {

bool ValidMetricName(std::string_view name) {
  if (name.empty() || name.size() > kMaxMetricName) return false;
  auto alpha = [](char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; };
  if (!alpha(name.front())) return false;
  return std::all_of(name.begin(), name.end(), [&](char c) {
    return alpha(c) || (c >= '0' && c <= '9') || c == '.' || c == ':' || c == '/' || c == '-';
  });
}

Result<hai::MetricRecord> ParseMetricLine(std::string_view line) {
  if (line.size() > kMaxMetricLine) return InvalidArgument("a metrics line over 16 KiB");
  nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return InvalidArgument("not JSON");
  if (!j.is_object()) return InvalidArgument("not a JSON object");
  hai::MetricRecord r;
  auto step = j.find("step");
  if (step == j.end() || !step->is_number_integer() || step->get<int64_t>() < 0) {
    return InvalidArgument("no \"step\" (an integer >= 0)");
  }
  r.set_step(step->get<int64_t>());
  for (const auto& [key, value] : j.items()) {
    if (key == "step") continue;
    if (key == "time") {
      if (!value.is_number() || value.get<double>() < 0) {
        return InvalidArgument("\"time\" is not seconds since the epoch");
      }
      r.set_time(value.get<double>());
    } else if (key == "run") {
      if (!value.is_number_integer() || value.get<int64_t>() < 0 ||
          value.get<int64_t>() > std::numeric_limits<int32_t>::max()) {
        return InvalidArgument("\"run\" is not an integer >= 0");
      }
      r.set_run(static_cast<int32_t>(value.get<int64_t>()));
    } else if (!ValidMetricName(key)) {
      return InvalidArgument("metric name \"" + key.substr(0, kMaxMetricName) +
                             "\" is not 1 to 64 of [A-Za-z0-9_.:/-] beginning with a letter or _");
    } else if (value.is_null()) {
      (*r.mutable_values())[key] = std::numeric_limits<double>::quiet_NaN();
    } else if (value.is_number()) {
      (*r.mutable_values())[key] = value.get<double>();
    } else {
      return InvalidArgument("metric \"" + key + "\" is not a number");
    }
  }
  return r;
}

MetricLines ParseMetricLines(std::string_view data) {
  MetricLines out;
  std::size_t at = 0;
  while (at < data.size()) {
    std::size_t nl = data.find('\n', at);
    if (nl == std::string_view::npos) {
      // No newline yet: a line being written, unless it is already too long to be one.
      if (data.size() - at > kMaxMetricLine) {
        out.unreadable++;
        out.consumed = static_cast<int64_t>(data.size());
      }
      break;
    }
    std::string_view line = data.substr(at, nl - at);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.find_first_not_of(" \t") != std::string_view::npos) {
      Result<hai::MetricRecord> r = ParseMetricLine(line);
      if (r.ok()) {
        out.records.push_back(std::move(*r));
      } else {
        out.unreadable++;
      }
    }
    at = nl + 1;
    out.consumed = static_cast<int64_t>(at);
  }
  return out;
}

void MetricThinner::Add(hai::MetricRecord record) {
  if (static_cast<std::size_t>(seen_++) % stride_ == 0) {
    kept_.push_back(record);
    last_kept_ = true;
    if (kept_.size() >= bound_) {
      // Keep every other one, and from now on every 2·stride-th.
      std::vector<hai::MetricRecord> halved;
      halved.reserve(kept_.size() / 2 + 1);
      for (std::size_t i = 0; i < kept_.size(); i += 2)
        halved.push_back(std::move(kept_[i]));
      kept_ = std::move(halved);
      stride_ *= 2;
      last_kept_ = false;
    }
  } else {
    last_kept_ = false;
  }
  last_ = std::move(record);
}

std::vector<hai::MetricRecord> MetricThinner::Take() && {
  if (seen_ > 0 && !last_kept_) kept_.push_back(std::move(last_));
  if (kept_.size() <= max_points_) return std::move(kept_);
  // max_points evenly among the kept, the first and the last included.
  std::vector<hai::MetricRecord> out;
  out.reserve(max_points_);
  const std::size_t n = kept_.size();
  for (std::size_t i = 0; i < max_points_; ++i)
    out.push_back(std::move(kept_[i * (n - 1) / (max_points_ - 1)]));
  return out;
}

std::vector<std::pair<int64_t, double>> MetricSeries(const std::vector<hai::MetricRecord>& records,
                                                     std::string_view name) {
  std::vector<std::pair<int64_t, double>> out;
  for (const auto& r : records) {
    auto it = r.values().find(std::string(name));
    if (it != r.values().end() && std::isfinite(it->second)) out.emplace_back(r.step(), it->second);
  }
  return out;
}

std::vector<std::string> MetricNames(const std::vector<hai::MetricRecord>& records) {
  std::set<std::string> names;
  for (const auto& r : records)
    for (const auto& [name, value] : r.values())
      names.insert(name);
  std::vector<std::string> out;
  if (names.erase("loss")) out.push_back("loss");
  out.insert(out.end(), names.begin(), names.end());
  return out;
}

}  // namespace ff::platform
