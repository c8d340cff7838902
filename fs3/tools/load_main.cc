// fs3-load: storage traffic for experiments, straight through the client library (no fs3-meta):
// files are inodes, their chunks on the routing table's chains by the default placement.
//
//   fs3-load write --mgmtd ADDR --inodes 1000 --count 8 --mib 64
//   fs3-load read  --mgmtd ADDR --inodes 1000 --count 8 --mib 64 [--op-kib 1024] [--batch 32]
//                  [--seconds 10] [--max-inflight-kib 4096 | --unpaced]
//   fs3-load check --mgmtd ADDR --inodes 1000 --count 8 --mib 64
//
// `write` prints {"files":..,"bytes":..} once every file is written (acknowledged). `check` reads
// every byte of every file back and fails naming the first file and offset whose data is not what
// `write` wrote; else prints {"files":..,"bytes":..}.
//
// `read` repeats batched reads (ReadBatch, the data loaders' call) of --batch random --op-kib
// ranges of the files until --seconds pass (0: until SIGTERM/SIGINT), then prints one JSON line:
// {"bytes":..,"seconds":..,"goodput_mbit":..,"batches":..,"p50_ms":..,"p99_ms":..,"max_ms":..,
//  "peak_inflight_bytes":..}: batch latencies, and the most read bytes in flight at once. Every
// batch's data is checked against what `write` wrote (a pattern of inode and offset). The read
// credits (request-to-send) allow --max-inflight-kib in flight; --unpaced lifts the limit.
#include <signal.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "fs3/client.h"

namespace ff::fs3 {
namespace {

using Clock = std::chrono::steady_clock;
std::atomic<bool> g_stop{false};

int Fail(const std::string& what) {
  std::fprintf(stderr, "fs3-load: %s\n", what.c_str());
  return 1;
}

// The byte at `offset` of file `inode`: cheap to make and to check.
char Pattern(uint64_t inode, uint64_t offset) {
  return static_cast<char>((offset / 8 * 131 + inode * 7) & 0xff);
}

void Fill(uint64_t inode, uint64_t offset, std::string* out) {
  for (std::size_t i = 0; i < out->size(); ++i)
    (*out)[i] = Pattern(inode, offset + i);
}

double Quantile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<std::size_t>(q * static_cast<double>(v.size())))];
}

}  // namespace

int Main(int argc, char** argv) {
  CLI::App app("Storage traffic for experiments (fs3 client library)", "fs3-load");
  app.require_subcommand(1);
  std::string mgmtd;
  uint64_t first_inode = 1000;
  int count = 8, batch = 32;
  uint64_t mib = 64, op_kib = 1024, inflight_kib = 64 * 1024;
  double seconds = 10;
  bool unpaced = false;
  for (CLI::App* sub : {app.add_subcommand("write", "Write the files"),
                        app.add_subcommand("read", "Batched random reads of the files"),
                        app.add_subcommand("check", "Read every file whole and check its data")}) {
    sub->add_option("--mgmtd", mgmtd, "fs3-mgmtd host:port")->required();
    sub->add_option("--inodes", first_inode, "The first file's inode")->capture_default_str();
    sub->add_option("--count", count, "Files")->check(CLI::Range(1, 100000))->capture_default_str();
    sub->add_option("--mib", mib, "MiB per file")
        ->check(CLI::Range(1, 1 << 20))
        ->capture_default_str();
  }
  CLI::App* read = app.get_subcommand("read");
  read->add_option("--op-kib", op_kib, "KiB per read")
      ->check(CLI::Range(1, 65536))
      ->capture_default_str();
  read->add_option("--batch", batch, "Reads per batch")
      ->check(CLI::Range(1, 100000))
      ->capture_default_str();
  read->add_option("--seconds", seconds, "How long (0: until a signal)")->capture_default_str();
  read->add_option("--max-inflight-kib", inflight_kib, "Read credits: KiB in flight at once")
      ->check(CLI::Range(1, 1 << 30))
      ->capture_default_str();
  read->add_flag("--unpaced", unpaced, "No request-to-send limit");
  CLI11_PARSE(app, argc, argv);

  ClientOptions options;
  options.mgmtd = mgmtd;
  options.max_inflight_read_bytes = unpaced ? ~uint64_t{0} >> 1 : inflight_kib << 10;
  auto client = StorageClient::Create(options);
  if (!client.ok()) return Fail(client.status().message());
  const uint64_t file_bytes = mib << 20;

  if (app.got_subcommand("write")) {
    const uint64_t piece = (*client)->chunk_size();
    for (int f = 0; f < count; ++f) {
      const uint64_t inode = first_inode + static_cast<uint64_t>(f);
      for (uint64_t off = 0; off < file_bytes; off += piece) {
        std::string data(std::min(piece, file_bytes - off), '\0');
        Fill(inode, off, &data);
        if (Status st = (*client)->WriteBuffer(inode, off, std::move(data)); !st.ok()) {
          return Fail("write inode " + std::to_string(inode) + ": " + st.message());
        }
      }
    }
    std::printf("{\"files\":%d,\"bytes\":%llu}\n", count,
                static_cast<unsigned long long>(file_bytes * static_cast<uint64_t>(count)));
    return 0;
  }

  auto check = [&](const std::vector<ReadOp>& ops, const std::vector<std::string>& got) {
    for (std::size_t i = 0; i < ops.size(); ++i) {
      std::string want(ops[i].length, '\0');
      Fill(ops[i].inode, ops[i].offset, &want);
      if (got[i] != want) {
        return Fail("inode " + std::to_string(ops[i].inode) + " at " +
                    std::to_string(ops[i].offset) + ": the data read is not what was written");
      }
    }
    return 0;
  };
  if (app.got_subcommand("check")) {
    const uint64_t piece = (*client)->chunk_size();
    for (int f = 0; f < count; ++f) {
      std::vector<ReadOp> ops;
      for (uint64_t off = 0; off < file_bytes; off += piece) {
        ReadOp op;
        op.inode = first_inode + static_cast<uint64_t>(f);
        op.offset = off;
        op.length = static_cast<uint32_t>(std::min(piece, file_bytes - off));
        ops.push_back(op);
      }
      auto got = (*client)->ReadBatch(ops);
      if (!got.ok()) {
        return Fail("read inode " + std::to_string(ops[0].inode) + ": " + got.status().message());
      }
      if (int rc = check(ops, *got); rc != 0) return rc;
    }
    std::printf("{\"files\":%d,\"bytes\":%llu}\n", count,
                static_cast<unsigned long long>(file_bytes * static_cast<uint64_t>(count)));
    return 0;
  }

  const uint64_t op_bytes = std::min<uint64_t>(op_kib << 10, file_bytes);
  signal(SIGTERM, [](int) { g_stop = true; });
  signal(SIGINT, [](int) { g_stop = true; });
  std::mt19937_64 rng(std::random_device{}());
  std::vector<double> latency_ms;
  uint64_t bytes = 0;
  const auto start = Clock::now();
  auto elapsed = [&] { return std::chrono::duration<double>(Clock::now() - start).count(); };
  while (!g_stop && (seconds <= 0 || elapsed() < seconds)) {
    std::vector<ReadOp> ops(static_cast<std::size_t>(batch));
    for (auto& op : ops) {
      op.inode = first_inode + rng() % static_cast<uint64_t>(count);
      op.offset = (rng() % (file_bytes / op_bytes)) * op_bytes;
      op.length = static_cast<uint32_t>(op_bytes);
    }
    const auto t0 = Clock::now();
    auto got = (*client)->ReadBatch(ops);
    if (!got.ok()) return Fail("read batch: " + got.status().message());
    latency_ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
    if (int rc = check(ops, *got); rc != 0) return rc;
    bytes += op_bytes * ops.size();
  }
  const double secs = elapsed();
  std::printf(
      "{\"bytes\":%llu,\"seconds\":%.3f,\"goodput_mbit\":%.2f,\"batches\":%zu,\"p50_ms\":%.2f,"
      "\"p99_ms\":%.2f,\"max_ms\":%.2f,\"peak_inflight_bytes\":%llu}\n",
      static_cast<unsigned long long>(bytes), secs, static_cast<double>(bytes) * 8 / secs / 1e6,
      latency_ms.size(), Quantile(latency_ms, 0.5), Quantile(latency_ms, 0.99),
      latency_ms.empty() ? 0.0 : *std::max_element(latency_ms.begin(), latency_ms.end()),
      static_cast<unsigned long long>((*client)->peak_inflight_read_bytes()));
  return 0;
}

}  // namespace ff::fs3

int main(int argc, char** argv) {
  return ff::fs3::Main(argc, argv);
}
