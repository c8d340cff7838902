#include "monitoring/metrics.h"

#include <prometheus/exposer.h>
#include <spdlog/spdlog.h>

#include <chrono>
#include <cmath>

#include "common/config.h"
#include "common/rpc_server.h"

namespace ff {

void MetricsOptions::Bind(ConfigSection& s) {
  s.Optional("enabled", enabled);
  s.Optional("listen", listen);
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

Metrics::~Metrics() = default;

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
  std::vector<double> buckets;
  for (int e = -5; e <= 2; ++e) {
    for (double m : {1.0, 1.8, 3.2, 5.6})
      buckets.push_back(m * std::pow(10.0, e));
  }
  return buckets;
}

Status Metrics::Serve(const MetricsOptions& options) {
  if (!options.enabled) return Status::Ok();
  if (exposer_) return FailedPrecondition("metrics endpoint already serving on " + address_);
  std::string host;
  int port = 0;
  FF_RETURN_IF_ERROR(SplitHostPort(options.listen, &host, &port));
  try {
    // civetweb takes "host:port"; IPv6 hosts keep their brackets.
    exposer_ = std::make_unique<prometheus::Exposer>(options.listen, /*num_threads=*/2);
  } catch (const std::exception& e) {
    return Unavailable("cannot serve metrics on " + options.listen + ": " + e.what());
  }
  std::vector<int> ports = exposer_->GetListeningPorts();
  if (ports.empty()) {
    exposer_.reset();
    return Unavailable("cannot serve metrics on " + options.listen + ": no listening port");
  }
  exposer_->RegisterCollectable(registry_);
  address_ = (host.find(':') != std::string::npos ? "[" + host + "]" : host) + ":" +
             std::to_string(ports.front());
  spdlog::info("metrics at http://{}/metrics", address_);
  return Status::Ok();
}

}  // namespace ff
