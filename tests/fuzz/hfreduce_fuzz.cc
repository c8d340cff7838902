// Fuzz target: what an HFReduce node reads from the network. A real communicator (rank 1 of 2,
// node 1, the TCP transport, its shared memory, engine and worker threads) rendezvouses with a
// peer that this harness plays as rank 0 (node 0) over real loopback sockets: the peer's tree
// handshakes (the Hello it sends and its answer to node 1's), the frames and payloads it sends on
// each tree connection, and what it sends to rank 1's point-to-point listener (Hello, message
// headers, payloads) all come from the input. Rank 1 then runs one operation from the input:
// allreduce, broadcast, barrier, allgather, or a point-to-point receive from rank 0.
//
// Input: [flags u8] [hello 16 B, if flags & 1] [reply 4 B, if flags & 2] [tree-0 length u16 LE]
// [tree-0 bytes] [p2p length u16 LE] [p2p bytes] [tree-1 bytes: the rest]. Flags bits 2-4 pick
// the operation. Without a raw hello or reply the peer sends the correct one.
//
// Oracle: nothing crashes or hangs (rank 1's timeout is 1 s, so every input ends); an operation
// or rendezvous that fails says why; with a well-formed peer (the seeds) the operation succeeds.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <condition_variable>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include "common/double_binary_tree.h"
#include "engine/op.h"
#include "hfreduce/communicator.h"
#include "hfreduce/store.h"

namespace {

using namespace ff;
using namespace ff::hfreduce;
using namespace std::chrono_literals;

constexpr std::size_t kCount = 256;  // elements: one 1 KiB chunk of float32
constexpr std::size_t kChunkBytes = 64 * 1024;
constexpr const char* kPrefix = "fz/0";  // the store prefix of the first communicator of "fz"

// The rendezvous store, in memory: the peer and node 0 share it (the wire under test is the
// nodes' TCP connections, not the store).
class MemStore final : public Store {
 public:
  Status Set(const std::string& key, const std::string& value) override {
    std::lock_guard lock(mu_);
    kv_[key] = value;
    cv_.notify_all();
    return Status::Ok();
  }
  Result<std::vector<std::string>> Get(const std::vector<std::string>& keys,
                                       std::chrono::milliseconds timeout) override {
    std::unique_lock lock(mu_);
    bool all = cv_.wait_for(lock, timeout, [&] {
      for (const auto& k : keys) {
        if (!kv_.contains(k)) return false;
      }
      return true;
    });
    if (!all) return DeadlineExceeded("fuzz store: keys missing");
    std::vector<std::string> values;
    for (const auto& k : keys)
      values.push_back(kv_[k]);
    return values;
  }
  using Store::Get;
  Result<int64_t> Add(const std::string& key, int64_t delta) override {
    std::lock_guard lock(mu_);
    int64_t v = (kv_.contains(key) ? std::stoll(kv_[key]) : 0) + delta;
    kv_[key] = std::to_string(v);
    cv_.notify_all();
    return v;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, std::string> kv_;
};

struct Input {
  int op = 0;
  std::string hello;  // empty: the correct one
  std::string reply;  // empty: the correct one
  std::string tree[2];
  std::string p2p;
};

Input Parse(const uint8_t* data, size_t size) {
  Input in;
  size_t i = 0;
  auto take = [&](size_t n) {
    n = std::min(n, size - i);
    std::string s(reinterpret_cast<const char*>(data + i), n);
    i += n;
    return s;
  };
  auto u16 = [&] {
    std::string b = take(2);
    return b.size() < 2 ? size_t{0} : (uint8_t(b[0]) | size_t{uint8_t(b[1])} << 8);
  };
  const uint8_t flags = size > 0 ? data[i++] : 0;
  in.op = ((flags >> 2) & 7) % 5;
  if (flags & 1) in.hello = take(16);
  if (flags & 2) in.reply = take(4);
  in.tree[0] = take(u16());
  in.p2p = take(u16());
  in.tree[1] = take(size - i);
  return in;
}

struct Hello {  // as communicator.cc's
  uint32_t magic;
  int32_t tree;
  int32_t child;
  int32_t wants_verbs;
};
constexpr uint32_t kHelloMagic = 0x48464c4f;

int Listen(std::string* address) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  if (fd < 0 || bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || listen(fd, 8) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    std::perror("fuzz peer: listen");
    std::abort();
  }
  *address = "127.0.0.1:" + std::to_string(ntohs(a.sin_port));
  return fd;
}

int Connect(const std::string& address) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(static_cast<uint16_t>(std::stoi(address.substr(address.rfind(':') + 1))));
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

void Timeouts(int fd) {
  timeval tv{3, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
}

bool SendAll(int fd, const std::string& bytes) {
  for (size_t off = 0; off < bytes.size();) {
    ssize_t n = send(fd, bytes.data() + off, bytes.size() - off, MSG_NOSIGNAL);
    if (n <= 0) return false;
    off += static_cast<size_t>(n);
  }
  return true;
}

bool RecvAll(int fd, size_t n) {
  char buf[64];
  while (n > 0) {
    ssize_t got = recv(fd, buf, std::min(n, sizeof buf), 0);
    if (got <= 0) return false;
    n -= static_cast<size_t>(got);
  }
  return true;
}

// Sockets the peer holds, so that the harness can wake it once rank 1 is done.
struct PeerSockets {
  std::mutex mu;
  std::vector<int> fds;
  bool done = false;
  void Add(int fd) {
    std::lock_guard lock(mu);
    fds.push_back(fd);
    if (done) shutdown(fd, SHUT_RDWR);
  }
  void WakeAll() {
    std::lock_guard lock(mu);
    done = true;
    for (int fd : fds)
      shutdown(fd, SHUT_RDWR);
  }
};

// Rank 0 (node 0), played from the input. Returns when rank 1 has closed every connection, or
// the harness woke it.
void Peer(MemStore& store, const Input& in, PeerSockets& sockets) {
  std::string leader_address, p2p_address;
  int leader = Listen(&leader_address);
  int p2p = Listen(&p2p_address);
  sockets.Add(leader);
  sockets.Add(p2p);
  Timeouts(leader);
  // A cause for node 0 to find when it sees the connections end (as a failing real node
  // publishes one), so it does not wait for one.
  (void)store.Set(std::string(kPrefix) + "/failure",
                  "UNKNOWN\nthe fuzzing peer has sent its bytes");
  (void)store.Set(std::string(kPrefix) + "/rank/0", "n0");
  (void)store.Set(std::string(kPrefix) + "/p2p/0", p2p_address);
  (void)store.Set(std::string(kPrefix) + "/leader/0", leader_address);
  int conn[2] = {-1, -1};
  bool child[2] = {false, false};  // of node 1, in tree t
  auto node1 = store.Get(std::string(kPrefix) + "/leader/1", 3000ms);
  for (int t = 0; t < 2 && node1.ok(); ++t) {
    if (DoubleBinaryTreePosition(t, 0, 2).parent != 1) continue;
    child[t] = true;
    conn[t] = Connect(*node1);
    if (conn[t] < 0) continue;
    sockets.Add(conn[t]);
    Timeouts(conn[t]);
    Hello h{kHelloMagic, t, 0, 0};
    SendAll(conn[t],
            in.hello.empty() ? std::string(reinterpret_cast<char*>(&h), sizeof h) : in.hello);
  }
  for (int t = 0; t < 2 && node1.ok(); ++t) {
    if (DoubleBinaryTreePosition(t, 0, 2).num_children == 0) continue;
    conn[t] = accept4(leader, nullptr, nullptr, SOCK_CLOEXEC);
    if (conn[t] < 0) continue;
    sockets.Add(conn[t]);
    Timeouts(conn[t]);
    const int32_t mine = 0;
    if (RecvAll(conn[t], sizeof(Hello)))
      SendAll(conn[t],
              in.reply.empty() ? std::string(reinterpret_cast<const char*>(&mine), 4) : in.reply);
  }
  for (int t = 0; t < 2; ++t) {
    if (child[t] && conn[t] >= 0) RecvAll(conn[t], 4);  // node 1's answer to our Hello
  }
  int p2p_conn = -1;
  if (auto p2p1 = store.Get(std::string(kPrefix) + "/p2p/1", 100ms); p2p1.ok() && !in.p2p.empty()) {
    p2p_conn = Connect(*p2p1);
    if (p2p_conn >= 0) {
      sockets.Add(p2p_conn);
      Timeouts(p2p_conn);
      SendAll(p2p_conn, in.p2p);
      shutdown(p2p_conn, SHUT_WR);
    }
  }
  for (int t = 0; t < 2; ++t) {
    if (conn[t] < 0) continue;
    SendAll(conn[t], in.tree[t]);
    shutdown(conn[t], SHUT_WR);
  }
  for (int t = 0; t < 2; ++t) {
    if (conn[t] < 0) continue;
    char buf[4096];
    while (recv(conn[t], buf, sizeof buf, 0) > 0) {
    }
    close(conn[t]);
  }
  if (p2p_conn >= 0) close(p2p_conn);
  close(leader);
  close(p2p);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static bool quiet = (spdlog::set_level(spdlog::level::critical), true);
  (void)quiet;
  const Input in = Parse(data, size);
  auto store = std::make_shared<MemStore>();
  PeerSockets sockets;
  std::thread peer([&] { Peer(*store, in, sockets); });
  CommunicatorOptions o;
  o.rank = 1;
  o.world_size = 2;
  o.store = store;
  o.store_prefix = "fz";
  o.node_id = "n1";
  o.transport = "tcp";
  o.timeout = 1000ms;
  o.chunk_bytes = kChunkBytes;
  o.pipeline_depth = 2;
  Status result;
  {
    auto comm = Communicator::Create(o);
    if (!comm.ok()) {
      result = comm.status();
    } else {
      std::vector<float> send(kCount * 2, 1.0f), recv(kCount * 2, 0.0f);
      switch (in.op) {
        case 0:
          result = (*comm)->Allreduce(send.data(), recv.data(), kCount, DataType::kFloat32,
                                      ReduceOp::kSum);
          break;
        case 1:
          result = (*comm)->Broadcast(recv.data(), kCount, DataType::kFloat32, 0);
          break;
        case 2:
          result = (*comm)->BarrierAsync()->Wait();
          break;
        case 3:
          result =
              (*comm)->AllgatherAsync(send.data(), recv.data(), kCount, DataType::kFloat32)->Wait();
          break;
        default:
          result = (*comm)->RecvAsync(recv.data(), kCount, DataType::kFloat32, 0, 7)->Wait();
      }
    }
  }
  sockets.WakeAll();
  peer.join();
  if (!result.ok() && result.message().empty()) {
    std::fprintf(stderr, "fuzz oracle: a failure without a message (%s)\n",
                 std::string(StatusCodeName(result.code())).c_str());
    std::abort();
  }
  if (getenv("FF_FUZZ_EXPECT_OK") != nullptr && !result.ok()) {
    std::fprintf(stderr, "fuzz oracle: a well-formed peer, and rank 1 failed: %s\n",
                 result.ToString().c_str());
    std::abort();
  }
  return 0;
}

// Seeds: a well-formed rank 0 for each operation (frames built by the engine's own MakeFrame).
extern "C" void FuzzWriteSeeds(const char* dir) {
  std::filesystem::create_directories(dir);
  // What node 0 sends on each tree for an operation: for every chunk of the plan, one frame
  // (with its payload) in the chunk's tree, except where the chunk flows out from node 1.
  auto frames = [](CollectiveKind kind, int root, uint64_t count) {
    OpDesc desc;
    desc.op_seq = 1;
    desc.kind = static_cast<uint8_t>(kind);
    desc.dtype = static_cast<uint8_t>(DataType::kFloat32);
    desc.redop = static_cast<uint8_t>(ReduceOp::kSum);
    desc.root = root;
    desc.count = count;
    const OpPlan plan = MakePlan(desc, 0, kChunkBytes, 2);
    std::array<std::string, 2> tree;
    for (uint32_t c = 0; c < plan.num_chunks; ++c) {
      if (plan.flow() == Flow::kFromOwner && plan.OwnerRank(c) == 1) continue;
      const auto bytes = static_cast<uint32_t>(plan.ChunkSize(c));
      FrameHeader h = MakeFrame(plan, plan.first_chunk + c, bytes);
      tree[OpPlan::TreeOf(c)] +=
          std::string(reinterpret_cast<const char*>(&h), sizeof h) + std::string(bytes, '\x3f');
    }
    return tree;
  };
  auto write = [&](const std::string& name, int op, const std::string& tree0,
                   const std::string& tree1, const std::string& p2p = "") {
    std::string s(1, static_cast<char>(op << 2));
    s += static_cast<char>(tree0.size() & 0xff);
    s += static_cast<char>(tree0.size() >> 8);
    s += tree0;
    s += static_cast<char>(p2p.size() & 0xff);
    s += static_cast<char>(p2p.size() >> 8);
    s += p2p;
    s += tree1;
    std::ofstream(std::string(dir) + "/" + name, std::ios::binary) << s;
  };
  auto seed = [&](const std::string& name, int op, std::array<std::string, 2> tree,
                  const std::string& p2p = "") { write(name, op, tree[0], tree[1], p2p); };
  seed("allreduce.bin", 0, frames(CollectiveKind::kAllreduce, -1, kCount));
  seed("broadcast.bin", 1, frames(CollectiveKind::kBroadcast, 0, kCount));
  seed("barrier.bin", 2, frames(CollectiveKind::kBarrier, -1, 0));
  seed("allgather.bin", 3, frames(CollectiveKind::kAllgather, -1, kCount));
  // A point-to-point message: peer_to_peer.cc's Hello (magic "HFP3", rank 0, no shared memory
  // offered: 104 zero bytes), then a message header (magic "HFPM", float32, kCount elements, tag
  // 7) and the payload.
  std::string p2p;
  auto put = [&](auto v) { p2p.append(reinterpret_cast<const char*>(&v), sizeof v); };
  put(uint32_t{0x48465033});
  put(int32_t{0});
  p2p.append(104, '\0');
  put(uint32_t{0x4846504d});
  put(static_cast<uint8_t>(DataType::kFloat32));
  p2p.append(3, '\0');
  put(uint64_t{kCount});
  put(uint32_t{7});
  put(uint32_t{0});
  p2p.append(kCount * 4, '\x3f');
  seed("recv.bin", 4, {"", ""}, p2p);
}
