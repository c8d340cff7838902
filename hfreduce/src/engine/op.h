// One collective as every stage of the pipeline sees it: what was asked (OpDesc), where its chunks
// sit in the global chunk sequence, and the frame header that carries a chunk between nodes.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>

#include "hfreduce/types.h"
#include "shm/node_segment.h"

namespace ff::hfreduce {

enum class CollectiveKind : uint8_t {
  kAllreduce = 1,
  kBroadcast = 2,
  kBarrier = 3,
  kReduceScatter = 4,  // count = elements each rank receives; the buffer is count * world
  kAllgather = 5,      // count = elements each rank sends; the buffer is count * world
};

std::string DescribeOp(const OpDesc& desc);  // "allreduce of 100 x fp32 (sum)"

// How a chunk travels between nodes.
//   kTree:      up each tree to its root, reduced on the way, then down to every node
//               (allreduce, barrier, empty operations): two crossings of every tree edge.
//   kToOwner:   toward the node that owns the chunk, reduced on the way (reduce-scatter): every
//               edge carries the chunk once, in one direction.
//   kFromOwner: out from the owner to every other node (allgather, broadcast): once per edge.
enum class Flow : uint8_t { kTree, kToOwner, kFromOwner };

struct OpPlan {
  OpDesc desc;
  uint32_t first_chunk = 0;     // global chunk number g of chunk 0
  uint32_t num_chunks = 1;      // at least 1: an empty operation still synchronises
  std::size_t bytes = 0;        // of the whole (reduced or gathered) buffer
  std::size_t shard_bytes = 0;  // reduce-scatter / allgather: one rank's piece
  std::size_t chunk_bytes = 0;
  // Reduce-scatter / allgather: chunks never straddle two ranks' pieces; rank r's piece is chunks
  // [r * chunks_per_shard, (r + 1) * chunks_per_shard). 0 for other operations.
  uint32_t chunks_per_shard = 0;

  CollectiveKind kind() const { return static_cast<CollectiveKind>(desc.kind); }
  DataType type() const { return static_cast<DataType>(desc.dtype); }
  ReduceOp op() const { return static_cast<ReduceOp>(desc.redop); }
  std::size_t ChunkOffset(uint32_t c) const {
    if (chunks_per_shard == 0) return static_cast<std::size_t>(c) * chunk_bytes;
    return (c / chunks_per_shard) * shard_bytes + (c % chunks_per_shard) * chunk_bytes;
  }
  std::size_t ChunkSize(uint32_t c) const {
    if (chunks_per_shard == 0) {
      std::size_t off = ChunkOffset(c);
      return off >= bytes ? 0 : std::min(chunk_bytes, bytes - off);
    }
    std::size_t within = static_cast<std::size_t>(c % chunks_per_shard) * chunk_bytes;
    return std::min(chunk_bytes, shard_bytes - within);
  }
  Flow flow() const {
    if (kind() == CollectiveKind::kReduceScatter && chunks_per_shard > 0) return Flow::kToOwner;
    if (kind() == CollectiveKind::kAllgather && chunks_per_shard > 0) return Flow::kFromOwner;
    if (kind() == CollectiveKind::kBroadcast && bytes > 0) return Flow::kFromOwner;
    return Flow::kTree;
  }
  // The global rank whose chunk c is (its piece of a reduce-scatter or allgather, the root of a
  // broadcast); -1 for tree-flow operations.
  int OwnerRank(uint32_t c) const {
    if (chunks_per_shard > 0) return static_cast<int>(c / chunks_per_shard);
    if (kind() == CollectiveKind::kBroadcast) return desc.root;
    return -1;
  }
  uint32_t end_chunk() const { return first_chunk + num_chunks; }

  // Across nodes, chunk c travels in tree c % 2 (by its index in the operation, so the same call
  // always sums in the same order: results are reproducible run to run). first_in_tree[t] counts
  // the chunks tree t carried before this operation; set by the leader when it accepts the plan.
  uint32_t first_in_tree[2] = {0, 0};
  static int TreeOf(uint32_t c) { return static_cast<int>(c % 2); }
  // The chunk's position in its tree's sequence (what the tree's edge rings are indexed by).
  uint32_t TreeIndex(uint32_t c) const { return first_in_tree[TreeOf(c)] + c / 2; }
};

// Builds the plan of `desc` whose chunks start at global chunk `first_chunk`.
OpPlan MakePlan(const OpDesc& desc, uint32_t first_chunk, std::size_t chunk_bytes, int world_size);

// Sent before every chunk between node leaders (little-endian, as both ends are x86-64).
struct FrameHeader {
  uint32_t magic;
  uint32_t op_seq;
  uint32_t chunk;  // global chunk number g
  uint32_t bytes;  // payload bytes that follow (0: this subtree has no data for the chunk)
  uint8_t kind, dtype, redop, reserved;
  int32_t root;
  uint64_t count;
};
static_assert(sizeof(FrameHeader) == 32);
constexpr uint32_t kFrameMagic = 0x48465246;  // "HFRF"

FrameHeader MakeFrame(const OpPlan& plan, uint32_t g, uint32_t bytes);

}  // namespace ff::hfreduce
