// Test helpers around processes and files: temporary directories, reading and waiting for files.
#pragma once

#include <chrono>
#include <optional>
#include <string>

#include "common/subprocess.h"

namespace ff::test {

using ff::Subprocess;

// A fresh directory under $TMPDIR (or /tmp), removed with everything in it on destruction.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  // path() + "/" + name
  std::string File(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

std::string ReadFileOrEmpty(const std::string& path);
void WriteFile(const std::string& path, const std::string& content);
// Polls until `path` exists and is non-empty; returns its content, or nullopt on timeout.
std::optional<std::string> WaitForFile(const std::string& path, std::chrono::milliseconds timeout);

}  // namespace ff::test
