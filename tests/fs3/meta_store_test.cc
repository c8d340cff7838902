// fs3's namespace on both engines, a real RocksDB and a real etcd (one member, started for the
// suite): POSIX semantics operation by operation, each test on each engine.
#include "fs3/meta_store.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <rocksdb/db.h>
#include <sys/stat.h>

#include <atomic>
#include <ctime>
#include <future>
#include <set>
#include <thread>

#include "common/etcd.h"
#include "tests/support/etcd_cluster.h"
#include "tests/support/subprocess.h"

namespace ff::fs3 {
namespace {

using ::testing::ElementsAre;
using namespace std::chrono_literals;

class MetaStoreTest : public ::testing::TestWithParam<std::string> {
 protected:
  static void SetUpTestSuite() {
    etcd_dir_ = new test::TempDir();
    etcd_ = new test::EtcdCluster(*etcd_dir_, 1);
    ASSERT_TRUE(etcd_->Start());
    client_ = etcd::Client::Make({.endpoints = etcd_->endpoints()})->release();
  }
  static void TearDownTestSuite() {
    delete client_;
    delete etcd_;
    delete etcd_dir_;
  }

  void SetUp() override {
    static int n = 0;
    prefix_ = "/meta-test/" + std::to_string(++n) + "/";
    Reopen();
  }
  bool etcd() const { return GetParam() == "etcd"; }
  // Renews `client`'s lease every half second for `how_long` (the others it leaves to expire).
  void RenewFor(uint64_t client, std::chrono::seconds how_long) {
    const auto until = std::chrono::steady_clock::now() + how_long;
    while (std::chrono::steady_clock::now() < until) {
      ASSERT_TRUE(store_->KeepClient(client, /*first=*/false).ok());
      std::this_thread::sleep_for(std::chrono::milliseconds(500));
    }
  }
  void Reopen() {
    store_.reset();
    fs3rpc::Layout layout;
    layout.set_chunk_size(1 << 20);
    layout.set_stripe(4);
    auto s = etcd() ? MetaStore::OpenEtcd(client_, prefix_, layout)
                    : MetaStore::Open(dir_.File("meta"), layout);
    ASSERT_TRUE(s.ok()) << s.status();
    store_ = std::move(*s);
  }
  std::vector<std::string> Names(uint64_t dir) {
    std::vector<std::string> out;
    auto entries = store_->Readdir(root_, dir, "", 100000);
    EXPECT_TRUE(entries.ok()) << entries.status();
    for (const auto& e : *entries)
      out.push_back(e.name);
    return out;
  }
  StatusCode Code(const Status& s) { return s.code(); }

  // With the store closed, writes `bytes` under `key` behind its back (damage, as a bug or a
  // failing disk leaves it).
  void RawPut(const std::string& key, const std::string& bytes) {
    store_.reset();
    if (etcd()) {
      ASSERT_TRUE(client_->Put(prefix_ + key, bytes).ok());
      return;
    }
    rocksdb::DB* raw = nullptr;
    ASSERT_TRUE(rocksdb::DB::Open(rocksdb::Options(), dir_.File("meta"), &raw).ok());
    std::unique_ptr<rocksdb::DB> db(raw);
    ASSERT_TRUE(db->Put(rocksdb::WriteOptions(), key, bytes).ok());
  }
  // Many records at once, the same way.
  void RawPutMany(const std::vector<std::pair<std::string, std::string>>& rows) {
    store_.reset();
    if (etcd()) {
      for (const auto& [key, bytes] : rows)
        ASSERT_TRUE(client_->Put(prefix_ + key, bytes).ok());
      return;
    }
    rocksdb::DB* raw = nullptr;
    ASSERT_TRUE(rocksdb::DB::Open(rocksdb::Options(), dir_.File("meta"), &raw).ok());
    std::unique_ptr<rocksdb::DB> db(raw);
    for (const auto& [key, bytes] : rows)
      ASSERT_TRUE(db->Put(rocksdb::WriteOptions(), key, bytes).ok());
  }
  // Overwrites the record whose key ends with `suffix` by bytes that do not parse.
  void CorruptRecordEndingWith(const std::string& suffix) {
    store_.reset();
    std::string key;
    if (etcd()) {
      auto all = client_->RangePrefix(prefix_);
      ASSERT_TRUE(all.ok());
      for (const auto& kv : all->kvs) {
        if (kv.key.ends_with(suffix)) key = kv.key.substr(prefix_.size());
      }
    } else {
      rocksdb::DB* raw = nullptr;
      ASSERT_TRUE(rocksdb::DB::Open(rocksdb::Options(), dir_.File("meta"), &raw).ok());
      std::unique_ptr<rocksdb::DB> db(raw);
      std::unique_ptr<rocksdb::Iterator> it(db->NewIterator(rocksdb::ReadOptions()));
      for (it->SeekToFirst(); it->Valid(); it->Next()) {
        if (it->key().ends_with(suffix)) key = it->key().ToString();
      }
    }
    ASSERT_FALSE(key.empty()) << "no record ends with " << suffix;
    RawPut(key, std::string("\xff\xff\xff\xff", 4));
  }
  template <typename T>
  StatusCode Code(const Result<T>& r) {
    return r.status().code();
  }

  static test::TempDir* etcd_dir_;
  static test::EtcdCluster* etcd_;
  static etcd::Client* client_;
  test::TempDir dir_;
  std::string prefix_;
  std::unique_ptr<MetaStore> store_;
  Caller root_{0, 0, {}};
  Caller alice_{1000, 1000, {}};
  Caller bob_{1001, 1001, {}};
};

TEST_P(MetaStoreTest, CreateLookupReaddirAndLayoutInheritance) {
  auto d = store_->Mkdir(root_, kRootIno, "data", 0755);
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->nlink(), 2u);
  EXPECT_EQ(d->layout().stripe(), 4u);  // inherited
  auto f = store_->Create(root_, d->ino(), "a.bin", 0644);
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(f->type(), fs3rpc::INODE_FILE);
  EXPECT_EQ(f->layout().chunk_size(), 1u << 20);
  EXPECT_EQ(store_->Lookup(root_, d->ino(), "a.bin")->ino(), f->ino());
  EXPECT_EQ(store_->Lookup(root_, d->ino(), "..")->ino(), kRootIno);
  EXPECT_EQ(store_->GetAttr(kRootIno)->nlink(), 3u);
  EXPECT_EQ(Code(store_->Create(root_, d->ino(), "a.bin", 0644)), StatusCode::kAlreadyExists);
  EXPECT_EQ(Code(store_->Lookup(root_, d->ino(), "missing")), StatusCode::kNotFound);
  EXPECT_EQ(Code(store_->Mkdir(root_, f->ino(), "x", 0755)), StatusCode::kNotADirectory);
  // Readdir in name order, resumable.
  for (const char* n : {"c", "b", "d"})
    ASSERT_TRUE(store_->Create(root_, d->ino(), n, 0644).ok());
  EXPECT_THAT(Names(d->ino()), ElementsAre("a.bin", "b", "c", "d"));
  auto page = store_->Readdir(root_, d->ino(), "b", 2);
  ASSERT_TRUE(page.ok());
  ASSERT_EQ(page->size(), 2u);
  EXPECT_EQ((*page)[0].name, "c");
  EXPECT_EQ((*page)[1].name, "d");
  // Everything survives reopening.
  Reopen();
  EXPECT_THAT(Names(d->ino()), ElementsAre("a.bin", "b", "c", "d"));
  auto again = store_->Create(root_, d->ino(), "e", 0644);
  ASSERT_TRUE(again.ok());
  EXPECT_GT(again->ino(), f->ino());  // inode numbers are never reused
}

TEST_P(MetaStoreTest, BadNamesGetTheRightErrnoAndChangeNothing) {
  EXPECT_EQ(Code(store_->Create(root_, kRootIno, "a/b", 0644)), StatusCode::kInvalidArgument);
  EXPECT_EQ(Code(store_->Create(root_, kRootIno, "", 0644)), StatusCode::kNotFound);
  EXPECT_EQ(Code(store_->Create(root_, kRootIno, std::string(256, 'x'), 0644)),
            StatusCode::kNameTooLong);
  EXPECT_EQ(Code(store_->Mkdir(root_, kRootIno, "..", 0755)), StatusCode::kAlreadyExists);
  EXPECT_EQ(Code(store_->Create(root_, 999, "x", 0644)), StatusCode::kNotFound);  // no parent
  EXPECT_TRUE(Names(kRootIno).empty());
}

TEST_P(MetaStoreTest, RetriedCreateReturnsWhatItCreated) {
  EXPECT_EQ(Code(store_->Create(alice_, kRootIno, "f", 0644, 76)), StatusCode::kPermissionDenied);
  auto first = store_->Create(root_, kRootIno, "f", 0644, /*request_id=*/77);
  ASSERT_TRUE(first.ok());
  auto retry = store_->Create(root_, kRootIno, "f", 0644, /*request_id=*/77);
  ASSERT_TRUE(retry.ok());  // not EEXIST: the same request
  EXPECT_EQ(retry->ino(), first->ino());
  EXPECT_EQ(Code(store_->Create(root_, kRootIno, "f", 0644, /*request_id=*/78)),
            StatusCode::kAlreadyExists);
}

TEST_P(MetaStoreTest, UnlinkWhileOpenKeepsTheInodeUntilClose) {
  auto f = store_->Create(root_, kRootIno, "f", 0644);
  ASSERT_TRUE(f.ok());
  ASSERT_TRUE(store_->OpenSession(f->ino()).ok());
  ASSERT_TRUE(store_->Unlink(root_, kRootIno, "f").ok());
  EXPECT_EQ(Code(store_->Lookup(root_, kRootIno, "f")), StatusCode::kNotFound);
  EXPECT_EQ(store_->GetAttr(f->ino())->nlink(), 0u);  // still there for its reader
  EXPECT_TRUE(store_->Garbage()->empty());
  ASSERT_TRUE(store_->CloseSession(f->ino(), 4096).ok());
  EXPECT_EQ(Code(store_->GetAttr(f->ino())), StatusCode::kNotFound);
  EXPECT_THAT(*store_->Garbage(), ElementsAre(f->ino()));  // its chunks are to be deleted
  ASSERT_TRUE(store_->Forget(f->ino()).ok());
  EXPECT_TRUE(store_->Garbage()->empty());
  // Hard links keep the inode; a symlink is just a name.
  auto g = store_->Create(root_, kRootIno, "g", 0644);
  ASSERT_TRUE(store_->Link(root_, g->ino(), kRootIno, "g2").ok());
  EXPECT_EQ(store_->GetAttr(g->ino())->nlink(), 2u);
  ASSERT_TRUE(store_->Unlink(root_, kRootIno, "g").ok());
  EXPECT_EQ(store_->GetAttr(g->ino())->nlink(), 1u);
  auto s = store_->Symlink(root_, kRootIno, "s", "/some/where");
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(*store_->Readlink(s->ino()), "/some/where");
  EXPECT_EQ(Code(store_->Readlink(g->ino())), StatusCode::kInvalidArgument);
  auto d = store_->Mkdir(root_, kRootIno, "dir", 0755);
  EXPECT_EQ(Code(store_->Link(root_, d->ino(), kRootIno, "dir2")), StatusCode::kNotPermitted);
  EXPECT_EQ(Code(store_->Unlink(root_, kRootIno, "dir")), StatusCode::kIsADirectory);
  EXPECT_EQ(Code(store_->Rmdir(root_, kRootIno, "g2")), StatusCode::kNotADirectory);
}

// Sessions of clients under a lease: a file unlinked while two clients hold it open lives until
// both are gone: one closes, the other dies (stops renewing) and the sweep (on etcd, etcd's own
// lease expiry) ends its session, and only then does the file go to the garbage list. A client
// that kept renewing keeps its session past the lease's time; a client whose lease expired is
// told so and registers again; fsck stays clean throughout.
TEST_P(MetaStoreTest, AClientsSessionsEndWithItsLease) {
  store_->set_client_lease_s(2);
  const SessionId alive{101, 1}, dying{202, 1};
  ASSERT_TRUE(store_->KeepClient(alive.client, /*first=*/true).ok());
  ASSERT_TRUE(store_->KeepClient(dying.client, /*first=*/true).ok());
  auto f = store_->Create(root_, kRootIno, "f", 0644, 0, fs3rpc::INODE_FILE, 0, /*open=*/true, {},
                          alive);
  ASSERT_TRUE(f.ok()) << f.status();
  ASSERT_TRUE(store_->OpenSession(f->ino(), dying).ok());
  auto g = store_->Create(root_, kRootIno, "g", 0644, 0, fs3rpc::INODE_FILE, 0, /*open=*/true, {},
                          SessionId{alive.client, 2});
  ASSERT_TRUE(g.ok()) << g.status();
  ASSERT_TRUE(store_->Unlink(root_, kRootIno, "f").ok());
  ASSERT_TRUE(store_->Unlink(root_, kRootIno, "g").ok());
  ASSERT_TRUE(store_->CloseSession(f->ino(), std::nullopt, alive).ok());
  EXPECT_EQ(store_->GetAttr(f->ino())->nlink(), 0u) << "the dying client still holds it";
  EXPECT_TRUE(store_->Garbage()->empty());
  EXPECT_TRUE(store_->Fsck(false)->problems.empty());
  // Past the lease: the live client renewed, the dying one did not.
  RenewFor(alive.client, std::chrono::seconds(5));
  ASSERT_FALSE(HasFatalFailure());
  auto ended = store_->EndExpiredSessions();
  ASSERT_TRUE(ended.ok()) << ended.status();
  EXPECT_EQ(Code(store_->GetAttr(f->ino())), StatusCode::kNotFound);
  EXPECT_THAT(*store_->Garbage(), ElementsAre(f->ino()));
  EXPECT_EQ(store_->GetAttr(g->ino())->nlink(), 0u) << "the live client's session ended";
  EXPECT_EQ(Code(store_->KeepClient(dying.client, /*first=*/false)), StatusCode::kNotFound)
      << (etcd() ? "its lease expired" : "it was taken for dead");
  EXPECT_TRUE(store_->Fsck(false)->problems.empty());
  // The live client closes: its file goes at once.
  ASSERT_TRUE(store_->CloseSession(g->ino(), 0, SessionId{alive.client, 2}).ok());
  EXPECT_EQ(Code(store_->GetAttr(g->ino())), StatusCode::kNotFound);
  EXPECT_EQ(store_->Garbage()->size(), 2u);
  // A closing client whose session is already gone gets no error.
  EXPECT_TRUE(store_->CloseSession(f->ino(), std::nullopt, dying).ok());
}

// Settle marks. A client's session leaves one that its close takes away. A session that ends
// with its client's lease (a mount killed mid-write) leaves it due: the sweep settles the file's
// length from storage (fs3-meta's part; here what storage would say) and the mark becomes a
// recheck for writes still in flight. fsck leaves a marked file's length alone until then, and
// reports data past the end of a file no mark covers.
TEST_P(MetaStoreTest, ASessionThatEndsWithoutItsCloseLeavesTheLengthToSettle) {
  store_->set_client_lease_s(2);
  const SessionId closes{101, 1}, dies{202, 1};
  ASSERT_TRUE(store_->KeepClient(closes.client, /*first=*/true).ok());
  ASSERT_TRUE(store_->KeepClient(dies.client, /*first=*/true).ok());
  auto f = store_->Create(root_, kRootIno, "f", 0644, 0, fs3rpc::INODE_FILE, 0, /*open=*/true, {},
                          closes);
  ASSERT_TRUE(f.ok()) << f.status();
  ASSERT_TRUE(store_->OpenSession(f->ino(), dies).ok());
  auto h = store_->Create(root_, kRootIno, "h", 0644, 0, fs3rpc::INODE_FILE, 0);
  ASSERT_TRUE(h.ok()) << h.status();
  std::string next;
  EXPECT_TRUE(store_->DueSettles("", 100, &next)->empty()) << "both sessions are open";
  ASSERT_TRUE(store_->CloseSession(f->ino(), 0, closes).ok());
  EXPECT_TRUE(store_->DueSettles("", 100, &next)->empty()) << "one closed, one open";
  // Past the lease: the closing client renewed, the dying one did not.
  RenewFor(closes.client, std::chrono::seconds(5));
  ASSERT_FALSE(HasFatalFailure());
  ASSERT_TRUE(store_->EndExpiredSessions().ok());
  auto due = store_->DueSettles("", 100, &next);
  ASSERT_TRUE(due.ok()) << due.status();
  ASSERT_EQ(due->size(), 1u) << "the dead client's session, and only it";
  EXPECT_EQ((*due)[0].ino, f->ino());
  EXPECT_EQ((*due)[0].session.client, dies.client);
  EXPECT_TRUE(store_->CheckData({{f->ino(), 5000}}, false)->problems.empty()) << "settling";
  // The sweep: the length from storage, then a recheck later.
  ASSERT_TRUE(store_->SettleLength(f->ino(), 5000).ok());
  const auto now_s = static_cast<uint64_t>(std::time(nullptr));
  ASSERT_TRUE(store_->SettleDone((*due)[0], now_s + 1000).ok());
  EXPECT_EQ(store_->GetAttr(f->ino())->size(), 5000u);
  EXPECT_TRUE(store_->DueSettles("", 100, &next)->empty()) << "the recheck is not due yet";
  EXPECT_TRUE(store_->CheckData({{f->ino(), 6000}}, false)->problems.empty())
      << "a recheck is pending";
  // A failed write's recheck, due now: settled and dropped, fsck reports what no mark covers.
  ASSERT_TRUE(store_->MarkRecheck(h->ino(), 1).ok());
  due = store_->DueSettles("", 100, &next);
  ASSERT_TRUE(due.ok()) << due.status();
  ASSERT_EQ(due->size(), 1u);
  EXPECT_EQ((*due)[0].ino, h->ino());
  EXPECT_EQ((*due)[0].session.client, 0u);
  ASSERT_TRUE(store_->SettleDone((*due)[0], 0).ok());
  EXPECT_TRUE(store_->DueSettles("", 100, &next)->empty());
  EXPECT_THAT(store_->CheckData({{h->ino(), 10}}, false)->problems,
              ElementsAre("inode " + std::to_string(h->ino()) +
                          " holds 10 bytes of data but records a length of 0"));
  EXPECT_TRUE(store_->Fsck(false)->problems.empty());
}

TEST_P(MetaStoreTest, RmdirOnlyEmptyDirectories) {
  auto d = store_->Mkdir(root_, kRootIno, "d", 0755);
  ASSERT_TRUE(store_->Create(root_, d->ino(), "f", 0644).ok());
  EXPECT_EQ(Code(store_->Rmdir(root_, kRootIno, "d")), StatusCode::kNotEmpty);
  ASSERT_TRUE(store_->Unlink(root_, d->ino(), "f").ok());
  ASSERT_TRUE(store_->Rmdir(root_, kRootIno, "d").ok());
  EXPECT_EQ(store_->GetAttr(kRootIno)->nlink(), 2u);
  EXPECT_EQ(Code(store_->Rmdir(root_, kRootIno, "d")), StatusCode::kNotFound);
}

TEST_P(MetaStoreTest, RenameEveryCase) {
  auto a = store_->Mkdir(root_, kRootIno, "a", 0755);
  auto b = store_->Mkdir(root_, kRootIno, "b", 0755);
  auto f = store_->Create(root_, a->ino(), "f", 0644);
  auto g = store_->Create(root_, b->ino(), "g", 0644);
  // Simple move across directories.
  ASSERT_TRUE(store_->Rename(root_, a->ino(), "f", b->ino(), "f2").ok());
  EXPECT_THAT(Names(a->ino()), ElementsAre());
  EXPECT_THAT(Names(b->ino()), ElementsAre("f2", "g"));
  // Replacing a file: the old one loses its link and its data goes.
  ASSERT_TRUE(store_->Rename(root_, b->ino(), "f2", b->ino(), "g").ok());
  EXPECT_EQ(store_->Lookup(root_, b->ino(), "g")->ino(), f->ino());
  EXPECT_EQ(Code(store_->GetAttr(g->ino())), StatusCode::kNotFound);
  EXPECT_THAT(*store_->Garbage(), ElementsAre(g->ino()));
  // RENAME_NOREPLACE refuses an existing target.
  ASSERT_TRUE(store_->Create(root_, b->ino(), "h", 0644).ok());
  EXPECT_EQ(Code(store_->Rename(root_, b->ino(), "g", b->ino(), "h", kRenameNoReplace)),
            StatusCode::kAlreadyExists);
  // Directories: over an empty directory yes, over a non-empty one no, not over a file, a file
  // not over a directory.
  auto d1 = store_->Mkdir(root_, a->ino(), "d1", 0755);
  auto d2 = store_->Mkdir(root_, b->ino(), "d2", 0755);
  EXPECT_EQ(Code(store_->Rename(root_, a->ino(), "d1", b->ino(), "h")), StatusCode::kNotADirectory);
  EXPECT_EQ(Code(store_->Rename(root_, b->ino(), "h", b->ino(), "d2")), StatusCode::kIsADirectory);
  ASSERT_TRUE(store_->Create(root_, d2->ino(), "inside", 0644).ok());
  EXPECT_EQ(Code(store_->Rename(root_, a->ino(), "d1", b->ino(), "d2")), StatusCode::kNotEmpty);
  ASSERT_TRUE(store_->Unlink(root_, d2->ino(), "inside").ok());
  ASSERT_TRUE(store_->Rename(root_, a->ino(), "d1", b->ino(), "d2").ok());
  EXPECT_EQ(store_->Lookup(root_, b->ino(), "d2")->ino(), d1->ino());
  EXPECT_EQ(store_->GetAttr(a->ino())->nlink(), 2u);  // lost d1's ".."
  EXPECT_EQ(store_->GetAttr(b->ino())->nlink(), 3u);  // has d1 (d2 is gone)
  EXPECT_EQ(store_->Lookup(root_, d1->ino(), "..")->ino(), b->ino());
  // Never a directory under itself.
  auto deep = store_->Mkdir(root_, d1->ino(), "deep", 0755);
  EXPECT_EQ(Code(store_->Rename(root_, b->ino(), "d2", deep->ino(), "x")),
            StatusCode::kInvalidArgument);
  // RENAME_EXCHANGE swaps a directory and a file across parents.
  ASSERT_TRUE(store_->Rename(root_, b->ino(), "d2", kRootIno, "a", kRenameExchange).ok());
  EXPECT_EQ(store_->Lookup(root_, kRootIno, "a")->ino(), d1->ino());
  EXPECT_EQ(store_->Lookup(root_, b->ino(), "d2")->ino(), a->ino());
  EXPECT_EQ(store_->Lookup(root_, d1->ino(), "..")->ino(), kRootIno);
  EXPECT_EQ(Code(store_->Rename(root_, kRootIno, "a", kRootIno, "nope", kRenameExchange)),
            StatusCode::kNotFound);
  // Renaming onto itself changes nothing.
  ASSERT_TRUE(store_->Rename(root_, kRootIno, "b", kRootIno, "b").ok());
}

TEST_P(MetaStoreTest, PermissionsAndTheStickyBit) {
  auto shared = store_->Mkdir(root_, kRootIno, "tmp", 01777);  // sticky, world-writable
  auto mine = store_->Create(alice_, shared->ino(), "alice.txt", 0644);
  ASSERT_TRUE(mine.ok());
  EXPECT_EQ(mine->uid(), 1000u);
  // Bob may create here but not remove or rename Alice's file.
  ASSERT_TRUE(store_->Create(bob_, shared->ino(), "bob.txt", 0644).ok());
  EXPECT_EQ(Code(store_->Unlink(bob_, shared->ino(), "alice.txt")), StatusCode::kNotPermitted);
  EXPECT_EQ(Code(store_->Rename(bob_, shared->ino(), "alice.txt", shared->ino(), "x")),
            StatusCode::kNotPermitted);
  ASSERT_TRUE(store_->Unlink(alice_, shared->ino(), "alice.txt").ok());
  ASSERT_TRUE(store_->Unlink(root_, shared->ino(), "bob.txt").ok());  // root may
  // A private directory: no entry for others.
  auto home = store_->Mkdir(alice_, shared->ino(), "alice", 0700);
  EXPECT_EQ(Code(store_->Create(bob_, home->ino(), "x", 0644)), StatusCode::kPermissionDenied);
  EXPECT_EQ(Code(store_->Lookup(bob_, home->ino(), "x")), StatusCode::kPermissionDenied);
  EXPECT_EQ(Code(store_->Readdir(bob_, home->ino(), "", 10)), StatusCode::kPermissionDenied);
  // Group permission through a supplementary group.
  auto team = store_->Mkdir(root_, kRootIno, "team", 0770);
  Caller member{1002, 1002, {0}};
  EXPECT_TRUE(store_->Create(member, team->ino(), "ok", 0644).ok());
  EXPECT_EQ(Code(store_->Create(bob_, team->ino(), "no", 0644)), StatusCode::kPermissionDenied);
}

TEST_P(MetaStoreTest, TimestampsFollowPosix) {
  auto d = store_->Mkdir(root_, kRootIno, "d", 0755);
  const int64_t before = d->mtime_ns();
  auto f = store_->Create(root_, d->ino(), "f", 0644);
  auto after_create = store_->GetAttr(d->ino());
  EXPECT_GT(after_create->mtime_ns(), before);  // the directory changed
  EXPECT_EQ(after_create->ctime_ns(), after_create->mtime_ns());
  const int64_t file_ctime = f->ctime_ns();
  ASSERT_TRUE(store_->Link(root_, f->ino(), d->ino(), "f2").ok());
  EXPECT_GT(store_->GetAttr(f->ino())->ctime_ns(), file_ctime);     // link count changed
  EXPECT_EQ(store_->GetAttr(f->ino())->mtime_ns(), f->mtime_ns());  // content did not
}

TEST_P(MetaStoreTest, SetattrFollowsPosixRules) {
  auto f = store_->Create(alice_, store_->Mkdir(root_, kRootIno, "home", 0777)->ino(), "f", 0644);
  ASSERT_TRUE(f.ok());
  // chmod: the owner (setgid dropped when not in the group), not others.
  SetAttr chmod;
  chmod.mode = 02755;
  auto m = store_->SetAttributes(alice_, f->ino(), chmod);
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->mode(), 02755u);  // alice is in the file's group: setgid stays
  EXPECT_EQ(Code(store_->SetAttributes(bob_, f->ino(), chmod)), StatusCode::kNotPermitted);
  // chown: uid by root only; gid by the owner to one of their groups.
  SetAttr to_bob;
  to_bob.uid = 1001;
  EXPECT_EQ(Code(store_->SetAttributes(alice_, f->ino(), to_bob)), StatusCode::kNotPermitted);
  Caller alice_in_team{1000, 1000, {2000}};
  SetAttr group;
  group.gid = 2000;
  ASSERT_TRUE(store_->SetAttributes(alice_in_team, f->ino(), group).ok());
  EXPECT_EQ(store_->GetAttr(f->ino())->mode(), 0755u);  // chown cleared setgid on a file
  group.gid = 3000;
  EXPECT_EQ(Code(store_->SetAttributes(alice_in_team, f->ino(), group)), StatusCode::kNotPermitted);
  auto dropped = store_->SetAttributes(alice_, f->ino(), chmod);  // not in group 2000 now
  ASSERT_TRUE(dropped.ok());
  EXPECT_EQ(dropped->mode(), 0755u);
  ASSERT_TRUE(store_->SetAttributes(root_, f->ino(), to_bob).ok());
  EXPECT_EQ(store_->GetAttr(f->ino())->uid(), 1001u);
  // truncate needs write permission; it moves mtime and ctime.
  SetAttr size;
  size.size = 12345;
  EXPECT_EQ(Code(store_->SetAttributes(alice_, f->ino(), size)), StatusCode::kPermissionDenied);
  const int64_t before = store_->GetAttr(f->ino())->mtime_ns();
  auto t = store_->SetAttributes(bob_, f->ino(), size);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->size(), 12345u);
  EXPECT_GT(t->mtime_ns(), before);
  // Explicit times: the owner only.
  SetAttr times;
  times.mtime_ns = 42;
  EXPECT_EQ(Code(store_->SetAttributes(alice_, f->ino(), times)), StatusCode::kNotPermitted);
  EXPECT_EQ(store_->SetAttributes(bob_, f->ino(), times)->mtime_ns(), 42);
  SetAttr dir_size;
  dir_size.size = 1;
  EXPECT_EQ(Code(store_->SetAttributes(root_, kRootIno, dir_size)), StatusCode::kIsADirectory);
}

// What the kernel asks for before a write, truncate or chown by someone other than the owner:
// drop set-user-ID / set-group-ID, nothing else, and only for someone who may write the file.
TEST_P(MetaStoreTest, NonOwnersMayOnlyDropSetuidAndSetgid) {
  auto f =
      store_->Create(alice_, store_->Mkdir(root_, kRootIno, "home", 0777)->ino(), "tool", 0644);
  ASSERT_TRUE(f.ok());
  SetAttr mode;
  mode.mode = 06666;
  ASSERT_TRUE(store_->SetAttributes(alice_, f->ino(), mode).ok());
  SetAttr drop_suid;
  drop_suid.mode = 02666;
  auto d = store_->SetAttributes(bob_, f->ino(), drop_suid);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->mode(), 02666u);  // exactly what was asked: setgid stays
  SetAttr other;
  other.mode = 0777;  // also adds execute bits
  EXPECT_EQ(Code(store_->SetAttributes(bob_, f->ino(), other)), StatusCode::kNotPermitted);
  SetAttr add_suid;
  add_suid.mode = 06666;
  EXPECT_EQ(Code(store_->SetAttributes(bob_, f->ino(), add_suid)), StatusCode::kNotPermitted);
  // Without write permission, not even that.
  mode.mode = 06644;
  ASSERT_TRUE(store_->SetAttributes(alice_, f->ino(), mode).ok());
  SetAttr drop_both;
  drop_both.mode = 0644;
  EXPECT_EQ(Code(store_->SetAttributes(bob_, f->ino(), drop_both)), StatusCode::kNotPermitted);
  EXPECT_EQ(store_->GetAttr(f->ino())->mode(), 06644u);
}

// ftruncate: permission was decided at open, so a file's mode now does not stop a size change
// made through a descriptor opened for writing.
TEST_P(MetaStoreTest, SizeThroughAWritableHandleIgnoresTheModeNow) {
  auto f = store_->Create(alice_, store_->Mkdir(root_, kRootIno, "home", 0777)->ino(), "locked", 0);
  ASSERT_TRUE(f.ok());
  SetAttr size;
  size.size = 10;
  EXPECT_EQ(Code(store_->SetAttributes(alice_, f->ino(), size)), StatusCode::kPermissionDenied);
  size.through_writable_handle = true;
  auto r = store_->SetAttributes(alice_, f->ino(), size);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->size(), 10u);
}

TEST_P(MetaStoreTest, ExtendedAttributes) {
  auto f = store_->Create(root_, kRootIno, "f", 0644);
  ASSERT_TRUE(store_->SetXattr(root_, f->ino(), "user.tag", "v1").ok());
  ASSERT_TRUE(store_->SetXattr(root_, f->ino(), "trusted.secret", "s").ok());
  EXPECT_EQ(*store_->GetXattr(alice_, f->ino(), "user.tag"), "v1");  // readable by others (0644)
  EXPECT_EQ(Code(store_->SetXattr(alice_, f->ino(), "user.tag", "x")),
            StatusCode::kPermissionDenied);
  EXPECT_EQ(Code(store_->GetXattr(alice_, f->ino(), "trusted.secret")), StatusCode::kNotPermitted);
  EXPECT_THAT(*store_->ListXattrs(alice_, f->ino()), ElementsAre("user.tag"));
  EXPECT_THAT(*store_->ListXattrs(root_, f->ino()), ElementsAre("trusted.secret", "user.tag"));
  EXPECT_EQ(Code(store_->SetXattr(root_, f->ino(), "user.tag", "v2", kXattrCreate)),
            StatusCode::kAlreadyExists);
  EXPECT_EQ(Code(store_->SetXattr(root_, f->ino(), "user.new", "v", kXattrReplace)),
            StatusCode::kNoAttribute);
  EXPECT_EQ(Code(store_->SetXattr(root_, f->ino(), "nonamespace", "v")), StatusCode::kNotSupported);
  EXPECT_EQ(Code(store_->SetXattr(root_, f->ino(), "user.big", std::string(70000, 'x'))),
            StatusCode::kOutOfRange);
  ASSERT_TRUE(store_->RemoveXattr(root_, f->ino(), "user.tag").ok());
  EXPECT_EQ(Code(store_->GetXattr(root_, f->ino(), "user.tag")), StatusCode::kNoAttribute);
  EXPECT_EQ(Code(store_->RemoveXattr(root_, f->ino(), "user.tag")), StatusCode::kNoAttribute);
}

// Group commit: changes are applied and logged at once, and one sync makes every change logged
// so far durable; a close that only ends a session needs none.
TEST_P(MetaStoreTest, ChangesShareOneSyncAndBareClosesNeedNone) {
  ASSERT_TRUE(store_->AwaitDurable().ok());
  const uint64_t syncs = store_->LogSyncs();
  // etcd syncs on its own (a commit is on a majority's disks when it returns): no log syncs.
  const uint64_t sync = etcd() ? 0 : 1;
  const uint64_t batches = store_->LoggedBatches();
  std::vector<uint64_t> inos;
  for (const char* name : {"a", "b", "c"}) {
    auto f = store_->Create(root_, kRootIno, name, 0644, 0, fs3rpc::INODE_FILE, 0, /*open=*/true);
    ASSERT_TRUE(f.ok()) << f.status();
    inos.push_back(f->ino());
  }
  EXPECT_EQ(store_->LoggedBatches(), batches + 3);
  EXPECT_EQ(store_->LogSyncs(), syncs);  // nothing waited yet
  ASSERT_TRUE(store_->AwaitDurable().ok());
  EXPECT_EQ(store_->LogSyncs(), syncs + 1 * sync);  // the three share one sync
  ASSERT_TRUE(store_->AwaitDurable().ok());
  EXPECT_EQ(store_->LogSyncs(), syncs + 1 * sync);  // and a read after them waits for nothing more

  // Closing a session (the length as it was) is logged but needs no sync of its own...
  ASSERT_TRUE(store_->CloseSession(inos[0], std::nullopt).ok());
  ASSERT_TRUE(store_->CloseSession(inos[1], 0).ok());
  ASSERT_TRUE(store_->AwaitDurable().ok());
  EXPECT_EQ(store_->LogSyncs(), syncs + 1 * sync);
  // ...but one that grows the length does, as does one that ends an unlinked file.
  ASSERT_TRUE(store_->CloseSession(inos[2], 4096).ok());
  ASSERT_TRUE(store_->AwaitDurable().ok());
  EXPECT_EQ(store_->LogSyncs(), syncs + 2 * sync);
  ASSERT_TRUE(store_->OpenSession(inos[0]).ok());
  ASSERT_TRUE(store_->Unlink(root_, kRootIno, "a").ok());
  ASSERT_TRUE(store_->AwaitDurable().ok());
  EXPECT_EQ(store_->LogSyncs(), syncs + 3 * sync);
  ASSERT_TRUE(store_->CloseSession(inos[0], std::nullopt).ok());
  ASSERT_TRUE(store_->AwaitDurable().ok());
  EXPECT_EQ(store_->LogSyncs(), syncs + 4 * sync);
  EXPECT_THAT(*store_->Garbage(), ElementsAre(inos[0]));

  // What was logged is there after a reopen (the log is replayed), lazy closes included.
  Reopen();
  EXPECT_EQ(store_->GetAttr(inos[1])->sessions(), 0u);
  EXPECT_EQ(store_->GetAttr(inos[2])->size(), 4096u);
  EXPECT_EQ(Code(store_->GetAttr(inos[0])), StatusCode::kNotFound);
  EXPECT_THAT(Names(kRootIno), ElementsAre("b", "c"));
}

// Operations from many threads at once: each sees the others' changes and nothing is lost.
TEST_P(MetaStoreTest, ConcurrentOperationsAllLand) {
  constexpr int kThreads = 8, kFiles = 40;
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kFiles; ++i) {
        const std::string name = "t" + std::to_string(t) + "-" + std::to_string(i);
        auto f = store_->Create(root_, kRootIno, name, 0644);
        if (!f.ok() || !store_->AwaitDurable().ok()) {
          ADD_FAILURE() << "create " << name << ": " << f.status();
          ++failures;
        }
        if (i % 2 == 1) {
          Status st = store_->Unlink(root_, kRootIno, name);
          if (!st.ok() || !store_->AwaitDurable().ok()) {
            ADD_FAILURE() << "unlink " << name << ": " << st;
            ++failures;
          }
        }
      }
    });
  }
  for (auto& th : threads)
    th.join();
  EXPECT_EQ(failures.load(), 0);
  Reopen();
  EXPECT_EQ(Names(kRootIno).size(), static_cast<size_t>(kThreads * kFiles / 2));
  EXPECT_TRUE(store_->Fsck(false)->problems.empty());
}

TEST_P(MetaStoreTest, FsckFindsAndRepairsInconsistencies) {
  auto d = store_->Mkdir(root_, kRootIno, "d", 0755);
  auto f = store_->Create(root_, d->ino(), "f", 0644);
  ASSERT_TRUE(store_->Link(root_, f->ino(), kRootIno, "f2").ok());
  ASSERT_TRUE(store_->Symlink(root_, kRootIno, "s", "d/f").ok());
  EXPECT_TRUE(store_->Fsck(false)->problems.empty());  // a clean namespace
  // Damage it behind the store's back: a dangling entry, a wrong link count, an orphan.
  auto key = [](const std::string& prefix, uint64_t v) {
    std::string s = prefix;
    for (int i = 7; i >= 0; --i)
      s += static_cast<char>((v >> (8 * i)) & 0xff);
    return s;
  };
  fs3rpc::Dentry ghost;
  ghost.set_ino(424242);
  RawPut(key("d/", kRootIno) + "ghost", ghost.SerializeAsString());
  fs3rpc::Inode file = *f;
  file.set_nlink(7);
  RawPut(key("i/", f->ino()), file.SerializeAsString());
  fs3rpc::Inode orphan = *f;
  orphan.set_ino(900000);
  orphan.set_nlink(1);
  RawPut(key("i/", 900000), orphan.SerializeAsString());
  Reopen();
  auto found = store_->Fsck(false);
  ASSERT_TRUE(found.ok());
  // + the inode counter is behind the orphan's number, + (RocksDB, which keeps a count) the inode
  // count misses the orphan.
  const std::size_t problems = etcd() ? 4 : 5;
  EXPECT_EQ(found->problems.size(), problems);
  auto repaired = store_->Fsck(true);
  ASSERT_TRUE(repaired.ok()) << repaired.status();
  EXPECT_EQ(repaired->problems.size(), problems);
  EXPECT_EQ(repaired->repaired, problems);
  EXPECT_EQ(repaired->left, 0u);
  EXPECT_TRUE(store_->Fsck(false)->problems.empty());
  EXPECT_EQ(store_->GetAttr(f->ino())->nlink(), 2u);
  EXPECT_EQ(Code(store_->Lookup(root_, kRootIno, "ghost")), StatusCode::kNotFound);
  EXPECT_THAT(*store_->Garbage(), ElementsAre(900000u));
  auto next = store_->Create(root_, kRootIno, "new", 0644);
  EXPECT_GT(next->ino(), 900000u);
  // Live inodes: root, d, f, s, new (the orphan went to the garbage list).
  EXPECT_EQ(*store_->InodeCount(), 5u);
}

// fsck reads a snapshot without the store's lock: operations go on while it checks, and one that
// changes what it found (a link that makes the orphan it is about to remove reachable again)
// makes its repair leave that alone, for the next check, instead of deleting a linked file.
TEST_P(MetaStoreTest, FsckRunsBesideLiveOperationsAndLeavesWhatTheyChanged) {
  auto f = store_->Create(root_, kRootIno, "f", 0644);
  ASSERT_TRUE(f.ok()) << f.status();
  std::string key = "i/";
  for (int i = 7; i >= 0; --i)
    key += static_cast<char>((uint64_t{900000} >> (8 * i)) & 0xff);
  fs3rpc::Inode orphan = *f;
  orphan.set_ino(900000);
  orphan.set_nlink(1);
  RawPut(key, orphan.SerializeAsString());  // no entry, not open
  Reopen();
  bool injected = false, ran_meanwhile = false;
  auto report = store_->Fsck(true, [&](const MetaStore::FsckProgress& p) {
    if (p.phase != "checking" || injected) return;
    injected = true;
    // Another client, between the check's reading and its repairs: a create, and a link to the
    // orphan. Neither waits for the check.
    auto op = std::async(std::launch::async, [&] {
      return store_->Create(root_, kRootIno, "during", 0644).ok() &&
             store_->Link(root_, 900000, kRootIno, "adopted").ok();
    });
    ASSERT_EQ(op.wait_for(20s), std::future_status::ready) << "the check held the namespace";
    ran_meanwhile = op.get();
  });
  ASSERT_TRUE(report.ok()) << report.status();
  ASSERT_TRUE(injected) << "the check never reported its checking phase";
  EXPECT_TRUE(ran_meanwhile);
  EXPECT_THAT(report->problems,
              ::testing::Contains("inode 900000 is orphaned (no entry, not open)"));
  EXPECT_EQ(report->left, 1u) << "the orphan changed under the check";
  EXPECT_EQ(report->repaired + report->left, report->problems.size());
  // The adopted file is still there, and its data is not queued for deletion.
  ASSERT_TRUE(store_->Lookup(root_, kRootIno, "adopted").ok());
  EXPECT_TRUE(store_->Garbage()->empty());
  // The next check judges it as it is now (linked once, its count still says 2) and mends it.
  auto next = store_->Fsck(true);
  ASSERT_TRUE(next.ok()) << next.status();
  EXPECT_THAT(next->problems, ElementsAre("inode 900000 has link count 2, entries say 1"));
  EXPECT_TRUE(store_->Fsck(false)->problems.empty());
  EXPECT_EQ(store_->GetAttr(900000)->nlink(), 1u);
  // Live inodes: root, f, during, the adopted orphan.
  EXPECT_EQ(*store_->InodeCount(), 4u);
}

// A repair of more problems than one etcd transaction holds (--max-txn-ops) is applied in passes:
// 700 dangling entries, all reported and all removed by one fsck --repair.
TEST_P(MetaStoreTest, ARepairLargerThanOneTransactionIsAppliedInPasses) {
  constexpr int kGhosts = 700;
  std::string dir_prefix = "d/";
  for (int i = 7; i >= 0; --i)
    dir_prefix += static_cast<char>((kRootIno >> (8 * i)) & 0xff);
  std::vector<std::pair<std::string, std::string>> rows;
  for (int i = 0; i < kGhosts; ++i) {
    fs3rpc::Dentry ghost;
    ghost.set_ino(5000000 + i);
    rows.emplace_back(dir_prefix + "ghost" + std::to_string(i), ghost.SerializeAsString());
  }
  RawPutMany(rows);
  Reopen();
  auto found = store_->Fsck(false);
  ASSERT_TRUE(found.ok()) << found.status();
  EXPECT_EQ(found->problems.size(), static_cast<std::size_t>(kGhosts));
  auto repaired = store_->Fsck(true);
  ASSERT_TRUE(repaired.ok()) << repaired.status();
  EXPECT_EQ(repaired->problems.size(), static_cast<std::size_t>(kGhosts));
  auto after = store_->Fsck(false);
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_TRUE(after->problems.empty())
      << after->problems.size() << " problems left, first: " << after->problems.front();
  EXPECT_TRUE(Names(kRootIno).empty());
}

TEST_P(MetaStoreTest, LayoutsPickStripeChainsAndAreInherited) {
  const std::vector<uint32_t> chains = {11, 12, 13, 14, 15};
  auto d = store_->Mkdir(root_, kRootIno, "d", 0755);
  ASSERT_TRUE(d.ok());
  Caller alice{1000, 1000, {}};
  EXPECT_EQ(Code(store_->SetStripe(alice, d->ino(), 2)), StatusCode::kNotPermitted);
  EXPECT_EQ(Code(store_->SetStripe(root_, d->ino(), 0)), StatusCode::kInvalidArgument);
  ASSERT_TRUE(store_->SetStripe(root_, d->ino(), 2).ok());
  auto sub = store_->Mkdir(root_, d->ino(), "sub", 0755);  // inherits the stripe
  ASSERT_TRUE(sub.ok());
  EXPECT_EQ(sub->layout().stripe(), 2u);
  std::set<uint32_t> used;
  for (int i = 0; i < 5; ++i) {
    auto f = store_->Create(root_, sub->ino(), "f" + std::to_string(i), 0644, 0, fs3rpc::INODE_FILE,
                            0, false, chains);
    ASSERT_TRUE(f.ok());
    ASSERT_EQ(f->layout().chains_size(), 2);
    EXPECT_EQ(f->layout().chunk_size(), 1u << 20);  // the root's
    // Two neighbouring chains of the table.
    const auto first = std::find(chains.begin(), chains.end(), f->layout().chains(0));
    ASSERT_NE(first, chains.end());
    EXPECT_EQ(f->layout().chains(1), chains[(first - chains.begin() + 1) % chains.size()]);
    used.insert(f->layout().chains(0));
  }
  EXPECT_EQ(used.size(), chains.size());  // files start on every chain in turn
  // A stripe wider than the table uses every chain once; no chain ids: no chains.
  ASSERT_TRUE(store_->SetStripe(root_, d->ino(), 16).ok());
  auto wide =
      store_->Create(root_, d->ino(), "wide", 0644, 0, fs3rpc::INODE_FILE, 0, false, chains);
  EXPECT_EQ(wide->layout().chains_size(), 5);
  EXPECT_EQ(store_->Create(root_, d->ino(), "plain", 0644)->layout().chains_size(), 0);
  // Removed, the file's layout goes with it to the garbage list.
  ASSERT_TRUE(store_->Unlink(root_, d->ino(), "wide").ok());
  auto queued = store_->GarbageLayout(wide->ino());
  ASSERT_TRUE(queued.ok());
  EXPECT_EQ(queued->chains_size(), 5);
}

TEST_P(MetaStoreTest, RetriedMutationsAreAppliedOnceAcrossRestarts) {
  ASSERT_TRUE(store_->Create(root_, kRootIno, "a", 0644).ok());
  ASSERT_TRUE(store_->Create(root_, kRootIno, "b", 0644).ok());
  ASSERT_TRUE(store_->Rename(root_, kRootIno, "a", kRootIno, "c", 0, 77).ok());
  ASSERT_TRUE(store_->Unlink(root_, kRootIno, "b", 78).ok());
  Reopen();  // the answers were lost; the client retries against a restarted service
  EXPECT_TRUE(store_->Rename(root_, kRootIno, "a", kRootIno, "c", 0, 77).ok());
  EXPECT_TRUE(store_->Unlink(root_, kRootIno, "b", 78).ok());
  EXPECT_TRUE(store_->Lookup(root_, kRootIno, "c").ok());
  // A new request (another id) is judged afresh.
  EXPECT_EQ(Code(store_->Unlink(root_, kRootIno, "b", 79)), StatusCode::kNotFound);
  EXPECT_EQ(*store_->PruneRequests(3600), 0u);  // still fresh
  EXPECT_TRUE(store_->Fsck(false)->problems.empty());
}

// A record that cannot be read is an error, never "no such entry": taken for a missing entry, a
// lookup would say ENOENT and a create would write a new file over the old one's name.
TEST_P(MetaStoreTest, AnUnreadableEntryIsAnErrorNotAMissingOne) {
  auto f = store_->Create(root_, kRootIno, "victim", 0644);
  ASSERT_TRUE(f.ok()) << f.status();
  CorruptRecordEndingWith("victim");
  Reopen();
  auto looked = store_->Lookup(root_, kRootIno, "victim");
  ASSERT_FALSE(looked.ok());
  EXPECT_EQ(looked.status().code(), StatusCode::kDataLoss) << looked.status();
  EXPECT_THAT(looked.status().message(), ::testing::HasSubstr("corrupt"));
  auto again = store_->Create(root_, kRootIno, "victim", 0644);
  EXPECT_EQ(Code(again), StatusCode::kDataLoss) << "created over an unreadable entry";
  EXPECT_EQ(Code(store_->Unlink(root_, kRootIno, "victim")), StatusCode::kDataLoss);
  EXPECT_EQ(Code(store_->Rename(root_, kRootIno, "victim", kRootIno, "other")),
            StatusCode::kDataLoss);
  // Other names are unaffected.
  EXPECT_TRUE(store_->Create(root_, kRootIno, "fine", 0644).ok());
}

// fsck's data check: chunks whose file cannot be read are not "chunks of no file"; a repair must
// not queue a live file's data for deletion because its record could not be read.
TEST_P(MetaStoreTest, DataCheckStopsAtAnUnreadableInodeInsteadOfDeletingItsChunks) {
  auto f = store_->Create(root_, kRootIno, "precious", 0644);
  ASSERT_TRUE(f.ok()) << f.status();
  const uint64_t ino = f->ino();
  std::string be8(8, '\0');
  for (int i = 0; i < 8; ++i)
    be8[i] = static_cast<char>((ino >> (56 - 8 * i)) & 0xff);
  CorruptRecordEndingWith("i/" + be8);
  Reopen();
  auto problems = store_->CheckData({{ino, 4096}}, /*repair=*/true);
  ASSERT_FALSE(problems.ok()) << "reported: "
                              << (problems.ok() && !problems->problems.empty()
                                      ? problems->problems[0]
                                      : "");
  EXPECT_EQ(problems.status().code(), StatusCode::kDataLoss) << problems.status();
  // Nothing was queued for deletion: a second check still stops at the same record.
  EXPECT_EQ(Code(store_->CheckData({{ino, 4096}}, /*repair=*/true)), StatusCode::kDataLoss);
}

test::TempDir* MetaStoreTest::etcd_dir_ = nullptr;
test::EtcdCluster* MetaStoreTest::etcd_ = nullptr;
etcd::Client* MetaStoreTest::client_ = nullptr;

std::string EngineName(const ::testing::TestParamInfo<std::string>& p) {
  return p.param;
}

INSTANTIATE_TEST_SUITE_P(Engines, MetaStoreTest,
                         ::testing::Values(std::string("rocksdb"), std::string("etcd")),
                         EngineName);

}  // namespace
}  // namespace ff::fs3
