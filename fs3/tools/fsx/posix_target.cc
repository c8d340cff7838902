// fs3-fsx on a mounted file system: plain system calls, as applications make them.
#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>

#include "targets.h"

namespace ff::fs3::fsx {
namespace {

// A mapping that reaches past the file's real end faults with SIGBUS: that is a finding
// (the file system lost length), reported as an error rather than a crash.
thread_local sigjmp_buf* g_bus_jump = nullptr;

void OnBus(int) {
  if (g_bus_jump != nullptr) siglongjmp(*g_bus_jump, 1);
  signal(SIGBUS, SIG_DFL);
  raise(SIGBUS);
}

long PageSize() {
  static const long page = sysconf(_SC_PAGESIZE);
  return page;
}

// Copies between `dst` and `src` inside the mapping, catching SIGBUS.
bool GuardedCopy(void* dst, const void* src, std::size_t n) {
  sigjmp_buf jump;
  if (sigsetjmp(jump, 1) != 0) {
    g_bus_jump = nullptr;
    return false;
  }
  g_bus_jump = &jump;
  std::memcpy(dst, src, n);
  g_bus_jump = nullptr;
  return true;
}

}  // namespace

PosixTarget::PosixTarget(std::string dir, std::string other_dir, std::string prefix, int files)
    : dir_(std::move(dir)),
      other_dir_(std::move(other_dir)),
      prefix_(std::move(prefix)),
      fds_(files, -1) {
  struct sigaction sa {};
  sa.sa_handler = OnBus;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGBUS, &sa, nullptr);
}

PosixTarget::~PosixTarget() {
  for (int fd : fds_) {
    if (fd >= 0) close(fd);
  }
}

std::string PosixTarget::Path(const std::string& dir, int file) const {
  return dir + "/" + prefix_ + "." + std::to_string(file);
}

bool PosixTarget::Supports(OpKind kind) const {
  return kind != OpKind::kReadOther || !other_dir_.empty();
}

Status PosixTarget::Open(int file, bool truncate) {
  if (fds_[file] >= 0) FF_RETURN_IF_ERROR(Close(file));
  const std::string path = Path(dir_, file);
  int fd = open(path.c_str(), O_RDWR | O_CREAT | (truncate ? O_TRUNC : 0), 0644);
  if (fd < 0) return Status::FromErrno(errno, "open " + path);
  fds_[file] = fd;
  return Status::Ok();
}

Status PosixTarget::Close(int file) {
  const int fd = fds_[file];
  fds_[file] = -1;
  if (fd >= 0 && close(fd) != 0) return Status::FromErrno(errno, "close " + Path(dir_, file));
  return Status::Ok();
}

Status PosixTarget::Write(int file, uint64_t offset, std::string_view data) {
  std::size_t done = 0;
  while (done < data.size()) {
    ssize_t n = pwrite(fds_[file], data.data() + done, data.size() - done,
                       static_cast<off_t>(offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return Status::FromErrno(n < 0 ? errno : EIO, "pwrite " + Path(dir_, file));
    done += static_cast<std::size_t>(n);
  }
  return Status::Ok();
}

Result<std::string> PosixTarget::ReadFd(int fd, uint64_t offset, uint64_t length,
                                        const std::string& path) {
  std::string out(length, '\0');
  std::size_t done = 0;
  while (done < length) {
    ssize_t n = pread(fd, out.data() + done, length - done, static_cast<off_t>(offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Status::FromErrno(errno, "pread " + path);
    if (n == 0) break;
    done += static_cast<std::size_t>(n);
  }
  out.resize(done);
  return out;
}

Result<std::string> PosixTarget::Read(int file, uint64_t offset, uint64_t length) {
  return ReadFd(fds_[file], offset, length, Path(dir_, file));
}

Result<uint64_t> PosixTarget::Length(int file) {
  struct stat st {};
  if (fstat(fds_[file], &st) != 0) return Status::FromErrno(errno, "fstat " + Path(dir_, file));
  return static_cast<uint64_t>(st.st_size);
}

Status PosixTarget::MapWrite(int file, uint64_t offset, std::string_view data, bool sync) {
  const uint64_t start = offset / PageSize() * PageSize();
  const std::size_t span = data.size() + (offset - start);
  void* p = mmap(nullptr, span, PROT_READ | PROT_WRITE, MAP_SHARED, fds_[file],
                 static_cast<off_t>(start));
  if (p == MAP_FAILED) return Status::FromErrno(errno, "mmap " + Path(dir_, file));
  const bool copied =
      GuardedCopy(static_cast<char*>(p) + (offset - start), data.data(), data.size());
  Status st;
  if (!copied) {
    st = Status(StatusCode::kDataLoss, "SIGBUS writing the mapping of " + Path(dir_, file) +
                                           ": the file is shorter than it should be");
  } else if (sync && msync(p, span, MS_SYNC) != 0) {
    st = Status::FromErrno(errno, "msync " + Path(dir_, file));
  }
  munmap(p, span);
  return st;
}

Result<std::string> PosixTarget::MapRead(int file, uint64_t offset, uint64_t length) {
  const uint64_t start = offset / PageSize() * PageSize();
  const std::size_t span = length + (offset - start);
  void* p = mmap(nullptr, span, PROT_READ, MAP_SHARED, fds_[file], static_cast<off_t>(start));
  if (p == MAP_FAILED) return Status::FromErrno(errno, "mmap " + Path(dir_, file));
  std::string out(length, '\0');
  const bool copied = GuardedCopy(out.data(), static_cast<char*>(p) + (offset - start), length);
  munmap(p, span);
  if (!copied) {
    return Status(StatusCode::kDataLoss, "SIGBUS reading the mapping of " + Path(dir_, file) +
                                             ": the file is shorter than it should be");
  }
  return out;
}

Status PosixTarget::Truncate(int file, uint64_t length) {
  if (ftruncate(fds_[file], static_cast<off_t>(length)) != 0) {
    return Status::FromErrno(errno, "ftruncate " + Path(dir_, file));
  }
  return Status::Ok();
}

Status PosixTarget::CopyRange(int src, uint64_t src_offset, int dst, uint64_t dst_offset,
                              uint64_t length) {
  auto in = static_cast<loff_t>(src_offset);
  auto out = static_cast<loff_t>(dst_offset);
  uint64_t done = 0;
  while (done < length) {
    ssize_t n = copy_file_range(fds_[src], &in, fds_[dst], &out, length - done, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Status::FromErrno(errno, "copy_file_range to " + Path(dir_, dst));
    if (n == 0) {
      return Status(StatusCode::kDataLoss, "copy_file_range from " + Path(dir_, src) +
                                               " met its end early: the file is short");
    }
    done += static_cast<uint64_t>(n);
  }
  return Status::Ok();
}

Status PosixTarget::Fsync(int file) {
  if (fsync(fds_[file]) != 0) return Status::FromErrno(errno, "fsync " + Path(dir_, file));
  return Status::Ok();
}

Result<std::string> PosixTarget::ReadOther(int file, uint64_t offset, uint64_t length) {
  const std::string path = Path(other_dir_, file);
  int fd = open(path.c_str(), O_RDONLY);
  if (fd < 0) return Status::FromErrno(errno, "open " + path);
  auto out = ReadFd(fd, offset, length, path);
  close(fd);
  return out;
}

Result<std::string> PosixTarget::ReadAfresh(int file, uint64_t offset, uint64_t length) {
  const std::string path = Path(dir_, file);
  int fd = open(path.c_str(), O_RDONLY);
  if (fd < 0) return Status::FromErrno(errno, "open " + path);
  (void)posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);  // clean cached pages go
  auto out = ReadFd(fd, offset, length, path);
  close(fd);
  return out;
}

}  // namespace ff::fs3::fsx
