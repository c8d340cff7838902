// hfreduce-loop: one rank of a data-parallel job's communication pattern: each step computes for
// --compute-ms, then allreduces --bytes of fp32 gradients with HFReduce. For measuring allreduce
// and step times where the network matters (deploy/netlab-bench.py runs it in emulated hosts).
//
//   RANK=0 WORLD_SIZE=4 MASTER_ADDR=198.18.0.2 MASTER_PORT=29500 HFREDUCE_LISTEN_HOST=198.18.0.2
//     hfreduce-loop --bytes 8M --steps 30 [--warmup 3] [--compute-ms 0] [--seconds 0]
//
// Environment: as CommunicatorOptions::FromEnvironment (RANK, WORLD_SIZE, MASTER_ADDR,
// MASTER_PORT; HFREDUCE_NODE_ID, HFREDUCE_LISTEN_HOST, HFREDUCE_DSCP, ...). With --seconds, it
// runs steps until that long has passed (every rank agrees when to stop) instead of --steps.
// Rank 0 prints one JSON line:
// {"world":..,"nodes":..,"trees":"<TreeLayout()>","bytes":..,"steps":..,"allreduce_ms":
// [..per
// step..],"step_ms":[..],"median_allreduce_ms":..,"median_step_ms":..,"p99_allreduce_ms":..}. Every
// rank checks the sum it got; a wrong sum or a failed collective exits 1 with the reason on stderr
// (within HFREDUCE_TIMEOUT_MS when a peer is gone).
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "hfreduce/communicator.h"

namespace {

using Clock = std::chrono::steady_clock;

int Fail(const std::string& what) {
  std::fprintf(stderr, "hfreduce-loop: %s\n", what.c_str());
  return 1;
}

double Quantile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const auto i = static_cast<std::size_t>(q * static_cast<double>(v.size() - 1) + 0.5);
  return v[std::min(i, v.size() - 1)];
}

std::string JsonArray(const std::vector<double>& v) {
  std::string out = "[";
  char buf[32];
  for (std::size_t i = 0; i < v.size(); ++i) {
    std::snprintf(buf, sizeof buf, "%s%.3f", i ? "," : "", v[i]);
    out += buf;
  }
  return out + "]";
}

bool ParseBytes(const std::string& s, std::size_t* out) {
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  std::size_t mult = 1;
  if (*end == 'K' || *end == 'k')
    mult = 1 << 10, ++end;
  else if (*end == 'M' || *end == 'm')
    mult = 1 << 20, ++end;
  else if (*end == 'G' || *end == 'g')
    mult = std::size_t{1} << 30, ++end;
  if (end == s.c_str() || *end != '\0' || v <= 0) return false;
  *out = static_cast<std::size_t>(v * static_cast<double>(mult));
  return *out >= 4;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace ff::hfreduce;
  CLI::App app("One rank of an allreduce loop over HFReduce", "hfreduce-loop");
  std::string bytes_arg = "8M";
  int steps = 30, warmup = 3;
  double compute_ms = 0, seconds = 0;
  app.add_option("--bytes", bytes_arg, "Gradient bytes allreduced per step (K, M, G suffixes)");
  app.add_option("--steps", steps, "Timed steps")->check(CLI::Range(1, 1000000));
  app.add_option("--warmup", warmup, "Untimed steps first")->check(CLI::Range(0, 1000));
  app.add_option("--compute-ms", compute_ms, "Time each step computes before its allreduce")
      ->check(CLI::Range(0.0, 600000.0));
  app.add_option("--seconds", seconds, "Run steps for this long instead of --steps")
      ->check(CLI::Range(0.0, 86400.0));
  CLI11_PARSE(app, argc, argv);
  std::size_t bytes = 0;
  if (!ParseBytes(bytes_arg, &bytes)) return Fail("--bytes '" + bytes_arg + "' is not a size");

  auto options = CommunicatorOptions::FromEnvironment();
  if (!options.ok()) return Fail(options.status().message());
  auto created = Communicator::Create(*options);
  if (!created.ok()) return Fail(created.status().message());
  Communicator& comm = **created;
  const int rank = comm.rank(), world = comm.world_size();

  const std::size_t count = bytes / sizeof(float);
  std::vector<float> grad(count);
  std::vector<double> allreduce_ms, step_ms;
  const auto start = Clock::now();
  for (int step = 0;; ++step) {
    const bool timed = step >= warmup;
    if (seconds <= 0 && step >= warmup + steps) break;
    if (seconds > 0 && timed) {
      // Every rank stops at the same step: rank 0's clock decides.
      int32_t more = std::chrono::duration<double>(Clock::now() - start).count() < seconds;
      if (auto st = comm.Broadcast(&more, 1, DataType::kInt32, 0); !st.ok()) {
        return Fail("step " + std::to_string(step) + ": " + st.message());
      }
      if (!more) break;
    }
    const auto t0 = Clock::now();
    if (compute_ms > 0)
      std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(compute_ms));
    // Rank r contributes r + 1 + step: the sum is known to every rank.
    std::fill(grad.begin(), grad.end(), static_cast<float>(rank + 1 + step % 7));
    const auto t1 = Clock::now();
    if (auto st =
            comm.Allreduce(grad.data(), grad.data(), count, DataType::kFloat32, ReduceOp::kSum);
        !st.ok()) {
      return Fail("step " + std::to_string(step) + ": " + st.message());
    }
    const auto t2 = Clock::now();
    const float want = static_cast<float>(world * (world + 1) / 2 + world * (step % 7));
    if (grad.front() != want || grad.back() != want) {
      return Fail("step " + std::to_string(step) + ": allreduce gave " +
                  std::to_string(grad.front()) + ", expected " + std::to_string(want));
    }
    if (timed) {
      allreduce_ms.push_back(std::chrono::duration<double, std::milli>(t2 - t1).count());
      step_ms.push_back(std::chrono::duration<double, std::milli>(t2 - t0).count());
    }
  }
  if (rank == 0) {
    std::printf(
        "{\"world\":%d,\"nodes\":%d,\"trees\":\"%s\",\"bytes\":%zu,\"steps\":%zu,"
        "\"median_allreduce_ms\":%.3f,\"p99_allreduce_ms\":%.3f,\"median_step_ms\":%.3f,"
        "\"allreduce_ms\":%s,\"step_ms\":%s}\n",
        world, comm.num_nodes(), comm.TreeLayout().c_str(), bytes, allreduce_ms.size(),
        Quantile(allreduce_ms, 0.5), Quantile(allreduce_ms, 0.99), Quantile(step_ms, 0.5),
        JsonArray(allreduce_ms).c_str(), JsonArray(step_ms).c_str());
    std::fflush(stdout);
  }
  return 0;
}
