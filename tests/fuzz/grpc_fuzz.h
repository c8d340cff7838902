// Shared by the fuzz targets of gRPC services (storage, mgmtd, hai): the input is a sequence of
// calls, each a method of the service and the raw bytes of its request, sent through the real
// server (ff::RpcServer, its message limits and parsing) over an in-process channel.
//
// Input: records of [method u8][flags u8][length u16 LE][length bytes]. The method byte picks
// from the target's method list (modulo); flags pick the caller's metadata (the target decides
// what, e.g. which token) and, with kMore set, append the record's bytes as one more message of
// the previous call (client streams). FF_FUZZ_VERBOSE=1 prints every call's outcome (for
// replaying a finding). Bytes that do not parse as the request answer an error
// from gRPC itself; that is part of what is tested.
#pragma once

#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "common/rpc_server.h"

namespace ff::fuzz {

struct FuzzCall {
  uint8_t method = 0;
  uint8_t flags = 0;
  std::vector<std::string> messages;
};
constexpr uint8_t kMore = 0x80;

inline std::vector<FuzzCall> SplitCalls(const uint8_t* data, size_t size, size_t max_calls = 32) {
  std::vector<FuzzCall> calls;
  size_t i = 0;
  while (i + 4 <= size) {
    const uint8_t method = data[i], flags = data[i + 1];
    size_t len = data[i + 2] | size_t{data[i + 3]} << 8;
    i += 4;
    len = std::min(len, size - i);
    std::string bytes(reinterpret_cast<const char*>(data + i), len);
    i += len;
    if ((flags & kMore) && !calls.empty() && calls.back().messages.size() < 16) {
      calls.back().messages.push_back(std::move(bytes));
      continue;
    }
    if (calls.size() == max_calls) break;
    calls.push_back({method, static_cast<uint8_t>(flags & ~kMore), {std::move(bytes)}});
  }
  return calls;
}

// Encodes calls in the input format (seed corpora are written with it).
inline std::string JoinCalls(const std::vector<FuzzCall>& calls) {
  std::string out;
  for (const FuzzCall& c : calls) {
    for (size_t m = 0; m < c.messages.size(); ++m) {
      const std::string& b = c.messages[m];
      out += static_cast<char>(c.method);
      out += static_cast<char>(m == 0 ? c.flags : (c.flags | kMore));
      const size_t len = std::min<size_t>(b.size(), 0xffff);
      out += static_cast<char>(len & 0xff);
      out += static_cast<char>(len >> 8);
      out.append(b, 0, len);
    }
  }
  return out;
}

struct CallResult {
  grpc::Status status;
  std::vector<std::string> responses;
};

// One call through a generic stub: every message written, then every response read (so unary,
// client-, server- and bidi-streaming methods all work), within `deadline`.
inline CallResult Invoke(grpc::Channel* channel, const std::string& method,
                         const std::vector<std::string>& messages,
                         const std::multimap<std::string, std::string>& metadata,
                         std::chrono::milliseconds deadline) {
  grpc::GenericStub stub(std::shared_ptr<grpc::Channel>(channel, [](grpc::Channel*) {}));
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + deadline);
  for (const auto& [k, v] : metadata)
    context.AddMetadata(k, v);
  grpc::CompletionQueue cq;
  auto call = stub.PrepareCall(&context, method, &cq);
  auto step = [&](auto&& op) {
    void* tag = nullptr;
    bool ok = false;
    op();
    if (!cq.Next(&tag, &ok)) std::abort();
    return ok;
  };
  CallResult result;
  bool open = step([&] { call->StartCall(reinterpret_cast<void*>(1)); });
  for (const std::string& m : messages) {
    if (!open) break;
    grpc::Slice slice(m);
    grpc::ByteBuffer buffer(&slice, 1);
    open = step([&] { call->Write(buffer, reinterpret_cast<void*>(2)); });
  }
  if (open) step([&] { call->WritesDone(reinterpret_cast<void*>(3)); });
  while (open) {
    grpc::ByteBuffer buffer;
    if (!step([&] { call->Read(&buffer, reinterpret_cast<void*>(4)); })) break;
    std::vector<grpc::Slice> slices;
    std::string response;
    if (buffer.Dump(&slices).ok()) {
      for (const grpc::Slice& s : slices)
        response.append(reinterpret_cast<const char*>(s.begin()), s.size());
    }
    result.responses.push_back(std::move(response));
  }
  step([&] { call->Finish(&result.status, reinterpret_cast<void*>(5)); });
  static const bool verbose = std::getenv("FF_FUZZ_VERBOSE") != nullptr;
  if (verbose) {
    std::fprintf(stderr, "%s: %d %s (%zu responses)\n", method.c_str(),
                 static_cast<int>(result.status.error_code()),
                 result.status.error_message().c_str(), result.responses.size());
  }
  cq.Shutdown();
  void* tag = nullptr;
  bool ok = false;
  while (cq.Next(&tag, &ok)) {
  }
  return result;
}

// A unary call with typed messages (the targets' setup and oracles).
template <typename Response, typename Request>
grpc::Status Call(grpc::Channel* channel, const std::string& method, const Request& request,
                  Response* response, const std::multimap<std::string, std::string>& metadata = {},
                  std::chrono::milliseconds deadline = std::chrono::seconds(10)) {
  CallResult r = Invoke(channel, method, {request.SerializeAsString()}, metadata, deadline);
  if (r.status.ok() && (r.responses.size() != 1 || !response->ParseFromString(r.responses[0]))) {
    return grpc::Status(grpc::StatusCode::INTERNAL, "not one parseable response");
  }
  return r.status;
}

[[noreturn]] inline void Fail(const std::string& what) {
  std::fprintf(stderr, "fuzz oracle: %s\n", what.c_str());
  std::abort();
}

// Writes seeds (the input format above) as files NAME under `dir` (replay_main --write-seeds).
inline void WriteSeed(const std::string& dir, const std::string& name,
                      const std::vector<FuzzCall>& calls) {
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/" + name, std::ios::binary) << JoinCalls(calls);
}

}  // namespace ff::fuzz

// Defined by targets that can write their seed corpus (replay_main --write-seeds DIR).
extern "C" void FuzzWriteSeeds(const char* dir);
