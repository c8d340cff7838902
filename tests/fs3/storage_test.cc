// fs3 storage end to end: fs3-mgmtd and three fs3-storage services (chains of 3) as processes
// on loopback with real RocksDB and chunk files, driven by the client library.
#include <fcntl.h>
#include <gmock/gmock.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mount.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>

#include "common/net.h"
#include "common/rpc_client.h"
#include "fs3/client.h"
#include "fs3/crc32c.h"
#include "fs3/fs.h"
#include "fs3/transport.h"
#include "tests/support/faulty_transport.h"
#include "tests/support/fs3_cluster.h"
#include "tests/support/full_disk.h"
#include "tests/support/http_get.h"
#include "tests/support/subprocess.h"
#include "tests/support/wait.h"

namespace ff::fs3 {
namespace {

using ::testing::HasSubstr;
using namespace std::chrono_literals;

constexpr uint64_t kChunk = 64 * 1024;
constexpr int kServices = 3;

using test::RandomBytes;
using test::WaitUntil;

class StorageTest : public ::testing::Test {
 protected:
  void SetUp() override {
    cluster_ = std::make_unique<test::Fs3Cluster>(Options());
    BeforeStart();
    if (HasFatalFailure()) return;
    cluster_->Start();
    if (HasFatalFailure()) return;
    ASSERT_EQ(Routing().chains_size(), 2);
    ClientOptions o;
    o.mgmtd = mgmtd_address();
    auto client = StorageClient::Create(o);
    ASSERT_TRUE(client.ok()) << client.status();
    client_ = std::move(*client);
  }

  // Three services with two targets each, chains of three, 64 KiB chunks, metrics on.
  virtual test::Fs3ClusterOptions Options() {
    test::Fs3ClusterOptions o;
    o.services = kServices;
    o.targets_per_service = 2;
    o.replication = 3;
    o.chunk_size = kChunk;
    o.meta = false;
    o.metrics = true;
    return o;
  }
  // Runs after the folder exists, before any daemon starts.
  virtual void BeforeStart() {}

  test::TempDir& dir() { return cluster_->dir_; }
  const std::string& mgmtd_address() { return cluster_->mgmtd_address_; }
  // fs3-meta beside the storage cluster, in `daemons`; its address ("" and a failure if it did
  // not start).
  std::string StartMeta(test::Daemons& daemons) {
    daemons.Write("meta", "[meta]\ndata_dir = \"" + dir().File("meta") + "\"\nmgmtd = \"" +
                              mgmtd_address() + "\"\n");
    if (!daemons.Start("meta", FF_FS3_META_PATH)) {
      ADD_FAILURE() << "fs3-meta did not start";
      return "";
    }
    return daemons.ReadyField("meta", "rpc");
  }
  test::Subprocess& storage(int i) { return cluster_->proc(test::Fs3Cluster::StorageName(i)); }
  std::string metrics(int i) {
    return cluster_->ReadyField(test::Fs3Cluster::StorageName(i), "metrics");
  }

  fs3rpc::RoutingInfo Routing() { return cluster_->Routing(); }
  int CountNodes(const std::string& state) { return cluster_->CountNodes(state); }
  bool AllServing() { return cluster_->AllServing(); }

  // The chain of targets (head first) as "11 21 31".
  std::string Order(int chain) {
    std::string s;
    const fs3rpc::RoutingInfo r = Routing();
    for (const auto& t : r.chains(chain).targets())
      s += (s.empty() ? "" : " ") + std::to_string(t.target());
    return s;
  }

  // Reads a chunk directly from one target.
  grpc::Status ReadFrom(uint64_t target, uint64_t inode, uint32_t index, uint32_t offset,
                        uint32_t length, std::string* data,
                        const fs3rpc::RoutingInfo* routing = nullptr) {
    const fs3rpc::RoutingInfo r = routing ? *routing : Routing();
    std::string node, address;
    for (const auto& t : r.targets()) {
      if (t.id() == target) node = t.node();
    }
    for (const auto& n : r.nodes()) {
      if (n.name() == node) address = n.address();
    }
    auto stub = fs3rpc::Storage::NewStub(MakeChannel(address));
    fs3rpc::ReadRequest req;
    req.set_target(target);
    req.mutable_chunk()->set_inode(inode);
    req.mutable_chunk()->set_index(index);
    req.set_offset(offset);
    req.set_length(length);
    fs3rpc::ReadResponse resp;
    grpc::ClientContext c;
    c.set_deadline(std::chrono::system_clock::now() + 5s);
    grpc::Status st = stub->Read(&c, req, &resp);
    *data = resp.data();
    return st;
  }

  std::unique_ptr<test::Fs3Cluster> cluster_;
  std::unique_ptr<StorageClient> client_;
};

TEST_F(StorageTest, RandomDataAcrossManyChunksReadsBack) {
  std::map<uint64_t, std::pair<uint64_t, std::string>> files;  // inode -> (offset, data)
  files[1] = {0, RandomBytes(5 * kChunk + 1234, 1)};
  files[2] = {kChunk - 100, RandomBytes(3 * kChunk, 2)};  // starts and ends mid-chunk
  files[3] = {10, RandomBytes(777, 3)};
  for (const auto& [inode, fd] : files)
    ASSERT_TRUE(client_->Write(inode, fd.first, fd.second).ok());
  for (const auto& [inode, fd] : files) {
    auto back = client_->Read(inode, fd.first, static_cast<uint32_t>(fd.second.size()));
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_TRUE(*back == fd.second) << "inode " << inode;
  }
  // An overwrite in the middle, then every replica holds the same bytes.
  std::string patch = RandomBytes(3000, 9);
  ASSERT_TRUE(client_->Write(1, 2 * kChunk - 1000, patch).ok());
  files[1].second.replace(2 * kChunk - 1000, patch.size(), patch);
  auto back = client_->Read(1, 0, static_cast<uint32_t>(files[1].second.size()));
  ASSERT_TRUE(back.ok());
  EXPECT_TRUE(*back == files[1].second);
  // Every service shows its I/O and its targets' states.
  for (int i = 0; i < kServices; ++i) {
    auto page = test::HttpGet(metrics(i), "/metrics");
    ASSERT_TRUE(page.ok()) << page.status();
    EXPECT_THAT(page->body, HasSubstr("fs3_storage_write_bytes_total"));
    EXPECT_THAT(page->body, HasSubstr("fs3_storage_write_seconds_bucket"));
    EXPECT_THAT(page->body, HasSubstr("fs3_storage_read_seconds_count"));
    EXPECT_THAT(page->body, HasSubstr("fs3_storage_target_state{state=\"serving\",target=\"" +
                                      std::to_string((i + 1) * 10 + 1) + "\"} 1"));
  }
  auto batch = client_->ReadBatch({{1, 100, 50, {}}, {2, kChunk, 4096, {}}, {3, 10, 777, {}}});
  ASSERT_TRUE(batch.ok());
  EXPECT_EQ((*batch)[0], files[1].second.substr(100, 50));
  EXPECT_EQ((*batch)[1], files[2].second.substr(100, 4096));
  EXPECT_EQ((*batch)[2], files[3].second);
}

TEST_F(StorageTest, KillingHeadMiddleAndTailLosesNoAcknowledgedWrite) {
  std::mutex mu;
  std::map<uint64_t, std::string> acked;  // offset in inode 7 -> data
  std::atomic<bool> stop{false};
  std::atomic<int> failures{0};
  // Each write and its record happen under `mu`, so a check (which holds it) sees no write in
  // flight; the kills and recoveries happen while writes are in flight.
  std::thread writer([&] {
    for (uint64_t i = 0; !stop; ++i) {
      uint64_t offset = (i % 40) * 20000;  // overwrites too, across chunk boundaries
      std::string data = RandomBytes(20000, 100 + i);
      std::lock_guard lock(mu);
      if (client_->Write(7, offset, data).ok()) {
        acked[offset] = data;
      } else {
        ++failures;
      }
    }
  });
  auto check = [&] {
    std::lock_guard lock(mu);
    for (const auto& [offset, data] : acked) {
      auto back = client_->Read(7, offset, static_cast<uint32_t>(data.size()));
      ASSERT_TRUE(back.ok()) << back.status();
      ASSERT_EQ(Crc32c(*back), Crc32c(data)) << "offset " << offset;
    }
  };
  // Head, then middle, then tail of chain 1 (as it stands at each step).
  for (int position : {0, 1, 2}) {
    std::this_thread::sleep_for(700ms);
    const fs3rpc::RoutingInfo now = Routing();
    const auto& order = now.chains(0).targets();
    uint64_t victim_target = order[position].target();
    int victim = static_cast<int>(victim_target / 10) - 1;
    SCOPED_TRACE("killing s" + std::to_string(victim) + " (position " + std::to_string(position) +
                 " of chain 1: " + Order(0) + ")");
    storage(victim).Signal(SIGKILL);
    storage(victim).Wait(5s);
    ASSERT_TRUE(WaitUntil([&] { return CountNodes("down") == 1; }, 20s));
    std::this_thread::sleep_for(500ms);  // writes go on without it
    ASSERT_TRUE(cluster_->StartStorage(victim));
    ASSERT_TRUE(WaitUntil([&] { return AllServing(); }, 60s)) << Order(0) << " / " << Order(1);
    check();
  }
  stop = true;
  writer.join();
  check();
  EXPECT_EQ(failures.load(), 0);
  std::lock_guard lock(mu);
  EXPECT_EQ(acked.size(), 40u);
  // Every replica of every chunk holds the same committed data.
  for (uint32_t index = 0; index < 40 * 20000 / kChunk + 1; ++index) {
    const fs3rpc::RoutingInfo r = Routing();
    const auto& chain = r.chains(static_cast<int>((7 + index) % 2));
    std::string first;
    for (int k = 0; k < chain.targets_size(); ++k) {
      std::string data;
      ASSERT_TRUE(ReadFrom(chain.targets(k).target(), 7, index, 0, kChunk, &data).ok());
      if (k == 0) first = data;
      EXPECT_EQ(Crc32c(data), Crc32c(first))
          << "chunk " << index << " target " << chain.targets(k).target();
    }
  }
}

TEST_F(StorageTest, TruncateAndRemoveReachEveryReplica) {
  std::string data = RandomBytes(kChunk, 12);
  ASSERT_TRUE(client_->Write(6, 0, data).ok());
  ASSERT_TRUE(client_->Write(6, kChunk, "second chunk").ok());
  ASSERT_TRUE(client_->TruncateChunk(6, 0, 1000).ok());
  const fs3rpc::RoutingInfo r = Routing();
  for (const auto& t : r.chains(0).targets()) {  // chunk 0 of inode 6: chain (6 + 0) % 2 = 0
    std::string got;
    ASSERT_TRUE(ReadFrom(t.target(), 6, 0, 0, kChunk, &got).ok());
    EXPECT_TRUE(got == data.substr(0, 1000)) << t.target();
  }
  ASSERT_TRUE(client_->TruncateChunk(6, 0, 3000).ok());  // zero-extends
  auto back = client_->Read(6, 0, 3000);
  ASSERT_TRUE(back.ok());
  EXPECT_TRUE(*back == data.substr(0, 1000) + std::string(2000, '\0'));
  ASSERT_TRUE(client_->RemoveChunk(6, 1).ok());
  for (const auto& t : r.chains(1).targets()) {
    std::string got = "x";
    ASSERT_TRUE(ReadFrom(t.target(), 6, 1, 0, 100, &got).ok());
    EXPECT_EQ(got, "") << t.target();  // gone: reads as a hole
  }
  ASSERT_TRUE(client_->RemoveChunk(6, 1).ok());  // again: fine
  EXPECT_EQ(client_->TruncateChunk(6, 0, kChunk + 1).code(), StatusCode::kInvalidArgument);
  // What metadata asks to settle a file's length, and a target's space.
  ASSERT_TRUE(client_->Write(6, 4 * kChunk + 10, "end").ok());  // chunk 4: chain (6 + 4) % 2 = 0
  const auto& tail = r.chains(0).targets(2);
  std::string address;
  for (const auto& n : r.nodes()) {
    if (n.name() == "s" + std::to_string(tail.target() / 10 - 1)) address = n.address();
  }
  auto stub = fs3rpc::Storage::NewStub(MakeChannel(address));
  fs3rpc::ExtentRequest lq;
  lq.set_target(tail.target());
  lq.set_inode(6);
  fs3rpc::ExtentResponse extent;
  grpc::ClientContext c1;
  ASSERT_TRUE(stub->Extent(&c1, lq, &extent).ok());
  EXPECT_EQ(extent.last().id().index(), 4u);
  EXPECT_EQ(extent.last().length(), 13u);
  EXPECT_EQ(extent.stored_bytes(), 8192u) << "chunks 0 (3,000 bytes) and 4 (13): a block each";
  fs3rpc::SpaceInfoRequest sq;
  sq.set_target(tail.target());
  fs3rpc::SpaceInfoResponse space;
  grpc::ClientContext c2;
  ASSERT_TRUE(stub->SpaceInfo(&c2, sq, &space).ok());
  EXPECT_GT(space.capacity_bytes(), 0u);
  EXPECT_GE(space.chunks(), 2u);  // chunks 0 and 4 of inode 6
  EXPECT_GE(space.used_bytes(), 13u);
}

TEST_F(StorageTest, LargeTransfersAreStreamedInPieces) {
  // A transport that streams anything over 1,000 bytes, in 4 KiB pieces.
  GrpcTransport streaming(GrpcTransportOptions{.stream_threshold = 1000, .piece_bytes = 4096});
  std::string data = RandomBytes(kChunk, 13);
  fs3rpc::WriteRequest w;
  w.set_request_id(4242);
  w.mutable_chunk()->set_inode(11);
  w.set_data(data);
  fs3rpc::WriteResponse wr;
  uint64_t head = 0;
  std::string address;
  // One attempt is what is tested; a loaded machine may fence a service whose lease renewal was
  // late, or move the chain on, so a retryable answer is tried again with fresh routing (as the
  // client library does).
  Status st = Unavailable("not tried");
  for (int attempt = 0; attempt < 20; ++attempt) {
    const fs3rpc::RoutingInfo r = Routing();
    const auto& chain = r.chains(1);  // chunk 0 of inode 11: chain (11 + 0) % 2 = 1
    head = chain.targets(0).target();
    for (const auto& n : r.nodes()) {
      if (n.name() == "s" + std::to_string(head / 10 - 1)) address = n.address();
    }
    w.set_chain(chain.id());
    w.set_chain_version(chain.version());
    w.set_target(head);
    st = streaming.Write(address, w, &wr, 10s);
    if (st.ok() || (st.code() != StatusCode::kUnavailable && st.code() != StatusCode::kAborted &&
                    st.code() != StatusCode::kFailedPrecondition)) {
      break;
    }
    std::this_thread::sleep_for(200ms);
  }
  ASSERT_TRUE(st.ok()) << st;
  EXPECT_EQ(wr.length(), kChunk);
  fs3rpc::ReadRequest rq;
  rq.set_target(head);
  rq.mutable_chunk()->set_inode(11);
  rq.set_length(kChunk);
  fs3rpc::ReadResponse rr;
  ASSERT_TRUE(streaming.Read(address, rq, &rr, 10s).ok());
  EXPECT_TRUE(rr.data() == data);
  EXPECT_EQ(rr.chunk_length(), kChunk);
  auto back = client_->Read(11, 0, kChunk);  // the replicas agree
  ASSERT_TRUE(back.ok());
  EXPECT_TRUE(*back == data);
  // More streamed data than a chunk holds is refused.
  w.set_request_id(4243);
  w.set_data(data + "x");
  EXPECT_EQ(streaming.Write(address, w, &wr, 10s).code(), StatusCode::kInvalidArgument);

  // A stream whose sender stops half-way (it died, or gave up) changes nothing: the service
  // does not take the pieces it got for the whole write (a predecessor killed mid-forward would
  // otherwise leave its successor with a chunk cut short).
  auto stub = fs3rpc::Storage::NewStub(MakeChannel(address));
  for (const bool cancel : {false, true}) {
    grpc::ClientContext c;
    fs3rpc::WriteResponse cut;
    auto writer = stub->WriteStream(&c, &cut);
    fs3rpc::WritePiece piece;
    *piece.mutable_header() = w;
    piece.mutable_header()->set_request_id(cancel ? 4245 : 4244);
    piece.mutable_header()->clear_data();
    piece.mutable_header()->set_stream_length(kChunk);
    ASSERT_TRUE(writer->Write(piece));
    fs3rpc::WritePiece half;
    half.set_data(std::string(kChunk / 2, 'z'));
    ASSERT_TRUE(writer->Write(half));
    if (cancel) {
      c.TryCancel();
    } else {
      writer->WritesDone();
    }
    const Status finished = FromGrpcStatus(writer->Finish());
    EXPECT_FALSE(finished.ok()) << (cancel ? "cancelled" : "ended early");
    auto after = client_->Read(11, 0, kChunk);
    ASSERT_TRUE(after.ok());
    EXPECT_TRUE(*after == data) << "a cut stream was applied ("
                                << (cancel ? "cancelled" : "ended early") << ")";
  }
}

// With a small request-id table: applied writes are forgotten oldest first, never all at once.
class StorageDedupTest : public StorageTest {
 protected:
  test::Fs3ClusterOptions Options() override {
    test::Fs3ClusterOptions o = StorageTest::Options();
    o.storage_keys = "dedup_max_entries = 4\n";
    return o;
  }
};

TEST_F(StorageDedupTest, ARetryJustAfterTheTableFillsIsNotAppliedTwice) {
  const fs3rpc::RoutingInfo r = Routing();
  const auto& chain = r.chains(1);  // chunk 0 of inode 21: chain (21 + 0) % 2 = 1
  const uint64_t head = chain.targets(0).target();
  std::string address;
  for (const auto& n : r.nodes()) {
    if (n.name() == "s" + std::to_string(head / 10 - 1)) address = n.address();
  }
  auto stub = fs3rpc::Storage::NewStub(MakeChannel(address));
  auto write = [&](uint64_t request_id, const std::string& data) -> fs3rpc::WriteResponse {
    fs3rpc::WriteRequest w;
    w.set_request_id(request_id);
    w.mutable_chunk()->set_inode(21);
    w.set_chain(chain.id());
    w.set_chain_version(chain.version());
    w.set_target(head);
    w.set_data(data);
    fs3rpc::WriteResponse resp;
    grpc::ClientContext c;
    c.set_deadline(std::chrono::system_clock::now() + 10s);
    grpc::Status st = stub->Write(&c, w, &resp);
    EXPECT_TRUE(st.ok()) << request_id << ": " << st.error_message();
    return resp;
  };
  // Six writes fill the table past its four entries; each commits the next version.
  for (uint64_t i = 1; i <= 6; ++i) {
    EXPECT_EQ(write(1000 + i, "write " + std::to_string(i)).version(), i);
  }
  // The answer to write 6 was lost and the client retries it: answered as before, not applied.
  EXPECT_EQ(write(1006, "write 6").version(), 6u);
  EXPECT_EQ(write(1005, "write 5").version(), 5u);
  // The oldest are the ones forgotten (four are kept): write 1 again is a new write now.
  EXPECT_EQ(write(1001, "write 1").version(), 7u);
  std::string data;
  ASSERT_TRUE(ReadFrom(head, 21, 0, 0, 7, &data).ok());
  EXPECT_EQ(data, "write 1");
}

TEST_F(StorageTest, ResyncRemovesWhatThePredecessorNoLongerHas) {
  // Chunk 0 of inode 20 (chain 0) and chunk 1 (chain 1) exist on every replica.
  ASSERT_TRUE(client_->Write(20, 0, RandomBytes(2 * kChunk, 14)).ok());
  const fs3rpc::RoutingInfo before = Routing();
  uint64_t tail = before.chains(0).targets(2).target();
  int victim = static_cast<int>(tail / 10) - 1;
  storage(victim).Signal(SIGKILL);
  storage(victim).Wait(5s);
  ASSERT_TRUE(WaitUntil([&] { return CountNodes("down") == 1; }, 20s));
  // While it is away, chunk 0 is removed and chunk 1 rewritten.
  ASSERT_TRUE(client_->RemoveChunk(20, 0).ok());
  std::string fresh = RandomBytes(kChunk, 15);
  ASSERT_TRUE(client_->Write(20, kChunk, fresh).ok());
  ASSERT_TRUE(cluster_->StartStorage(victim));
  ASSERT_TRUE(WaitUntil([&] { return AllServing(); }, 60s));
  // The returned targets hold exactly what their predecessors hold.
  std::string got = "x";
  ASSERT_TRUE(ReadFrom(tail, 20, 0, 0, kChunk, &got).ok());
  EXPECT_EQ(got, "");
  const fs3rpc::RoutingInfo after = Routing();
  for (const auto& t : after.chains(1).targets()) {
    ASSERT_TRUE(ReadFrom(t.target(), 20, 1, 0, kChunk, &got).ok());
    EXPECT_TRUE(got == fresh) << t.target();
  }
}

TEST_F(StorageTest, ANativeWriteThatFailsAfterItsDataLandedLeavesNoDataPastTheFilesEnd) {
  // The crash soak found a file whose data storage held while fs3-meta recorded a length of 0
  // (fs3 fsck --data: "inode N holds 25901 bytes of data but records a length of 0"): a native
  // write whose chunk landed but which failed before it extended the length. Here the chunk's
  // answers are lost (the chain applied it) until the client gives up.
  test::Daemons daemons(dir());
  const std::string meta_address = StartMeta(daemons);
  ASSERT_FALSE(meta_address.empty());
  auto faults = std::make_shared<test::FaultyTransport>();
  auto fs = FileSystem::Connect({.meta = meta_address,
                                 .mgmtd = mgmtd_address(),
                                 .caller = {},
                                 .write_retry_timeout = std::chrono::seconds(2),
                                 .transport = faults});
  ASSERT_TRUE(fs.ok()) << fs.status();
  auto f = (*fs)->Create("/f");
  ASSERT_TRUE(f.ok()) << f.status();
  const std::string data = RandomBytes(25901, 31);
  faults->LoseWriteAnswers(1000000);
  Status st = (*fs)->Write(*f, 0, data);
  EXPECT_FALSE(st.ok());
  EXPECT_GT(faults->writes_sent(), 0);
  faults->LoseWriteAnswers(0);
  // The length covers what storage holds; the file reads back whole; fsck finds nothing.
  auto stat = (*fs)->Stat("/f");
  ASSERT_TRUE(stat.ok()) << stat.status();
  EXPECT_EQ(stat->size(), data.size());
  std::string back(data.size(), '\0');
  auto got = (*fs)->ReadBatch({{f->ino, 0, static_cast<uint32_t>(data.size()), back.data()}});
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_TRUE(back == data);
  auto fsck = test::Subprocess::Start(
      {FF_FS3_CLI_PATH, "--mgmtd", mgmtd_address(), "fsck", "--data", "--meta", meta_address},
      {.env = {}, .output_dir = dir().path()});
  ASSERT_TRUE(fsck.ok()) << fsck.status();
  EXPECT_EQ(fsck->Wait(std::chrono::seconds(60)), 0) << fsck->Stdout() << fsck->Stderr();
}

TEST_F(StorageTest, NativeClientReadsFilesByPathInBatches) {
  test::Daemons daemons(dir());
  const std::string meta_address = StartMeta(daemons);
  ASSERT_FALSE(meta_address.empty());
  auto fs = FileSystem::Connect({.meta = meta_address, .mgmtd = mgmtd_address(), .caller = {}});
  ASSERT_TRUE(fs.ok()) << fs.status();
  ASSERT_TRUE((*fs)->Mkdir("/data").ok());
  auto a = (*fs)->Create("/data/a");
  auto b = (*fs)->Create("/data/b");
  ASSERT_TRUE(a.ok() && b.ok());
  const std::string da = RandomBytes(300 * 1024, 21), db = RandomBytes(10240, 22);
  ASSERT_TRUE((*fs)->Write(*a, 0, da).ok());
  ASSERT_TRUE((*fs)->Write(*b, 0, db).ok());
  EXPECT_EQ((*fs)->Stat("/data/a")->size(), da.size());
  auto entries = (*fs)->List("/data");
  ASSERT_TRUE(entries.ok());
  ASSERT_EQ(entries->size(), 2u);
  // Open by path, then one batched, asynchronous read of ranges of both into caller buffers.
  auto fa = (*fs)->Open("/data/a");
  auto fb = (*fs)->Open("/data/b");
  ASSERT_TRUE(fa.ok() && fb.ok());
  std::vector<std::string> bufs = {std::string(4096, 'x'), std::string(100 * 1024, 'x'),
                                   std::string(10000, 'x'), std::string(100, 'x')};
  auto done = (*fs)->ReadBatchAsync({{fa->ino, 0, 4096, bufs[0].data()},
                                     {fa->ino, 200 * 1024, 100 * 1024, bufs[1].data()},
                                     {fb->ino, 5000, 10000, bufs[2].data()},
                                     {fb->ino, 20000, 100, bufs[3].data()}});
  auto counts = done.get();
  ASSERT_TRUE(counts.ok()) << counts.status();
  EXPECT_THAT(*counts, ::testing::ElementsAre(4096u, 100u * 1024, 5240u, 0u));
  EXPECT_TRUE(bufs[0] == da.substr(0, 4096));
  EXPECT_TRUE(bufs[1] == da.substr(200 * 1024, 100 * 1024));
  EXPECT_TRUE(bufs[2].substr(0, 5240) == db.substr(5000));
  EXPECT_EQ(bufs[2].substr(5240), std::string(10000 - 5240, 'x'));  // past the end: untouched
  EXPECT_EQ((*fs)->Open("/data/missing").status().code(), StatusCode::kNotFound);
  EXPECT_EQ((*fs)->Open("relative").status().code(), StatusCode::kInvalidArgument);
  // Permissions apply to the caller.
  ASSERT_TRUE((*fs)->Mkdir("/private", 0700).ok());
  ASSERT_TRUE((*fs)->Create("/private/secret").ok());
  auto alice = FileSystem::Connect(
      {.meta = meta_address, .mgmtd = mgmtd_address(), .caller = {1000, 1000, {}}});
  ASSERT_TRUE(alice.ok());
  EXPECT_EQ((*alice)->Open("/private/secret").status().code(), StatusCode::kPermissionDenied);
  EXPECT_EQ((*alice)->Open("/data/a")->size, da.size());
  // Layouts: fs3-meta picks each file's chains at create, `stripe` of them (the root's 16, here
  // both chains); a directory's stripe applies to the files made in it.
  EXPECT_EQ(fa->chains.size(), 2u);
  ASSERT_TRUE((*fs)->Mkdir("/narrow").ok());
  EXPECT_EQ((*alice)->SetStripe("/narrow", 1).code(), StatusCode::kNotPermitted);
  ASSERT_TRUE((*fs)->SetStripe("/narrow", 1).ok());
  auto narrow = (*fs)->Create("/narrow/f");
  ASSERT_TRUE(narrow.ok());
  ASSERT_EQ(narrow->chains.size(), 1u);
  const std::string dn = RandomBytes(4 * kChunk, 23);
  ASSERT_TRUE((*fs)->Write(*narrow, 0, dn).ok());
  std::string back(dn.size(), '\0');
  auto got = (*fs)->ReadBatch({{narrow->ino, 0, static_cast<uint32_t>(dn.size()), back.data()}});
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_TRUE(back == dn);
  // Every chunk is on the file's chain, none on the other.
  const fs3rpc::RoutingInfo routing = Routing();
  for (const auto& chain : routing.chains()) {
    const uint64_t tail = chain.targets(chain.targets_size() - 1).target();
    for (uint32_t index = 0; index < 4; ++index) {
      std::string chunk;
      ASSERT_TRUE(ReadFrom(tail, narrow->ino, index, 0, kChunk, &chunk, &routing).ok());
      if (chain.id() == narrow->chains[0]) {
        EXPECT_TRUE(chunk == dn.substr(index * kChunk, kChunk)) << index;
      } else {
        EXPECT_TRUE(chunk.empty()) << "chunk " << index << " on chain " << chain.id();
      }
    }
  }
}

TEST_F(StorageTest, BatchedReadsArePacedByTheClient) {
  std::string data = RandomBytes(32 * kChunk, 11);
  ASSERT_TRUE(client_->Write(8, 0, data).ok());
  ClientOptions o;
  o.mgmtd = mgmtd_address();
  o.max_inflight_read_bytes = 2 * kChunk;  // two chunk-sized replies at a time
  auto paced = StorageClient::Create(o);
  ASSERT_TRUE(paced.ok());
  std::vector<ReadOp> ops;
  for (uint32_t i = 0; i < 32; ++i)
    ops.push_back({8, i * kChunk, static_cast<uint32_t>(kChunk), {}});
  auto out = (*paced)->ReadBatch(ops);
  ASSERT_TRUE(out.ok()) << out.status();
  for (uint32_t i = 0; i < 32; ++i)
    ASSERT_TRUE((*out)[i] == data.substr(i * kChunk, kChunk)) << i;
  EXPECT_GT((*paced)->peak_inflight_read_bytes(), 0u);
  EXPECT_LE((*paced)->peak_inflight_read_bytes(), 2 * kChunk);
}

TEST_F(StorageTest, ACorruptChunkIsDetectedAndServedFromAnotherReplica) {
  std::string data = RandomBytes(kChunk, 5);
  ASSERT_TRUE(client_->Write(9, 0, data).ok());
  // Chunk 0 of inode 9 is on chain (9 + 0) % 2 = 1: the second chain. Corrupt its head's copy.
  const fs3rpc::RoutingInfo routing = Routing();
  const auto& chain = routing.chains(1);
  uint64_t target = chain.targets(0).target();
  std::string path =
      dir().File("s" + std::to_string(target / 10 - 1) + "-t" + std::to_string(target % 10) +
                 "/chunks/0000000000000009-00000000.c");
  {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    ASSERT_TRUE(f.is_open()) << path;
    f.seekp(100);
    f.put(static_cast<char>(data[100] ^ 0x40));
  }
  std::string got;
  grpc::Status st = ReadFrom(target, 9, 0, 0, 4096, &got);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::DATA_LOSS);
  EXPECT_THAT(st.error_message(), HasSubstr("fails its checksum"));
  for (int i = 0; i < 6; ++i) {  // whichever replica the client starts with
    auto back = client_->Read(9, 0, kChunk);
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_TRUE(*back == data);
  }
}

// Reads of one part of a chunk while another part is overwritten again and again, on every
// replica: each read gives the bytes that part has always held. A replica that found a version
// pending, asked the tail, and was told it is committed read it as the pending version after its
// own commit had moved it (an empty read, which the client fills with zeros: the kernel then kept
// zero pages, fs3-fsx's seed 403 in CI), or read the committed file just renamed over by that
// commit against the old checksums (DataLoss).
TEST_F(StorageTest, ReadsRacingOverwritesOfTheSameChunkSeeItsBytesOnEveryReplica) {
  const std::string data = RandomBytes(kChunk, 21);
  ASSERT_TRUE(client_->Write(11, 0, data).ok());
  // Chunk 0 of inode 11 is on chain (11 + 0) % 2 = 1.
  const fs3rpc::RoutingInfo routing = Routing();
  std::vector<uint64_t> replicas;
  for (const auto& t : routing.chains(1).targets())
    replicas.push_back(t.target());
  ASSERT_EQ(replicas.size(), 3u);
  constexpr uint32_t kAt = kChunk / 2, kLen = 4096;
  const std::string expected = data.substr(kAt, kLen);
  std::atomic<bool> done{false};
  std::atomic<int> writes{0};
  std::thread writer([&] {
    for (int i = 0; i < 400 && !done; ++i) {  // the first half of the chunk, over and over
      if (!client_->Write(11, 0, RandomBytes(kAt, 100 + i)).ok()) break;
      ++writes;
    }
    done = true;
  });
  int reads = 0, wrong = 0, failed = 0;
  std::string first_problem;
  while (!done) {
    for (uint64_t target : replicas) {
      std::string got;
      grpc::Status st = ReadFrom(target, 11, 0, kAt, kLen, &got, &routing);
      ++reads;
      if (!st.ok()) {
        // A replica that cannot serve the read now may say so (the client tries another), but
        // never that the chunk is corrupt.
        if (st.error_code() != grpc::StatusCode::UNAVAILABLE) {
          ++failed;
          if (first_problem.empty()) first_problem = st.error_message();
        }
      } else if (got != expected) {
        ++wrong;
        if (first_problem.empty()) {
          first_problem = "target " + std::to_string(target) + " returned " +
                          std::to_string(got.size()) + " bytes, not the chunk's";
        }
      }
    }
  }
  writer.join();
  EXPECT_EQ(writes, 400);
  EXPECT_GT(reads, 100);
  EXPECT_EQ(wrong, 0) << first_problem;
  EXPECT_EQ(failed, 0) << first_problem;
}

TEST_F(StorageTest, BadRequestsGetPreciseErrorsAndChangeNothing) {
  std::string data = RandomBytes(1000, 6);
  ASSERT_TRUE(client_->Write(4, 0, data).ok());
  auto r = Routing();
  const auto& chain = r.chains(0);  // chunk 0 of inode 4 lives on chain (4 + 0) % 2 = 0
  uint64_t head = chain.targets(0).target();
  std::string address;
  for (const auto& n : r.nodes()) {
    if (n.name() == "s" + std::to_string(head / 10 - 1)) address = n.address();
  }
  auto stub = fs3rpc::Storage::NewStub(MakeChannel(address));
  auto write = [&](const std::function<void(fs3rpc::WriteRequest&)>& change) {
    fs3rpc::WriteRequest w;
    w.set_request_id(12345);
    w.set_chain(chain.id());
    w.set_chain_version(chain.version());
    w.set_target(head);
    w.mutable_chunk()->set_inode(4);
    w.set_data("zzz");
    change(w);
    fs3rpc::WriteResponse resp;
    grpc::ClientContext c;
    return stub->Write(&c, w, &resp);
  };
  grpc::Status st = write([&](auto& w) { w.set_chain_version(chain.version() - 1); });
  EXPECT_EQ(st.error_code(), grpc::StatusCode::ABORTED);
  EXPECT_THAT(st.error_message(), HasSubstr("stale chain version"));
  st = write([](auto& w) { w.set_offset(kChunk - 1); });
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(st.error_message(), HasSubstr("beyond the chunk size 65536"));
  st = write([](auto& w) { w.set_target(999); });
  EXPECT_EQ(st.error_code(), grpc::StatusCode::NOT_FOUND);
  st = write([](auto& w) { w.clear_chunk(); });
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  st = write([&](auto& w) { w.set_target(chain.targets(1).target()); });  // not on this service
  EXPECT_EQ(st.error_code(), grpc::StatusCode::NOT_FOUND);
  {
    // A client write sent to the middle of the chain, on its own service: not the head.
    uint64_t middle = chain.targets(1).target();
    std::string middle_address;
    for (const auto& n : r.nodes()) {
      if (n.name() == "s" + std::to_string(middle / 10 - 1)) middle_address = n.address();
    }
    auto middle_stub = fs3rpc::Storage::NewStub(MakeChannel(middle_address));
    fs3rpc::WriteRequest w;
    w.set_request_id(777);
    w.set_chain(chain.id());
    w.set_chain_version(chain.version());
    w.set_target(middle);
    w.mutable_chunk()->set_inode(4);
    w.set_data("zzz");
    fs3rpc::WriteResponse resp;
    grpc::ClientContext c;
    st = middle_stub->Write(&c, w, &resp);
    EXPECT_EQ(st.error_code(), grpc::StatusCode::ABORTED);
    EXPECT_THAT(st.error_message(), HasSubstr("is not the head of chain"));
  }
  std::string got;
  st = ReadFrom(head, 4, 0, 0, 0xffffffffu, &got);  // huge length
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  {
    // A truncated message: the first bytes of a valid request, cut in the middle of its data.
    fs3rpc::WriteRequest w;
    w.set_request_id(99);
    w.set_chain(chain.id());
    w.set_chain_version(chain.version());
    w.set_target(head);
    w.mutable_chunk()->set_inode(4);
    w.set_data(std::string(500, 'q'));
    std::string bytes = w.SerializeAsString();
    bytes.resize(bytes.size() - 100);
    grpc::Slice slice(bytes);
    grpc::ByteBuffer request(&slice, 1), reply;
    grpc::GenericStub generic(MakeChannel(address));
    grpc::ClientContext c;
    std::mutex m;
    std::condition_variable cv;
    bool done = false;
    grpc::Status result;
    generic.UnaryCall(&c, "/fs3rpc.Storage/Write", grpc::StubOptions(), &request, &reply,
                      [&](grpc::Status s) {
                        std::lock_guard lock(m);
                        result = s;
                        done = true;
                        cv.notify_all();
                      });
    std::unique_lock lock(m);
    cv.wait(lock, [&] { return done; });
    EXPECT_FALSE(result.ok());
    EXPECT_NE(result.error_code(), grpc::StatusCode::UNAVAILABLE);
  }
  auto back = client_->Read(4, 0, 1000);
  ASSERT_TRUE(back.ok());
  EXPECT_TRUE(*back == data);  // nothing changed
}

TEST_F(StorageTest, IoContinuesAcrossAManagerRestart) {
  ASSERT_TRUE(client_->Write(5, 0, "before").ok());
  const fs3rpc::RoutingInfo cached = Routing();
  cluster_->proc("mgmtd").Signal(SIGKILL);
  cluster_->proc("mgmtd").Wait(5s);
  // Without the manager the services cannot renew their leases and stop serving within half a
  // lease (no split brain); a write in that time waits, and completes once the manager is back.
  std::this_thread::sleep_for(1000ms);
  {
    // Past half a lease without renewal, a service refuses I/O rather than risk serving stale data.
    const fs3rpc::RoutingInfo& r = cached;
    std::string got;
    grpc::Status fenced = ReadFrom(r.chains(1).targets(0).target(), 5, 0, 0, 6, &got, &r);
    EXPECT_EQ(fenced.error_code(), grpc::StatusCode::UNAVAILABLE);
    EXPECT_THAT(fenced.error_message(), HasSubstr("could not renew its lease"));
  }
  Status during;
  std::thread writer([&] { during = client_->Write(5, 6, "-during"); });
  std::this_thread::sleep_for(300ms);
  ASSERT_TRUE(cluster_->StartMgmtd());
  writer.join();
  ASSERT_TRUE(during.ok()) << during;
  ASSERT_TRUE(WaitUntil([&] { return CountNodes("up") == kServices; }, 20s));
  ASSERT_TRUE(client_->Write(5, 13, "-after").ok());
  auto back = client_->Read(5, 0, 19);
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(*back, "before-during-after");
  EXPECT_TRUE(AllServing());
}

// A storage service frozen (SIGSTOP) for longer than its lease is fenced: while it sleeps the
// chain goes on without it, and when it wakes it serves no read of what it held before.
TEST_F(StorageTest, AServiceFrozenPastItsLeaseServesNoStaleDataWhenItWakes) {
  const std::string old_data(4096, 'o'), new_data(4096, 'n');
  ASSERT_TRUE(client_->Write(9, 0, old_data).ok());  // chunk 0 of inode 9: chain (9 + 0) % 2 = 1
  const fs3rpc::RoutingInfo before = Routing();
  const uint64_t frozen_target = before.chains(1).targets(2).target();  // the tail
  const int frozen = static_cast<int>(frozen_target / 10) - 1;
  std::string data;
  ASSERT_TRUE(ReadFrom(frozen_target, 9, 0, 0, 4096, &data, &before).ok());
  ASSERT_EQ(data, old_data);

  storage(frozen).Signal(SIGSTOP);
  ASSERT_TRUE(WaitUntil([&] { return CountNodes("down") == 1; }, 20s));
  ASSERT_TRUE(client_->Write(9, 0, new_data).ok());  // the chain without it
  storage(frozen).Signal(SIGCONT);
  // From the moment it wakes: a read of the chunk from it is refused or current, never old.
  const auto until = std::chrono::steady_clock::now() + 5s;
  int refused = 0, current = 0;
  while (std::chrono::steady_clock::now() < until) {
    grpc::Status st = ReadFrom(frozen_target, 9, 0, 0, 4096, &data, &before);
    if (!st.ok()) {
      ++refused;
    } else {
      ASSERT_NE(data, old_data) << "the woken service served the chunk it held before";
      ASSERT_EQ(data, new_data);
      ++current;
    }
    std::this_thread::sleep_for(20ms);
  }
  EXPECT_GT(refused, 0) << "a woken service must refuse until it has its lease and its data back";
  ASSERT_TRUE(WaitUntil([&] { return AllServing(); }, 60s)) << Order(1);
  ASSERT_TRUE(ReadFrom(frozen_target, 9, 0, 0, 4096, &data).ok());
  EXPECT_EQ(data, new_data);
}

// A storage target on a full disk: a write that needs it fails at once with the disk's error
// (not a retry loop until the forward timeout), changes no replica, and works again once there
// is room.
class StorageFullDiskTest : public StorageTest {
 protected:
  void BeforeStart() override {
    ASSERT_EQ(geteuid(), 0u) << "mounts a small tmpfs as a storage target: run as root (CI does)";
    target_dir_ = dir().File("s1-t1");  // target 21
    ASSERT_EQ(mkdir(target_dir_.c_str(), 0700), 0);
    ASSERT_EQ(mount("tmpfs", target_dir_.c_str(), "tmpfs", 0, "size=8m"), 0) << strerror(errno);
    mounted_ = true;
  }
  void TearDown() override {
    for (const auto& [name, p] : cluster_->procs()) {
      if (name != "mgmtd") p->Signal(SIGKILL);
    }
    for (const auto& [name, p] : cluster_->procs()) {
      if (name != "mgmtd") (void)p->Wait(10s);
    }
    if (mounted_) umount2(target_dir_.c_str(), MNT_DETACH);
  }
  std::string Fill() { return test::FillFileSystem(target_dir_); }
  std::string target_dir_;
  bool mounted_ = false;
};

TEST_F(StorageFullDiskTest, AWriteNeedingAFullTargetFailsAtOnceAndChangesNothing) {
  fs3rpc::RoutingInfo r = Routing();
  int chain = -1;
  for (int c = 0; c < r.chains_size(); ++c) {
    for (const auto& t : r.chains(c).targets()) {
      if (t.target() == 21) chain = c;
    }
  }
  ASSERT_GE(chain, 0);
  // Chunk 0 of inode n lives on chain n % 2.
  const uint64_t kept = 100 + static_cast<uint64_t>(chain),
                 refused = 102 + static_cast<uint64_t>(chain);
  const std::string before(4096, 'a');
  ASSERT_TRUE(client_->Write(kept, 0, before).ok());
  const std::string filler = Fill();

  const std::string big(kChunk, 'b');
  const auto start = std::chrono::steady_clock::now();
  Status st = client_->Write(refused, 0, big);
  const auto took = std::chrono::steady_clock::now() - start;
  ASSERT_FALSE(st.ok()) << "the target's disk never filled up";
  EXPECT_EQ(st.code(), StatusCode::kResourceExhausted) << st;
  EXPECT_THAT(st.message(), HasSubstr("No space left on device")) << st;
  EXPECT_LT(took, 10s) << "a full disk is not a reason to retry: " << st;
  Status over = client_->Write(kept, 0, std::string(4096, 'c'));
  EXPECT_EQ(over.code(), StatusCode::kResourceExhausted) << over;

  // No replica changed: the acknowledged chunk reads back everywhere, the refused one nowhere.
  for (const auto& t : r.chains(chain).targets()) {
    std::string data;
    ASSERT_TRUE(ReadFrom(t.target(), kept, 0, 0, 4096, &data).ok()) << t.target();
    EXPECT_EQ(data, before) << "target " << t.target();
    ASSERT_TRUE(ReadFrom(t.target(), refused, 0, 0, kChunk, &data).ok()) << t.target();
    EXPECT_TRUE(data.empty()) << "target " << t.target() << " kept part of a refused write";
  }
  // Room again: the same write succeeds and reaches every replica.
  ASSERT_EQ(unlink(filler.c_str()), 0);
  ASSERT_TRUE(client_->Write(refused, 0, big).ok());
  for (const auto& t : r.chains(chain).targets()) {
    std::string data;
    grpc::Status read = ReadFrom(t.target(), refused, 0, 0, kChunk, &data);
    ASSERT_TRUE(read.ok()) << "target " << t.target() << ": " << read.error_code() << " "
                           << read.error_message();
    EXPECT_EQ(data, big) << "target " << t.target();
  }
  EXPECT_TRUE(AllServing());
}

}  // namespace
}  // namespace ff::fs3
