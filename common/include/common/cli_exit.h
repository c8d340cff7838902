// How our command-line tools (hai, fs3, hai-sim) end when their arguments do not parse: CLI11
// prints the error (or, for --help, the help), and the tool exits 2, as its other usage errors
// do and as POSIX utilities do (CLI11's own codes are 100 and up). Daemons exit 64 instead
// (common/daemon.h).
#pragma once

#include <CLI/CLI.hpp>

namespace ff {

inline constexpr int kExitUsageError = 2;

inline int ExitForParseError(const CLI::App& app, const CLI::ParseError& error) {
  return app.exit(error) == 0 ? 0 : kExitUsageError;
}

}  // namespace ff
