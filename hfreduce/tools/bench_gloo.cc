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

#include <algorithm>
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

// Ping-pong between ranks 0 and 1 over the pair between them (Gloo's bound send and receive
// buffers, as its own algorithms use them): half the round trip.
void MeasureSendRecv(const std::shared_ptr<gloo::Context>& context, std::size_t bytes,
                     const bench::Plan& plan) {
  std::vector<char> out(std::max<std::size_t>(bytes, 1), 1), in(out.size(), 0);
  gloo::BarrierAllToAll barrier(context);
  double t = 0;
  std::vector<double*> tptrs{&t};
  gloo::AllreduceRing<double> max_time(context, tptrs, 1, gloo::ReductionFunction<double>::max);
  const int rank = context->rank;
  // Slots of their own (the barrier and the max-reduce took theirs from the context).
  const uint64_t ping = context->nextSlot(), pong = context->nextSlot();
  std::unique_ptr<gloo::transport::Buffer> send, recv;
  if (rank <= 1) {
    auto& pair = context->getPair(1 - rank);
    send = pair->createSendBuffer(rank == 0 ? ping : pong, out.data(), bytes);
    recv = pair->createRecvBuffer(rank == 0 ? pong : ping, in.data(), bytes);
  }
  double median = bench::TimeMedian(
      plan.warmup, plan.iters, [&] { barrier.run(); },
      [&] {
        if (rank == 0) {
          send->send();
          send->waitSend();
          recv->waitRecv();
        } else if (rank == 1) {
          recv->waitRecv();
          send->send();
          send->waitSend();
        }
      },
      [&](double mine) {
        t = mine;
        max_time.run();
        return t;
      });
  if (rank == 0) bench::PrintResult("gloo", "fp32", bytes, median / 2);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 5 && !(argc == 6 && std::string(argv[5]) == "--sendrecv")) {
    std::fprintf(stderr,
                 "usage: hfreduce-bench-gloo SIZES TYPES ITERS WARMUP [--sendrecv] (see "
                 "hfreduce-bench)\n");
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
  plan.sendrecv = argc == 6;

  gloo::transport::tcp::attr attr;
  attr.hostname = "127.0.0.1";
  auto device = gloo::transport::tcp::CreateDevice(attr);
  gloo::rendezvous::FileStore store(dir);
  auto context = std::make_shared<gloo::rendezvous::Context>(std::atoi(rank), std::atoi(world));
  context->connectFullMesh(store, device);

  if (plan.sendrecv) {
    for (std::size_t bytes : plan.sizes)
      MeasureSendRecv(context, bytes, plan);
    return 0;
  }
  for (const std::string& type : plan.types) {
    for (std::size_t bytes : plan.sizes) {
      if (type == "fp32") Measure<float>(context, type, bytes, plan);
      // Gloo has no bfloat16; other types are not part of the comparison.
    }
  }
  return 0;
}
