// fs3 attacked through its data (issue 32): the write patterns that once lost acknowledged bytes,
// on a real mount with one replica and with three, and the seeded exerciser fs3-fsx (every byte
// read compared with a shadow copy) on the mount with mmap, with a second mount reading, with
// kill -9 and restart of the storage service at the head, middle and tail of a chain during the
// run, and through the native client with replica restarts; after each, `fs3 fsck --data` finds
// every chunk's replicas equal. (fs3-meta restarts during the run: not yet here, see
// fs3/README.md.)
//
// FF_FSX_SCALE=N multiplies the exerciser's operations (the long campaign: fs3/README.md).
#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "tests/support/fs3_cluster.h"
#include "tests/support/subprocess.h"
#include "tests/support/wait.h"

namespace ff::fs3 {
namespace {

using namespace std::chrono_literals;
using test::WaitUntil;

constexpr uint64_t kChunk = 256 * 1024;

uint64_t Scale() {
  const char* s = std::getenv("FF_FSX_SCALE");
  return s != nullptr && std::atoi(s) > 0 ? static_cast<uint64_t>(std::atoi(s)) : 1;
}

bool Root() {
  return geteuid() == 0 && access("/dev/fuse", R_OK | W_OK) == 0;
}

// A cluster of `replication` storage services (one target each, chains of `replication`),
// fs3-meta and one mount; a second mount on request.
class Cluster : public test::Fs3Cluster {
 public:
  explicit Cluster(int replication) : Fs3Cluster(Options(replication)) {}
  void StartAndMount() {
    Start();
    if (::testing::Test::HasFatalFailure()) return;
    mount_ = Mount("mnt");
  }
  std::string mount_;

  // `fs3 fsck --data`: the namespace, and every chunk's serving replicas compared (records and
  // contents). "" when clean, else what it printed.
  std::string FsckData() {
    auto p = test::Subprocess::Start(
        {FF_FS3_PATH, "--mgmtd", mgmtd_address_, "fsck", "--data", "--meta", meta_address_});
    if (!p.ok()) return p.status().ToString();
    auto code = p->Wait(std::chrono::minutes(5));
    if (code == 0 && p->Stdout() == "fs3 fsck: clean\n") return "";
    return "exit " + (code ? std::to_string(*code) : std::string("none")) + ":\n" + p->Stdout() +
           p->Stderr();
  }

  // After a failure: the last lines each storage service, fs3-mgmtd and the mount logged, restarts
  // included, to set beside the exerciser's report (both give the wall clock).
  void PrintLogTails(std::size_t lines = 150) const {
    for (const auto& [name, p] : procs()) {
      if (name != "mgmtd" && name.rfind('s', 0) != 0 && name.rfind("fuse-", 0) != 0) continue;
      const std::string log = Logs(name);
      std::size_t from = log.size();
      for (std::size_t n = 0; n <= lines && from > 0; ++n)
        from = log.rfind('\n', from - 1);
      std::printf("==== the last %zu lines of %s's log:\n%s\n", lines, name.c_str(),
                  log.substr(from == std::string::npos ? 0 : from + 1).c_str());
    }
  }

  // The storage service holding position `position` (0: head) of the first chain, now.
  int ServiceAt(int position) {
    const fs3rpc::RoutingInfo r = Routing();
    if (r.chains_size() == 0 || position >= r.chains(0).targets_size()) return -1;
    return static_cast<int>(r.chains(0).targets(position).target() / 10) - 1;
  }

 private:
  static test::Fs3ClusterOptions Options(int replication) {
    test::Fs3ClusterOptions o;
    o.services = replication;
    o.replication = static_cast<uint32_t>(replication);
    o.chunk_size = kChunk;
    o.ha = test::SuitesOnEtcd();
    return o;
  }
};

std::string Bytes(char seed, std::size_t n) {
  std::string s(n, '\0');
  for (std::size_t i = 0; i < n; ++i)
    s[i] = static_cast<char>(seed + static_cast<char>(i * 7 + i / 4096));
  return s;
}

bool PWriteAll(int fd, const std::string& data, off_t at) {
  std::size_t done = 0;
  while (done < data.size()) {
    ssize_t n = pwrite(fd, data.data() + done, data.size() - done, at + static_cast<off_t>(done));
    if (n <= 0) return false;
    done += static_cast<std::size_t>(n);
  }
  return true;
}

std::string PReadAll(const std::string& path, off_t at, std::size_t n) {
  int fd = open(path.c_str(), O_RDONLY);
  if (fd < 0) return "open failed: " + std::string(strerror(errno));
  std::string out(n, '\0');
  std::size_t done = 0;
  while (done < n) {
    ssize_t r = pread(fd, out.data() + done, n - done, at + static_cast<off_t>(done));
    if (r <= 0) break;
    done += static_cast<std::size_t>(r);
  }
  close(fd);
  out.resize(done);
  return out;
}

// ---- the patterns, R1 and R3 ---------------------------------------------------------------

class WritePatterns : public ::testing::TestWithParam<int> {
 protected:
  static void SetUpTestSuite() {
    if (!Root()) GTEST_FAIL() << "the FUSE tests need root and /dev/fuse; CI runs them as root";
  }
  static void TearDownTestSuite() { clusters_.clear(); }
  void SetUp() override {
    auto& c = clusters_[GetParam()];
    if (!c) {
      c = std::make_unique<Cluster>(GetParam());
      c->StartAndMount();
      ASSERT_FALSE(HasFatalFailure());
    }
    std::string name = ::testing::UnitTest::GetInstance()->current_test_info()->name();
    std::replace(name.begin(), name.end(), '/', '-');  // "Name/R3" from the parameter
    dir_ = c->mount_ + "/" + name;
    ASSERT_EQ(mkdir(dir_.c_str(), 0755), 0) << strerror(errno);
  }
  std::string P(const std::string& name) const { return dir_ + "/" + name; }

  static std::map<int, std::unique_ptr<Cluster>> clusters_;
  std::string dir_;
};
std::map<int, std::unique_ptr<Cluster>> WritePatterns::clusters_;

// zip, tar, linkers and muxers: a placeholder header, the body after it, then the real header.
TEST_P(WritePatterns, AHeaderPatchedAfterItsBodyIsKept) {
  const std::string placeholder(512, 'P');
  const std::string body = Bytes('b', 1 << 20);
  int kept_placeholder = 0;
  for (int round = 0; round < 50; ++round) {
    const std::string header = Bytes(static_cast<char>('A' + round), 512);
    int fd = open(P("archive").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ASSERT_GE(fd, 0) << strerror(errno);
    ASSERT_TRUE(PWriteAll(fd, placeholder, 0));
    for (std::size_t at = 0; at < body.size(); at += 64 << 10)
      ASSERT_TRUE(PWriteAll(fd, body.substr(at, 64 << 10), static_cast<off_t>(512 + at)));
    ASSERT_TRUE(PWriteAll(fd, header, 0));
    ASSERT_EQ(close(fd), 0) << strerror(errno);
    const std::string got = PReadAll(P("archive"), 0, 512 + body.size());
    ASSERT_EQ(got.size(), 512 + body.size());
    kept_placeholder += got.compare(0, 512, header) != 0;
    EXPECT_EQ(got.substr(512), body) << "round " << round;
  }
  EXPECT_EQ(kept_placeholder, 0) << "rounds of 50 whose header is not the last one written";
}

// Two overlapping writes at one offset, then a write elsewhere: the second one's bytes stay.
TEST_P(WritePatterns, OverlappingPwritesLandInTheOrderTheyWereMade) {
  int first_won = 0;
  for (int round = 0; round < 100; ++round) {
    const std::string first = Bytes(static_cast<char>(round), 64 << 10);
    const std::string second = Bytes(static_cast<char>(round + 100), 64 << 10);
    int fd = open(P("overlap").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ASSERT_GE(fd, 0) << strerror(errno);
    ASSERT_TRUE(PWriteAll(fd, first, 0));
    ASSERT_TRUE(PWriteAll(fd, second, 0));
    ASSERT_TRUE(PWriteAll(fd, "elsewhere", 1 << 20));
    ASSERT_EQ(close(fd), 0) << strerror(errno);
    first_won += PReadAll(P("overlap"), 0, second.size()) != second;
  }
  EXPECT_EQ(first_won, 0) << "rounds of 100 that kept the first write's bytes";
}

// write() extends the file, then an mmap write covers the same last bytes: the mapping's bytes
// are what the file holds, through read() and through a new mapping.
TEST_P(WritePatterns, AnMmapWriteAfterAWriteOfTheSameRangeWins) {
  const std::size_t tail = 22 << 10;
  int lost = 0;
  for (int round = 0; round < 40; ++round) {
    const std::string written = Bytes(static_cast<char>(round), tail);
    const std::string mapped = Bytes(static_cast<char>(round + 50), tail);
    const off_t start = static_cast<off_t>((1 << 20) + round * 977);  // a big write() before it
    int fd = open(P("mapped").c_str(), O_RDWR | O_CREAT | O_TRUNC, 0644);
    ASSERT_GE(fd, 0) << strerror(errno);
    ASSERT_TRUE(PWriteAll(fd, std::string(static_cast<std::size_t>(start), 'x'), 0));
    ASSERT_TRUE(PWriteAll(fd, written, start));
    const long page = sysconf(_SC_PAGESIZE);
    const off_t base = start / page * page;
    const std::size_t span = tail + static_cast<std::size_t>(start - base);
    void* p = mmap(nullptr, span, PROT_READ | PROT_WRITE, MAP_SHARED, fd, base);
    ASSERT_NE(p, MAP_FAILED) << strerror(errno);
    std::memcpy(static_cast<char*>(p) + (start - base), mapped.data(), tail);
    if (round % 2 == 0) {
      ASSERT_EQ(msync(p, span, MS_SYNC), 0) << strerror(errno);
    }
    munmap(p, span);
    ASSERT_EQ(close(fd), 0) << strerror(errno);
    // Read back through read() after a reopen, and through a fresh mapping.
    lost += PReadAll(P("mapped"), start, tail) != mapped;
    fd = open(P("mapped").c_str(), O_RDONLY);
    ASSERT_GE(fd, 0);
    p = mmap(nullptr, span, PROT_READ, MAP_SHARED, fd, base);
    ASSERT_NE(p, MAP_FAILED) << strerror(errno);
    lost += std::memcmp(static_cast<char*>(p) + (start - base), mapped.data(), tail) != 0;
    munmap(p, span);
    close(fd);
  }
  EXPECT_EQ(lost, 0) << "reads (of 80) that returned the write()'s bytes, not the mapping's";
}

INSTANTIATE_TEST_SUITE_P(Replicas, WritePatterns, ::testing::Values(1, 3),
                         [](const ::testing::TestParamInfo<int>& p) {
                           return "R" + std::to_string(p.param);
                         });

// ---- the exerciser -------------------------------------------------------------------------

class Fsx : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!Root()) GTEST_FAIL() << "the FUSE tests need root and /dev/fuse; CI runs them as root";
  }

  // Runs fs3-fsx with `args` and the seed; returns the operations it ran (0 after a failure,
  // reported with its output).
  uint64_t RunFsx(std::vector<std::string> args, uint64_t seed) {
    args.insert(args.begin(), {FF_FS3_FSX_PATH, "--seed", std::to_string(seed)});
    auto p = Subprocess::Start(args);
    EXPECT_TRUE(p.ok()) << p.status();
    if (!p.ok()) return 0;
    auto code = p->Wait(std::chrono::minutes(10));
    if (!code) {
      p->Signal(SIGKILL);
      p->Wait(10s);
      ADD_FAILURE() << "fs3-fsx seed " << seed << " did not finish in 10 minutes:\n" << p->Stderr();
      return 0;
    }
    if (*code != 0) {
      ADD_FAILURE() << "fs3-fsx seed " << seed << " failed (exit " << *code << "):\n"
                    << p->Stderr();
      return 0;
    }
    std::string out = p->Stdout();
    while (!out.empty() && out.back() == '\n')
      out.pop_back();
    const std::size_t last_line = out.rfind('\n');
    auto j = nlohmann::json::parse(last_line == std::string::npos ? out : out.substr(last_line + 1),
                                   nullptr, false);
    EXPECT_TRUE(j.is_object()) << out;
    return j.is_object() ? j.value("ops", uint64_t{0}) : 0;
  }

  // Runs fs3-fsx (seeds first_seed, first_seed + 1, ...) until `ops` operations are done and
  // `fault` (called in a loop meanwhile) has run `min_faults` times. The faults run on this
  // thread: a daemon they restart is killed when the thread that started it exits
  // (PR_SET_PDEATHSIG), so it must be the test's own.
  void RunWithFaults(const std::vector<std::string>& args, uint64_t first_seed, uint64_t ops,
                     const std::function<bool(int)>& fault, int min_faults, int max_faults = 1000) {
    std::atomic<bool> done_running{false};
    std::atomic<uint64_t> done{0};
    uint64_t seed = first_seed;
    int faults = 0;
    std::atomic<int> faults_seen{0};
    std::thread runner([&] {
      while (done < ops || faults_seen < min_faults) {
        const uint64_t n = RunFsx(args, seed++);
        if (n == 0) break;
        done += n;
        if (seed - first_seed > 200) break;
      }
      done_running = true;
    });
    if (fault) {
      for (auto until = std::chrono::steady_clock::now() + 2s;
           !done_running && std::chrono::steady_clock::now() < until;)
        std::this_thread::sleep_for(50ms);
      while (!done_running && faults < max_faults) {
        if (!fault(faults)) {
          ADD_FAILURE() << "fault " << faults << " could not be injected";
          break;
        }
        faults_seen = ++faults;
        for (auto until = std::chrono::steady_clock::now() + 1s;
             !done_running && std::chrono::steady_clock::now() < until;)
          std::this_thread::sleep_for(50ms);
      }
    }
    if (faults < min_faults) faults_seen = min_faults;  // a failed fault: let the runner stop
    runner.join();
    EXPECT_GE(done.load(), ops);
    EXPECT_GE(faults, min_faults);
    std::printf("fs3-fsx: %llu operations over seeds %llu..%llu, %d faults\n",
                static_cast<unsigned long long>(done.load()),
                static_cast<unsigned long long>(first_seed),
                static_cast<unsigned long long>(seed - 1), faults);
  }
};

std::vector<std::string> MountArgs(const std::string& dir, uint64_t ops) {
  return {"--ops", std::to_string(ops), "--files", "2", "--max-size",
          "1MiB",  "--max-len",         "128KiB",  dir};
}

TEST_F(Fsx, OnTheMountWithOneReplica) {
  Cluster c(1);
  c.StartAndMount();
  ASSERT_FALSE(HasFatalFailure());
  RunWithFaults(MountArgs(c.mount_, 20000 * Scale()), 100, 20000 * Scale(), nullptr, 0);
}

TEST_F(Fsx, OnTheMountWithThreeReplicas) {
  Cluster c(3);
  c.StartAndMount();
  ASSERT_FALSE(HasFatalFailure());
  RunWithFaults(MountArgs(c.mount_, 20000 * Scale()), 200, 20000 * Scale(), nullptr, 0);
  EXPECT_EQ(c.FsckData(), "");
}

TEST_F(Fsx, OneMountWritesAnotherReadsAfterCloseOrFsync) {
  Cluster c(3);
  c.StartAndMount();
  ASSERT_FALSE(HasFatalFailure());
  const std::string other = c.Mount("mnt2");
  auto args = MountArgs(c.mount_, 20000 * Scale());
  args.insert(args.begin(), {"--other", other});
  RunWithFaults(args, 300, 20000 * Scale(), nullptr, 0);
}

// kill -9 and restart of the storage service at the head, then the middle, then the tail of a
// chain (and again), each one back and serving (resynced) before the next.
TEST_F(Fsx, StorageRestartsAtHeadMiddleAndTail) {
  Cluster c(3);
  c.StartAndMount();
  ASSERT_FALSE(HasFatalFailure());
  auto restart = [&](int i) {
    const int position = i % 3;
    const int s = c.ServiceAt(position);
    if (s < 0) return false;
    // Down long enough for the chain to move on without it, so the resync has work to do
    // while the writes go on.
    const auto down = std::chrono::milliseconds(2000 + 1500 * (i % 4));
    std::printf("restart %d: kill -9 of s%d (position %d), down %lld ms\n", i, s, position,
                static_cast<long long>(down.count()));
    c.Kill(test::Fs3Cluster::StorageName(s));
    std::this_thread::sleep_for(down);
    if (!c.StartStorage(s)) return false;
    return WaitUntil([&] { return c.AllServing(); }, 60s);
  };
  RunWithFaults(MountArgs(c.mount_, 5000), 400, 25000 * Scale(), restart, 3);
  // Every replica holds every acknowledged write: a rejoined one that missed a write differs.
  ASSERT_TRUE(WaitUntil([&] { return c.AllServing(); }, 60s));
  EXPECT_EQ(c.FsckData(), "");
  if (HasFailure()) c.PrintLogTails();
}

// kill -9 and restart of fs3-meta: the mount's calls wait for it (opens, truncates, the lengths
// fsync and close record) and go on where they stopped.
TEST_F(Fsx, MetaRestarts) {
  Cluster c(3);
  c.StartAndMount();
  ASSERT_FALSE(HasFatalFailure());
  auto restart = [&](int i) {
    const auto down = std::chrono::milliseconds(1000 + 700 * (i % 3));
    std::printf("restart %d: kill -9 of fs3-meta, down %lld ms\n", i,
                static_cast<long long>(down.count()));
    c.Kill("meta");
    std::this_thread::sleep_for(down);
    if (!c.StartMeta()) return false;
    std::this_thread::sleep_for(3s);  // serving a while before the next
    return true;
  };
  RunWithFaults(MountArgs(c.mount_, 5000), 500, 15000 * Scale(), restart, 3);
  EXPECT_EQ(c.FsckData(), "");
}

TEST_F(Fsx, NativeClientWithReplicaRestarts) {
  Cluster c(3);
  c.StartAndMount();
  ASSERT_FALSE(HasFatalFailure());
  ASSERT_EQ(mkdir((c.mount_ + "/native").c_str(), 0755), 0);
  auto restart = [&](int i) {
    const int s = c.ServiceAt(i % 3);
    if (s < 0) return false;
    c.Kill(test::Fs3Cluster::StorageName(s));
    std::this_thread::sleep_for(1500ms);
    if (!c.StartStorage(s)) return false;
    return WaitUntil([&] { return c.AllServing(); }, 60s);
  };
  RunWithFaults({"--native", "--meta", c.meta_address_, "--mgmtd", c.mgmtd_address_, "--ops",
                 "3000", "--files", "2", "--max-size", "1MiB", "--max-len", "128KiB", "/native"},
                600, 15000 * Scale(), restart, 3);
  ASSERT_TRUE(WaitUntil([&] { return c.AllServing(); }, 60s));
  EXPECT_EQ(c.FsckData(), "");
  if (HasFailure()) c.PrintLogTails();
}

// fs3 fsck --data finds a replica whose content was damaged on its disk (bit rot, a bad write
// below fs3), names the chain, chunk and target, and exits 1; the other replicas still serve it.
TEST(FsckData, FindsAReplicaWhoseContentWasDamaged) {
  if (!Root()) GTEST_FAIL() << "the FUSE tests need root and /dev/fuse; CI runs them as root";
  Cluster c(3);
  c.StartAndMount();
  ASSERT_FALSE(HasFatalFailure());
  const std::string data = Bytes('d', 3 * kChunk / 2);
  {
    int fd = open((c.mount_ + "/f").c_str(), O_CREAT | O_WRONLY, 0644);
    ASSERT_GE(fd, 0);
    ASSERT_TRUE(PWriteAll(fd, data, 0));
    ASSERT_EQ(close(fd), 0);
  }
  EXPECT_EQ(c.FsckData(), "");
  // The middle replica's copy of the file's first chunk: one byte flipped.
  const int middle = c.ServiceAt(1);
  ASSERT_GE(middle, 0);
  const std::string chunks = c.dir_.File(test::Fs3Cluster::StorageName(middle) + "-t1") + "/chunks";
  std::string victim;
  for (const auto& e : std::filesystem::directory_iterator(chunks)) {
    if (e.path().extension() == ".c" && e.file_size() == kChunk) victim = e.path();
  }
  ASSERT_FALSE(victim.empty()) << "no full chunk under " << chunks;
  {
    int fd = open(victim.c_str(), O_RDWR);
    ASSERT_GE(fd, 0);
    char b = 0;
    ASSERT_EQ(pread(fd, &b, 1, 5000), 1);
    b = static_cast<char>(b ^ 0x40);
    ASSERT_EQ(pwrite(fd, &b, 1, 5000), 1);
    ASSERT_EQ(fsync(fd), 0);
    close(fd);
  }
  const std::string found = c.FsckData();
  std::printf("%s", found.c_str());
  EXPECT_THAT(found, ::testing::StartsWith("exit 1:"));
  EXPECT_THAT(found,
              ::testing::ContainsRegex("chain [0-9]+ chunk [0-9]+:[0-9]+: target " +
                                       std::to_string(test::Fs3Cluster::TargetId(middle, 1)) +
                                       " cannot be read"));
  EXPECT_THAT(found, ::testing::HasSubstr(
                         "fs3 fsck: 1 problem(s); --repair mends the namespace, not replicas"));
  // Readers go on getting the file's bytes from the good replicas (a mount with a cold cache).
  const std::string other = c.Mount("mnt2");
  for (int i = 0; i < 5; ++i) {
    EXPECT_TRUE(PReadAll(other + "/f", 0, data.size()) == data) << "read " << i;
  }
}

}  // namespace
}  // namespace ff::fs3
