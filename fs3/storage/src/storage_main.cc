// fs3-storage: fs3's storage service (one per storage node, several targets).
//
//   fs3-storage --config deploy/config/fs3-storage.toml [--set key=value ...] [--listen HOST:PORT]
#include "monitoring/service_daemon.h"
#include "storage_service.h"

int main(int argc, char** argv) {
  using ff::fs3::StorageOptions;
  using ff::fs3::StorageService;
  ff::ServiceDaemon<StorageOptions, StorageService> daemon{"fs3-storage", "fs3 storage service"};
  daemon.traffic = ff::TrafficClass::kStorage;  // replies carry chunk data
  daemon.make = [](StorageOptions& o, ff::Metrics& m) { return StorageService::Create(o, &m); };
  daemon.start = [](StorageService& s, const std::string& address) { s.Start(address); };
  daemon.stop = [](StorageService& s) { s.Stop(); };
  return daemon.Run(argc, argv);
}
