// hfreduce-bench-mpi: one rank of the OpenMPI peer measurement (launched by hfreduce-bench
// through mpirun). Arguments: IMPL_NAME SIZES TYPES ITERS WARMUP [--hugepages] [--sendrecv].
// Measures MPI_Allreduce (in place, MPI_SUM) on fp32, or with --sendrecv MPI_Send/MPI_Recv
// ping-pong between ranks 0 and 1; with --hugepages the buffers are backed by transparent huge
// pages. bf16 has no MPI type and is skipped.
#include <mpi.h>
#include <sys/mman.h>

#include <cstring>

#include "bench_common.h"

namespace bench = ff::hfreduce::bench;

namespace {

float* Allocate(std::size_t bytes, bool huge) {
  constexpr std::size_t kHuge = 2 << 20;
  std::size_t size = (std::max<std::size_t>(bytes, 4) + kHuge - 1) / kHuge * kHuge;
  void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return nullptr;
  madvise(p, size, huge ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);
  std::memset(p, 0, size);  // fault every page in before timing
  return static_cast<float*>(p);
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  if (argc < 6) {
    std::fprintf(stderr, "usage: hfreduce-bench-mpi IMPL SIZES TYPES ITERS WARMUP [--hugepages]\n");
    MPI_Abort(MPI_COMM_WORLD, 64);
  }
  std::string impl = argv[1];
  bench::Plan plan;
  plan.sizes = bench::ParseSizes(argv[2]);
  plan.types = bench::ParseList(argv[3]);
  plan.iters = std::atoi(argv[4]);
  plan.warmup = std::atoi(argv[5]);
  bool huge = false;
  for (int i = 6; i < argc; ++i) {
    huge = huge || std::string(argv[i]) == "--hugepages";
    plan.sendrecv = plan.sendrecv || std::string(argv[i]) == "--sendrecv";
  }
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  auto slowest = [](double mine) {
    double max = 0;
    MPI_Allreduce(&mine, &max, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    return max;
  };
  if (plan.sendrecv) {
    for (std::size_t bytes : plan.sizes) {
      float* buf = Allocate(bytes, huge);
      int count = static_cast<int>(bytes);
      double median = bench::TimeMedian(
          plan.warmup, plan.iters, [] { MPI_Barrier(MPI_COMM_WORLD); },
          [&] {
            if (rank == 0) {
              MPI_Send(buf, count, MPI_BYTE, 1, 0, MPI_COMM_WORLD);
              MPI_Recv(buf, count, MPI_BYTE, 1, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            } else if (rank == 1) {
              MPI_Recv(buf, count, MPI_BYTE, 0, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
              MPI_Send(buf, count, MPI_BYTE, 0, 1, MPI_COMM_WORLD);
            }
          },
          slowest);
      if (rank == 0) bench::PrintResult(impl, "fp32", bytes, median / 2);
      munmap(buf, (std::max<std::size_t>(bytes, 4) + (2 << 20) - 1) / (2 << 20) * (2 << 20));
    }
    MPI_Finalize();
    return 0;
  }

  for (const std::string& type : plan.types) {
    if (type != "fp32") continue;
    for (std::size_t bytes : plan.sizes) {
      float* buf = Allocate(bytes, huge);
      int count = static_cast<int>(bytes / sizeof(float));
      for (int i = 0; i < count; ++i)
        buf[i] = 1.0f;
      double median = bench::TimeMedian(
          plan.warmup, plan.iters, [] { MPI_Barrier(MPI_COMM_WORLD); },
          [&] { MPI_Allreduce(MPI_IN_PLACE, buf, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD); },
          slowest);
      if (rank == 0) bench::PrintResult(impl, type, bytes, median);
      munmap(buf, (std::max<std::size_t>(bytes, 4) + (2 << 20) - 1) / (2 << 20) * (2 << 20));
    }
  }
  MPI_Finalize();
  return 0;
}
