// Prometheus metrics for a daemon: one registry, and an HTTP exposer serving it at /metrics.
//
//   Metrics metrics("fs3-storage");
//   prometheus::Counter& writes = metrics.Counter("fs3_storage_write_bytes_total",
//                                                 "Bytes written to chunks", {{"target", "3"}});
//   FF_RETURN_IF_ERROR(metrics.Serve(config.metrics));   // http://host:port/metrics
//   writes.Increment(n);
//
// Names follow Prometheus conventions (<part>_<what>_<unit>[_total]). Asking twice for the same
// name and labels returns the same metric; the same name with another help text or kind is a
// programming error reported by prometheus-cpp. Every registry also carries
// ff_build_info{daemon,version} = 1 and process_start_time_seconds.
// Metric objects are thread-safe; Metrics' own methods may be called from any thread.
#pragma once

#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"

namespace prometheus {
class Exposer;
}  // namespace prometheus

namespace ff {

class ConfigSection;

// The [metrics] section of a daemon's config.
struct MetricsOptions {
  bool enabled = true;
  std::string listen = "127.0.0.1:0";  // host:port of the /metrics endpoint; port 0: any free port
  // When `listen`'s port is taken, serve on a free port of the same host instead of failing (the
  // address is logged, put in the ready file and announced in `targets_dir`). For a daemon that
  // runs several times on one machine from one config (fs3-fuse: one per mount). Default false:
  // a second daemon on a taken port is a mistake, said at once.
  bool any_port_when_busy = false;
  // A folder where the endpoint is announced for Prometheus' file-based service discovery
  // (file_sd_configs): <daemon>-<port>.json with the address and the daemon's labels, written once
  // serving and removed at exit. Default "": not announced (Prometheus scrapes `listen`).
  std::string targets_dir;

  void Bind(ConfigSection& s);
};

using MetricLabels = std::map<std::string, std::string>;

class Metrics {
 public:
  explicit Metrics(std::string daemon);
  ~Metrics();
  Metrics(const Metrics&) = delete;
  Metrics& operator=(const Metrics&) = delete;

  prometheus::Counter& Counter(const std::string& name, const std::string& help,
                               const MetricLabels& labels = {});
  prometheus::Gauge& Gauge(const std::string& name, const std::string& help,
                           const MetricLabels& labels = {});
  prometheus::Histogram& Histogram(const std::string& name, const std::string& help,
                                   const std::vector<double>& buckets,
                                   const MetricLabels& labels = {});

  // Buckets for latencies in seconds: 10 us .. ~100 s, four per decade.
  static std::vector<double> LatencyBuckets();

  // Starts the HTTP endpoint (no-op when !options.enabled). Fails with kUnavailable when the
  // address cannot be bound (and options.any_port_when_busy found no other); calling it twice is
  // kFailedPrecondition. `target_labels` go with the announcement in options.targets_dir (the
  // daemon's name is always among them).
  Status Serve(const MetricsOptions& options, const MetricLabels& target_labels = {});
  // "host:port" of the endpoint, empty when not serving.
  const std::string& address() const { return address_; }

  const std::shared_ptr<prometheus::Registry>& registry() const { return registry_; }

 private:
  std::string daemon_;
  std::shared_ptr<prometheus::Registry> registry_;
  std::unique_ptr<prometheus::Exposer> exposer_;
  std::string address_;
  std::string target_file_;  // the announcement in targets_dir, removed by the destructor
};

}  // namespace ff
