// hfreduce-bench: HFReduce allreduce bandwidth beside Gloo and OpenMPI, measured in the same run
// on the same layouts, plus the machine's memory-copy bandwidth as the bound of the local reduce.
//
//   hfreduce-bench                          # layouts 1x4 and 2x4, 1 MiB .. 256 MiB, fp32 and bf16
//   hfreduce-bench --layouts 3x2 --sizes 64M --types fp32 --iters 20
//   hfreduce-bench --device cuda            # also HFReduce on GPU buffers (ranks share the GPUs)
//
// Layout NxM = N emulated nodes x M local ranks on this machine (HFREDUCE_NODE_ID). Gloo and
// OpenMPI have no notion of emulated nodes: they run N*M ranks on the host. Bus bandwidth is
// 2(P-1)/P * size / time (the nccl-tests convention). The last line is the summary for the
// --summary layout and size.
#include <sys/mman.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstring>
#include <filesystem>
#include <map>

#include "bench_common.h"
#include "common/net.h"
#include "common/subprocess.h"
#include "hfreduce/communicator.h"
#include "reduce/kernels.h"

#ifdef FF_WITH_CUDA
#include <cuda_runtime.h>
#endif

namespace ff::hfreduce {
namespace {

namespace fs = std::filesystem;

struct Layout {
  int nodes = 1;
  int local = 1;
  int world() const { return nodes * local; }
  std::string name() const { return std::to_string(nodes) + "x" + std::to_string(local); }
};

bool ParseLayout(const std::string& s, Layout* out) {
  auto x = s.find('x');
  if (x == std::string::npos) return false;
  char* end = nullptr;
  long n = std::strtol(s.c_str(), &end, 10);
  if (end != s.c_str() + x) return false;
  long m = std::strtol(s.c_str() + x + 1, &end, 10);
  if (*end != '\0' || n < 1 || m < 1 || n * m > 64) return false;
  out->nodes = static_cast<int>(n);
  out->local = static_cast<int>(m);
  return true;
}

// key: impl, type, bytes -> seconds
using Results = std::map<std::tuple<std::string, std::string, std::size_t>, double>;

void ParseResults(const std::string& out, Results* results) {
  std::stringstream ss(out);
  for (std::string line; std::getline(ss, line);) {
    std::stringstream ls(line);
    std::string tag, impl, type;
    std::size_t bytes = 0;
    double seconds = 0;
    if (line.rfind("CHECK ", 0) == 0) std::fprintf(stderr, "hfreduce-bench: %s\n", line.c_str());
    if (ls >> tag >> impl >> type >> bytes >> seconds && tag == "RESULT") {
      (*results)[{impl, type, bytes}] = seconds;
    }
  }
}

// Runs `argv` as ranks 0..world-1 (env from `env_of(rank)`); collects rank 0's RESULT lines.
bool RunRanks(const std::string& what, int world, const std::vector<std::string>& argv,
              const std::function<std::map<std::string, std::string>(int)>& env_of,
              Results* results) {
  std::fprintf(stderr, "hfreduce-bench: running %s ...\n", what.c_str());
  std::vector<Subprocess> procs;
  for (int r = 0; r < world; ++r) {
    Subprocess::Options options;
    options.env = env_of(r);
    auto p = Subprocess::Start(argv, options);
    if (!p.ok()) {
      std::fprintf(stderr, "hfreduce-bench: %s: %s\n", what.c_str(), p.status().ToString().c_str());
      return false;
    }
    procs.push_back(std::move(*p));
  }
  bool ok = true;
  for (int r = 0; r < world; ++r) {
    auto code = procs[r].Wait(std::chrono::minutes(30));
    if (code != 0) {
      ok = false;
      std::string err = procs[r].Stderr();
      std::fprintf(stderr, "hfreduce-bench: %s rank %d failed (exit %d): %s\n", what.c_str(), r,
                   code.value_or(-1), err.substr(0, 2000).c_str());
    }
  }
  ParseResults(procs[0].Stdout(), results);
  return ok;
}

// ---- Rank mode: one HFReduce rank -------------------------------------------------------------

#ifdef FF_WITH_CUDA
// Device buffers: the collectives take their CUDA path (copies to and from the node's shared
// memory on the communicator's stream). Before timing, each collective is checked on device
// buffers against exact expected values.
struct DeviceBuffer {
  explicit DeviceBuffer(std::size_t n) : bytes(n) {
    if (cudaMalloc(&data, std::max<std::size_t>(n, 1)) != cudaSuccess) data = nullptr;
  }
  ~DeviceBuffer() {
    if (data) cudaFree(data);
  }
  void* data = nullptr;
  std::size_t bytes;
};

Status CheckOnDevice(Communicator& c) {
  const int world = c.world_size(), rank = c.rank();
  const std::size_t n = 3 * (std::size_t{1} << 20) / 4 + 7;  // several chunks and a tail
  std::vector<float> host(n * static_cast<std::size_t>(world));
  auto expect = [&](const char* what, const std::vector<float>& got,
                    const std::function<float(std::size_t)>& want) -> Status {
    for (std::size_t i = 0; i < got.size(); ++i) {
      if (got[i] != want(i)) {
        return DataLoss(std::string("hfreduce-bench: ") + what + " on device buffers: element " +
                        std::to_string(i) + " is " + std::to_string(got[i]) + ", expected " +
                        std::to_string(want(i)));
      }
    }
    return Status::Ok();
  };
  DeviceBuffer a(n * sizeof(float)), big(n * world * sizeof(float));
  if (!a.data || !big.data) return Unavailable("hfreduce-bench: cudaMalloc failed");
  // Allreduce in place: sum over ranks of (rank + 1) * (i % 7).
  for (std::size_t i = 0; i < n; ++i)
    host[i] = static_cast<float>((rank + 1) * (i % 7));
  cudaMemcpy(a.data, host.data(), n * sizeof(float), cudaMemcpyHostToDevice);
  FF_RETURN_IF_ERROR(c.Allreduce(a.data, a.data, n, DataType::kFloat32, ReduceOp::kSum));
  std::vector<float> got(n);
  cudaMemcpy(got.data(), a.data, n * sizeof(float), cudaMemcpyDeviceToHost);
  const float ranks_sum = static_cast<float>(world * (world + 1) / 2);
  FF_RETURN_IF_ERROR(expect("allreduce", got,
                            [&](std::size_t i) { return ranks_sum * static_cast<float>(i % 7); }));
  // Reduce-scatter: every rank sends i % 5 + rank over the whole buffer.
  for (std::size_t i = 0; i < host.size(); ++i)
    host[i] = static_cast<float>(i % 5 + rank);
  cudaMemcpy(big.data, host.data(), host.size() * sizeof(float), cudaMemcpyHostToDevice);
  FF_RETURN_IF_ERROR(c.ReduceScatter(big.data, a.data, n, DataType::kFloat32, ReduceOp::kSum));
  cudaMemcpy(got.data(), a.data, n * sizeof(float), cudaMemcpyDeviceToHost);
  const float rank_total = static_cast<float>(world * (world - 1) / 2);
  FF_RETURN_IF_ERROR(expect("reduce-scatter", got, [&](std::size_t i) {
    return static_cast<float>(world) * static_cast<float>((rank * n + i) % 5) + rank_total;
  }));
  // Allgather: rank r's piece is r * 1000 + i.
  for (std::size_t i = 0; i < n; ++i)
    host[i] = static_cast<float>(rank * 1000 + i % 1000);
  cudaMemcpy(a.data, host.data(), n * sizeof(float), cudaMemcpyHostToDevice);
  FF_RETURN_IF_ERROR(c.Allgather(a.data, big.data, n, DataType::kFloat32));
  std::vector<float> all(n * static_cast<std::size_t>(world));
  cudaMemcpy(all.data(), big.data, all.size() * sizeof(float), cudaMemcpyDeviceToHost);
  return expect("allgather", all,
                [&](std::size_t i) { return static_cast<float>((i / n) * 1000 + (i % n) % 1000); });
}
#endif

// Ping-pong between ranks 0 and 1 (the other ranks wait at the barriers): half the round trip.
// Each size is checked once first (the bytes come back as sent); the first line says how the two
// ranks' messages travel.
int RankSendRecv(Communicator& c, const bench::Plan& plan) {
  const char* impl_env = std::getenv("HFREDUCE_BENCH_IMPL");
  const std::string impl = impl_env != nullptr && *impl_env ? impl_env : "hfreduce";
  const int rank = c.rank();
  if (c.world_size() < 2) {
    std::fprintf(stderr, "hfreduce-bench: --op sendrecv needs at least two ranks\n");
    return 2;
  }
  for (std::size_t bytes : plan.sizes) {
    std::vector<char> out(bytes), in(bytes);
    for (std::size_t i = 0; i < bytes; ++i)
      out[i] = static_cast<char>(i * 7 + 3);
    auto exchange = [&]() -> Status {
      if (rank == 0) {
        FF_RETURN_IF_ERROR(c.Send(out.data(), bytes, DataType::kUInt8, 1));
        return c.Recv(in.data(), bytes, DataType::kUInt8, 1);
      }
      if (rank == 1) {
        FF_RETURN_IF_ERROR(c.Recv(in.data(), bytes, DataType::kUInt8, 0));
        return c.Send(in.data(), bytes, DataType::kUInt8, 0);
      }
      return Status::Ok();
    };
    Status st = exchange();
    if (st.ok() && rank == 0 && in != out) {
      st = DataLoss("hfreduce-bench: " + std::to_string(bytes) + " bytes came back changed");
    }
    if (st.ok() && rank == 0 && bytes == plan.sizes.front()) {
      std::printf("CHECK %s: ranks 0 and 1 talk by %s\n", impl.c_str(),
                  c.PointToPointPath(1).c_str());
    }
    Status failed = st;
    double median = bench::TimeMedian(
        plan.warmup, plan.iters, [&] { (void)c.Barrier(); },
        [&] {
          if (Status e = exchange(); !e.ok()) failed = e;
        },
        [&](double mine) {
          (void)c.Allreduce(&mine, &mine, 1, DataType::kFloat64, ReduceOp::kMax);
          return mine;
        });
    if (!failed.ok()) {
      std::fprintf(stderr, "rank %d: %s\n", rank, failed.ToString().c_str());
      return 1;
    }
    if (rank == 0) bench::PrintResult(impl, "fp32", bytes, median / 2);
  }
  return 0;
}

int RankMain(const bench::Plan& plan) {
  auto options = CommunicatorOptions::FromEnvironment();
  if (!options.ok()) {
    std::fprintf(stderr, "%s\n", options.status().ToString().c_str());
    return 2;
  }
  auto comm = Communicator::Create(*options);
  if (!comm.ok()) {
    std::fprintf(stderr, "%s\n", comm.status().ToString().c_str());
    return 2;
  }
  Communicator& c = **comm;
  if (plan.sendrecv) return RankSendRecv(c, plan);
#ifdef FF_WITH_CUDA
  int devices = 0;
  if (plan.cuda) {
    if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
      std::fprintf(stderr, "hfreduce-bench: --device cuda, but this machine has no CUDA device\n");
      return 2;
    }
    cudaSetDevice(c.local_rank() % devices);
    if (Status st = CheckOnDevice(c); !st.ok()) {
      std::fprintf(stderr, "rank %d: %s\n", c.rank(), st.ToString().c_str());
      return 1;
    }
    if (c.rank() == 0) {
      std::printf("CHECK allreduce, reduce-scatter and allgather on device buffers: exact\n");
    }
  }
#else
  if (plan.cuda) {
    std::fprintf(stderr, "hfreduce-bench: --device cuda, but this build has no CUDA\n");
    return 2;
  }
#endif
  for (const std::string& type_name : plan.types) {
    DataType type;
    if (!ParseDataType(type_name, &type)) continue;
    for (std::size_t bytes : plan.sizes) {
      std::size_t count = bytes / ElementSize(type);
      std::vector<char> host_buf(count * ElementSize(type));
      char* buf = host_buf.data();
      // Small values that stay finite over the timed sums.
      const float one = 1.0f / static_cast<float>(c.world_size());
      for (std::size_t i = 0; i < count; ++i) {
        if (type == DataType::kFloat32) reinterpret_cast<float*>(buf)[i] = one;
        if (type == DataType::kBFloat16) reinterpret_cast<uint16_t*>(buf)[i] = FloatToBFloat16(one);
        if (type == DataType::kFloat16) reinterpret_cast<uint16_t*>(buf)[i] = FloatToHalf(one);
      }
#ifdef FF_WITH_CUDA
      std::unique_ptr<DeviceBuffer> device_buf;
      if (plan.cuda) {
        device_buf = std::make_unique<DeviceBuffer>(host_buf.size());
        if (!device_buf->data) {
          std::fprintf(stderr, "hfreduce-bench: cudaMalloc of %zu bytes failed\n", host_buf.size());
          return 1;
        }
        cudaMemcpy(device_buf->data, buf, host_buf.size(), cudaMemcpyHostToDevice);
        buf = static_cast<char*>(device_buf->data);
      }
#endif
      Status failed;
      double median = bench::TimeMedian(
          plan.warmup, plan.iters, [&] { (void)c.Barrier(); },
          [&] {
            Status st = c.Allreduce(buf, buf, count, type, ReduceOp::kSum);
            if (!st.ok()) failed = st;
          },
          [&](double mine) {
            (void)c.Allreduce(&mine, &mine, 1, DataType::kFloat64, ReduceOp::kMax);
            return mine;
          });
      if (!failed.ok()) {
        std::fprintf(stderr, "rank %d: %s\n", c.rank(), failed.ToString().c_str());
        return 1;
      }
      if (c.rank() == 0) {
        bench::PrintResult(plan.cuda ? "hfreduce-cuda" : "hfreduce", type_name, bytes, median);
      }
    }
  }
  return 0;
}

// ---- Memory bandwidth -------------------------------------------------------------------------

char* Pages(std::size_t n) {
  void* p =
      mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
  if (p == MAP_FAILED) std::abort();
  std::memset(p, 1, n);
  return static_cast<char*>(p);
}

// GB/s of memory traffic: memcpy (read + write) and the local reduce of `k` fp32 inputs
// (k reads + 1 write), single-threaded, 64 MiB per buffer, median of 7.
std::pair<double, double> MemoryBandwidth(int k) {
  const std::size_t n = 64 << 20;
  std::vector<char*> in;
  for (int i = 0; i < k; ++i)
    in.push_back(Pages(n));
  char* out = Pages(n);
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  std::vector<double> copy, reduce;
  std::vector<const void*> ptrs(in.begin(), in.end());
  for (int i = 0; i < 8; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    std::memcpy(out, in[0], n);
    auto t1 = std::chrono::steady_clock::now();
    Reduce(DataType::kFloat32, ReduceOp::kSum, ptrs.data(), k, out, n / 4);
    auto t2 = std::chrono::steady_clock::now();
    if (i == 0) continue;
    copy.push_back(2.0 * n / std::chrono::duration<double>(t1 - t0).count() / 1e9);
    reduce.push_back((k + 1.0) * n / std::chrono::duration<double>(t2 - t1).count() / 1e9);
  }
  for (char* p : in)
    munmap(p, n);
  munmap(out, n);
  return {median(copy), median(reduce)};
}

// ---- Launcher ---------------------------------------------------------------------------------

// Point-to-point (--op sendrecv) has no bus factor: its busbw is its algbw.
bool g_sendrecv = false;

double BusBandwidth(std::size_t bytes, double seconds, int world) {
  return world <= 1 || g_sendrecv
             ? bytes / seconds / 1e9
             : 2.0 * (world - 1) / world * static_cast<double>(bytes) / seconds / 1e9;
}

int LauncherMain(const bench::Plan& plan, const std::vector<Layout>& layouts,
                 const std::vector<std::string>& peers, const Layout& summary_layout,
                 std::size_t summary_size, std::size_t chunk_bytes, int depth) {
  const fs::path self = fs::read_symlink("/proc/self/exe");
  const fs::path dir = self.parent_path();
  const std::string sizes_arg = [&] {
    std::string s;
    for (std::size_t b : plan.sizes)
      s += (s.empty() ? "" : ",") + std::to_string(b);
    return s;
  }();
  const std::string types_arg = [&] {
    std::string s;
    for (const std::string& t : plan.types)
      s += (s.empty() ? "" : ",") + t;
    return s;
  }();
  const bool want_gloo = std::find(peers.begin(), peers.end(), "gloo") != peers.end();
  const bool want_mpi = std::find(peers.begin(), peers.end(), "openmpi") != peers.end();
  const bool have_gloo = fs::exists(dir / "hfreduce-bench-gloo");
  const bool have_mpi = fs::exists(dir / "hfreduce-bench-mpi") && fs::exists("/usr/bin/mpirun");
  if (want_gloo && !have_gloo) {
    std::fprintf(stderr, "hfreduce-bench: Gloo peer not built (install libgloo-dev and rebuild)\n");
  }
  if (want_mpi && !have_mpi) {
    std::fprintf(stderr,
                 "hfreduce-bench: OpenMPI peer not built (install libopenmpi-dev openmpi-bin)\n");
  }

  std::map<std::string, Results> by_layout;
  bool all_ok = true;
  for (const Layout& layout : layouts) {
    Results& results = by_layout[layout.name()];
    const int world = layout.world();
    // HFReduce on host buffers, and (--device cuda) on device buffers. Point-to-point on one
    // node: also each way a pair can talk (the default picks by size).
    struct Variant {
      std::string name;
      std::map<std::string, std::string> env;
      bool cuda;
    };
    std::vector<Variant> variants = {{"hfreduce", {}, false}};
    if (plan.cuda) variants.push_back({"hfreduce-cuda", {}, true});
    if (plan.sendrecv && layout.local >= 2) {
      variants.push_back({"hfreduce-shm-copy", {{"HFREDUCE_P2P_DIRECT_BYTES", "0"}}, false});
      variants.push_back({"hfreduce-shm-direct", {{"HFREDUCE_P2P_DIRECT_BYTES", "1"}}, false});
      variants.push_back({"hfreduce-tcp", {{"HFREDUCE_P2P_SHM", "0"}}, false});
    }
    for (const Variant& v : variants) {
      const std::string port = std::to_string(FindFreePort().value_or(29500));
      std::vector<std::string> argv = {self.string(), "--rank-mode",
                                       "--sizes",     sizes_arg,
                                       "--types",     types_arg,
                                       "--iters",     std::to_string(plan.iters),
                                       "--warmup",    std::to_string(plan.warmup)};
      if (v.cuda) argv.insert(argv.end(), {"--device", "cuda"});
      if (plan.sendrecv) argv.insert(argv.end(), {"--op", "sendrecv"});
      all_ok &= RunRanks(
          v.name + " " + layout.name(), world, argv,
          [&](int r) {
            std::map<std::string, std::string> env = {
                {"RANK", std::to_string(r)},
                {"WORLD_SIZE", std::to_string(world)},
                {"MASTER_ADDR", "127.0.0.1"},
                {"MASTER_PORT", port},
                {"HFREDUCE_NODE_ID", "bench-node" + std::to_string(r / layout.local)},
                {"HFREDUCE_CHUNK_BYTES", std::to_string(chunk_bytes)},
                {"HFREDUCE_PIPELINE_DEPTH", std::to_string(depth)},
                {"HFREDUCE_BENCH_IMPL", v.name}};
            env.insert(v.env.begin(), v.env.end());
            return env;
          },
          &results);
    }
    if (want_gloo && have_gloo && world > 1) {
      std::string store =
          fs::temp_directory_path() / ("hfreduce-bench-gloo-" + std::to_string(getpid()));
      fs::remove_all(store);
      fs::create_directories(store);
      std::vector<std::string> argv = {(dir / "hfreduce-bench-gloo").string(), sizes_arg, types_arg,
                                       std::to_string(plan.iters), std::to_string(plan.warmup)};
      if (plan.sendrecv) argv.push_back("--sendrecv");
      all_ok &= RunRanks(
          "gloo " + layout.name(), world, argv,
          [&](int r) {
            return std::map<std::string, std::string>{{"RANK", std::to_string(r)},
                                                      {"WORLD_SIZE", std::to_string(world)},
                                                      {"GLOO_STORE_DIR", store}};
          },
          &results);
      fs::remove_all(store);
    }
    if (want_mpi && have_mpi && world > 1) {
      struct MpiVariant {
        std::string name;
        std::vector<std::string> mca;
        bool huge;
      };
      for (const MpiVariant& v :
           {MpiVariant{"openmpi-shm", {}, false}, MpiVariant{"openmpi-shm-hugepages", {}, true},
            MpiVariant{"openmpi-tcp",
                       {"--mca", "pml", "ob1", "--mca", "btl", "self,tcp", "--mca",
                        "btl_tcp_if_include", "lo"},
                       false}}) {
        std::vector<std::string> argv = {"/usr/bin/mpirun",
                                         "--allow-run-as-root",
                                         "--oversubscribe",
                                         "--bind-to",
                                         "none",
                                         "-np",
                                         std::to_string(world)};
        argv.insert(argv.end(), v.mca.begin(), v.mca.end());
        argv.insert(argv.end(),
                    {(dir / "hfreduce-bench-mpi").string(), v.name, sizes_arg, types_arg,
                     std::to_string(plan.iters), std::to_string(plan.warmup)});
        if (v.huge) argv.push_back("--hugepages");
        if (plan.sendrecv) argv.push_back("--sendrecv");
        all_ok &= RunRanks(
            v.name + " " + layout.name(), 1, argv,
            [](int) { return std::map<std::string, std::string>{}; }, &results);
      }
    }
  }

  // The table.
  if (plan.sendrecv) {
    std::printf(
        "\nhfreduce-bench --op sendrecv: ping-pong between ranks 0 and 1, time = half the round "
        "trip, median of %d iterations after %d warm-up; busbw = algbw = size / time\n",
        plan.iters, plan.warmup);
  } else {
    std::printf(
        "\nhfreduce-bench: median of %d iterations after %d warm-up; busbw = 2(P-1)/P * size / "
        "time\n",
        plan.iters, plan.warmup);
  }
  std::printf("%-7s %-8s %-5s %-24s %12s %12s %12s\n", "layout", "size", "type", "implementation",
              "time ms", "algbw GB/s", "busbw GB/s");
  for (const Layout& layout : layouts) {
    const Results& results = by_layout[layout.name()];
    for (const std::string& type : plan.types) {
      for (std::size_t bytes : plan.sizes) {
        for (const auto& [key, seconds] : results) {
          const auto& [impl, t, b] = key;
          if (t != type || b != bytes) continue;
          std::printf("%-7s %-8s %-5s %-24s %12.3f %12.2f %12.2f\n", layout.name().c_str(),
                      bench::SizeName(bytes).c_str(), type.c_str(), impl.c_str(), seconds * 1e3,
                      static_cast<double>(bytes) / seconds / 1e9,
                      BusBandwidth(bytes, seconds, layout.world()));
        }
      }
    }
  }
  auto [copy_bw, reduce_bw] = MemoryBandwidth(std::max(2, summary_layout.local));
  std::printf(
      "\nmemory: memcpy %.2f GB/s of traffic (read + write); local %s reduce of %d fp32 inputs "
      "%.2f GB/s of traffic (%.0f%% of memcpy), one thread\n",
      copy_bw, std::string(IsaName(DefaultIsa())).c_str(), std::max(2, summary_layout.local),
      reduce_bw, 100.0 * reduce_bw / copy_bw);

  // The summary line.
  const Results& sr = by_layout[summary_layout.name()];
  auto best = [&](const std::string& prefix) {
    double best_bw = 0;
    for (const auto& [key, seconds] : sr) {
      const auto& [impl, t, b] = key;
      if (t == "fp32" && b == summary_size && impl.rfind(prefix, 0) == 0) {
        best_bw = std::max(best_bw, BusBandwidth(b, seconds, summary_layout.world()));
      }
    }
    return best_bw;
  };
  double ours = 0;  // host buffers (the device figure is in the table)
  for (const auto& [key, seconds] : sr) {
    const auto& [impl, t, b] = key;
    if (impl == "hfreduce" && t == "fp32" && b == summary_size) {
      ours = BusBandwidth(b, seconds, summary_layout.world());
    }
  }
  double gloo = best("gloo");
  double mpi_tcp = best("openmpi-tcp");
  double mpi_shm = 0;
  for (const auto& [key, seconds] : sr) {
    const auto& [impl, t, b] = key;
    if (impl == "openmpi-shm" && t == "fp32" && b == summary_size) {
      mpi_shm = BusBandwidth(b, seconds, summary_layout.world());
    }
  }
  if (plan.sendrecv) mpi_shm = best("openmpi-shm");  // the better of its two variants
  auto ratio = [&](double peer) { return peer > 0 ? ours / peer : 0.0; };
  std::printf(
      "hfreduce %s%s %s fp32: busbw %.2f GB/s; best gloo %.2f GB/s (ratio %.2f); "
      "best openmpi-tcp %.2f GB/s (ratio %.2f); openmpi-shm %.2f GB/s (ratio %.2f)\n",
      plan.sendrecv ? "sendrecv " : "", summary_layout.name().c_str(),
      bench::SizeName(summary_size).c_str(), ours, gloo, ratio(gloo), mpi_tcp, ratio(mpi_tcp),
      mpi_shm, ratio(mpi_shm));
  return all_ok ? 0 : 1;
}

}  // namespace
}  // namespace ff::hfreduce

int main(int argc, char** argv) {
  using namespace ff::hfreduce;
  CLI::App app("HFReduce allreduce bandwidth beside Gloo and OpenMPI", "hfreduce-bench");
  std::string layouts_arg = "1x4,2x4", sizes_arg = "1M,4M,16M,64M,256M", types_arg = "fp32,bf16";
  std::string peers_arg = "gloo,openmpi", summary_arg = "2x4", summary_size_arg = "64M";
  bench::Plan plan;
  bool rank_mode = false;
  std::size_t chunk_bytes = 1 << 20;
  int depth = 8;
  app.add_option("--layouts", layouts_arg, "Comma-separated NODESxRANKS layouts");
  app.add_option("--sizes", sizes_arg, "Comma-separated sizes (K, M, G suffixes)");
  app.add_option("--types", types_arg, "fp32, bf16 (Gloo and OpenMPI are measured on fp32)");
  app.add_option("--iters", plan.iters, "Timed iterations (median reported)")
      ->check(CLI::Range(1, 100000));
  app.add_option("--warmup", plan.warmup, "Untimed iterations first")->check(CLI::Range(0, 100000));
  app.add_option("--peers", peers_arg, "Peers to measure: gloo, openmpi (empty: none)");
  app.add_option("--summary", summary_arg, "Layout of the summary line");
  app.add_option("--summary-size", summary_size_arg, "Size of the summary line");
  app.add_option("--chunk-bytes", chunk_bytes, "HFReduce pipeline chunk size");
  app.add_option("--depth", depth, "HFReduce pipeline depth")->check(CLI::Range(2, 64));
  std::string device_arg = "host";
  app.add_option("--device", device_arg, "host, or cuda: also HFReduce on CUDA device buffers")
      ->check(CLI::IsMember({"host", "cuda"}));
  std::string op_arg = "allreduce";
  app.add_option("--op", op_arg,
                 "allreduce, or sendrecv: ping-pong between ranks 0 and 1 (point-to-point; "
                 "e.g. --layouts 1x2,2x1)")
      ->check(CLI::IsMember({"allreduce", "sendrecv"}));
  app.add_flag("--rank-mode", rank_mode, "Internal: run as one HFReduce rank")->group("");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  plan.sizes = bench::ParseSizes(sizes_arg);
  plan.types = bench::ParseList(types_arg);
  plan.cuda = device_arg == "cuda";
  plan.sendrecv = g_sendrecv = op_arg == "sendrecv";
  if (plan.sendrecv && plan.cuda) {
    std::fprintf(stderr, "hfreduce-bench: --op sendrecv measures host buffers only\n");
    return 64;
  }
  if (plan.sizes.empty()) {
    std::fprintf(stderr, "hfreduce-bench: bad --sizes '%s'\n", sizes_arg.c_str());
    return 64;
  }
  if (rank_mode) return RankMain(plan);
  std::vector<Layout> layouts;
  for (const std::string& l : bench::ParseList(layouts_arg)) {
    Layout layout;
    if (!ParseLayout(l, &layout)) {
      std::fprintf(stderr, "hfreduce-bench: bad layout '%s' (expected NxM, N*M <= 64)\n",
                   l.c_str());
      return 64;
    }
    layouts.push_back(layout);
  }
  Layout summary;
  auto summary_sizes = bench::ParseSizes(summary_size_arg);
  if (!ParseLayout(summary_arg, &summary) || summary_sizes.size() != 1) {
    std::fprintf(stderr, "hfreduce-bench: bad --summary / --summary-size\n");
    return 64;
  }
  return LauncherMain(plan, layouts, bench::ParseList(peers_arg), summary, summary_sizes[0],
                      chunk_bytes, depth);
}
