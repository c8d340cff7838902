// fs3-meta: fs3's namespace service.
//
//   fs3-meta --config deploy/config/fs3-meta.toml [--set key=value ...] [--listen HOST:PORT]
#include "meta_service.h"
#include "monitoring/service_daemon.h"

int main(int argc, char** argv) {
  using ff::fs3::MetaOptions;
  using ff::fs3::MetaService;
  ff::ServiceDaemon<MetaOptions, MetaService> daemon{"fs3-meta", "fs3 metadata service"};
  daemon.make = [](MetaOptions& o, ff::Metrics& m) { return MetaService::Create(o, &m); };
  daemon.start = [](MetaService& s, const std::string& address) { s.Start(address); };
  daemon.stop = [](MetaService& s) { s.Stop(); };
  return daemon.Run(argc, argv);
}
