// fs3-bench: the storage layer's throughput, beside the same disk used plainly in the same run.
//
// Starts a local cluster (fs3-mgmtd and three fs3-storage services, one target each, in a
// temporary folder on the disk under test), once with replication 1 and once with 3, and drives
// it with the client library from --threads threads: sequential 1 MiB writes, sequential 1 MiB
// reads, random 4 KiB reads. The raw-disk rows do the same with plain files (one fdatasync per
// 1 MiB write, as every chunk write is synced). Prints a table and last the summary line
//   fs3 storage: write R1 X MiB/s, write R3 Y MiB/s, read Z MiB/s, 4k randread N IOPS
//
//   build/fs3/fs3-bench [--size-mib 128] [--threads 4] [--seconds 5] [--dir /tmp]
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>

#include "common/files.h"
#include "common/logging.h"
#include "common/net.h"
#include "common/rpc_client.h"
#include "common/subprocess.h"
#include "fs3/client.h"
#include "fs3/proto/mgmtd.grpc.pb.h"

namespace ff::fs3 {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
constexpr uint32_t kMiB = 1 << 20;

struct Figures {
  double write_mibs = 0, read_mibs = 0, randread_iops = 0;
};

double Seconds(Clock::time_point since) {
  return std::chrono::duration<double>(Clock::now() - since).count();
}

void Progress(const std::string& what) {
  std::fprintf(stderr, "fs3-bench: %s\n", what.c_str());
}

// Runs fn(thread) on `threads` threads; returns wall seconds.
double Parallel(int threads, const std::function<void(int)>& fn) {
  auto start = Clock::now();
  std::vector<std::thread> ts;
  for (int t = 0; t < threads; ++t)
    ts.emplace_back(fn, t);
  for (auto& t : ts)
    t.join();
  return Seconds(start);
}

Result<Figures> RawDisk(const std::string& dir, uint64_t per_thread, int threads, double seconds) {
  Figures f;
  std::string block(kMiB, 'x');
  std::atomic<bool> failed{false};
  double w = Parallel(threads, [&](int t) {
    int fd = open((dir + "/raw." + std::to_string(t)).c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    for (uint64_t off = 0; off < per_thread; off += kMiB) {
      if (pwrite(fd, block.data(), kMiB, static_cast<off_t>(off)) != kMiB || fdatasync(fd) != 0) {
        failed = true;
      }
    }
    close(fd);
  });
  double r = Parallel(threads, [&](int t) {
    int fd = open((dir + "/raw." + std::to_string(t)).c_str(), O_RDONLY);
    std::string buf(kMiB, '\0');
    for (uint64_t off = 0; off < per_thread; off += kMiB) {
      if (pread(fd, buf.data(), kMiB, static_cast<off_t>(off)) != kMiB) failed = true;
    }
    close(fd);
  });
  std::atomic<uint64_t> ops{0};
  Parallel(threads, [&](int t) {
    int fd = open((dir + "/raw." + std::to_string(t)).c_str(), O_RDONLY);
    std::mt19937_64 rng(t);
    char buf[4096];
    auto until = Clock::now() + std::chrono::duration<double>(seconds);
    while (Clock::now() < until) {
      off_t off = static_cast<off_t>(rng() % (per_thread / 4096) * 4096);
      if (pread(fd, buf, sizeof buf, off) != 4096) failed = true;
      ++ops;
    }
    close(fd);
  });
  for (int t = 0; t < threads; ++t)
    fs::remove(dir + "/raw." + std::to_string(t));
  if (failed) return IoError("raw disk I/O failed in " + dir);
  const double total = static_cast<double>(per_thread * threads) / kMiB;
  f.write_mibs = total / w;
  f.read_mibs = total / r;
  f.randread_iops = static_cast<double>(ops) / seconds;
  return f;
}

Result<Figures> Cluster(const std::string& bin, const std::string& dir, uint32_t replication,
                        uint64_t per_thread, int threads, double seconds) {
  FF_ASSIGN_OR_RETURN(int port, FindFreePort());
  const std::string mgmtd = "127.0.0.1:" + std::to_string(port);
  {
    std::ofstream(dir + "/mgmtd.toml")
        << "[server]\nlisten = \"" << mgmtd
        << "\"\n[metrics]\nenabled = false\n[log]\nlevel = \"warn\"\n"
        << "[mgmtd]\ndata_dir = \"" << dir << "/mgmtd\"\n";
  }
  std::vector<Subprocess> procs;
  FF_ASSIGN_OR_RETURN(Subprocess m,
                      Subprocess::Start({bin + "/fs3-mgmtd", "--config", dir + "/mgmtd.toml"},
                                        {.env = {}, .output_dir = dir}));
  procs.push_back(std::move(m));
  for (int i = 0; i < 3; ++i) {
    FF_ASSIGN_OR_RETURN(int sport, FindFreePort());
    std::string name = "s" + std::to_string(i);
    std::ofstream(dir + "/" + name + ".toml")
        << "[server]\nlisten = \"127.0.0.1:" << sport
        << "\"\nmax_message_mib = 64\n[metrics]\nenabled = false\n[log]\nlevel = \"warn\"\n"
        << "[storage]\nnode = \"" << name << "\"\nmgmtd = \"" << mgmtd
        << "\"\n[[storage.targets]]\nid = " << i + 1 << "\npath = \"" << dir << "/" << name
        << "\"\n";
    FF_ASSIGN_OR_RETURN(Subprocess s, Subprocess::Start({bin + "/fs3-storage", "--config",
                                                         dir + "/" + name + ".toml"},
                                                        {.env = {}, .output_dir = dir}));
    procs.push_back(std::move(s));
  }
  MgmtdReplicas replicas(mgmtd);
  // Initialise once every storage service has registered its target (asked, not read from an
  // error's text).
  std::size_t registered = 0;
  for (int i = 0; i < 200 && registered < 3; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    fs3rpc::RoutingInfo info;
    Status st =
        CallRpc("fs3-mgmtd GetRouting", CallOptions::Idempotent(), [&](grpc::ClientContext* c) {
          return replicas.Attempt([&](fs3rpc::Mgmtd::Stub& s) {
            return s.GetRouting(c, fs3rpc::GetRoutingRequest{}, &info);
          });
        });
    if (st.ok()) registered = static_cast<std::size_t>(info.targets_size());
  }
  if (registered < 3) return Unavailable("the 3 storage services did not register within 10 s");
  fs3rpc::InitRequest req;
  req.set_chunk_size(kMiB);
  req.set_replication(replication);
  fs3rpc::RoutingInfo info;
  Status init = CallRpc("fs3-mgmtd InitCluster", CallOptions{}, [&](grpc::ClientContext* c) {
    return replicas.Attempt([&](fs3rpc::Mgmtd::Stub& s) { return s.InitCluster(c, req, &info); });
  });
  FF_RETURN_IF_ERROR(init);
  ClientOptions o;
  o.mgmtd = mgmtd;
  FF_ASSIGN_OR_RETURN(auto client, StorageClient::Create(o));
  // Wait until the services have the routing (the first writes would retry anyway).
  std::string block(kMiB, 'y');
  for (int i = 0; i < 100 && !client->Write(999, 0, "warm").ok(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  Figures f;
  std::atomic<bool> failed{false};
  const double total = static_cast<double>(per_thread * threads) / kMiB;
  Progress("replication " + std::to_string(replication) + ": sequential 1 MiB writes");
  double w = Parallel(threads, [&](int t) {
    for (uint64_t off = 0; off < per_thread; off += kMiB) {
      if (!client->Write(100 + t, off, block).ok()) failed = true;
    }
  });
  Progress("replication " + std::to_string(replication) + ": sequential 1 MiB reads");
  double r = Parallel(threads, [&](int t) {
    for (uint64_t off = 0; off < per_thread; off += kMiB) {
      auto data = client->Read(100 + t, off, kMiB);
      if (!data.ok() || data->size() != kMiB) failed = true;
    }
  });
  Progress("replication " + std::to_string(replication) + ": random 4 KiB reads");
  std::atomic<uint64_t> ops{0};
  Parallel(threads, [&](int t) {
    std::mt19937_64 rng(t);
    auto until = Clock::now() + std::chrono::duration<double>(seconds);
    while (Clock::now() < until) {
      uint64_t off = rng() % (per_thread / 4096) * 4096;
      if (!client->Read(100 + t, off, 4096).ok()) failed = true;
      ++ops;
    }
  });
  for (auto& p : procs)
    p.Signal(SIGTERM);
  for (auto& p : procs)
    p.Wait(std::chrono::seconds(10));
  if (failed) return Internal("fs3 I/O failed during the benchmark (logs in " + dir + ")");
  f.write_mibs = total / w;
  f.read_mibs = total / r;
  f.randread_iops = static_cast<double>(ops) / seconds;
  return f;
}

int Main(int argc, char** argv) {
  CLI::App app("fs3 storage benchmark", "fs3-bench");
  uint64_t size_mib = 128;
  int threads = 4;
  double seconds = 5;
  std::string base = fs::temp_directory_path().string();
  app.add_option("--size-mib", size_mib, "MiB written per run, over all threads")
      ->capture_default_str();
  app.add_option("--threads", threads, "Client threads")->capture_default_str();
  app.add_option("--seconds", seconds, "Duration of the random-read phase")->capture_default_str();
  app.add_option("--dir", base, "Where the cluster and raw files live (the disk under test)")
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  LogOptions log;
  log.level = "warn";
  (void)InitLogging("fs3-bench", log);
  const std::string bin = fs::path(argv[0]).parent_path().string();
  const uint64_t per_thread = size_mib * kMiB / static_cast<uint64_t>(threads) / kMiB * kMiB;
  auto run_dir = [&](const std::string& tag) {
    std::string d = base + "/fs3-bench-" + tag + "-" + std::to_string(getpid());
    fs::remove_all(d);
    fs::create_directories(d);
    return d;
  };
  Progress("raw disk");
  std::string raw_dir = run_dir("raw");
  auto raw = RawDisk(raw_dir, per_thread, threads, seconds);
  fs::remove_all(raw_dir);
  if (!raw.ok()) return std::fprintf(stderr, "fs3-bench: %s\n", raw.status().message().c_str()), 1;
  std::map<uint32_t, Figures> ours;
  for (uint32_t rep : {1u, 3u}) {
    std::string d = run_dir("r" + std::to_string(rep));
    auto f = Cluster(bin, d, rep, per_thread, threads, seconds);
    if (!f.ok()) return std::fprintf(stderr, "fs3-bench: %s\n", f.status().message().c_str()), 1;
    fs::remove_all(d);
    ours[rep] = *f;
  }
  std::printf(
      "\nfs3 storage, %d client threads, %llu MiB per run, chunk 1 MiB, 3 services on this "
      "machine\n",
      threads, static_cast<unsigned long long>(per_thread * threads / kMiB));
  std::printf("%-34s %14s %14s %16s\n", "", "write MiB/s", "read MiB/s", "4k randread IOPS");
  std::printf("%-34s %14.1f %14.1f %16.0f\n", "raw disk (plain files, same sizes)", raw->write_mibs,
              raw->read_mibs, raw->randread_iops);
  for (const auto& [rep, f] : ours) {
    std::printf("%-34s %14.1f %14.1f %16.0f\n", ("fs3, replication " + std::to_string(rep)).c_str(),
                f.write_mibs, f.read_mibs, f.randread_iops);
  }
  std::printf(
      "fs3 storage: write R1 %.1f MiB/s, write R3 %.1f MiB/s, read %.1f MiB/s, 4k randread "
      "%.0f IOPS (raw disk: write %.1f MiB/s, read %.1f MiB/s, 4k randread %.0f IOPS)\n",
      ours[1].write_mibs, ours[3].write_mibs, ours[3].read_mibs, ours[3].randread_iops,
      raw->write_mibs, raw->read_mibs, raw->randread_iops);
  return 0;
}

}  // namespace
}  // namespace ff::fs3

int main(int argc, char** argv) {
  return ff::fs3::Main(argc, argv);
}
