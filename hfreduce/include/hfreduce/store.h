// The rendezvous store: a small key-value service over gRPC that the ranks of a communicator use
// to find each other (like torch.distributed's TCPStore).
//
// StoreServer serves it (rank 0 starts one on MASTER_ADDR:MASTER_PORT, or hfreduce-store runs
// standalone); StoreClient talks to it. Keys and values are bytes; keys at most 1 KiB, values at
// most 1 MiB. Both classes are thread-safe.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "common/result.h"

namespace ff::hfreduce {

class StoreServer {
 public:
  // Serves on `listen` ("host:port"; port 0 picks one).
  static Result<std::unique_ptr<StoreServer>> Start(const std::string& listen);
  ~StoreServer();
  const std::string& address() const;

 private:
  struct Impl;
  explicit StoreServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

class StoreClient {
 public:
  // Connects lazily; calls retry while the server is not up yet (ranks may start before rank 0),
  // up to `connect_timeout` per call.
  StoreClient(const std::string& address, std::chrono::milliseconds connect_timeout);
  ~StoreClient();

  Status Set(const std::string& key, const std::string& value);
  // Waits until every key is set (kDeadlineExceeded after `timeout`, naming missing keys).
  Result<std::vector<std::string>> Get(const std::vector<std::string>& keys,
                                       std::chrono::milliseconds timeout);
  Result<std::string> Get(const std::string& key, std::chrono::milliseconds timeout);
  Result<int64_t> Add(const std::string& key, int64_t delta);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ff::hfreduce
