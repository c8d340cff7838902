#include "fs3/meta_client.h"

#include "common/net.h"
#include "common/rpc_status.h"

namespace ff::fs3 {
namespace {

constexpr auto kAskAgainAfter = std::chrono::seconds(10);

}  // namespace

MetaClient::MetaClient(MetaClientOptions options)
    : options_(std::move(options)), stub_(fs3rpc::Meta::NewStub(MakeChannel(options_.address))) {
  int port = 0;
  if (!SplitHostPort(options_.address, &host_, &port).ok()) host_.clear();
}

std::string MetaClient::FramesAddress() {
  std::lock_guard lock(mu_);
  return frames_ ? frames_->address() : "";
}

grpc::Status MetaClient::Frames(std::chrono::system_clock::time_point deadline,
                                std::shared_ptr<FrameChannel>* out) {
  {
    std::lock_guard lock(mu_);
    if (frames_ || !options_.frames || host_.empty() ||
        std::chrono::steady_clock::now() < no_frames_until_) {
      *out = frames_;
      return grpc::Status::OK;
    }
  }
  grpc::ClientContext context;
  context.set_deadline(
      std::min(deadline, std::chrono::system_clock::now() + std::chrono::seconds(2)));
  fs3rpc::Empty empty;
  fs3rpc::EndpointsReply reply;
  grpc::Status st = stub_->Endpoints(&context, empty, &reply);
  std::lock_guard lock(mu_);
  if (!st.ok() && st.error_code() != grpc::StatusCode::UNIMPLEMENTED) return st;
  if (!st.ok() || reply.frames_port() == 0) {  // an fs3-meta without frames: gRPC it is
    no_frames_until_ = std::chrono::steady_clock::now() + kAskAgainAfter;
  } else if (!frames_) {
    frames_ =
        std::make_shared<FrameChannel>(JoinHostPort(host_, static_cast<int>(reply.frames_port())));
  }
  *out = frames_;
  return grpc::Status::OK;
}

void MetaClient::DropFrames(const std::shared_ptr<FrameChannel>& failed) {
  std::lock_guard lock(mu_);
  if (frames_ == failed) frames_.reset();
}

template <typename Req, typename Resp, typename Method>
Status MetaClient::Call(const char* what, uint16_t id, Method method, const Req& request,
                        Resp* reply) {
  return CallRpc(what, options_.call, [&](grpc::ClientContext* c) -> grpc::Status {
    std::shared_ptr<FrameChannel> frames;
    grpc::Status found = Frames(c->deadline(), &frames);
    if (!found.ok()) return found;  // fs3-meta is not reachable: retried like the call
    if (!frames) return (stub_.get()->*method)(c, request, reply);
    grpc::Status st = frames->Call(id, request, reply, c->deadline());
    // A transport failure (fs3-meta restarting, perhaps on another port): ask again next time.
    if (!st.ok() && !IsHandlerStatus(st)) DropFrames(frames);
    return st;
  });
}

Status MetaClient::Fsck(const fs3rpc::FsckRequest& request, fs3rpc::FsckReply* reply,
                        std::chrono::milliseconds attempt) {
  CallOptions call = options_.call;
  call.deadline = attempt;
  call.total_deadline = std::max(call.total_deadline, attempt);
  return CallRpc("fs3-meta Fsck", call,
                 [&](grpc::ClientContext* c) { return stub_->Fsck(c, request, reply); });
}

#define FS3_META_CLIENT_METHOD(id, name, Req, Resp)                                \
  Status MetaClient::name(const fs3rpc::Req& request, fs3rpc::Resp* reply) {       \
    return Call("fs3-meta " #name, id, &fs3rpc::Meta::Stub::name, request, reply); \
  }
FS3_META_FRAME_METHODS(FS3_META_CLIENT_METHOD)
#undef FS3_META_CLIENT_METHOD

}  // namespace ff::fs3
