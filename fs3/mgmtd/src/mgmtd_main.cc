// fs3-mgmtd: fs3's cluster manager.
//
//   fs3-mgmtd --config deploy/config/fs3-mgmtd.toml [--set key=value ...] [--listen HOST:PORT]
#include "mgmtd.h"
#include "monitoring/service_daemon.h"

int main(int argc, char** argv) {
  using ff::fs3::Mgmtd;
  using ff::fs3::MgmtdOptions;
  ff::ServiceDaemon<MgmtdOptions, Mgmtd> daemon{"fs3-mgmtd", "fs3 cluster manager"};
  daemon.make = [](MgmtdOptions& o, ff::Metrics& m) { return Mgmtd::Create(o, &m); };
  daemon.start = [](Mgmtd& s, const std::string& address) { s.Start(address); };
  daemon.stop = [](Mgmtd& s) { s.Stop(); };
  return daemon.Run(argc, argv);
}
