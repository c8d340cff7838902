// Tokens: how users and agents prove who they are to hai-server.
//
// A token is "hai_" + 32 random bytes in hex. hai-server stores only its SHA-256, so a leaked
// database does not leak tokens, and never logs a token. Callers send it as gRPC metadata
// "authorization: Bearer <token>".
#pragma once

#include <grpcpp/client_context.h>
#include <grpcpp/server_context.h>

#include <string>

#include "common/result.h"

namespace ff::platform {

// A fresh random token (from /dev/urandom).
Result<std::string> NewToken();
// SHA-256 of the token, raw bytes.
std::string HashToken(const std::string& token);
// The bearer token of a call; empty when none was sent.
std::string BearerToken(const grpc::ServerContext& context);
void SetBearerToken(grpc::ClientContext* context, const std::string& token);

// Reads a token file (one line; surrounding whitespace ignored). With `create`, a missing file is
// made with a new token, mode 0600.
Result<std::string> ReadTokenFile(const std::string& path, bool create);

// Milliseconds since the Unix epoch.
int64_t NowMs();

}  // namespace ff::platform
