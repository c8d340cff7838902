#include "tests/support/http_get.h"

#include <netdb.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cerrno>

#include "common/rpc_server.h"

namespace ff::test {

Result<HttpResponse> HttpGet(const std::string& address, const std::string& path) {
  std::string host;
  int port = 0;
  FF_RETURN_IF_ERROR(SplitHostPort(address, &host, &port));
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (int rc = getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res); rc != 0) {
    return Unavailable("resolve " + host + ": " + gai_strerror(rc));
  }
  int fd = socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    freeaddrinfo(res);
    return Status::FromErrno(errno, "socket");
  }
  timeval tv{5, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  int rc = connect(fd, res->ai_addr, res->ai_addrlen);
  freeaddrinfo(res);
  if (rc != 0) {
    int err = errno;
    close(fd);
    return Status::FromErrno(err, "connect " + address);
  }
  std::string request = "GET " + path + " HTTP/1.0\r\nHost: " + host + "\r\n\r\n";
  if (send(fd, request.data(), request.size(), MSG_NOSIGNAL) !=
      static_cast<ssize_t>(request.size())) {
    int err = errno;
    close(fd);
    return Status::FromErrno(err, "send to " + address);
  }
  std::string response;
  char buf[8192];
  while (true) {
    ssize_t n = recv(fd, buf, sizeof buf, 0);
    if (n < 0) {
      int err = errno;
      close(fd);
      return Status::FromErrno(err, "recv from " + address);
    }
    if (n == 0) break;
    response.append(buf, static_cast<std::size_t>(n));
  }
  close(fd);
  // "HTTP/1.1 200 OK\r\n...\r\n\r\nbody"
  auto header_end = response.find("\r\n\r\n");
  if (response.rfind("HTTP/", 0) != 0 || header_end == std::string::npos) {
    return Internal("malformed HTTP response from " + address);
  }
  HttpResponse out;
  out.status = std::atoi(response.c_str() + response.find(' ') + 1);
  out.body = response.substr(header_end + 4);
  return out;
}

Result<double> MetricValue(const std::string& address, const std::string& series) {
  FF_ASSIGN_OR_RETURN(HttpResponse page, HttpGet(address, "/metrics"));
  std::size_t at = 0;
  while (at < page.body.size()) {
    std::size_t end = page.body.find('\n', at);
    if (end == std::string::npos) end = page.body.size();
    const std::string_view line(page.body.data() + at, end - at);
    if (line.size() > series.size() && line.substr(0, series.size()) == series &&
        line[series.size()] == ' ') {
      return std::stod(std::string(line.substr(series.size() + 1)));
    }
    at = end + 1;
  }
  return NotFound("no series " + series + " at " + address);
}

}  // namespace ff::test
