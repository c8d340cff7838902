#include "shm/numa.h"

#include <linux/mempolicy.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

namespace ff::hfreduce {
namespace {

constexpr int kMaxNodes = 64;

long Mbind(void* p, std::size_t n, int mode, unsigned long mask) {
  // mbind needs a page-aligned start.
  auto start = reinterpret_cast<uintptr_t>(p) & ~uintptr_t{4095};
  std::size_t len = n + (reinterpret_cast<uintptr_t>(p) - start);
  return syscall(SYS_mbind, start, len, mode, &mask, kMaxNodes + 1, MPOL_MF_MOVE);
}

int NodeOfCpu(int cpu) {
  for (int node = 0; node < kMaxNodes; ++node) {
    std::string dir = "/sys/devices/system/node/node" + std::to_string(node);
    if (std::filesystem::exists(dir + "/cpu" + std::to_string(cpu))) return node;
  }
  return 0;
}

}  // namespace

int NumaNodes() {
  static const int nodes = [] {
    int n = 0;
    while (n < kMaxNodes &&
           std::filesystem::exists("/sys/devices/system/node/node" + std::to_string(n))) {
      ++n;
    }
    return n == 0 ? 1 : n;
  }();
  return nodes;
}

void InterleaveMemory(void* p, std::size_t n) {
  if (NumaNodes() < 2 || n == 0) return;
  unsigned long mask = (NumaNodes() >= 64) ? ~0ul : ((1ul << NumaNodes()) - 1);
  (void)Mbind(p, n, MPOL_INTERLEAVE, mask);  // placement is an optimisation: failures are fine
}

void BindMemoryHere(void* p, std::size_t n) {
  if (NumaNodes() < 2 || n == 0) return;
  int cpu = sched_getcpu();
  if (cpu < 0) return;
  (void)Mbind(p, n, MPOL_BIND, 1ul << NodeOfCpu(cpu));
}

}  // namespace ff::hfreduce
