// The shared-memory segment of one node: what the node's local ranks and its leader's reducer
// and network threads hand chunks through.
//
// Layout (one POSIX shm object, created by the leader, opened by the other local ranks):
//   NodeHeader         geometry, the doorbell, the abort flag and reason, per-rank op descriptors
//   stamps             per (rank, slot) "input filled", per slot "input free", per slot
//                      "result filled" and "result pending"
//   input slots        [local_size][slots][slot_bytes]: each rank's copy-in ring
//   result slots       [slots][slot_bytes]: the node's results, copied out by every rank
//   small buffers      [local_size][2][kSmallBytes]: the latency path's inputs (one-node
//                      allreduces of at most kSmallBytes; RankWorker::ExecuteSmall)
//
// Chunks are numbered by a global counter g (never reset between operations) and use slot
// g % slots. Stamps hold g + 1 of the chunk a slot last held, so waits compare stamps to the
// chunk they need and no stamp is ever reset. All fields are atomics in a MAP_SHARED mapping.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "common/result.h"
#include "shm/doorbell.h"

namespace ff::hfreduce {

constexpr int kMaxLocalRanks = 64;
// The largest allreduce the latency path takes (each rank's input, in each of two buffers).
constexpr std::size_t kSmallBytes = std::size_t{1} << 20;

// What one rank asked of an operation; all ranks must ask the same.
struct OpDesc {
  uint32_t op_seq = 0;  // 1, 2, ... per communicator
  uint8_t kind = 0;     // CollectiveKind
  uint8_t dtype = 0;
  uint8_t redop = 0;
  uint8_t reserved = 0;
  int32_t root = -1;  // broadcast root (global rank)
  uint32_t reserved2 = 0;
  uint64_t count = 0;  // elements

  bool operator==(const OpDesc&) const = default;
};

struct alignas(64) RankSlot {
  std::atomic<uint32_t> desc_seq{0};  // op_seq of `desc`, stored after `desc` is written
  OpDesc desc;
  std::atomic<int32_t> pid{0};
  // The latency path: the rank's small operations are numbered 1, 2, ... (small_desc.op_seq);
  // `small_posted` is the last whose input (and small_desc of its parity) it wrote, `small_read`
  // the last whose every input it has read. A rank may be one operation ahead of another, never
  // two: buffers and descriptors come in two, by the operation's parity.
  alignas(64) std::atomic<uint32_t> small_posted{0};
  std::atomic<uint32_t> small_read{0};
  OpDesc small_desc[2];
};

struct alignas(64) NodeHeader {
  std::atomic<uint64_t> magic;  // written last by the creator
  uint32_t version;
  uint32_t local_size;
  uint32_t slots;
  uint32_t small_bytes;  // the latency path's limit for this node (0: off), set by the leader
  uint64_t slot_bytes;
  alignas(64) Doorbell doorbell;
  // The latency path's own: its rings must not wake the leader's reducer and network threads,
  // which sleep on `doorbell` between operations (a wake-up costs more than a small allreduce).
  alignas(64) Doorbell small_doorbell;
  alignas(64) std::atomic<uint32_t> aborted;  // 0 healthy, 1 aborting, 2 reason written
  int32_t abort_code;                         // a StatusCode
  char abort_reason[512];
  RankSlot ranks[kMaxLocalRanks];
};

class NodeSegment {
 public:
  // The leader creates the segment: anonymous memory (memfd; `label` names it in /proc), never a
  // file in /dev/shm, so a process killed at any moment leaves nothing behind. The others open
  // it at path() while the leader keeps it published.
  static Result<std::unique_ptr<NodeSegment>> Create(const std::string& label, int local_size,
                                                     int slots, std::size_t slot_bytes);
  // Other local ranks open it at the leader's path(); the geometry is read from the header and
  // checked.
  static Result<std::unique_ptr<NodeSegment>> Open(const std::string& path);
  ~NodeSegment();

  // Where the other local ranks open it ("/proc/<pid>/fd/<n>"; empty once unpublished).
  const std::string& path() const { return path_; }
  // Stops publishing it (once every local rank has it mapped): the mappings stay valid.
  void Unpublish();

  NodeHeader& header() { return *header_; }
  int local_size() const { return static_cast<int>(header_->local_size); }
  int slots() const { return static_cast<int>(header_->slots); }
  std::size_t slot_bytes() const { return header_->slot_bytes; }
  std::size_t mapped_bytes() const { return size_; }

  std::atomic<uint32_t>& input_filled(int local_rank, int slot) {
    return input_filled_[local_rank * slots() + slot];
  }
  std::atomic<uint32_t>& input_free(int slot) { return input_free_[slot]; }
  std::atomic<uint32_t>& result_filled(int slot) { return result_filled_[slot]; }
  std::atomic<uint32_t>& result_pending(int slot) { return result_pending_[slot]; }
  char* input(int local_rank, int slot) {
    return inputs_ + (static_cast<std::size_t>(local_rank) * slots() + slot) * slot_bytes();
  }
  char* result(int slot) { return results_ + static_cast<std::size_t>(slot) * slot_bytes(); }
  // Local rank `local_rank`'s input buffer `parity` (0 or 1) of the latency path.
  char* small(int local_rank, int parity) {
    return smalls_ + (static_cast<std::size_t>(local_rank) * 2 + parity) * kSmallBytes;
  }

  // Marks the node's operations failed (the first status wins) and rings the doorbell.
  void Abort(const Status& status);
  // OK while healthy; the status that aborted the node otherwise.
  Status AbortStatus() const;
  bool aborted() const { return header_->aborted.load(std::memory_order_acquire) != 0; }

 private:
  NodeSegment(void* base, std::size_t size);
  void Bind();

  char* base_;
  std::size_t size_;
  NodeHeader* header_;
  int fd_ = -1;  // the leader's, while published
  std::string path_;
  std::atomic<uint32_t>* input_filled_ = nullptr;
  std::atomic<uint32_t>* input_free_ = nullptr;
  std::atomic<uint32_t>* result_filled_ = nullptr;
  std::atomic<uint32_t>* result_pending_ = nullptr;
  char* inputs_ = nullptr;
  char* results_ = nullptr;
  char* smalls_ = nullptr;
};

// True when stamp `have` (g + 1 of the chunk held) is at or past `want`, in wrapping arithmetic.
inline bool StampReached(uint32_t have, uint32_t want) {
  return static_cast<int32_t>(have - want) >= 0;
}

}  // namespace ff::hfreduce
