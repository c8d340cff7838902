// Fuzz target: fs3-mgmtd's request handlers (Heartbeat, GetRouting, InitCluster,
// SetTargetOffline, AddTarget) as raw request bytes through its real gRPC server, over its
// RocksDB in a temporary directory (grpc_fuzz.h gives the input format). After each input the
// manager's chain pass runs, and:
//   - the routing table is well formed: every chain target is a known target that names that
//     chain, no target is in two chains, states are ones the code knows, the version never goes
//     back;
//   - every 32 inputs the manager is reopened from its directory, and the routing it loads (the
//     version, every chain with its version and targets in order, every target's chain) is what
//     it had acknowledged before.
// A fresh directory every 1024 inputs; leases are short (500 ms) so that nodes also expire.
#include <spdlog/spdlog.h>

#include <memory>
#include <set>

#include "grpc_fuzz.h"
#include "mgmtd.h"
#include "persistent_fixture.h"

namespace {

using namespace ff;
using namespace ff::fs3;

const std::vector<std::string> kMethods = {
    "/fs3rpc.Mgmtd/Heartbeat", "/fs3rpc.Mgmtd/GetRouting", "/fs3rpc.Mgmtd/InitCluster",
    "/fs3rpc.Mgmtd/SetTargetOffline", "/fs3rpc.Mgmtd/AddTarget"};

struct Fixture {
  std::string dir;
  std::unique_ptr<Mgmtd> mgmtd;
  std::unique_ptr<RpcServer> server;
  std::shared_ptr<grpc::Channel> channel;
  uint64_t version = 0;
  int inputs = 0;

  void Open() {
    server.reset();
    mgmtd.reset();
    MgmtdOptions o;
    o.data_dir = dir;
    o.lease_ms = 500;
    o.restart_grace_ms = 500;
    auto created = Mgmtd::Create(o, nullptr);
    if (!created.ok()) fuzz::Fail("cannot open fs3-mgmtd: " + created.status().message());
    mgmtd = std::move(*created);
    auto started = RpcServer::Start({}, {mgmtd.get()});
    if (!started.ok()) fuzz::Fail("cannot serve fs3-mgmtd: " + started.status().message());
    server = std::move(*started);
    channel = server->InProcessChannel();
  }

  void Reset() {
    server.reset();
    mgmtd.reset();
    if (!dir.empty()) std::filesystem::remove_all(dir);
    dir = fuzz::MakeScratchDir("fs3-mgmtd-fuzz");
    version = 0;
    Open();
  }

  fs3rpc::RoutingInfo Routing() {
    fs3rpc::RoutingInfo info;
    grpc::Status st = fuzz::Call(channel.get(), kMethods[1], fs3rpc::GetRoutingRequest{}, &info);
    if (!st.ok()) fuzz::Fail("GetRouting failed: " + st.error_message());
    return info;
  }
};

Fixture& Get() {
  return ff::fuzz::PersistentFixture<Fixture>(1024);
}

void CheckWellFormed(const fs3rpc::RoutingInfo& r) {
  static const std::set<std::string> kStates = {"serving", "syncing", "waiting", "lastsrv",
                                                "offline"};
  std::map<uint64_t, uint32_t> chain_of;
  for (const auto& t : r.targets())
    chain_of[t.id()] = t.chain();
  std::set<uint64_t> seen;
  for (const auto& c : r.chains()) {
    if (c.targets_size() == 0) fuzz::Fail("chain " + std::to_string(c.id()) + " has no target");
    for (const auto& t : c.targets()) {
      auto it = chain_of.find(t.target());
      if (it == chain_of.end() || it->second != c.id()) {
        fuzz::Fail("chain " + std::to_string(c.id()) + " holds target " +
                   std::to_string(t.target()) + " that does not name it");
      }
      if (!seen.insert(t.target()).second) {
        fuzz::Fail("target " + std::to_string(t.target()) + " is in two chains");
      }
      if (kStates.count(t.state()) == 0) fuzz::Fail("unknown state '" + t.state() + "'");
    }
  }
}

// What must survive a restart: the routing version, chains and the targets' chains.
std::string Durable(const fs3rpc::RoutingInfo& r) {
  std::string s = "v" + std::to_string(r.version()) + (r.initialized() ? " init" : "") + " " +
                  std::to_string(r.chunk_size()) + "x" + std::to_string(r.replication());
  for (const auto& c : r.chains()) {
    s += " | chain " + std::to_string(c.id()) + " v" + std::to_string(c.version()) + ":";
    for (const auto& t : c.targets())
      s += " " + std::to_string(t.target());
  }
  for (const auto& t : r.targets())
    s += " | target " + std::to_string(t.id()) + "@" + t.node() + " chain " +
         std::to_string(t.chain()) + (t.admin_offline() ? " admin-offline" : "");
  return s;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Fixture& f = Get();
  for (const fuzz::FuzzCall& c : fuzz::SplitCalls(data, size)) {
    fuzz::Invoke(f.channel.get(), kMethods[c.method % kMethods.size()], c.messages, {},
                 std::chrono::milliseconds(50));
  }
  f.mgmtd->Check();
  fs3rpc::RoutingInfo before = f.Routing();
  CheckWellFormed(before);
  if (before.version() < f.version) fuzz::Fail("the routing version went back");
  f.version = before.version();
  if (f.inputs % 32 == 31) {
    f.Open();
    fs3rpc::RoutingInfo after = f.Routing();
    if (Durable(after) != Durable(before)) {
      fuzz::Fail("reopened fs3-mgmtd lost what it had:\n  before: " + Durable(before) +
                 "\n  after:  " + Durable(after));
    }
  }
  return 0;
}

extern "C" void FuzzWriteSeeds(const char* dir) {
  using fuzz::FuzzCall;
  auto heartbeat = [](const std::string& node, std::vector<uint64_t> targets,
                      const std::string& local = "up-to-date") {
    fs3rpc::HeartbeatRequest h;
    h.set_node(node);
    h.set_address("127.0.0.1:1");
    for (uint64_t t : targets) {
      auto* r = h.add_targets();
      r->set_id(t);
      r->set_path("/data/" + std::to_string(t));
      r->set_local_state(local);
    }
    return FuzzCall{0, 0, {h.SerializeAsString()}};
  };
  fs3rpc::InitRequest init;
  init.set_chunk_size(1 << 20);
  init.set_replication(3);
  fs3rpc::GetRoutingRequest routing;
  fs3rpc::TargetRef ref;
  ref.set_id(21);
  fs3rpc::AddTargetRequest add;
  add.set_target(41);
  add.set_chain(1);
  const std::vector<FuzzCall> cluster = {heartbeat("s1", {11, 12}), heartbeat("s2", {21, 22}),
                                         heartbeat("s3", {31, 32})};
  std::vector<FuzzCall> calls = cluster;
  calls.push_back({2, 0, {init.SerializeAsString()}});
  calls.push_back({1, 0, {routing.SerializeAsString()}});
  fuzz::WriteSeed(dir, "init.bin", calls);
  calls.push_back({3, 0, {ref.SerializeAsString()}});
  calls.push_back(heartbeat("s2", {21, 22}, "offline"));
  calls.push_back(heartbeat("s4", {41}));
  calls.push_back({4, 0, {add.SerializeAsString()}});
  calls.push_back(heartbeat("s2", {21, 22}, "online"));
  calls.push_back({1, 0, {routing.SerializeAsString()}});
  fuzz::WriteSeed(dir, "offline-add.bin", calls);
  routing.set_known_version(1);
  routing.set_wait_ms(60000);
  fuzz::WriteSeed(dir, "long-poll.bin", {{1, 0, {routing.SerializeAsString()}}});
}
