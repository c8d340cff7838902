// Communicator: rendezvous (store, node grouping, shared memory, tree connections) and the API.
#include "hfreduce/communicator.h"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <set>
#include <thread>

#include "common/tls.h"
#include "common/traffic.h"
#include "engine/device_copy.h"
#include "engine/node_engine.h"
#include "engine/rank_worker.h"
#include "hfreduce/store.h"
#include "monitoring/metrics.h"
#include "p2p/peer_to_peer.h"
#include "scheduler/topology.h"
#include "transport/shm.h"
#include "transport/tcp.h"
#include "transport/verbs.h"

namespace ff::hfreduce {
namespace {

using Clock = std::chrono::steady_clock;

// How long a node that saw a connection drop waits for the cause its neighbour published (a
// neighbour that failed publishes before it cuts its connections, so the cause is normally there
// already; a neighbour killed outright publishes nothing, and this is what its loss costs on top).
constexpr std::chrono::milliseconds kFailureLookup{500};

// The latency path's default limit (CommunicatorOptions::small_bytes; hfreduce/README.md says
// how it was measured).
constexpr int64_t kDefaultSmallBytes = 1 << 20;

Status ParseEnvInt(const char* name, int64_t min, int64_t max, int64_t* out, bool required) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') {
    if (required)
      return InvalidArgument(std::string("hfreduce: environment variable ") + name + " is not set");
    return Status::Ok();
  }
  char* end = nullptr;
  errno = 0;
  long long value = std::strtoll(v, &end, 10);
  if (errno != 0 || end == v || *end != '\0' || value < min || value > max) {
    return InvalidArgument(std::string("hfreduce: ") + name + "='" + v + "' is not an integer in " +
                           std::to_string(min) + ".." + std::to_string(max));
  }
  *out = value;
  return Status::Ok();
}

std::string HostName() {
  char buf[256] = {};
  gethostname(buf, sizeof buf - 1);
  return buf;
}

// What this node is called (CommunicatorOptions::node_label): the option, HFREDUCE_NODE_LABEL,
// HAI_NODE, else its node id.
std::string NodeLabel(const CommunicatorOptions& options) {
  std::string label = options.node_label;
  for (const char* var : {"HFREDUCE_NODE_LABEL", "HAI_NODE"}) {
    if (const char* v = std::getenv(var); label.empty() && v && *v) label = v;
  }
  if (label.empty() || label.find('\n') != std::string::npos) {
    label = options.node_id.empty() ? HostName() : options.node_id;
  }
  return label;
}

// This node's "zone/leaf" (CommunicatorOptions::leaf), "" when unknown. `label` finds the node in
// $HFREDUCE_TOPOLOGY's cluster.toml, read by the scheduler's own reader.
Result<std::string> LeafOf(const CommunicatorOptions& options, const std::string& label) {
  std::string leaf = options.leaf;
  for (const char* var : {"HFREDUCE_LEAF", "HAI_LEAF"}) {
    if (const char* v = std::getenv(var); leaf.empty() && v && *v) leaf = v;
  }
  const char* file = std::getenv("HFREDUCE_TOPOLOGY");
  if (leaf.empty() && file && *file) {
    Result<scheduler::Topology> topology = scheduler::Topology::Load(file);
    if (!topology.ok()) {
      return topology.status().WithContext("hfreduce: HFREDUCE_TOPOLOGY");
    }
    const int node = topology->FindNode(label);
    if (node < 0) {
      return InvalidArgument("hfreduce: node '" + label + "' is not in " + file +
                             " (HFREDUCE_TOPOLOGY; the node is named by HFREDUCE_NODE_LABEL, "
                             "HAI_NODE or its node id)");
    }
    leaf = topology->LeafPath(node);
  }
  if (leaf.find('\n') != std::string::npos) {
    return InvalidArgument("hfreduce: a leaf (HFREDUCE_LEAF) must not contain a newline");
  }
  return leaf;
}

#ifdef FF_WITH_VERBS
constexpr bool FF_VERBS_BUILT = true;
#else
constexpr bool FF_VERBS_BUILT = false;
#endif

// Whether this node wants its tree connections on ibverbs ("auto": when a device exists).
Result<bool> WantsVerbs(const std::string& transport);

// The marks of HFReduce's traffic: the options', else the process's [traffic] mapping.
int Dscp(const CommunicatorOptions& o) {
  return o.dscp >= 0 ? o.dscp : ProcessTraffic().Dscp(TrafficClass::kHfreduce);
}
int ServiceLevel(const CommunicatorOptions& o) {
  return o.ib_service_level >= 0 ? o.ib_service_level
                                 : ProcessTraffic().ServiceLevel(TrafficClass::kHfreduce);
}

Status Validate(const CommunicatorOptions& o) {
  if (o.world_size < 1) return InvalidArgument("hfreduce: world size must be at least 1");
  if (o.rank < 0 || o.rank >= o.world_size) {
    return InvalidArgument("hfreduce: rank " + std::to_string(o.rank) + " is outside 0.." +
                           std::to_string(o.world_size - 1));
  }
  if (o.chunk_bytes < 4096 || o.chunk_bytes > (std::size_t{1} << 30) || o.chunk_bytes % 64 != 0) {
    return InvalidArgument("hfreduce: chunk_bytes must be a multiple of 64 in 4 KiB..1 GiB");
  }
  if (o.pipeline_depth < 2 || o.pipeline_depth > 64) {
    return InvalidArgument("hfreduce: pipeline_depth must be in 2..64");
  }
  if (o.small_bytes < -1 || o.small_bytes > static_cast<int64_t>(kSmallBytes)) {
    return InvalidArgument("hfreduce: small_bytes must be in 0.." + std::to_string(kSmallBytes));
  }
  if (o.timeout.count() <= 0) return InvalidArgument("hfreduce: timeout must be positive");
  if (o.dscp < -1 || o.dscp > 63) return InvalidArgument("hfreduce: dscp must be in 0..63");
  if (o.ib_service_level < -1 || o.ib_service_level > 15) {
    return InvalidArgument("hfreduce: ib_service_level must be in 0..15");
  }
  // Checked here, before any rank talks to the store: a rank that failed later would leave the
  // others failing on its closed store instead of with this reason.
  FF_RETURN_IF_ERROR(WantsVerbs(o.transport).status());
  if (o.store_prefix.empty() || o.store_prefix.find('/') != std::string::npos) {
    return InvalidArgument("hfreduce: store_prefix must be non-empty and contain no '/'");
  }
  return Status::Ok();
}

// Per-collective metrics; absent when the caller gave no Metrics.
struct CollectiveMetrics {
  prometheus::Counter* ops = nullptr;
  prometheus::Counter* bytes = nullptr;
  prometheus::Counter* failures = nullptr;
  prometheus::Histogram* seconds = nullptr;
};

class CommunicatorImpl final : public Communicator {
 public:
  ~CommunicatorImpl() override {
    p2p_.reset();
    worker_.reset();  // finishes or cancels this rank's operations first
    engine_.reset();
    if (segment_) UnregisterHostMemory(&segment_->header());
  }

  int rank() const override { return rank_; }
  int world_size() const override { return world_size_; }
  int local_rank() const override { return local_rank_; }
  int local_size() const override { return local_size_; }
  int node_index() const override { return node_index_; }
  int num_nodes() const override { return num_nodes_; }
  Status health() const override { return segment_->AbortStatus(); }
  const std::string& transport() const override { return transport_; }
  void SetCudaStream(void* stream) override { stream_ = stream; }

  std::shared_ptr<Work> AllreduceAsync(const void* send, void* recv, std::size_t count,
                                       DataType type, ReduceOp op) override {
    if (count > 0 && (send == nullptr || recv == nullptr)) {
      return Failed(InvalidArgument("hfreduce: allreduce of " + std::to_string(count) +
                                    " elements with a null buffer"));
    }
    if (Status st = CheckReduction("allreduce", type, op); !st.ok()) return Failed(st);
    OpDesc desc;
    desc.kind = static_cast<uint8_t>(CollectiveKind::kAllreduce);
    desc.dtype = static_cast<uint8_t>(type);
    desc.redop = static_cast<uint8_t>(op);
    desc.count = count;
    return Submit(desc, send, recv, "allreduce");
  }

  std::shared_ptr<Work> BroadcastAsync(void* buf, std::size_t count, DataType type,
                                       int root) override {
    if (root < 0 || root >= world_size_) {
      return Failed(InvalidArgument("hfreduce: broadcast root " + std::to_string(root) +
                                    " is outside 0.." + std::to_string(world_size_ - 1)));
    }
    if (count > 0 && buf == nullptr) {
      return Failed(InvalidArgument("hfreduce: broadcast with a null buffer"));
    }
    OpDesc desc;
    desc.kind = static_cast<uint8_t>(CollectiveKind::kBroadcast);
    desc.dtype = static_cast<uint8_t>(type);
    desc.root = root;
    desc.count = count;
    return Submit(desc, buf, buf, "broadcast");
  }

  std::shared_ptr<Work> ReduceScatterAsync(const void* send, void* recv, std::size_t recv_count,
                                           DataType type, ReduceOp op) override {
    if (recv_count > 0 && (send == nullptr || recv == nullptr)) {
      return Failed(InvalidArgument("hfreduce: reduce-scatter with a null buffer"));
    }
    if (Status st = CheckReduction("reduce-scatter", type, op); !st.ok()) return Failed(st);
    OpDesc desc;
    desc.kind = static_cast<uint8_t>(CollectiveKind::kReduceScatter);
    desc.dtype = static_cast<uint8_t>(type);
    desc.redop = static_cast<uint8_t>(op);
    desc.count = recv_count;
    return Submit(desc, send, recv, "reduce_scatter");
  }

  std::shared_ptr<Work> AllgatherAsync(const void* send, void* recv, std::size_t send_count,
                                       DataType type) override {
    if (send_count > 0 && (send == nullptr || recv == nullptr)) {
      return Failed(InvalidArgument("hfreduce: allgather with a null buffer"));
    }
    OpDesc desc;
    desc.kind = static_cast<uint8_t>(CollectiveKind::kAllgather);
    desc.dtype = static_cast<uint8_t>(type);
    desc.count = send_count;
    return Submit(desc, send, recv, "allgather");
  }

  std::shared_ptr<Work> SendAsync(const void* buf, std::size_t count, DataType type, int peer,
                                  uint32_t tag) override {
    if (Status st = CheckPeer(peer, count, buf); !st.ok()) return Failed(st);
    if (Status st = segment_->AbortStatus(); !st.ok()) return Failed(st);
    return p2p_->Send(buf, count, type, peer, tag);
  }

  std::shared_ptr<Work> RecvAsync(void* buf, std::size_t count, DataType type, int peer,
                                  uint32_t tag) override {
    if (Status st = CheckPeer(peer, count, buf); !st.ok()) return Failed(st);
    if (Status st = segment_->AbortStatus(); !st.ok()) return Failed(st);
    return p2p_->Recv(buf, count, type, peer, tag);
  }

  std::shared_ptr<Work> RecvAnyAsync(void* buf, std::size_t count, DataType type, uint32_t tag,
                                     int* source) override {
    if (world_size_ < 2) {
      return Failed(InvalidArgument("hfreduce: recv from any source in a world of one rank"));
    }
    if (count > 0 && buf == nullptr) {
      return Failed(InvalidArgument("hfreduce: recv with a null buffer"));
    }
    if (source == nullptr)
      return Failed(InvalidArgument("hfreduce: recv: no place for the source"));
    if (Status st = segment_->AbortStatus(); !st.ok()) return Failed(st);
    return p2p_->RecvAny(buf, count, type, tag, source);
  }
  std::string PointToPointPath(int peer) override {
    if (peer < 0 || peer >= world_size_ || peer == rank_) return "";
    return p2p_->Path(peer);
  }
  std::string TreeLayout() const override { return tree_layout_; }

  void Abort(const std::string& reason) override;
  Result<std::unique_ptr<Communicator>> Shrink(const std::vector<int>& excluded) override;

  std::shared_ptr<Work> BarrierAsync() override {
    OpDesc desc;
    desc.kind = static_cast<uint8_t>(CollectiveKind::kBarrier);
    return Submit(desc, nullptr, nullptr, "barrier");
  }

  Status Init(const CommunicatorOptions& options);

 private:
  // Joins the communicator of `options` (rank, world size, geometry) under `base_prefix` of
  // `store`: the part of Init after the store is settled, shared with Shrink.
  Status Join(const CommunicatorOptions& options, std::shared_ptr<Store> store,
              std::shared_ptr<Store> failure_store, std::shared_ptr<StoreServer> server,
              const std::string& base_prefix);

  std::shared_ptr<Work> Failed(Status status) {
    auto work = std::make_shared<WorkImpl>();
    work->Complete(std::move(status));
    return work;
  }

  static Status CheckReduction(const char* what, DataType type, ReduceOp op) {
    if (ElementSize(type) == 0) {
      return InvalidArgument(std::string("hfreduce: ") + what + " of element type " +
                             std::to_string(static_cast<int>(type)) + ", which HFReduce lacks");
    }
    if (!ReduceOpDefinedOn(op, type)) {
      return InvalidArgument(
          std::string("hfreduce: ") + what + " with " +
          (static_cast<std::size_t>(op) <= static_cast<std::size_t>(ReduceOp::kBxor)
               ? std::string(ReduceOpName(op)) + " of " + std::string(DataTypeName(type)) +
                     " elements (the bitwise ops take integer types)"
               : "reduce op " + std::to_string(static_cast<int>(op)) + ", which HFReduce lacks"));
    }
    return Status::Ok();
  }

  Status CheckPeer(int peer, std::size_t count, const void* buf) const {
    if (peer < 0 || peer >= world_size_ || peer == rank_) {
      return InvalidArgument("hfreduce: peer " + std::to_string(peer) +
                             " is not another rank in 0.." + std::to_string(world_size_ - 1));
    }
    if (count > 0 && buf == nullptr) return InvalidArgument("hfreduce: null buffer");
    return Status::Ok();
  }

  std::shared_ptr<Work> Submit(const OpDesc& desc, const void* send, void* recv,
                               const std::string& name);
  Status Rendezvous(const CommunicatorOptions& options, Store& store, const std::string& prefix);
  Status ConnectTrees(const CommunicatorOptions& options, Store& store, const std::string& prefix,
                      Clock::time_point deadline, NodeEngineConfig* config);
  CollectiveMetrics& MetricsFor(const std::string& name);

  int rank_ = 0, world_size_ = 1, local_rank_ = 0, local_size_ = 1, node_index_ = 0, num_nodes_ = 1;
  std::vector<int> local_ranks_;  // global ranks of this node, by local rank
  Metrics* metrics_ = nullptr;
  std::map<std::string, CollectiveMetrics> collective_metrics_;
  CommunicatorOptions options_;                // what it was made with (for Shrink)
  std::shared_ptr<Store> store_;               // the rendezvous store
  std::string prefix_;                         // this communicator's keys in it
  std::shared_ptr<StoreServer> store_server_;  // rank 0's, shared with communicators shrunk from it
  // Where a node publishes the cause of its failure, and where the others look it up (with a
  // short timeout of its own: a store whose host died must not hold up the failure).
  std::shared_ptr<Store> failure_store_;
  std::atomic<bool> aborted_{false};  // Abort() was called
  std::unique_ptr<NodeSegment> segment_;
  std::unique_ptr<NodeEngine> engine_;
  std::unique_ptr<RankWorker> worker_;
  std::unique_ptr<PeerToPeer> p2p_;
  std::string transport_ = "shm";  // what carries data between nodes
  DoubleBinaryTree trees_{1};      // the trees between nodes
  std::string tree_layout_ = "one node";
  void* stream_ = nullptr;  // the caller's CUDA stream for device buffers
};

CollectiveMetrics& CommunicatorImpl::MetricsFor(const std::string& name) {
  auto it = collective_metrics_.find(name);
  if (it != collective_metrics_.end()) return it->second;
  CollectiveMetrics m;
  if (metrics_ != nullptr) {
    MetricLabels labels{{"collective", name}};
    m.ops = &metrics_->Counter("hfreduce_operations_total", "Collectives completed", labels);
    m.failures = &metrics_->Counter("hfreduce_failures_total", "Collectives that failed", labels);
    m.bytes = &metrics_->Counter("hfreduce_bytes_total", "Bytes reduced or broadcast", labels);
    m.seconds = &metrics_->Histogram("hfreduce_seconds", "Time from issue to completion",
                                     Metrics::LatencyBuckets(), labels);
  }
  return collective_metrics_.emplace(name, m).first->second;
}

// Wraps a Work to record metrics when it is first observed complete.
class MeteredWork final : public Work, public std::enable_shared_from_this<MeteredWork> {
 public:
  MeteredWork(std::shared_ptr<Work> inner, CollectiveMetrics metrics, double bytes)
      : inner_(std::move(inner)), metrics_(metrics), bytes_(bytes), start_(Clock::now()) {}
  Status Wait() override {
    Status st = inner_->Wait();
    Record(st);
    return st;
  }
  bool Test() override {
    if (!inner_->Test()) return false;
    Record(inner_->Wait());
    return true;
  }
  void OnComplete(std::function<void(const Status&)> done) override {
    inner_->OnComplete([this, self = weak_from_this(), done = std::move(done)](const Status& st) {
      if (auto alive = self.lock()) Record(st);
      done(st);
    });
  }

 private:
  void Record(const Status& st) {
    if (recorded_.exchange(true)) return;
    if (!st.ok()) {
      metrics_.failures->Increment();
      return;
    }
    metrics_.ops->Increment();
    metrics_.bytes->Increment(bytes_);
    metrics_.seconds->Observe(std::chrono::duration<double>(Clock::now() - start_).count());
  }
  std::shared_ptr<Work> inner_;
  CollectiveMetrics metrics_;
  double bytes_;
  Clock::time_point start_;
  std::atomic<bool> recorded_{false};
};

std::shared_ptr<Work> CommunicatorImpl::Submit(const OpDesc& desc, const void* send, void* recv,
                                               const std::string& name) {
  if (Status st = segment_->AbortStatus(); !st.ok()) return Failed(st);
  std::shared_ptr<Work> work = worker_->Submit(desc, send, recv, stream_);
  if (metrics_ == nullptr) return work;
  double bytes =
      desc.kind == static_cast<uint8_t>(CollectiveKind::kBarrier)
          ? 0
          : static_cast<double>(desc.count * ElementSize(static_cast<DataType>(desc.dtype)));
  return std::make_shared<MeteredWork>(std::move(work), MetricsFor(name), bytes);
}

Status CommunicatorImpl::Init(const CommunicatorOptions& given) {
  FF_RETURN_IF_ERROR(Validate(given));
  // The leaf and the trees' order, settled before anything reaches the store: a bad setting is
  // then the error every rank reports.
  CommunicatorOptions options = given;
  FF_ASSIGN_OR_RETURN(options.leaf, LeafOf(options, NodeLabel(options)));
  if (const char* v = std::getenv("HFREDUCE_TREES"); options.tree_order.empty() && v && *v) {
    options.tree_order = v;
  }
  if (options.tree_order.empty()) options.tree_order = "leaf";
  if (options.tree_order != "leaf" && options.tree_order != "rank") {
    return InvalidArgument("hfreduce: tree order (HFREDUCE_TREES) must be 'leaf' or 'rank', not '" +
                           options.tree_order + "'");
  }
  std::shared_ptr<Store> shared = options.store;
  std::shared_ptr<Store> failure_store = options.store;
  std::shared_ptr<StoreServer> server;
  if (!shared) {
    // Where the cluster runs TLS (FF_TLS_* from hai-agent: common/tls.h), a clear error first.
    FF_RETURN_IF_ERROR(InitProcessTlsFromEnvironment());
    if (options.rank == 0 && options.rank0_hosts_store) {
      FF_ASSIGN_OR_RETURN(server, StoreServer::Start(options.store_address));
    }
    shared = std::make_shared<StoreClient>(options.store_address, options.timeout);
    failure_store = std::make_shared<StoreClient>(options.store_address, kFailureLookup);
  }
  return Join(options, std::move(shared), std::move(failure_store), std::move(server),
              options.store_prefix);
}

Status CommunicatorImpl::Join(const CommunicatorOptions& options, std::shared_ptr<Store> store,
                              std::shared_ptr<Store> failure_store,
                              std::shared_ptr<StoreServer> server, const std::string& base_prefix) {
  options_ = options;
  rank_ = options.rank;
  world_size_ = options.world_size;
  metrics_ = options.metrics;
  store_ = std::move(store);
  failure_store_ = std::move(failure_store);
  store_server_ = std::move(server);
  // Communicators that reuse one store and prefix (one job after another) are told apart by a
  // generation: the join counter divided by the world size.
  FF_ASSIGN_OR_RETURN(int64_t joined, store_->Add(base_prefix + "/joined", 1));
  prefix_ = base_prefix + "/" + std::to_string((joined - 1) / options.world_size);
  return Rendezvous(options, *store_, prefix_);
}

void CommunicatorImpl::Abort(const std::string& reason) {
  if (aborted_.exchange(true)) return;
  Status cause(StatusCode::kAborted,
               "hfreduce: aborted on rank " + std::to_string(rank_) + ": " + reason);
  // This node's operations fail now (the leader's engine then cuts its connections); the
  // neighbouring nodes, seeing them cut, look up the cause published here. Publishing may wait
  // on the store (a dead store host: up to its timeout), so it runs on a thread of its own that
  // holds what it uses and is not waited for.
  std::thread([store = failure_store_, key = prefix_ + "/failure",
               value = std::string(StatusCodeName(cause.code())) + "\n" + cause.message()] {
    (void)store->Set(key, value);
  }).detach();
  segment_->Abort(cause);
  p2p_->Abort(segment_->AbortStatus());
}

Result<std::unique_ptr<Communicator>> CommunicatorImpl::Shrink(const std::vector<int>& excluded) {
  std::vector<bool> out(static_cast<std::size_t>(world_size_), false);
  for (int r : excluded) {
    if (r < 0 || r >= world_size_) {
      return InvalidArgument("hfreduce: shrink: rank " + std::to_string(r) + " is outside 0.." +
                             std::to_string(world_size_ - 1));
    }
    if (out[r]) return InvalidArgument("hfreduce: shrink: rank " + std::to_string(r) + " twice");
    out[r] = true;
  }
  if (excluded.empty()) return InvalidArgument("hfreduce: shrink: no rank to exclude");
  if (out[rank_]) {
    return InvalidArgument("hfreduce: shrink: rank " + std::to_string(rank_) +
                           " is excluded; only the surviving ranks call Shrink");
  }
  if (!options_.store && options_.rank0_hosts_store && out[0]) {
    return FailedPrecondition(
        "hfreduce: shrink: rank 0 serves the rendezvous store and is excluded; to shrink without "
        "it, rendezvous through a store that outlives every rank (hfreduce-store, or the "
        "platform's)");
  }
  std::vector<int> sorted = excluded;
  std::sort(sorted.begin(), sorted.end());
  std::string tag;
  for (int r : sorted)
    tag += (tag.empty() ? "" : ".") + std::to_string(r);
  CommunicatorOptions o = options_;
  o.world_size = world_size_ - static_cast<int>(excluded.size());
  o.rank = static_cast<int>(std::count(out.begin(), out.begin() + rank_, false));
  o.local_rank = -1;
  auto comm = std::make_unique<CommunicatorImpl>();
  FF_RETURN_IF_ERROR(
      comm->Join(o, store_, failure_store_, store_server_, prefix_ + "/shrink-" + tag)
          .WithContext("hfreduce: shrink of rank " + std::to_string(rank_) + " of " +
                       std::to_string(world_size_) + " to rank " + std::to_string(o.rank) + " of " +
                       std::to_string(o.world_size)));
  return std::unique_ptr<Communicator>(std::move(comm));
}

Status CommunicatorImpl::Rendezvous(const CommunicatorOptions& options, Store& store,
                                    const std::string& prefix) {
  const auto deadline = Clock::now() + options.timeout;
  auto left = [&] {
    return std::max(std::chrono::milliseconds(1),
                    std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()));
  };
  const std::string node_id = options.node_id.empty() ? HostName() : options.node_id;
  if (node_id.find('\n') != std::string::npos) {
    return InvalidArgument("hfreduce: node id must not contain a newline");
  }
  const std::string label = NodeLabel(options);
  const std::string& leaf = options.leaf;  // settled by Init
  const std::string& tree_order = options.tree_order;

  // 1. Everyone says which node it is on (its id, its label and its leaf, a line each); nodes
  // are ordered by their lowest rank.
  FF_RETURN_IF_ERROR(
      store.Set(prefix + "/rank/" + std::to_string(rank_), node_id + "\n" + label + "\n" + leaf));
  std::vector<std::string> keys;
  for (int r = 0; r < world_size_; ++r)
    keys.push_back(prefix + "/rank/" + std::to_string(r));
  Result<std::vector<std::string>> nodes_of = store.Get(keys, left());
  if (!nodes_of.ok()) {
    return nodes_of.status().WithContext("hfreduce: rank " + std::to_string(rank_) +
                                         " waiting for the other ranks to join");
  }
  std::vector<std::string> node_ids, node_labels, node_leaves;
  std::map<std::string, std::vector<int>> members;
  for (int r = 0; r < world_size_; ++r) {
    std::string& id = (*nodes_of)[r];
    const auto nl = id.find('\n');
    std::string their_label = nl == std::string::npos ? id : id.substr(nl + 1);
    if (nl != std::string::npos) id.resize(nl);
    const auto nl2 = their_label.find('\n');
    std::string their_leaf = nl2 == std::string::npos ? "" : their_label.substr(nl2 + 1);
    if (nl2 != std::string::npos) their_label.resize(nl2);
    if (!members.contains(id)) {
      node_ids.push_back(id);
      node_labels.push_back(their_label);
      node_leaves.push_back(their_leaf);
    }
    members[id].push_back(r);
  }
  num_nodes_ = static_cast<int>(node_ids.size());
  trees_ = DoubleBinaryTree(node_leaves, tree_order == "leaf");
  if (num_nodes_ > 1) {
    const DoubleBinaryTree rank_order(node_leaves, false);
    const int leaves =
        static_cast<int>(std::set<std::string>(node_leaves.begin(), node_leaves.end()).size());
    auto crossings = [](const DoubleBinaryTree& t) {
      return std::to_string(t.CrossGroupEdges(0)) + "+" + std::to_string(t.CrossGroupEdges(1));
    };
    if (std::find(node_leaves.begin(), node_leaves.end(), "") != node_leaves.end()) {
      tree_layout_ = "rank order (leaves unknown)";
    } else if (trees_.grouped()) {
      tree_layout_ = "leaf order: " + std::to_string(leaves) + " leaves, " + crossings(trees_) +
                     " edges cross leaves (rank order: " + crossings(rank_order) + ")";
    } else {
      tree_layout_ = "rank order: " + std::to_string(leaves) +
                     (leaves == 1 ? " leaf, " : " leaves, ") + crossings(rank_order) +
                     " edges cross leaves";
    }
  }
  std::vector<int> node_of_rank(static_cast<std::size_t>(world_size_));
  for (int r = 0; r < world_size_; ++r) {
    node_of_rank[r] = static_cast<int>(std::find(node_ids.begin(), node_ids.end(), (*nodes_of)[r]) -
                                       node_ids.begin());
  }
  node_index_ =
      static_cast<int>(std::find(node_ids.begin(), node_ids.end(), node_id) - node_ids.begin());
  local_ranks_ = members[node_id];
  local_size_ = static_cast<int>(local_ranks_.size());
  local_rank_ = static_cast<int>(std::find(local_ranks_.begin(), local_ranks_.end(), rank_) -
                                 local_ranks_.begin());
  if (options.local_rank >= 0 && options.local_rank != local_rank_) {
    return InvalidArgument("hfreduce: LOCAL_RANK is " + std::to_string(options.local_rank) +
                           " but rank " + std::to_string(rank_) + " is local rank " +
                           std::to_string(local_rank_) + " of node '" + node_id +
                           "' (local ranks are numbered in global rank order)");
  }
  if (local_size_ > kMaxLocalRanks) {
    return InvalidArgument("hfreduce: node '" + node_id + "' has " + std::to_string(local_size_) +
                           " ranks; at most 64 per node");
  }

  // 2. The node's shared memory: anonymous, created by the leader and opened by the others at
  // the path it publishes (the leader's descriptor in /proc) until they all have it: nothing is
  // ever left behind in /dev/shm, whenever a process dies.
  const std::string node_key = prefix + "/node/" + std::to_string(node_index_);
  const bool leader = local_rank_ == 0;
  if (leader) {
    FF_ASSIGN_OR_RETURN(segment_,
                        NodeSegment::Create("hfreduce-n" + std::to_string(node_index_), local_size_,
                                            options.pipeline_depth, options.chunk_bytes));
    // The latency path's limit: one value for the node, read by every local rank from here.
    int64_t small = options.small_bytes;
    if (small < 0) {
      small = kDefaultSmallBytes;
      FF_RETURN_IF_ERROR(
          ParseEnvInt("HFREDUCE_SMALL_BYTES", 0, static_cast<int64_t>(kSmallBytes), &small, false));
    }
    segment_->header().small_bytes = static_cast<uint32_t>(small);
    FF_RETURN_IF_ERROR(store.Set(node_key + "/shm", segment_->path()));
    if (local_size_ > 1) {
      std::vector<std::string> opened;
      for (int lr = 1; lr < local_size_; ++lr) {
        opened.push_back(node_key + "/opened/" + std::to_string(lr));
      }
      Status st = store.Get(opened, left()).status();
      segment_->Unpublish();
      FF_RETURN_IF_ERROR(st);
    } else {
      segment_->Unpublish();
    }
  } else {
    FF_ASSIGN_OR_RETURN(std::string name, store.Get(node_key + "/shm", left()));
    FF_ASSIGN_OR_RETURN(segment_, NodeSegment::Open(name));
    FF_RETURN_IF_ERROR(store.Set(node_key + "/opened/" + std::to_string(local_rank_), "1"));
  }
  segment_->header().ranks[local_rank_].pid.store(getpid(), std::memory_order_release);
  RegisterHostMemory(&segment_->header(), segment_->mapped_bytes());
  // Every rank's pid, for the liveness checks.
  FF_RETURN_IF_ERROR(store.Set(prefix + "/pid/" + std::to_string(rank_), std::to_string(getpid())));
  std::vector<std::string> pid_keys;
  for (int r : local_ranks_)
    pid_keys.push_back(prefix + "/pid/" + std::to_string(r));
  FF_ASSIGN_OR_RETURN(std::vector<std::string> pids, store.Get(pid_keys, left()));

  // 3. Every rank listens for point-to-point connections from lower ranks.
  FF_ASSIGN_OR_RETURN(std::unique_ptr<TcpListener> p2p_listener,
                      TcpListener::Listen(options.listen_host, Dscp(options)));
  FF_RETURN_IF_ERROR(store.Set(prefix + "/p2p/" + std::to_string(rank_), p2p_listener->address()));
  std::vector<std::string> p2p_keys;
  for (int r = 0; r < world_size_; ++r)
    p2p_keys.push_back(prefix + "/p2p/" + std::to_string(r));
  FF_ASSIGN_OR_RETURN(std::vector<std::string> p2p_addresses, store.Get(p2p_keys, left()));
  int64_t p2p_shm = options.p2p_shm, direct_bytes = options.p2p_direct_bytes;
  if (p2p_shm < 0) {
    p2p_shm = 1;
    FF_RETURN_IF_ERROR(ParseEnvInt("HFREDUCE_P2P_SHM", 0, 1, &p2p_shm, false));
  }
  if (direct_bytes < 0) {
    direct_bytes = static_cast<int64_t>(kDefaultDirectBytes);
    FF_RETURN_IF_ERROR(
        ParseEnvInt("HFREDUCE_P2P_DIRECT_BYTES", 0, int64_t{1} << 40, &direct_bytes, false));
  }
  p2p_ = std::make_unique<PeerToPeer>(rank_, std::move(p2p_listener), std::move(p2p_addresses),
                                      options.timeout, p2p_shm ? local_ranks_ : std::vector<int>{},
                                      static_cast<std::size_t>(direct_bytes));

  // 4. Leaders connect the trees; then the engine and this rank's worker start.
  std::vector<pid_t> watched;
  std::vector<std::string> names;
  if (leader) {
    for (int lr = 1; lr < local_size_; ++lr) {
      watched.push_back(static_cast<pid_t>(std::stol(pids[lr])));
      names.push_back("rank " + std::to_string(local_ranks_[lr]) + " (local rank " +
                      std::to_string(lr) + ")");
    }
  } else {
    watched.push_back(static_cast<pid_t>(std::stol(pids[0])));
    names.push_back("rank " + std::to_string(local_ranks_[0]) + " (the node's leader)");
  }
  Waiter waiter(*segment_, watched, names);
  if (leader) {
    NodeEngineConfig config;
    config.node_index = node_index_;
    config.num_nodes = num_nodes_;
    config.trees = trees_;
    config.world_size = world_size_;
    config.local_global_ranks = local_ranks_;
    config.node_of_rank = node_of_rank;
    config.node_labels = node_labels;
    config.timeout = options.timeout;
    config.chunk_bytes = options.chunk_bytes;
    const std::string failure_key = prefix + "/failure";
    const std::string here =
        "node " + std::to_string(node_index_) + " (rank " + std::to_string(rank_) + ")";
    config.publish_failure = [store = failure_store_, failure_key](const Status& st) {
      (void)store->Set(failure_key, std::string(StatusCodeName(st.code())) + "\n" + st.message());
    };
    config.explain_failure = [store = failure_store_, failure_key, here](const Status& st) {
      Result<std::string> cause = store->Get(failure_key, kFailureLookup);
      if (!cause.ok()) return st;
      auto newline = cause->find('\n');
      StatusCode code = StatusCode::kUnknown;
      if (newline == std::string::npos ||
          !StatusCodeFromName(std::string_view(*cause).substr(0, newline), &code)) {
        return st;
      }
      return Status(code, cause->substr(newline + 1) + " (" + here + " saw: " + st.message() + ")");
    };
    if (num_nodes_ > 1) {
      FF_RETURN_IF_ERROR(ConnectTrees(options, store, prefix, deadline, &config));
      FF_RETURN_IF_ERROR(store.Set(node_key + "/transport", transport_));
    }
    engine_ = std::make_unique<NodeEngine>(*segment_, waiter, std::move(config));
  }
  if (!leader && num_nodes_ > 1) {
    FF_ASSIGN_OR_RETURN(transport_, store.Get(node_key + "/transport", left()));
  }
  worker_ = std::make_unique<RankWorker>(*segment_, local_rank_, rank_, world_size_, waiter,
                                         options.timeout, options.chunk_bytes);
  return Status::Ok();
}

Status CommunicatorImpl::ConnectTrees(const CommunicatorOptions& options, Store& store,
                                      const std::string& prefix, Clock::time_point deadline,
                                      NodeEngineConfig* config) {
  auto left = [&] {
    return std::max(std::chrono::milliseconds(1),
                    std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()));
  };
  FF_ASSIGN_OR_RETURN(std::unique_ptr<TcpListener> listener,
                      TcpListener::Listen(options.listen_host, Dscp(options)));
  FF_RETURN_IF_ERROR(
      store.Set(prefix + "/leader/" + std::to_string(node_index_), listener->address()));
  // Connect up to each tree's parent (the parent's kernel completes the handshake from its
  // listen backlog, so connecting before anyone accepts cannot deadlock), then accept children.
  // Each side says whether it wants the verbs transport; a connection is upgraded when both do.
  // Nothing here waits on a peer's progress except what the peer sent before it could block.
  struct Hello {
    uint32_t magic;
    int32_t tree;
    int32_t child;
    int32_t wants_verbs;
  };
  constexpr uint32_t kHelloMagic = 0x48464c4f;
  Result<bool> wants = WantsVerbs(options.transport);
  FF_RETURN_IF_ERROR(wants.status());
  const int32_t mine = *wants ? 1 : 0;
  int expected_children = 0;
  for (int t = 0; t < 2; ++t) {
    const TreePosition& pos = trees_.position(t, node_index_);
    expected_children += pos.num_children;
    if (pos.parent < 0) continue;
    FF_ASSIGN_OR_RETURN(std::string address,
                        store.Get(prefix + "/leader/" + std::to_string(pos.parent), left()));
    FF_ASSIGN_OR_RETURN(config->parent[t], TcpConnect(address, deadline, Dscp(options)));
    config->parent[t]->set_peer("node " + std::to_string(pos.parent) + " (" + address + ")");
    Hello hello{kHelloMagic, t, node_index_, mine};
    FF_RETURN_IF_ERROR(config->parent[t]->Send(&hello, sizeof hello));
  }
  bool upgrade_child[2][2] = {{false, false}, {false, false}};
  for (int n = 0; n < expected_children; ++n) {
    FF_ASSIGN_OR_RETURN(std::unique_ptr<Connection> conn, listener->Accept(deadline));
    Hello hello{};
    FF_RETURN_IF_ERROR(conn->RecvBefore(&hello, sizeof hello, deadline));
    const bool tree_ok = hello.tree == 0 || hello.tree == 1;  // it indexes arrays below
    const TreePosition& pos = trees_.position(hello.tree & 1, node_index_);
    int index = -1;
    for (int i = 0; i < pos.num_children && tree_ok; ++i) {
      if (pos.children[i] == hello.child) index = i;
    }
    if (hello.magic != kHelloMagic || index < 0 || config->children[hello.tree][index]) {
      return DataLoss("hfreduce: unexpected connection from " + conn->peer() +
                      " while connecting the trees");
    }
    FF_RETURN_IF_ERROR(conn->Send(&mine, sizeof mine));
    upgrade_child[hello.tree][index] = mine && hello.wants_verbs;
    conn->set_peer("node " + std::to_string(hello.child) + " (" + conn->peer() + ")");
    config->children[hello.tree][index] = std::move(conn);
  }
  bool upgrade_parent[2] = {false, false};
  for (int t = 0; t < 2; ++t) {
    if (!config->parent[t]) continue;
    int32_t theirs = 0;
    FF_RETURN_IF_ERROR(config->parent[t]->RecvBefore(&theirs, sizeof theirs, deadline));
    upgrade_parent[t] = mine && theirs;
  }
  // Verbs: Begin on every connection to upgrade, then Finish on every one.
  std::vector<std::pair<std::unique_ptr<Connection>*, std::unique_ptr<VerbsConnector>>> pending;
  auto begin = [&](std::unique_ptr<Connection>& conn) -> Status {
    std::string name = conn->peer();
    FF_ASSIGN_OR_RETURN(auto connector,
                        VerbsConnector::Begin(std::move(conn), options.ib_device,
                                              ServiceLevel(options), Dscp(options)));
    pending.emplace_back(&conn, std::move(connector));
    return Status::Ok();
  };
  for (int t = 0; t < 2; ++t) {
    if (upgrade_parent[t]) FF_RETURN_IF_ERROR(begin(config->parent[t]));
    for (int i = 0; i < 2; ++i) {
      if (upgrade_child[t][i]) FF_RETURN_IF_ERROR(begin(config->children[t][i]));
    }
  }
  for (auto& [slot, connector] : pending) {
    FF_ASSIGN_OR_RETURN(*slot, connector->Finish());
  }
  transport_ = pending.empty() ? "tcp" : "verbs";
  return Status::Ok();
}

Result<bool> WantsVerbs(const std::string& transport) {
  if (transport == "tcp") return false;
  if (transport == "verbs") {
    if (!VerbsAvailable()) {
      return Unavailable("hfreduce: transport 'verbs' asked for, but " +
                         std::string(FF_VERBS_BUILT ? "this machine has no RDMA device"
                                                    : "this build has no ibverbs support"));
    }
    return true;
  }
  if (transport == "auto") return VerbsAvailable();
  return InvalidArgument("hfreduce: transport must be auto, tcp or verbs; got '" + transport + "'");
}

}  // namespace

Result<CommunicatorOptions> CommunicatorOptions::FromEnvironment() {
  CommunicatorOptions o;
  int64_t rank = 0, world = 1, port = 29500, timeout = 0, chunk = 0, depth = 0, dscp = -1, sl = -1;
  FF_RETURN_IF_ERROR(ParseEnvInt("RANK", 0, 1 << 24, &rank, true));
  FF_RETURN_IF_ERROR(ParseEnvInt("WORLD_SIZE", 1, 1 << 24, &world, true));
  FF_RETURN_IF_ERROR(ParseEnvInt("MASTER_PORT", 1, 65535, &port, true));
  int64_t local_rank = -1;
  FF_RETURN_IF_ERROR(ParseEnvInt("LOCAL_RANK", 0, 1 << 24, &local_rank, false));
  o.local_rank = static_cast<int>(local_rank);
  const char* addr = std::getenv("MASTER_ADDR");
  if (addr == nullptr || *addr == '\0') {
    return InvalidArgument("hfreduce: environment variable MASTER_ADDR is not set");
  }
  std::string host = addr;
  if (host.find(':') != std::string::npos) host = "[" + host + "]";
  o.rank = static_cast<int>(rank);
  o.world_size = static_cast<int>(world);
  o.store_address = host + ":" + std::to_string(port);
  if (const char* v = std::getenv("HFREDUCE_NODE_ID"); v && *v) o.node_id = v;
  if (const char* v = std::getenv("HFREDUCE_NODE_LABEL"); v && *v) o.node_label = v;
  if (const char* v = std::getenv("HFREDUCE_LISTEN_HOST"); v && *v) o.listen_host = v;
  if (const char* v = std::getenv("HFREDUCE_TRANSPORT"); v && *v) o.transport = v;
  if (const char* v = std::getenv("HFREDUCE_IB_DEVICE"); v && *v) o.ib_device = v;
  FF_RETURN_IF_ERROR(ParseEnvInt("HFREDUCE_TIMEOUT_MS", 1, int64_t{1} << 40, &timeout, false));
  FF_RETURN_IF_ERROR(ParseEnvInt("HFREDUCE_CHUNK_BYTES", 4096, 1 << 30, &chunk, false));
  FF_RETURN_IF_ERROR(ParseEnvInt("HFREDUCE_PIPELINE_DEPTH", 2, 64, &depth, false));
  FF_RETURN_IF_ERROR(ParseEnvInt("HFREDUCE_DSCP", 0, 63, &dscp, false));
  FF_RETURN_IF_ERROR(ParseEnvInt("HFREDUCE_IB_SL", 0, 15, &sl, false));
  o.dscp = static_cast<int>(dscp);
  o.ib_service_level = static_cast<int>(sl);
  if (timeout > 0) o.timeout = std::chrono::milliseconds(timeout);
  if (chunk > 0) o.chunk_bytes = static_cast<std::size_t>(chunk);
  if (depth > 0) o.pipeline_depth = static_cast<int>(depth);
  return o;
}

Result<std::unique_ptr<Communicator>> Communicator::Create(const CommunicatorOptions& options) {
  auto comm = std::make_unique<CommunicatorImpl>();
  FF_RETURN_IF_ERROR(comm->Init(options));
  return std::unique_ptr<Communicator>(std::move(comm));
}

}  // namespace ff::hfreduce
