// Logging setup for daemons and tools (spdlog underneath).
//
// After InitLogging, call spdlog's functions (spdlog::info("chain {} is now {}", id, state)).
// Every event is exactly one line: newlines and control characters inside a message are escaped.
// Every line names the daemon. Two formats:
//   text: 2026-11-22T09:00:00.123+00:00 info fs3-meta[4242] message
//   json: {"ts":"2026-11-22T09:00:00.123+00:00","level":"info","daemon":"fs3-meta","pid":4242,
//          "msg":"message"}
// Thread-safe after InitLogging returns; InitLogging itself must not race with logging calls.
#pragma once

#include <string>
#include <string_view>

#include "common/status.h"

namespace ff {

class ConfigSection;

// The [log] section of every daemon's config.
struct LogOptions {
  std::string level = "info";   // trace, debug, info, warn, error, critical or off
  std::string format = "text";  // text or json
  std::string file;             // append to this file; empty: standard error

  void Bind(ConfigSection& s);
};

// Installs the process-wide default logger. Fails (changing nothing) on an unknown level or
// format, or a log file that cannot be opened.
Status InitLogging(std::string_view daemon, const LogOptions& options);

// Escapes `in` so that it stays on one line (\n, \r, \t, other control bytes as \xNN); with
// `json` also escapes '"' and '\\' for a JSON string.
std::string EscapeLogText(std::string_view in, bool json);

}  // namespace ff
