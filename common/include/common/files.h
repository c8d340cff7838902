// Reading whole files with errors that name the file and the cause.
#pragma once

#include <string>

#include "common/result.h"

namespace ff {

// The whole content of `path`. On failure the status carries the errno's code (kNotFound,
// kPermissionDenied, kIsADirectory, ...) and the message "<what> '<path>': <strerror>", e.g.
// "cannot read config file '/etc/x.toml': No such file or directory".
Result<std::string> ReadWholeFile(const std::string& path, const std::string& what);

}  // namespace ff
