#include "internal.h"

#include <algorithm>

namespace ff::platform::server_internal {

bool IsEnvName(std::string_view k) {
  auto letter = [](char c) { return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || c == '_'; };
  if (k.empty() || k.size() > 256 || !letter(k.front())) return false;
  return std::all_of(k.begin(), k.end(),
                     [&](char c) { return letter(c) || (c >= '0' && c <= '9'); });
}

bool IsUserName(std::string_view n) {
  if (n.empty() || n.size() > 32 || n.front() < 'a' || n.front() > 'z') return false;
  return std::all_of(n.begin(), n.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
  });
}

// A node's state, as hai.proto's Node.state spells it on the wire and in `hai nodes`.

std::string HostOf(const std::string& address) {
  auto colon = address.rfind(':');
  std::string host = colon == std::string::npos ? address : address.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  return host;
}

}  // namespace ff::platform::server_internal
