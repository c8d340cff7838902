// fs3-fsx's targets: a mounted file system through system calls (PosixTarget), and fs3's native
// client (NativeTarget, fs3/fs.h: writes, reads and reopening; no mmap, truncate or fsync).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "fs3/fs.h"
#include "fsx.h"

namespace ff::fs3::fsx {

// Files <dir>/<prefix>.<i>; with `other_dir` (another mount of the same file system), reads after
// close or fsync are also made there.
class PosixTarget final : public Target {
 public:
  PosixTarget(std::string dir, std::string other_dir, std::string prefix, int files);
  ~PosixTarget() override;

  Status Open(int file, bool truncate) override;
  Status Close(int file) override;
  Status Write(int file, uint64_t offset, std::string_view data) override;
  Result<std::string> Read(int file, uint64_t offset, uint64_t length) override;
  Result<uint64_t> Length(int file) override;
  bool Supports(OpKind kind) const override;
  Status MapWrite(int file, uint64_t offset, std::string_view data, bool sync) override;
  Result<std::string> MapRead(int file, uint64_t offset, uint64_t length) override;
  Status Truncate(int file, uint64_t length) override;
  Status CopyRange(int src, uint64_t src_offset, int dst, uint64_t dst_offset,
                   uint64_t length) override;
  Status Fsync(int file) override;
  Result<std::string> ReadOther(int file, uint64_t offset, uint64_t length) override;
  Result<std::string> ReadAfresh(int file, uint64_t offset, uint64_t length) override;

 private:
  std::string Path(const std::string& dir, int file) const;
  static Result<std::string> ReadFd(int fd, uint64_t offset, uint64_t length,
                                    const std::string& path);

  const std::string dir_, other_dir_, prefix_;
  std::vector<int> fds_;
};

// Files <dir>/<prefix>.<i> through fs3-meta and the storage targets, no mount.
class NativeTarget final : public Target {
 public:
  NativeTarget(std::unique_ptr<FileSystem> fs, std::string dir, std::string prefix, int files);

  Status Open(int file, bool truncate) override;
  Status Close(int file) override;
  Status Write(int file, uint64_t offset, std::string_view data) override;
  Result<std::string> Read(int file, uint64_t offset, uint64_t length) override;
  Result<uint64_t> Length(int file) override;
  bool Supports(OpKind kind) const override;

 private:
  std::string Path(int file) const;

  std::unique_ptr<FileSystem> fs_;
  const std::string dir_, prefix_;
  std::vector<File> files_;
};

}  // namespace ff::fs3::fsx
