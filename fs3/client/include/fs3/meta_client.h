// A client of fs3-meta: one method per metadata call, over the frame transport
// (common/frame_rpc.h) when fs3-meta offers one (it says where with Endpoints), else gRPC.
// Every call is retried under the client's CallOptions while fs3-meta is unreachable (mutations
// carry request ids, so a retry is answered, not applied twice); a frame connection that fails
// is dropped, and the next attempt asks fs3-meta again where its frames are (a restarted
// fs3-meta listens on a new port). Thread-safe.
#pragma once

#include <chrono>
#include <memory>
#include <mutex>
#include <string>

#include "common/frame_rpc.h"
#include "common/rpc_client.h"
#include "fs3/meta_frames.h"
#include "fs3/proto/meta.grpc.pb.h"

namespace ff::fs3 {

struct MetaClientOptions {
  std::string address;  // fs3-meta's gRPC address, host:port
  bool frames = true;   // use the frame transport when fs3-meta offers it
  CallOptions call = CallOptions::Idempotent();
};

class MetaClient {
 public:
  explicit MetaClient(MetaClientOptions options);

#define FS3_META_CLIENT_METHOD(id, name, Req, Resp) \
  Status name(const fs3rpc::Req& request, fs3rpc::Resp* reply);
  FS3_META_FRAME_METHODS(FS3_META_CLIENT_METHOD)
#undef FS3_META_CLIENT_METHOD

  // The namespace check (an administrator's long call, over gRPC only): each attempt may take
  // `attempt` (fs3-meta walks every inode, and with storage every chunk).
  Status Fsck(const fs3rpc::FsckRequest& request, fs3rpc::FsckReply* reply,
              std::chrono::milliseconds attempt = std::chrono::seconds(120));

  // The frame transport's address in use, "" while calls go over gRPC (tests, diagnostics).
  std::string FramesAddress();

 private:
  template <typename Req, typename Resp, typename Method>
  Status Call(const char* what, uint16_t id, Method method, const Req& request, Resp* reply);
  // The frame channel to use, or null for gRPC; a transport error when fs3-meta cannot be asked.
  grpc::Status Frames(std::chrono::system_clock::time_point deadline,
                      std::shared_ptr<FrameChannel>* out);
  void DropFrames(const std::shared_ptr<FrameChannel>& failed);

  const MetaClientOptions options_;
  std::string host_;
  std::unique_ptr<fs3rpc::Meta::Stub> stub_;
  std::mutex mu_;
  std::shared_ptr<FrameChannel> frames_;
  // fs3-meta said it has no frames (or is too old to say): ask again after this.
  std::chrono::steady_clock::time_point no_frames_until_{};
};

}  // namespace ff::fs3
