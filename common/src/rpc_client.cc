#include "common/rpc_client.h"

#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>

#include <algorithm>
#include <cstdlib>
#include <random>
#include <thread>

#include "common/replicas.h"
#include "common/rpc_status.h"
#include "common/tls.h"
#include "grpc_marks.h"

namespace ff {
namespace {

thread_local int last_call_attempts = 0;

// A client's connection attempt makes progress only while some thread polls for it. Our calls fail
// fast while a server is down and CallRpc then sleeps, so nothing polls but gRPC's backup poller,
// every 5 s by default: a connection to a restarted server sat accepted but unread for up to 5 s,
// and each call retried through it took as long (an fs3 mount's stat took 5-10 s after every
// fs3-meta restart). Polled every 100 ms, the call after a restart goes through within 100 ms of
// the server listening again. gRPC reads this once, at its first initialisation: hence a static
// initialiser (this file is linked wherever a channel is made). A value already in the
// environment wins.
const bool backup_poll_set = [] {
  setenv("GRPC_CLIENT_CHANNEL_BACKUP_POLL_INTERVAL_MS", "100", /*overwrite=*/0);
  return true;
}();

// UNAVAILABLE means "try again later", whoever says it. DEADLINE_EXCEEDED is retried only when
// it is the client's own deadline for this attempt: a handler that answers it (e.g. a wait that
// ran out of time on the server) has given its final answer.
bool Retryable(const grpc::Status& status) {
  if (status.error_code() == grpc::StatusCode::UNAVAILABLE) return true;
  return status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED && !IsHandlerStatus(status);
}

}  // namespace

std::shared_ptr<grpc::Channel> MakeChannel(const std::string& address,
                                           const ChannelOptions& options) {
  grpc::ChannelArguments args;
  int max_bytes = static_cast<int>(options.max_message_mib * 1024 * 1024);
  args.SetMaxReceiveMessageSize(max_bytes);
  args.SetMaxSendMessageSize(max_bytes);
  // Despite its name, gRPC core takes this as the minimum time a connection attempt is given
  // (see ChannelOptions::connect_timeout_ms); the backoff between attempts is the other two.
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, static_cast<int>(options.connect_timeout_ms));
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS,
              static_cast<int>(options.min_reconnect_backoff_ms));
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS,
              static_cast<int>(options.max_reconnect_backoff_ms));
  // Our retries are explicit (CallRpc); gRPC's own would hide attempts from the caller.
  args.SetInt(GRPC_ARG_ENABLE_RETRIES, 0);
  if (int dscp = ProcessTraffic().Dscp(options.traffic); dscp != 0) {
    rpc_detail::MarkSockets(args, dscp);
  }
  if (options.plain) {
    return grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args);
  }
  Result<std::shared_ptr<grpc::ChannelCredentials>> credentials = ProcessChannelCredentials();
  if (!credentials.ok()) {
    // Fail closed: the process was told to run TLS and cannot (the error was logged where its
    // files were read); its calls fail, naming why, and never go out in the clear.
    return grpc::CreateCustomChannel("unix:/nonexistent/tls-setup-failed-see-the-log",
                                     grpc::InsecureChannelCredentials(), args);
  }
  return grpc::CreateCustomChannel(address, *credentials, args);
}

// A follower of a replicated service (common/replicas.h) refused the call before doing anything:
// another attempt (on the leader it named) is safe for every call, idempotent or not.
bool RefusedByFollower(const grpc::Status& status) {
  return status.error_code() == grpc::StatusCode::UNAVAILABLE &&
         FromGrpcStatus(status).HasReason(kNotLeader);
}

// The channel never connected, so nothing was sent: another attempt (through Replicas, on the
// next replica) is safe for every call. gRPC says so only in its message (1.51: "failed to
// connect to all addresses"), a transport status with no reason of ours: the one place where the
// client reads error text (.ci/check-error-text allows it).
bool NeverSent(const grpc::Status& status) {
  return status.error_code() == grpc::StatusCode::UNAVAILABLE && !IsHandlerStatus(status) &&
         status.error_message().find("failed to connect") != std::string::npos;  // error-text-ok
}

Status CallRpc(std::string_view what, const CallOptions& options, const RpcAttempt& attempt) {
  using Clock = std::chrono::steady_clock;
  const int max_attempts = std::max(1, options.max_attempts);
  const auto total =
      options.total_deadline.count() > 0 ? options.total_deadline : options.deadline * max_attempts;
  const auto give_up = Clock::now() + total;
  thread_local std::minstd_rand jitter_rng(std::random_device{}());

  auto backoff = options.initial_backoff;
  grpc::Status last;
  int attempts = 0;
  while (attempts < max_attempts) {
    auto remaining = std::chrono::duration_cast<std::chrono::milliseconds>(give_up - Clock::now());
    if (attempts > 0 && remaining.count() <= 0) break;
    grpc::ClientContext context;
    auto this_deadline = attempts == 0 ? options.deadline : std::min(options.deadline, remaining);
    context.set_deadline(std::chrono::system_clock::now() + this_deadline);
    ++attempts;
    last = attempt(&context);
    if (last.ok()) break;
    if (!RefusedByFollower(last) && !NeverSent(last) && (!options.idempotent || !Retryable(last))) {
      break;
    }
    if (attempts >= max_attempts) break;
    // Full jitter: sleep a random time in [backoff/2, backoff], never past the total deadline.
    auto half = backoff.count() / 2;
    std::uniform_int_distribution<int64_t> dist(half, std::max<int64_t>(half, backoff.count()));
    auto sleep = std::chrono::milliseconds(dist(jitter_rng));
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(give_up - Clock::now());
    if (left.count() <= 0) break;
    std::this_thread::sleep_for(std::min(sleep, left));
    backoff = std::min(options.max_backoff, backoff * 2);
  }
  last_call_attempts = attempts;
  if (last.ok()) return Status::Ok();
  Status status = FromGrpcStatus(last);
  std::string context(what);
  if (attempts > 1) context += " (after " + std::to_string(attempts) + " attempts)";
  return status.WithContext(context);
}

int LastCallAttempts() {
  return last_call_attempts;
}

}  // namespace ff
