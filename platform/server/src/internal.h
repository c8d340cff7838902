// What the parts of hai-server share and nothing outside it sees: the names and checks of its
// records. (The job/run state machine is platform/lifecycle.h; the server class, server.h.)
#pragma once

#include <string>
#include <string_view>

#include "platform/proto/hai.pb.h"

namespace ff::platform::server_internal {

// [A-Za-z_][A-Za-z0-9_]{0,255}: what a POSIX shell accepts as a variable name.
bool IsEnvName(std::string_view k);
// [a-z][a-z0-9_-]{0,31}: also a Unix login name.
bool IsUserName(std::string_view n);

// The host of an agent's "host:port" ("[v6]:port" gives v6, without brackets, as MASTER_ADDR and
// HFREDUCE_LISTEN_HOST take it).
std::string HostOf(const std::string& address);

}  // namespace ff::platform::server_internal
