// The rendezvous store: a key-value store that the ranks of a communicator use to find each other
// (like torch.distributed's TCPStore).
//
// Store is the interface a communicator rendezvouses through; any shared key-value store can
// implement it (the PyTorch backend adapts the c10d::Store torch hands it). StoreServer serves our
// own over gRPC (rank 0 starts one on MASTER_ADDR:MASTER_PORT, or hfreduce-store runs standalone);
// StoreClient talks to it. Keys and values are bytes; keys at most 1 KiB, values at most 1 MiB.
// All classes are thread-safe.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/result.h"
#include "hfreduce/quorum.h"

namespace ff::hfreduce {

class Store {
 public:
  virtual ~Store() = default;
  virtual Status Set(const std::string& key, const std::string& value) = 0;
  // Waits until every key is set (kDeadlineExceeded after `timeout`, naming missing keys) and
  // returns their values in order.
  virtual Result<std::vector<std::string>> Get(const std::vector<std::string>& keys,
                                               std::chrono::milliseconds timeout) = 0;
  // Adds `delta` to the integer stored at `key` (0 when unset) and returns the new value.
  virtual Result<int64_t> Add(const std::string& key, int64_t delta) = 0;

  Result<std::string> Get(const std::string& key, std::chrono::milliseconds timeout);
};

class StoreServer {
 public:
  // Serves on `listen` ("host:port"; port 0 picks one): the store, and the replica quorums of
  // fault-tolerant jobs (quorum.h). `serving`, when given, is asked before every call: an error
  // (common/replicas.h's NotLeader, from a replica that does not lead) refuses the call, and a
  // StoreClient given every replica's address moves on to the next (hai-server's replicas each
  // run one; only the leader's serves).
  static Result<std::unique_ptr<StoreServer>> Start(const std::string& listen,
                                                    std::function<Status()> serving = nullptr);
  ~StoreServer();
  const std::string& address() const;
  // Every server of the service this one is part of ("a,b,c": hai-server's replicas, as it finds
  // them), told to each quorum's members (Quorum::stores) so that a job's groups also reach the
  // replicas started after they were. Thread-safe; empty by default.
  void SetStores(const std::string& list);
  // The quorums it serves (for what they tell: ReplicaQuorum::Events).
  ReplicaQuorum& quorum();

 private:
  struct Impl;
  explicit StoreServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

class StoreClient final : public Store {
 public:
  // Connects lazily; calls retry while the server is not up yet (ranks may start before rank 0),
  // up to `connect_timeout` per call. `address` may list several servers, comma-separated, of
  // which one serves at a time (StoreServer's `serving`): calls follow the one that does.
  StoreClient(const std::string& address, std::chrono::milliseconds connect_timeout);
  ~StoreClient() override;

  Status Set(const std::string& key, const std::string& value) override;
  Result<std::vector<std::string>> Get(const std::vector<std::string>& keys,
                                       std::chrono::milliseconds timeout) override;
  using Store::Get;
  Result<int64_t> Add(const std::string& key, int64_t delta) override;
  // Asks the server for the job's next replica quorum (quorum.h); waits up to `timeout`.
  Result<Quorum> JoinQuorum(const QuorumRequest& request, std::chrono::milliseconds timeout);
  // Tells the server the replica group is alive (one attempt, within `timeout`).
  Status QuorumHeartbeat(const std::string& job, const std::string& replica_id,
                         std::chrono::milliseconds timeout);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ff::hfreduce
