// hfreduce-test-rank: one rank of a multi-process HFReduce test. The test launches world_size of
// these (environment: RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT, HFREDUCE_NODE_ID, ...) and each
// checks its results against a float64 reference computed from the same seeded inputs.
// Exit 0: every check passed. Exit 1: a check failed (details on stderr). Exit 2: setup failed.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "hfreduce/communicator.h"
#include "monitoring/metrics.h"
#include "reduce/kernels.h"
#include "tests/support/http_get.h"

namespace ff::hfreduce {
namespace {

int failures = 0;

#define CHECK_OR_FAIL(cond, ...)                 \
  do {                                           \
    if (!(cond)) {                               \
      std::fprintf(stderr, "rank %d: ", g_rank); \
      std::fprintf(stderr, __VA_ARGS__);         \
      std::fprintf(stderr, "\n");                \
      ++failures;                                \
    }                                            \
  } while (0)

int g_rank = 0;

// Rank r's input element i for a given test seed, as a double exactly representable in `type`.
uint64_t Mix(uint64_t x) {  // splitmix64: a cheap, well-spread hash of (seed, rank, index)
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

double InputValue(DataType type, uint64_t seed, int r, std::size_t i) {
  uint64_t h = Mix(Mix(seed * 1000003 + static_cast<uint64_t>(r)) + i);
  switch (type) {
    case DataType::kInt32:
    case DataType::kInt64:
      return static_cast<double>(static_cast<int64_t>(h % 2001) - 1000);
    case DataType::kFloat16:
      return HalfToFloat(FloatToHalf(static_cast<float>(static_cast<int>(h % 201) - 100) / 8));
    case DataType::kBFloat16:
      return BFloat16ToFloat(
          FloatToBFloat16(static_cast<float>(static_cast<int>(h % 201) - 100) / 4));
    case DataType::kFloat32:
      return static_cast<float>(static_cast<double>(h >> 11) / 9007199254740992.0 * 20 - 10);
    default:
      return static_cast<double>(h >> 11) / 9007199254740992.0 * 20 - 10;
  }
}

void Store(DataType type, void* buf, std::size_t i, double v) {
  switch (type) {
    case DataType::kFloat32:
      static_cast<float*>(buf)[i] = static_cast<float>(v);
      break;
    case DataType::kFloat64:
      static_cast<double*>(buf)[i] = v;
      break;
    case DataType::kFloat16:
      static_cast<uint16_t*>(buf)[i] = FloatToHalf(static_cast<float>(v));
      break;
    case DataType::kBFloat16:
      static_cast<uint16_t*>(buf)[i] = FloatToBFloat16(static_cast<float>(v));
      break;
    case DataType::kInt32:
      static_cast<int32_t*>(buf)[i] = static_cast<int32_t>(v);
      break;
    case DataType::kInt64:
      static_cast<int64_t*>(buf)[i] = static_cast<int64_t>(v);
      break;
    case DataType::kUInt8:
      static_cast<uint8_t*>(buf)[i] = static_cast<uint8_t>(v);
      break;
    case DataType::kInt8:
      static_cast<int8_t*>(buf)[i] = static_cast<int8_t>(v);
      break;
  }
}

double Load(DataType type, const void* buf, std::size_t i) {
  switch (type) {
    case DataType::kFloat32:
      return static_cast<const float*>(buf)[i];
    case DataType::kFloat64:
      return static_cast<const double*>(buf)[i];
    case DataType::kFloat16:
      return HalfToFloat(static_cast<const uint16_t*>(buf)[i]);
    case DataType::kBFloat16:
      return BFloat16ToFloat(static_cast<const uint16_t*>(buf)[i]);
    case DataType::kInt32:
      return static_cast<const int32_t*>(buf)[i];
    case DataType::kInt64:
      return static_cast<double>(static_cast<const int64_t*>(buf)[i]);
    case DataType::kUInt8:
      return static_cast<const uint8_t*>(buf)[i];
    case DataType::kInt8:
      return static_cast<const int8_t*>(buf)[i];
  }
  return 0;
}

// The exact result, and (in *magnitude) the sum of the inputs' magnitudes, which bounds the
// partial sums whose rounding the result may carry.
double Reference(DataType type, ReduceOp op, uint64_t seed, int world, std::size_t i,
                 double* magnitude) {
  double acc = InputValue(type, seed, 0, i);
  *magnitude = std::fabs(acc);
  for (int r = 1; r < world; ++r) {
    double v = InputValue(type, seed, r, i);
    *magnitude += std::fabs(v);
    if (op == ReduceOp::kMax)
      acc = std::max(acc, v);
    else if (op == ReduceOp::kMin)
      acc = std::min(acc, v);
    else
      acc += v;
  }
  if (op == ReduceOp::kAvg) {
    acc = (type == DataType::kInt32 || type == DataType::kInt64) ? std::trunc(acc / world)
                                                                 : acc / world;
  }
  return acc;
}

// Each of the at most `world` roundings of a partial sum is off by at most half an ulp of that
// partial sum, itself at most `magnitude`: the bound is world * eps / 2 * magnitude (times 2 for
// the final division of an average). Integers are exact.
double Tolerance(DataType type, double magnitude, int world) {
  double eps = 0;
  switch (type) {
    case DataType::kFloat64:
      eps = 0x1p-52;
      break;
    case DataType::kFloat32:
      eps = 0x1p-23;
      break;
    case DataType::kFloat16:
      eps = 0x1p-10;
      break;
    case DataType::kBFloat16:
      eps = 0x1p-7;
      break;
    default:
      return 0;
  }
  return eps * world * (magnitude + 1);
}

std::vector<char> MakeInput(DataType type, uint64_t seed, int rank, std::size_t count) {
  std::vector<char> buf(count * ElementSize(type));
  for (std::size_t i = 0; i < count; ++i)
    Store(type, buf.data(), i, InputValue(type, seed, rank, i));
  return buf;
}

void CheckAllreduce(const std::vector<char>& out, DataType type, ReduceOp op, uint64_t seed,
                    int world, std::size_t count, const char* what) {
  int reported = 0;
  for (std::size_t i = 0; i < count; ++i) {
    double magnitude = 0;
    double ref = Reference(type, op, seed, world, i, &magnitude);
    double got = Load(type, out.data(), i);
    if (std::fabs(got - ref) > Tolerance(type, magnitude, world) && reported++ < 3) {
      CHECK_OR_FAIL(false, "%s %s/%s count %zu: element %zu is %.9g, expected %.9g", what,
                    std::string(DataTypeName(type)).c_str(), std::string(ReduceOpName(op)).c_str(),
                    count, i, got, ref);
    }
  }
}

const std::vector<std::size_t> kCounts = {0, 1, 2, 7, 31, 97, 1021, 65537, 262147};
constexpr DataType kTypes[] = {DataType::kFloat32,  DataType::kFloat64, DataType::kFloat16,
                               DataType::kBFloat16, DataType::kInt32,   DataType::kInt64};
constexpr ReduceOp kOps[] = {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax, ReduceOp::kMin};

void ScenarioAllreduce(Communicator& comm) {
  uint64_t seed = 1;
  for (DataType type : kTypes) {
    for (ReduceOp op : kOps) {
      for (std::size_t count : kCounts) {
        ++seed;
        std::vector<char> in = MakeInput(type, seed, comm.rank(), count);
        // Out of place, then in place.
        std::vector<char> out(in.size(), 0x5a);
        Status st = comm.Allreduce(in.data(), out.data(), count, type, op);
        CHECK_OR_FAIL(st.ok(), "allreduce failed: %s", st.ToString().c_str());
        CheckAllreduce(out, type, op, seed, comm.world_size(), count, "out-of-place");
        CHECK_OR_FAIL(in == MakeInput(type, seed, comm.rank(), count),
                      "allreduce changed its input");
        st = comm.Allreduce(in.data(), in.data(), count, type, op);
        CHECK_OR_FAIL(st.ok(), "in-place allreduce failed: %s", st.ToString().c_str());
        CheckAllreduce(in, type, op, seed, comm.world_size(), count, "in-place");
      }
    }
  }
}

void ScenarioScatterGather(Communicator& comm) {
  const int world = comm.world_size();
  const int rank = comm.rank();
  uint64_t seed = 7000;
  for (DataType type : kTypes) {
    for (std::size_t count :
         {std::size_t{0}, std::size_t{1}, std::size_t{7}, std::size_t{1021}, std::size_t{65537}}) {
      const std::size_t element = ElementSize(type);
      for (ReduceOp op : kOps) {
        ++seed;
        // Reduce-scatter: this rank's piece of the reduction of count * world elements.
        std::vector<char> in = MakeInput(type, seed, rank, count * world);
        std::vector<char> out(count * element, 0x5a);
        Status st = comm.ReduceScatter(in.data(), out.data(), count, type, op);
        CHECK_OR_FAIL(st.ok(), "reduce-scatter failed: %s", st.ToString().c_str());
        int reported = 0;
        for (std::size_t i = 0; i < count; ++i) {
          double magnitude = 0;
          double ref = Reference(type, op, seed, world, rank * count + i, &magnitude);
          double got = Load(type, out.data(), i);
          if (std::fabs(got - ref) > Tolerance(type, magnitude, world) && reported++ < 3) {
            CHECK_OR_FAIL(false,
                          "reduce-scatter %s/%s count %zu: element %zu is %.9g, expected %.9g",
                          std::string(DataTypeName(type)).c_str(),
                          std::string(ReduceOpName(op)).c_str(), count, i, got, ref);
          }
        }
        // In place: the result lands on this rank's piece of the input.
        char* piece = in.data() + rank * count * element;
        st = comm.ReduceScatter(in.data(), piece, count, type, op);
        CHECK_OR_FAIL(st.ok(), "in-place reduce-scatter failed: %s", st.ToString().c_str());
        CHECK_OR_FAIL(std::memcmp(piece, out.data(), count * element) == 0,
                      "in-place reduce-scatter %s count %zu differs from out-of-place",
                      std::string(DataTypeName(type)).c_str(), count);
      }
      // Allgather: exact, byte for byte.
      ++seed;
      std::vector<char> mine = MakeInput(type, seed, rank, count);
      std::vector<char> expected;
      for (int r = 0; r < world; ++r) {
        std::vector<char> theirs = MakeInput(type, seed, r, count);
        expected.insert(expected.end(), theirs.begin(), theirs.end());
      }
      std::vector<char> gathered(count * element * world, 0x5a);
      Status st = comm.Allgather(mine.data(), gathered.data(), count, type);
      CHECK_OR_FAIL(st.ok(), "allgather failed: %s", st.ToString().c_str());
      CHECK_OR_FAIL(gathered == expected, "allgather %s count %zu: wrong data",
                    std::string(DataTypeName(type)).c_str(), count);
      std::vector<char> in_place(count * element * world, 0);
      std::memcpy(in_place.data() + rank * count * element, mine.data(), mine.size());
      st = comm.Allgather(in_place.data() + rank * count * element, in_place.data(), count, type);
      CHECK_OR_FAIL(st.ok() && in_place == expected, "in-place allgather %s count %zu: wrong data",
                    std::string(DataTypeName(type)).c_str(), count);
    }
  }
}

void ScenarioPointToPoint(Communicator& comm) {
  const int world = comm.world_size();
  const int rank = comm.rank();
  if (world == 1) return;
  // A ring, as pipeline stages pass activations: several messages in flight, every type.
  const int next = (rank + 1) % world, prev = (rank + world - 1) % world;
  uint64_t seed = 9000;
  for (DataType type : kTypes) {
    for (std::size_t count :
         {std::size_t{0}, std::size_t{1}, std::size_t{4099}, std::size_t{300007}}) {
      ++seed;
      std::vector<char> out = MakeInput(type, seed, rank, count);
      std::vector<char> in(out.size(), 0x5a);
      auto sent = comm.SendAsync(out.data(), count, type, next);
      Status st = comm.Recv(in.data(), count, type, prev);
      CHECK_OR_FAIL(st.ok(), "recv from %d failed: %s", prev, st.ToString().c_str());
      st = sent->Wait();
      CHECK_OR_FAIL(st.ok(), "send to %d failed: %s", next, st.ToString().c_str());
      CHECK_OR_FAIL(in == MakeInput(type, seed, prev, count), "ring %s count %zu: wrong data",
                    std::string(DataTypeName(type)).c_str(), count);
    }
  }
  // Every pair, both directions at once, three messages each, arriving in order.
  std::vector<std::shared_ptr<Work>> sends;
  std::vector<std::vector<char>> outs;
  for (int peer = 0; peer < world; ++peer) {
    if (peer == rank) continue;
    for (int m = 0; m < 3; ++m) {
      outs.push_back(MakeInput(DataType::kFloat32, 100 * rank + peer * 10 + m, rank, 1000 + m));
      sends.push_back(comm.SendAsync(outs.back().data(), 1000 + m, DataType::kFloat32, peer));
    }
  }
  for (int peer = 0; peer < world; ++peer) {
    if (peer == rank) continue;
    for (int m = 0; m < 3; ++m) {
      std::vector<char> in((1000 + m) * 4);
      Status st = comm.Recv(in.data(), 1000 + m, DataType::kFloat32, peer);
      CHECK_OR_FAIL(st.ok() && in == MakeInput(DataType::kFloat32, 100 * peer + rank * 10 + m, peer,
                                               1000 + m),
                    "message %d from %d: %s", m, peer, st.ToString().c_str());
    }
  }
  for (auto& w : sends) {
    Status st = w->Wait();
    CHECK_OR_FAIL(st.ok(), "all-pairs send failed: %s", st.ToString().c_str());
  }
  // From any source: every rank sends one message of tag 12 to every other; each takes them in
  // whatever order they come and learns who sent each (every peer once). Half of the receives
  // are posted before the barrier (waiting), half after (the messages buffered by then).
  {
    std::vector<std::vector<char>> outs_any;
    std::vector<std::shared_ptr<Work>> sends_any;
    const int early = (world - 1) / 2;
    std::vector<std::vector<char>> ins(static_cast<std::size_t>(world - 1));
    std::vector<int> sources(static_cast<std::size_t>(world - 1), -1);
    std::vector<std::shared_ptr<Work>> recvs;
    for (int i = 0; i < early; ++i) {
      ins[i].resize(777 * 4);
      recvs.push_back(comm.RecvAnyAsync(ins[i].data(), 777, DataType::kFloat32, 12, &sources[i]));
    }
    for (int peer = 0; peer < world; ++peer) {
      if (peer == rank) continue;
      outs_any.push_back(MakeInput(DataType::kFloat32, 500 + rank, rank, 777));
      sends_any.push_back(
          comm.SendAsync(outs_any.back().data(), 777, DataType::kFloat32, peer, 12));
    }
    for (auto& w : sends_any) {
      Status st = w->Wait();
      CHECK_OR_FAIL(st.ok(), "send of tag 12: %s", st.ToString().c_str());
    }
    Status st = comm.Barrier();
    CHECK_OR_FAIL(st.ok(), "barrier: %s", st.ToString().c_str());
    for (int i = early; i < world - 1; ++i) {
      ins[i].resize(777 * 4);
      recvs.push_back(comm.RecvAnyAsync(ins[i].data(), 777, DataType::kFloat32, 12, &sources[i]));
    }
    std::vector<int> seen;
    for (std::size_t i = 0; i < recvs.size(); ++i) {
      st = recvs[i]->Wait();
      CHECK_OR_FAIL(st.ok() && sources[i] >= 0 && sources[i] < world && sources[i] != rank,
                    "recv from any source: %s (source %d)", st.ToString().c_str(), sources[i]);
      if (!st.ok() || sources[i] < 0 || sources[i] >= world) continue;
      CHECK_OR_FAIL(ins[i] == MakeInput(DataType::kFloat32, 500 + sources[i], sources[i], 777),
                    "recv from any source: wrong data for rank %d", sources[i]);
      seen.push_back(sources[i]);
    }
    std::sort(seen.begin(), seen.end());
    CHECK_OR_FAIL(std::adjacent_find(seen.begin(), seen.end()) == seen.end() &&
                      static_cast<int>(seen.size()) == world - 1,
                  "recv from any source: %zu distinct senders of %d", seen.size(), world - 1);
  }
  // Every pair has talked: ranks of one node through shared memory, others over TCP. The
  // launcher names the path it expects on one node (HFREDUCE_TEST_P2P_PATH).
  const char* expected = std::getenv("HFREDUCE_TEST_P2P_PATH");
  for (int peer = 0; peer < world; ++peer) {
    if (peer == rank) continue;
    const bool same_node = peer / comm.local_size() == rank / comm.local_size();
    const std::string path = comm.PointToPointPath(peer);
    const std::string want = same_node ? (expected ? expected : "shm-direct") : "tcp";
    CHECK_OR_FAIL(path == want, "messages with rank %d went by '%s', expected '%s'", peer,
                  path.c_str(), want.c_str());
  }
  // Bad peers are refused at once.
  Status bad = comm.Send(nullptr, 0, DataType::kFloat32, rank);
  CHECK_OR_FAIL(bad.code() == StatusCode::kInvalidArgument, "send to self: %s",
                bad.ToString().c_str());
  bad = comm.Recv(nullptr, 0, DataType::kFloat32, world);
  CHECK_OR_FAIL(bad.code() == StatusCode::kInvalidArgument, "recv from %d: %s", world,
                bad.ToString().c_str());
}

void ScenarioBroadcastBarrier(Communicator& comm) {
  for (int root = 0; root < comm.world_size(); ++root) {
    for (std::size_t count : {std::size_t{0}, std::size_t{5}, std::size_t{300001}}) {
      std::vector<char> expected = MakeInput(DataType::kFloat32, 99 + root, root, count);
      std::vector<char> buf =
          comm.rank() == root ? expected : std::vector<char>(expected.size(), 0);
      Status st = comm.Broadcast(buf.data(), count, DataType::kFloat32, root);
      CHECK_OR_FAIL(st.ok(), "broadcast failed: %s", st.ToString().c_str());
      CHECK_OR_FAIL(buf == expected, "broadcast from %d of %zu floats: wrong data", root, count);
    }
    Status st = comm.Barrier();
    CHECK_OR_FAIL(st.ok(), "barrier failed: %s", st.ToString().c_str());
  }
}

void ScenarioAsync(Communicator& comm) {
  // Many operations in flight at once, completing in order.
  constexpr int kOpsInFlight = 40;
  std::vector<std::vector<char>> bufs;
  std::vector<std::shared_ptr<Work>> works;
  for (int k = 0; k < kOpsInFlight; ++k) {
    std::size_t count = 1000 + 977 * static_cast<std::size_t>(k);
    bufs.push_back(MakeInput(DataType::kFloat32, 500 + k, comm.rank(), count));
  }
  for (int k = 0; k < kOpsInFlight; ++k) {
    works.push_back(comm.AllreduceAsync(bufs[k].data(), bufs[k].data(), bufs[k].size() / 4,
                                        DataType::kFloat32, ReduceOp::kSum));
  }
  for (int k = 0; k < kOpsInFlight; ++k) {
    Status st = works[k]->Wait();
    CHECK_OR_FAIL(st.ok(), "async op %d failed: %s", k, st.ToString().c_str());
    CHECK_OR_FAIL(works[k]->Test(), "Test() false after Wait()");
    CheckAllreduce(bufs[k], DataType::kFloat32, ReduceOp::kSum, 500 + k, comm.world_size(),
                   bufs[k].size() / 4, "async");
  }
}

void ScenarioLarge(Communicator& comm) {
  const std::size_t count = (64u << 20) / 4;  // 64 MiB of fp32
  std::vector<float> buf(count);
  for (std::size_t i = 0; i < count; ++i)
    buf[i] = static_cast<float>((i * 31 + comm.rank()) % 1024);
  for (int round = 0; round < 2; ++round) {
    std::vector<float> data = buf;
    Status st = comm.Allreduce(data.data(), data.data(), count, DataType::kFloat32, ReduceOp::kSum);
    CHECK_OR_FAIL(st.ok(), "64 MiB allreduce failed: %s", st.ToString().c_str());
    int reported = 0;
    for (std::size_t i = 0; i < count; ++i) {
      double ref = 0;
      for (int r = 0; r < comm.world_size(); ++r)
        ref += static_cast<double>((i * 31 + r) % 1024);
      if (data[i] != ref && reported++ < 3) {
        CHECK_OR_FAIL(false, "64 MiB: element %zu is %g, expected %g", i, data[i], ref);
      }
    }
  }
}

// Rank 1 asks for a different count: every rank must get an error naming the disagreement.
int ScenarioMismatch(Communicator& comm) {
  std::vector<float> buf(1000, 1.0f);
  std::size_t count = comm.rank() == 1 ? 999 : 1000;
  Status st = comm.Allreduce(buf.data(), buf.data(), count, DataType::kFloat32, ReduceOp::kSum);
  if (st.ok()) {
    std::fprintf(stderr, "rank %d: mismatched allreduce succeeded\n", comm.rank());
    return 1;
  }
  std::fprintf(stderr, "rank %d: error: %s\n", comm.rank(), st.ToString().c_str());
  // The communicator is now broken: later calls fail at once with the same status.
  Status again = comm.Barrier();
  if (again.ok() || comm.health().ok()) {
    std::fprintf(stderr, "rank %d: communicator still usable after the failure\n", comm.rank());
    return 1;
  }
  return 0;
}

// A receive from any source that nobody sends to fails at the timeout, naming its tag, and only
// it: a receive of a named source posted beside it, whose message comes, succeeds, and the
// communicator still works afterwards.
int ScenarioAnySourceTimeout(Communicator& comm) {
  const int rank = comm.rank();
  if (rank == 0) {
    float nothing = 0, got = 0;
    int source = -1;
    auto start = std::chrono::steady_clock::now();
    auto waiting = comm.RecvAnyAsync(&nothing, 1, DataType::kFloat32, 5, &source);
    Status st = comm.Recv(&got, 1, DataType::kFloat32, 1, 6);
    CHECK_OR_FAIL(st.ok() && got == 1.0f, "the named receive beside it: %s", st.ToString().c_str());
    st = waiting->Wait();
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    CHECK_OR_FAIL(st.code() == StatusCode::kDeadlineExceeded &&
                      st.message().find("of tag 5 from any rank") != std::string::npos &&
                      source == -1,
                  "a receive from any source nobody sends to: %s", st.ToString().c_str());
    CHECK_OR_FAIL(seconds > 1.0 && seconds < 10.0, "it failed after %.1f s (timeout 2 s)", seconds);
  } else if (rank == 1) {
    float one = 1.0f;
    Status st = comm.Send(&one, 1, DataType::kFloat32, 0, 6);
    CHECK_OR_FAIL(st.ok(), "send: %s", st.ToString().c_str());
  }
  // (The others give rank 0 its 2 s timeout first: the collective's own is 2 s too.)
  if (rank != 0) usleep(2500000);
  // The communicator is healthy: a collective after it succeeds on every rank.
  std::vector<float> buf(10, 1.0f);
  Status st =
      comm.Allreduce(buf.data(), buf.data(), buf.size(), DataType::kFloat32, ReduceOp::kSum);
  CHECK_OR_FAIL(st.ok() && buf[9] == comm.world_size(), "allreduce after it: %s",
                st.ToString().c_str());
  return failures;
}

// The last rank dies in the middle of a run of collectives; the others must fail cleanly.
// `count`: 4 MiB of floats (the pipeline), or 1000 (on one node, the latency path).
int ScenarioKill(Communicator& comm, std::size_t count) {
  std::vector<float> buf(count, 1.0f);
  for (int i = 0; i < 3; ++i) {
    (void)comm.Allreduce(buf.data(), buf.data(), buf.size(), DataType::kFloat32, ReduceOp::kSum);
  }
  if (comm.rank() == comm.world_size() - 1) _exit(42);  // killed mid-run, without cleanup
  auto start = std::chrono::steady_clock::now();
  Status st;
  for (int i = 0; i < 3 && st.ok(); ++i) {
    st = comm.Allreduce(buf.data(), buf.data(), buf.size(), DataType::kFloat32, ReduceOp::kSum);
  }
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (st.ok()) {
    std::fprintf(stderr, "rank %d: collectives succeeded after a rank died\n", comm.rank());
    return 1;
  }
  std::fprintf(stderr, "rank %d: error after %.1f s: %s\n", comm.rank(), seconds,
               st.ToString().c_str());
  return 0;
}

// The last rank, of rank 0's node, dies after one exchange with rank 0, without cleanup. Rank 0
// then sends it what the ring cannot hold (a direct send, where the kernel allows, else one that
// fills the ring) and waits for a message from it: both fail within seconds, naming the dead
// process, not at the timeout.
int ScenarioKillPointToPoint(Communicator& comm) {
  const int last = comm.world_size() - 1;
  std::vector<float> small(1000, 1.0f), big(std::size_t{3} << 20, 2.0f);  // 12 MiB
  if (comm.rank() == last) {
    Status st = comm.Recv(small.data(), small.size(), DataType::kFloat32, 0);
    if (st.ok()) st = comm.Send(small.data(), small.size(), DataType::kFloat32, 0);
    CHECK_OR_FAIL(st.ok(), "exchange with rank 0: %s", st.ToString().c_str());
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    _exit(42);
  }
  if (comm.rank() != 0) return 0;
  Status st = comm.Send(small.data(), small.size(), DataType::kFloat32, last);
  if (st.ok()) st = comm.Recv(small.data(), small.size(), DataType::kFloat32, last);
  CHECK_OR_FAIL(st.ok(), "exchange with rank %d: %s", last, st.ToString().c_str());
  auto start = std::chrono::steady_clock::now();
  // (Over TCP the kernel's socket buffers may take it all before the peer's death is known.)
  st = comm.Send(big.data(), big.size(), DataType::kFloat32, last);
  std::fprintf(stderr, "rank 0: send ended after %.1f s: %s\n",
               std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(),
               st.ToString().c_str());
  start = std::chrono::steady_clock::now();
  st = comm.Recv(small.data(), small.size(), DataType::kFloat32, last);
  CHECK_OR_FAIL(!st.ok(), "a receive from a dead rank succeeded");
  std::fprintf(stderr, "rank 0: recv error after %.1f s: %s\n",
               std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(),
               st.ToString().c_str());
  return failures == 0 ? 0 : 1;
}

double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// The last rank stops taking part (hangs); rank 0 aborts the communicator from another thread, as
// a training loop's watchdog does when the platform says a member is gone. Every rank's pending
// collective must fail at once with that cause, on both nodes, well before the timeout.
int ScenarioAbort(Communicator& comm) {
  std::vector<float> buf(1 << 18, 1.0f);
  Status st =
      comm.Allreduce(buf.data(), buf.data(), buf.size(), DataType::kFloat32, ReduceOp::kSum);
  CHECK_OR_FAIL(st.ok(), "first allreduce: %s", st.ToString().c_str());
  const auto start = std::chrono::steady_clock::now();
  if (comm.rank() == comm.world_size() - 1) {
    // Hung: never issues the collective; its node breaks under it all the same.
    while (comm.health().ok() && SecondsSince(start) < 30)
      usleep(10000);
    std::fprintf(stderr, "rank %d: broken after %.1f s: %s\n", comm.rank(), SecondsSince(start),
                 comm.health().ToString().c_str());
    return comm.health().ok() ? 1 : failures;
  }
  auto work =
      comm.AllreduceAsync(buf.data(), buf.data(), buf.size(), DataType::kFloat32, ReduceOp::kSum);
  // On the rank that aborts, a receive from any source no one sends to: the abort fails it too.
  float nothing = 0;
  int nobody = -1;
  std::shared_ptr<Work> waiting;
  if (comm.rank() == 0) waiting = comm.RecvAnyAsync(&nothing, 1, DataType::kFloat32, 99, &nobody);
  std::thread watchdog;
  if (comm.rank() == 0) {
    watchdog = std::thread([&] {
      usleep(300000);
      comm.Abort("rank 3 was declared lost");
    });
  }
  st = work->Wait();
  const double seconds = SecondsSince(start);
  if (watchdog.joinable()) watchdog.join();
  CHECK_OR_FAIL(!st.ok(), "the collective succeeded without the last rank");
  if (comm.rank() == 0) {
    Status any = waiting->Wait();
    CHECK_OR_FAIL(any.code() == StatusCode::kAborted && nobody == -1,
                  "a receive from any source after the abort: %s", any.ToString().c_str());
  }
  std::fprintf(stderr, "rank %d: error after %.1f s: %s\n", comm.rank(), seconds,
               st.ToString().c_str());
  // Later calls fail at once with the same cause, point-to-point included.
  Status again =
      comm.Send(buf.data(), 1, DataType::kFloat32, (comm.rank() + 1) % comm.world_size());
  CHECK_OR_FAIL(!again.ok() && again.message() == comm.health().message(),
                "a send after the abort: %s", again.ToString().c_str());
  // Rank 0 serves the store where the cause is published: it lives on, as a survivor would.
  if (comm.rank() == 0) sleep(3);
  return failures;
}

// Rank 1 dies; the survivors see it, shrink to three ranks (nodes of one and two ranks) and
// reduce correctly; then the survivors and a newly started process (the test starts it as rank 1
// with the "join" scenario) make a four-rank communicator again, and the newcomer receives rank
// 0's state by broadcast. Returns the exit code.
int CheckGrown(Communicator& comm);

int ScenarioShrinkGrow(Communicator& comm, const CommunicatorOptions& options) {
  std::vector<float> buf(1 << 18, 1.0f);
  Status st =
      comm.Allreduce(buf.data(), buf.data(), buf.size(), DataType::kFloat32, ReduceOp::kSum);
  CHECK_OR_FAIL(st.ok(), "first allreduce: %s", st.ToString().c_str());
  if (comm.rank() == 1) _exit(42);
  std::fill(buf.begin(), buf.end(), 1.0f);
  st = comm.Allreduce(buf.data(), buf.data(), buf.size(), DataType::kFloat32, ReduceOp::kSum);
  CHECK_OR_FAIL(!st.ok(), "an allreduce without rank 1 succeeded");
  auto shrunk = comm.Shrink({1});
  if (!shrunk.ok()) {
    std::fprintf(stderr, "rank %d: shrink: %s\n", comm.rank(), shrunk.status().ToString().c_str());
    return 1;
  }
  Communicator& small = **shrunk;
  const int want_rank = comm.rank() == 0 ? 0 : comm.rank() - 1;
  CHECK_OR_FAIL(small.rank() == want_rank && small.world_size() == 3 && small.num_nodes() == 2,
                "shrunk: rank %d of %d on %d nodes", small.rank(), small.world_size(),
                small.num_nodes());
  CHECK_OR_FAIL(small.local_size() == (comm.rank() == 0 ? 1 : 2), "shrunk: local size %d",
                small.local_size());
  for (int i = 0; i < 3; ++i) {  // each survivor adds its old rank + 1: 1 + 3 + 4
    std::fill(buf.begin(), buf.end(), static_cast<float>(comm.rank() + 1));
    st = small.Allreduce(buf.data(), buf.data(), buf.size(), DataType::kFloat32, ReduceOp::kSum);
    CHECK_OR_FAIL(st.ok() && buf.front() == 8 && buf.back() == 8, "shrunk allreduce: %s, %g",
                  st.ToString().c_str(), buf.back());
  }
  // Grow: the new communicator has its own prefix; rank 0's store server lives on in `small`.
  CommunicatorOptions grown = options;
  grown.store_prefix = "grown";
  grown.rank0_hosts_store = false;
  auto big = Communicator::Create(grown);
  if (!big.ok()) {
    std::fprintf(stderr, "rank %d: grow: %s\n", comm.rank(), big.status().ToString().c_str());
    return 1;
  }
  int code = CheckGrown(**big);
  return code != 0 ? code : failures;
}

// Bad shrinks are refused with a clear error and leave the communicator working.
int ScenarioShrinkBad(Communicator& comm) {
  struct Case {
    std::vector<int> excluded;
    StatusCode code;
    const char* says;
  };
  const int other = 1 - comm.rank();
  std::vector<Case> cases = {
      {{}, StatusCode::kInvalidArgument, "no rank to exclude"},
      {{5}, StatusCode::kInvalidArgument, "outside 0..1"},
      {{other, other}, StatusCode::kInvalidArgument, "twice"},
      {{comm.rank()}, StatusCode::kInvalidArgument, "only the surviving ranks"},
  };
  if (comm.rank() == 1) {
    cases.push_back({{0}, StatusCode::kFailedPrecondition, "rank 0 serves the rendezvous store"});
  }
  for (const Case& c : cases) {
    auto r = comm.Shrink(c.excluded);
    CHECK_OR_FAIL(!r.ok() && r.status().code() == c.code &&
                      r.status().message().find(c.says) != std::string::npos,
                  "shrink of %zu ranks: %s", c.excluded.size(),
                  r.ok() ? "succeeded" : r.status().ToString().c_str());
  }
  std::vector<float> buf(1000, 1.0f);
  Status st =
      comm.Allreduce(buf.data(), buf.data(), buf.size(), DataType::kFloat32, ReduceOp::kSum);
  CHECK_OR_FAIL(st.ok() && buf[999] == 2, "allreduce after refused shrinks: %s",
                st.ToString().c_str());
  return failures;
}

int CheckGrown(Communicator& comm) {
  CHECK_OR_FAIL(comm.world_size() == 4 && comm.num_nodes() == 2 && comm.local_size() == 2,
                "grown: %d ranks on %d nodes", comm.world_size(), comm.num_nodes());
  std::vector<float> buf(1 << 18, static_cast<float>(comm.rank() + 1));
  Status st =
      comm.Allreduce(buf.data(), buf.data(), buf.size(), DataType::kFloat32, ReduceOp::kSum);
  CHECK_OR_FAIL(st.ok() && buf.front() == 10 && buf.back() == 10, "grown allreduce: %s, %g",
                st.ToString().c_str(), buf.back());
  std::vector<double> state(4096);
  for (std::size_t i = 0; i < state.size(); ++i)
    state[i] = comm.rank() == 0 ? InputValue(DataType::kFloat64, 7, 0, i) : -1;
  st = comm.Broadcast(state.data(), state.size(), DataType::kFloat64, 0);
  bool same = st.ok();
  for (std::size_t i = 0; i < state.size() && same; ++i)
    same = state[i] == InputValue(DataType::kFloat64, 7, 0, i);
  CHECK_OR_FAIL(same, "rank 0's state did not arrive whole: %s", st.ToString().c_str());
  st = comm.Barrier();
  CHECK_OR_FAIL(st.ok(), "grown barrier: %s", st.ToString().c_str());
  return failures;
}

}  // namespace
}  // namespace ff::hfreduce

int main(int argc, char** argv) {
  using namespace ff::hfreduce;
  std::string scenario = argc > 1 ? argv[1] : "allreduce";
  auto options = CommunicatorOptions::FromEnvironment();
  if (!options.ok()) {
    std::fprintf(stderr, "%s\n", options.status().ToString().c_str());
    return 2;
  }
  g_rank = options->rank;
  // Every rank serves its hfreduce_* metrics, as a training process would.
  ff::Metrics metrics("hfreduce-test-rank");
  if (scenario == "metrics") {
    options->metrics = &metrics;
    if (ff::Status st = metrics.Serve(ff::MetricsOptions{}); !st.ok()) {
      std::fprintf(stderr, "metrics: %s\n", st.ToString().c_str());
      return 2;
    }
  }
  if (scenario == "join") {  // a newly started rank joining the survivors of "shrink-grow"
    options->store_prefix = "grown";
    options->rank0_hosts_store = false;
    auto comm = Communicator::Create(*options);
    if (!comm.ok()) {
      std::fprintf(stderr, "rank %d: join: %s\n", g_rank, comm.status().ToString().c_str());
      return 2;
    }
    return CheckGrown(**comm);
  }
  auto comm = Communicator::Create(*options);
  if (!comm.ok()) {
    std::fprintf(stderr, "rank %d: create failed: %s\n", g_rank, comm.status().ToString().c_str());
    return 2;
  }
  // The trees' layout the test expects (Communicator::TreeLayout), where it says.
  if (const char* layout = std::getenv("HFREDUCE_TEST_TREE_LAYOUT");
      layout && (*comm)->TreeLayout() != layout) {
    std::fprintf(stderr, "rank %d: trees laid out as '%s', expected '%s'\n", g_rank,
                 (*comm)->TreeLayout().c_str(), layout);
    return 1;
  }
  if (scenario == "allreduce") {
    ScenarioAllreduce(**comm);
  } else if (scenario == "broadcast") {
    ScenarioBroadcastBarrier(**comm);
  } else if (scenario == "scatter-gather") {
    ScenarioScatterGather(**comm);
  } else if (scenario == "p2p") {
    ScenarioPointToPoint(**comm);
  } else if (scenario == "transport") {
    // Without an RDMA device, "auto" carries node-to-node data over TCP.
    const std::string want = (*comm)->num_nodes() > 1 ? "tcp" : "shm";
    CHECK_OR_FAIL((*comm)->transport() == want, "transport is %s, expected %s",
                  (*comm)->transport().c_str(), want.c_str());
    std::vector<float> buf(1000, 1.0f);
    ff::Status st =
        (*comm)->Allreduce(buf.data(), buf.data(), buf.size(), DataType::kFloat32, ReduceOp::kSum);
    CHECK_OR_FAIL(st.ok() && buf[999] == (*comm)->world_size(), "allreduce over %s failed",
                  want.c_str());
  } else if (scenario == "metrics") {
    std::vector<float> buf(1000, 1.0f);
    for (int i = 0; i < 3; ++i) {
      (void)(*comm)->Allreduce(buf.data(), buf.data(), buf.size(), DataType::kFloat32,
                               ReduceOp::kSum);
    }
    (void)(*comm)->Broadcast(buf.data(), buf.size(), DataType::kFloat32, 0);
    auto scrape = ff::test::HttpGet(metrics.address(), "/metrics");
    CHECK_OR_FAIL(scrape.ok(), "scrape: %s", scrape.status().ToString().c_str());
    if (scrape.ok()) {
      for (const char* line : {"hfreduce_operations_total{collective=\"allreduce\"} 3",
                               "hfreduce_bytes_total{collective=\"allreduce\"} 12000",
                               "hfreduce_operations_total{collective=\"broadcast\"} 1",
                               "hfreduce_seconds_count{collective=\"allreduce\"} 3"}) {
        CHECK_OR_FAIL(scrape->body.find(line) != std::string::npos, "/metrics lacks '%s'", line);
      }
    }
  } else if (scenario == "async") {
    ScenarioAsync(**comm);
  } else if (scenario == "large") {
    ScenarioLarge(**comm);
  } else if (scenario == "mismatch") {
    return ScenarioMismatch(**comm);
  } else if (scenario == "kill") {
    return ScenarioKill(**comm, std::size_t{1} << 20);
  } else if (scenario == "any-source-timeout") {
    if (int code = ScenarioAnySourceTimeout(**comm); code != 0) return 1;
  } else if (scenario == "kill-p2p") {
    return ScenarioKillPointToPoint(**comm);
  } else if (scenario == "kill-small") {
    return ScenarioKill(**comm, 1000);
  } else if (scenario == "abort") {
    return ScenarioAbort(**comm);
  } else if (scenario == "shrink-bad") {
    if (int code = ScenarioShrinkBad(**comm); code != 0) return code;
  } else if (scenario == "shrink-grow") {
    return ScenarioShrinkGrow(**comm, *options);
  } else {
    std::fprintf(stderr, "unknown scenario '%s'\n", scenario.c_str());
    return 2;
  }
  ff::Status st = (*comm)->Barrier();
  CHECK_OR_FAIL(st.ok(), "final barrier failed: %s", st.ToString().c_str());
  return failures == 0 ? 0 : 1;
}
