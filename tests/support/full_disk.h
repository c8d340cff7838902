// For the full-disk tests (a small tmpfs under a daemon's data).
#pragma once

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cerrno>
#include <string>

namespace ff::test {

// Fills the file system holding `dir` to the last byte with one file, `dir`/filler, and returns
// its path (remove it to make room again).
inline std::string FillFileSystem(const std::string& dir) {
  const std::string path = dir + "/filler";
  int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  EXPECT_GE(fd, 0) << path;
  std::string block(1 << 16, 'x');
  while (write(fd, block.data(), block.size()) > 0) {
  }
  while (write(fd, block.data(), 1) > 0) {
  }
  EXPECT_EQ(errno, ENOSPC);
  close(fd);
  return path;
}

}  // namespace ff::test
