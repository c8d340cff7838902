// Faults in one hop of fs3's data path, injected through the transport interface
// (tests/support/faulty_transport.h) rather than by killing a process: fs3-mgmtd and two storage
// services (one chain of two) run in this process on loopback with real gRPC servers, RocksDB and
// chunk files; the client and each service move chunk data through their own FaultyTransport.
// What users rely on: a retried write is applied once, a write goes through a failing or slow
// hop without an error, a replica that cannot store data fails the write with its reason and
// leaves no half-written version, reads go on past a failed transfer, and a write that commits
// after its client gave up on it still gets its file's length.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>

#include "common/rpc_client.h"
#include "common/rpc_server.h"
#include "fs3/client.h"
#include "fs3/crc32c.h"
#include "fs3/fs.h"
#include "fs3/meta_client.h"
#include "meta_service.h"
#include "mgmtd.h"
#include "storage_service.h"
#include "tests/support/faulty_transport.h"
#include "tests/support/subprocess.h"
#include "tests/support/wait.h"

namespace ff::fs3 {
namespace {

using ::testing::HasSubstr;
using namespace std::chrono_literals;
using test::FaultyTransport;

constexpr uint64_t kChunk = 64 * 1024;
constexpr int kServices = 2;

class TransportFaultTest : public ::testing::Test {
 protected:
  void SetUp() override {
    MgmtdOptions mo;
    mo.data_dir = dir_.File("mgmtd");
    mo.check_interval_ms = 50;
    mo.lease_ms = 3000;
    auto m = Mgmtd::Create(mo, nullptr);
    ASSERT_TRUE(m.ok()) << m.status();
    mgmtd_ = std::move(*m);
    auto ms = RpcServer::Start({}, {mgmtd_.get()});
    ASSERT_TRUE(ms.ok()) << ms.status();
    mgmtd_server_ = std::move(*ms);
    mgmtd_->Start();
    for (int i = 0; i < kServices; ++i) {
      StorageOptions so;
      so.node = "s" + std::to_string(i);
      so.mgmtd = mgmtd_server_->address();
      so.forward_timeout_ms = 5000;
      so.targets.push_back({Target(i), dir_.File("t" + std::to_string(i))});
      faults_[i] = std::make_shared<FaultyTransport>();
      auto s = StorageService::Create(so, nullptr, faults_[i]);
      ASSERT_TRUE(s.ok()) << s.status();
      storage_[i] = std::move(*s);
      auto ss = RpcServer::Start({}, {storage_[i].get()});
      ASSERT_TRUE(ss.ok()) << ss.status();
      storage_server_[i] = std::move(*ss);
      storage_[i]->Start(storage_server_[i]->address());
    }
    auto mgmtd = fs3rpc::Mgmtd::NewStub(MakeChannel(mgmtd_server_->address()));
    ASSERT_TRUE(test::WaitUntil([&] { return Up(*mgmtd) == kServices; }, 30s));
    fs3rpc::InitRequest init;
    init.set_chunk_size(kChunk);
    init.set_replication(kServices);
    fs3rpc::RoutingInfo info;
    grpc::ClientContext c;
    ASSERT_TRUE(mgmtd->InitCluster(&c, init, &info).ok());
    client_faults_ = std::make_shared<FaultyTransport>();
    ClientOptions co{.mgmtd = mgmtd_server_->address(),
                     .retry_timeout = 20s,
                     .rpc_timeout = 5s,
                     .transport = client_faults_};
    ASSERT_TRUE(test::WaitUntil(
        [&] {
          auto made = StorageClient::Create(co);
          if (!made.ok() || !Serving(**made)) return false;
          client_ = std::move(*made);
          return true;
        },
        30s));
    // Which service heads the chain (it forwards to the other).
    fs3rpc::GetRoutingRequest rq;
    fs3rpc::RoutingInfo r;
    grpc::ClientContext rc;
    ASSERT_TRUE(mgmtd->GetRouting(&rc, rq, &r).ok());
    ASSERT_EQ(r.chains_size(), 1);
    head_ = r.chains(0).targets(0).target() == Target(0) ? 0 : 1;
  }

  void TearDown() override {
    client_.reset();
    for (int i = 0; i < kServices; ++i) {
      if (storage_[i]) storage_[i]->Stop();
      storage_server_[i].reset();
      storage_[i].reset();
    }
    if (mgmtd_) mgmtd_->Stop();
    mgmtd_server_.reset();
  }

  static uint64_t Target(int service) { return 11 + 10 * static_cast<uint64_t>(service); }

  static int Up(fs3rpc::Mgmtd::Stub& mgmtd) {
    fs3rpc::GetRoutingRequest rq;
    fs3rpc::RoutingInfo r;
    grpc::ClientContext c;
    c.set_deadline(std::chrono::system_clock::now() + 2s);
    if (!mgmtd.GetRouting(&c, rq, &r).ok()) return 0;
    int up = 0;
    for (const auto& n : r.nodes())
      up += n.state() == "up";
    return up;
  }

  static bool Serving(StorageClient& c) {
    if (!c.RefreshRouting().ok()) return false;
    return c.Write(1, 0, "probe").ok();
  }

  // Each chunk of `inode` on service i's target: index -> (committed version, pending version,
  // CRC32C of the committed content).
  struct Held {
    uint64_t committed = 0, pending = 0;
    uint32_t crc = 0;
    bool operator==(const Held&) const = default;
  };
  std::map<uint32_t, Held> Chunks(int service, uint64_t inode) {
    auto stub = fs3rpc::Storage::NewStub(MakeChannel(storage_server_[service]->address()));
    fs3rpc::DumpMetaRequest req;
    req.set_target(Target(service));
    fs3rpc::DumpMetaResponse resp;
    grpc::ClientContext c;
    EXPECT_TRUE(stub->DumpMeta(&c, req, &resp).ok());
    std::map<uint32_t, Held> out;
    for (const auto& m : resp.chunks()) {
      if (m.id().inode() == inode)
        out[m.id().index()] = {m.committed_version(), m.pending_version(), m.crc32c()};
    }
    return out;
  }

  test::TempDir dir_;
  std::unique_ptr<Mgmtd> mgmtd_;
  std::unique_ptr<RpcServer> mgmtd_server_;
  std::unique_ptr<StorageService> storage_[kServices];
  std::unique_ptr<RpcServer> storage_server_[kServices];
  std::shared_ptr<FaultyTransport> faults_[kServices];
  std::shared_ptr<FaultyTransport> client_faults_;
  std::unique_ptr<StorageClient> client_;
  int head_ = 0;
};

TEST_F(TransportFaultTest, AWriteWhoseAnswerIsLostIsAppliedOnce) {
  const std::string data = test::RandomBytes(3 * kChunk / 2, 1);
  // The client's transfer to the head is applied, then its answer lost: the client retries with
  // the same request id, and the head answers from what it remembers.
  client_faults_->LoseWriteAnswers(1);
  ASSERT_TRUE(client_->Write(7, 0, data).ok());
  EXPECT_EQ(client_faults_->faults(), 1);
  // Both chunks once each, on both replicas: version 1, not 2.
  const Held want0{1, 0, Crc32c(std::string_view(data).substr(0, kChunk))};
  const Held want1{1, 0, Crc32c(std::string_view(data).substr(kChunk))};
  for (int s = 0; s < kServices; ++s) {
    auto held = Chunks(s, 7);
    EXPECT_EQ(held[0], want0) << "service " << s;
    EXPECT_EQ(held[1], want1) << "service " << s;
  }
  // The same along the chain: the head's forward is applied at the tail and its answer lost.
  faults_[head_]->LoseWriteAnswers(1);
  ASSERT_TRUE(client_->Write(7, 10, "again").ok());
  EXPECT_EQ(faults_[head_]->faults(), 1);
  EXPECT_EQ(Chunks(0, 7)[0], Chunks(1, 7)[0]);
  EXPECT_EQ(Chunks(1 - head_, 7)[0].committed, 2u);
  std::string want = data;
  want.replace(10, 5, "again");
  auto back = client_->Read(7, 0, static_cast<uint32_t>(data.size()));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, want);
}

TEST_F(TransportFaultTest, AWriteGoesThroughAFailingOrSlowHop) {
  // The head cannot reach the tail for its first three tries: it retries within its forward
  // timeout, and the write succeeds with both replicas committed.
  faults_[head_]->FailWrites(3);
  const std::string data = test::RandomBytes(kChunk, 2);
  ASSERT_TRUE(client_->Write(8, 0, data).ok());
  EXPECT_EQ(faults_[head_]->faults(), 3);
  EXPECT_EQ(Chunks(0, 8), Chunks(1, 8));
  EXPECT_EQ(Chunks(1 - head_, 8)[0].committed, 1u);
  // The client's own transfer fails twice before it is sent: retried, applied once.
  client_faults_->FailWrites(2);
  ASSERT_TRUE(client_->Write(8, 0, "x").ok());
  EXPECT_EQ(Chunks(head_, 8)[0].committed, 2u);
  // A slow hop (held back 300 ms) is only slow.
  faults_[head_]->DelayWrites(1, 300ms);
  const auto start = std::chrono::steady_clock::now();
  ASSERT_TRUE(client_->Write(8, 1, "y").ok());
  EXPECT_GE(std::chrono::steady_clock::now() - start, 300ms);
  EXPECT_EQ(Chunks(0, 8), Chunks(1, 8));
  auto back = client_->Read(8, 0, 2);
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(*back, "xy");
}

TEST_F(TransportFaultTest, AReplicaThatCannotStoreFailsTheWriteWithItsReasonAndNothingChanges) {
  ASSERT_TRUE(client_->Write(9, 0, "before").ok());
  const auto before_head = Chunks(head_, 9);
  const auto before_tail = Chunks(1 - head_, 9);
  // The tail's answer to the forward: its disk is full.
  faults_[head_]->FailWrites(1, ResourceExhausted("injected: no space left on device"));
  Status st = client_->Write(9, 0, "after!");
  EXPECT_EQ(st.code(), StatusCode::kResourceExhausted);
  EXPECT_THAT(st.message(), HasSubstr("no space left on device"));
  // Nothing was committed anywhere: the old content reads back on both replicas.
  EXPECT_EQ(Chunks(1 - head_, 9), before_tail);
  EXPECT_EQ(Chunks(head_, 9)[0].committed, before_head.at(0).committed);
  auto back = client_->Read(9, 0, 6);
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(*back, "before");
  // The next write goes through and both replicas agree again.
  ASSERT_TRUE(client_->Write(9, 0, "later!").ok());
  back = client_->Read(9, 0, 6);
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(*back, "later!");
  EXPECT_EQ(Chunks(0, 9)[0].crc, Chunks(1, 9)[0].crc);
  EXPECT_EQ(Chunks(0, 9)[0].pending, 0u);
  EXPECT_EQ(Chunks(1, 9)[0].pending, 0u);
}

TEST_F(TransportFaultTest, ReadsGoOnPastAFailedTransfer) {
  const std::string data = test::RandomBytes(2 * kChunk, 3);
  ASSERT_TRUE(client_->Write(10, 0, data).ok());
  client_faults_->FailReads(2);
  auto back = client_->Read(10, 0, static_cast<uint32_t>(data.size()));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, data);
  EXPECT_EQ(client_faults_->faults(), 2);
}

// A write can commit after its client was told it failed: here the client's connection breaks
// after each try went out, and the chain, slow at a hop, applies the write after the client gave
// up and after fs3-meta settled the file's length from storage (which held nothing yet). fs3-meta
// settles the length again once late writes are over (late_write_s): no data stays past the
// file's end, and the file reads back whole, without a close.
TEST_F(TransportFaultTest, AWriteThatCommitsAfterItsClientGaveUpStillGetsItsLength) {
  MetaOptions mo;
  mo.data_dir = dir_.File("meta");
  mo.mgmtd = mgmtd_server_->address();
  mo.chunk_size = kChunk;
  mo.gc_interval_ms = 100;
  mo.client_lease_s = 2;  // the sweep runs every quarter of it
  mo.late_write_s = 4;
  mo.frames_listen = "off";
  auto meta = MetaService::Create(mo, nullptr);
  ASSERT_TRUE(meta.ok()) << meta.status();
  auto server = RpcServer::Start({}, {meta->get()});
  ASSERT_TRUE(server.ok()) << server.status();
  (*meta)->Start((*server)->address());
  struct Stop {
    MetaService* meta;
    ~Stop() { meta->Stop(); }
  } stop{meta->get()};
  auto fs = FileSystem::Connect({.meta = (*server)->address(),
                                 .mgmtd = mgmtd_server_->address(),
                                 .caller = {},
                                 .write_retry_timeout = 1s,
                                 .transport = client_faults_});
  ASSERT_TRUE(fs.ok()) << fs.status();
  auto f = (*fs)->Create("/f");
  ASSERT_TRUE(f.ok()) << f.status();
  const std::string data = test::RandomBytes(20000, 41);
  faults_[head_]->DelayWrites(1, 3s);  // the head's forward to the tail
  client_faults_->AbandonWrites(1000000);
  EXPECT_FALSE((*fs)->Write(*f, 0, data).ok());
  client_faults_->AbandonWrites(0);
  EXPECT_EQ((*fs)->Stat("/f")->size(), 0u) << "the write was expected to commit late";
  // The chain commits it...
  ASSERT_TRUE(test::WaitUntil([&] { return *client_->StoredLength(f->ino) == data.size(); }, 20s));
  // ...and the length follows.
  EXPECT_TRUE(test::WaitUntil([&] { return (*fs)->Stat("/f")->size() == data.size(); }, 20s))
      << "the file's length stays " << (*fs)->Stat("/f")->size() << " with " << data.size()
      << " bytes on storage";
  std::string back(data.size(), '\0');
  auto got = (*fs)->ReadBatch({{f->ino, 0, static_cast<uint32_t>(data.size()), back.data()}});
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_TRUE(back == data);
  MetaClient client(MetaClientOptions{.address = (*server)->address(), .frames = false});
  fs3rpc::FsckReply reply;
  Status fsck = client.Fsck({}, &reply, 30s);
  ASSERT_TRUE(fsck.ok()) << fsck;
  EXPECT_THAT(reply.problems(), ::testing::IsEmpty());
}

}  // namespace
}  // namespace ff::fs3
