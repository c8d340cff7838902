#include "common/net.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>

namespace ff {

Status SplitHostPort(const std::string& address, std::string* host, int* port) {
  auto bad = [&](const char* why) {
    return InvalidArgument("address '" + address + "': " + why + " (expected host:port)");
  };
  std::size_t colon = address.rfind(':');
  if (colon == std::string::npos) return bad("no port");
  std::string h = address.substr(0, colon);
  std::string p = address.substr(colon + 1);
  if (h.size() >= 2 && h.front() == '[' && h.back() == ']') {
    h = h.substr(1, h.size() - 2);
  } else if (h.find(':') != std::string::npos) {
    return bad("IPv6 hosts must be in brackets");
  }
  if (p.empty() || p.size() > 5 || p.find_first_not_of("0123456789") != std::string::npos) {
    return bad("port is not a number");
  }
  int value = std::stoi(p);
  if (value > 65535) return bad("port is above 65535");
  *host = h;
  *port = value;
  return Status::Ok();
}

std::string JoinHostPort(const std::string& host, int port) {
  const bool v6 = host.find(':') != std::string::npos;
  return (v6 ? "[" + host + "]" : host) + ":" + std::to_string(port);
}

Result<int> FindFreePort() {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return Status::FromErrno(errno, "socket");
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    int err = errno;
    close(fd);
    return Status::FromErrno(err, "find a free port");
  }
  close(fd);
  return static_cast<int>(ntohs(addr.sin_port));
}

}  // namespace ff
