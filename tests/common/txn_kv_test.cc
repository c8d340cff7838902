// The transactional key-value interface on both engines (RocksDB serial, etcd optimistic), and
// ProtoDb's etcd engine with its fence, against real RocksDB and a real etcd member.
#include "common/txn_kv.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "common/etcd.h"
#include "common/leader_election.h"
#include "common/proto/etcd.pb.h"
#include "tests/support/etcd_cluster.h"

namespace ff {
namespace {

class TxnKvTest : public ::testing::TestWithParam<std::string> {
 protected:
  static void SetUpTestSuite() {
    dir_ = new test::TempDir();
    etcd_ = new test::EtcdCluster(*dir_, 1);
    ASSERT_TRUE(etcd_->Start());
    client_ = etcd::Client::Make({.endpoints = etcd_->endpoints()})->release();
  }
  static void TearDownTestSuite() {
    delete client_;
    delete etcd_;
    delete dir_;
  }
  void SetUp() override {
    static int n = 0;
    const std::string name = "kv" + std::to_string(++n);
    if (GetParam() == "etcd") {
      kv_ = std::move(*TxnKv::OpenEtcd(client_, "/" + name + "/"));
    } else {
      kv_ = TxnKv::OpenSerial(std::move(*ProtoDb::Open(dir_->File(name))));
    }
  }
  Status Set(const std::string& key, const std::string& value) {
    return kv_->Run([&](KvTxn& t) {
      t.Put(key, value);
      return Status::Ok();
    });
  }
  std::optional<std::string> Value(const std::string& key) {
    return *kv_->Run([&](KvTxn& t) { return t.Get(key); });
  }

  static test::TempDir* dir_;
  static test::EtcdCluster* etcd_;
  static etcd::Client* client_;
  std::unique_ptr<TxnKv> kv_;
};

test::TempDir* TxnKvTest::dir_ = nullptr;
test::EtcdCluster* TxnKvTest::etcd_ = nullptr;
etcd::Client* TxnKvTest::client_ = nullptr;

using Rows = std::vector<std::pair<std::string, std::string>>;

TEST_P(TxnKvTest, ReadsSeeTheTransactionsOwnWrites) {
  ASSERT_TRUE(Set("d/a", "1").ok());
  ASSERT_TRUE(Set("d/c", "3").ok());
  ASSERT_TRUE(Set("e/x", "x").ok());
  auto r = kv_->Run([&](KvTxn& t) -> Result<Rows> {
    t.Put("d/b", "2");
    t.Delete("d/a");
    t.Put("d/c", "three");
    FF_ASSIGN_OR_RETURN(auto got, t.Get("d/a"));
    EXPECT_FALSE(got);
    FF_ASSIGN_OR_RETURN(got, t.Get("d/c"));
    EXPECT_EQ(got, "three");
    // Several at once: the transaction's own writes and committed values alike.
    FF_ASSIGN_OR_RETURN(auto many, t.GetMany({"e/x", "d/a", "d/c", "d/none", "d/b"}));
    EXPECT_EQ(many, (std::vector<std::optional<std::string>>{"x", std::nullopt, "three",
                                                             std::nullopt, "2"}));
    return t.Scan("d/", "", 10);
  });
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(*r, (Rows{{"d/b", "2"}, {"d/c", "three"}}));
  // Committed: seen by the next transaction; limits and cursors hold.
  auto after = kv_->Run([&](KvTxn& t) { return t.Scan("d/", "d/b", 10); });
  EXPECT_EQ(*after, (Rows{{"d/c", "three"}}));
  auto first = kv_->Run([&](KvTxn& t) { return t.Scan("d/", "", 1); });
  EXPECT_EQ(*first, (Rows{{"d/b", "2"}}));
  EXPECT_EQ(*kv_->CountKeys("d/"), 2u);
  // A transaction whose operation fails commits nothing.
  Status failed = kv_->Run([&](KvTxn& t) {
    t.Put("d/z", "never");
    return NotFound("changed my mind");
  });
  EXPECT_EQ(failed.code(), StatusCode::kNotFound);
  EXPECT_FALSE(Value("d/z"));
}

// Counters incremented from 8 threads: every increment lands exactly once (the serial engine runs
// them one at a time, the optimistic one retries the losers of each conflict).
TEST_P(TxnKvTest, ConcurrentReadModifyWritesAllLand) {
  constexpr int kThreads = 8, kEach = 25;
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int i = 0; i < kThreads; ++i) {
    threads.emplace_back([&] {
      for (int j = 0; j < kEach; ++j) {
        Status st = kv_->Run([&](KvTxn& t) -> Status {
          FF_ASSIGN_OR_RETURN(auto v, t.Get("counter"));
          t.Put("counter", std::to_string(v ? std::stoi(*v) + 1 : 1));
          return Status::Ok();
        });
        if (!st.ok()) {
          ADD_FAILURE() << st;
          ++failures;
        }
      }
    });
  }
  for (auto& t : threads)
    t.join();
  EXPECT_EQ(failures, 0);
  EXPECT_EQ(Value("counter"), std::to_string(kThreads * kEach));
  if (GetParam() == "etcd") {
    EXPECT_GT(kv_->Conflicts(), 0u) << "8 threads on one key should have conflicted";
  } else {
    EXPECT_EQ(kv_->Conflicts(), 0u);
  }
}

// Updates from 8 threads, each to its own key and to one of two shared keys: on etcd, commits
// that meet no other go to etcd together (group commit), those that share a key apart, and a
// group whose comparisons fail splits; every increment lands exactly once.
TEST_P(TxnKvTest, GroupedUpdatesAllLandOnce) {
  constexpr int kThreads = 8, kEach = 30;
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i) {
    threads.emplace_back([&, i] {
      for (int j = 0; j < kEach; ++j) {
        const bool shared = j % 3 == 0;
        Status st = kv_->RunUpdate([&](KvTxn& t) -> Status {
          const std::string key =
              shared ? "shared/" + std::to_string(i % 2) : "own/" + std::to_string(i);
          FF_ASSIGN_OR_RETURN(auto v, t.Get(key));
          t.Put(key, std::to_string(v ? std::stoi(*v) + 1 : 1));
          return Status::Ok();
        });
        EXPECT_TRUE(st.ok()) << st;
      }
    });
  }
  for (auto& t : threads)
    t.join();
  int total = 0;
  for (int i = 0; i < kThreads; ++i) {
    auto own = Value("own/" + std::to_string(i));
    ASSERT_TRUE(own);
    total += std::stoi(*own);
  }
  for (int i = 0; i < 2; ++i)
    total += std::stoi(Value("shared/" + std::to_string(i)).value_or("0"));
  EXPECT_EQ(total, kThreads * kEach);
  if (GetParam() == "etcd") {
    EXPECT_GT(kv_->GroupedCommits(), 0u) << "8 threads committing at once never shared a request";
  }
}

// An update that ends without committing (an error, or nothing to change) may have read a
// member's copy a moment behind: on etcd it runs again reading the newest state, and its answer is
// that run's.
TEST_P(TxnKvTest, AnUpdateThatCommitsNothingIsAnsweredFromTheNewestState) {
  ASSERT_TRUE(Set("u", "1").ok());
  int runs = 0;
  Status st = kv_->RunUpdate([&](KvTxn& t) -> Status {
    ++runs;
    FF_ASSIGN_OR_RETURN(auto v, t.Get("u"));
    return v ? FailedPrecondition("u is set") : Status::Ok();
  });
  EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(runs, GetParam() == "etcd" ? 2 : 1);
  runs = 0;
  auto v = kv_->RunUpdate([&](KvTxn& t) {
    ++runs;
    return t.Get("u");
  });
  EXPECT_EQ(*v, "1");
  EXPECT_EQ(runs, GetParam() == "etcd" ? 2 : 1);
}

// A key assumed absent unread (etcd's first attempt): a wrong assumption conflicts at commit and
// the operation runs again reading the key; a right one costs no read.
TEST_P(TxnKvTest, AnAssumedAbsenceIsCheckedAtCommit) {
  ASSERT_TRUE(Set("mark", "x").ok());
  auto run = [&](int* runs) {
    return kv_->RunUpdate([&](KvTxn& t) -> Result<bool> {
      ++*runs;
      FF_ASSIGN_OR_RETURN(bool absent, t.AssumeAbsent("mark"));
      t.Put("seen", absent ? "absent" : "present");
      return absent;
    });
  };
  int runs = 0;
  auto absent = run(&runs);
  ASSERT_TRUE(absent.ok()) << absent.status();
  EXPECT_FALSE(*absent);
  EXPECT_EQ(Value("seen"), "present");
  EXPECT_EQ(runs, GetParam() == "etcd" ? 2 : 1) << "a wrong assumption runs again";
  ASSERT_TRUE(kv_->Run([&](KvTxn& t) {
                   t.Delete("mark");
                   return Status::Ok();
                 })
                  .ok());
  runs = 0;
  absent = run(&runs);
  ASSERT_TRUE(absent.ok()) << absent.status();
  EXPECT_TRUE(*absent);
  EXPECT_EQ(Value("seen"), "absent");
  EXPECT_EQ(runs, 1);
}

// The same for a range assumed to hold no key: one key in it makes the commit conflict, and the
// operation runs again scanning it.
TEST_P(TxnKvTest, AnAssumedEmptyRangeIsCheckedAtCommit) {
  ASSERT_TRUE(Set("sess/7/a", "").ok());
  auto run = [&](const std::string& prefix, int* runs) {
    return kv_->RunUpdate([&](KvTxn& t) -> Result<bool> {
      ++*runs;
      FF_ASSIGN_OR_RETURN(bool none, t.AssumeNoneUnder(prefix));
      t.Put("seen/" + prefix, none ? "none" : "some");
      return none;
    });
  };
  int runs = 0;
  auto none = run("sess/7/", &runs);
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_FALSE(*none);
  EXPECT_EQ(runs, GetParam() == "etcd" ? 2 : 1);
  runs = 0;
  none = run("sess/8/", &runs);
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_TRUE(*none);
  EXPECT_EQ(runs, 1) << "an empty range assumed empty commits at once";
  EXPECT_EQ(Value("seen/sess/8/"), "none");
}

// The optimistic engine's conflicts, one by one: a changed key, a key that appeared, a key added to
// a scanned range; and what does not conflict (reads only, disjoint keys).
TEST(EtcdTxnKv, CommitsFailWhenWhatTheyReadChanged) {
  test::TempDir dir;
  test::EtcdCluster etcd(dir, 1);
  ASSERT_TRUE(etcd.Start());
  auto client = std::move(*etcd::Client::Make({.endpoints = etcd.endpoints()}));
  auto kv = std::move(*TxnKv::OpenEtcd(client.get(), "/c/"));
  auto set = [&](const std::string& k, const std::string& v) {
    auto t = kv->Begin();
    t->Put(k, v);
    ASSERT_TRUE(t->Commit().ok());
  };
  set("k", "0");

  auto a = kv->Begin();
  ASSERT_EQ(*a->Get("k"), "0");
  a->Put("out", "a");
  set("k", "1");
  EXPECT_EQ(a->Commit().status().code(), StatusCode::kAborted) << "a changed key";

  auto b = kv->Begin();
  ASSERT_FALSE(*b->Get("absent"));
  b->Put("out", "b");
  set("absent", "now present");
  EXPECT_EQ(b->Commit().status().code(), StatusCode::kAborted) << "a key that appeared";

  auto c = kv->Begin();
  ASSERT_TRUE(c->Scan("dir/", "", 100)->empty());
  c->Put("out", "c");
  set("dir/new", "x");
  EXPECT_EQ(c->Commit().status().code(), StatusCode::kAborted) << "a key added to a scanned range";

  auto d = kv->Begin();
  ASSERT_EQ(*d->Get("k"), "1");
  d->Put("mine", "d");
  set("other", "y");  // not read by d
  EXPECT_TRUE(d->Commit().ok()) << "disjoint keys do not conflict";

  auto e = kv->Begin();
  ASSERT_EQ(*e->Get("k"), "1");
  set("k", "2");
  EXPECT_TRUE(e->Commit().ok()) << "a transaction without writes commits nothing, conflicts never";

  auto out = client->Get("/c/out");
  ASSERT_TRUE(out.ok());
  EXPECT_FALSE(*out) << "an aborted transaction wrote";
  EXPECT_EQ((*client->Get("/c/mine"))->value, "d");
}

TEST(EtcdProtoDb, RecordsLiveUnderTheirPrefixAndAFenceStopsADeposedWriter) {
  test::TempDir dir;
  test::EtcdCluster etcd(dir, 1);
  ASSERT_TRUE(etcd.Start());
  auto client = std::move(*etcd::Client::Make({.endpoints = etcd.endpoints()}));
  auto db = std::move(*ProtoDb::OpenEtcd(client.get(), "/db/"));
  EXPECT_STREQ(db->engine(), "etcd");
  etcdserverpb::KeyValue rec;
  rec.set_value("one");
  ASSERT_TRUE(db->Put("job/1", rec).ok());
  rec.set_value("two");
  ASSERT_TRUE(db->PutBatch({{"job/2", &rec}, {"node/a", &rec}}).ok());
  etcdserverpb::KeyValue got;
  ASSERT_TRUE(db->Get("job/1", &got).ok());
  EXPECT_EQ(got.value(), "one");
  EXPECT_EQ(db->Get("job/3", &got).code(), StatusCode::kNotFound);
  auto jobs = db->Scan<etcdserverpb::KeyValue>("job/");
  ASSERT_TRUE(jobs.ok());
  ASSERT_EQ(jobs->size(), 2u);
  EXPECT_EQ((*jobs)[1].value(), "two");
  auto page = db->ScanKeys("job/", "job/1", 10);
  ASSERT_EQ(page->size(), 1u);
  EXPECT_EQ((*page)[0].first, "job/2");
  ASSERT_TRUE(db->Delete("job/1").ok());
  EXPECT_EQ(db->Get("job/1", &got).code(), StatusCode::kNotFound);
  EXPECT_TRUE((*client->Get("/db/node/a")).has_value());

  // Two writers fenced by one election: only the leader's writes land.
  ElectionOptions opts{.key = "/db-leader", .value = "a", .ttl_s = 2};
  LeaderElection a(client.get(), opts);
  a.Start();
  for (int i = 0; i < 200 && !a.IsLeader(); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(25));
  ASSERT_TRUE(a.IsLeader());
  auto fenced = std::move(*ProtoDb::OpenEtcd(client.get(), "/db/", [&] { return a.Fence(); }));
  rec.set_value("by the leader");
  ASSERT_TRUE(fenced->Put("state", rec).ok());
  a.Resign();
  rec.set_value("by a deposed leader");
  Status late = fenced->Put("state", rec);
  EXPECT_EQ(late.code(), StatusCode::kFailedPrecondition) << late;
  ASSERT_TRUE(db->Get("state", &got).ok());
  EXPECT_EQ(got.value(), "by the leader");
}

std::string EngineName(const ::testing::TestParamInfo<std::string>& p) {
  return p.param;
}

INSTANTIATE_TEST_SUITE_P(Engines, TxnKvTest,
                         ::testing::Values(std::string("rocksdb"), std::string("etcd")),
                         EngineName);

}  // namespace
}  // namespace ff
