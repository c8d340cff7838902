#include "monitoring/metrics.h"

#include <prometheus/exposer.h>
#include <spdlog/spdlog.h>

#include <chrono>
#include <cmath>
#include <cstdio>

#include "common/config.h"
#include "common/files.h"
#include "common/rpc_server.h"

namespace ff {

void MetricsOptions::Bind(ConfigSection& s) {
  s.Optional("enabled", enabled);
  s.Optional("listen", listen);
  s.Optional("any_port_when_busy", any_port_when_busy);
  s.Optional("targets_dir", targets_dir);
  if (s.mode() == ConfigSection::Mode::kRead) {
    std::string host;
    int port = 0;
    Status st = SplitHostPort(listen, &host, &port);
    s.Check(st.ok(), "listen", st.message());
  }
}

Metrics::Metrics(std::string daemon)
    : daemon_(std::move(daemon)), registry_(std::make_shared<prometheus::Registry>()) {
  Gauge("ff_build_info", "Build of the running daemon (value is always 1)",
        {{"daemon", daemon_}, {"version", FF_VERSION}})
      .Set(1);
  auto now = std::chrono::system_clock::now().time_since_epoch();
  Gauge("process_start_time_seconds", "Start time of the process since the Unix epoch in seconds")
      .Set(std::chrono::duration<double>(now).count());
}

Metrics::~Metrics() {
  if (!target_file_.empty()) std::remove(target_file_.c_str());
}

prometheus::Counter& Metrics::Counter(const std::string& name, const std::string& help,
                                      const MetricLabels& labels) {
  return prometheus::BuildCounter().Name(name).Help(help).Register(*registry_).Add(labels);
}

prometheus::Gauge& Metrics::Gauge(const std::string& name, const std::string& help,
                                  const MetricLabels& labels) {
  return prometheus::BuildGauge().Name(name).Help(help).Register(*registry_).Add(labels);
}

prometheus::Histogram& Metrics::Histogram(const std::string& name, const std::string& help,
                                          const std::vector<double>& buckets,
                                          const MetricLabels& labels) {
  return prometheus::BuildHistogram()
      .Name(name)
      .Help(help)
      .Register(*registry_)
      .Add(labels, prometheus::Histogram::BucketBoundaries(buckets));
}

std::vector<double> Metrics::LatencyBuckets() {
  static const std::vector<double> kBuckets = [] {  // computed once: services ask on every call
    std::vector<double> buckets;
    for (int e = -5; e <= 2; ++e) {
      for (double m : {1.0, 1.8, 3.2, 5.6})
        buckets.push_back(m * std::pow(10.0, e));
    }
    return buckets;
  }();
  return kBuckets;
}

namespace {

std::string JsonString(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
    } else {
      out += c;
    }
  }
  return out + "\"";
}

// Prometheus' file_sd format: one target group.
std::string TargetGroup(const std::string& address, const MetricLabels& labels) {
  std::string out = "[{\"targets\": [" + JsonString(address) + "], \"labels\": {";
  bool first = true;
  for (const auto& [k, v] : labels) {
    out += (first ? "" : ", ") + JsonString(k) + ": " + JsonString(v);
    first = false;
  }
  return out + "}}]\n";
}

}  // namespace

Status Metrics::Serve(const MetricsOptions& options, const MetricLabels& target_labels) {
  if (!options.enabled) return Status::Ok();
  if (exposer_) return FailedPrecondition("metrics endpoint already serving on " + address_);
  std::string host;
  int port = 0;
  FF_RETURN_IF_ERROR(SplitHostPort(options.listen, &host, &port));
  const std::string bracketed = host.find(':') != std::string::npos ? "[" + host + "]" : host;
  auto bind = [&](const std::string& listen) -> Status {
    try {
      // civetweb takes "host:port"; IPv6 hosts keep their brackets.
      exposer_ = std::make_unique<prometheus::Exposer>(listen, /*num_threads=*/2);
    } catch (const std::exception& e) {
      return Unavailable("cannot serve metrics on " + listen + ": " + e.what());
    }
    return Status::Ok();
  };
  Status bound = bind(options.listen);
  if (!bound.ok() && options.any_port_when_busy && port != 0) {
    spdlog::warn("{} is taken (another {} on this machine?): metrics on a free port instead",
                 options.listen, daemon_);
    bound = bind(bracketed + ":0");
  }
  FF_RETURN_IF_ERROR(bound);
  std::vector<int> ports = exposer_->GetListeningPorts();
  if (ports.empty()) {
    exposer_.reset();
    return Unavailable("cannot serve metrics on " + options.listen + ": no listening port");
  }
  exposer_->RegisterCollectable(registry_);
  address_ = bracketed + ":" + std::to_string(ports.front());
  spdlog::info("metrics at http://{}/metrics", address_);
  if (!options.targets_dir.empty()) {
    MetricLabels labels = target_labels;
    labels["daemon"] = daemon_;
    const std::string path =
        options.targets_dir + "/" + daemon_ + "-" + std::to_string(ports.front()) + ".json";
    Status written = WriteFileAtomically(path, TargetGroup(address_, labels));
    if (!written.ok()) {
      exposer_.reset();
      address_.clear();
      return written.WithContext("announcing the metrics endpoint in " + options.targets_dir);
    }
    target_file_ = path;
  }
  return Status::Ok();
}

}  // namespace ff
