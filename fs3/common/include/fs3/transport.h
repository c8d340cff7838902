// How chunk data moves between clients and storage services, and along chains. The gRPC
// transport sends small requests as single messages and large ones (above `stream_threshold`)
// as streams of pieces; an RDMA transport can implement the same interface (3FS pulls write
// data with RDMA reads) without touching the CRAQ logic above it, and tests wrap it to drop,
// delay or fail transfers (tests/support/faulty_transport.h). The storage client and each storage
// service take one (ClientOptions::transport, StorageService::Create); control calls (version
// queries, dumps, space) go over plain gRPC stubs (StorageStubs).
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "common/result.h"
#include "common/thread_annotations.h"
#include "fs3/proto/storage.grpc.pb.h"

namespace ff::fs3 {

class ChunkTransport {
 public:
  virtual ~ChunkTransport() = default;
  // One attempt; the status keeps the service's code (retries are the caller's policy).
  virtual Status Write(const std::string& address, const fs3rpc::WriteRequest& req,
                       fs3rpc::WriteResponse* resp, std::chrono::milliseconds deadline) = 0;
  virtual Status Read(const std::string& address, const fs3rpc::ReadRequest& req,
                      fs3rpc::ReadResponse* resp, std::chrono::milliseconds deadline) = 0;
};

// gRPC stubs of storage services, one per address, made on first use.
class StorageStubs {
 public:
  fs3rpc::Storage::Stub* Get(const std::string& address);

 private:
  Mutex mu_;
  std::map<std::string, std::unique_ptr<fs3rpc::Storage::Stub>> stubs_ FF_GUARDED_BY(mu_);
};

struct GrpcTransportOptions {
  std::size_t stream_threshold = std::size_t{1} << 20;  // larger payloads are streamed
  std::size_t piece_bytes = std::size_t{1} << 20;
};

class GrpcTransport final : public ChunkTransport {
 public:
  explicit GrpcTransport(GrpcTransportOptions options = {}) : options_(options) {}
  Status Write(const std::string& address, const fs3rpc::WriteRequest& req,
               fs3rpc::WriteResponse* resp, std::chrono::milliseconds deadline) override;
  Status Read(const std::string& address, const fs3rpc::ReadRequest& req,
              fs3rpc::ReadResponse* resp, std::chrono::milliseconds deadline) override;

 private:
  const GrpcTransportOptions options_;
  StorageStubs stubs_;
};

}  // namespace ff::fs3
