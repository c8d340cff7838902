// Small network helpers shared by the daemons, HFReduce and the tests.
#pragma once

#include <string>

#include "common/result.h"

namespace ff {

// Splits "host:port" ("[::1]:70" for IPv6). Fails with kInvalidArgument naming the address.
Status SplitHostPort(const std::string& address, std::string* host, int* port);
// The inverse: "host:port", with an IPv6 host in brackets.
std::string JoinHostPort(const std::string& host, int port);

// A TCP port on 127.0.0.1 that nothing listens on at the moment of the call (another process
// may take it before the caller binds it: use it where a retry is cheap, as in tests and tools).
Result<int> FindFreePort();

}  // namespace ff
