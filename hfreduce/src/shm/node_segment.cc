#include "shm/node_segment.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "shm/numa.h"

namespace ff::hfreduce {
namespace {

constexpr uint64_t kMagic = 0x4846526564756365ull;  // "HFReduce"
constexpr uint32_t kVersion = 2;
constexpr std::size_t kPage = 4096;

std::size_t RoundUp(std::size_t n, std::size_t to) {
  return (n + to - 1) / to * to;
}

struct Geometry {
  std::size_t stamps_offset, data_offset, total;
};

Geometry Compute(int local_size, int slots, std::size_t slot_bytes) {
  Geometry g;
  g.stamps_offset = RoundUp(sizeof(NodeHeader), 64);
  std::size_t stamps =
      sizeof(std::atomic<uint32_t>) * (static_cast<std::size_t>(local_size) * slots + 3 * slots);
  g.data_offset = RoundUp(g.stamps_offset + stamps, kPage);
  g.total = g.data_offset + (static_cast<std::size_t>(local_size) + 1) * slots * slot_bytes +
            static_cast<std::size_t>(local_size) * 2 * kSmallBytes;
  return g;
}

Result<void*> Map(int fd, std::size_t size, const std::string& name) {
  void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
  if (p == MAP_FAILED) return Status::FromErrno(errno, "hfreduce: mmap shared memory " + name);
  // Fewer TLB misses and page faults where the kernel allows huge pages for shared memory.
  madvise(p, size, MADV_HUGEPAGE);
  return p;
}

}  // namespace

NodeSegment::NodeSegment(void* base, std::size_t size)
    : base_(static_cast<char*>(base)), size_(size), header_(static_cast<NodeHeader*>(base)) {}

NodeSegment::~NodeSegment() {
  Unpublish();
  munmap(base_, size_);
}

void NodeSegment::Unpublish() {
  if (fd_ >= 0) close(fd_);
  fd_ = -1;
  path_.clear();
}

void NodeSegment::Bind() {
  Geometry g = Compute(local_size(), slots(), slot_bytes());
  auto* stamps = reinterpret_cast<std::atomic<uint32_t>*>(base_ + g.stamps_offset);
  input_filled_ = stamps;
  input_free_ = input_filled_ + static_cast<std::size_t>(local_size()) * slots();
  result_filled_ = input_free_ + slots();
  result_pending_ = result_filled_ + slots();
  inputs_ = base_ + g.data_offset;
  results_ = inputs_ + static_cast<std::size_t>(local_size()) * slots() * slot_bytes();
  smalls_ = results_ + static_cast<std::size_t>(slots()) * slot_bytes();
}

Result<std::unique_ptr<NodeSegment>> NodeSegment::Create(const std::string& label, int local_size,
                                                         int slots, std::size_t slot_bytes) {
  if (local_size < 1 || local_size > kMaxLocalRanks) {
    return InvalidArgument("hfreduce: " + std::to_string(local_size) +
                           " local ranks; at most 64 per node");
  }
  Geometry g = Compute(local_size, slots, slot_bytes);
  const std::string& name = label;
  int fd = memfd_create(label.c_str(), MFD_CLOEXEC);
  if (fd < 0) return Status::FromErrno(errno, "hfreduce: create shared memory " + name);
  if (ftruncate(fd, static_cast<off_t>(g.total)) != 0) {
    int err = errno;
    close(fd);
    return Status::FromErrno(
        err, "hfreduce: size shared memory " + name + " to " + std::to_string(g.total) + " bytes");
  }
  Result<void*> p = Map(fd, g.total, name);
  if (!p.ok()) {
    close(fd);
    return p.status();
  }
  std::unique_ptr<NodeSegment> seg(new NodeSegment(*p, g.total));
  seg->fd_ = fd;
  seg->path_ = "/proc/" + std::to_string(getpid()) + "/fd/" + std::to_string(fd);
  // The mapping is zero-filled: every atomic starts at 0. Fill the geometry, then the magic last.
  NodeHeader& h = seg->header();
  h.version = kVersion;
  h.local_size = static_cast<uint32_t>(local_size);
  h.slots = static_cast<uint32_t>(slots);
  h.slot_bytes = slot_bytes;
  seg->Bind();
  InterleaveMemory(seg->input(0, 0), static_cast<std::size_t>(local_size) * slots * slot_bytes);
  BindMemoryHere(seg->result(0), static_cast<std::size_t>(slots) * slot_bytes);
  std::atomic_thread_fence(std::memory_order_release);
  h.magic.store(kMagic, std::memory_order_release);
  return seg;
}

Result<std::unique_ptr<NodeSegment>> NodeSegment::Open(const std::string& path) {
  const std::string& name = path;
  int fd = open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) return Status::FromErrno(errno, "hfreduce: open shared memory " + name);
  struct stat st;
  if (fstat(fd, &st) != 0 || static_cast<std::size_t>(st.st_size) < sizeof(NodeHeader)) {
    close(fd);
    return FailedPrecondition("hfreduce: shared memory " + name + " is not initialised");
  }
  auto size = static_cast<std::size_t>(st.st_size);
  Result<void*> p = Map(fd, size, name);
  close(fd);
  FF_RETURN_IF_ERROR(p.status());
  std::unique_ptr<NodeSegment> seg(new NodeSegment(*p, size));
  NodeHeader& h = seg->header();
  if (h.magic.load(std::memory_order_acquire) != kMagic || h.version != kVersion) {
    return FailedPrecondition("hfreduce: shared memory " + name +
                              " has a foreign layout (another HFReduce version?)");
  }
  if (Compute(seg->local_size(), seg->slots(), seg->slot_bytes()).total != size) {
    return FailedPrecondition("hfreduce: shared memory " + name + " has an inconsistent size");
  }
  seg->Bind();
  return seg;
}

void NodeSegment::Abort(const Status& status) {
  uint32_t expected = 0;
  if (header_->aborted.compare_exchange_strong(expected, 1, std::memory_order_acq_rel)) {
    const std::string& reason = status.message();
    std::size_t n = std::min(reason.size(), sizeof(header_->abort_reason) - 1);
    std::memcpy(header_->abort_reason, reason.data(), n);
    header_->abort_reason[n] = '\0';
    header_->abort_code = static_cast<int32_t>(status.code());
    header_->aborted.store(2, std::memory_order_release);  // reason complete
  }
  header_->doorbell.Ring();
  header_->small_doorbell.Ring();
}

Status NodeSegment::AbortStatus() const {
  uint32_t state = header_->aborted.load(std::memory_order_acquire);
  if (state == 0) return Status::Ok();
  if (state == 1) return Status(StatusCode::kAborted, "hfreduce: communicator aborted");
  return Status(static_cast<StatusCode>(header_->abort_code), header_->abort_reason);
}

}  // namespace ff::hfreduce
