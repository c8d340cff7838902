#include "transport/tcp.h"

#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <thread>

#include "common/rpc_server.h"
#include "common/traffic.h"

namespace ff::hfreduce {
namespace {

constexpr int kSocketBuffer = 8 << 20;

void Tune(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  int size = kSocketBuffer;
  setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &size, sizeof size);
  setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &size, sizeof size);
}

class TcpConnection final : public Connection {
 public:
  TcpConnection(int fd, std::string peer) : Connection(std::move(peer)), fd_(fd) { Tune(fd_); }
  ~TcpConnection() override {
    Shutdown();
    close(fd_);
  }

  Status Send(const void* data, std::size_t n, bool more) override {
    const char* p = static_cast<const char*>(data);
    while (n > 0) {
      ssize_t sent = send(fd_, p, n, MSG_NOSIGNAL | (more ? MSG_MORE : 0));
      if (sent < 0) {
        if (errno == EINTR) continue;
        return Lost(errno);
      }
      p += sent;
      n -= static_cast<std::size_t>(sent);
    }
    return Status::Ok();
  }

  Status Recv(void* data, std::size_t n) override {
    char* p = static_cast<char*>(data);
    while (n > 0) {
      ssize_t got = recv(fd_, p, n, 0);
      if (got < 0) {
        if (errno == EINTR) continue;
        return Lost(errno);
      }
      if (got == 0) return Lost(0);
      p += got;
      n -= static_cast<std::size_t>(got);
    }
    return Status::Ok();
  }

  Status RecvBefore(void* data, std::size_t n,
                    std::chrono::steady_clock::time_point deadline) override {
    char* p = static_cast<char*>(data);
    while (n > 0) {
      FF_RETURN_IF_ERROR(WaitReadable(deadline));
      ssize_t got = recv(fd_, p, n, MSG_DONTWAIT);
      if (got < 0) {
        if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK) continue;
        return Lost(errno);
      }
      if (got == 0) return Lost(0);
      p += got;
      n -= static_cast<std::size_t>(got);
    }
    return Status::Ok();
  }

  Status WaitReadable(std::chrono::steady_clock::time_point deadline) override {
    while (true) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) {
        return DeadlineExceeded("hfreduce: nothing from " + peer() + " in time");
      }
      pollfd p{fd_, POLLIN, 0};
      int rc = poll(&p, 1, static_cast<int>(std::min<int64_t>(left.count(), 1000)));
      if (rc > 0) return Status::Ok();  // data, or an end of stream the next Recv reports
      if (rc < 0 && errno != EINTR) return Lost(errno);
      if (shut_.load()) return Lost(0);
    }
  }

  bool PeerGone() override {
    pollfd p{fd_, POLLRDHUP, 0};
    if (poll(&p, 1, 0) <= 0 || (p.revents & (POLLRDHUP | POLLHUP | POLLERR)) == 0) return false;
    int pending = 0;
    return ioctl(fd_, FIONREAD, &pending) == 0 && pending == 0;
  }

  void Shutdown() override {
    if (!shut_.exchange(true)) shutdown(fd_, SHUT_RDWR);
  }

 private:
  Status Lost(int err) const {
    if (shut_.load())
      return Status(StatusCode::kCancelled, "connection to " + peer() + " shut down");
    // kAborted: the peer went away, a symptom whose cause is on the other side.
    return Status(StatusCode::kAborted,
                  "hfreduce: connection to " + peer() + " lost: " +
                      (err == 0 ? std::string("peer closed it") : std::string(strerror(err))));
  }

  int fd_;
  std::atomic<bool> shut_{false};
};

}  // namespace

Result<std::unique_ptr<TcpListener>> TcpListener::Listen(const std::string& host, int dscp) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* res = nullptr;
  if (int rc = getaddrinfo(host.c_str(), "0", &hints, &res); rc != 0) {
    return Unavailable("hfreduce: resolve " + host + ": " + gai_strerror(rc));
  }
  int fd = socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    freeaddrinfo(res);
    return Status::FromErrno(errno, "hfreduce: socket");
  }
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  int size = kSocketBuffer;  // inherited by accepted sockets, set before listen for the window
  setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &size, sizeof size);
  int rc = bind(fd, res->ai_addr, res->ai_addrlen);
  freeaddrinfo(res);
  Status marked = rc == 0 ? MarkSocket(fd, dscp) : Status::Ok();  // inherited by accepted ones
  if (!marked.ok()) {
    close(fd);
    return marked.WithContext("hfreduce: mark the listener on " + host);
  }
  if (rc != 0 || listen(fd, 128) != 0) {
    int err = errno;
    close(fd);
    return Status::FromErrno(err, "hfreduce: listen on " + host);
  }
  sockaddr_storage addr{};
  socklen_t len = sizeof addr;
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  int port = ntohs(addr.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port
                                              : reinterpret_cast<sockaddr_in*>(&addr)->sin_port);
  std::string shown = host.find(':') != std::string::npos ? "[" + host + "]" : host;
  return std::unique_ptr<TcpListener>(
      new TcpListener(fd, shown + ":" + std::to_string(port), dscp));
}

TcpListener::~TcpListener() {
  close(fd_);
}

Result<std::unique_ptr<Connection>> TcpListener::Accept(
    std::chrono::steady_clock::time_point deadline) {
  while (true) {
    if (shut_.load()) return Status(StatusCode::kCancelled, "listener " + address_ + " shut down");
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      return DeadlineExceeded("hfreduce: no peer connected to " + address_ + " in time");
    }
    pollfd p{fd_, POLLIN, 0};
    int rc = poll(&p, 1, static_cast<int>(std::min<int64_t>(left.count(), 1000)));
    if (rc < 0 && errno != EINTR) return Status::FromErrno(errno, "hfreduce: poll " + address_);
    if (rc <= 0) continue;
    sockaddr_storage addr{};
    socklen_t len = sizeof addr;
    int fd = accept4(fd_, reinterpret_cast<sockaddr*>(&addr), &len, SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED || shut_.load()) continue;
      return Status::FromErrno(errno, "hfreduce: accept on " + address_);
    }
    char host[NI_MAXHOST], port[NI_MAXSERV];
    getnameinfo(reinterpret_cast<sockaddr*>(&addr), len, host, sizeof host, port, sizeof port,
                NI_NUMERICHOST | NI_NUMERICSERV);
    return std::unique_ptr<Connection>(
        new TcpConnection(fd, std::string(host) + ":" + std::string(port)));
  }
}

void TcpListener::Shutdown() {
  // On Linux, shutting down a listening socket wakes its poll and fails its accept.
  if (!shut_.exchange(true)) shutdown(fd_, SHUT_RDWR);
}

Result<std::unique_ptr<Connection>> TcpConnect(const std::string& address,
                                               std::chrono::steady_clock::time_point deadline,
                                               int dscp) {
  std::string host;
  int port = 0;
  FF_RETURN_IF_ERROR(SplitHostPort(address, &host, &port));
  Status last = Unavailable("hfreduce: connect " + address + ": not tried");
  while (std::chrono::steady_clock::now() < deadline) {
    addrinfo hints{};
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* res = nullptr;
    if (int rc = getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res); rc != 0) {
      return Unavailable("hfreduce: resolve " + host + ": " + gai_strerror(rc));
    }
    int fd = socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
      freeaddrinfo(res);
      return Status::FromErrno(errno, "hfreduce: socket");
    }
    int size = kSocketBuffer;
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &size, sizeof size);
    if (Status st = MarkSocket(fd, dscp); !st.ok()) {
      close(fd);
      freeaddrinfo(res);
      return st.WithContext("hfreduce: mark the connection to " + address);
    }
    int rc = connect(fd, res->ai_addr, res->ai_addrlen);
    freeaddrinfo(res);
    if (rc == 0) return std::unique_ptr<Connection>(new TcpConnection(fd, address));
    last = Status::FromErrno(errno, "hfreduce: connect " + address);
    close(fd);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return Status(StatusCode::kDeadlineExceeded, last.message());
}

}  // namespace ff::hfreduce
