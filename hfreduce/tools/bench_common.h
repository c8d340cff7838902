// What hfreduce-bench and its peer programs (Gloo, OpenMPI) share: the size and type lists, the
// timing loop, and the line each rank-0 prints per measurement, so every implementation is timed
// the same way.
//
// Timing: for each iteration, all ranks synchronise (barrier), then each times one in-place
// allreduce; the iteration's time is the slowest rank's (a max-reduce of the times). The figure
// is the median over the timed iterations after the warm-up ones.
//
// Point-to-point (--op sendrecv): ranks 0 and 1 play ping-pong (0 sends, 1 receives and sends
// the same bytes back); the figure is half the round trip, the time one message takes.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

namespace ff::hfreduce::bench {

struct Plan {
  std::vector<std::size_t> sizes;  // bytes
  std::vector<std::string> types;  // fp32, bf16, ...
  int iters = 10;
  int warmup = 3;
  bool cuda = false;      // also measure HFReduce on CUDA device buffers ("hfreduce-cuda")
  bool sendrecv = false;  // point-to-point ping-pong between ranks 0 and 1, not allreduce
};

// "1M,64M,256M" (K, M, G suffixes, powers of two) -> bytes; empty on a malformed list.
inline std::vector<std::size_t> ParseSizes(const std::string& list) {
  std::vector<std::size_t> sizes;
  std::stringstream ss(list);
  for (std::string item; std::getline(ss, item, ',');) {
    if (item.empty()) return {};
    char* end = nullptr;
    unsigned long long v = std::strtoull(item.c_str(), &end, 10);
    std::string suffix(end);
    if (suffix == "K" || suffix == "KiB")
      v <<= 10;
    else if (suffix == "M" || suffix == "MiB")
      v <<= 20;
    else if (suffix == "G" || suffix == "GiB")
      v <<= 30;
    else if (!suffix.empty() || end == item.c_str())
      return {};
    sizes.push_back(static_cast<std::size_t>(v));
  }
  return sizes;
}

inline std::vector<std::string> ParseList(const std::string& list) {
  std::vector<std::string> out;
  std::stringstream ss(list);
  for (std::string item; std::getline(ss, item, ',');) {
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

inline std::string SizeName(std::size_t bytes) {
  if (bytes % (1 << 30) == 0) return std::to_string(bytes >> 30) + "GiB";
  if (bytes % (1 << 20) == 0) return std::to_string(bytes >> 20) + "MiB";
  if (bytes % (1 << 10) == 0) return std::to_string(bytes >> 10) + "KiB";
  return std::to_string(bytes) + "B";
}

// Runs warmup + iters rounds of `op`, returns the median of the slowest rank's time per round.
// `barrier` synchronises the ranks; `max_across_ranks` turns a rank's time into the maximum.
inline double TimeMedian(int warmup, int iters, const std::function<void()>& barrier,
                         const std::function<void()>& op,
                         const std::function<double(double)>& max_across_ranks) {
  std::vector<double> times;
  for (int i = 0; i < warmup + iters; ++i) {
    barrier();
    auto t0 = std::chrono::steady_clock::now();
    op();
    double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    t = max_across_ranks(t);
    if (i >= warmup) times.push_back(t);
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

// The line rank 0 prints for the launcher: "RESULT <impl> <type> <bytes> <seconds>".
inline void PrintResult(const std::string& impl, const std::string& type, std::size_t bytes,
                        double seconds) {
  std::printf("RESULT %s %s %zu %.9f\n", impl.c_str(), type.c_str(), bytes, seconds);
  std::fflush(stdout);
}

}  // namespace ff::hfreduce::bench
