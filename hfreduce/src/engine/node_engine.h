// The node leader's side of the pipeline: the reducer thread (sums the local ranks' chunks, and
// the neighbours' partial sums, in one pass) and, with several nodes, the network threads of the
// double binary tree. Chunk c of an operation travels in tree c % 2; each tree edge has its own
// connection. How a chunk moves depends on the operation (Flow, op.h):
//
//   kTree (allreduce):      local inputs + children's partials --reduce--> parent (or, at the
//                           root, the result); then the result down to every node.
//   kToOwner (reduce-scatter): the tree as an undirected graph, every node reducing what its
//                           neighbours away from the chunk's owner sent, and sending the sum one
//                           hop toward the owner, whose sum is the result. Each edge carries the
//                           chunk once, so a reduce-scatter moves half of an allreduce's bytes.
//   kFromOwner (allgather, broadcast): the owner's chunk spreads out from its node, each node
//                           keeping it and passing it on: once per edge.
//
// Every network thread walks every chunk of its tree in order and acts on those that cross its
// edge in its direction; the consumer of a ring marks the chunks it skips as consumed so that
// slot reuse stays in step.
//
// A monitor thread watches the local ranks and, when the node aborts, shuts every connection so
// that neighbouring nodes fail their collectives too instead of waiting for their timeout.
#pragma once

#include <array>
#include <atomic>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/double_binary_tree.h"
#include "common/thread_annotations.h"
#include "engine/link_clock.h"
#include "engine/op.h"
#include "engine/route.h"
#include "engine/waiter.h"
#include "transport/connection.h"

namespace ff::hfreduce {

struct NodeEngineConfig {
  int node_index = 0;
  int num_nodes = 1;
  DoubleBinaryTree trees{1};  // the trees between the num_nodes nodes
  int world_size = 1;
  std::vector<int> local_global_ranks;   // global rank of each local rank
  std::vector<int> node_of_rank;         // node index of every global rank
  std::vector<std::string> node_labels;  // each node's label (LinkTimes); empty: its index
  std::chrono::milliseconds timeout{300000};
  std::size_t chunk_bytes = 1 << 20;
  // Failures across nodes: a node that fails for a cause of its own (a dead local rank, ranks
  // that disagree, a timeout) publishes it before cutting its connections; a node that only saw
  // a connection drop (kAborted) asks for the published cause, so that every node reports what
  // happened rather than the lost connection. Optional.
  std::function<void(const Status&)> publish_failure;
  std::function<Status(const Status&)> explain_failure;
  // Per tree: the connection to the parent (null at the root) and to each child, in the order
  // of trees' children.
  std::array<std::unique_ptr<Connection>, 2> parent;
  std::array<std::array<std::unique_ptr<Connection>, 2>, 2> children;
};

class NodeEngine {
 public:
  NodeEngine(NodeSegment& segment, Waiter waiter, NodeEngineConfig config);
  ~NodeEngine();  // stops and joins every thread

 private:
  struct EdgeRing;  // a ring of chunk buffers with "filled" / "free" stamps
  using Clock = Waiter::Clock;

  // Which of this node's tree edges chunk c (in tree t) crosses, and in which direction.
  Route RouteOf(const OpPlan& plan, uint32_t c, int t) const;

  void ReducerLoop();
  Status ReduceChunk(const OpPlan& plan, uint32_t c, Clock::time_point deadline);
  Status ReduceTowardOwner(const OpPlan& plan, uint32_t c, const Route& route,
                           Clock::time_point deadline);
  Status StartFromOwner(const OpPlan& plan, uint32_t c, const Route& route,
                        Clock::time_point deadline);
  // Marks chunk ti consumed in every ring this node's reducer reads (used or skipped).
  void FreeReducerRings(int t, uint32_t ti);
  void UpSender(int id, int t);
  void DownReceiver(int id, int t);
  void ChildReceiver(int id, int t, int i);
  void DownSender(int id, int t, int i);
  // Receives one frame from `conn` into `h` and its payload (h->bytes, checked by `check` before
  // any is read) into wherever `dest(*h)` says, timing both into `link`.
  // (Templates, not std::function: no allocation per frame on the small-message path.)
  template <typename Check, typename Dest>
  Status RecvFrame(Connection& conn, LinkCounters* link, FrameHeader* h, const Check& check,
                   const Dest& dest);
  LinkCounters* LinkOf(int node) const;
  void Monitor();
  // While operations are in flight: a neighbour that closed its connection (it aborted, or its
  // leader died) and whose edge's threads have not moved on since the previous look. `seen`
  // holds, per edge, the progress at its first sighting.
  Status CheckNeighbours(std::vector<std::size_t>* seen);

  // Network threads walk the operations in the order the reducer accepted them. Returns false
  // when stopping.
  bool NextPlan(std::size_t index, OpPlan* plan);
  // Runs `body` over this tree's chunks of every operation until stop or failure.
  // `id` numbers the network thread (0..) for the drain bookkeeping. The body gets the chunk's
  // index c in the operation, its global number g and its index ti in tree t's sequence.
  void ForEachTreeChunk(int id, int t,
                        const std::function<Status(const OpPlan&, uint32_t c, uint32_t g,
                                                   uint32_t ti, Clock::time_point deadline)>& body);
  // Every network thread has finished every accepted plan.
  bool Drained() const FF_REQUIRES(plans_mu_);
  Status Wait(const std::function<bool()>& pred, Clock::time_point deadline,
              const std::function<std::string()>& what);
  Status ValidateFrame(const FrameHeader& h, const OpPlan& plan, uint32_t g,
                       const std::string& peer) const;
  void Fail(const Status& status);
  bool ResultSlotFree(uint32_t g);
  int Children(int t) const { return tree_[t].num_children; }
  bool IsRoot(int t) const { return config_.num_nodes == 1 || tree_[t].parent < 0; }

  NodeSegment& seg_;
  Waiter waiter_;
  NodeEngineConfig config_;
  std::array<TreePosition, 2> tree_;
  const uint32_t slots_;

  std::array<std::unique_ptr<EdgeRing>, 2> up_;                         // per tree
  std::array<std::array<std::unique_ptr<EdgeRing>, 2>, 2> from_child_;  // per tree, child
  // Reduce-scatter's partial sums coming down from the parent and going down to a child.
  std::array<std::unique_ptr<EdgeRing>, 2> from_parent_;
  std::array<std::array<std::unique_ptr<EdgeRing>, 2>, 2> to_child_;
  RouteTable routes_;

  mutable Mutex plans_mu_;
  CondVar plans_cv_;
  // Ring of recent plans, indexed by position % size.
  std::vector<OpPlan> plans_ FF_GUARDED_BY(plans_mu_);
  std::size_t plans_accepted_ FF_GUARDED_BY(plans_mu_) = 0;
  // Per network thread: plans it has finished.
  std::vector<std::size_t> progress_ FF_GUARDED_BY(plans_mu_);
  static constexpr std::size_t kPlanRing = 4096;

  // Each tree connection with the id of the first of its two network threads (ids id, id + 1).
  std::vector<std::pair<Connection*, int>> edges_;

  std::atomic<bool> stop_{false};
  std::vector<std::thread> threads_;
};

}  // namespace ff::hfreduce
