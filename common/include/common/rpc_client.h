// Client side of gRPC: channels and calls with deadlines and retries.
//
// Every call has a deadline. Idempotent calls (reads, and writes that carry a request id the
// server deduplicates) are retried with exponential backoff and jitter on UNAVAILABLE and when an
// attempt runs past its own deadline (not when a handler answers DEADLINE_EXCEEDED), until they
// succeed, fail with another code, run out of attempts, or the total deadline passes.
// Non-idempotent calls are tried once: a retry could apply them twice; except that a follower of a
// replicated service refusing a call ("... is not the leader", common/replicas.h) applied nothing,
// so every call is retried then (on the leader, through Replicas), as it is when the channel never
// connected (nothing was sent). Thread-safe.
#pragma once

#include <grpcpp/channel.h>
#include <grpcpp/client_context.h>

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "common/status.h"
#include "common/traffic.h"

namespace ff {

struct ChannelOptions {
  int64_t max_message_mib = 64;
  // Reconnect backoff after a failed connection attempt (gRPC's own default grows to 120 s, far
  // too slow for a daemon that restarts in a second).
  int64_t min_reconnect_backoff_ms = 100;
  int64_t max_reconnect_backoff_ms = 2000;
  // The time one connection attempt (TCP connect and HTTP/2 handshake) is given. gRPC core reads
  // it from GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, despite the name; when that was our 100 ms backoff,
  // a loaded machine (a job's ranks starting on two cores) saw attempts to a live server cut off
  // with "tcp handshaker shutdown", so that every retry of a call failed within a second.
  int64_t connect_timeout_ms = 5000;
  // The class the channel's connections are marked with (its DSCP from ProcessTraffic()).
  TrafficClass traffic = TrafficClass::kOther;
  // Plain even where the process runs TLS (common/tls.h): for a service outside the cluster's
  // authority (etcd).
  bool plain = false;
};

// A channel to `address` ("host:port"), over TLS where the process runs it (common/tls.h).
// Connection happens lazily on the first call.
std::shared_ptr<grpc::Channel> MakeChannel(const std::string& address,
                                           const ChannelOptions& options = {});

struct CallOptions {
  std::chrono::milliseconds deadline{5000};  // per attempt
  bool idempotent = false;                   // retry only when true
  int max_attempts = 5;                      // including the first
  std::chrono::milliseconds initial_backoff{50};
  std::chrono::milliseconds max_backoff{1000};
  // All attempts together; zero means max_attempts * deadline.
  std::chrono::milliseconds total_deadline{0};

  static CallOptions Idempotent(std::chrono::milliseconds deadline = std::chrono::seconds(5)) {
    CallOptions o;
    o.deadline = deadline;
    o.idempotent = true;
    return o;
  }
};

// One attempt of a call: sets the stub's method on `context` (whose deadline is already set).
using RpcAttempt = std::function<grpc::Status(grpc::ClientContext* context)>;

// Runs `attempt` under `options`. `what` names the call in the error ("fs3-mgmtd Heartbeat"); the
// returned Status keeps the server's code (see rpc_status.h) and its message is
// "<what>: <server's message>", with the attempt count when retries were made.
Status CallRpc(std::string_view what, const CallOptions& options, const RpcAttempt& attempt);

// Number of attempts the last CallRpc on this thread made (for tests and metrics).
int LastCallAttempts();

}  // namespace ff
