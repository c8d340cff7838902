// hfreduce-bench-gloo: one rank of the Gloo peer measurement (launched by hfreduce-bench).
// Environment: RANK, WORLD_SIZE, GLOO_STORE_DIR (a directory for Gloo's FileStore rendezvous).
// Arguments: SIZES TYPES ITERS WARMUP. Measures Gloo's ring-chunked, halving-doubling and bcube
// allreduce over TCP on loopback; bf16 has no Gloo type and is skipped.
#include <gloo/allreduce_bcube.h>
#include <gloo/allreduce_halving_doubling.h>
#include <gloo/allreduce_ring.h>
#include <gloo/allreduce_ring_chunked.h>
#include <gloo/barrier_all_to_all.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/transport/tcp/device.h>

#include <memory>

#include "bench_common.h"

namespace bench = ff::hfreduce::bench;

namespace {

template <typename T>
void Measure(const std::shared_ptr<gloo::Context>& context, const std::string& type,
             std::size_t bytes, const bench::Plan& plan) {
  std::size_t count = bytes / sizeof(T);
  std::vector<T> buf(count, T(1));
  std::vector<T*> ptrs{buf.data()};
  gloo::BarrierAllToAll barrier(context);
  double t = 0;
  std::vector<double*> tptrs{&t};
  gloo::AllreduceRing<double> max_time(context, tptrs, 1, gloo::ReductionFunction<double>::max);
  auto run = [&](gloo::Algorithm& algo, const std::string& name) {
    double median = bench::TimeMedian(
        plan.warmup, plan.iters, [&] { barrier.run(); }, [&] { algo.run(); },
        [&](double mine) {
          t = mine;
          max_time.run();
          return t;
        });
    if (context->rank == 0) bench::PrintResult(name, type, bytes, median);
  };
  {
    gloo::AllreduceRingChunked<T> algo(context, ptrs, static_cast<int>(count));
    run(algo, "gloo-ring-chunked");
  }
  {
    gloo::AllreduceHalvingDoubling<T> algo(context, ptrs, static_cast<int>(count));
    run(algo, "gloo-halving-doubling");
  }
  {
    gloo::AllreduceBcube<T> algo(context, ptrs, static_cast<int>(count));
    run(algo, "gloo-bcube");
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 5) {
    std::fprintf(stderr,
                 "usage: hfreduce-bench-gloo SIZES TYPES ITERS WARMUP (see hfreduce-bench)\n");
    return 64;
  }
  const char* rank = std::getenv("RANK");
  const char* world = std::getenv("WORLD_SIZE");
  const char* dir = std::getenv("GLOO_STORE_DIR");
  if (!rank || !world || !dir) {
    std::fprintf(stderr, "hfreduce-bench-gloo: RANK, WORLD_SIZE and GLOO_STORE_DIR must be set\n");
    return 64;
  }
  bench::Plan plan;
  plan.sizes = bench::ParseSizes(argv[1]);
  plan.types = bench::ParseList(argv[2]);
  plan.iters = std::atoi(argv[3]);
  plan.warmup = std::atoi(argv[4]);

  gloo::transport::tcp::attr attr;
  attr.hostname = "127.0.0.1";
  auto device = gloo::transport::tcp::CreateDevice(attr);
  gloo::rendezvous::FileStore store(dir);
  auto context = std::make_shared<gloo::rendezvous::Context>(std::atoi(rank), std::atoi(world));
  context->connectFullMesh(store, device);

  for (const std::string& type : plan.types) {
    for (std::size_t bytes : plan.sizes) {
      if (type == "fp32") Measure<float>(context, type, bytes, plan);
      // Gloo has no bfloat16; other types are not part of the comparison.
    }
  }
  return 0;
}
