// fs3 without a single point of failure: a three-member etcd cluster, two fs3-mgmtd replicas and
// two fs3-meta servers on it, three storage services, two FUSE mounts. Under load (files written
// and fsynced through one mount, a create/rename/unlink storm through the other), the fs3-mgmtd
// leader and an fs3-meta server are killed -9: no system call fails, service is back within the
// failover bound, and afterwards every acknowledged byte and name is there, the chains never
// flapped, and fsck finds the namespace and the replicas clean.
#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include "tests/support/fs3_cluster.h"
#include "tests/support/subprocess.h"
#include "tests/support/wait.h"

namespace ff::fs3 {
namespace {

using namespace std::chrono_literals;
namespace stdfs = std::filesystem;
using Clock = std::chrono::steady_clock;

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// Writes and fsyncs; the errno of the first failure (0: acknowledged).
int WriteDurably(const std::string& path, const std::string& data) {
  int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) return errno;
  std::size_t done = 0;
  while (done < data.size()) {
    ssize_t n = write(fd, data.data() + done, data.size() - done);
    if (n < 0) {
      int e = errno;
      close(fd);
      return e;
    }
    done += static_cast<std::size_t>(n);
  }
  int rc = fsync(fd) == 0 ? 0 : errno;
  if (close(fd) != 0 && rc == 0) rc = errno;
  return rc;
}

std::set<std::string> Names(const std::string& dir) {
  std::set<std::string> out;
  std::error_code ec;
  for (const auto& e : stdfs::directory_iterator(dir, ec))
    out.insert(e.path().filename().string());
  EXPECT_FALSE(ec) << ec.message();
  return out;
}

std::map<uint32_t, uint32_t> ChainVersions(const fs3rpc::RoutingInfo& r) {
  std::map<uint32_t, uint32_t> out;
  for (const auto& c : r.chains())
    out[c.id()] = c.version();
  return out;
}

class Fs3HaTest : public ::testing::Test {
 protected:
  void SetUp() override {
    test::Fs3ClusterOptions o;
    o.ha = true;
    o.services = 3;
    o.replication = 2;
    // Leases long enough that a storage service finds the new leader within one.
    o.mgmtd_keys = "lease_ms = 3000\ncheck_interval_ms = 100\nrestart_grace_ms = 6000\n";
    cluster_ = std::make_unique<test::Fs3Cluster>(o);
    cluster_->Start();
    ASSERT_FALSE(HasFatalFailure());
    m1_ = cluster_->Mount("m1");
    m2_ = cluster_->Mount("m2");
    ASSERT_TRUE(test::WaitUntil([&] { return stdfs::exists(m1_ + "/."); }, 10s));
  }

  std::unique_ptr<test::Fs3Cluster> cluster_;
  std::string m1_, m2_;
};

TEST_F(Fs3HaTest, KilledLeadersLoseNothingUnderLoad) {
  ASSERT_EQ(mkdir((m1_ + "/data").c_str(), 0755), 0);
  ASSERT_EQ(mkdir((m2_ + "/storm").c_str(), 0755), 0);
  std::atomic<bool> stop{false};
  std::atomic<int> failures{0};
  std::atomic<uint64_t> written{0}, ops{0};
  std::mutex mu;
  std::map<std::string, std::string> files;  // acknowledged: name -> content
  std::set<std::string> names;               // acknowledged state of storm/

  std::thread writer([&] {
    for (int i = 0; !stop; ++i) {
      const std::string name = "f" + std::to_string(i);
      const std::string data = test::RandomBytes(64 * 1024 + 4096 * (i % 7), i);
      if (int e = WriteDurably(m1_ + "/data/" + name, data); e != 0) {
        ADD_FAILURE() << "write " << name << ": " << std::strerror(e);
        ++failures;
        return;
      }
      std::lock_guard lock(mu);
      files[name] = data;
      ++written;
    }
  });
  std::thread storm([&] {
    for (int i = 0; !stop; ++i) {
      const std::string a = m2_ + "/storm/a" + std::to_string(i);
      const std::string b = m2_ + "/storm/b" + std::to_string(i);
      int fd = open(a.c_str(), O_CREAT | O_EXCL | O_WRONLY, 0644);
      if (fd < 0 || close(fd) != 0) {
        ADD_FAILURE() << "create " << a << ": " << std::strerror(errno);
        ++failures;
        return;
      }
      std::string now = "a" + std::to_string(i);
      if (i % 2 == 0) {
        if (rename(a.c_str(), b.c_str()) != 0) {
          ADD_FAILURE() << "rename " << a << ": " << std::strerror(errno);
          ++failures;
          return;
        }
        now = "b" + std::to_string(i);
      }
      if (i % 3 == 0) {
        if (unlink((m2_ + "/storm/" + now).c_str()) != 0) {
          ADD_FAILURE() << "unlink " << now << ": " << std::strerror(errno);
          ++failures;
          return;
        }
        now.clear();
      }
      std::lock_guard lock(mu);
      if (!now.empty()) names.insert(now);
      ++ops;
    }
  });
  auto progress = [&](uint64_t files_more, uint64_t ops_more) {
    const uint64_t f = written + files_more, o = ops + ops_more;
    EXPECT_TRUE(test::WaitUntil([&] { return failures > 0 || (written >= f && ops >= o); }, 60s))
        << "the load stalled: " << written << " files, " << ops << " operations";
  };

  progress(5, 50);
  const auto chains_before = ChainVersions(cluster_->Routing());
  // The fs3-mgmtd leader dies.
  const std::string leader = cluster_->MgmtdLeader();
  ASSERT_FALSE(leader.empty());
  const auto killed = Clock::now();
  cluster_->Kill(leader);
  ASSERT_TRUE(test::WaitUntil([&] { return !cluster_->MgmtdLeader().empty(); }, 10s));
  const auto failover = Clock::now() - killed;
  EXPECT_LE(failover, 5s) << "fs3-mgmtd failover took "
                          << std::chrono::duration_cast<std::chrono::milliseconds>(failover).count()
                          << " ms";
  progress(5, 50);
  ASSERT_TRUE(cluster_->StartMgmtd(leader == "mgmtd" ? 0 : 1));  // back, as a follower
  // An fs3-meta server dies; the mounts go on with the other.
  cluster_->Kill("meta");
  progress(5, 50);
  ASSERT_TRUE(cluster_->StartMeta(0));
  cluster_->Kill("meta2");
  progress(5, 50);
  ASSERT_TRUE(cluster_->StartMeta(1));
  progress(2, 20);
  stop = true;
  writer.join();
  storm.join();
  ASSERT_EQ(failures, 0);

  // No chain moved because a leader changed (storage services kept their leases).
  EXPECT_EQ(ChainVersions(cluster_->Routing()), chains_before);
  EXPECT_TRUE(cluster_->AllServing());
  // Every acknowledged file, read through the other mount, byte for byte.
  for (const auto& [name, data] : files) {
    ASSERT_EQ(ReadAll(m2_ + "/data/" + name), data) << name;
  }
  EXPECT_EQ(Names(m1_ + "/storm"), names);
  EXPECT_THAT(cluster_->Fsck(), ::testing::IsEmpty());
}

}  // namespace
}  // namespace ff::fs3
