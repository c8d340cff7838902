// Reading and replacing whole files with errors that name the file and the cause.
#pragma once

#include <string>

#include "common/result.h"

namespace ff {

// The whole content of `path`. On failure the status carries the errno's code (kNotFound,
// kPermissionDenied, kIsADirectory, ...) and the message "<what> '<path>': <strerror>", e.g.
// "cannot read config file '/etc/x.toml': No such file or directory".
Result<std::string> ReadWholeFile(const std::string& path, const std::string& what);

// Replaces `path` with `content` at once: written to a temporary file beside it, then renamed over
// it, so that a reader sees the old file or the new one, never a part (not synced: for files that
// announce a running process, which a crash makes stale anyway).
Status WriteFileAtomically(const std::string& path, const std::string& content);

}  // namespace ff
