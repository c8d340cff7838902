#include "fs3/meta_client.h"

#include "common/net.h"
#include "common/replicas.h"
#include "common/rpc_status.h"

namespace ff::fs3 {
namespace {

constexpr auto kAskAgainAfter = std::chrono::seconds(10);

}  // namespace

MetaClient::MetaClient(MetaClientOptions options) : options_(std::move(options)) {
  std::vector<std::string> addresses = SplitAddressList(options_.address);
  if (addresses.empty()) addresses.push_back(options_.address);  // calls fail with gRPC's error
  for (const std::string& address : addresses) {
    auto server = std::make_unique<Server>();
    server->address = address;
    server->stub = fs3rpc::Meta::NewStub(MakeChannel(address));
    int port = 0;
    if (!SplitHostPort(address, &server->host, &port).ok()) server->host.clear();
    servers_.push_back(std::move(server));
  }
}

std::string MetaClient::FramesAddress() {
  MutexLock lock(&mu_);
  for (const auto& server : servers_) {
    if (server->frames) return server->frames->address();
  }
  return "";
}

MetaClient::Server& MetaClient::Pick() {
  const std::size_t n = servers_.size();
  const uint64_t first = next_.fetch_add(1, std::memory_order_relaxed);
  if (n == 1) return *servers_[0];
  const auto now = std::chrono::steady_clock::now();
  MutexLock lock(&mu_);
  Server* soonest = nullptr;
  for (std::size_t i = 0; i < n; ++i) {
    Server& s = *servers_[(first + i) % n];
    if (s.down_until <= now) return s;
    if (!soonest || s.down_until < soonest->down_until) soonest = &s;
  }
  return *soonest;  // all failed lately: the one that failed longest ago
}

void MetaClient::MarkDown(Server& server) {
  if (servers_.size() == 1) return;
  MutexLock lock(&mu_);
  // Passed over for 1 s after a failure, twice as long after each failure in a row (a server
  // cut off by the network costs a call's whole deadline each time it is tried), up to 30 s.
  const int shift = std::min(server.failures++, 5);
  server.down_until =
      std::chrono::steady_clock::now() + std::chrono::seconds(std::min(30, 1 << shift));
}

void MetaClient::MarkUp(Server& server) {
  if (servers_.size() == 1) return;
  MutexLock lock(&mu_);
  server.down_until = {};
  server.failures = 0;
}

grpc::Status MetaClient::Frames(Server& server, std::chrono::system_clock::time_point deadline,
                                std::shared_ptr<FrameChannel>* out) {
  {
    MutexLock lock(&mu_);
    if (server.frames || !options_.frames || server.host.empty() ||
        std::chrono::steady_clock::now() < server.no_frames_until) {
      *out = server.frames;
      return grpc::Status::OK;
    }
  }
  grpc::ClientContext context;
  context.set_deadline(
      std::min(deadline, std::chrono::system_clock::now() + std::chrono::seconds(2)));
  fs3rpc::Empty empty;
  fs3rpc::EndpointsReply reply;
  grpc::Status st = server.stub->Endpoints(&context, empty, &reply);
  MutexLock lock(&mu_);
  if (!st.ok() && st.error_code() != grpc::StatusCode::UNIMPLEMENTED) return st;
  if (!st.ok() || reply.frames_port() == 0) {  // an fs3-meta without frames: gRPC it is
    server.no_frames_until = std::chrono::steady_clock::now() + kAskAgainAfter;
  } else if (!server.frames) {
    server.frames = std::make_shared<FrameChannel>(
        JoinHostPort(server.host, static_cast<int>(reply.frames_port())));
  }
  *out = server.frames;
  return grpc::Status::OK;
}

void MetaClient::DropFrames(Server& server, const std::shared_ptr<FrameChannel>& failed) {
  MutexLock lock(&mu_);
  if (server.frames == failed) server.frames.reset();
}

template <typename Req, typename Resp, typename Method>
Status MetaClient::Call(const char* what, uint16_t id, Method method, const Req& request,
                        Resp* reply) {
  return CallRpc(what, options_.call, [&](grpc::ClientContext* c) -> grpc::Status {
    Server& server = Pick();
    std::shared_ptr<FrameChannel> frames;
    grpc::Status found = Frames(server, c->deadline(), &frames);
    if (!found.ok()) {  // fs3-meta is not reachable: retried like the call, on another server
      MarkDown(server);
      return found;
    }
    if (!frames) {
      grpc::Status st = (server.stub.get()->*method)(c, request, reply);
      if (!st.ok() && !IsHandlerStatus(st)) {
        MarkDown(server);
      } else {
        MarkUp(server);  // it answered (a restarted server is back in turn at once)
      }
      return st;
    }
    grpc::Status st = frames->Call(id, request, reply, c->deadline());
    // A transport failure (fs3-meta restarting, perhaps on another port): ask again next time.
    if (!st.ok() && !IsHandlerStatus(st)) {
      DropFrames(server, frames);
      MarkDown(server);
    } else {
      MarkUp(server);
    }
    return st;
  });
}

Status MetaClient::Fsck(const fs3rpc::FsckRequest& request, fs3rpc::FsckReply* reply,
                        std::chrono::milliseconds attempt,
                        const std::function<void(const fs3rpc::FsckReply&)>& progress) {
  CallOptions call = options_.call;
  call.deadline = attempt;
  call.total_deadline = std::max(call.total_deadline, attempt);
  return CallRpc("fs3-meta Fsck", call, [&](grpc::ClientContext* c) {
    Server& server = Pick();
    std::unique_ptr<grpc::ClientReader<fs3rpc::FsckReply>> stream = server.stub->Fsck(c, request);
    fs3rpc::FsckReply message;
    bool done = false;
    while (stream->Read(&message)) {
      if (message.done()) {
        done = true;
        *reply = std::move(message);
      } else if (progress) {
        progress(message);
      }
    }
    grpc::Status st = stream->Finish();
    if (!st.ok() && !IsHandlerStatus(st)) MarkDown(server);
    if (st.ok() && !done) {
      return grpc::Status(grpc::StatusCode::UNAVAILABLE,
                          "the check's stream ended before its report");
    }
    return st;
  });
}

#define FS3_META_CLIENT_METHOD(id, name, Req, Resp)                                \
  Status MetaClient::name(const fs3rpc::Req& request, fs3rpc::Resp* reply) {       \
    return Call("fs3-meta " #name, id, &fs3rpc::Meta::Stub::name, request, reply); \
  }
FS3_META_FRAME_METHODS(FS3_META_CLIENT_METHOD)
#undef FS3_META_CLIENT_METHOD

}  // namespace ff::fs3
