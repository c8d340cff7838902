// The fs3 test fabric: one builder for the integration tests' clusters of real processes on
// loopback (fs3-mgmtd, storage services with their targets, fs3-meta, fs3-fuse mounts), like
// 3FS's test fabric, over test::Daemons (daemons.h): each daemon binds a free port (port 0) and
// reports it in its ready file; its config is then pinned to that port, so a daemon killed and
// started again comes back at the same address (clients and the routing table keep working). Names:
// "mgmtd", "s0", "s1", ... (a storage service and its node name), "meta", "fuse-<mount>"; service
// i's targets have ids (i + 1) * 10 + t (t = 1, 2, ...) and live in <dir>/s<i>-t<t>.
//
// Highly available (options.ha): a three-member etcd cluster, fs3-mgmtd replicas "mgmtd",
// "mgmtd2", ... and fs3-meta servers "meta", "meta2", ... on the etcd engine; every client is
// given all their addresses (mgmtd_address_ and meta_address_ are comma-separated lists).
//
// Header-only: the including test target defines FF_FS3_MGMTD_PATH, FF_FS3_STORAGE_PATH,
// FF_FS3_META_PATH (and FF_FS3_FUSE_PATH for mounts).
#pragma once

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "common/replicas.h"
#include "common/rpc_client.h"
#include "fs3/meta_client.h"
#include "fs3/proto/meta.grpc.pb.h"
#include "fs3/proto/mgmtd.grpc.pb.h"
#include "tests/support/daemons.h"
#include "tests/support/etcd_cluster.h"
#include "tests/support/subprocess.h"
#include "tests/support/wait.h"

namespace ff::test {

struct Fs3ClusterOptions {
  int services = 2;
  int targets_per_service = 1;
  uint32_t replication = 2;
  uint64_t chunk_size = 256 * 1024;
  bool meta = true;      // fs3-meta on the cluster
  bool metrics = false;  // each daemon serves /metrics (its address: ReadyField(name, "metrics"))
  std::string mgmtd_keys = "lease_ms = 1500\ncheck_interval_ms = 100\nrestart_grace_ms = 10000\n";
  std::string storage_keys;  // more [storage] keys
  std::string meta_keys = "gc_interval_ms = 200\n";
  bool ha = false;  // etcd, several fs3-mgmtd and fs3-meta (below)
  int mgmtd_replicas = 2;
  int meta_servers = 2;
};

class Fs3Cluster {
 public:
  // Makes the folder; Start() starts the daemons (a test may prepare target folders between).
  explicit Fs3Cluster(Fs3ClusterOptions options = {})
      : options_(std::move(options)), daemons_(dir_, options_.metrics) {
    chmod(dir_.path().c_str(), 0755);  // other users reach mounts below it
  }

  ~Fs3Cluster() {
    for (auto& [name, p] : daemons_.procs()) {
      if (name.rfind("fuse-", 0) == 0 && p->running()) {
        p->Signal(SIGTERM);
        p->Wait(std::chrono::seconds(10));
      }
    }
    for (const std::string& m : mounts_)
      (void)!system(("fusermount3 -u -z " + m + " 2>/dev/null").c_str());
  }

  static uint64_t TargetId(int service, int t) {
    return static_cast<uint64_t>(service + 1) * 10 + t;
  }
  static std::string StorageName(int service) { return "s" + std::to_string(service); }

  // mgmtd, the storage services, the chains (InitCluster), then fs3-meta. ASSERTs inside: check
  // HasFatalFailure() after it.
  void Start() {
    if (options_.ha) {
      etcd_ = std::make_unique<EtcdCluster>(dir_, 3);
      ASSERT_TRUE(etcd_->Start());
      std::string endpoints;
      for (const std::string& e : etcd_->endpoints())
        endpoints += (endpoints.empty() ? "\"" : ", \"") + e + "\"";
      etcd_keys_ = "engine = \"etcd\"\netcd_endpoints = [" + endpoints + "]\n";
      mgmtd_address_.clear();
      for (int i = 0; i < options_.mgmtd_replicas; ++i) {
        const std::string name = MgmtdName(i);
        WriteConfig(name, "[mgmtd]\n" + etcd_keys_ + "election_ttl_s = 2\n" + options_.mgmtd_keys);
        ASSERT_TRUE(daemons_.Start(name, FF_FS3_MGMTD_PATH));
        mgmtd_address_ += (i == 0 ? "" : ",") + ReadyField(name, "rpc");
      }
    } else {
      WriteConfig("mgmtd",
                  "[mgmtd]\ndata_dir = \"" + dir_.File("mgmtd") + "\"\n" + options_.mgmtd_keys);
      ASSERT_TRUE(StartMgmtd());
      mgmtd_address_ = ReadyField("mgmtd", "rpc");
    }
    for (int i = 0; i < options_.services; ++i) {
      std::string keys = "[storage]\nnode = \"" + StorageName(i) + "\"\nmgmtd = \"" +
                         mgmtd_address_ + "\"\n" + options_.storage_keys;
      for (int t = 1; t <= options_.targets_per_service; ++t) {
        keys += "[[storage.targets]]\nid = " + std::to_string(TargetId(i, t)) + "\npath = \"" +
                dir_.File(StorageName(i) + "-t" + std::to_string(t)) + "\"\n";
      }
      WriteConfig(StorageName(i), keys);
      ASSERT_TRUE(StartStorage(i));
    }
    if (options_.services > 0) {
      ASSERT_TRUE(WaitUntil([&] { return CountNodes("up") == options_.services; },
                            std::chrono::seconds(20)))
          << "the storage services did not register";
      Replicas<fs3rpc::Mgmtd> mgmtd(mgmtd_address_);
      fs3rpc::InitRequest init;
      init.set_chunk_size(options_.chunk_size);
      init.set_replication(options_.replication);
      fs3rpc::RoutingInfo info;
      Status st = CallRpc("InitCluster", CallOptions{}, [&](grpc::ClientContext* c) {
        return mgmtd.Attempt([&](fs3rpc::Mgmtd::Stub& s) { return s.InitCluster(c, init, &info); });
      });
      ASSERT_TRUE(st.ok()) << st;
      ASSERT_TRUE(WaitUntil([&] { return AllServing(); }, std::chrono::seconds(20)))
          << "the chains did not start serving";
    }
    if (options_.meta) {
      const int servers = options_.ha ? options_.meta_servers : 1;
      meta_address_.clear();
      for (int i = 0; i < servers; ++i) {
        const std::string name = MetaName(i);
        WriteConfig(name, "[meta]\n" +
                              (options_.ha ? etcd_keys_ + "name = \"" + name + "\"\n"
                                           : "data_dir = \"" + dir_.File("meta") + "\"\n") +
                              "chunk_size = " + std::to_string(options_.chunk_size) +
                              "\nmgmtd = \"" + mgmtd_address_ + "\"\n" + options_.meta_keys);
        ASSERT_TRUE(daemons_.Start(name, FF_FS3_META_PATH));
        meta_address_ += (i == 0 ? "" : ",") + ReadyField(name, "rpc");
      }
      WriteFile(dir_.File("fuse.toml"),
                std::string(options_.metrics ? "[metrics]\nlisten = \"127.0.0.1:0\"\n"
                                             : "[metrics]\nenabled = false\n") +
                    "[fuse]\nmeta = \"" + meta_address_ + "\"\nmgmtd = \"" + mgmtd_address_ +
                    "\"\n");
    }
  }

  // Starts (again) a daemon from its config; false, with the reason in the test's output, when it
  // exits or does not get ready.
  bool StartMgmtd(int i = 0) { return daemons_.Start(MgmtdName(i), FF_FS3_MGMTD_PATH); }
  bool StartMeta(int i) { return daemons_.Start(MetaName(i), FF_FS3_META_PATH); }
  static std::string MgmtdName(int i) { return i == 0 ? "mgmtd" : "mgmtd" + std::to_string(i + 1); }
  static std::string MetaName(int i) { return i == 0 ? "meta" : "meta" + std::to_string(i + 1); }
  // The fs3-mgmtd replica that leads now (its daemon name), "" if none answers as leader.
  std::string MgmtdLeader() {
    for (int i = 0; i < (options_.ha ? options_.mgmtd_replicas : 1); ++i) {
      const std::string name = MgmtdName(i);
      if (!daemons_.has(name) || !daemons_.proc(name).running()) continue;
      auto stub = fs3rpc::Mgmtd::NewStub(MakeChannel(ReadyField(name, "rpc")));
      fs3rpc::RoutingInfo info;
      grpc::ClientContext c;
      c.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(2));
      if (stub->GetRouting(&c, {}, &info).ok()) return name;
    }
    return "";
  }
  EtcdCluster* etcd() { return etcd_.get(); }
  bool StartStorage(int i) { return daemons_.Start(StorageName(i), FF_FS3_STORAGE_PATH); }
  bool StartMeta() { return daemons_.Start("meta", FF_FS3_META_PATH); }

#ifdef FF_FS3_FUSE_PATH
  // A new fs3-fuse mount at <dir>/<name>; returns its path.
  std::string Mount(const std::string& name, const std::vector<std::string>& extra = {}) {
    const std::string path = dir_.File(name);
    std::filesystem::create_directories(path);
    std::vector<std::string> argv = {FF_FS3_FUSE_PATH, path, "--config", dir_.File("fuse.toml")};
    argv.insert(argv.end(), extra.begin(), extra.end());
    EXPECT_TRUE(daemons_.Launch("fuse-" + name, argv));
    mounts_.push_back(path);
    return path;
  }
#endif

  void Kill(const std::string& name) {
    daemons_.Kill(name);
  }
  Subprocess& proc(const std::string& name) {
    return daemons_.proc(name);
  }
  bool has(const std::string& name) const {
    return daemons_.has(name);
  }
  const std::map<std::string, std::unique_ptr<Subprocess>>& procs() const {
    return daemons_.procs();
  }
  // What daemon `name` wrote to stderr since its first start, restarts included.
  std::string Logs(const std::string& name) const {
    return daemons_.Log(name);
  }

  // What a daemon's ready file says under `key` ("rpc", "metrics", "mountpoint").
  std::string ReadyField(const std::string& name, const std::string& key) {
    return daemons_.ReadyField(name, key);
  }

  fs3rpc::RoutingInfo Routing() {
    Replicas<fs3rpc::Mgmtd> mgmtd(mgmtd_address_);
    fs3rpc::RoutingInfo info;
    (void)CallRpc(
        "GetRouting", CallOptions::Idempotent(std::chrono::seconds(2)),
        [&](grpc::ClientContext* c) {
          return mgmtd.Attempt([&](fs3rpc::Mgmtd::Stub& s) { return s.GetRouting(c, {}, &info); });
        });
    return info;
  }
  int CountNodes(const std::string& state) {
    int n = 0;
    const fs3rpc::RoutingInfo r = Routing();
    for (const auto& node : r.nodes())
      n += node.state() == state;
    return n;
  }
  bool AllServing() {
    const fs3rpc::RoutingInfo r = Routing();
    if (r.chains_size() == 0) return false;
    for (const auto& c : r.chains()) {
      for (const auto& t : c.targets()) {
        if (t.state() != "serving") return false;
      }
    }
    return true;
  }
  // fs3-meta's fsck (with storage): the problems found.
  std::vector<std::string> Fsck(bool repair = false) {
    fs3::MetaClient meta(fs3::MetaClientOptions{.address = meta_address_, .frames = false});
    fs3rpc::FsckRequest r;
    r.set_repair(repair);
    fs3rpc::FsckReply out;
    Status st = meta.Fsck(r, &out, std::chrono::seconds(30));
    EXPECT_TRUE(st.ok()) << st;
    return {out.problems().begin(), out.problems().end()};
  }

  const Fs3ClusterOptions& options() const {
    return options_;
  }

  TempDir dir_;
  std::string mgmtd_address_, meta_address_;

 private:
  void WriteConfig(const std::string& name, const std::string& section) {
    daemons_.Write(name, section);
  }

  const Fs3ClusterOptions options_;
  std::unique_ptr<EtcdCluster> etcd_;  // options.ha
  std::string etcd_keys_;              // the engine keys of mgmtd's and meta's configs
  Daemons daemons_;
  std::vector<std::string> mounts_;
};

#ifdef FF_FS3_FUSE_PATH
// A cluster started with one mount at <dir>/mnt (mount_), for a FUSE suite that shares it across
// its tests (each working in its own folder). ASSERTs inside: check HasFatalFailure() after it.
class MountedFs3Cluster : public Fs3Cluster {
 public:
  explicit MountedFs3Cluster(Fs3ClusterOptions options) : Fs3Cluster(std::move(options)) {
    Start();
    mount_ = Mount("mnt");
  }
  std::string mount_;
};

// What the FUSE suites run on: chunks of `chunk_size`, a collector every 200 ms, and a dead
// mount's lease over in 3 s.
// FF_FS3_ENGINE=etcd in the environment: the POSIX suites run on the etcd engine (etcd members,
// two fs3-mgmtd replicas, two fs3-meta servers: Fs3ClusterOptions::ha) rather than RocksDB.
inline bool SuitesOnEtcd() {
  const char* engine = std::getenv("FF_FS3_ENGINE");
  return engine != nullptr && std::string(engine) == "etcd";
}

inline Fs3ClusterOptions FuseSuiteOptions(uint64_t chunk_size) {
  Fs3ClusterOptions o;
  o.chunk_size = chunk_size;
  o.meta_keys = "gc_interval_ms = 200\nclient_lease_s = 3\n";
  o.ha = SuitesOnEtcd();
  return o;
}
#endif

}  // namespace ff::test
