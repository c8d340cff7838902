// Marking gRPC's sockets with a DSCP (internal to ff_common: rpc_client.cc, rpc_server.cc).
#pragma once

#include <grpcpp/support/channel_arguments.h>

namespace ff::rpc_detail {

// Makes every socket of the channels or servers built from `args` carry `dscp` (1..63): client
// connections, listeners and accepted connections alike.
void MarkSockets(grpc::ChannelArguments& args, int dscp);

}  // namespace ff::rpc_detail
