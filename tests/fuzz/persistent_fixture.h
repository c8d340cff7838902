// The state a fuzz target keeps across inputs, as a long-running daemon keeps its own.
#pragma once

#include <spdlog/spdlog.h>
#include <stdlib.h>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <system_error>

namespace ff::fuzz {

// A fresh directory for a target's state (/dev/shm when there is one).
inline std::string MakeScratchDir(const std::string& name) {
  const char* base = std::filesystem::is_directory("/dev/shm") ? "/dev/shm" : "/tmp";
  std::string tmpl = std::string(base) + "/" + name + "-XXXXXX";
  if (mkdtemp(tmpl.data()) == nullptr) std::abort();
  return tmpl;
}

// F has `std::string dir`, `int inputs` and `void Reset()` (a fresh instance in a fresh `dir`).
// Made on first use and Reset() on the first input and every `reset_every` inputs after. Never
// destroyed: closing RocksDB after its own statics are gone (at exit) crashes inside it; only
// `dir` is removed at exit (its files may be unlinked while open). Logging is quieted to
// critical: the targets provoke errors by the million.
template <typename F>
F& PersistentFixture(int reset_every) {
  static F* const fixture = [] {
    spdlog::set_level(spdlog::level::critical);
    std::atexit([] {
      std::error_code ec;
      if (!fixture->dir.empty()) std::filesystem::remove_all(fixture->dir, ec);
    });
    return new F;
  }();
  if (fixture->inputs++ % reset_every == 0) fixture->Reset();
  return *fixture;
}

}  // namespace ff::fuzz
