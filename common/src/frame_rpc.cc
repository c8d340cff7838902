#include "common/frame_rpc.h"

#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <optional>

#include "common/net.h"
#include "common/traffic.h"

namespace ff {
namespace {

using SysClock = std::chrono::system_clock;

void PutU32(char* p, uint32_t v) {
  for (int i = 0; i < 4; ++i)
    p[i] = static_cast<char>((v >> (8 * i)) & 0xff);
}
uint32_t GetU32(const char* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i)
    v |= static_cast<uint32_t>(static_cast<unsigned char>(p[i])) << (8 * i);
  return v;
}

// Waits until `fd` is ready for `events`, or the deadline (none: forever). False on timeout.
bool WaitFor(int fd, short events, std::optional<SysClock::time_point> deadline) {
  for (;;) {
    int ms = -1;
    if (deadline) {
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(*deadline - SysClock::now());
      if (left.count() <= 0) return false;
      ms = static_cast<int>(std::min<int64_t>(left.count() + 1, 1 << 30));
    }
    pollfd p{fd, events, 0};
    const int n = poll(&p, 1, ms);
    if (n > 0) return true;
    if (n == 0) continue;             // the loop checks the deadline
    if (errno != EINTR) return true;  // the read or write reports the error
  }
}

// Reads exactly `n` bytes. Status: kUnavailable when the peer closed or failed, kDeadlineExceeded
// on the deadline.
Status ReadFull(int fd, char* buf, size_t n, std::optional<SysClock::time_point> deadline) {
  while (n > 0) {
    const ssize_t r = recv(fd, buf, n, MSG_DONTWAIT);
    if (r > 0) {
      buf += r;
      n -= static_cast<size_t>(r);
      continue;
    }
    if (r == 0) return Unavailable("the connection was closed");
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) {
      return Unavailable(std::string("the connection failed: ") + std::strerror(errno));
    }
    if (!WaitFor(fd, POLLIN, deadline)) return DeadlineExceeded("no reply before the deadline");
  }
  return Status::Ok();
}

Status WriteFull(int fd, const std::string& data, std::optional<SysClock::time_point> deadline) {
  size_t done = 0;
  while (done < data.size()) {
    const ssize_t w = send(fd, data.data() + done, data.size() - done, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (w > 0) {
      done += static_cast<size_t>(w);
      continue;
    }
    if (w < 0 && errno == EINTR) continue;
    if (w < 0 && errno != EAGAIN && errno != EWOULDBLOCK) {
      return Unavailable(std::string("the connection failed: ") + std::strerror(errno));
    }
    if (!WaitFor(fd, POLLOUT, deadline)) return DeadlineExceeded("cannot send before the deadline");
  }
  return Status::Ok();
}

Result<addrinfo*> Resolve(const std::string& address, bool passive) {
  std::string host;
  int port = 0;
  FF_RETURN_IF_ERROR(SplitHostPort(address, &host, &port));
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  if (passive) hints.ai_flags = AI_PASSIVE;
  addrinfo* found = nullptr;
  const std::string service = std::to_string(port);
  const int rc =
      getaddrinfo(host.empty() ? nullptr : host.c_str(), service.c_str(), &hints, &found);
  if (rc != 0) return Unavailable("cannot resolve '" + address + "': " + gai_strerror(rc));
  return found;
}

// No delay, and the process's mark for control traffic (frames carry metadata calls).
void NoDelay(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  if (int dscp = ProcessTraffic().other_dscp; dscp != 0) (void)MarkSocket(fd, dscp);
}

}  // namespace

// ---- server -------------------------------------------------------------------------------------

Result<std::unique_ptr<FrameServer>> FrameServer::Start(const std::string& listen,
                                                        std::map<uint16_t, Handler> handlers) {
  FF_ASSIGN_OR_RETURN(addrinfo * ai, Resolve(listen, true));
  std::unique_ptr<addrinfo, decltype(&freeaddrinfo)> guard(ai, freeaddrinfo);
  int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return Status::FromErrno(errno, "socket");
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (bind(fd, ai->ai_addr, ai->ai_addrlen) != 0 || ::listen(fd, 128) != 0) {
    const int e = errno;
    close(fd);
    return Unavailable("cannot listen on " + listen + ": " + std::strerror(e));
  }
  sockaddr_storage bound{};
  socklen_t len = sizeof bound;
  getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &len);
  const int port = bound.ss_family == AF_INET6
                       ? ntohs(reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port)
                       : ntohs(reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
  std::string host;
  int unused = 0;
  FF_RETURN_IF_ERROR(SplitHostPort(listen, &host, &unused));
  return std::unique_ptr<FrameServer>(
      new FrameServer(fd, JoinHostPort(host, port), port, std::move(handlers)));
}

FrameServer::FrameServer(int fd, std::string address, int port,
                         std::map<uint16_t, Handler> handlers)
    : listen_fd_(fd), address_(std::move(address)), port_(port), handlers_(std::move(handlers)) {
  acceptor_ = std::thread([this] { AcceptLoop(); });
}

FrameServer::~FrameServer() {
  Shutdown();
}

void FrameServer::Shutdown() {
  std::call_once(shutdown_once_, [this] {
    stopping_ = true;
    ::shutdown(listen_fd_, SHUT_RDWR);  // wakes accept
    acceptor_.join();
    close(listen_fd_);
    std::list<Conn> conns;
    {
      MutexLock lock(&mu_);
      for (Conn& c : conns_) {
        if (!c.done) ::shutdown(c.fd, SHUT_RDWR);  // wakes its read; the thread closes it
      }
      conns.swap(conns_);
    }
    for (Conn& c : conns)
      c.thread.join();
  });
}

void FrameServer::AcceptLoop() {
  while (!stopping_) {
    const int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (stopping_) return;
      if (errno == EMFILE || errno == ENFILE) {  // out of descriptors: try again shortly
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
        continue;
      }
      return;
    }
    NoDelay(fd);
    std::list<Conn> finished;
    {
      MutexLock lock(&mu_);
      if (stopping_) {  // Shutdown joins every connection's thread
        close(fd);
        return;
      }
      for (auto it = conns_.begin(); it != conns_.end();) {  // reap connections that ended
        auto next = std::next(it);
        if (it->done) finished.splice(finished.end(), conns_, it);
        it = next;
      }
      Conn& c = conns_.emplace_back();
      c.fd = fd;
      c.thread = std::thread([this, conn = &c] { Serve(conn); });
    }
    for (Conn& c : finished)
      c.thread.join();
  }
}

void FrameServer::Serve(Conn* conn) {
  const int fd = conn->fd;
  std::string body, reply, out;
  for (;;) {
    char head[8];
    if (!ReadFull(fd, head, sizeof head, std::nullopt).ok()) break;
    const uint32_t n = GetU32(head);
    const uint16_t method = static_cast<uint16_t>(static_cast<unsigned char>(head[4]) |
                                                  (static_cast<unsigned char>(head[5]) << 8));
    if (n > kMaxFrameBytes) break;  // not our protocol: drop the connection
    body.resize(n);
    if (!ReadFull(fd, body.data(), n, std::nullopt).ok()) break;
    reply.clear();
    Status st;
    auto it = handlers_.find(method);
    if (it == handlers_.end()) {
      st = Status(StatusCode::kUnimplemented, "no method " + std::to_string(method));
    } else {
      try {
        st = it->second(body, &reply);
      } catch (const std::exception& e) {
        st = Internal(std::string("the handler failed: ") + e.what());
      }
    }
    if (!st.ok()) reply.clear();
    const std::string& msg = st.message();
    out.resize(12 + msg.size() + reply.size());
    PutU32(out.data(), static_cast<uint32_t>(reply.size()));
    PutU32(out.data() + 4, static_cast<uint32_t>(static_cast<int32_t>(st.code())));
    PutU32(out.data() + 8, static_cast<uint32_t>(msg.size()));
    std::memcpy(out.data() + 12, msg.data(), msg.size());
    std::memcpy(out.data() + 12 + msg.size(), reply.data(), reply.size());
    if (!WriteFull(fd, out, std::nullopt).ok()) break;
  }
  MutexLock lock(&mu_);
  close(fd);
  conn->done = true;
}

// ---- client -------------------------------------------------------------------------------------

FrameChannel::~FrameChannel() {
  for (int fd : idle_)
    close(fd);
}

Result<int> FrameChannel::Connect(SysClock::time_point deadline) {
  FF_ASSIGN_OR_RETURN(addrinfo * ai, Resolve(address_, false));
  std::unique_ptr<addrinfo, decltype(&freeaddrinfo)> guard(ai, freeaddrinfo);
  int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return Status::FromErrno(errno, "socket");
  if (connect(fd, ai->ai_addr, ai->ai_addrlen) != 0 && errno != EINPROGRESS) {
    const int e = errno;
    close(fd);
    return Unavailable("cannot connect to " + address_ + ": " + std::strerror(e));
  }
  if (!WaitFor(fd, POLLOUT, deadline)) {
    close(fd);
    return DeadlineExceeded("cannot connect to " + address_ + " before the deadline");
  }
  int err = 0;
  socklen_t len = sizeof err;
  getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
  if (err != 0) {
    close(fd);
    return Unavailable("cannot connect to " + address_ + ": " + std::strerror(err));
  }
  NoDelay(fd);
  return fd;
}

grpc::Status FrameChannel::Call(uint16_t method, const google::protobuf::Message& request,
                                google::protobuf::Message* reply, SysClock::time_point deadline) {
  auto transport = [&](const Status& st) {
    // Not a handler's answer: retryable by CallRpc's rules.
    return grpc::Status(st.code() == StatusCode::kDeadlineExceeded
                            ? grpc::StatusCode::DEADLINE_EXCEEDED
                            : grpc::StatusCode::UNAVAILABLE,
                        address_ + ": " + st.message());
  };
  int fd = -1;
  {
    MutexLock lock(&mu_);
    if (!idle_.empty()) {
      fd = idle_.back();
      idle_.pop_back();
    }
  }
  if (fd < 0) {
    Result<int> c = Connect(deadline);
    if (!c.ok()) return transport(c.status());
    fd = *c;
  }
  std::string out(8, '\0');
  if (!request.AppendToString(&out)) {
    MutexLock lock(&mu_);
    idle_.push_back(fd);
    return ToGrpcStatus(Internal("cannot serialise " + request.GetTypeName()));
  }
  PutU32(out.data(), static_cast<uint32_t>(out.size() - 8));
  out[4] = static_cast<char>(method & 0xff);
  out[5] = static_cast<char>(method >> 8);
  char head[12];
  Status st = WriteFull(fd, out, deadline);
  if (st.ok()) st = ReadFull(fd, head, sizeof head, deadline);
  std::string body;
  std::string msg;
  if (st.ok()) {
    const uint32_t n = GetU32(head);
    const uint32_t m = GetU32(head + 8);
    if (n > kMaxFrameBytes || m > kMaxFrameBytes) {
      st = Unavailable("a reply of " + std::to_string(n) + " bytes is not a frame");
    } else {
      msg.resize(m);
      body.resize(n);
      st = ReadFull(fd, msg.data(), m, deadline);
      if (st.ok()) st = ReadFull(fd, body.data(), n, deadline);
    }
  }
  if (!st.ok()) {
    close(fd);  // half a call may be on it: never reuse
    return transport(st);
  }
  {
    MutexLock lock(&mu_);
    idle_.push_back(fd);
  }
  const auto code = static_cast<StatusCode>(static_cast<int32_t>(GetU32(head + 4)));
  if (StatusCodeName(code) == "InvalidStatusCode") {
    return ToGrpcStatus(Internal("a reply with an unknown status code: " + msg));
  }
  if (code != StatusCode::kOk) return ToGrpcStatus(Status(code, msg));
  if (!reply->ParseFromString(body)) {
    return ToGrpcStatus(DataLoss("the reply does not parse as " + reply->GetTypeName()));
  }
  return grpc::Status::OK;
}

}  // namespace ff
