#include "transport/shm.h"

#include <fcntl.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <random>

#include "shm/process.h"

namespace ff::hfreduce {
namespace {

using Clock = std::chrono::steady_clock;

constexpr uint64_t kMagic = 0x4846503253686d31ull;  // "HFP2Shm1"
constexpr uint32_t kVersion = 1;
constexpr std::size_t kPage = 4096;
// A Send copies at most this much before it lets the receiver see it: the two copies overlap.
constexpr std::size_t kPieceBytes = std::size_t{1} << 20;
// Before sleeping, a waiter looks again for this long, yielding the CPU between looks: a message's
// reply often comes sooner than a futex wake-up would.
constexpr auto kYieldFor = std::chrono::microseconds(50);
// A sleeping waiter wakes at least this often to check that its peer still runs.
constexpr auto kSleepSlice = std::chrono::milliseconds(10);
constexpr auto kLivenessCheck = std::chrono::milliseconds(100);

// Each process's probe word: the peer reads it to learn whether it can read this process's memory.
const uint64_t& ProbeWord() {
  static const uint64_t word =
      std::random_device{}() | (uint64_t{std::random_device{}()} << 32) | 1;
  return word;
}

std::size_t HeaderBytes();

// Reads `n` bytes at `remote` in process `pid` into `local`.
Status ReadPeer(pid_t pid, void* local, uint64_t remote, std::size_t n) {
  auto* out = static_cast<char*>(local);
  while (n > 0) {
    iovec l{out, n};
    iovec r{reinterpret_cast<void*>(remote), n};
    ssize_t got = process_vm_readv(pid, &l, 1, &r, 1, 0);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) {
      return Status::FromErrno(got < 0 ? errno : EIO,
                               "hfreduce: read a message from process " + std::to_string(pid));
    }
    out += got;
    remote += static_cast<uint64_t>(got);
    n -= static_cast<std::size_t>(got);
  }
  return Status::Ok();
}

}  // namespace

struct alignas(64) ShmConnection::Ring {
  // Written by the producer.
  alignas(64) std::atomic<uint64_t> head{0};  // bytes written into the ring
  Doorbell data;                              // rung when head moves or a descriptor is posted
  std::atomic<uint64_t> direct_posted{0};     // sequence of the last direct descriptor
  std::atomic<uint64_t> direct_at{0};         // head when it was posted
  std::atomic<uint64_t> direct_addr{0};       // where its bytes lie, in the producer
  std::atomic<uint64_t> direct_len{0};
  // Written by the consumer.
  alignas(64) std::atomic<uint64_t> tail{0};  // bytes read out of the ring
  Doorbell space;                             // rung when tail moves or a descriptor was read
  std::atomic<uint64_t> direct_done{0};       // sequence of the last descriptor read whole
  // Whether the consumer can read the producer's memory: 0 not known yet, 1 yes, 2 no.
  std::atomic<uint32_t> consumer_reads_producer{0};
};

struct ShmConnection::Header {
  std::atomic<uint64_t> magic{0};  // stored last by the creator
  uint32_t version = 0;
  uint32_t reserved = 0;
  uint64_t ring_bytes = 0;
  std::atomic<int32_t> pid[2] = {};
  std::atomic<uint64_t> probe_addr[2] = {};
  std::atomic<uint64_t> probe_value[2] = {};
  std::atomic<uint32_t> closed{0};  // either side shut the connection down
  Ring ring[2];                     // ring[s]: side s to side 1 - s
};

namespace {
std::size_t HeaderBytes() {
  return (sizeof(ShmConnection::Header) + kPage - 1) / kPage * kPage;
}
std::size_t TotalBytes() {
  return HeaderBytes() + 2 * kShmRingBytes;
}
}  // namespace

ShmConnection::ShmConnection(void* base, std::size_t size, int side, std::size_t direct_bytes)
    : Connection("shared memory"),
      base_(static_cast<char*>(base)),
      size_(size),
      side_(side),
      direct_bytes_(direct_bytes) {}

ShmConnection::~ShmConnection() {
  Shutdown();
  munmap(base_, size_);
  if (fd_ >= 0) close(fd_);
}

ShmConnection::Ring& ShmConnection::out() {
  return reinterpret_cast<Header*>(base_)->ring[side_];
}
ShmConnection::Ring& ShmConnection::in() {
  return reinterpret_cast<Header*>(base_)->ring[1 - side_];
}
char* ShmConnection::out_data() {
  return base_ + HeaderBytes() + static_cast<std::size_t>(side_) * kShmRingBytes;
}
char* ShmConnection::in_data() {
  return base_ + HeaderBytes() + static_cast<std::size_t>(1 - side_) * kShmRingBytes;
}

Result<std::unique_ptr<ShmConnection>> ShmConnection::Create(std::size_t direct_bytes) {
  int fd = memfd_create("hfreduce-p2p", MFD_CLOEXEC);
  if (fd < 0) return Status::FromErrno(errno, "hfreduce: create point-to-point shared memory");
  const std::size_t total = TotalBytes();
  if (ftruncate(fd, static_cast<off_t>(total)) != 0) {
    int err = errno;
    close(fd);
    return Status::FromErrno(err, "hfreduce: size point-to-point shared memory");
  }
  void* p = mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
  if (p == MAP_FAILED) {
    int err = errno;
    close(fd);
    return Status::FromErrno(err, "hfreduce: map point-to-point shared memory");
  }
  std::unique_ptr<ShmConnection> c(new ShmConnection(p, total, 0, direct_bytes));
  c->fd_ = fd;
  c->path_ = "/proc/" + std::to_string(getpid()) + "/fd/" + std::to_string(fd);
  // The mapping is zero-filled: every atomic starts at 0.
  auto* h = new (p) Header();
  h->version = kVersion;
  h->ring_bytes = kShmRingBytes;
  h->pid[0].store(getpid(), std::memory_order_relaxed);
  h->probe_addr[0].store(reinterpret_cast<uint64_t>(&ProbeWord()), std::memory_order_relaxed);
  h->probe_value[0].store(ProbeWord(), std::memory_order_relaxed);
  h->magic.store(kMagic, std::memory_order_release);
  return c;
}

Result<std::unique_ptr<ShmConnection>> ShmConnection::Open(const std::string& path,
                                                           std::size_t direct_bytes) {
  // (Non-blocking: a path that names a FIFO must not hold the caller.)
  int fd = open(path.c_str(), O_RDWR | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return Status::FromErrno(errno, "hfreduce: open point-to-point memory " + path);
  struct stat st;
  const std::size_t total = TotalBytes();
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) ||
      static_cast<std::size_t>(st.st_size) != total) {
    close(fd);
    return FailedPrecondition("hfreduce: point-to-point memory " + path +
                              " has another size (another HFReduce version?)");
  }
  void* p = mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
  int err = errno;
  close(fd);
  if (p == MAP_FAILED) return Status::FromErrno(err, "hfreduce: map point-to-point memory " + path);
  std::unique_ptr<ShmConnection> c(new ShmConnection(p, total, 1, direct_bytes));
  auto* h = reinterpret_cast<Header*>(p);
  if (h->magic.load(std::memory_order_acquire) != kMagic || h->version != kVersion ||
      h->ring_bytes != kShmRingBytes) {
    return FailedPrecondition("hfreduce: point-to-point memory " + path +
                              " has a foreign layout (another HFReduce version?)");
  }
  h->pid[1].store(getpid(), std::memory_order_relaxed);
  h->probe_addr[1].store(reinterpret_cast<uint64_t>(&ProbeWord()), std::memory_order_relaxed);
  h->probe_value[1].store(ProbeWord(), std::memory_order_release);
  c->ProbePeer();
  return c;
}

Status ShmConnection::Established() {
  if (fd_ >= 0) close(fd_);
  fd_ = -1;
  path_.clear();
  auto* h = reinterpret_cast<Header*>(base_);
  if (h->pid[1].load(std::memory_order_acquire) <= 0) {
    return FailedPrecondition("hfreduce: the peer has not opened the point-to-point memory");
  }
  ProbePeer();
  return Status::Ok();
}

void ShmConnection::ProbePeer() {
  auto* h = reinterpret_cast<Header*>(base_);
  const int peer = 1 - side_;
  uint64_t value = 0;
  const uint64_t want = h->probe_value[peer].load(std::memory_order_acquire);
  const bool can = direct_bytes_ > 0 &&
                   ReadPeer(h->pid[peer].load(std::memory_order_relaxed), &value,
                            h->probe_addr[peer].load(std::memory_order_relaxed), sizeof value)
                       .ok() &&
                   value == want;
  // The peer's ring is the one this side consumes.
  in().consumer_reads_producer.store(can ? 1 : 2, std::memory_order_release);
}

bool ShmConnection::direct() const {
  auto* h = reinterpret_cast<Header*>(base_);
  return h->ring[side_].consumer_reads_producer.load(std::memory_order_acquire) == 1;
}

Status ShmConnection::Closed(const char* doing) const {
  return Status(StatusCode::kAborted,
                std::string("hfreduce: ") + doing + " " + peer() + ": the connection was closed");
}

Status ShmConnection::Pause(Doorbell& bell, uint32_t seen, int& spins,
                            Clock::time_point& next_check) {
  auto* h = reinterpret_cast<Header*>(base_);
  const auto now = Clock::now();
  if (spins == 0) next_check = now + kYieldFor;  // the end of the yielding
  ++spins;
  if (now < next_check && spins < 1000) {
    sched_yield();
    return Status::Ok();
  }
  bell.Wait(seen, kSleepSlice);
  if (Clock::now() >= next_check) {
    next_check = Clock::now() + kLivenessCheck;
    const pid_t pid = h->pid[1 - side_].load(std::memory_order_relaxed);
    if (ProcessDead(pid)) {
      return Status(StatusCode::kAborted,
                    "hfreduce: " + peer() + " (pid " + std::to_string(pid) + ") exited");
    }
  }
  return Status::Ok();
}

Status ShmConnection::Send(const void* data, std::size_t n, bool) {
  auto* h = reinterpret_cast<Header*>(base_);
  Ring& r = out();
  const auto* src = static_cast<const char*>(data);
  int spins = 0;
  Clock::time_point next_check;
  if (n >= direct_bytes_ && direct_bytes_ > 0 && direct()) {
    // Direct: the receiver reads it from here; this Send returns when it has.
    const uint64_t seq = r.direct_posted.load(std::memory_order_relaxed) + 1;
    r.direct_at.store(r.head.load(std::memory_order_relaxed), std::memory_order_relaxed);
    r.direct_addr.store(reinterpret_cast<uint64_t>(src), std::memory_order_relaxed);
    r.direct_len.store(n, std::memory_order_relaxed);
    r.direct_posted.store(seq, std::memory_order_release);
    r.data.Ring();
    while (true) {
      const uint32_t seen = r.space.Value();
      if (r.direct_done.load(std::memory_order_acquire) == seq) return Status::Ok();
      if (h->closed.load(std::memory_order_acquire)) return Closed("send to");
      FF_RETURN_IF_ERROR(Pause(r.space, seen, spins, next_check));
    }
  }
  uint64_t head = r.head.load(std::memory_order_relaxed);
  while (n > 0) {
    const uint32_t seen = r.space.Value();
    if (h->closed.load(std::memory_order_acquire)) return Closed("send to");
    const uint64_t used = head - r.tail.load(std::memory_order_acquire);
    const std::size_t free = kShmRingBytes - static_cast<std::size_t>(used);
    if (free == 0) {
      FF_RETURN_IF_ERROR(Pause(r.space, seen, spins, next_check));
      continue;
    }
    spins = 0;
    const std::size_t at = static_cast<std::size_t>(head % kShmRingBytes);
    const std::size_t k = std::min({n, free, kShmRingBytes - at, kPieceBytes});
    std::memcpy(out_data() + at, src, k);
    src += k;
    n -= k;
    head += k;
    r.head.store(head, std::memory_order_release);
    r.data.Ring();
  }
  return Status::Ok();
}

Status ShmConnection::Recv(void* data, std::size_t n) {
  auto* h = reinterpret_cast<Header*>(base_);
  Ring& r = in();
  auto* dst = static_cast<char*>(data);
  int spins = 0;
  Clock::time_point next_check;
  uint64_t tail = r.tail.load(std::memory_order_relaxed);
  while (n > 0) {
    const uint32_t seen = r.data.Value();
    const uint64_t posted = r.direct_posted.load(std::memory_order_acquire);
    const bool pending = posted != r.direct_done.load(std::memory_order_relaxed);
    if (pending && tail == r.direct_at.load(std::memory_order_relaxed)) {
      // The stream goes on in the sender's memory.
      const uint64_t len = r.direct_len.load(std::memory_order_relaxed);
      const std::size_t k = static_cast<std::size_t>(std::min<uint64_t>(n, len - direct_read_));
      Status st = ReadPeer(h->pid[1 - side_].load(std::memory_order_relaxed), dst,
                           r.direct_addr.load(std::memory_order_relaxed) + direct_read_, k);
      // A sender that gave up (shut down) may have reused its buffer while it was read.
      std::atomic_thread_fence(std::memory_order_seq_cst);
      if (h->closed.load(std::memory_order_acquire)) return Closed("receive from");
      if (!st.ok()) return st.WithContext("hfreduce: " + peer());
      spins = 0;
      dst += k;
      n -= k;
      direct_read_ += k;
      if (direct_read_ == len) {
        direct_read_ = 0;
        r.direct_done.store(posted, std::memory_order_release);
        r.space.Ring();
      }
      continue;
    }
    const uint64_t head = r.head.load(std::memory_order_acquire);
    if (head == tail) {
      if (h->closed.load(std::memory_order_acquire) &&
          r.head.load(std::memory_order_acquire) == tail) {
        return Closed("receive from");
      }
      FF_RETURN_IF_ERROR(Pause(r.data, seen, spins, next_check));
      continue;
    }
    spins = 0;
    const std::size_t at = static_cast<std::size_t>(tail % kShmRingBytes);
    const std::size_t k = std::min({n, static_cast<std::size_t>(head - tail), kShmRingBytes - at});
    std::memcpy(dst, in_data() + at, k);
    dst += k;
    n -= k;
    tail += k;
    r.tail.store(tail, std::memory_order_release);
    r.space.Ring();
  }
  return Status::Ok();
}

Status ShmConnection::WaitReadable(Clock::time_point deadline) {
  auto* h = reinterpret_cast<Header*>(base_);
  Ring& r = in();
  int spins = 0;
  Clock::time_point next_check;
  while (true) {
    const uint32_t seen = r.data.Value();
    if (r.head.load(std::memory_order_acquire) != r.tail.load(std::memory_order_relaxed) ||
        r.direct_posted.load(std::memory_order_acquire) !=
            r.direct_done.load(std::memory_order_relaxed) ||
        h->closed.load(std::memory_order_acquire)) {
      return Status::Ok();
    }
    if (Clock::now() >= deadline) {
      return DeadlineExceeded("hfreduce: nothing from " + peer() + " in time");
    }
    FF_RETURN_IF_ERROR(Pause(r.data, seen, spins, next_check));
  }
}

bool ShmConnection::PeerGone() {
  auto* h = reinterpret_cast<Header*>(base_);
  Ring& r = in();
  const bool drained =
      r.head.load(std::memory_order_acquire) == r.tail.load(std::memory_order_relaxed) &&
      r.direct_posted.load(std::memory_order_acquire) ==
          r.direct_done.load(std::memory_order_relaxed);
  if (!drained) return false;
  return h->closed.load(std::memory_order_acquire) != 0 ||
         ProcessDead(h->pid[1 - side_].load(std::memory_order_relaxed));
}

void ShmConnection::Shutdown() {
  auto* h = reinterpret_cast<Header*>(base_);
  h->closed.store(1, std::memory_order_seq_cst);
  for (Ring& r : h->ring) {
    r.data.Ring();
    r.space.Ring();
  }
}

}  // namespace ff::hfreduce
