// gRPC marks its own sockets through a "socket mutator" handed to a channel or server as a channel
// argument. The C++ API takes one (ChannelArguments::SetSocketMutator), but the struct is only
// declared in gRPC's public headers; its layout and grpc_socket_mutator_init live in gRPC core's
// src/core/lib/iomgr/socket_mutator.h, which is not installed. The declarations below follow
// that header (unchanged in gRPC from 1.23 to at least 1.51, Debian 12's). A change in it would
// show as unmarked packets in tests/deploy/netlab_test.sh, which checks the marks on the wire.
#include "grpc_marks.h"

#include <grpc/support/sync.h>
#include <spdlog/spdlog.h>

#include <atomic>

#include "common/traffic.h"

// gRPC core's types (global namespace, C++ linkage: that is how libgrpc exports them).
enum grpc_fd_usage {
  GRPC_FD_CLIENT_CONNECTION_USAGE,
  GRPC_FD_SERVER_LISTENER_USAGE,
  GRPC_FD_SERVER_CONNECTION_USAGE,
};
struct grpc_mutate_socket_info {
  int fd;
  grpc_fd_usage usage;
};
struct grpc_socket_mutator_vtable {
  bool (*mutate_fd)(int fd, grpc_socket_mutator* mutator);
  int (*compare)(grpc_socket_mutator* a, grpc_socket_mutator* b);
  void (*destroy)(grpc_socket_mutator* mutator);
  bool (*mutate_fd_2)(const grpc_mutate_socket_info* info, grpc_socket_mutator* mutator);
};
struct grpc_socket_mutator {
  const grpc_socket_mutator_vtable* vtable;
  gpr_refcount refcount;
};
void grpc_socket_mutator_init(grpc_socket_mutator* mutator,
                              const grpc_socket_mutator_vtable* vtable);

namespace ff::rpc_detail {
namespace {

struct DscpMutator {
  grpc_socket_mutator base;  // first: gRPC hands back a pointer to it
  int dscp;
};

bool MutateFd(int fd, grpc_socket_mutator* mutator) {
  const int dscp = reinterpret_cast<DscpMutator*>(mutator)->dscp;
  if (Status st = MarkSocket(fd, dscp); !st.ok()) {
    // Unmarked traffic still flows (as best effort): say so once, do not refuse the connection.
    static std::atomic<bool> warned{false};
    if (!warned.exchange(true)) spdlog::warn("cannot mark gRPC sockets: {}", st.ToString());
  }
  return true;
}

int Compare(grpc_socket_mutator* a, grpc_socket_mutator* b) {
  const int x = reinterpret_cast<DscpMutator*>(a)->dscp;
  const int y = reinterpret_cast<DscpMutator*>(b)->dscp;
  return x < y ? -1 : (x > y ? 1 : 0);
}

void Destroy(grpc_socket_mutator* mutator) {
  delete reinterpret_cast<DscpMutator*>(mutator);
}

constexpr grpc_socket_mutator_vtable kVtable{MutateFd, Compare, Destroy, nullptr};

}  // namespace

void MarkSockets(grpc::ChannelArguments& args, int dscp) {
  auto* mutator = new DscpMutator{};
  mutator->dscp = dscp;
  grpc_socket_mutator_init(&mutator->base, &kVtable);
  args.SetSocketMutator(&mutator->base);  // the arguments hold the reference
}

}  // namespace ff::rpc_detail
