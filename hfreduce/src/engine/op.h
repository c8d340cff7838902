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

struct OpPlan {
  OpDesc desc;
  uint32_t first_chunk = 0;     // global chunk number g of chunk 0
  uint32_t num_chunks = 1;      // at least 1: an empty operation still synchronises
  std::size_t bytes = 0;        // of the whole (reduced or gathered) buffer
  std::size_t shard_bytes = 0;  // reduce-scatter / allgather: one rank's piece
  std::size_t chunk_bytes = 0;

  CollectiveKind kind() const { return static_cast<CollectiveKind>(desc.kind); }
  DataType type() const { return static_cast<DataType>(desc.dtype); }
  ReduceOp op() const { return static_cast<ReduceOp>(desc.redop); }
  std::size_t ChunkOffset(uint32_t c) const { return static_cast<std::size_t>(c) * chunk_bytes; }
  std::size_t ChunkSize(uint32_t c) const {
    std::size_t off = ChunkOffset(c);
    return off >= bytes ? 0 : std::min(chunk_bytes, bytes - off);
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

// The part of chunk c that falls in rank `rank`'s piece: [*begin, *end) as offsets in the whole
// buffer (empty when begin == end).
void ShardOverlap(const OpPlan& plan, uint32_t c, int rank, std::size_t* begin, std::size_t* end);

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
