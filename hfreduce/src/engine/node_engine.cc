#include "engine/node_engine.h"

#include <sys/mman.h>

#include <cstring>

#include "reduce/kernels.h"
#include "shm/numa.h"

namespace ff::hfreduce {
namespace {

constexpr auto kForever = std::chrono::hours(24 * 365);
// A neighbour's edge not seen gone (Monitor).
constexpr std::size_t kNotSeen = SIZE_MAX;

// Page-aligned, pre-faulted memory (huge pages where allowed), allocated once per engine.
struct Buffer {
  explicit Buffer(std::size_t n) : size(n) {
    void* p =
        mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
    data = p == MAP_FAILED ? nullptr : static_cast<char*>(p);
    if (data) {
      madvise(data, n, MADV_HUGEPAGE);
      BindMemoryHere(data, n);  // network buffers live where the leader runs
    }
  }
  ~Buffer() {
    if (data) munmap(data, size);
  }
  char* data;
  std::size_t size;
};

}  // namespace

struct NodeEngine::EdgeRing {
  EdgeRing(uint32_t slots, std::size_t slot_bytes)
      : buffer(static_cast<std::size_t>(slots) * slot_bytes),
        slot_bytes(slot_bytes),
        filled(new std::atomic<uint32_t>[slots]),
        freed(new std::atomic<uint32_t>[slots]),
        bytes(new std::atomic<uint32_t>[slots]) {
    for (uint32_t i = 0; i < slots; ++i) {
      filled[i] = 0;
      freed[i] = 0;
      bytes[i] = 0;
    }
  }
  char* slot(uint32_t s) { return buffer.data + static_cast<std::size_t>(s) * slot_bytes; }

  Buffer buffer;
  std::size_t slot_bytes;
  std::unique_ptr<std::atomic<uint32_t>[]> filled;  // g + 1 of the chunk the slot holds
  std::unique_ptr<std::atomic<uint32_t>[]> freed;   // g + 1 of the chunk last consumed from it
  std::unique_ptr<std::atomic<uint32_t>[]> bytes;   // payload bytes of that chunk
};

NodeEngine::NodeEngine(NodeSegment& segment, Waiter waiter, NodeEngineConfig config)
    : seg_(segment),
      waiter_(std::move(waiter)),
      config_(std::move(config)),
      slots_(static_cast<uint32_t>(segment.slots())),
      routes_(config_.node_index, config_.trees),
      plans_(kPlanRing) {
  for (int t = 0; t < 2; ++t) {
    tree_[t] = config_.trees.position(t, config_.node_index);
  }
  threads_.emplace_back([this] { ReducerLoop(); });
  // Rings and the list of edges first, then threads: every ring exists before any thread can
  // touch it, and the monitor reads the edges.
  int network = 0;
  for (int t = 0; t < 2 && config_.num_nodes > 1; ++t) {
    if (!IsRoot(t)) {
      up_[t] = std::make_unique<EdgeRing>(slots_, config_.chunk_bytes);
      from_parent_[t] = std::make_unique<EdgeRing>(slots_, config_.chunk_bytes);
      edges_.emplace_back(config_.parent[t].get(), network);
      network += 2;
    }
    for (int i = 0; i < Children(t); ++i) {
      from_child_[t][i] = std::make_unique<EdgeRing>(slots_, config_.chunk_bytes);
      to_child_[t][i] = std::make_unique<EdgeRing>(slots_, config_.chunk_bytes);
      edges_.emplace_back(config_.children[t][i].get(), network);
      network += 2;
    }
  }
  progress_.assign(static_cast<std::size_t>(network), 0);
  threads_.emplace_back([this] { Monitor(); });
  if (config_.num_nodes == 1) return;
  int id = 0;
  for (int t = 0; t < 2; ++t) {
    if (!IsRoot(t)) {
      threads_.emplace_back([this, id, t] { UpSender(id, t); });
      threads_.emplace_back([this, id, t] { DownReceiver(id + 1, t); });
      id += 2;
    }
    for (int i = 0; i < Children(t); ++i) {
      threads_.emplace_back([this, id, t, i] { ChildReceiver(id, t, i); });
      threads_.emplace_back([this, id, t, i] { DownSender(id + 1, t, i); });
      id += 2;
    }
  }
}

bool NodeEngine::Drained() const {
  for (std::size_t p : progress_) {
    if (p != plans_accepted_) return false;
  }
  return true;
}

NodeEngine::~NodeEngine() {
  // Let the network threads finish the chunks of accepted operations (a child may still be
  // receiving the last result) before cutting the connections.
  {
    UniqueLock lock(&plans_mu_);
    plans_cv_.wait_for(lock, config_.timeout, [&] {
      plans_mu_.AssertHeld();
      return seg_.aborted() || Drained();
    });
  }
  stop_ = true;
  plans_cv_.notify_all();
  seg_.header().doorbell.Ring();
  for (int t = 0; t < 2; ++t) {
    if (config_.parent[t]) config_.parent[t]->Shutdown();
    for (auto& c : config_.children[t]) {
      if (c) c->Shutdown();
    }
  }
  for (std::thread& th : threads_)
    th.join();
}

void NodeEngine::Fail(const Status& status) {
  Status cause = status;
  if (status.code() == StatusCode::kAborted) {
    if (config_.explain_failure && !seg_.aborted()) cause = config_.explain_failure(status);
  } else if (status.code() != StatusCode::kCancelled && config_.publish_failure) {
    config_.publish_failure(status);  // before the connections are cut
  }
  seg_.Abort(cause);
  for (int t = 0; t < 2; ++t) {
    if (config_.parent[t]) config_.parent[t]->Shutdown();
    for (auto& c : config_.children[t]) {
      if (c) c->Shutdown();
    }
  }
  plans_cv_.notify_all();
}

Status NodeEngine::Wait(const std::function<bool()>& pred, Clock::time_point deadline,
                        const std::function<std::string()>& what) {
  Status st = waiter_.Until([&] { return stop_.load() || pred(); }, deadline, what);
  if (st.ok() && stop_) return Status(StatusCode::kCancelled, "hfreduce: communicator destroyed");
  return st;
}

bool NodeEngine::ResultSlotFree(uint32_t g) {
  int slot = static_cast<int>(g % slots_);
  uint32_t f = seg_.result_filled(slot).load(std::memory_order_acquire);
  bool previous_written = f == g - slots_ + 1 || (f == 0 && g < slots_);
  return previous_written && seg_.result_pending(slot).load(std::memory_order_acquire) == 0;
}

Route NodeEngine::RouteOf(const OpPlan& plan, uint32_t c, int t) const {
  const Flow flow = plan.flow();
  if (flow == Flow::kTree) return routes_.Of(flow, t, -1);
  return routes_.Of(flow, t, config_.node_of_rank[static_cast<std::size_t>(plan.OwnerRank(c))]);
}

void NodeEngine::FreeReducerRings(int t, uint32_t ti) {
  for (int i = 0; i < Children(t); ++i)
    from_child_[t][i]->freed[ti % slots_].store(ti + 1, std::memory_order_release);
  if (from_parent_[t]) from_parent_[t]->freed[ti % slots_].store(ti + 1, std::memory_order_release);
}

// ---- Reducer ----------------------------------------------------------------------------------

void NodeEngine::ReducerLoop() {
  const int local = seg_.local_size();
  uint32_t next_chunk = 0;
  uint32_t in_tree[2] = {0, 0};
  for (uint32_t seq = 1;; ++seq) {
    auto posted = [&](int lr) {
      return seg_.header().ranks[lr].desc_seq.load(std::memory_order_acquire) == seq;
    };
    // Between operations: wait without a deadline for the first rank to start the next one.
    Status st = waiter_.Until(
        [&] {
          if (stop_) return true;
          for (int lr = 0; lr < local; ++lr) {
            if (posted(lr)) return true;
          }
          return false;
        },
        Clock::now() + kForever, [] { return std::string("the next operation"); },
        /*check_peers=*/false);
    if (!st.ok() || stop_) return;
    auto deadline = Clock::now() + config_.timeout;
    st = Wait(
        [&] {
          for (int lr = 0; lr < local; ++lr) {
            if (!posted(lr)) return false;
          }
          return true;
        },
        deadline, [&] { return "every local rank to start operation " + std::to_string(seq); });
    if (!st.ok()) return;
    const OpDesc& first = seg_.header().ranks[0].desc;
    for (int lr = 1; lr < local; ++lr) {
      const OpDesc& other = seg_.header().ranks[lr].desc;
      if (!(other == first)) {
        Fail(InvalidArgument("hfreduce: ranks disagree on operation " + std::to_string(seq) +
                             ": rank " + std::to_string(config_.local_global_ranks[0]) +
                             " called " + DescribeOp(first) + ", rank " +
                             std::to_string(config_.local_global_ranks[lr]) + " called " +
                             DescribeOp(other)));
        return;
      }
    }
    OpPlan plan = MakePlan(first, next_chunk, config_.chunk_bytes, config_.world_size);
    next_chunk += plan.num_chunks;
    plan.first_in_tree[0] = in_tree[0];
    plan.first_in_tree[1] = in_tree[1];
    in_tree[0] += (plan.num_chunks + 1) / 2;
    in_tree[1] += plan.num_chunks / 2;
    {
      MutexLock lock(&plans_mu_);
      plans_[plans_accepted_ % kPlanRing] = plan;
      ++plans_accepted_;
    }
    plans_cv_.notify_all();
    for (uint32_t c = 0; c < plan.num_chunks; ++c) {
      if (Status s = ReduceChunk(plan, c, deadline); !s.ok()) {
        if (!stop_) Fail(s);
        return;
      }
    }
  }
}

Status NodeEngine::ReduceChunk(const OpPlan& plan, uint32_t c, Clock::time_point deadline) {
  if (plan.flow() != Flow::kTree) {
    const int t = config_.num_nodes > 1 ? OpPlan::TreeOf(c) : 0;
    Route route = RouteOf(plan, c, t);
    return plan.flow() == Flow::kToOwner ? ReduceTowardOwner(plan, c, route, deadline)
                                         : StartFromOwner(plan, c, route, deadline);
  }
  const uint32_t g = plan.first_chunk + c;
  const int slot = static_cast<int>(g % slots_);
  const int t = config_.num_nodes > 1 ? OpPlan::TreeOf(c) : 0;
  const uint32_t ti = plan.TreeIndex(c);
  const uint32_t es = ti % slots_;
  const bool root = IsRoot(t);
  const int local = seg_.local_size();
  const int children = config_.num_nodes > 1 ? Children(t) : 0;
  EdgeRing* up = root ? nullptr : up_[t].get();

  FF_RETURN_IF_ERROR(Wait(
      [&] {
        for (int lr = 0; lr < local; ++lr) {
          if (seg_.input_filled(lr, slot).load(std::memory_order_acquire) != g + 1) return false;
        }
        for (int i = 0; i < children; ++i) {
          if (from_child_[t][i]->filled[es].load(std::memory_order_acquire) != ti + 1) {
            return false;
          }
        }
        return root ? ResultSlotFree(g)
                    : StampReached(up->freed[es].load(std::memory_order_acquire), ti - slots_ + 1);
      },
      deadline,
      [&] { return "the inputs of chunk " + std::to_string(c) + " of " + DescribeOp(plan.desc); }));

  const std::size_t size = plan.ChunkSize(c);
  const void* inputs[kMaxLocalRanks + 2];
  int k = 0;
  if (size > 0) {
    if (plan.kind() == CollectiveKind::kAllreduce) {
      for (int lr = 0; lr < local; ++lr)
        inputs[k++] = seg_.input(lr, slot);
    } else if (plan.kind() == CollectiveKind::kBroadcast) {
      for (int lr = 0; lr < local; ++lr) {
        if (config_.local_global_ranks[lr] == plan.desc.root) inputs[k++] = seg_.input(lr, slot);
      }
    } else {  // allreduce, reduce-scatter, allgather: every local rank contributes
      for (int lr = 0; lr < local; ++lr)
        inputs[k++] = seg_.input(lr, slot);
    }
    for (int i = 0; i < children; ++i) {
      if (from_child_[t][i]->bytes[es].load(std::memory_order_acquire) > 0) {
        inputs[k++] = from_child_[t][i]->slot(es);
      }
    }
  }
  char* dest = root ? seg_.result(slot) : up->slot(es);
  uint32_t out_bytes = 0;
  if (k == 1) {
    std::memcpy(dest, inputs[0], size);
    out_bytes = static_cast<uint32_t>(size);
  } else if (k > 1 && plan.kind() == CollectiveKind::kAllgather) {
    BitwiseOr(inputs, k, dest, size);
    out_bytes = static_cast<uint32_t>(size);
  } else if (k > 1) {
    ReduceOp op = plan.op() == ReduceOp::kAvg ? ReduceOp::kSum : plan.op();
    Reduce(plan.type(), op, inputs, k, dest, size / ElementSize(plan.type()));
    out_bytes = static_cast<uint32_t>(size);
  }
  if (root) {
    if (out_bytes != size) {
      return Internal("hfreduce: no data reached the root for chunk " + std::to_string(c) + " of " +
                      DescribeOp(plan.desc));
    }
    bool reduces =
        plan.kind() == CollectiveKind::kAllreduce || plan.kind() == CollectiveKind::kReduceScatter;
    if (reduces && plan.op() == ReduceOp::kAvg && size > 0) {
      DivideInPlace(plan.type(), dest, size / ElementSize(plan.type()), config_.world_size);
    }
  }

  seg_.input_free(slot).store(g + 1, std::memory_order_release);
  if (config_.num_nodes > 1) FreeReducerRings(t, ti);
  if (root) {
    seg_.result_pending(slot).store(static_cast<uint32_t>(local + children),
                                    std::memory_order_release);
    seg_.result_filled(slot).store(g + 1, std::memory_order_release);
  } else {
    up->bytes[es].store(out_bytes, std::memory_order_release);
    up->filled[es].store(ti + 1, std::memory_order_release);
  }
  seg_.header().doorbell.Ring();
  return Status::Ok();
}

Status NodeEngine::ReduceTowardOwner(const OpPlan& plan, uint32_t c, const Route& route,
                                     Clock::time_point deadline) {
  const uint32_t g = plan.first_chunk + c;
  const int slot = static_cast<int>(g % slots_);
  const int t = config_.num_nodes > 1 ? OpPlan::TreeOf(c) : 0;
  const uint32_t ti = plan.TreeIndex(c);
  const uint32_t es = ti % slots_;
  const int local = seg_.local_size();
  const int children = config_.num_nodes > 1 ? Children(t) : 0;
  const bool owner = route.owner == config_.node_index;
  // Where the sum goes: one hop toward the owner, or (at the owner) the result slot.
  EdgeRing* out = nullptr;
  if (route.up) out = up_[t].get();
  for (int i = 0; i < children; ++i) {
    if (route.child_out[i]) out = to_child_[t][i].get();
  }
  FF_RETURN_IF_ERROR(Wait(
      [&] {
        for (int lr = 0; lr < local; ++lr) {
          if (seg_.input_filled(lr, slot).load(std::memory_order_acquire) != g + 1) return false;
        }
        for (int i = 0; i < children; ++i) {
          if (route.child_in[i] &&
              from_child_[t][i]->filled[es].load(std::memory_order_acquire) != ti + 1) {
            return false;
          }
        }
        if (route.down && from_parent_[t]->filled[es].load(std::memory_order_acquire) != ti + 1) {
          return false;
        }
        if (out && !StampReached(out->freed[es].load(std::memory_order_acquire), ti - slots_ + 1)) {
          return false;
        }
        return ResultSlotFree(g);
      },
      deadline,
      [&] { return "the inputs of chunk " + std::to_string(c) + " of " + DescribeOp(plan.desc); }));

  const std::size_t size = plan.ChunkSize(c);
  const void* inputs[kMaxLocalRanks + 3];
  int k = 0;
  for (int lr = 0; lr < local; ++lr)
    inputs[k++] = seg_.input(lr, slot);
  for (int i = 0; i < children; ++i) {
    if (route.child_in[i]) inputs[k++] = from_child_[t][i]->slot(es);
  }
  if (route.down) inputs[k++] = from_parent_[t]->slot(es);
  char* dest = out ? out->slot(es) : seg_.result(slot);
  if (size > 0) {
    if (k == 1) {
      std::memcpy(dest, inputs[0], size);
    } else {
      ReduceOp op = plan.op() == ReduceOp::kAvg ? ReduceOp::kSum : plan.op();
      Reduce(plan.type(), op, inputs, k, dest, size / ElementSize(plan.type()));
    }
    if (owner && plan.op() == ReduceOp::kAvg) {
      DivideInPlace(plan.type(), dest, size / ElementSize(plan.type()), config_.world_size);
    }
  }
  seg_.input_free(slot).store(g + 1, std::memory_order_release);
  if (config_.num_nodes > 1) FreeReducerRings(t, ti);
  if (out) {
    out->bytes[es].store(static_cast<uint32_t>(size), std::memory_order_release);
    out->filled[es].store(ti + 1, std::memory_order_release);
  }
  // The local ranks go through every chunk's result slot; only the owner's holds data.
  seg_.result_pending(slot).store(static_cast<uint32_t>(local), std::memory_order_release);
  seg_.result_filled(slot).store(g + 1, std::memory_order_release);
  seg_.header().doorbell.Ring();
  return Status::Ok();
}

Status NodeEngine::StartFromOwner(const OpPlan& plan, uint32_t c, const Route& route,
                                  Clock::time_point deadline) {
  const uint32_t g = plan.first_chunk + c;
  const int slot = static_cast<int>(g % slots_);
  const int t = config_.num_nodes > 1 ? OpPlan::TreeOf(c) : 0;
  const uint32_t ti = plan.TreeIndex(c);
  const int local = seg_.local_size();
  const bool owner = route.owner == config_.node_index;
  // Every local rank posts every chunk (only the owning rank with data); the owner's node also
  // needs the result slot, which it fills and the network threads pass on.
  FF_RETURN_IF_ERROR(Wait(
      [&] {
        for (int lr = 0; lr < local; ++lr) {
          if (seg_.input_filled(lr, slot).load(std::memory_order_acquire) != g + 1) return false;
        }
        return !owner || ResultSlotFree(g);
      },
      deadline,
      [&] { return "the inputs of chunk " + std::to_string(c) + " of " + DescribeOp(plan.desc); }));
  if (owner) {
    const int owner_rank = plan.OwnerRank(c);
    int owner_local = -1;
    for (int lr = 0; lr < local; ++lr) {
      if (config_.local_global_ranks[lr] == owner_rank) owner_local = lr;
    }
    if (owner_local < 0) {
      return Internal("hfreduce: rank " + std::to_string(owner_rank) + " is not on node " +
                      std::to_string(config_.node_index));
    }
    std::memcpy(seg_.result(slot), seg_.input(owner_local, slot), plan.ChunkSize(c));
    int outgoing = route.up ? 1 : 0;
    for (int i = 0; i < 2; ++i)
      outgoing += route.child_out[i] ? 1 : 0;
    seg_.result_pending(slot).store(static_cast<uint32_t>(local + outgoing),
                                    std::memory_order_release);
    seg_.result_filled(slot).store(g + 1, std::memory_order_release);
  }
  seg_.input_free(slot).store(g + 1, std::memory_order_release);
  if (config_.num_nodes > 1) FreeReducerRings(t, ti);
  seg_.header().doorbell.Ring();
  return Status::Ok();
}

// ---- Network threads --------------------------------------------------------------------------

LinkCounters* NodeEngine::LinkOf(int node) const {
  const auto i = static_cast<std::size_t>(node);
  return LinkCountersOf(i < config_.node_labels.size() && !config_.node_labels[i].empty()
                            ? config_.node_labels[i]
                            : std::to_string(node));
}

template <typename Check, typename Dest>
Status NodeEngine::RecvFrame(Connection& conn, LinkCounters* link, FrameHeader* h,
                             const Check& check, const Dest& dest) {
  const auto began = Clock::now();
  FF_RETURN_IF_ERROR(conn.Recv(h, sizeof *h));
  const auto first = Clock::now();
  FF_RETURN_IF_ERROR(check(*h));
  if (h->bytes > 0) FF_RETURN_IF_ERROR(conn.Recv(dest(*h), h->bytes));
  const auto last = Clock::now();
  auto ns = [](Clock::duration d) {
    return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(d).count());
  };
  link->Add(h->bytes, ns(first - began), ns(last - first));
  return Status::Ok();
}

bool NodeEngine::NextPlan(std::size_t index, OpPlan* plan) {
  UniqueLock lock(&plans_mu_);
  while (true) {
    if (stop_ || seg_.aborted()) return false;
    if (plans_accepted_ > index) {
      *plan = plans_[index % kPlanRing];
      return true;
    }
    plans_cv_.wait_for(lock, std::chrono::milliseconds(50));
  }
}

void NodeEngine::ForEachTreeChunk(int id, int t,
                                  const std::function<Status(const OpPlan&, uint32_t, uint32_t,
                                                             uint32_t, Clock::time_point)>& body) {
  for (std::size_t index = 0;; ++index) {
    {
      MutexLock lock(&plans_mu_);
      progress_[static_cast<std::size_t>(id)] = index;
    }
    plans_cv_.notify_all();
    OpPlan plan;
    if (!NextPlan(index, &plan)) return;
    auto deadline = Clock::now() + config_.timeout;
    for (uint32_t c = 0; c < plan.num_chunks; ++c) {
      if (OpPlan::TreeOf(c) != t) continue;
      Status st = body(plan, c, plan.first_chunk + c, plan.TreeIndex(c), deadline);
      if (!st.ok()) {
        if (!stop_) Fail(st);
        return;
      }
    }
  }
}

Status NodeEngine::ValidateFrame(const FrameHeader& h, const OpPlan& plan, uint32_t g,
                                 const std::string& peer) const {
  if (h.magic != kFrameMagic) {
    return DataLoss("hfreduce: garbage from " + peer + " (not an HFReduce frame)");
  }
  OpDesc theirs;
  theirs.op_seq = h.op_seq;
  theirs.kind = h.kind;
  theirs.dtype = h.dtype;
  theirs.redop = h.redop;
  theirs.root = h.root;
  theirs.count = h.count;
  if (!(theirs == plan.desc)) {
    return InvalidArgument("hfreduce: nodes disagree on operation " +
                           std::to_string(plan.desc.op_seq) + ": node " +
                           std::to_string(config_.node_index) + " called " + DescribeOp(plan.desc) +
                           ", its peer " + peer + " called " + DescribeOp(theirs));
  }
  if (h.chunk != g) {
    return DataLoss("hfreduce: " + peer + " sent chunk " + std::to_string(h.chunk) + ", expected " +
                    std::to_string(g));
  }
  return Status::Ok();
}

void NodeEngine::UpSender(int id, int t) {
  Connection& conn = *config_.parent[t];
  EdgeRing& up = *up_[t];
  ForEachTreeChunk(
      id, t,
      [&](const OpPlan& plan, uint32_t c, uint32_t g, uint32_t ti, Clock::time_point deadline) {
        uint32_t es = ti % slots_;
        Route route = RouteOf(plan, c, t);
        if (route.up && route.flow == Flow::kFromOwner) {
          // The chunk spreads out from our subtree: send the node's copy of it.
          int slot = static_cast<int>(g % slots_);
          FF_RETURN_IF_ERROR(Wait(
              [&] { return seg_.result_filled(slot).load(std::memory_order_acquire) == g + 1; },
              deadline, [&] { return "chunk " + std::to_string(c) + " to pass on"; }));
          auto bytes = static_cast<uint32_t>(plan.ChunkSize(c));
          FrameHeader h = MakeFrame(plan, g, bytes);
          FF_RETURN_IF_ERROR(conn.Send(&h, sizeof h, bytes > 0));
          if (bytes > 0) FF_RETURN_IF_ERROR(conn.Send(seg_.result(slot), bytes));
          seg_.result_pending(slot).fetch_sub(1, std::memory_order_acq_rel);
        } else if (route.up) {
          FF_RETURN_IF_ERROR(
              Wait([&] { return up.filled[es].load(std::memory_order_acquire) == ti + 1; },
                   deadline, [&] { return "the partial sum of chunk " + std::to_string(c); }));
          uint32_t bytes = up.bytes[es].load(std::memory_order_acquire);
          FrameHeader h = MakeFrame(plan, g, bytes);
          FF_RETURN_IF_ERROR(conn.Send(&h, sizeof h, bytes > 0));
          if (bytes > 0) FF_RETURN_IF_ERROR(conn.Send(up.slot(es), bytes));
        }
        up.freed[es].store(ti + 1, std::memory_order_release);  // used, or skipped
        seg_.header().doorbell.Ring();
        return Status::Ok();
      });
}

void NodeEngine::DownReceiver(int id, int t) {
  Connection& conn = *config_.parent[t];
  EdgeRing& from_parent = *from_parent_[t];
  LinkCounters* link = LinkOf(tree_[t].parent);
  ForEachTreeChunk(
      id, t,
      [&](const OpPlan& plan, uint32_t c, uint32_t g, uint32_t ti, Clock::time_point deadline) {
        Route route = RouteOf(plan, c, t);
        if (!route.down) return Status::Ok();
        int slot = static_cast<int>(g % slots_);
        uint32_t es = ti % slots_;
        const bool partial = route.flow == Flow::kToOwner;
        FF_RETURN_IF_ERROR(Wait(
            [&] {
              return partial ? StampReached(from_parent.freed[es].load(std::memory_order_acquire),
                                            ti - slots_ + 1)
                             : ResultSlotFree(g);
            },
            deadline, [&] { return "a free slot for chunk " + std::to_string(c); }));
        FrameHeader h;
        Status received = RecvFrame(
            conn, link, &h,
            [&](const FrameHeader& hh) {
              FF_RETURN_IF_ERROR(ValidateFrame(hh, plan, g, conn.peer()));
              std::size_t expected =
                  plan.kind() == CollectiveKind::kBarrier ? 0 : plan.ChunkSize(c);
              if (hh.bytes != expected) {
                return DataLoss("hfreduce: " + conn.peer() + " sent " + std::to_string(hh.bytes) +
                                " bytes for chunk " + std::to_string(c) + ", expected " +
                                std::to_string(expected));
              }
              return Status::Ok();
            },
            [&](const FrameHeader&) -> void* {
              return partial ? from_parent.slot(es) : seg_.result(slot);
            });
        if (!received.ok()) return received;
        if (partial) {
          from_parent.bytes[es].store(h.bytes, std::memory_order_release);
          from_parent.filled[es].store(ti + 1, std::memory_order_release);
        } else {
          // Every local rank copies it out, and every child gets it.
          seg_.result_pending(slot).store(static_cast<uint32_t>(seg_.local_size() + Children(t)),
                                          std::memory_order_release);
          seg_.result_filled(slot).store(g + 1, std::memory_order_release);
        }
        seg_.header().doorbell.Ring();
        return Status::Ok();
      });
}

void NodeEngine::ChildReceiver(int id, int t, int i) {
  Connection& conn = *config_.children[t][i];
  EdgeRing& ring = *from_child_[t][i];
  LinkCounters* link = LinkOf(tree_[t].children[static_cast<std::size_t>(i)]);
  ForEachTreeChunk(
      id, t,
      [&](const OpPlan& plan, uint32_t c, uint32_t g, uint32_t ti, Clock::time_point deadline) {
        Route route = RouteOf(plan, c, t);
        if (!route.child_in[i]) return Status::Ok();
        uint32_t es = ti % slots_;
        int slot = static_cast<int>(g % slots_);
        const bool spread = route.flow == Flow::kFromOwner;
        FF_RETURN_IF_ERROR(Wait(
            [&] {
              return spread ? ResultSlotFree(g)
                            : StampReached(ring.freed[es].load(std::memory_order_acquire),
                                           ti - slots_ + 1);
            },
            deadline, [&] { return "a free receive slot for chunk " + std::to_string(c); }));
        FrameHeader h;
        Status received = RecvFrame(
            conn, link, &h,
            [&](const FrameHeader& hh) {
              FF_RETURN_IF_ERROR(ValidateFrame(hh, plan, g, conn.peer()));
              // A tree-flow partial may be empty (a subtree without data for the chunk).
              if (hh.bytes != plan.ChunkSize(c) && (spread || hh.bytes != 0)) {
                return DataLoss("hfreduce: " + conn.peer() + " sent " + std::to_string(hh.bytes) +
                                " bytes for chunk " + std::to_string(c) + ", expected " +
                                std::to_string(plan.ChunkSize(c)));
              }
              return Status::Ok();
            },
            [&](const FrameHeader&) -> void* {
              return spread ? seg_.result(slot) : ring.slot(es);
            });
        if (!received.ok()) return received;
        if (spread) {
          // Every local rank, the parent and the other child get it.
          int outgoing = (route.up ? 1 : 0) + (route.child_out[1 - i] ? 1 : 0);
          seg_.result_pending(slot).store(static_cast<uint32_t>(seg_.local_size() + outgoing),
                                          std::memory_order_release);
          seg_.result_filled(slot).store(g + 1, std::memory_order_release);
        } else {
          ring.bytes[es].store(h.bytes, std::memory_order_release);
          ring.filled[es].store(ti + 1, std::memory_order_release);
        }
        seg_.header().doorbell.Ring();
        return Status::Ok();
      });
}

void NodeEngine::DownSender(int id, int t, int i) {
  Connection& conn = *config_.children[t][i];
  EdgeRing& to_child = *to_child_[t][i];
  ForEachTreeChunk(
      id, t,
      [&](const OpPlan& plan, uint32_t c, uint32_t g, uint32_t ti, Clock::time_point deadline) {
        uint32_t es = ti % slots_;
        Route route = RouteOf(plan, c, t);
        if (route.child_out[i] && route.flow == Flow::kToOwner) {
          FF_RETURN_IF_ERROR(
              Wait([&] { return to_child.filled[es].load(std::memory_order_acquire) == ti + 1; },
                   deadline, [&] { return "the partial sum of chunk " + std::to_string(c); }));
          uint32_t bytes = to_child.bytes[es].load(std::memory_order_acquire);
          FrameHeader h = MakeFrame(plan, g, bytes);
          FF_RETURN_IF_ERROR(conn.Send(&h, sizeof h, bytes > 0));
          if (bytes > 0) FF_RETURN_IF_ERROR(conn.Send(to_child.slot(es), bytes));
        } else if (route.child_out[i]) {
          int slot = static_cast<int>(g % slots_);
          FF_RETURN_IF_ERROR(Wait(
              [&] { return seg_.result_filled(slot).load(std::memory_order_acquire) == g + 1; },
              deadline, [&] { return "the result of chunk " + std::to_string(c); }));
          auto bytes = static_cast<uint32_t>(
              plan.kind() == CollectiveKind::kBarrier ? 0 : plan.ChunkSize(c));
          FrameHeader h = MakeFrame(plan, g, bytes);
          FF_RETURN_IF_ERROR(conn.Send(&h, sizeof h, bytes > 0));
          if (bytes > 0) FF_RETURN_IF_ERROR(conn.Send(seg_.result(slot), bytes));
          seg_.result_pending(slot).fetch_sub(1, std::memory_order_acq_rel);
        }
        to_child.freed[es].store(ti + 1, std::memory_order_release);  // used, or skipped
        seg_.header().doorbell.Ring();
        return Status::Ok();
      });
}

void NodeEngine::Monitor() {
  // Sleeps until the node aborts (or the engine stops), looking every 100 ms for a neighbour
  // gone while no network thread of ours reads from it (they all wait on a local rank, say); then
  // cuts every connection so that the neighbouring nodes fail at once rather than at their
  // timeout.
  constexpr auto kEvery = std::chrono::milliseconds(100);
  Doorbell& bell = seg_.header().doorbell;
  std::vector<std::size_t> seen(edges_.size(), kNotSeen);
  auto next_check = Clock::now() + kEvery;
  while (!stop_ && !seg_.aborted()) {
    uint32_t rung = bell.Value();
    if (stop_ || seg_.aborted()) break;
    if (!edges_.empty() && Clock::now() >= next_check) {
      if (Status st = CheckNeighbours(&seen); !st.ok()) {
        Fail(st);
        return;
      }
      next_check = Clock::now() + kEvery;
    }
    bell.Wait(rung, kEvery);
  }
  if (!stop_) Fail(seg_.AbortStatus());
}

Status NodeEngine::CheckNeighbours(std::vector<std::size_t>* seen) {
  for (std::size_t e = 0; e < edges_.size(); ++e) {
    auto [conn, id] = edges_[e];
    const bool gone = conn->PeerGone();
    std::size_t progress = 0;
    bool behind = false;
    {
      MutexLock lock(&plans_mu_);
      for (int k : {id, id + 1}) {
        progress += progress_[static_cast<std::size_t>(k)];
        behind = behind || progress_[static_cast<std::size_t>(k)] != plans_accepted_;
      }
      // An operation some local rank started that the reducer has not accepted yet (it waits for
      // the node's other ranks) is in flight too.
      for (int lr = 0; lr < seg_.local_size(); ++lr) {
        behind = behind ||
                 seg_.header().ranks[lr].desc_seq.load(std::memory_order_acquire) > plans_accepted_;
      }
    }
    // A peer that finished its part of the last operation and left is no failure (nothing more
    // is owed on the edge); one seen gone twice, 100 ms apart, with the edge's threads stuck, is.
    if (!gone || !behind) {
      (*seen)[e] = kNotSeen;
    } else if ((*seen)[e] != progress) {
      (*seen)[e] = progress;
    } else {
      return Status(StatusCode::kAborted,
                    "hfreduce: " + conn->peer() + " closed its connection during a collective");
    }
  }
  return Status::Ok();
}

}  // namespace ff::hfreduce
