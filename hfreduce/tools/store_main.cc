// hfreduce-store: the rendezvous store and the replica quorums of fault-tolerant jobs
// (hfreduce/store.h, hfreduce/quorum.h), served apart from the ranks so that it outlives any of
// them: what a job outside HAI-Platform runs once (inside it, hai-server serves the same).
//
//   hfreduce-store [--listen 127.0.0.1:0] [--address-file FILE] [--stores A,B,...]
//
// --stores lists every server a job's groups may use (this one among them): each quorum tells
// them to its members, which then also try the servers they were not given at their start.
//
// Prints "hfreduce-store listening on HOST:PORT" (and writes HOST:PORT to --address-file) once it
// serves; runs until SIGTERM or SIGINT.
#include <signal.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <fstream>
#include <string>

#include "hfreduce/store.h"

int main(int argc, char** argv) {
  CLI::App app{"hfreduce-store: rendezvous store and replica quorums"};
  std::string listen = "127.0.0.1:0";
  std::string address_file;
  app.add_option("--listen", listen, "host:port to serve on (port 0: any free one)");
  app.add_option("--address-file", address_file, "write the address served on to this file");
  std::string stores;
  app.add_option("--stores", stores,
                 "every server of the quorum service (host:port,...), told to each quorum's "
                 "members");
  CLI11_PARSE(app, argc, argv);

  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);  // before any thread starts: they inherit it

  auto server = ff::hfreduce::StoreServer::Start(listen);
  if (!server.ok()) {
    std::fprintf(stderr, "hfreduce-store: %s\n", server.status().ToString().c_str());
    return 1;
  }
  const std::string& address = (*server)->address();
  if (!stores.empty()) (*server)->SetStores(stores);
  if (!address_file.empty()) {
    std::ofstream(address_file + ".tmp") << address << "\n";
    if (std::rename((address_file + ".tmp").c_str(), address_file.c_str()) != 0) {
      std::fprintf(stderr, "hfreduce-store: cannot write %s\n", address_file.c_str());
      return 1;
    }
  }
  std::printf("hfreduce-store listening on %s\n", address.c_str());
  std::fflush(stdout);
  int sig = 0;
  sigwait(&signals, &sig);
  return 0;
}
