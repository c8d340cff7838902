// hfreduce-store: the rendezvous store and the replica quorums of fault-tolerant jobs
// (hfreduce/store.h, hfreduce/quorum.h), served apart from the ranks so that it outlives any of
// them: what a job outside HAI-Platform runs once (inside it, hai-server serves the same).
//
//   hfreduce-store [--config FILE] [--ready-file FILE] [--listen 127.0.0.1:0]
//                  [--stores A,B,...] [--address-file FILE]
//
// A daemon of the stack (common/daemon.h): --config's [store] section (listen, stores) and the
// common flags; --listen and --stores are shorthands for --set store.listen=... and
// store.stores=.... stores lists every server a job's groups may use (this one among them): each
// quorum tells them to its members, which then also try the servers they were not given at their
// start.
//
// Once it serves it prints "hfreduce-store listening on HOST:PORT", writes {"rpc": "HOST:PORT"}
// to --ready-file and HOST:PORT to --address-file; runs until SIGTERM or SIGINT.
#include <cstdio>
#include <string>

#include "common/daemon.h"
#include "common/files.h"
#include "hfreduce/store.h"

namespace {

struct StoreConfig {
  struct Store {
    std::string listen = "127.0.0.1:0";  // host:port (port 0: any free one)
    std::string stores;                  // every server of the quorum service, comma-separated
    void Bind(ff::ConfigSection& s) {
      s.Optional("listen", listen);
      s.Optional("stores", stores);
    }
  } store;
  ff::LogOptions log;

  void Bind(ff::ConfigSection& s) {
    s.Section("store", store);
    s.Section("log", log);
  }
};

}  // namespace

int main(int argc, char** argv) {
  std::string address_file;
  ff::DaemonSpec<StoreConfig> spec;
  spec.name = "hfreduce-store";
  spec.description = "hfreduce-store: rendezvous store and replica quorums";
  spec.add_flags = [&](CLI::App& app, ff::DaemonFlags& flags) {
    app.add_option_function<std::string>(
        "--listen",
        [&flags](const std::string& v) { flags.overrides.push_back("store.listen=" + v); },
        "host:port to serve on (port 0: any free one); --set store.listen=...");
    app.add_option_function<std::string>(
        "--stores",
        [&flags](const std::string& v) { flags.overrides.push_back("store.stores=" + v); },
        "every server of the quorum service (host:port,...), told to each quorum's members");
    app.add_option("--address-file", address_file, "also write the address served on to FILE");
  };
  spec.serve = [&](StoreConfig& config, ff::DaemonContext& context) -> ff::Status {
    auto server = ff::hfreduce::StoreServer::Start(config.store.listen);
    if (!server.ok()) return server.status();
    const std::string& address = (*server)->address();
    if (!config.store.stores.empty()) (*server)->SetStores(config.store.stores);
    if (!address_file.empty()) {
      FF_RETURN_IF_ERROR(ff::WriteFileAtomically(address_file, address + "\n"));
    }
    FF_RETURN_IF_ERROR(context.Ready({{"rpc", address}}));
    std::printf("hfreduce-store listening on %s\n", address.c_str());
    std::fflush(stdout);
    context.WaitForShutdown();
    return ff::Status::Ok();
  };
  return ff::RunDaemon(argc, argv, spec);
}
