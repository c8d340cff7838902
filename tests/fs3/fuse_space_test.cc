// fs3 in tight corners, through real FUSE mounts: a storage target whose disk fills up and comes
// back when files are deleted, holes that take no space (and st_blocks that says so), fs3-meta
// down for longer than a mount's retry window, and two mounts from one config on one machine.
#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <thread>

#include "common/net.h"
#include "tests/support/fs3_cluster.h"
#include "tests/support/http_get.h"
#include "tests/support/wait.h"

namespace ff::fs3 {
namespace {

using namespace std::chrono_literals;
using test::RandomBytes;
using test::WaitUntil;
using ::testing::HasSubstr;

constexpr uint64_t kChunk = 256 * 1024;

int Errno(int rc) {
  return rc < 0 ? errno : 0;
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// Writes `data` to a new file at `path` with write() and close(): 0, or the errno of the first
// call that failed (close's included: a mount reports a failed background write there).
int WriteFile(const std::string& path, const std::string& data) {
  int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) return errno;
  int err = 0;
  for (std::size_t done = 0; done < data.size() && err == 0;) {
    ssize_t n = write(fd, data.data() + done, std::min<std::size_t>(data.size() - done, 1 << 20));
    if (n < 0) {
      err = errno;
    } else {
      done += static_cast<std::size_t>(n);
    }
  }
  if (close(fd) != 0 && err == 0) err = errno;
  return err;
}

uint64_t Used(const std::string& path) {
  struct statvfs vfs {};
  EXPECT_EQ(statvfs(path.c_str(), &vfs), 0) << path;
  return (uint64_t{vfs.f_blocks} - vfs.f_bfree) * vfs.f_frsize;
}

// What the chunk files of inode `ino` take on the disk of the target at `target_dir`.
uint64_t ChunkBytesOnDisk(const std::string& target_dir, uint64_t ino) {
  char prefix[32];
  std::snprintf(prefix, sizeof prefix, "%016llx-", static_cast<unsigned long long>(ino));
  uint64_t bytes = 0;
  for (const auto& e : std::filesystem::directory_iterator(target_dir + "/chunks")) {
    if (e.path().filename().string().rfind(prefix, 0) != 0) continue;
    struct stat st {};
    if (stat(e.path().c_str(), &st) == 0) bytes += static_cast<uint64_t>(st.st_blocks) * 512;
  }
  return bytes;
}

void RequireRootAndFuse() {
  if (geteuid() != 0 || access("/dev/fuse", R_OK | W_OK) != 0) {
    GTEST_FAIL() << "these tests mount FUSE and tmpfs: run them as root with /dev/fuse (CI does)";
  }
}

// ---- a full storage target -----------------------------------------------------------------

// One storage target (R1) on a 48 MiB tmpfs the test mounts, fs3-meta, a mount.
class FullDiskTest : public ::testing::Test {
 protected:
  static test::Fs3ClusterOptions Options() {
    test::Fs3ClusterOptions o = test::FuseSuiteOptions(kChunk);
    o.services = 1;
    o.replication = 1;
    o.metrics = true;
    return o;
  }
  void SetUp() override {
    RequireRootAndFuse();
    target_ = cluster_.dir_.File("s0-t1");
    ASSERT_EQ(mkdir(target_.c_str(), 0700), 0);
    ASSERT_EQ(mount("tmpfs", target_.c_str(), "tmpfs", 0, "size=48m"), 0) << strerror(errno);
    mounted_ = true;
    cluster_.Start();
    ASSERT_FALSE(HasFatalFailure());
    mnt_ = cluster_.Mount("mnt");
    ASSERT_TRUE(
        WaitUntil([&] { return !cluster_.ReadyField("fuse-mnt", "mountpoint").empty(); }, 20s));
  }
  void TearDown() override {
    for (const auto& [name, p] : cluster_.procs()) {
      if (name != "mgmtd" && name.rfind("fuse-", 0) != 0) p->Signal(SIGKILL);
    }
    for (const auto& [name, p] : cluster_.procs()) {
      if (name != "mgmtd" && name.rfind("fuse-", 0) != 0) (void)p->Wait(10s);
    }
    if (mounted_) umount2(target_.c_str(), MNT_DETACH);
  }
  // fs3-storage's metric `name` for the target, or -1.
  double StorageMetric(const std::string& name) {
    auto r = test::HttpGet(cluster_.ReadyField("s0", "metrics"), "/metrics");
    if (!r.ok()) return -1;
    std::smatch m;
    const std::regex line(name + R"(\{target="11"\} ([0-9.e+]+))");
    return std::regex_search(r->body, m, line) ? std::stod(m[1]) : -1;
  }

  test::Fs3Cluster cluster_{Options()};
  std::string target_, mnt_;
  bool mounted_ = false;
};

// Filled to ENOSPC and emptied with rm: the space comes back within the collector's period, a
// file of the same size writes and reads back, the write that failed left nothing half-written,
// and what was acknowledged before the fill is intact. (Before: chunk writes took the disk into
// the reserve kept for the target's database, whose deletions were then refused as well; the
// space never came back, and a 6-byte file whose close failed was left as 6 bytes of zeros.)
TEST_F(FullDiskTest, DeletingFilesOnAFullTargetGivesTheSpaceBack) {
  const std::string kept = RandomBytes(3 * kChunk + 777, 1);
  ASSERT_EQ(WriteFile(mnt_ + "/kept", kept), 0);
  const uint64_t empty_used = Used(target_);

  // Fill, as dd would: 4 MiB files until the target refuses one, then 4 KiB files until it
  // refuses those too.
  const std::string block = RandomBytes(4 << 20, 2);
  int filled = 0, err = 0;
  for (; filled < 40 && err == 0; ++filled)
    err = WriteFile(mnt_ + "/fill" + std::to_string(filled), block);
  ASSERT_EQ(err, ENOSPC) << "after " << filled << " files";
  ASSERT_GE(filled, 5) << "the 48 MiB target filled after " << filled << " files of 4 MiB";
  EXPECT_TRUE(WaitUntil([&] { return StorageMetric("fs3_storage_target_full") == 1; }, 10s))
      << "fs3_storage_target_free_bytes = " << StorageMetric("fs3_storage_target_free_bytes");
  EXPECT_GT(StorageMetric("fs3_storage_target_capacity_bytes"), 40e6);
  EXPECT_THAT(cluster_.Logs("s0"), HasSubstr("is full: writes of a chunk are refused"));
  const std::string page = RandomBytes(4096, 5);
  int pages = 0;
  for (err = 0; pages < 200 && err == 0; ++pages)
    err = WriteFile(mnt_ + "/page" + std::to_string(pages), page);
  ASSERT_EQ(err, ENOSPC) << "after " << pages << " files of 4 KiB";

  // A small write into a new file: refused at close, and the file is left as it was (empty),
  // not six bytes of zeros; an existing file keeps its content when an append is refused.
  EXPECT_EQ(WriteFile(mnt_ + "/small", "hello\n"), ENOSPC);
  struct stat st {};
  ASSERT_EQ(stat((mnt_ + "/small").c_str(), &st), 0);
  EXPECT_EQ(st.st_size, 0) << "a refused write extended the file";
  {
    int fd = open((mnt_ + "/kept").c_str(), O_WRONLY | O_APPEND);
    ASSERT_GE(fd, 0);
    const std::string more = RandomBytes(kChunk, 3);  // a chunk of its own
    ssize_t n = write(fd, more.data(), more.size());
    int closed = close(fd) == 0 ? 0 : errno;
    EXPECT_TRUE(n < 0 || closed == ENOSPC) << "an append to a full target succeeded";
  }
  std::this_thread::sleep_for(1500ms);  // attributes cached by the kernel expire
  EXPECT_EQ(ReadAll(mnt_ + "/kept"), kept);

  // rm -rf: the space is back within a few collector periods.
  for (int i = 0; i < filled; ++i)
    ASSERT_EQ(unlink((mnt_ + "/fill" + std::to_string(i)).c_str()), 0) << i;
  for (int i = 0; i < pages; ++i)
    ASSERT_EQ(unlink((mnt_ + "/page" + std::to_string(i)).c_str()), 0) << i;
  ASSERT_EQ(unlink((mnt_ + "/small").c_str()), 0);
  EXPECT_TRUE(WaitUntil([&] { return Used(target_) <= empty_used + (2 << 20); }, 20s))
      << "the target still uses " << Used(target_) << " bytes, " << empty_used
      << " before the fill";
  EXPECT_TRUE(WaitUntil([&] { return StorageMetric("fs3_storage_target_full") == 0; }, 10s));
  EXPECT_GT(StorageMetric("fs3_storage_target_free_bytes"), 30e6);
  EXPECT_THAT(cluster_.Logs("s0"), HasSubstr("has room again"));

  // As much again, written and read back byte for byte; the acknowledged file is intact.
  for (int i = 0; i + 1 < filled; ++i)
    ASSERT_EQ(WriteFile(mnt_ + "/again" + std::to_string(i), block), 0) << i;
  for (int i = 0; i + 1 < filled; ++i)
    EXPECT_EQ(ReadAll(mnt_ + "/again" + std::to_string(i)), block) << i;
  EXPECT_EQ(ReadAll(mnt_ + "/kept"), kept);
  EXPECT_THAT(cluster_.Fsck(), ::testing::IsEmpty());
}

// ---- one shared cluster: holes, outages, two mounts -------------------------------------------

class Cluster : public test::MountedFs3Cluster {
 public:
  Cluster() : MountedFs3Cluster(test::FuseSuiteOptions(kChunk)) {}
};

class MountTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    RequireRootAndFuse();
    cluster_ = new Cluster();
  }
  static void TearDownTestSuite() {
    delete cluster_;
    cluster_ = nullptr;
  }
  void SetUp() override { ASSERT_NE(cluster_, nullptr); }
  static Cluster* cluster_;
};
Cluster* MountTest::cluster_ = nullptr;

// Holes are holes: a byte at 100 MiB and 4 KiB writes into empty chunks (at their start, middle
// and end) store one block each on every replica, and st_blocks, what du reads, says what is
// stored: within 2x of a local file system's for the same pattern. (Before: a write stored its
// chunk from offset 0 to its end, and st_blocks was the length: 100 MiB for the one byte.)
TEST_F(MountTest, HolesTakeNoSpaceAndStBlocksSaysWhatIsStored) {
  const std::string data = RandomBytes(4096, 4);
  auto pattern = [&](const std::string& path) {
    int fd = open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC, 0644);
    EXPECT_GE(fd, 0) << path;
    for (uint64_t at : {10 * kChunk, 20 * kChunk + kChunk / 2, 31 * kChunk - 4096})
      EXPECT_EQ(pwrite(fd, data.data(), data.size(), static_cast<off_t>(at)), 4096);
    EXPECT_EQ(pwrite(fd, "z", 1, 100 << 20), 1);
    EXPECT_EQ(fsync(fd), 0);
    EXPECT_EQ(close(fd), 0);
  };
  const std::string path = cluster_->mount_ + "/sparse";
  const std::string local = cluster_->dir_.File("sparse-local");
  pattern(path);
  pattern(local);
  struct stat here {
  }, there{};
  ASSERT_EQ(stat(local.c_str(), &here), 0);
  ASSERT_GT(here.st_blocks, 0);
  ASSERT_EQ(stat(path.c_str(), &there), 0);
  EXPECT_EQ(there.st_size, (100 << 20) + 1);
  EXPECT_TRUE(WaitUntil(
      [&] { return stat(path.c_str(), &there) == 0 && there.st_blocks <= 2 * here.st_blocks; },
      10s))
      << "fs3 says " << there.st_blocks << " blocks, a local file system " << here.st_blocks;
  EXPECT_GT(there.st_blocks, 0);
  // On each replica: one 4 KiB block per write.
  for (int s = 0; s < 2; ++s) {
    const std::string target = cluster_->dir_.File("s" + std::to_string(s) + "-t1");
    EXPECT_LE(ChunkBytesOnDisk(target, there.st_ino), 4u * 4096) << target;
  }
  // Reads see the data and zeros between.
  const std::string back = ReadAll(path);
  ASSERT_EQ(back.size(), (100u << 20) + 1);
  EXPECT_EQ(back.substr(20 * kChunk + kChunk / 2, 4096), data);
  EXPECT_EQ(back.substr(20 * kChunk, 4096), std::string(4096, '\0'));
  EXPECT_EQ(back.back(), 'z');
  EXPECT_THAT(cluster_->Fsck(), ::testing::IsEmpty());
}

// fs3-meta down for longer than a mount's retry window: stat, open and create fail with EIO (what
// programs expect of a filesystem; before, the network's EHOSTUNREACH), and work again once it
// is back, without remounting.
TEST_F(MountTest, Fs3MetaDownPastTheRetryWindowIsEioAndTheMountRecovers) {
  const std::string mnt = cluster_->Mount("outage", {"--set", "fuse.retry_timeout_s=2"});
  ASSERT_EQ(WriteFile(cluster_->mount_ + "/there", "x"), 0);
  cluster_->Kill("meta");
  struct stat st {};
  EXPECT_EQ(Errno(stat((mnt + "/there").c_str(), &st)), EIO);
  EXPECT_EQ(Errno(open((mnt + "/there").c_str(), O_RDONLY)), EIO);
  EXPECT_EQ(Errno(open((mnt + "/new").c_str(), O_WRONLY | O_CREAT, 0644)), EIO);
  ASSERT_TRUE(cluster_->StartMeta());
  EXPECT_TRUE(WaitUntil([&] { return stat((mnt + "/there").c_str(), &st) == 0; }, 30s));
  EXPECT_EQ(WriteFile(mnt + "/new", "y"), 0);
  EXPECT_EQ(ReadAll(cluster_->mount_ + "/new"), "y");
}

// Two mounts from one config on one machine (a job's private mount beside the node's): the
// second finds the metrics port taken and serves on a free one; both serve /metrics and are
// announced for Prometheus' file discovery until they unmount. (Before, the second did not start:
// "cannot serve metrics on 127.0.0.1:PORT".)
TEST_F(MountTest, TwoMountsFromOneConfigBothServeMetrics) {
  const int port = *FindFreePort();
  const std::string targets = cluster_->dir_.File("targets");
  std::filesystem::create_directories(targets);
  const std::vector<std::string> config = {
      "--set", "metrics.enabled=true",
      "--set", "metrics.listen=127.0.0.1:" + std::to_string(port),
      "--set", "metrics.targets_dir=" + targets};
  const std::string first = cluster_->Mount("first", config);
  ASSERT_TRUE(
      WaitUntil([&] { return !cluster_->ReadyField("fuse-first", "metrics").empty(); }, 20s));
  const std::string second = cluster_->Mount("second", config);
  ASSERT_TRUE(
      WaitUntil([&] { return !cluster_->ReadyField("fuse-second", "metrics").empty(); }, 20s))
      << cluster_->Logs("fuse-second");
  const std::string a = cluster_->ReadyField("fuse-first", "metrics");
  const std::string b = cluster_->ReadyField("fuse-second", "metrics");
  EXPECT_EQ(a, "127.0.0.1:" + std::to_string(port));
  EXPECT_NE(a, b);
  ASSERT_EQ(WriteFile(second + "/through-second", "z"), 0);
  for (const std::string& address : {a, b}) {
    auto r = test::HttpGet(address, "/metrics");
    ASSERT_TRUE(r.ok()) << address << ": " << r.status();
    EXPECT_THAT(r->body, HasSubstr("fs3_fuse_op_seconds")) << address;
  }
  const std::string announced =
      ReadAll(targets + "/fs3-fuse-" + b.substr(b.rfind(':') + 1) + ".json");
  EXPECT_THAT(announced, HasSubstr("\"" + b + "\""));
  EXPECT_THAT(announced, HasSubstr("\"mountpoint\": \"" + second + "\""));
  EXPECT_EQ(ReadAll(first + "/through-second"), "z");
  cluster_->proc("fuse-second").Signal(SIGTERM);
  ASSERT_TRUE(cluster_->proc("fuse-second").Wait(20s).has_value());
  EXPECT_FALSE(
      std::filesystem::exists(targets + "/fs3-fuse-" + b.substr(b.rfind(':') + 1) + ".json"))
      << "an unmounted mount is still announced";
}

}  // namespace
}  // namespace ff::fs3
