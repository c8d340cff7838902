// fs3-meta as a real process over its RocksDB: the namespace API, its errors, and crashes.
#include <fcntl.h>
#include <gmock/gmock.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mount.h>
#include <unistd.h>

#include <atomic>
#include <mutex>
#include <set>
#include <thread>

#include "common/net.h"
#include "common/rpc_client.h"
#include "common/rpc_status.h"
#include "fs3/meta_client.h"
#include "fs3/proto/meta.grpc.pb.h"
#include "tests/support/daemons.h"
#include "tests/support/full_disk.h"
#include "tests/support/http_get.h"
#include "tests/support/subprocess.h"

namespace ff {
namespace {

using namespace std::chrono_literals;
using fs3::MetaClient;
using fs3::MetaClientOptions;

class MetaServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    daemons_.Write("meta", "[meta]\ndata_dir = \"" + dir_.File("meta") + "\"\n");
    Start();
    address_ = daemons_.ReadyField("meta", "rpc");
    stub_ = fs3rpc::Meta::NewStub(MakeChannel(address_));
  }

  // (Again, at the same address: the config holds the port it bound first.)
  void Start() { ASSERT_TRUE(daemons_.Start("meta", FF_FS3_META_PATH)); }
  test::Subprocess& meta() { return daemons_.proc("meta"); }

  template <typename Req, typename Resp, typename Fn>
  Status Call(Fn fn, const Req& req, Resp* resp) {
    grpc::ClientContext c;
    c.set_deadline(std::chrono::system_clock::now() + 5s);
    return FromGrpcStatus((stub_.get()->*fn)(&c, req, resp));
  }

  Result<fs3rpc::Inode> Make(uint64_t parent, const std::string& name, fs3rpc::InodeType type,
                             uint64_t request_id = 0) {
    fs3rpc::MakeRequest r;
    r.set_parent(parent);
    r.set_name(name);
    r.set_mode(type == fs3rpc::INODE_DIR ? 0755 : 0644);
    r.set_type(type);
    r.set_request_id(request_id);
    if (type == fs3rpc::INODE_SYMLINK) r.set_symlink_target("target");
    fs3rpc::Inode out;
    Status st = Call(&fs3rpc::Meta::Stub::Make, r, &out);
    if (!st.ok()) return st;
    return out;
  }

  Status Lookup(uint64_t parent, const std::string& name) {
    fs3rpc::NameRequest r;
    r.set_parent(parent);
    r.set_name(name);
    fs3rpc::Inode out;
    return Call(&fs3rpc::Meta::Stub::Lookup, r, &out);
  }

  test::TempDir dir_;
  test::Daemons daemons_{dir_, /*metrics=*/true};
  std::string address_;
  std::unique_ptr<fs3rpc::Meta::Stub> stub_;
};

TEST_F(MetaServiceTest, NamespaceOperationsOverRpc) {
  auto d = Make(1, "data", fs3rpc::INODE_DIR);
  ASSERT_TRUE(d.ok()) << d.status();
  auto f = Make(d->ino(), "f", fs3rpc::INODE_FILE, /*request_id=*/5);
  ASSERT_TRUE(f.ok());
  ASSERT_EQ(f->dirs_size(), 1);  // the directory's attributes after the create come with it
  EXPECT_EQ(f->dirs(0).ino(), d->ino());
  EXPECT_GE(f->dirs(0).mtime_ns(), d->mtime_ns());
  // A retried create answers with the same inode, not EEXIST.
  auto again = Make(d->ino(), "f", fs3rpc::INODE_FILE, 5);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->ino(), f->ino());
  ASSERT_TRUE(Make(d->ino(), "fifo", fs3rpc::INODE_FIFO).ok());
  ASSERT_TRUE(Make(d->ino(), "link", fs3rpc::INODE_SYMLINK).ok());
  fs3rpc::ReaddirRequest rr;
  rr.set_ino(d->ino());
  fs3rpc::ReaddirReply entries;
  ASSERT_TRUE(Call(&fs3rpc::Meta::Stub::Readdir, rr, &entries).ok());
  ASSERT_EQ(entries.entries_size(), 3);
  EXPECT_EQ(entries.entries(0).name(), "f");
  EXPECT_EQ(entries.entries(1).type(), fs3rpc::INODE_FIFO);
  EXPECT_FALSE(entries.entries(0).has_inode());  // attributes only when asked for
  rr.set_plus(true);                             // READDIRPLUS: each entry with its attributes
  entries.Clear();
  ASSERT_TRUE(Call(&fs3rpc::Meta::Stub::Readdir, rr, &entries).ok());
  ASSERT_EQ(entries.entries_size(), 3);
  EXPECT_EQ(entries.entries(0).inode().ino(), entries.entries(0).ino());
  EXPECT_EQ(entries.entries(1).inode().type(), fs3rpc::INODE_FIFO);
  // Someone who may read the directory but not search it gets names only, as with lookups.
  fs3rpc::SetAttrRequest chmod;
  chmod.set_ino(d->ino());
  chmod.set_mode(0744);
  fs3rpc::Inode changed;
  ASSERT_TRUE(Call(&fs3rpc::Meta::Stub::SetAttr, chmod, &changed).ok());
  rr.mutable_cred()->set_uid(1000);
  rr.mutable_cred()->set_gid(1000);
  entries.Clear();
  ASSERT_TRUE(Call(&fs3rpc::Meta::Stub::Readdir, rr, &entries).ok());
  ASSERT_EQ(entries.entries_size(), 3);
  EXPECT_FALSE(entries.entries(0).has_inode());
  rr.clear_cred();
  chmod.set_mode(0755);
  ASSERT_TRUE(Call(&fs3rpc::Meta::Stub::SetAttr, chmod, &changed).ok());
  fs3rpc::RenameRequest mv;
  mv.set_src_parent(d->ino());
  mv.set_src_name("f");
  mv.set_dst_parent(1);
  mv.set_dst_name("g");
  mv.set_request_id(9);
  fs3rpc::DirsReply e;
  ASSERT_TRUE(Call(&fs3rpc::Meta::Stub::Rename, mv, &e).ok());
  // The reply carries both directories' attributes after the change.
  ASSERT_EQ(e.dirs_size(), 2);
  EXPECT_EQ(e.dirs(0).ino(), d->ino());
  EXPECT_EQ(e.dirs(1).ino(), 1u);
  EXPECT_EQ(e.dirs(0).nlink(), 2u);
  ASSERT_TRUE(Call(&fs3rpc::Meta::Stub::Rename, mv, &e).ok());  // a retry: same answer
  EXPECT_TRUE(Lookup(1, "g").ok());
  fs3rpc::XattrRequest x;
  x.set_ino(f->ino());
  x.set_name("user.k");
  x.set_value("v");
  fs3rpc::Empty none;
  ASSERT_TRUE(Call(&fs3rpc::Meta::Stub::SetXattr, x, &none).ok());
  fs3rpc::XattrReply xv;
  ASSERT_TRUE(Call(&fs3rpc::Meta::Stub::GetXattr, x, &xv).ok());
  EXPECT_EQ(xv.value(), "v");
}

TEST_F(MetaServiceTest, BadInputGetsTheRightErrnoAndChangesNothing) {
  auto file = Make(1, "file", fs3rpc::INODE_FILE);
  ASSERT_TRUE(file.ok());
  EXPECT_EQ(Make(1, "a/b", fs3rpc::INODE_FILE).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(Make(1, "", fs3rpc::INODE_DIR).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(Make(1, std::string(300, 'n'), fs3rpc::INODE_FILE).status().code(),
            StatusCode::kNameTooLong);
  EXPECT_EQ(Make(12345, "x", fs3rpc::INODE_FILE).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(Make(file->ino(), "x", fs3rpc::INODE_FILE).status().code(), StatusCode::kNotADirectory);
  fs3rpc::NameRequest rm;
  rm.set_parent(1);
  rm.set_name("file");
  fs3rpc::DirsReply e;
  EXPECT_EQ(Call(&fs3rpc::Meta::Stub::Rmdir, rm, &e).code(), StatusCode::kNotADirectory);
  fs3rpc::MakeRequest bad;
  bad.set_parent(1);
  bad.set_name("weird");
  bad.set_type(static_cast<fs3rpc::InodeType>(42));
  fs3rpc::Inode out;
  EXPECT_EQ(Call(&fs3rpc::Meta::Stub::Make, bad, &out).code(), StatusCode::kInvalidArgument);
  fs3rpc::ReaddirRequest rr;
  rr.set_ino(1);
  fs3rpc::ReaddirReply entries;
  ASSERT_TRUE(Call(&fs3rpc::Meta::Stub::Readdir, rr, &entries).ok());
  EXPECT_EQ(entries.entries_size(), 1);  // only "file"
}

TEST_F(MetaServiceTest, KilledDuringAStormEveryAcknowledgedOperationSurvives) {
  std::mutex mu;
  std::set<std::string> present, absent;  // names in / whose state is known
  std::set<std::string> unknown;          // touched by a call whose answer was lost in the kill
  std::atomic<bool> stop{false};
  // Runs one mutating call on `names`; returns whether it is known to have happened.
  auto run = [&](const std::vector<std::string>& names, const std::function<Status()>& call) {
    Status st = call();
    if (!st.ok() &&
        (st.code() == StatusCode::kUnavailable || st.code() == StatusCode::kDeadlineExceeded ||
         st.code() == StatusCode::kCancelled)) {
      std::lock_guard lock(mu);
      for (const auto& n : names) {
        unknown.insert(n);
        present.erase(n);
        absent.erase(n);
      }
    }
    return st.ok();
  };
  std::thread storm([&] {
    for (int i = 0; !stop; ++i) {
      const std::string f = "f" + std::to_string(i), g = "g" + std::to_string(i);
      if (!run({f}, [&] { return Make(1, f, fs3rpc::INODE_FILE, 1000 + i).status(); })) continue;
      {
        std::lock_guard lock(mu);
        present.insert(f);
      }
      fs3rpc::DirsReply e;
      if (i % 2 == 0) {
        fs3rpc::RenameRequest mv;
        mv.set_src_parent(1);
        mv.set_src_name(f);
        mv.set_dst_parent(1);
        mv.set_dst_name(g);
        if (run({f, g}, [&] { return Call(&fs3rpc::Meta::Stub::Rename, mv, &e); })) {
          std::lock_guard lock(mu);
          present.erase(f);
          absent.insert(f);
          present.insert(g);
        }
      }
      if (i % 3 == 0) {
        fs3rpc::NameRequest rm;
        rm.set_parent(1);
        rm.set_name(i % 2 == 0 ? g : f);
        if (run({rm.name()}, [&] { return Call(&fs3rpc::Meta::Stub::Unlink, rm, &e); })) {
          std::lock_guard lock(mu);
          present.erase(rm.name());
          absent.insert(rm.name());
        }
      }
    }
  });
  std::this_thread::sleep_for(700ms);
  daemons_.Kill("meta");
  stop = true;
  storm.join();
  Start();
  fs3rpc::InoRequest root;
  root.set_ino(1);
  fs3rpc::Inode attrs;
  for (int i = 0; i < 100 && !Call(&fs3rpc::Meta::Stub::GetAttr, root, &attrs).ok(); ++i) {
    std::this_thread::sleep_for(100ms);  // the channel reconnects to the new process
  }
  std::lock_guard lock(mu);
  ASSERT_GT(present.size() + absent.size(), 20u);
  for (const std::string& n : present) {
    Status st = Lookup(1, n);
    EXPECT_TRUE(st.ok()) << n << " was acknowledged and is gone: " << st;
  }
  for (const std::string& n : absent)
    EXPECT_EQ(Lookup(1, n).code(), StatusCode::kNotFound) << n << " came back";
  // fs3 fsck (the admin CLI, against the restarted service) reports a clean namespace.
  auto fsck = test::Subprocess::Start({FF_FS3_PATH, "fsck", "--meta", address_},
                                      {.env = {}, .output_dir = dir_.path()});
  ASSERT_TRUE(fsck.ok());
  EXPECT_EQ(fsck->Wait(30s), 0) << fsck->Stdout() << fsck->Stderr();
  EXPECT_EQ(fsck->Stdout(), "fs3 fsck: clean\n");
  // The root's link count is consistent (no directories were made): 2.
  ASSERT_TRUE(Call(&fs3rpc::Meta::Stub::GetAttr, root, &attrs).ok());
  EXPECT_EQ(attrs.nlink(), 2u);
}

// fs3-meta on a full disk: an operation it cannot make durable is refused with ENOSPC, nothing
// acknowledged is lost, and with room again (and after a kill -9) it serves on, fsck clean.
// The client's lean path: fs3-meta says where its frame transport is, the client sends its calls
// there, and after fs3-meta is killed and comes back (its frames on a new port) the client finds
// them again within the call's retries. With the transport off, calls go over gRPC.
TEST_F(MetaServiceTest, TheClientUsesFramesAndFindsThemAgainAfterARestart) {
  MetaClientOptions o;
  o.address = address_;
  o.call = CallOptions::Idempotent(2s);
  o.call.max_attempts = 100;
  o.call.total_deadline = 30s;
  MetaClient client(o);
  fs3rpc::MakeRequest make;
  make.set_parent(1);
  make.set_name("over-frames");
  make.set_mode(0644);
  make.set_type(fs3rpc::INODE_FILE);
  make.set_request_id(77);
  fs3rpc::Inode made;
  ASSERT_TRUE(client.Make(make, &made).ok());
  const std::string frames = client.FramesAddress();
  EXPECT_FALSE(frames.empty());
  EXPECT_NE(frames, address_);
  // A handler's error arrives with its code, and changes nothing.
  fs3rpc::Inode again;
  make.set_request_id(78);
  EXPECT_EQ(client.Make(make, &again).code(), StatusCode::kAlreadyExists);
  EXPECT_EQ(client.FramesAddress(), frames);

  daemons_.Kill("meta");
  fs3rpc::NameRequest look;
  look.set_parent(1);
  look.set_name("over-frames");
  fs3rpc::Inode found;
  Status st;
  std::thread call([&] { st = client.Lookup(look, &found); });  // retried until fs3-meta is back
  std::this_thread::sleep_for(500ms);
  Start();  // from this thread: the child dies with the thread that started it
  call.join();
  ASSERT_TRUE(st.ok()) << st;
  EXPECT_EQ(found.ino(), made.ino());
  EXPECT_FALSE(client.FramesAddress().empty());

  // fs3-meta without frames: the client asks, hears none, and uses gRPC.
  daemons_.Signal("meta", SIGTERM);
  daemons_.WriteRaw("meta", "[server]\nlisten = \"" + address_ +
                                "\"\n[metrics]\nenabled = false\n[meta]\ndata_dir = \"" +
                                dir_.File("meta") + "\"\nframes_listen = \"off\"\n");
  Start();
  MetaClient plain(o);
  ASSERT_TRUE(plain.Lookup(look, &found).ok());
  EXPECT_EQ(plain.FramesAddress(), "");
  o.frames = false;  // and a client told not to use them never asks
  MetaClient no_frames(o);
  ASSERT_TRUE(no_frames.Lookup(look, &found).ok());
  EXPECT_EQ(no_frames.FramesAddress(), "");
}

// What an answer promises (sync_interval_ms): with 0 the log is on disk before any answer; with an
// interval answers do not wait, the log is synced within the interval unasked, and a Sync (a
// mount's fsync or fsyncdir) answers once everything logged before it is on disk; a change that
// is only in the log survives a kill -9 of fs3-meta.
class MetaDurabilityTest : public MetaServiceTest {
 protected:
  void SetUp() override {}
  void Start(int sync_interval_ms) {
    daemons_.Write("meta", "[meta]\ndata_dir = \"" + dir_.File("meta") +
                               "\"\nsync_interval_ms = " + std::to_string(sync_interval_ms) + "\n");
    MetaServiceTest::Start();
    address_ = daemons_.ReadyField("meta", "rpc");
    stub_ = fs3rpc::Meta::NewStub(MakeChannel(address_));
    metrics_ = daemons_.ReadyField("meta", "metrics");
  }
  // Key writes answered and not yet on disk.
  double Unsynced() {
    auto v = test::MetricValue(metrics_, "fs3_meta_log_unsynced_writes");
    EXPECT_TRUE(v.ok()) << v.status();
    return v.ok() ? *v : -1;
  }
  Status Sync(uint64_t ino) {
    fs3rpc::CloseRequest r;
    r.set_ino(ino);
    fs3rpc::Inode out;
    return Call(&fs3rpc::Meta::Stub::Sync, r, &out);
  }
  std::string metrics_;
};

TEST_F(MetaDurabilityTest, EveryAnswerWaitsForTheDiskWithNoInterval) {
  Start(0);
  for (int i = 0; i < 20; ++i) {
    ASSERT_TRUE(Make(1, "f" + std::to_string(i), fs3rpc::INODE_FILE).ok());
    ASSERT_EQ(Unsynced(), 0) << "after create " << i;
  }
}

TEST_F(MetaDurabilityTest, ALongIntervalLeavesChangesInTheLogUntilASync) {
  Start(60000);
  auto f = Make(1, "f", fs3rpc::INODE_FILE);
  ASSERT_TRUE(f.ok()) << f.status();
  ASSERT_TRUE(Make(1, "d", fs3rpc::INODE_DIR).ok());
  EXPECT_GT(Unsynced(), 0) << "the creates are answered before they are on disk";
  // A mount's fsync of the file (and fsyncdir: the same call on a directory) waits for the disk.
  ASSERT_TRUE(Sync(f->ino()).ok());
  EXPECT_EQ(Unsynced(), 0);
  ASSERT_TRUE(Make(1, "g", fs3rpc::INODE_FILE).ok());
  EXPECT_GT(Unsynced(), 0);
  ASSERT_TRUE(Sync(1).ok());
  EXPECT_EQ(Unsynced(), 0);
  // Only in the log (the kernel's page cache), a change survives a kill -9 of fs3-meta.
  ASSERT_TRUE(Make(1, "h", fs3rpc::INODE_FILE).ok());
  EXPECT_GT(Unsynced(), 0);
  daemons_.Kill("meta");
  MetaServiceTest::Start();
  stub_ = fs3rpc::Meta::NewStub(MakeChannel(address_));
  for (const char* name : {"f", "d", "g", "h"}) {
    Status st = Lookup(1, name);
    for (int i = 0; i < 100 && st.code() == StatusCode::kUnavailable; ++i) {
      std::this_thread::sleep_for(100ms);  // the channel reconnects to the new process
      st = Lookup(1, name);
    }
    EXPECT_TRUE(st.ok()) << name << ": " << st;
  }
}

TEST_F(MetaDurabilityTest, AShortIntervalSyncsTheLogUnasked) {
  Start(20);
  ASSERT_TRUE(Make(1, "f", fs3rpc::INODE_FILE).ok());
  ASSERT_TRUE(Make(1, "g", fs3rpc::INODE_FILE).ok());
  double unsynced = Unsynced();
  for (int i = 0; i < 100 && unsynced != 0; ++i) {
    std::this_thread::sleep_for(50ms);
    unsynced = Unsynced();
  }
  EXPECT_EQ(unsynced, 0) << "the log is still not on disk after 5 s";
  auto syncs = test::MetricValue(metrics_, "fs3_meta_log_syncs_total");
  ASSERT_TRUE(syncs.ok()) << syncs.status();
  EXPECT_GE(*syncs, 1);
}

class MetaFullDiskTest : public MetaServiceTest {
 protected:
  void SetUp() override {
    ASSERT_EQ(geteuid(), 0u) << "mounts a small tmpfs under fs3-meta's data: run as root (CI does)";
    ASSERT_EQ(mkdir(dir_.File("meta").c_str(), 0700), 0);
    ASSERT_EQ(mount("tmpfs", dir_.File("meta").c_str(), "tmpfs", 0, "size=16m"), 0)
        << strerror(errno);
    mounted_ = true;
    MetaServiceTest::SetUp();
  }
  void TearDown() override {
    if (daemons_.has("meta")) daemons_.Kill("meta");
    if (mounted_) umount2(dir_.File("meta").c_str(), MNT_DETACH);
  }
  std::string Fill() { return test::FillFileSystem(dir_.File("meta")); }
  bool mounted_ = false;
};

TEST_F(MetaFullDiskTest, WhatCannotBeStoredIsRefusedWithEnospcAndNothingAcknowledgedIsLost) {
  ASSERT_TRUE(Make(1, "before", fs3rpc::INODE_FILE).ok());
  const std::string filler = Fill();
  // RocksDB's log may hold a few more small writes in its last page: go on until refused.
  std::vector<std::string> acknowledged = {"before"};
  Status refused;
  for (int i = 0; i < 500; ++i) {
    const std::string name = "f" + std::to_string(i);
    auto made = Make(1, name, fs3rpc::INODE_FILE);
    if (!made.ok()) {
      refused = made.status();
      EXPECT_EQ(Lookup(1, name).code(), StatusCode::kNotFound) << name << " was refused yet exists";
      break;
    }
    acknowledged.push_back(name);
  }
  ASSERT_FALSE(refused.ok()) << "the disk never filled up";
  EXPECT_EQ(refused.code(), StatusCode::kResourceExhausted) << refused;
  EXPECT_EQ(refused.ToErrno(), ENOSPC) << refused;
  EXPECT_THAT(refused.message(), ::testing::HasSubstr("No space left on device")) << refused;
  EXPECT_FALSE(meta().Wait(0s).has_value()) << "fs3-meta exited: " << meta().Stderr();
  for (const std::string& n : acknowledged)
    EXPECT_TRUE(Lookup(1, n).ok()) << n;

  ASSERT_EQ(unlink(filler.c_str()), 0);
  ASSERT_TRUE(Make(1, "after", fs3rpc::INODE_FILE).ok());
  acknowledged.push_back("after");
  daemons_.Kill("meta");
  Start();
  fs3rpc::InoRequest root;
  root.set_ino(1);
  fs3rpc::Inode attrs;
  for (int i = 0; i < 100 && !Call(&fs3rpc::Meta::Stub::GetAttr, root, &attrs).ok(); ++i) {
    std::this_thread::sleep_for(100ms);  // the channel reconnects to the new process
  }
  for (const std::string& n : acknowledged)
    EXPECT_TRUE(Lookup(1, n).ok()) << n << " was acknowledged and is gone";
  auto fsck = test::Subprocess::Start({FF_FS3_PATH, "fsck", "--meta", address_},
                                      {.env = {}, .output_dir = dir_.path()});
  ASSERT_TRUE(fsck.ok());
  EXPECT_EQ(fsck->Wait(30s), 0) << fsck->Stdout() << fsck->Stderr();
  EXPECT_EQ(fsck->Stdout(), "fs3 fsck: clean\n");
}

}  // namespace
}  // namespace ff
