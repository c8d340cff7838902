// A real etcd cluster for tests: N members of Debian's etcd (etcd-server) on free loopback ports,
// data in a TempDir, each member killed and started again at will.
//
//   test::EtcdCluster etcd(dir, 3);
//   ASSERT_TRUE(etcd.Start());
//   auto client = etcd::Client::Make({.endpoints = etcd.endpoints()});
//   etcd.Kill(0); ... ASSERT_TRUE(etcd.StartMember(0));
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/etcd.h"
#include "common/net.h"
#include "tests/support/subprocess.h"

namespace ff::test {

class EtcdCluster {
 public:
  EtcdCluster(const TempDir& dir, int members) : dir_(dir) {
    for (int i = 0; i < members; ++i) {
      Member m;
      m.name = "etcd" + std::to_string(i);
      m.client_port = DistinctFreePort();
      m.peer_port = DistinctFreePort();
      members_.push_back(std::move(m));
    }
  }

  // Starts every member and waits until the cluster has a leader and serves writes.
  bool Start() {
    for (std::size_t i = 0; i < members_.size(); ++i) {
      if (!Launch(i)) return false;
    }
    return WaitHealthy();
  }

  // Starts member `i` again (after Kill / Stop) with its data; waits for it to answer.
  bool StartMember(std::size_t i) { return Launch(i) && WaitMember(i); }

  void Kill(std::size_t i) { Signal(i, SIGKILL); }
  void Stop(std::size_t i) { Signal(i, SIGTERM); }
  // SIGSTOP / SIGCONT: a member that hangs without dying.
  void Pause(std::size_t i) { members_[i].proc->Signal(SIGSTOP); }
  void Resume(std::size_t i) { members_[i].proc->Signal(SIGCONT); }

  std::vector<std::string> endpoints() const {
    std::vector<std::string> out;
    for (const Member& m : members_)
      out.push_back("127.0.0.1:" + std::to_string(m.client_port));
    return out;
  }
  std::string endpoint(std::size_t i) const {
    return "127.0.0.1:" + std::to_string(members_[i].client_port);
  }
  std::string EndpointList() const {
    std::string out;
    for (const std::string& e : endpoints())
      out += (out.empty() ? "" : ",") + e;
    return out;
  }
  std::size_t size() const { return members_.size(); }

  // Until a write goes through (a quorum with a leader), up to `timeout`.
  bool WaitHealthy(std::chrono::milliseconds timeout = std::chrono::seconds(30)) {
    auto client = etcd::Client::Make({.endpoints = endpoints()});
    if (!client.ok()) return false;
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    Status last;
    while (std::chrono::steady_clock::now() < deadline) {
      auto put = (*client)->Put("/test/health", "ok");
      if (put.ok()) return true;
      last = put.status();
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    ADD_FAILURE() << "etcd cluster not healthy: " << last;
    return false;
  }

 private:
  // A free port none of the members has (a port just found free may be found again).
  int DistinctFreePort() {
    for (;;) {
      const int port = *FindFreePort();
      if (std::find(taken_.begin(), taken_.end(), port) == taken_.end()) {
        taken_.push_back(port);
        return port;
      }
    }
  }
  std::vector<int> taken_;
  // Debian's etcd-server, found on PATH (as the deploy scripts find it).
  static std::string EtcdBinary() {
    const char* path = std::getenv("PATH");
    std::string dirs = path ? path : "/usr/bin";
    std::size_t start = 0;
    while (start <= dirs.size()) {
      std::size_t colon = dirs.find(':', start);
      if (colon == std::string::npos) colon = dirs.size();
      const std::string candidate = dirs.substr(start, colon - start) + "/etcd";
      if (access(candidate.c_str(), X_OK) == 0) return candidate;
      start = colon + 1;
    }
    ADD_FAILURE() << "no etcd on PATH: deploy/install-deps.sh installs etcd-server";
    return "/usr/bin/etcd";
  }

  struct Member {
    std::string name;
    int client_port = 0, peer_port = 0;
    std::unique_ptr<Subprocess> proc;
  };

  bool Launch(std::size_t i) {
    Member& m = members_[i];
    std::string initial;
    for (const Member& o : members_) {
      initial += (initial.empty() ? "" : ",") + o.name +
                 "=http://127.0.0.1:" + std::to_string(o.peer_port);
    }
    const std::string client_url = "http://127.0.0.1:" + std::to_string(m.client_port);
    const std::string peer_url = "http://127.0.0.1:" + std::to_string(m.peer_port);
    // Elections in about a second (the defaults are 100 ms heartbeats and a 1 s election
    // timeout); --max-txn-ops and --pre-vote as deploy/ configures them.
    std::vector<std::string> argv = {EtcdBinary(),
                                     "--name=" + m.name,
                                     "--data-dir=" + dir_.File(m.name),
                                     "--listen-client-urls=" + client_url,
                                     "--advertise-client-urls=" + client_url,
                                     "--listen-peer-urls=" + peer_url,
                                     "--initial-advertise-peer-urls=" + peer_url,
                                     "--initial-cluster=" + initial,
                                     "--initial-cluster-state=new",
                                     "--initial-cluster-token=fireflyer-test",
                                     "--max-txn-ops=1024",
                                     "--pre-vote=true",
                                     "--logger=zap",
                                     "--log-level=warn"};
    Subprocess::Options options;
    options.output_dir = dir_.path();
    auto proc = Subprocess::Start(argv, options);
    EXPECT_TRUE(proc.ok()) << proc.status();
    if (!proc.ok()) return false;
    m.proc = std::make_unique<Subprocess>(std::move(*proc));
    return true;
  }

  bool WaitMember(std::size_t i) {
    auto client = etcd::Client::Make({.endpoints = {endpoint(i)}});
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (std::chrono::steady_clock::now() < deadline) {
      auto st = (*client)->Members();
      if (st[0].errors.empty() && st[0].leader != 0) return true;
      if (members_[i].proc->Wait(std::chrono::milliseconds(0)).has_value()) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    ADD_FAILURE() << members_[i].name << " did not come back: " << members_[i].proc->Stderr();
    return false;
  }

  void Signal(std::size_t i, int sig) {
    members_[i].proc->Signal(sig);
    members_[i].proc->Wait(std::chrono::seconds(10));
  }

  const TempDir& dir_;
  std::vector<Member> members_;
};

}  // namespace ff::test
