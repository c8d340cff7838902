// A client of fs3-meta: one method per metadata call, over the frame transport
// (common/frame_rpc.h) when fs3-meta offers one (it says where with Endpoints), else gRPC.
// Every call is retried under the client's CallOptions while fs3-meta is unreachable (mutations
// carry request ids, so a retry is answered, not applied twice); a frame connection that fails
// is dropped, and the next attempt asks fs3-meta again where its frames are (a restarted
// fs3-meta listens on a new port).
//
// Several servers (fs3-meta on the etcd engine: any number serve one namespace): calls are spread
// over them in turn; a server that fails at the transport (dead, restarting) is passed over for
// a while and the call's retry goes to the next one, so a server's death reaches no application.
// Thread-safe.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/frame_rpc.h"
#include "common/rpc_client.h"
#include "common/thread_annotations.h"
#include "fs3/meta_frames.h"
#include "fs3/proto/meta.grpc.pb.h"

namespace ff::fs3 {

struct MetaClientOptions {
  // fs3-meta's gRPC address, host:port; or several, comma-separated (servers of one namespace).
  std::string address;
  bool frames = true;  // use the frame transport when fs3-meta offers it
  CallOptions call = CallOptions::Idempotent();
};

class MetaClient {
 public:
  explicit MetaClient(MetaClientOptions options);

#define FS3_META_CLIENT_METHOD(id, name, Req, Resp) \
  Status name(const fs3rpc::Req& request, fs3rpc::Resp* reply);
  FS3_META_FRAME_METHODS(FS3_META_CLIENT_METHOD)
#undef FS3_META_CLIENT_METHOD

  // The namespace check (an administrator's long call, over gRPC only; fs3-meta reads every
  // record, and with storage every chunk): `reply` gets the final message (done set, with the
  // problems); `progress`, when given, each progress message on the way. An attempt may take
  // `attempt`; a check that ends without its final message is kUnavailable (tried again).
  Status Fsck(const fs3rpc::FsckRequest& request, fs3rpc::FsckReply* reply,
              std::chrono::milliseconds attempt = std::chrono::hours(24),
              const std::function<void(const fs3rpc::FsckReply&)>& progress = nullptr);

  // The frame transport's address in use, "" while calls go over gRPC (tests, diagnostics).
  std::string FramesAddress();

 private:
  struct Server {
    std::string address, host;
    std::unique_ptr<fs3rpc::Meta::Stub> stub;
    // Guarded by the client's mu_ (not said to the analysis: a nested struct cannot name it).
    std::shared_ptr<FrameChannel> frames;
    // fs3-meta said it has no frames (or is too old to say): ask again after this.
    std::chrono::steady_clock::time_point no_frames_until{};
    // It failed at the transport: others are asked first until then.
    std::chrono::steady_clock::time_point down_until{};
    int failures = 0;  // transport failures in a row
  };

  template <typename Req, typename Resp, typename Method>
  Status Call(const char* what, uint16_t id, Method method, const Req& request, Resp* reply);
  // The next server in turn, passing over those that failed lately (when all did, the one that
  // failed longest ago).
  Server& Pick();
  void MarkDown(Server& server);
  void MarkUp(Server& server);
  // The frame channel to use, or null for gRPC; a transport error when fs3-meta cannot be asked.
  grpc::Status Frames(Server& server, std::chrono::system_clock::time_point deadline,
                      std::shared_ptr<FrameChannel>* out);
  void DropFrames(Server& server, const std::shared_ptr<FrameChannel>& failed);

  const MetaClientOptions options_;
  std::vector<std::unique_ptr<Server>> servers_;
  std::atomic<uint64_t> next_{0};
  Mutex mu_;
};

}  // namespace ff::fs3
