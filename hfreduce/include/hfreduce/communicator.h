// HFReduce communicator: collectives across ranks, one process per GPU ("local rank").
//
// Ranks meet through a rendezvous store (store.h). Ranks that report the same node id form a
// node: they share one POSIX shared-memory segment, and the node's first rank (the leader) runs
// the reducer and network threads. Nodes are combined with a double binary tree over TCP (or
// ibverbs where built): half of the chunks go up and down each tree, pipelined so that copy-in,
// local reduce, network and copy-out overlap.
//
// Every collective is issued by every rank in the same order with matching arguments (count,
// type, op, root); a mismatch, a rank that dies, or a peer that stops answering makes the
// collective fail on every rank within `timeout`, after which the communicator is broken (every
// later call fails with the same status) and can only be destroyed.
//
// Membership changes without restarting processes (fault-tolerant training): Abort() fails every
// pending operation at once, here and on the other ranks, when the application or its platform
// knows a member is gone; Shrink() makes a new communicator of the surviving ranks; a larger one
// (newly started ranks joining) is made by every member calling Create() with the new world size
// and a store prefix they agree on. Each new communicator rebuilds the node groups (shared
// memory) and the double binary tree for its membership.
//
// Thread safety: calls on one Communicator must come from one thread at a time (like a CUDA
// stream, operations run in the order issued). Work handles may be waited on from any thread.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/result.h"
#include "hfreduce/store.h"
#include "hfreduce/types.h"

namespace ff {
class Metrics;
}  // namespace ff

namespace ff::hfreduce {

struct CommunicatorOptions {
  int rank = 0;
  int world_size = 1;
  // When >= 0, the local rank this process expects (LOCAL_RANK from a launcher); rendezvous fails
  // if the node grouping gives another. Local ranks are numbered in global rank order.
  int local_rank = -1;
  // The store to rendezvous through (e.g. the one torch.distributed hands a backend). When null,
  // a StoreClient of store_address is used.
  std::shared_ptr<Store> store;
  // host:port of the rendezvous store (when `store` is null).
  std::string store_address = "127.0.0.1:29500";
  // Rank 0 serves the store at store_address (false when an external hfreduce-store runs;
  // ignored when `store` is set).
  bool rank0_hosts_store = true;
  // Key prefix in the store, so several communicators can share one store.
  std::string store_prefix = "hfreduce";
  // Ranks with the same node id share a node (shared memory). Default: the host name.
  std::string node_id;
  // What this node is called in LinkTimes (step telemetry): HFREDUCE_NODE_LABEL, else HAI_NODE
  // (the platform's node name), else the node id.
  std::string node_label;
  // Where this node sits in the network, "zone/leaf" (its leaf switch, named with its zone): the
  // trees between nodes are built leaf by leaf, crossing each leaf's uplinks as few times as a
  // spanning tree can (common/double_binary_tree.h). Empty: $HFREDUCE_LEAF, else $HAI_LEAF (the
  // platform's), else the node's entry in the cluster.toml named by $HFREDUCE_TOPOLOGY (found by
  // node label), else unknown. When any node's is unknown, the trees follow rank order.
  std::string leaf;
  // "leaf": the trees follow the leaves where every node's is known; "rank": rank order always.
  // Empty: $HFREDUCE_TREES, else "leaf".
  std::string tree_order;
  // Address other nodes' leaders reach this node at (the TCP listener binds it).
  std::string listen_host = "127.0.0.1";
  // Between nodes: "tcp", "verbs" (ibverbs RC; needs an RDMA device and a build with
  // libibverbs) or "auto" (verbs where both ends have it, else TCP).
  std::string transport = "auto";
  // RDMA device for verbs (empty: the first one).
  std::string ib_device;
  // Rendezvous and every collective must complete within this long, else they fail.
  std::chrono::milliseconds timeout{std::chrono::seconds(300)};
  // Pipeline geometry: bytes per chunk and chunks in flight per stage.
  std::size_t chunk_bytes = std::size_t{1} << 20;
  int pipeline_depth = 8;
  // The latency path: an allreduce of at most this many bytes a rank, on a world of one node,
  // skips the pipeline (each rank sums the node's inputs itself from shared memory). 0 turns it
  // off; at most 1 MiB. -1: $HFREDUCE_SMALL_BYTES, else the default, 1 MiB (hfreduce/README.md).
  int64_t small_bytes = -1;
  // Point-to-point between ranks of one node goes through shared memory (1) or loopback TCP (0);
  // -1: $HFREDUCE_P2P_SHM, else 1. Sends of at least p2p_direct_bytes there are read straight
  // from the sender's buffer where the kernel allows it (cross-memory attach); 0: never; -1:
  // $HFREDUCE_P2P_DIRECT_BYTES, else 0 (copies through the ring measured faster; a direct send
  // completes only once its receive has read it; hfreduce/README.md).
  int p2p_shm = -1;
  int64_t p2p_direct_bytes = -1;
  // Marks on the wire of the inter-node connections (common/traffic.h): the DSCP of TCP
  // connections (0..63) and the InfiniBand service level of verbs queue pairs (0..15); -1 takes
  // the process's [traffic] mapping (hfreduce: DSCP 34, SL 1 by default).
  int dscp = -1;
  int ib_service_level = -1;
  // Where hfreduce_* metrics go (optional; not owned, must outlive the communicator).
  Metrics* metrics = nullptr;

  // Reads RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT (required) and LOCAL_RANK,
  // HFREDUCE_NODE_ID, HFREDUCE_NODE_LABEL, HFREDUCE_LISTEN_HOST, HFREDUCE_TRANSPORT,
  // HFREDUCE_IB_DEVICE, HFREDUCE_TIMEOUT_MS, HFREDUCE_CHUNK_BYTES, HFREDUCE_PIPELINE_DEPTH,
  // HFREDUCE_DSCP, HFREDUCE_IB_SL (optional) over the defaults above. kInvalidArgument names a bad
  // variable.
  static Result<CommunicatorOptions> FromEnvironment();
};

// A pending asynchronous collective.
class Work {
 public:
  virtual ~Work() = default;
  // Blocks until the collective completes; returns its status.
  virtual Status Wait() = 0;
  // True once completed (successfully or not); never blocks.
  virtual bool Test() = 0;
  // Calls `done` exactly once with the final status: at once on this thread if the work has
  // completed, else on the HFReduce thread that completes it. `done` must not block (hand
  // anything slow to another thread) and must not call back into this Work.
  virtual void OnComplete(std::function<void(const Status&)> done) = 0;
};

class Communicator {
 public:
  // Rendezvous with the other world_size - 1 ranks. Blocks until all have joined, or fails
  // (kDeadlineExceeded naming who is missing) after options.timeout.
  static Result<std::unique_ptr<Communicator>> Create(const CommunicatorOptions& options);
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int world_size() const = 0;
  virtual int local_rank() const = 0;
  virtual int local_size() const = 0;
  virtual int node_index() const = 0;
  virtual int num_nodes() const = 0;

  // recv[i] = op over ranks of send[i], for i < count. send == recv is in place. Buffers are host
  // memory, or CUDA device memory where built with CUDA. The buffers must stay valid and
  // untouched until the collective completes.
  virtual std::shared_ptr<Work> AllreduceAsync(const void* send, void* recv, std::size_t count,
                                               DataType type, ReduceOp op) = 0;
  // buf (count elements) of rank `root` is copied to every rank's buf.
  virtual std::shared_ptr<Work> BroadcastAsync(void* buf, std::size_t count, DataType type,
                                               int root) = 0;
  // recv (recv_count elements) = op over ranks of this rank's piece of send, i.e. of
  // send[rank * recv_count .. (rank + 1) * recv_count); send holds recv_count * world_size
  // elements. In place when recv == send + rank * recv_count.
  virtual std::shared_ptr<Work> ReduceScatterAsync(const void* send, void* recv,
                                                   std::size_t recv_count, DataType type,
                                                   ReduceOp op) = 0;
  // Rank r's send (send_count elements) lands at recv[r * send_count]; recv holds
  // send_count * world_size elements. Exact for every type. In place when
  // send == recv + rank * send_count.
  virtual std::shared_ptr<Work> AllgatherAsync(const void* send, void* recv, std::size_t send_count,
                                               DataType type) = 0;
  // Returns once every rank has called it.
  virtual std::shared_ptr<Work> BarrierAsync() = 0;

  // Point to point (pipeline parallelism): `count` elements to / from rank `peer`, matched by
  // `tag` (MPI's rule): a Recv takes the oldest message from `peer` with its tag, so messages of
  // one (peer, tag) arrive in the order sent, and messages of other tags never block it (they
  // are buffered until their Recv is posted). A Recv must match its Send in count and type, else
  // both fail. Independent of the collectives' order. Fails after `timeout` without a peer.
  virtual std::shared_ptr<Work> SendAsync(const void* buf, std::size_t count, DataType type,
                                          int peer, uint32_t tag = 0) = 0;
  virtual std::shared_ptr<Work> RecvAsync(void* buf, std::size_t count, DataType type, int peer,
                                          uint32_t tag = 0) = 0;
  // A Recv from whichever rank sends a message of `tag` first (MPI_ANY_SOURCE): the oldest
  // buffered one, else the first to arrive from any peer. `*source` (valid until the work
  // completes) is set to the sender before it completes successfully.
  virtual std::shared_ptr<Work> RecvAnyAsync(void* buf, std::size_t count, DataType type,
                                             uint32_t tag, int* source) = 0;
  // How point-to-point messages with `peer` travel: "shm-direct" (shared memory; large sends
  // read straight from the sender's buffer), "shm" (shared memory, copied through it), "tcp";
  // "" while the two have not exchanged a message yet (the connection opens on first use).
  virtual std::string PointToPointPath(int peer) = 0;
  // How the trees between nodes are laid out, for logs and tests: "leaf order: 2 leaves, 1+1
  // edges cross leaves (rank order: 2+2)", "rank order: 2 leaves, 2+2 edges cross leaves", or
  // "rank order (leaves unknown)"; "one node" within a node.
  virtual std::string TreeLayout() const = 0;

  Status Allreduce(const void* send, void* recv, std::size_t count, DataType type, ReduceOp op) {
    return AllreduceAsync(send, recv, count, type, op)->Wait();
  }
  Status Broadcast(void* buf, std::size_t count, DataType type, int root) {
    return BroadcastAsync(buf, count, type, root)->Wait();
  }
  Status ReduceScatter(const void* send, void* recv, std::size_t recv_count, DataType type,
                       ReduceOp op) {
    return ReduceScatterAsync(send, recv, recv_count, type, op)->Wait();
  }
  Status Allgather(const void* send, void* recv, std::size_t send_count, DataType type) {
    return AllgatherAsync(send, recv, send_count, type)->Wait();
  }
  Status Barrier() { return BarrierAsync()->Wait(); }
  Status Send(const void* buf, std::size_t count, DataType type, int peer, uint32_t tag = 0) {
    return SendAsync(buf, count, type, peer, tag)->Wait();
  }
  Status Recv(void* buf, std::size_t count, DataType type, int peer, uint32_t tag = 0) {
    return RecvAsync(buf, count, type, peer, tag)->Wait();
  }

  // CUDA (where built with it): collectives issued after this call copy device buffers with
  // cudaMemcpyAsync on `stream` (a cudaStream_t; null: a stream of HFReduce's own that is ordered
  // after the legacy default stream). The copy to host is ordered after the work already queued
  // on the stream, and the copy back is queued on it, so work queued on the stream after the
  // collective completes sees the result. Without CUDA, or for host buffers, it has no effect.
  virtual void SetCudaStream(void* stream) = 0;

  // Fails every pending and later operation at once with kAborted naming `reason`, and breaks the
  // communicator on the other ranks too: their pending collectives fail at once with this cause
  // rather than at the timeout (the node's connections are cut; the cause is published in the
  // rendezvous store). Never blocks; may be called from any thread (a watchdog, a signal of the
  // platform) while another thread waits on a Work. Later calls have no effect.
  virtual void Abort(const std::string& reason) = 0;

  // A new communicator of this one's ranks less `excluded` (ranks of this communicator; dead or
  // leaving), rendezvoused through the same store: ranks keep their order and are numbered
  // 0..n-1, nodes and trees are rebuilt. Every surviving rank calls it with the same set; the
  // excluded ones must not. Works on a broken (aborted, failed) communicator, which is left as it
  // is (destroy it after). When rank 0 serves the store (no external store), rank 0 must survive
  // and its server moves to the new communicator. kInvalidArgument for a bad set.
  virtual Result<std::unique_ptr<Communicator>> Shrink(const std::vector<int>& excluded) = 0;

  // OK while healthy; the failure that broke the communicator otherwise.
  virtual Status health() const = 0;
  // What carries data between nodes: "shm" (a single node), "tcp" or "verbs".
  virtual const std::string& transport() const = 0;
};

// What crossed each tree edge into this node, summed over the process's life and every
// communicator it leads (only a node's leader, local rank 0, moves bytes between nodes; the
// others have none). Per neighbouring node, by its label: the frames received from it, their
// payload bytes, the time waiting for each frame's first byte (the neighbour is late, or what it
// waits for is) and the time from there to its last byte (moving the bytes: bounded by the link,
// the one measure a slow link lengthens and a late peer does not). Step telemetry takes the
// differences over a step (hai_job; haiscale._C.link_clock).
struct LinkTime {
  std::string peer;
  uint64_t frames = 0;
  uint64_t bytes = 0;
  double wait_s = 0;
  double move_s = 0;
};
std::vector<LinkTime> ProcessLinkTimes();

}  // namespace ff::hfreduce
