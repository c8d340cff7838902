// fs3-fsx: a file-system exerciser in the spirit of fsx. A seeded random sequence of operations on
// a few files (write, mmap write, read, mmap read, truncate up and down, copy_file_range, fsync,
// close and reopen), every byte read compared with an in-memory shadow of what the files must
// hold. On a mismatch it prints the bad range, which operation wrote the expected bytes and
// which earlier operation's bytes came back instead, the last operations, and the command that
// replays the run.
//
// The sequence depends on the seed and the options only (never on timing or on what a read
// returned), so the same command replays it operation for operation.
#pragma once

#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"
#include "common/status.h"

namespace ff::fs3::fsx {

enum class OpKind : uint8_t {
  kWrite,
  kMapWrite,
  kRead,
  kMapRead,
  kTruncate,
  kCopyRange,
  kFsync,
  kReopen,     // close and open again: a read after it comes from storage, not a cache
  kReadOther,  // after close or fsync, read it through another mount and compare
  kCheckAll,   // read every file whole (and its length) and compare
};
const char* Name(OpKind kind);

// What a file system under test offers; the exerciser owns files 0 .. files - 1.
class Target {
 public:
  virtual ~Target() = default;
  // Opens file `file` (creating it empty, or emptying it, with `truncate`).
  virtual Status Open(int file, bool truncate) = 0;
  virtual Status Close(int file) = 0;
  virtual Status Write(int file, uint64_t offset, std::string_view data) = 0;
  // Up to `length` bytes at `offset` (short at the end of the file).
  virtual Result<std::string> Read(int file, uint64_t offset, uint64_t length) = 0;
  // The file's length as the file system reports it now.
  virtual Result<uint64_t> Length(int file) = 0;
  // The operations below are optional: Supports() says which.
  virtual bool Supports(OpKind kind) const = 0;
  // Writes through a shared mapping of the range (the file already reaches its end), then msync
  // with `sync` (else the kernel writes the pages back when it likes, or at close).
  virtual Status MapWrite(int, uint64_t, std::string_view, bool) { return Unsupported(); }
  virtual Result<std::string> MapRead(int, uint64_t, uint64_t) { return Unsupported(); }
  virtual Status Truncate(int, uint64_t) { return Unsupported(); }
  virtual Status CopyRange(int, uint64_t, int, uint64_t, uint64_t) { return Unsupported(); }
  virtual Status Fsync(int) { return Unsupported(); }
  // Reads the file through another mount or client (after a close or fsync made it visible).
  virtual Result<std::string> ReadOther(int, uint64_t, uint64_t) { return Unsupported(); }
  // After a mismatch: reads the range again through a new descriptor, with the pages cached for
  // the file dropped first, so the report can tell a stale cache from what is stored.
  virtual Result<std::string> ReadAfresh(int, uint64_t, uint64_t) { return Unsupported(); }

 protected:
  static Status Unsupported() { return Status(StatusCode::kUnimplemented, "not offered"); }
};

struct Options {
  uint64_t seed = 1;
  uint64_t ops = 10000;
  int files = 1;
  uint64_t max_size = 1 << 20;  // no operation makes a file longer than this
  uint64_t max_len = 64 << 10;  // bytes one write, read or copy moves at most
  uint64_t check_every = 1000;  // every N operations, every file read whole (0: only at the end)
  uint64_t show_last = 30;      // operations printed before a mismatch
  bool mmap = true;             // mmap writes and reads
  bool copy_range = true;
  bool truncate = true;
  bool read_other = false;  // reads through the other mount after close
  std::string replay;       // the command line that replays this run (printed on a mismatch)
  bool verbose = false;     // every operation printed as it runs
};

struct Summary {
  uint64_t ops = 0;
  uint64_t bytes_written = 0;
  uint64_t bytes_checked = 0;
  uint64_t counts[static_cast<int>(OpKind::kCheckAll) + 1] = {};
};

// Runs the sequence on `target`; errors name the operation, and a mismatch is kDataLoss with the
// report already printed to stderr.
Result<Summary> Run(const Options& options, Target& target);

}  // namespace ff::fs3::fsx
