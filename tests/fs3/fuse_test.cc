// fs3 through real FUSE mounts: fs3-mgmtd, two fs3-storage services (chains of 2), fs3-meta and
// fs3-fuse as processes; the tests use the mount with plain system calls, as training code does,
// and act as another user by forking and switching uid.
#include <dirent.h>
#include <fcntl.h>
#include <gmock/gmock.h>
#include <grp.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <sstream>
#include <thread>

#include "common/net.h"
#include "common/rpc_client.h"
#include "fs3/client.h"
#include "fs3/fs.h"
#include "fs3/proto/meta.grpc.pb.h"
#include "fs3/proto/mgmtd.grpc.pb.h"
#include "tests/support/fs3_cluster.h"
#include "tests/support/http_get.h"
#include "tests/support/subprocess.h"
#include "tests/support/wait.h"

namespace ff::fs3 {
namespace {

using namespace std::chrono_literals;
namespace stdfs = std::filesystem;

constexpr uint64_t kChunk = 256 * 1024;
constexpr uid_t kNobody = 65534;
constexpr gid_t kNogroup = 65534;

using test::RandomBytes;
using test::WaitUntil;

// Runs `fn` in a child process as uid/gid (with `groups`); returns the errno it reports (0: ok).
int AsUser(uid_t uid, gid_t gid, std::vector<gid_t> groups, const std::function<int()>& fn) {
  pid_t pid = fork();
  if (pid == 0) {
    if (setgroups(groups.size(), groups.data()) != 0 || setresgid(gid, gid, gid) != 0 ||
        setresuid(uid, uid, uid) != 0) {
      _exit(250);
    }
    _exit(fn());
  }
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 255;
}

int Errno(int rc) {
  return rc < 0 ? errno : 0;
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

bool WriteAll(const std::string& path, const std::string& data, int flags = O_TRUNC) {
  int fd = open(path.c_str(), O_WRONLY | O_CREAT | flags, 0644);
  if (fd < 0) return false;
  std::size_t done = 0;
  while (done < data.size()) {
    ssize_t n = write(fd, data.data() + done, data.size() - done);
    if (n <= 0) {
      close(fd);
      return false;
    }
    done += n;
  }
  return close(fd) == 0;
}

// One fs3 cluster for the whole suite (each test works in its own directory): the shared test
// fabric with two storage services in chains of two, fs3-meta and a mount.
class Cluster : public test::MountedFs3Cluster {
 public:
  Cluster() : MountedFs3Cluster(test::FuseSuiteOptions(kChunk)) {}
};

class FuseTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (geteuid() != 0 || access("/dev/fuse", R_OK | W_OK) != 0) {
      FAIL() << "the FUSE tests need root and /dev/fuse (they mount with allow_other and act "
                "as other users); CI runs them as root";
    }
    cluster_ = new Cluster();
  }
  static void TearDownTestSuite() {
    delete cluster_;
    cluster_ = nullptr;
  }
  void SetUp() override {
    ASSERT_NE(cluster_, nullptr);
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    root_ = cluster_->mount_ + "/" + info->name();
    ASSERT_EQ(mkdir(root_.c_str(), 0755), 0) << strerror(errno);
  }
  std::string P(const std::string& rel) const { return root_ + "/" + rel; }
  // `rel` in this test's directory as fs3 names it (the native client's path).
  static std::string FsPath(const std::string& rel) {
    return std::string("/") + ::testing::UnitTest::GetInstance()->current_test_info()->name() +
           "/" + rel;
  }
  // A native client of the cluster acting as `caller`; null after a failure.
  static std::unique_ptr<FileSystem> Native(Caller caller = {}) {
    auto made = FileSystem::Connect({.meta = cluster_->meta_address_,
                                     .mgmtd = cluster_->mgmtd_address_,
                                     .caller = std::move(caller)});
    EXPECT_TRUE(made.ok()) << made.status();
    return made.ok() ? std::move(*made) : nullptr;
  }
  // A storage client of the cluster (to see what the chains hold); null after a failure.
  static std::unique_ptr<StorageClient> Storage() {
    ClientOptions o;
    o.mgmtd = cluster_->mgmtd_address_;
    auto made = StorageClient::Create(o);
    EXPECT_TRUE(made.ok()) << made.status();
    return made.ok() ? std::move(*made) : nullptr;
  }

  static Cluster* cluster_;
  std::string root_;
};
Cluster* FuseTest::cluster_ = nullptr;

TEST_F(FuseTest, FilesReadWriteAppendTruncateAndSparse) {
  // Across chunk boundaries (chunks are 256 KiB), written in odd pieces.
  const std::string data = RandomBytes(3 * kChunk + 12345, 1);
  {
    int fd = open(P("f").c_str(), O_WRONLY | O_CREAT | O_EXCL, 0640);
    ASSERT_GE(fd, 0) << strerror(errno);
    for (std::size_t off = 0; off < data.size(); off += 70001) {
      const std::size_t n = std::min<std::size_t>(70001, data.size() - off);
      ASSERT_EQ(pwrite(fd, data.data() + off, n, static_cast<off_t>(off)), static_cast<ssize_t>(n));
    }
    struct stat st {};
    ASSERT_EQ(fstat(fd, &st), 0);
    EXPECT_EQ(st.st_size, static_cast<off_t>(data.size()));  // seen while still open
    ASSERT_EQ(close(fd), 0);
  }
  EXPECT_EQ(ReadAll(P("f")), data);
  struct stat st {};
  ASSERT_EQ(stat(P("f").c_str(), &st), 0);
  EXPECT_EQ(st.st_size, static_cast<off_t>(data.size()));
  EXPECT_EQ(st.st_mode & 07777, 0640u);
  EXPECT_EQ(st.st_uid, getuid());
  // Random reads at odd offsets.
  {
    int fd = open(P("f").c_str(), O_RDONLY);
    ASSERT_GE(fd, 0);
    std::mt19937 rng(7);
    for (int i = 0; i < 50; ++i) {
      const std::size_t off = rng() % data.size(), n = 1 + rng() % 100000;
      std::string buf(n, '\0');
      const ssize_t got = pread(fd, buf.data(), n, static_cast<off_t>(off));
      ASSERT_EQ(got, static_cast<ssize_t>(std::min(n, data.size() - off)));
      EXPECT_EQ(buf.substr(0, got), data.substr(off, got)) << off;
    }
    close(fd);
  }
  // Append.
  ASSERT_TRUE(WriteAll(P("f"), "tail", O_APPEND));
  EXPECT_EQ(ReadAll(P("f")), data + "tail");
  // Truncate down, then up: the cut part reads back as zeros, not old data.
  ASSERT_EQ(truncate(P("f").c_str(), 1000), 0);
  EXPECT_EQ(ReadAll(P("f")), data.substr(0, 1000));
  ASSERT_EQ(truncate(P("f").c_str(), 2 * kChunk), 0);
  EXPECT_EQ(ReadAll(P("f")), data.substr(0, 1000) + std::string(2 * kChunk - 1000, '\0'));
  // O_TRUNC on open.
  ASSERT_TRUE(WriteAll(P("f"), "short"));
  EXPECT_EQ(ReadAll(P("f")), "short");
  // A sparse file larger than 4 GiB: a hole, then data past 4 GiB.
  {
    const off_t far = (off_t{4} << 30) + 12345;
    int fd = open(P("sparse").c_str(), O_RDWR | O_CREAT, 0644);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(ftruncate(fd, off_t{5} << 30), 0);
    ASSERT_EQ(pwrite(fd, "far away", 8, far), 8);
    ASSERT_EQ(close(fd), 0);
    ASSERT_EQ(stat(P("sparse").c_str(), &st), 0);
    EXPECT_EQ(st.st_size, off_t{5} << 30);
    fd = open(P("sparse").c_str(), O_RDONLY);
    char buf[16] = {};
    ASSERT_EQ(pread(fd, buf, 8, far), 8);
    EXPECT_EQ(std::string(buf, 8), "far away");
    ASSERT_EQ(pread(fd, buf, 16, off_t{3} << 30), 16);
    EXPECT_EQ(std::string(buf, 16), std::string(16, '\0'));
    EXPECT_EQ(pread(fd, buf, 16, (off_t{5} << 30) - 4), 4);  // short at the end
    close(fd);
  }
  // fsync settles the length for others before close.
  {
    int fd = open(P("synced").c_str(), O_WRONLY | O_CREAT, 0644);
    ASSERT_EQ(write(fd, "0123456789", 10), 10);
    ASSERT_EQ(fsync(fd), 0);
    MetaClient meta(MetaClientOptions{.address = cluster_->meta_address_});  // any engine
    fs3rpc::NameRequest r;
    struct stat dst {};
    ASSERT_EQ(stat(root_.c_str(), &dst), 0);
    r.set_parent(dst.st_ino);
    r.set_name("synced");
    fs3rpc::Inode inode;
    ASSERT_TRUE(meta.Lookup(r, &inode).ok());
    EXPECT_EQ(inode.size(), 10u);  // at fs3-meta, not only in this mount
    close(fd);
  }
}

TEST_F(FuseTest, DirectoriesAndEveryRenameCase) {
  ASSERT_EQ(mkdir(P("d").c_str(), 0750), 0);
  ASSERT_TRUE(WriteAll(P("d/f"), "x"));
  EXPECT_EQ(Errno(mkdir(P("d").c_str(), 0755)), EEXIST);
  EXPECT_EQ(Errno(rmdir(P("d").c_str())), ENOTEMPTY);
  EXPECT_EQ(Errno(rmdir(P("d/f").c_str())), ENOTDIR);
  EXPECT_EQ(Errno(mkdir(P("missing/x").c_str(), 0755)), ENOENT);
  EXPECT_EQ(Errno(mkdir(P("d/f/x").c_str(), 0755)), ENOTDIR);
  EXPECT_EQ(Errno(open(P(std::string(256, 'n')).c_str(), O_CREAT | O_WRONLY, 0644)), ENAMETOOLONG);
  struct stat st {};
  ASSERT_EQ(stat(P("d").c_str(), &st), 0);
  EXPECT_TRUE(S_ISDIR(st.st_mode));
  EXPECT_EQ(st.st_nlink, 2u);
  // Replacing a file.
  ASSERT_TRUE(WriteAll(P("a"), "A"));
  ASSERT_TRUE(WriteAll(P("b"), "B"));
  struct stat sa {};
  ASSERT_EQ(stat(P("a").c_str(), &sa), 0);
  ASSERT_EQ(rename(P("a").c_str(), P("b").c_str()), 0);
  EXPECT_EQ(ReadAll(P("b")), "A");
  ASSERT_EQ(stat(P("b").c_str(), &st), 0);
  EXPECT_EQ(st.st_ino, sa.st_ino);
  EXPECT_EQ(Errno(access(P("a").c_str(), F_OK)), ENOENT);
  // Directory over an empty directory; over a non-empty one; file over directory and back.
  ASSERT_EQ(mkdir(P("e").c_str(), 0755), 0);
  ASSERT_EQ(rename(P("e").c_str(), P("d2").c_str()), 0);
  ASSERT_EQ(mkdir(P("e").c_str(), 0755), 0);
  ASSERT_EQ(rename(P("e").c_str(), P("d2").c_str()), 0);  // d2 was empty
  EXPECT_EQ(Errno(rename(P("d2").c_str(), P("d").c_str())), ENOTEMPTY);
  EXPECT_EQ(Errno(rename(P("b").c_str(), P("d").c_str())), EISDIR);
  EXPECT_EQ(Errno(rename(P("d2").c_str(), P("b").c_str())), ENOTDIR);
  // No directory under itself.
  ASSERT_EQ(mkdir(P("d/sub").c_str(), 0755), 0);
  EXPECT_EQ(Errno(rename(P("d").c_str(), P("d/sub/d").c_str())), EINVAL);
  // Across directories, with link counts following.
  ASSERT_EQ(rename(P("d/sub").c_str(), P("d2/sub").c_str()), 0);
  ASSERT_EQ(stat(P("d").c_str(), &st), 0);
  EXPECT_EQ(st.st_nlink, 2u);
  ASSERT_EQ(stat(P("d2").c_str(), &st), 0);
  EXPECT_EQ(st.st_nlink, 3u);
  // RENAME_NOREPLACE and RENAME_EXCHANGE.
  ASSERT_TRUE(WriteAll(P("x"), "X"));
  ASSERT_TRUE(WriteAll(P("y"), "Y"));
  EXPECT_EQ(Errno(renameat2(AT_FDCWD, P("x").c_str(), AT_FDCWD, P("y").c_str(), RENAME_NOREPLACE)),
            EEXIST);
  ASSERT_EQ(renameat2(AT_FDCWD, P("x").c_str(), AT_FDCWD, P("z").c_str(), RENAME_NOREPLACE), 0);
  ASSERT_EQ(renameat2(AT_FDCWD, P("z").c_str(), AT_FDCWD, P("y").c_str(), RENAME_EXCHANGE), 0);
  EXPECT_EQ(ReadAll(P("y")), "X");
  EXPECT_EQ(ReadAll(P("z")), "Y");
  ASSERT_EQ(renameat2(AT_FDCWD, P("d").c_str(), AT_FDCWD, P("z").c_str(), RENAME_EXCHANGE), 0);
  ASSERT_EQ(stat(P("z").c_str(), &st), 0);
  EXPECT_TRUE(S_ISDIR(st.st_mode));
  EXPECT_EQ(ReadAll(P("d")), "Y");
  EXPECT_EQ(Errno(renameat2(AT_FDCWD, P("q").c_str(), AT_FDCWD, P("y").c_str(), RENAME_EXCHANGE)),
            ENOENT);
  ASSERT_EQ(unlink(P("z/f").c_str()), 0);
  ASSERT_EQ(rmdir(P("z").c_str()), 0);
}

TEST_F(FuseTest, LinksSymlinksAndSpecialFiles) {
  ASSERT_TRUE(WriteAll(P("f"), "data"));
  ASSERT_EQ(link(P("f").c_str(), P("g").c_str()), 0);
  struct stat sf {
  }, sg{};
  ASSERT_EQ(stat(P("f").c_str(), &sf), 0);
  ASSERT_EQ(stat(P("g").c_str(), &sg), 0);
  EXPECT_EQ(sf.st_ino, sg.st_ino);
  EXPECT_EQ(sg.st_nlink, 2u);
  ASSERT_EQ(unlink(P("f").c_str()), 0);
  ASSERT_EQ(stat(P("g").c_str(), &sg), 0);
  EXPECT_EQ(sg.st_nlink, 1u);
  EXPECT_EQ(ReadAll(P("g")), "data");
  EXPECT_EQ(Errno(link(P(".").c_str(), P("dirlink").c_str())), EPERM);
  // Symbolic links: readlink, followed by open, lstat sees the link.
  ASSERT_EQ(symlink("g", P("s").c_str()), 0);
  char target[64] = {};
  ASSERT_EQ(readlink(P("s").c_str(), target, sizeof target), 1);
  EXPECT_EQ(std::string(target), "g");
  EXPECT_EQ(ReadAll(P("s")), "data");
  struct stat sl {};
  ASSERT_EQ(lstat(P("s").c_str(), &sl), 0);
  EXPECT_TRUE(S_ISLNK(sl.st_mode));
  EXPECT_EQ(Errno(symlink("x", P("g").c_str())), EEXIST);
  // FIFOs, sockets and device nodes are metadata.
  ASSERT_EQ(mkfifo(P("fifo").c_str(), 0600), 0);
  ASSERT_EQ(mknod(P("sock").c_str(), S_IFSOCK | 0644, 0), 0);
  ASSERT_EQ(mknod(P("null").c_str(), S_IFCHR | 0666, makedev(1, 3)), 0);
  ASSERT_EQ(mknod(P("blk").c_str(), S_IFBLK | 0600, makedev(8, 1)), 0);
  struct stat s {};
  ASSERT_EQ(lstat(P("fifo").c_str(), &s), 0);
  EXPECT_TRUE(S_ISFIFO(s.st_mode));
  ASSERT_EQ(lstat(P("sock").c_str(), &s), 0);
  EXPECT_TRUE(S_ISSOCK(s.st_mode));
  ASSERT_EQ(lstat(P("null").c_str(), &s), 0);
  EXPECT_TRUE(S_ISCHR(s.st_mode));
  EXPECT_EQ(s.st_rdev, makedev(1, 3));
  ASSERT_EQ(lstat(P("blk").c_str(), &s), 0);
  EXPECT_TRUE(S_ISBLK(s.st_mode));
  EXPECT_EQ(s.st_rdev, makedev(8, 1));
}

TEST_F(FuseTest, UnlinkedWhileOpenStaysReadableThenItsChunksGo) {
  const std::string data = RandomBytes(2 * kChunk + 7, 3);
  ASSERT_TRUE(WriteAll(P("f"), data));
  struct stat st {};
  ASSERT_EQ(stat(P("f").c_str(), &st), 0);
  const uint64_t ino = st.st_ino;
  int fd = open(P("f").c_str(), O_RDONLY);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(unlink(P("f").c_str()), 0);
  EXPECT_EQ(Errno(access(P("f").c_str(), F_OK)), ENOENT);
  std::string buf(data.size(), '\0');
  ASSERT_EQ(pread(fd, buf.data(), buf.size(), 0), static_cast<ssize_t>(data.size()));
  EXPECT_EQ(buf, data);
  ASSERT_EQ(fstat(fd, &st), 0);
  EXPECT_EQ(st.st_nlink, 0u);
  auto storage = Storage();
  ASSERT_NE(storage, nullptr);
  EXPECT_EQ(*storage->StoredLength(ino), data.size());  // still there while open
  ASSERT_EQ(close(fd), 0);
  // The garbage collector deletes the chunks once the last session closed.
  EXPECT_TRUE(WaitUntil([&] { return *storage->StoredLength(ino) == 0; }, 20s));
}

// A mount that dies (kill -9) holding a file open: its session ends with its lease, and the file,
// unlinked meanwhile through another mount, goes then. While the mount lives it renews its lease,
// and the file stays past the lease's time.
TEST_F(FuseTest, AMountThatDiesLosesItsOpenFilesByLease) {
  const std::string data = RandomBytes(kChunk + 5, 4);
  ASSERT_TRUE(WriteAll(P("held"), data));
  struct stat st {};
  ASSERT_EQ(stat(P("held").c_str(), &st), 0);
  const uint64_t ino = st.st_ino;
  const std::string other = cluster_->Mount("mnt-dying");
  const std::string held = other + FsPath("held");
  int fd = open(held.c_str(), O_RDONLY);
  ASSERT_GE(fd, 0) << strerror(errno);
  ASSERT_EQ(unlink(P("held").c_str()), 0);
  auto storage = Storage();
  ASSERT_NE(storage, nullptr);
  std::this_thread::sleep_for(5s);  // past the lease: the live mount renews it
  EXPECT_EQ(*storage->StoredLength(ino), data.size()) << "an open file's data went";
  std::string buf(data.size(), '\0');
  ASSERT_EQ(pread(fd, buf.data(), buf.size(), 0), static_cast<ssize_t>(data.size()));
  EXPECT_EQ(buf, data);
  cluster_->Kill("fuse-mnt-dying");
  EXPECT_TRUE(WaitUntil([&] { return *storage->StoredLength(ino) == 0; }, 30s))
      << "the dead mount's session did not end with its lease";
  close(fd);  // on the dead mount: whatever it says
  EXPECT_TRUE(cluster_->Fsck().empty());
}

// A mount that dies (kill -9) in the middle of writing a file: the buffers it had already
// written landed on storage, but the file's length is recorded at close or fsync, which never
// came. When the dead mount's lease ends, fs3-meta settles the length from storage: the file
// reads back what landed, and fsck finds no data past its end.
TEST_F(FuseTest, AMountThatDiesMidWriteLeavesALengthThatCoversTheDataThatLanded) {
  const std::string dying = cluster_->Mount("mnt-dies-writing");
  const std::string dir =
      dying + "/" + ::testing::UnitTest::GetInstance()->current_test_info()->name();
  const std::string data = RandomBytes(3 * (4 << 20), 7);  // three of fs3-fuse's write buffers
  int fd = open((dir + "/partial").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  ASSERT_GE(fd, 0) << strerror(errno);
  ASSERT_EQ(write(fd, data.data(), data.size()), static_cast<ssize_t>(data.size()));
  struct stat st {};
  ASSERT_EQ(fstat(fd, &st), 0);
  const uint64_t ino = st.st_ino;
  auto storage = Storage();
  ASSERT_NE(storage, nullptr);
  // The full buffers go to storage as they fill (the last one waits for a flush).
  ASSERT_TRUE(WaitUntil([&] { return *storage->StoredLength(ino) >= (8u << 20); }, 30s));
  cluster_->Kill("fuse-mnt-dies-writing");
  // The lease (3 s) ends, then the sweep settles the length.
  uint64_t landed = 0;
  EXPECT_TRUE(WaitUntil(
      [&] {
        landed = *storage->StoredLength(ino);
        struct stat now {};
        return stat(P("partial").c_str(), &now) == 0 &&
               static_cast<uint64_t>(now.st_size) == landed;
      },
      30s))
      << "the length of a file whose writer died does not cover the " << landed
      << " bytes that landed";
  EXPECT_THAT(cluster_->Fsck(), ::testing::IsEmpty());
  // Each chunk holds what was written to it, or nothing (zeros) where the mount died before
  // its chunk was sent: the buffers' chunks go out in parallel.
  const std::string back = ReadAll(P("partial"));
  ASSERT_EQ(back.size(), landed);
  ASSERT_GE(landed, 8u << 20);
  int written = 0;
  for (uint64_t at = 0; at < landed; at += kChunk) {
    const std::string got = back.substr(at, kChunk);
    if (got == data.substr(at, got.size())) {
      ++written;
    } else {
      EXPECT_TRUE(got == std::string(got.size(), '\0'))
          << "the chunk at " << at << " holds neither what was written nor zeros";
    }
  }
  EXPECT_GE(written, 1);
  EXPECT_EQ(back.substr(landed - 1000), data.substr(landed - 1000, 1000)) << "the last chunk";
  close(fd);  // on the dead mount: whatever it says
}

// A mount frozen (SIGSTOP) longer than its lease is taken for dead; thawed, it hears its lease
// expired, registers again and opens its files' sessions again: a file it held open is still
// read through the old descriptor and its session is back (an unlink elsewhere keeps the data
// until that descriptor closes); new files open and write as before.
TEST_F(FuseTest, AMountCutOffLongerThanItsLeaseRegistersAgain) {
  const std::string other = cluster_->Mount("mnt-frozen");
  const std::string dir =
      other + "/" + ::testing::UnitTest::GetInstance()->current_test_info()->name();
  const std::string data = RandomBytes(kChunk / 2, 5);
  ASSERT_TRUE(WriteAll(dir + "/kept", data));
  int fd = open((dir + "/kept").c_str(), O_RDONLY);
  ASSERT_GE(fd, 0) << strerror(errno);
  cluster_->proc("fuse-mnt-frozen").Signal(SIGSTOP);
  std::this_thread::sleep_for(6s);  // twice the lease
  cluster_->proc("fuse-mnt-frozen").Signal(SIGCONT);
  // New opens work (a session refused for the expired lease registers the mount again).
  const std::string fresh = RandomBytes(1000, 6);
  ASSERT_TRUE(WriteAll(dir + "/after", fresh));
  EXPECT_EQ(ReadAll(dir + "/after"), fresh);
  // The file held open through the freeze got its session back: unlinked elsewhere, it keeps
  // its data while the descriptor is open.
  struct stat st {};
  ASSERT_EQ(fstat(fd, &st), 0);
  const uint64_t ino = st.st_ino;
  auto storage = Storage();
  ASSERT_NE(storage, nullptr);
  EXPECT_TRUE(WaitUntil(
      [&] {
        return cluster_->Fsck().empty();  // the session reopened (no orphan, nothing dangling)
      },
      10s));
  ASSERT_EQ(unlink(P("kept").c_str()), 0);
  std::this_thread::sleep_for(2s);
  EXPECT_EQ(*storage->StoredLength(ino), data.size()) << "a reopened session's file went";
  std::string buf(data.size(), '\0');
  ASSERT_EQ(pread(fd, buf.data(), buf.size(), 0), static_cast<ssize_t>(data.size()));
  EXPECT_EQ(buf, data);
  ASSERT_EQ(close(fd), 0);
  EXPECT_TRUE(WaitUntil([&] { return *storage->StoredLength(ino) == 0; }, 20s));
}

TEST_F(FuseTest, FsckChecksTheChunksAgainstTheNamespace) {
  EXPECT_THAT(cluster_->Fsck(), ::testing::IsEmpty());
  ASSERT_TRUE(WriteAll(P("f"), "0123456789"));
  struct stat st {};
  ASSERT_EQ(stat(P("f").c_str(), &st), 0);
  auto storage = Storage();
  ASSERT_NE(storage, nullptr);
  // Damage behind fs3-meta's back: chunks of an inode that does not exist, and data written past
  // a closed file's recorded length.
  const uint64_t ghost = uint64_t{1} << 40;
  ASSERT_TRUE(storage->Write(ghost, 0, "ghost data").ok());
  ASSERT_TRUE(storage->Write(st.st_ino, 10, "more").ok());
  auto found = cluster_->Fsck();
  ASSERT_EQ(found.size(), 2u) << ::testing::PrintToString(found);
  EXPECT_THAT(found, ::testing::Contains(::testing::HasSubstr("belong to no file")));
  EXPECT_THAT(found, ::testing::Contains(::testing::HasSubstr("records a length of 10")));
  EXPECT_EQ(cluster_->Fsck(/*repair=*/true).size(), 2u);
  // The orphan chunks are deleted by the garbage collector; the file keeps its data.
  EXPECT_TRUE(WaitUntil([&] { return *storage->StoredLength(ghost) == 0; }, 20s));
  EXPECT_THAT(cluster_->Fsck(), ::testing::IsEmpty());
  EXPECT_EQ(ReadAll(P("f")), "0123456789more");
}

TEST_F(FuseTest, ExtendedAttributes) {
  ASSERT_TRUE(WriteAll(P("f"), "x"));
  const std::string f = P("f");
  ASSERT_EQ(setxattr(f.c_str(), "user.a", "1", 1, 0), 0);
  ASSERT_EQ(setxattr(f.c_str(), "user.b", "two", 3, 0), 0);
  ASSERT_EQ(setxattr(f.c_str(), "trusted.t", "t", 1, 0), 0);  // root may
  char buf[64] = {};
  EXPECT_EQ(getxattr(f.c_str(), "user.b", nullptr, 0), 3);  // size query
  ASSERT_EQ(getxattr(f.c_str(), "user.b", buf, sizeof buf), 3);
  EXPECT_EQ(std::string(buf, 3), "two");
  EXPECT_EQ(Errno(getxattr(f.c_str(), "user.b", buf, 1)), ERANGE);
  EXPECT_EQ(Errno(getxattr(f.c_str(), "user.none", buf, sizeof buf)), ENODATA);
  EXPECT_EQ(Errno(setxattr(f.c_str(), "user.a", "x", 1, XATTR_CREATE)), EEXIST);
  EXPECT_EQ(Errno(setxattr(f.c_str(), "user.c", "x", 1, XATTR_REPLACE)), ENODATA);
  char names[256] = {};
  const ssize_t n = listxattr(f.c_str(), names, sizeof names);
  ASSERT_GT(n, 0);
  std::set<std::string> listed;
  for (ssize_t i = 0; i < n; i += static_cast<ssize_t>(strlen(names + i)) + 1)
    listed.insert(names + i);
  EXPECT_EQ(listed, (std::set<std::string>{"user.a", "user.b", "trusted.t"}));
  ASSERT_EQ(removexattr(f.c_str(), "user.a"), 0);
  EXPECT_EQ(Errno(removexattr(f.c_str(), "user.a")), ENODATA);
  // Another user: no trusted.* at all; user.* only with write permission.
  ASSERT_EQ(chmod(f.c_str(), 0644), 0);
  EXPECT_EQ(AsUser(kNobody, kNogroup, {},
                   [&] { return Errno(setxattr(f.c_str(), "user.z", "z", 1, 0)); }),
            EACCES);
  EXPECT_EQ(AsUser(kNobody, kNogroup, {},
                   [&] {
                     char b[8];
                     return Errno(
                         static_cast<int>(getxattr(f.c_str(), "user.b", b, sizeof b)) < 0 ? -1 : 0);
                   }),
            0);
}

TEST_F(FuseTest, TimestampsFollowPosix) {
  ASSERT_TRUE(WriteAll(P("f"), "x"));
  struct stat a {
  }, b{};
  ASSERT_EQ(stat(P("f").c_str(), &a), 0);
  std::this_thread::sleep_for(20ms);
  ASSERT_TRUE(WriteAll(P("f"), "yy", 0));  // overwrite in place: mtime and ctime move
  ASSERT_EQ(stat(P("f").c_str(), &b), 0);
  EXPECT_GT(b.st_mtim.tv_sec * 1000000000L + b.st_mtim.tv_nsec,
            a.st_mtim.tv_sec * 1000000000L + a.st_mtim.tv_nsec);
  // chmod: ctime moves, mtime does not.
  std::this_thread::sleep_for(20ms);
  ASSERT_EQ(chmod(P("f").c_str(), 0600), 0);
  struct stat c {};
  ASSERT_EQ(stat(P("f").c_str(), &c), 0);
  EXPECT_EQ(c.st_mtim.tv_nsec, b.st_mtim.tv_nsec);
  EXPECT_GT(c.st_ctim.tv_sec * 1000000000L + c.st_ctim.tv_nsec,
            b.st_ctim.tv_sec * 1000000000L + b.st_ctim.tv_nsec);
  // Explicit times, to the nanosecond.
  timespec times[2] = {{1000, 123456789}, {2000, 987654321}};
  ASSERT_EQ(utimensat(AT_FDCWD, P("f").c_str(), times, 0), 0);
  ASSERT_EQ(stat(P("f").c_str(), &c), 0);
  EXPECT_EQ(c.st_atim.tv_sec, 1000);
  EXPECT_EQ(c.st_atim.tv_nsec, 123456789);
  EXPECT_EQ(c.st_mtim.tv_sec, 2000);
  EXPECT_EQ(c.st_mtim.tv_nsec, 987654321);
  // Creating an entry moves the directory's mtime.
  struct stat d1 {
  }, d2{};
  ASSERT_EQ(stat(root_.c_str(), &d1), 0);
  std::this_thread::sleep_for(20ms);
  ASSERT_TRUE(WriteAll(P("g"), ""));
  ASSERT_EQ(stat(root_.c_str(), &d2), 0);
  EXPECT_GT(d2.st_mtim.tv_sec * 1000000000L + d2.st_mtim.tv_nsec,
            d1.st_mtim.tv_sec * 1000000000L + d1.st_mtim.tv_nsec);
}

TEST_F(FuseTest, PermissionsAsAnotherUser) {
  ASSERT_EQ(chmod(root_.c_str(), 0755), 0);
  ASSERT_TRUE(WriteAll(P("private"), "secret"));
  ASSERT_EQ(chmod(P("private").c_str(), 0600), 0);
  auto open_as = [&](const std::string& path, int flags, std::vector<gid_t> groups = {}) {
    return AsUser(kNobody, kNogroup, groups, [&] {
      int fd = open(path.c_str(), flags, 0644);
      if (fd < 0) return errno;
      close(fd);
      return 0;
    });
  };
  EXPECT_EQ(open_as(P("private"), O_RDONLY), EACCES);
  EXPECT_EQ(open_as(P("new"), O_WRONLY | O_CREAT), EACCES);  // no write permission on the dir
  EXPECT_EQ(AsUser(kNobody, kNogroup, {}, [&] { return Errno(chmod(P("private").c_str(), 0777)); }),
            EPERM);
  EXPECT_EQ(AsUser(kNobody, kNogroup, {},
                   [&] { return Errno(chown(P("private").c_str(), kNobody, kNogroup)); }),
            EPERM);
  // Supplementary groups count.
  ASSERT_TRUE(WriteAll(P("group"), "g"));
  ASSERT_EQ(chown(P("group").c_str(), 0, 4242), 0);
  ASSERT_EQ(chmod(P("group").c_str(), 0640), 0);
  EXPECT_EQ(open_as(P("group"), O_RDONLY), EACCES);
  EXPECT_EQ(open_as(P("group"), O_RDONLY, {4242}), 0);
  // New files belong to the caller; in a sticky directory only the owner may remove them.
  ASSERT_EQ(mkdir(P("tmp").c_str(), 01777), 0);
  ASSERT_EQ(chmod(P("tmp").c_str(), 01777), 0);
  EXPECT_EQ(open_as(P("tmp/mine"), O_WRONLY | O_CREAT), 0);
  struct stat st {};
  ASSERT_EQ(stat(P("tmp/mine").c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, kNobody);
  EXPECT_EQ(st.st_gid, kNogroup);
  ASSERT_TRUE(WriteAll(P("tmp/roots"), "r"));
  EXPECT_EQ(AsUser(kNobody, kNogroup, {}, [&] { return Errno(unlink(P("tmp/roots").c_str())); }),
            EPERM);
  EXPECT_EQ(AsUser(kNobody, kNogroup, {},
                   [&] { return Errno(rename(P("tmp/roots").c_str(), P("tmp/x").c_str())); }),
            EPERM);
  EXPECT_EQ(AsUser(kNobody, kNogroup, {}, [&] { return Errno(unlink(P("tmp/mine").c_str())); }), 0);
  EXPECT_EQ(access(P("tmp/roots").c_str(), F_OK), 0);
}

// As on Linux: a write or truncate by someone other than the owner succeeds where the mode lets
// them write, and drops the set-user-ID bit (and set-group-ID where group execute is set).
TEST_F(FuseTest, WriteByAnotherUserClearsSetuidAndSetgid) {
  ASSERT_EQ(chmod(root_.c_str(), 0755), 0);
  ASSERT_TRUE(WriteAll(P("tool"), "old contents"));
  ASSERT_EQ(chmod(P("tool").c_str(), 06777), 0);
  auto mode_of = [&](const std::string& path) {
    struct stat st {};
    EXPECT_EQ(stat(path.c_str(), &st), 0);
    return st.st_mode & 07777;
  };
  ASSERT_EQ(mode_of(P("tool")), 06777u);
  EXPECT_EQ(AsUser(kNobody, kNogroup, {},
                   [&] {
                     int fd = open(P("tool").c_str(), O_WRONLY);
                     if (fd < 0) return errno;
                     const int rc = pwrite(fd, "NEW", 3, 0) == 3 ? 0 : errno;
                     close(fd);
                     return rc;
                   }),
            0);
  EXPECT_EQ(ReadAll(P("tool")), "NEW contents");
  EXPECT_EQ(mode_of(P("tool")), 0777u);
  // truncate(2) by a non-owner; a setgid file without group execute keeps its setgid bit (there
  // it marks mandatory locking, not privilege, and the kernel does not ask to drop it).
  ASSERT_EQ(chmod(P("tool").c_str(), 06766), 0);
  EXPECT_EQ(AsUser(kNobody, kNogroup, {}, [&] { return Errno(truncate(P("tool").c_str(), 3)); }),
            0);
  EXPECT_EQ(ReadAll(P("tool")), "NEW");
  EXPECT_EQ(mode_of(P("tool")), 02766u);
  // Dropping the bits is all a non-owner may do with the mode.
  EXPECT_EQ(AsUser(kNobody, kNogroup, {}, [&] { return Errno(chmod(P("tool").c_str(), 0766)); }),
            EPERM);
  // Without write permission nothing changes.
  ASSERT_EQ(chmod(P("tool").c_str(), 06755), 0);
  EXPECT_EQ(AsUser(kNobody, kNogroup, {}, [&] { return Errno(truncate(P("tool").c_str(), 0)); }),
            EACCES);
  EXPECT_EQ(mode_of(P("tool")), 06755u);
  EXPECT_EQ(ReadAll(P("tool")), "NEW");
}

// Permission to change a file's length through a descriptor is decided when it is opened: a file
// created with mode 0 by O_CREAT|O_RDWR can be written and ftruncated through that descriptor.
TEST_F(FuseTest, FtruncateThroughAWritableDescriptorIgnoresTheModeNow) {
  ASSERT_EQ(chmod(root_.c_str(), 0777), 0);
  EXPECT_EQ(AsUser(kNobody, kNogroup, {},
                   [&] {
                     int fd = open(P("locked").c_str(), O_CREAT | O_RDWR | O_EXCL, 0);
                     if (fd < 0) return errno;
                     int rc = write(fd, "0123456789", 10) == 10 ? 0 : errno;
                     if (rc == 0 && ftruncate(fd, 4) != 0) rc = errno;
                     if (rc == 0 && ftruncate(fd, 8) != 0) rc = errno;
                     close(fd);
                     return rc;
                   }),
            0);
  struct stat st {};
  ASSERT_EQ(stat(P("locked").c_str(), &st), 0);
  EXPECT_EQ(st.st_size, 8);
  EXPECT_EQ(st.st_mode & 07777, 0u);
  EXPECT_EQ(ReadAll(P("locked")), std::string("0123\0\0\0\0", 8));
  // A path truncate by the same user is refused: the mode says no.
  EXPECT_EQ(AsUser(kNobody, kNogroup, {}, [&] { return Errno(truncate(P("locked").c_str(), 0)); }),
            EACCES);
}

// Listings carry "." and ".." with their inode numbers (readdir(3) hides an entry whose d_ino is
// 0), as ls -a shows them; ".." of the mount's root is the root.
TEST_F(FuseTest, ListingsCarryDotAndDotDot) {
  ASSERT_EQ(mkdir(P("sub").c_str(), 0755), 0);
  auto list = [](const std::string& dir) {
    std::map<std::string, ino_t> names;
    DIR* d = opendir(dir.c_str());
    EXPECT_NE(d, nullptr) << dir;
    if (d == nullptr) return names;
    while (dirent* e = readdir(d))
      names[e->d_name] = e->d_ino;
    closedir(d);
    return names;
  };
  struct stat root {
  }, sub{};
  ASSERT_EQ(stat(root_.c_str(), &root), 0);
  ASSERT_EQ(stat(P("sub").c_str(), &sub), 0);
  auto names = list(P("sub"));
  ASSERT_EQ(names.count("."), 1u);
  ASSERT_EQ(names.count(".."), 1u);
  EXPECT_EQ(names["."], sub.st_ino);
  EXPECT_EQ(names[".."], root.st_ino);
  EXPECT_EQ(names.size(), 2u);
  struct stat top {};
  ASSERT_EQ(stat(cluster_->mount_.c_str(), &top), 0);
  auto at_top = list(cluster_->mount_);
  ASSERT_EQ(at_top.count(".."), 1u);
  EXPECT_EQ(at_top[".."], top.st_ino);
}

TEST_F(FuseTest, ReaddirOfTenThousandEntries) {
  constexpr int kEntries = 10000;
  for (int i = 0; i < kEntries; ++i) {
    ASSERT_EQ(mknod(P("e" + std::to_string(i)).c_str(), S_IFREG | 0644, 0), 0) << i;
  }
  std::set<std::string> seen;
  DIR* d = opendir(root_.c_str());
  ASSERT_NE(d, nullptr);
  long middle = -1;
  std::string after_middle;
  int count = 0;
  while (dirent* e = readdir(d)) {
    const std::string name = e->d_name;
    if (name == "." || name == "..") continue;
    EXPECT_TRUE(seen.insert(name).second) << "twice: " << name;
    EXPECT_EQ(e->d_type, DT_REG);
    if (++count == kEntries / 2) middle = telldir(d);
    if (count == kEntries / 2 + 1) after_middle = name;
  }
  EXPECT_EQ(seen.size(), static_cast<std::size_t>(kEntries));
  // A cursor: seekdir back to the middle resumes there.
  seekdir(d, middle);
  dirent* e = readdir(d);
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(std::string(e->d_name), after_middle);
  closedir(d);
}

// A missing extended attribute is answered from the names that came with the file's attributes
// (no round trip for the kernel's security.capability check before every write): a change on
// this mount shows at once, one on another mount within the attribute timeout (1 s).
TEST_F(FuseTest, MissingXattrsAreCachedWithTheAttributesAndStayCorrect) {
  const std::string second = cluster_->Mount("mnt3");
  const std::string rel = FsPath("f");
  const std::string here = cluster_->mount_ + rel, there = second + rel;
  ASSERT_TRUE(WriteAll(here, "x"));
  auto get = [](const std::string& path, const char* name) -> std::string {
    char buf[64];
    ssize_t n = getxattr(path.c_str(), name, buf, sizeof buf);
    return n < 0 ? "errno " + std::to_string(errno) : std::string(buf, static_cast<size_t>(n));
  };
  struct stat st {};
  ASSERT_EQ(stat(here.c_str(), &st), 0);  // attributes (and the names) fresh on this mount
  EXPECT_EQ(get(here, "security.capability"), "errno " + std::to_string(ENODATA));
  for (int i = 0; i < 100; ++i)  // every write asks for security.capability
    ASSERT_TRUE(WriteAll(here, std::to_string(i), O_APPEND));
  EXPECT_EQ(get(here, "user.tag"), "errno " + std::to_string(ENODATA));
  ASSERT_EQ(setxattr(here.c_str(), "user.tag", "v1", 2, 0), 0);
  EXPECT_EQ(get(here, "user.tag"), "v1");  // this mount's own change, at once
  ASSERT_EQ(removexattr(here.c_str(), "user.tag"), 0);
  EXPECT_EQ(get(here, "user.tag"), "errno " + std::to_string(ENODATA));
  // Set on the other mount: seen here once the cached attributes expire.
  ASSERT_EQ(setxattr(there.c_str(), "user.other", "v2", 2, 0), 0);
  bool seen = false;
  for (auto deadline = std::chrono::steady_clock::now() + 5s;
       !seen && std::chrono::steady_clock::now() < deadline;) {
    struct stat again {};
    ASSERT_EQ(stat(here.c_str(), &again), 0);
    seen = get(here, "user.other") == "v2";
    if (!seen) std::this_thread::sleep_for(100ms);
  }
  EXPECT_TRUE(seen) << "another mount's xattr never showed";
  ASSERT_EQ(system(("fusermount3 -u " + second).c_str()), 0);
  (void)cluster_->proc("fuse-mnt3").Wait(10s);
}

// A cluster of its own for a test that reads fs3-meta's metrics: one storage service, chains of
// one, every daemon serving /metrics, `meta_keys` added to fs3-meta's config.
test::Fs3ClusterOptions SmallClusterWithMetrics(const std::string& meta_keys = "") {
  test::Fs3ClusterOptions o = test::FuseSuiteOptions(kChunk);
  o.services = 1;
  o.replication = 1;
  o.metrics = true;
  o.meta_keys += meta_keys;
  return o;
}

// fsync and fsyncdir on the mount answer once fs3-meta's log is on disk, also where fs3-meta
// answers changes before they are (sync_interval_ms: here a minute, so only the calls sync it).
TEST(FuseDurabilityTest, FsyncAndFsyncdirWaitForTheNamespaceLog) {
  ASSERT_EQ(geteuid(), 0u) << "mounts with allow_other: run as root (CI does)";
  test::MountedFs3Cluster cluster(SmallClusterWithMetrics("sync_interval_ms = 60000\n"));
  const std::string metrics = cluster.ReadyField("meta", "metrics");
  auto unsynced = [&] {
    auto v = test::MetricValue(metrics, "fs3_meta_log_unsynced_writes");
    EXPECT_TRUE(v.ok()) << v.status();
    return v.ok() ? *v : -1;
  };
  const std::string dir = cluster.mount_ + "/d";
  ASSERT_EQ(mkdir(dir.c_str(), 0755), 0);
  int fd = open((dir + "/f").c_str(), O_CREAT | O_WRONLY, 0644);
  ASSERT_GE(fd, 0) << strerror(errno);
  ASSERT_EQ(write(fd, "data", 4), 4);
  EXPECT_GT(unsynced(), 0);
  ASSERT_EQ(fsync(fd), 0) << strerror(errno);
  EXPECT_EQ(unsynced(), 0);
  ASSERT_EQ(close(fd), 0);
  // A file that was not written: its fsync waits for the log all the same (its create).
  fd = open((dir + "/g").c_str(), O_CREAT | O_WRONLY, 0644);
  ASSERT_GE(fd, 0) << strerror(errno);
  EXPECT_GT(unsynced(), 0);
  ASSERT_EQ(fdatasync(fd), 0) << strerror(errno);
  EXPECT_EQ(unsynced(), 0);
  ASSERT_EQ(close(fd), 0);
  // A rename, then fsync of the directory.
  ASSERT_EQ(rename((dir + "/g").c_str(), (dir + "/h").c_str()), 0);
  EXPECT_GT(unsynced(), 0);
  int dfd = open(dir.c_str(), O_RDONLY | O_DIRECTORY);
  ASSERT_GE(dfd, 0) << strerror(errno);
  ASSERT_EQ(fsync(dfd), 0) << strerror(errno);
  EXPECT_EQ(unsynced(), 0);
  close(dfd);
}

// Closes of files a mount did not write go to fs3-meta gathered (CloseMany), and every one lands.
TEST(FuseCloseTest, ClosesOfFilesNotWrittenGoTogetherAndAllLand) {
  ASSERT_EQ(geteuid(), 0u) << "mounts with allow_other: run as root (CI does)";
  test::MountedFs3Cluster cluster(SmallClusterWithMetrics());
  const std::string metrics = cluster.ReadyField("meta", "metrics");
  auto count = [&](const std::string& op) {
    auto v = test::MetricValue(metrics, "fs3_meta_op_seconds_count{op=\"" + op + "\"}");
    return v.ok() ? *v : 0.0;
  };
  const double closes0 = count("close"), batches0 = count("closemany");
  constexpr int kThreads = 8, kFiles = 40;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      const std::string dir = cluster.mount_ + "/t" + std::to_string(t);
      ASSERT_EQ(mkdir(dir.c_str(), 0755), 0);
      for (int i = 0; i < kFiles; ++i) {
        const int fd = open((dir + "/f" + std::to_string(i)).c_str(), O_CREAT | O_WRONLY, 0644);
        ASSERT_GE(fd, 0) << strerror(errno);
        ASSERT_EQ(close(fd), 0);
      }
    });
  }
  for (auto& t : threads)
    t.join();
  EXPECT_TRUE(WaitUntil([&] { return count("close") - closes0 >= kThreads * kFiles; }, 10s))
      << count("close") - closes0 << " of " << kThreads * kFiles << " closes landed";
  const double batches = count("closemany") - batches0;
  EXPECT_GE(batches, 1);
  EXPECT_LT(batches, kThreads * kFiles) << "no two closes went together";
}

// A read-only descriptor's close sends the mount no FLUSH (it has nothing to write back); a
// writer's still does, and reports what it must.
TEST_F(FuseTest, AReadOnlyCloseCostsNoFlush) {
  const std::string mnt = cluster_->Mount(
      "mnt-flush", {"--set", "metrics.enabled=true", "--set", "metrics.listen=127.0.0.1:0"});
  const std::string metrics = cluster_->ReadyField("fuse-mnt-flush", "metrics");
  auto flushes = [&] {
    auto v = test::MetricValue(metrics, "fs3_fuse_op_seconds_count{op=\"flush\"}");
    EXPECT_TRUE(v.ok()) << v.status();
    return v.ok() ? *v : -1;
  };
  const std::string f = mnt + FsPath("f");
  ASSERT_TRUE(WriteAll(f, "data"));
  const double before = flushes();
  for (int i = 0; i < 20; ++i) {
    const int fd = open(f.c_str(), O_RDONLY);
    ASSERT_GE(fd, 0) << strerror(errno);
    char buf[8];
    ASSERT_EQ(read(fd, buf, sizeof buf), 4);
    ASSERT_EQ(close(fd), 0);
  }
  EXPECT_EQ(flushes(), before) << "read-only closes sent FLUSH";
  ASSERT_TRUE(WriteAll(f, "more data"));
  EXPECT_EQ(flushes(), before + 1);
  EXPECT_EQ(ReadAll(cluster_->mount_ + FsPath("f")), "more data");
  ASSERT_EQ(system(("fusermount3 -u " + mnt).c_str()), 0);
  (void)cluster_->proc("fuse-mnt-flush").Wait(10s);
}

// `ls -la` of a directory costs one READDIRPLUS per page, not a lookup per entry, and the
// attributes it brings are right; a directory's getattr after a change in it is answered with the
// attributes that change returned, and they are right too.
TEST_F(FuseTest, ListingsBringAttributesAndDirectoryChangesNeedNoGetattr) {
  const std::string mnt = cluster_->Mount(
      "mnt4", {"--set", "metrics.enabled=true", "--set", "metrics.listen=127.0.0.1:0"});
  const std::string metrics = cluster_->ReadyField("fuse-mnt4", "metrics");
  ASSERT_FALSE(metrics.empty());
  auto counter = [&](const std::string& line) -> double {
    auto r = test::HttpGet(metrics, "/metrics");
    if (!r.ok()) return -1;
    std::istringstream in(r->body);
    for (std::string l; std::getline(in, l);) {
      if (l.rfind(line + " ", 0) == 0) return std::stod(l.substr(line.size() + 1));
    }
    return 0;
  };
  const std::string rel = FsPath("d");
  const std::string dir = mnt + rel;
  ASSERT_EQ(mkdir(dir.c_str(), 0755), 0);
  struct stat before {};
  ASSERT_EQ(stat(dir.c_str(), &before), 0);
  EXPECT_EQ(before.st_nlink, 2u);
  const double local0 = counter("fs3_fuse_dir_attrs_local_total");
  // Changes in the directory: its attributes, asked for right after each, are the new ones.
  ASSERT_EQ(mkdir((dir + "/sub").c_str(), 0700), 0);
  struct stat st {};
  ASSERT_EQ(stat(dir.c_str(), &st), 0);
  EXPECT_EQ(st.st_nlink, 3u);
  constexpr int kFiles = 300;
  for (int i = 0; i < kFiles; ++i) {
    ASSERT_TRUE(WriteAll(dir + "/f" + std::to_string(i), std::string(i, 'x')));
  }
  ASSERT_EQ(rename((dir + "/f0").c_str(), (dir + "/sub/moved").c_str()), 0);
  ASSERT_EQ(rmdir((dir + "/sub").c_str()), -1);  // not empty
  ASSERT_EQ(unlink((dir + "/sub/moved").c_str()), 0);
  ASSERT_EQ(rmdir((dir + "/sub").c_str()), 0);
  ASSERT_EQ(stat(dir.c_str(), &st), 0);
  EXPECT_EQ(st.st_nlink, 2u);
  EXPECT_GT(counter("fs3_fuse_dir_attrs_local_total"), local0);
  // And they match what fs3-meta holds, seen from a mount that changed nothing.
  struct stat other {};
  ASSERT_EQ(stat((cluster_->mount_ + rel).c_str(), &other), 0);
  EXPECT_EQ(other.st_nlink, st.st_nlink);
  EXPECT_EQ(other.st_mtim.tv_sec, st.st_mtim.tv_sec);
  EXPECT_EQ(other.st_mtim.tv_nsec, st.st_mtim.tv_nsec);

  // Past the entry and attribute timeouts, a listing with a stat of each entry.
  std::this_thread::sleep_for(1200ms);
  const double lookups0 = counter("fs3_fuse_op_seconds_count{op=\"lookup\"}");
  const double plus0 = counter("fs3_fuse_op_seconds_count{op=\"readdirplus\"}");
  int seen = 0;
  for (const auto& e : stdfs::directory_iterator(dir)) {
    struct stat es {};
    ASSERT_EQ(lstat(e.path().c_str(), &es), 0);
    const int i = std::stoi(e.path().filename().string().substr(1));
    EXPECT_EQ(es.st_size, i) << e.path();
    EXPECT_EQ(es.st_mode & 07777, 0644u) << e.path();
    EXPECT_TRUE(S_ISREG(es.st_mode));
    ++seen;
  }
  EXPECT_EQ(seen, kFiles - 1);
  EXPECT_GT(counter("fs3_fuse_op_seconds_count{op=\"readdirplus\"}"), plus0);
  EXPECT_LT(counter("fs3_fuse_op_seconds_count{op=\"lookup\"}") - lookups0, kFiles / 10)
      << "each entry was looked up";
  ASSERT_EQ(system(("fusermount3 -u " + mnt).c_str()), 0);
  (void)cluster_->proc("fuse-mnt4").Wait(10s);
}

TEST_F(FuseTest, CloseOnOneMountOpenOnAnotherSeesDataAndLength) {
  const std::string second = cluster_->Mount("mnt2");
  const std::string rel = std::string("/") +
                          ::testing::UnitTest::GetInstance()->current_test_info()->name() +
                          "/shared";
  const std::string data = RandomBytes(kChunk + 999, 5);
  ASSERT_TRUE(WriteAll(cluster_->mount_ + rel, data));
  EXPECT_EQ(ReadAll(second + rel), data);
  struct stat st {};
  ASSERT_EQ(stat((second + rel).c_str(), &st), 0);
  EXPECT_EQ(st.st_size, static_cast<off_t>(data.size()));
  // Rewritten (shorter, then longer) on the second mount while the first has the file's
  // attributes and pages cached: the first sees the new content on its next open, at once.
  EXPECT_EQ(ReadAll(cluster_->mount_ + rel), data);
  ASSERT_TRUE(WriteAll(second + rel, "v2"));
  EXPECT_EQ(ReadAll(cluster_->mount_ + rel), "v2");
  ASSERT_TRUE(WriteAll(second + rel, "version three"));
  EXPECT_EQ(ReadAll(cluster_->mount_ + rel), "version three");
  // Unmount cleanly: the daemon exits 0 and the directory is a plain directory again.
  ASSERT_EQ(system(("fusermount3 -u " + second).c_str()), 0);
  auto code = cluster_->proc("fuse-mnt2").Wait(10s);
  ASSERT_TRUE(code.has_value());
  EXPECT_EQ(*code, 0);
  EXPECT_EQ(Errno(access((second + rel).c_str(), F_OK)), ENOENT);
}

// What a second mount sees of changes made on the first (fs3-fuse.h, "Caching"): a new name at
// once (failed lookups are not cached); a removal, a rename and new attributes once the entry and
// attribute timeouts (1 s) have passed since the second mount last looked, never later; until
// then, at worst what it saw before, never anything else.
TEST_F(FuseTest, ChangesOnOneMountShowOnAnotherWithinTheTimeouts) {
  const std::string second = cluster_->Mount("mnt-other");
  const std::string rel = FsPath("");
  const std::string a = cluster_->mount_ + rel, b = second + rel;
  struct stat st {};
  ASSERT_EQ(Errno(stat((b + "new").c_str(), &st)), ENOENT);
  ASSERT_TRUE(WriteAll(a + "new", "x"));
  ASSERT_EQ(stat((b + "new").c_str(), &st), 0) << "a new name shows on the other mount at once";
  ASSERT_TRUE(WriteAll(a + "gone", "y"));
  ASSERT_TRUE(WriteAll(a + "moved", "z"));
  ASSERT_EQ(stat((b + "gone").c_str(), &st), 0);
  ASSERT_EQ(stat((b + "moved").c_str(), &st), 0);
  ASSERT_EQ(stat((b + "new").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0644u);
  const auto looked = std::chrono::steady_clock::now();  // the second mount's entries, fresh
  ASSERT_EQ(unlink((a + "gone").c_str()), 0);
  ASSERT_EQ(rename((a + "moved").c_str(), (a + "there").c_str()), 0);
  ASSERT_EQ(chmod((a + "new").c_str(), 0600), 0);
  // Until the timeouts pass the second mount may answer from what it saw; then it must not.
  for (;;) {
    const auto at = std::chrono::steady_clock::now();  // before the calls it judges
    const int gone = Errno(stat((b + "gone").c_str(), &st));
    const int moved = Errno(stat((b + "moved").c_str(), &st));
    ASSERT_EQ(stat((b + "new").c_str(), &st), 0);
    const unsigned mode = st.st_mode & 07777;
    EXPECT_TRUE(gone == 0 || gone == ENOENT) << strerror(gone);
    EXPECT_TRUE(mode == 0644 || mode == 0600) << std::oct << mode;
    // 1 s is the kernel's timeout from the last lookup; its clock's tick on top.
    if (at - looked >= 1100ms) {
      EXPECT_EQ(gone, ENOENT) << "a removal still not seen on the other mount after 1.1 s";
      EXPECT_EQ(moved, ENOENT) << "a rename still not seen on the other mount after 1.1 s";
      EXPECT_EQ(mode, 0600u) << "a chmod still not seen on the other mount after 1.1 s";
      break;
    }
    std::this_thread::sleep_for(50ms);
  }
  EXPECT_EQ(ReadAll(b + "there"), "z");
  ASSERT_EQ(system(("fusermount3 -u " + second).c_str()), 0);
  (void)cluster_->proc("fuse-mnt-other").Wait(10s);
}

TEST_F(FuseTest, MountErrorsAreClear) {
  auto run = [&](const std::string& where) {
    auto p = test::Subprocess::Start(
        {FF_FS3_FUSE_PATH, where, "--config", cluster_->dir_.File("fuse.toml")},
        {.env = {}, .output_dir = cluster_->dir_.path()});
    EXPECT_TRUE(p.ok());
    auto code = p->Wait(20s);
    EXPECT_TRUE(code.has_value());
    return std::make_pair(code.value_or(-1), p->Stderr());
  };
  auto [missing_code, missing_err] = run(cluster_->dir_.File("no-such-dir"));
  EXPECT_NE(missing_code, 0);
  EXPECT_THAT(missing_err, ::testing::HasSubstr("no-such-dir"));
  EXPECT_THAT(missing_err, ::testing::HasSubstr("No such file or directory"));
  auto [busy_code, busy_err] = run(cluster_->mount_);
  EXPECT_NE(busy_code, 0);
  EXPECT_THAT(busy_err, ::testing::HasSubstr("busy"));
  // statfs answers from the cluster.
  struct statvfs vfs {};
  ASSERT_EQ(statvfs(cluster_->mount_.c_str(), &vfs), 0);
  EXPECT_GT(vfs.f_blocks, 0u);
  EXPECT_GT(vfs.f_files, vfs.f_ffree);  // some inodes are in use
  EXPECT_EQ(vfs.f_namemax, 255u);
}

TEST_F(FuseTest, StatfsReportsWhatFs3Holds) {
  // df's "used" is f_blocks - f_bfree: what fs3 holds (one copy), not what else is on the disks.
  auto used = [&]() -> uint64_t {
    struct statvfs vfs {};
    EXPECT_EQ(statvfs(cluster_->mount_.c_str(), &vfs), 0);
    return (uint64_t{vfs.f_blocks} - vfs.f_bfree) * vfs.f_frsize;
  };
  struct statvfs host {};
  ASSERT_EQ(statvfs(cluster_->dir_.path().c_str(), &host), 0);
  const uint64_t host_used = (uint64_t{host.f_blocks} - host.f_bfree) * host.f_frsize;
  const std::string data = RandomBytes(4 * kChunk, 21);
  ASSERT_TRUE(WriteAll(P("big"), data));
  const uint64_t with_file = used();
  EXPECT_GE(with_file, data.size());
  EXPECT_LT(with_file, host_used / 2) << "fs3 reports the disk's usage as its own";
  struct statvfs vfs {};
  ASSERT_EQ(statvfs(cluster_->mount_.c_str(), &vfs), 0);
  // Free is what the disks can still take for one copy (two replicas on one disk here). Other
  // processes change the disk's free space meanwhile: compare with it measured again, within
  // 64 MiB.
  ASSERT_EQ(statvfs(cluster_->dir_.path().c_str(), &host), 0);
  const uint64_t host_free = uint64_t{host.f_bavail} * host.f_frsize;
  EXPECT_LE(uint64_t{vfs.f_bavail} * vfs.f_frsize, host_free + (uint64_t{64} << 20));
  EXPECT_GT(uint64_t{vfs.f_bavail} * vfs.f_frsize, host_free / 4);
  // Removing the file gives its space back once its chunks are deleted.
  ASSERT_EQ(unlink(P("big").c_str()), 0);
  EXPECT_TRUE(WaitUntil([&] { return used() + data.size() <= with_file; }, 30s))
      << "used " << used() << ", with the file " << with_file;
}

// A write gathered by the mount and sent in the background fails (every replica down for longer
// than the mount's retry timeout): fsync reports it, even though a read came between, failed for
// the same reason, and the replicas were back by the time of the fsync. (The read used to take
// the error, and the fsync then said all was well about bytes that were never stored.)
TEST_F(FuseTest, ABackgroundWriteThatFailedIsReportedByFsyncEvenAfterAReadFailed) {
  const std::string mnt = cluster_->Mount("short-retry", {"--set", "fuse.retry_timeout_s=2"});
  const std::string path = mnt + FsPath("f");
  const std::string before = RandomBytes(64 << 10, 3);
  ASSERT_TRUE(WriteAll(path, before));
  int fd = open(path.c_str(), O_RDWR);
  ASSERT_GE(fd, 0) << strerror(errno);
  cluster_->Kill("s0");
  cluster_->Kill("s1");
  const std::string lost(4096, 'L');
  EXPECT_EQ(pwrite(fd, lost.data(), lost.size(), 0), static_cast<ssize_t>(lost.size()));
  {
    // A second descriptor drops the cached pages (close-to-open), so this read reaches the
    // mount, which first sends what it gathered: that fails, and so does the read.
    int other = open(path.c_str(), O_RDONLY);
    ASSERT_GE(other, 0) << strerror(errno);
    char buf[16];
    EXPECT_LT(pread(other, buf, sizeof buf, 32 << 10), 0);
    close(other);
  }
  ASSERT_TRUE(cluster_->StartStorage(0));
  ASSERT_TRUE(cluster_->StartStorage(1));
  ASSERT_TRUE(WaitUntil([&] { return cluster_->AllServing(); }, 60s));
  EXPECT_NE(fsync(fd), 0) << "fsync said the write that failed was stored";
  close(fd);
  EXPECT_EQ(ReadAll(P("f")), before);  // the write was not stored, and was reported
}

// A close that fs3-meta missed (down for longer than the mount's calls retry): the mount sends
// it again once fs3-meta is back, so the session ends there. Without that the session stayed as
// long as the mount lived: the file here, unlinked while open, kept its data.
TEST_F(FuseTest, ACloseThatFs3MetaMissedIsSentAgainWhenItIsBack) {
  const std::string mnt = cluster_->Mount("short-close", {"--set", "fuse.retry_timeout_s=2"});
  const std::string path = mnt + FsPath("f");
  const std::string data = RandomBytes(kChunk + 100, 8);
  int fd = open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC, 0644);
  ASSERT_GE(fd, 0) << strerror(errno);
  ASSERT_EQ(write(fd, data.data(), data.size()), static_cast<ssize_t>(data.size()));
  ASSERT_EQ(fsync(fd), 0);
  struct stat st {};
  ASSERT_EQ(fstat(fd, &st), 0);
  const uint64_t ino = st.st_ino;
  ASSERT_EQ(unlink(P("f").c_str()), 0);  // through the other mount: kept while open
  auto storage = Storage();
  ASSERT_NE(storage, nullptr);
  cluster_->Kill("meta");
  close(fd);  // the release's close fails after 2 s
  std::this_thread::sleep_for(4s);
  ASSERT_TRUE(cluster_->StartMeta());
  EXPECT_TRUE(WaitUntil([&] { return *storage->StoredLength(ino) == 0; }, 30s))
      << "the session of a close fs3-meta missed stayed open: the unlinked file kept its data";
  EXPECT_THAT(cluster_->Fsck(), ::testing::IsEmpty());
}

// The native client's metadata calls wait for a restarting fs3-meta, as the mount's do: a write
// whose data landed while fs3-meta was down extends the length once it is back, instead of
// failing and leaving its data past the file's end (what the crash soak found: "fs3-meta SetAttr
// (after 5 attempts): ... Connection refused", then fsck's "holds 8010 bytes of data but records
// a length of 0").
TEST_F(FuseTest, ANativeWriteRidesThroughAnFs3MetaRestart) {
  auto fs = Native();
  ASSERT_NE(fs, nullptr);
  const std::string path = FsPath("n");
  auto f = fs->Create(path);
  ASSERT_TRUE(f.ok()) << f.status();
  const std::string data = RandomBytes(8010, 12);
  cluster_->Kill("meta");
  Status st;
  std::thread writer([&] { st = fs->Write(*f, 0, data); });
  // (Restarted from this thread: a daemon dies with the thread that started it.)
  std::this_thread::sleep_for(3s);
  EXPECT_TRUE(cluster_->StartMeta());
  writer.join();
  EXPECT_TRUE(st.ok()) << st;
  auto stat = fs->Stat(path);
  ASSERT_TRUE(stat.ok()) << stat.status();
  EXPECT_EQ(stat->size(), data.size());
  EXPECT_EQ(ReadAll(P("n")), data);
  EXPECT_THAT(cluster_->Fsck(), ::testing::IsEmpty());
}

// Two native writers of one file, each at its own range (ranks writing their shards of one
// checkpoint): a writer whose view of the length is older than the other's write still leaves
// the length at the end of the file, and every acknowledged byte of both is there. (The length
// only grows with a write: it used to be set to the end of each extending write, which cut off,
// and dropped from storage, what the other had written past it.)
TEST_F(FuseTest, TwoNativeWritersOfOneFileKeepEachOthersData) {
  auto a = Native(), b = Native();
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  const std::string path = FsPath("ckpt");
  auto fa = a->Create(path);
  ASSERT_TRUE(fa.ok()) << fa.status();
  auto fb = b->Open(path);  // b sees a length of 0
  ASSERT_TRUE(fb.ok()) << fb.status();
  const std::string tail = RandomBytes(kChunk + 1000, 13), head = RandomBytes(kChunk, 14);
  ASSERT_TRUE(a->Write(*fa, kChunk, tail).ok());
  ASSERT_TRUE(b->Write(*fb, 0, head).ok());
  auto stat = a->Stat(path);
  ASSERT_TRUE(stat.ok()) << stat.status();
  EXPECT_EQ(stat->size(), 2 * kChunk + 1000);
  const std::string back = ReadAll(P("ckpt"));
  EXPECT_EQ(back.size(), head.size() + tail.size());
  EXPECT_TRUE(back.substr(0, kChunk) == head) << "b's range does not read back as written";
  EXPECT_TRUE(back.substr(kChunk) == tail) << "a's range does not read back as written";
  EXPECT_THAT(cluster_->Fsck(), ::testing::IsEmpty());
}

// The native client refuses a write to a file its caller may only read, before anything is sent
// (it used to send the data, have its length update refused, then settle the length from
// storage: the file changed and grew).
TEST_F(FuseTest, ANativeWriteWithoutWritePermissionChangesNothing) {
  const std::string before = RandomBytes(1000, 16);
  ASSERT_TRUE(WriteAll(P("roots"), before));  // root's, 0644
  auto fs = Native({.uid = kNobody, .gid = kNogroup, .groups = {}});
  ASSERT_NE(fs, nullptr);
  auto f = fs->Open(FsPath("roots"));
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(fs->Write(*f, 0, RandomBytes(5000, 17)).code(), StatusCode::kPermissionDenied);
  EXPECT_TRUE(ReadAll(P("roots")) == before) << "a refused write changed the file";
  auto storage = Storage();
  ASSERT_NE(storage, nullptr);
  EXPECT_EQ(*storage->StoredLength(f->ino), before.size());
}

// A native writer killed after its data landed and before the length was recorded (a job
// preempted in the middle of a checkpoint): its write ran under a session at fs3-meta, which
// ends with the writer's lease, and fs3-meta's sweep settles the length from storage. Before,
// the data stayed past the file's end for good (fsck: "holds N bytes of data but records a
// length of 0"; a later extension of the file would have shown it).
TEST_F(FuseTest, ANativeWriterKilledBeforeItsLengthLeavesALengthThatCoversItsData) {
  auto fs = Native();
  ASSERT_NE(fs, nullptr);
  const std::string path = FsPath("ckpt");
  auto f = fs->Create(path);
  ASSERT_TRUE(f.ok()) << f.status();
  const std::string data = RandomBytes(5000, 15);  // one chunk: one write to storage
  test::TempDir tmp;
  test::WriteFile(tmp.File("data"), data);
  auto writer = test::Subprocess::Start({FF_NATIVE_WRITER_PATH, cluster_->meta_address_,
                                         cluster_->mgmtd_address_, path, tmp.File("data")},
                                        {.env = {}, .output_dir = tmp.path()});
  ASSERT_TRUE(writer.ok()) << writer.status();
  ASSERT_EQ(writer->Wait(60s), 128 + SIGKILL) << writer->Stderr();
  auto storage = Storage();
  ASSERT_NE(storage, nullptr);
  ASSERT_EQ(*storage->StoredLength(f->ino), data.size()) << "the data did not land";
  // The writer's lease (3 s) ends, then the sweep settles the length.
  EXPECT_TRUE(WaitUntil(
      [&] {
        auto stat = fs->Stat(path);
        return stat.ok() && stat->size() == data.size();
      },
      30s))
      << "the length of a file whose native writer died does not cover the data that landed";
  EXPECT_TRUE(ReadAll(P("ckpt")) == data) << "the file does not read back as written";
  EXPECT_THAT(cluster_->Fsck(), ::testing::IsEmpty());
}

TEST_F(FuseTest, SurvivesRestartsOfMetaAndOfAReplica) {
  const std::string data = RandomBytes(3 * kChunk, 9);
  ASSERT_TRUE(WriteAll(P("before"), data));
  // A storage replica dies: reads and writes go on with the other one.
  cluster_->Kill("s1");
  EXPECT_EQ(ReadAll(P("before")), data);
  ASSERT_TRUE(WriteAll(P("during"), data));
  EXPECT_EQ(ReadAll(P("during")), data);
  ASSERT_TRUE(cluster_->StartStorage(1));
  EXPECT_TRUE(WaitUntil([&] { return cluster_->AllServing(); }, 60s));
  // fs3-meta is killed during a storm of creates / renames / unlinks on the mount and restarted:
  // the storm sees no error, and every acknowledged operation is there.
  std::atomic<bool> stop{false};
  std::atomic<int> errors{0};
  std::vector<std::map<std::string, bool>> expected(3);  // name -> present, per thread
  std::vector<std::thread> storm;
  for (int t = 0; t < 3; ++t) {
    storm.emplace_back([&, t] {
      for (int i = 0; !stop; ++i) {
        const std::string a = "t" + std::to_string(t) + "-" + std::to_string(i);
        if (!WriteAll(P(a), a)) {
          ++errors;
          continue;
        }
        expected[t][a] = true;
        if (i % 3 == 1) {
          if (rename(P(a).c_str(), P(a + ".r").c_str()) != 0) {
            ++errors;
            continue;
          }
          expected[t][a] = false;
          expected[t][a + ".r"] = true;
        } else if (i % 3 == 2) {
          if (unlink(P(a).c_str()) != 0) {
            ++errors;
            continue;
          }
          expected[t][a] = false;
        }
      }
    });
  }
  std::this_thread::sleep_for(1s);
  cluster_->Kill("meta");
  std::this_thread::sleep_for(500ms);
  ASSERT_TRUE(cluster_->StartMeta());
  std::this_thread::sleep_for(1500ms);
  stop = true;
  for (auto& t : storm)
    t.join();
  EXPECT_EQ(errors.load(), 0);
  int present = 0;
  for (const auto& m : expected) {
    for (const auto& [name, there] : m) {
      EXPECT_EQ(access(P(name).c_str(), F_OK) == 0, there) << name;
      if (there) {
        present++;
        std::string content = ReadAll(P(name));
        EXPECT_TRUE(name.rfind(content, 0) == 0) << name << " holds " << content;
      }
    }
  }
  EXPECT_GT(present, 10);
  EXPECT_THAT(cluster_->Fsck(), ::testing::IsEmpty());
}

}  // namespace
}  // namespace ff::fs3
