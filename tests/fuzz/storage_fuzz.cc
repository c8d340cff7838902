// Fuzz target: fs3-storage's request handlers (Write, WriteStream, Read, ReadStream,
// QueryVersion, DumpMeta, SyncDone, Extent, SpaceInfo) as raw request bytes through the real
// gRPC server (grpc_fuzz.h gives the input format). The cluster is real and in this process: an
// fs3-mgmtd and two storage services on loopback, one target each, in one chain of two (16 KiB
// chunks), so writes are forwarded from head to tail as in production. A call's flags pick the
// service it goes to; forged chain traffic (forwarded writes, full replaces, SyncDone) is part of
// the input.
//
// After each input, on both targets: every chunk record is well formed (pending is none or
// committed + 1, lengths within the chunk) and every committed chunk reads back whole with the
// CRC32C its record holds (never DATA_LOSS or INTERNAL). A fresh cluster every 2048 inputs.
#include <spdlog/spdlog.h>

#include <memory>
#include <thread>

#include "fs3/crc32c.h"
#include "grpc_fuzz.h"
#include "mgmtd.h"
#include "persistent_fixture.h"
#include "storage_service.h"

namespace {

using namespace ff;
using namespace ff::fs3;
using namespace std::chrono_literals;

constexpr uint64_t kChunk = 16 * 1024;
constexpr int kServices = 2;

const std::vector<std::string> kMethods = {
    "/fs3rpc.Storage/Write",      "/fs3rpc.Storage/WriteStream",  "/fs3rpc.Storage/Read",
    "/fs3rpc.Storage/ReadStream", "/fs3rpc.Storage/QueryVersion", "/fs3rpc.Storage/DumpMeta",
    "/fs3rpc.Storage/SyncDone",   "/fs3rpc.Storage/Extent",       "/fs3rpc.Storage/SpaceInfo"};

uint64_t TargetOf(int service) {
  return 11 + 10 * service;
}  // 11, 21

struct Fixture {
  std::string dir;
  std::unique_ptr<Mgmtd> mgmtd;
  std::unique_ptr<RpcServer> mgmtd_server;
  std::unique_ptr<StorageService> storage[kServices];
  std::unique_ptr<RpcServer> storage_server[kServices];
  std::shared_ptr<grpc::Channel> channel[kServices];
  int inputs = 0;

  void Stop() {
    for (int i = 0; i < kServices; ++i) {
      if (storage[i]) storage[i]->Stop();
      storage_server[i].reset();
      storage[i].reset();
      channel[i].reset();
    }
    if (mgmtd) mgmtd->Stop();
    mgmtd_server.reset();
    mgmtd.reset();
  }

  fs3rpc::RoutingInfo Routing() {
    fs3rpc::RoutingInfo info;
    auto ch = mgmtd_server->InProcessChannel();
    fuzz::Call(ch.get(), "/fs3rpc.Mgmtd/GetRouting", fs3rpc::GetRoutingRequest{}, &info);
    return info;
  }

  bool AllServing() {
    fs3rpc::RoutingInfo r = Routing();
    if (r.chains_size() == 0) return false;
    for (const auto& c : r.chains()) {
      for (const auto& t : c.targets()) {
        if (t.state() != "serving") return false;
      }
    }
    return true;
  }

  template <typename F>
  void WaitFor(F done, const char* what) {
    const auto deadline = std::chrono::steady_clock::now() + 30s;
    while (!done()) {
      if (std::chrono::steady_clock::now() > deadline) fuzz::Fail(std::string("setup: ") + what);
      std::this_thread::sleep_for(20ms);
    }
  }

  void Reset() {
    Stop();
    if (!dir.empty()) std::filesystem::remove_all(dir);
    dir = fuzz::MakeScratchDir("fs3-storage-fuzz");
    MgmtdOptions mo;
    mo.data_dir = dir + "/mgmtd";
    mo.check_interval_ms = 50;
    auto m = Mgmtd::Create(mo, nullptr);
    if (!m.ok()) fuzz::Fail("cannot open fs3-mgmtd: " + m.status().message());
    mgmtd = std::move(*m);
    auto ms = RpcServer::Start({}, {mgmtd.get()});
    if (!ms.ok()) fuzz::Fail("cannot serve fs3-mgmtd: " + ms.status().message());
    mgmtd_server = std::move(*ms);
    mgmtd->Start();
    for (int i = 0; i < kServices; ++i) {
      StorageOptions so;
      so.node = "s" + std::to_string(i);
      so.mgmtd = mgmtd_server->address();
      so.forward_timeout_ms = 2000;
      so.targets.push_back({TargetOf(i), dir + "/t" + std::to_string(TargetOf(i))});
      auto s = StorageService::Create(so, nullptr);
      if (!s.ok()) fuzz::Fail("cannot open fs3-storage: " + s.status().message());
      storage[i] = std::move(*s);
      auto ss = RpcServer::Start({}, {storage[i].get()});
      if (!ss.ok()) fuzz::Fail("cannot serve fs3-storage: " + ss.status().message());
      storage_server[i] = std::move(*ss);
      storage[i]->Start(storage_server[i]->address());
      channel[i] = storage_server[i]->InProcessChannel();
    }
    WaitFor(
        [&] {
          int up = 0;
          const fs3rpc::RoutingInfo r = Routing();
          for (const auto& n : r.nodes())
            up += n.state() == "up";
          return up == kServices;
        },
        "the storage services did not register");
    fs3rpc::InitRequest init;
    init.set_chunk_size(kChunk);
    init.set_replication(kServices);
    fs3rpc::RoutingInfo info;
    auto ch = mgmtd_server->InProcessChannel();
    grpc::Status st = fuzz::Call(ch.get(), "/fs3rpc.Mgmtd/InitCluster", init, &info);
    if (!st.ok()) fuzz::Fail("InitCluster: " + st.error_message());
    WaitFor([&] { return AllServing(); }, "the chain did not start serving");
  }
};

Fixture& Get() {
  return ff::fuzz::PersistentFixture<Fixture>(2048);
}

std::string Name(const fs3rpc::ChunkMetaRecord& r) {
  return "chunk " + std::to_string(r.id().inode()) + "/" + std::to_string(r.id().index());
}

void CheckTarget(grpc::Channel* channel, uint64_t target) {
  fs3rpc::DumpMetaRequest dump;
  dump.set_target(target);
  fs3rpc::DumpMetaResponse meta;
  grpc::Status st = fuzz::Call(channel, kMethods[5], dump, &meta);
  if (!st.ok()) {
    if (st.error_code() == grpc::StatusCode::INTERNAL ||
        st.error_code() == grpc::StatusCode::DATA_LOSS)
      fuzz::Fail("DumpMeta of target " + std::to_string(target) + ": " + st.error_message());
    return;  // not serving now (fenced, syncing): nothing to check
  }
  for (const fs3rpc::ChunkMetaRecord& r : meta.chunks()) {
    if (r.pending_version() != 0 && r.pending_version() != r.committed_version() + 1)
      fuzz::Fail(Name(r) + ": pending version " + std::to_string(r.pending_version()) +
                 " after committed " + std::to_string(r.committed_version()));
    if (r.length() > kChunk || r.pending_length() > kChunk)
      fuzz::Fail(Name(r) + ": longer than a chunk (" + std::to_string(r.length()) + ", pending " +
                 std::to_string(r.pending_length()) + ")");
    if (r.committed_version() == 0) continue;
    fs3rpc::ReadRequest read;
    read.set_target(target);
    *read.mutable_chunk() = r.id();
    read.set_length(static_cast<uint32_t>(kChunk));
    fs3rpc::ReadResponse data;
    st = fuzz::Call(channel, kMethods[2], read, &data);
    if (!st.ok()) {
      if (st.error_code() == grpc::StatusCode::INTERNAL ||
          st.error_code() == grpc::StatusCode::DATA_LOSS)
        fuzz::Fail(Name(r) + " on target " + std::to_string(target) + ": " + st.error_message());
      continue;
    }
    if (data.version() != r.committed_version()) continue;  // a pending one was committed since
    if (data.data().size() != r.length() || Crc32c(data.data()) != r.crc32c())
      fuzz::Fail(Name(r) + " on target " + std::to_string(target) + " read " +
                 std::to_string(data.data().size()) + " bytes that do not match its record (" +
                 std::to_string(r.length()) + " bytes)");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Fixture& f = Get();
  for (const fuzz::FuzzCall& c : fuzz::SplitCalls(data, size)) {
    fuzz::Invoke(f.channel[c.flags % kServices].get(), kMethods[c.method % kMethods.size()],
                 c.messages, {}, 100ms);
  }
  for (int i = 0; i < kServices; ++i)
    CheckTarget(f.channel[i].get(), TargetOf(i));
  return 0;
}

extern "C" void FuzzWriteSeeds(const char* dir) {
  using fuzz::FuzzCall;
  auto write = [](uint64_t target, uint64_t inode, uint32_t index, uint32_t offset,
                  std::string data, uint64_t request_id) {
    fs3rpc::WriteRequest w;
    w.set_request_id(request_id);
    w.set_chain(1);
    w.set_chain_version(1);
    w.set_target(target);
    w.mutable_chunk()->set_inode(inode);
    w.mutable_chunk()->set_index(index);
    w.set_offset(offset);
    w.set_data(std::move(data));
    return w;
  };
  auto read = [](uint64_t target, uint64_t inode, uint32_t index) {
    fs3rpc::ReadRequest r;
    r.set_target(target);
    r.mutable_chunk()->set_inode(inode);
    r.mutable_chunk()->set_index(index);
    r.set_length(kChunk);
    return r.SerializeAsString();
  };
  const uint64_t head = TargetOf(0), tail = TargetOf(1);
  // The head is the first target of the chain: service 0's (InitCluster takes nodes in order).
  fs3rpc::WriteRequest w1 = write(head, 7, 0, 0, std::string(1000, 'a'), 1);
  fs3rpc::WriteRequest w2 = write(head, 7, 0, 500, std::string(3000, 'b'), 2);
  fs3rpc::WriteRequest w3 = write(head, 7, 1, 0, std::string(100, 'c'), 3);
  fs3rpc::QueryVersionRequest q;
  q.set_target(tail);
  q.mutable_chunk()->set_inode(7);
  fs3rpc::ExtentRequest last;
  last.set_target(head);
  last.set_inode(7);
  fs3rpc::SpaceInfoRequest space;
  space.set_target(tail);
  fuzz::WriteSeed(dir, "writes.bin",
                  {{0, 0, {w1.SerializeAsString()}},
                   {0, 0, {w2.SerializeAsString()}},
                   {0, 0, {w2.SerializeAsString()}},  // a retry: applied once
                   {0, 0, {w3.SerializeAsString()}},
                   {2, 0, {read(head, 7, 0)}},
                   {2, 1, {read(tail, 7, 0)}},
                   {4, 1, {q.SerializeAsString()}},
                   {7, 0, {last.SerializeAsString()}},
                   {8, 1, {space.SerializeAsString()}}});
  // A streamed write (header first, then pieces) and a streamed read.
  fs3rpc::WritePiece first, piece;
  *first.mutable_header() = write(head, 8, 0, 0, "", 4);
  piece.set_data(std::string(4096, 'd'));
  fuzz::WriteSeed(
      dir, "stream.bin",
      {{1, 0, {first.SerializeAsString(), piece.SerializeAsString(), piece.SerializeAsString()}},
       {3, 1, {read(tail, 8, 0)}}});
  // Truncate and remove travel the chain too; forged chain traffic at the tail.
  fs3rpc::WriteRequest cut = write(head, 7, 0, 0, "", 5);
  cut.set_truncate(true);
  cut.set_offset(200);
  fs3rpc::WriteRequest remove = write(head, 7, 1, 0, "", 6);
  remove.set_remove(true);
  fs3rpc::WriteRequest forged = write(tail, 7, 0, 0, std::string(kChunk, 'f'), 7);
  forged.set_forwarded(true);
  forged.set_full_replace(true);
  forged.set_update_version(9);
  fs3rpc::SyncDoneRequest done;
  done.set_target(tail);
  done.set_chain_version(1);
  fs3rpc::DumpMetaRequest dump;
  dump.set_target(tail);
  fuzz::WriteSeed(dir, "chain.bin",
                  {{0, 0, {w1.SerializeAsString()}},
                   {0, 0, {cut.SerializeAsString()}},
                   {0, 0, {w3.SerializeAsString()}},
                   {0, 0, {remove.SerializeAsString()}},
                   {0, 1, {forged.SerializeAsString()}},
                   {6, 1, {done.SerializeAsString()}},
                   {5, 1, {dump.SerializeAsString()}}});
}
