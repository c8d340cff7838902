// fs3-meta highly available: two real fs3-meta servers over one namespace in a real three-member
// etcd cluster; a client spreading its calls over both. Servers and etcd members are killed -9
// during a create/rename/unlink storm: no call fails, and afterwards the namespace holds exactly
// what the acknowledged operations say (a history check) and fsck finds it clean.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <atomic>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include "common/etcd.h"
#include "fs3/meta_client.h"
#include "tests/support/daemons.h"
#include "tests/support/etcd_cluster.h"
#include "tests/support/subprocess.h"

namespace ff {
namespace {

using namespace std::chrono_literals;
using fs3::MetaClient;
using fs3::MetaClientOptions;
constexpr uint64_t kRoot = 1;

class MetaHaTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(etcd_.Start());
    std::string endpoints;
    for (const std::string& e : etcd_.endpoints())
      endpoints += (endpoints.empty() ? "\"" : ", \"") + e + "\"";
    for (const char* name : {"meta1", "meta2"}) {
      daemons_.Write(name, std::string("[meta]\nengine = \"etcd\"\netcd_endpoints = [") +
                               endpoints + "]\netcd_prefix = \"/test/meta/\"\nname = \"" + name +
                               "\"\n");
      ASSERT_TRUE(daemons_.Start(name, FF_FS3_META_PATH));
    }
    addresses_ = daemons_.ReadyField("meta1", "rpc") + "," + daemons_.ReadyField("meta2", "rpc");
    client_ = std::make_unique<MetaClient>(MetaClientOptions{.address = addresses_});
    etcd_client_ = std::move(*etcd::Client::Make({.endpoints = etcd_.endpoints()}));
  }

  Result<fs3rpc::Inode> Make(MetaClient& c, uint64_t parent, const std::string& name,
                             fs3rpc::InodeType type, uint64_t request_id) {
    fs3rpc::MakeRequest r;
    r.set_parent(parent);
    r.set_name(name);
    r.set_mode(type == fs3rpc::INODE_DIR ? 0755 : 0644);
    r.set_type(type);
    r.set_request_id(request_id);
    fs3rpc::Inode out;
    FF_RETURN_IF_ERROR(c.Make(r, &out));
    return out;
  }
  std::set<std::string> Names(MetaClient& c, uint64_t dir) {
    std::set<std::string> out;
    std::string cursor;
    for (;;) {
      fs3rpc::ReaddirRequest r;
      r.set_ino(dir);
      r.set_cursor(cursor);
      r.set_limit(500);
      fs3rpc::ReaddirReply reply;
      Status st = c.Readdir(r, &reply);
      EXPECT_TRUE(st.ok()) << st;
      if (!st.ok() || reply.entries().empty()) return out;
      for (const auto& e : reply.entries())
        out.insert(e.name());
      cursor = reply.entries().rbegin()->name();
    }
  }
  std::string GcLeader() {
    auto kv = etcd_client_->Get("/test/meta/gc-leader");
    return kv.ok() && *kv ? (*kv)->value : "";
  }

  test::TempDir dir_;
  test::EtcdCluster etcd_{dir_, 3};
  test::Daemons daemons_{dir_};
  std::string addresses_;
  std::unique_ptr<MetaClient> client_;
  std::unique_ptr<etcd::Client> etcd_client_;
};

TEST_F(MetaHaTest, TwoServersServeOneNamespace) {
  MetaClient one(MetaClientOptions{.address = daemons_.ReadyField("meta1", "rpc")});
  MetaClient two(MetaClientOptions{.address = daemons_.ReadyField("meta2", "rpc")});
  auto d = Make(one, kRoot, "shared", fs3rpc::INODE_DIR, 1);
  ASSERT_TRUE(d.ok()) << d.status();
  ASSERT_TRUE(Make(two, d->ino(), "from-two", fs3rpc::INODE_FILE, 2).ok());
  EXPECT_THAT(Names(one, d->ino()), ::testing::ElementsAre("from-two"));
  // A name taken on one server is taken on the other.
  EXPECT_EQ(Make(one, d->ino(), "from-two", fs3rpc::INODE_FILE, 3).status().code(),
            StatusCode::kAlreadyExists);
  // Inode numbers never collide although each server hands out its own block.
  auto a = Make(one, kRoot, "a", fs3rpc::INODE_FILE, 4);
  auto b = Make(two, kRoot, "b", fs3rpc::INODE_FILE, 5);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_NE(a->ino(), b->ino());
  // Exactly one of them collects garbage.
  std::string leader;
  for (int i = 0; i < 100 && leader.empty(); ++i) {
    leader = GcLeader();
    std::this_thread::sleep_for(50ms);
  }
  EXPECT_TRUE(leader == "meta1" || leader == "meta2") << leader;
}

// Threads create, rename and unlink files through the client (both servers); meanwhile one
// server is killed -9 and started again, then the other, then an etcd member. Every call must
// succeed, and the namespace afterwards must be what the acknowledged calls say.
TEST_F(MetaHaTest, AStormSurvivesKilledServersAndAnEtcdMember) {
  constexpr int kThreads = 4;
  std::vector<uint64_t> dirs;
  for (int t = 0; t < kThreads; ++t) {
    auto d = Make(*client_, kRoot, "w" + std::to_string(t), fs3rpc::INODE_DIR, 1000 + t);
    ASSERT_TRUE(d.ok()) << d.status();
    dirs.push_back(d->ino());
  }
  std::atomic<bool> stop{false};
  std::atomic<int> failures{0};
  std::atomic<uint64_t> ops{0};
  std::vector<std::set<std::string>> expected(kThreads);  // per thread: its acknowledged names
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      uint64_t request = (static_cast<uint64_t>(t) + 1) << 40;
      for (int i = 0; !stop; ++i) {
        const std::string name = "f" + std::to_string(i);
        auto made = Make(*client_, dirs[t], name, fs3rpc::INODE_FILE, ++request);
        if (!made.ok()) {
          ADD_FAILURE() << "create " << name << ": " << made.status();
          ++failures;
          return;
        }
        expected[t].insert(name);
        ++ops;
        std::string current = name;
        if (i % 2 == 0) {
          fs3rpc::RenameRequest r;
          r.set_src_parent(dirs[t]);
          r.set_src_name(name);
          r.set_dst_parent(dirs[t]);
          r.set_dst_name("r" + std::to_string(i));
          r.set_request_id(++request);
          fs3rpc::DirsReply reply;
          Status st = client_->Rename(r, &reply);
          if (!st.ok()) {
            ADD_FAILURE() << "rename " << name << ": " << st;
            ++failures;
            return;
          }
          expected[t].erase(name);
          current = "r" + std::to_string(i);
          expected[t].insert(current);
          ++ops;
        }
        if (i % 3 == 0) {
          fs3rpc::NameRequest r;
          r.set_parent(dirs[t]);
          r.set_name(current);
          r.set_request_id(++request);
          fs3rpc::DirsReply reply;
          Status st = client_->Unlink(r, &reply);
          if (!st.ok()) {
            ADD_FAILURE() << "unlink " << r.name() << ": " << st;
            ++failures;
            return;
          }
          expected[t].erase(r.name());
          ++ops;
        }
      }
    });
  }
  auto progress = [&](uint64_t more) {
    const uint64_t until = ops + more;
    for (int i = 0; i < 600 && ops < until && failures == 0; ++i)
      std::this_thread::sleep_for(50ms);
    EXPECT_GE(ops.load(), until) << "the storm stalled";
  };
  progress(100);
  daemons_.Kill("meta1");
  progress(100);  // all calls go to meta2 now
  ASSERT_TRUE(daemons_.Start("meta1", FF_FS3_META_PATH));
  progress(50);
  daemons_.Kill("meta2");
  progress(100);
  ASSERT_TRUE(daemons_.Start("meta2", FF_FS3_META_PATH));
  etcd_.Kill(0);
  progress(100);  // two members of three: still a quorum
  ASSERT_TRUE(etcd_.StartMember(0));
  progress(50);
  stop = true;
  for (auto& t : threads)
    t.join();
  ASSERT_EQ(failures, 0);

  // The history check: every directory holds exactly the names its acknowledged calls left.
  for (int t = 0; t < kThreads; ++t) {
    EXPECT_EQ(Names(*client_, dirs[t]), expected[t]) << "directory w" << t;
  }
  fs3rpc::FsckRequest req;
  fs3rpc::FsckReply reply;
  ASSERT_TRUE(client_->Fsck(req, &reply).ok());
  EXPECT_THAT(reply.problems(), ::testing::IsEmpty());
  // The garbage collector's leader is a live server.
  std::string leader;
  for (int i = 0; i < 100 && leader.empty(); ++i) {
    leader = GcLeader();
    std::this_thread::sleep_for(50ms);
  }
  EXPECT_TRUE(leader == "meta1" || leader == "meta2") << leader;
}

// Without a majority of etcd, calls fail with an error (no hang past their deadline, nothing
// half-done); with the majority back, everything acknowledged before is there.
TEST_F(MetaHaTest, LosingTheEtcdMajorityStopsServiceCleanlyAndItResumes) {
  auto before = Make(*client_, kRoot, "before", fs3rpc::INODE_FILE, 1);
  ASSERT_TRUE(before.ok()) << before.status();
  etcd_.Kill(1);
  etcd_.Kill(2);
  MetaClient impatient(MetaClientOptions{
      .address = addresses_,
      .call = CallOptions{.deadline = 3s, .idempotent = true, .max_attempts = 2}});
  const auto start = std::chrono::steady_clock::now();
  auto during = Make(impatient, kRoot, "during", fs3rpc::INODE_FILE, 2);
  EXPECT_FALSE(during.ok());
  EXPECT_LT(std::chrono::steady_clock::now() - start, 20s);
  ASSERT_TRUE(etcd_.StartMember(1));
  ASSERT_TRUE(etcd_.StartMember(2));
  ASSERT_TRUE(etcd_.WaitHealthy());
  // The failed create may or may not have happened (its answer was lost); its retry with the
  // same request id settles it either way.
  auto retried = Make(*client_, kRoot, "during", fs3rpc::INODE_FILE, 2);
  ASSERT_TRUE(retried.ok()) << retried.status();
  EXPECT_THAT(Names(*client_, kRoot), ::testing::ElementsAre("before", "during"));
}

}  // namespace
}  // namespace ff
