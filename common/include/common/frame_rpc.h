// A lean request/reply transport for the hottest small calls (fs3-fuse to fs3-meta), beside gRPC.
//
// A gRPC unary call on loopback costs about 250 us here (HTTP/2 framing, completion queues and a
// hand-off between threads on each side), more than the metadata operation it carries. Frames
// are protobuf messages over plain TCP: each client connection is used by one call at a time
// (a pool of them per channel), and each server connection has its own thread that reads a
// request, runs the handler and writes the reply, so a call is one write and one read each way.
//
// Wire format (little-endian):
//   request: u32 body length | u16 method | u16 0 | body (the serialized request)
//   reply:   u32 body length | i32 ff::StatusCode | u32 message length | message | body
// A handler's Status reaches the caller as the same code and message (see CallFrame). Transport
// failures (connection refused or lost, the deadline passing) are kUnavailable / deadline errors
// that say so, and the connection is dropped, never reused half-read.
#pragma once

#include <google/protobuf/message.h>
#include <grpcpp/support/status.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "common/result.h"
#include "common/rpc_status.h"
#include "common/thread_annotations.h"

namespace ff {

constexpr uint32_t kMaxFrameBytes = 64u << 20;

class FrameServer {
 public:
  // Runs the call: `request` is the request's bytes; the reply's bytes go to `reply`.
  using Handler = std::function<Status(std::string_view request, std::string* reply)>;

  // Listens on `listen` ("host:port"; port 0 picks a free one) and serves `handlers` by method.
  static Result<std::unique_ptr<FrameServer>> Start(const std::string& listen,
                                                    std::map<uint16_t, Handler> handlers);
  ~FrameServer();
  FrameServer(const FrameServer&) = delete;
  FrameServer& operator=(const FrameServer&) = delete;

  const std::string& address() const { return address_; }  // host:bound port
  int port() const { return port_; }
  // Stops accepting, cuts every connection and waits for the connection threads.
  void Shutdown();

  // A handler that parses `Req`, runs `body` and serializes `Resp` (a gRPC service's method).
  template <typename Req, typename Resp>
  static Handler Typed(std::function<grpc::Status(const Req&, Resp*)> body);

 private:
  struct Conn;
  FrameServer(int fd, std::string address, int port, std::map<uint16_t, Handler> handlers);
  void AcceptLoop();
  void Serve(Conn* conn);

  int listen_fd_;
  std::string address_;
  int port_;
  std::map<uint16_t, Handler> handlers_;
  struct Conn {
    int fd = -1;
    std::thread thread;
    bool done = false;  // its thread has finished (joined by the acceptor, or on shutdown)
  };
  Mutex mu_;
  std::list<Conn> conns_ FF_GUARDED_BY(mu_);
  std::atomic<bool> stopping_{false};
  std::thread acceptor_;
  std::once_flag shutdown_once_;
};

// Client side: a pool of connections to one server. Thread-safe.
class FrameChannel {
 public:
  explicit FrameChannel(std::string address) : address_(std::move(address)) {}
  ~FrameChannel();
  FrameChannel(const FrameChannel&) = delete;
  FrameChannel& operator=(const FrameChannel&) = delete;

  const std::string& address() const { return address_; }

  // One attempt: sends `request` to `method` and parses the reply into `reply`, by `deadline`.
  // The result reads like a gRPC call's (so CallRpc's retry rules apply): a handler's status as
  // ToGrpcStatus makes it, a transport failure as UNAVAILABLE or DEADLINE_EXCEEDED.
  grpc::Status Call(uint16_t method, const google::protobuf::Message& request,
                    google::protobuf::Message* reply,
                    std::chrono::system_clock::time_point deadline);

 private:
  Result<int> Connect(std::chrono::system_clock::time_point deadline);

  const std::string address_;
  Mutex mu_;
  std::vector<int> idle_ FF_GUARDED_BY(mu_);  // connected, no call in flight
};

template <typename Req, typename Resp>
FrameServer::Handler FrameServer::Typed(std::function<grpc::Status(const Req&, Resp*)> body) {
  return [body = std::move(body)](std::string_view bytes, std::string* out) -> Status {
    Req req;
    if (!req.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) {
      return InvalidArgument("the request does not parse as " + req.GetTypeName());
    }
    Resp resp;
    Status st = FromGrpcStatus(body(req, &resp));
    if (!st.ok()) return st;
    if (!resp.SerializeToString(out)) return Internal("cannot serialise " + resp.GetTypeName());
    return Status::Ok();
  };
}

}  // namespace ff
