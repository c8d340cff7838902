#include "hfreduce/store.h"

#include <map>
#include <mutex>
#include <random>

#include "common/replicas.h"
#include "common/rpc_client.h"
#include "common/rpc_server.h"
#include "common/rpc_status.h"
#include "common/thread_annotations.h"
#include "hfreduce/proto/store.grpc.pb.h"

namespace ff::hfreduce {
namespace {

constexpr std::size_t kMaxKey = 1024;
constexpr std::size_t kMaxValue = 1 << 20;
constexpr int64_t kMaxWaitMs = 3600 * 1000;

class StoreService final : public proto::Store::Service {
 public:
  explicit StoreService(std::function<Status()> serving)
      : serving_(std::move(serving)), quorum_(std::to_string(std::random_device{}())) {}
  ReplicaQuorum& quorum() { return quorum_; }
  void SetStores(std::vector<std::string> stores) {
    MutexLock lock(&stores_mu_);
    stores_ = std::move(stores);
  }

  grpc::Status Set(grpc::ServerContext*, const proto::SetRequest* request,
                   proto::SetReply*) override {
    return ServeRpc("Store.Set", [&]() -> Status {
      FF_RETURN_IF_ERROR(Serving());
      FF_RETURN_IF_ERROR(CheckKey(request->key()));
      if (request->value().size() > kMaxValue) {
        return InvalidArgument("store: value for '" + request->key() + "' exceeds 1 MiB");
      }
      MutexLock lock(&mu_);
      data_[request->key()] = request->value();
      changed_.notify_all();
      return Status::Ok();
    });
  }

  grpc::Status Get(grpc::ServerContext* context, const proto::GetRequest* request,
                   proto::GetReply* reply) override {
    return ServeRpc("Store.Get", [&]() -> Status {
      FF_RETURN_IF_ERROR(Serving());
      for (const std::string& key : request->keys())
        FF_RETURN_IF_ERROR(CheckKey(key));
      if (request->timeout_ms() < 0 || request->timeout_ms() > kMaxWaitMs) {
        return InvalidArgument("store: timeout_ms must be in 0..3600000");
      }
      auto until =
          std::chrono::steady_clock::now() + std::chrono::milliseconds(request->timeout_ms());
      UniqueLock lock(&mu_);
      while (true) {
        std::string missing;
        for (const std::string& key : request->keys()) {
          if (!data_.contains(key)) missing += (missing.empty() ? "" : ", ") + key;
        }
        if (missing.empty()) break;
        if (context->IsCancelled()) return Status(StatusCode::kCancelled, "store: get cancelled");
        if (changed_.wait_until(lock, std::min(until, std::chrono::steady_clock::now() +
                                                          std::chrono::milliseconds(100))) ==
                std::cv_status::timeout &&
            std::chrono::steady_clock::now() >= until) {
          return DeadlineExceeded("store: keys not set in time: " + missing);
        }
      }
      for (const std::string& key : request->keys())
        reply->add_values(data_[key]);
      return Status::Ok();
    });
  }

  grpc::Status Add(grpc::ServerContext*, const proto::AddRequest* request,
                   proto::AddReply* reply) override {
    return ServeRpc("Store.Add", [&]() -> Status {
      FF_RETURN_IF_ERROR(Serving());
      FF_RETURN_IF_ERROR(CheckKey(request->key()));
      MutexLock lock(&mu_);
      std::string& slot = data_[request->key()];
      int64_t value = 0;
      if (!slot.empty()) {
        try {
          value = std::stoll(slot);
        } catch (const std::exception&) {
          return FailedPrecondition("store: '" + request->key() + "' does not hold an integer");
        }
      }
      value += request->delta();
      slot = std::to_string(value);
      reply->set_value(value);
      changed_.notify_all();
      return Status::Ok();
    });
  }

  grpc::Status Quorum(grpc::ServerContext*, const proto::QuorumRequest* request,
                      proto::QuorumReply* reply) override {
    return ServeRpc("Store.Quorum", [&]() -> Status {
      FF_RETURN_IF_ERROR(Serving());
      if (request->timeout_ms() < 0 || request->timeout_ms() > kMaxWaitMs) {
        return InvalidArgument("quorum: timeout_ms must be in 0..3600000");
      }
      QuorumRequest q;
      q.job = request->job();
      q.replica_id = request->replica_id();
      q.step = request->step();
      q.min_replicas = request->min_replicas();
      q.replicas = request->replicas();
      q.reform = request->reform();
      q.join_timeout = std::chrono::milliseconds(request->join_timeout_ms());
      q.heartbeat_timeout = std::chrono::milliseconds(request->heartbeat_timeout_ms());
      FF_ASSIGN_OR_RETURN(hfreduce::Quorum decided,
                          quorum_.Join(q, std::chrono::steady_clock::now() +
                                              std::chrono::milliseconds(request->timeout_ms())));
      reply->set_id(decided.id);
      for (const QuorumMember& m : decided.members) {
        auto* member = reply->add_members();
        member->set_replica_id(m.replica_id);
        member->set_step(m.step);
      }
      reply->set_replica_rank(decided.replica_rank);
      reply->set_max_step(decided.max_step);
      reply->set_recover_from(decided.recover_from);
      reply->set_store_prefix(decided.store_prefix);
      {
        MutexLock lock(&stores_mu_);
        for (const std::string& s : stores_)
          reply->add_stores(s);
      }
      return Status::Ok();
    });
  }

  grpc::Status QuorumHeartbeat(grpc::ServerContext*, const proto::QuorumHeartbeatRequest* request,
                               proto::QuorumHeartbeatReply*) override {
    return ServeRpc("Store.QuorumHeartbeat", [&]() -> Status {
      FF_RETURN_IF_ERROR(Serving());
      return quorum_.Heartbeat(request->job(), request->replica_id());
    });
  }

 private:
  Status Serving() const { return serving_ ? serving_() : Status::Ok(); }

  static Status CheckKey(const std::string& key) {
    if (key.empty() || key.size() > kMaxKey) {
      return InvalidArgument("store: keys must be 1..1024 bytes");
    }
    return Status::Ok();
  }

  Mutex mu_;
  CondVar changed_;
  std::map<std::string, std::string> data_ FF_GUARDED_BY(mu_);
  const std::function<Status()> serving_;
  ReplicaQuorum quorum_;
  Mutex stores_mu_;
  std::vector<std::string> stores_ FF_GUARDED_BY(stores_mu_);
};

}  // namespace

struct StoreServer::Impl {
  explicit Impl(std::function<Status()> serving) : service(std::move(serving)) {}
  StoreService service;
  std::unique_ptr<RpcServer> server;
};

Result<std::unique_ptr<StoreServer>> StoreServer::Start(const std::string& listen,
                                                        std::function<Status()> serving) {
  auto impl = std::make_unique<Impl>(std::move(serving));
  RpcServerOptions options;
  options.listen = listen;
  options.shutdown_grace_ms = 0;
  FF_ASSIGN_OR_RETURN(impl->server, RpcServer::Start(options, {&impl->service}));
  return std::unique_ptr<StoreServer>(new StoreServer(std::move(impl)));
}

StoreServer::StoreServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
StoreServer::~StoreServer() = default;
ReplicaQuorum& StoreServer::quorum() {
  return impl_->service.quorum();
}

const std::string& StoreServer::address() const {
  return impl_->server->address();
}

void StoreServer::SetStores(const std::string& list) {
  impl_->service.SetStores(SplitAddressList(list));
}

struct StoreClient::Impl {
  Impl(const std::string& addresses, std::chrono::milliseconds timeout)
      : address(addresses), connect_timeout(timeout), replicas(addresses) {}
  std::string address;
  std::chrono::milliseconds connect_timeout;
  Replicas<proto::Store> replicas;  // one address, or every replica's (one serves at a time)

  // Waiting for a channel to connect only makes sense with one server to wait for; with
  // several, an unreachable one is skipped (CallRpc retries what was never sent).
  bool wait_for_ready() const { return replicas.size() == 1; }

  CallOptions Options(std::chrono::milliseconds wait = std::chrono::milliseconds(0)) const {
    CallOptions o = CallOptions::Idempotent(std::chrono::milliseconds(2000) + wait);
    o.max_attempts = 1000;  // bounded by the total deadline
    o.initial_backoff = std::chrono::milliseconds(20);
    o.max_backoff = std::chrono::milliseconds(500);
    o.total_deadline = connect_timeout + wait;
    return o;
  }
};

StoreClient::StoreClient(const std::string& address, std::chrono::milliseconds connect_timeout)
    : impl_(std::make_unique<Impl>(address, connect_timeout)) {}

StoreClient::~StoreClient() = default;

Status StoreClient::Set(const std::string& key, const std::string& value) {
  proto::SetRequest request;
  request.set_key(key);
  request.set_value(value);
  proto::SetReply reply;
  // Set is idempotent (same key, same value).
  return CallRpc("hfreduce store " + impl_->address + " Set", impl_->Options(),
                 [&](grpc::ClientContext* c) {
                   return impl_->replicas.Attempt(
                       [&](proto::Store::Stub& s) { return s.Set(c, request, &reply); });
                 });
}

Result<std::vector<std::string>> StoreClient::Get(const std::vector<std::string>& keys,
                                                  std::chrono::milliseconds timeout) {
  proto::GetRequest request;
  for (const std::string& k : keys)
    request.add_keys(k);
  request.set_timeout_ms(timeout.count());
  proto::GetReply reply;
  FF_RETURN_IF_ERROR(CallRpc("hfreduce store " + impl_->address + " Get", impl_->Options(timeout),
                             [&](grpc::ClientContext* c) {
                               return impl_->replicas.Attempt([&](proto::Store::Stub& s) {
                                 return s.Get(c, request, &reply);
                               });
                             }));
  return std::vector<std::string>(reply.values().begin(), reply.values().end());
}

Result<std::string> Store::Get(const std::string& key, std::chrono::milliseconds timeout) {
  FF_ASSIGN_OR_RETURN(std::vector<std::string> values, Get(std::vector<std::string>{key}, timeout));
  return values.front();
}

Result<int64_t> StoreClient::Add(const std::string& key, int64_t delta) {
  proto::AddRequest request;
  request.set_key(key);
  request.set_delta(delta);
  proto::AddReply reply;
  // Not idempotent: tried once once connected. Wait for the server to be reachable first.
  CallOptions options = impl_->Options();
  options.idempotent = false;
  options.deadline = impl_->connect_timeout;
  FF_RETURN_IF_ERROR(
      CallRpc("hfreduce store " + impl_->address + " Add", options, [&](grpc::ClientContext* c) {
        c->set_wait_for_ready(impl_->wait_for_ready());
        return impl_->replicas.Attempt(
            [&](proto::Store::Stub& s) { return s.Add(c, request, &reply); });
      }));
  return reply.value();
}

Result<Quorum> StoreClient::JoinQuorum(const QuorumRequest& request,
                                       std::chrono::milliseconds timeout) {
  proto::QuorumRequest r;
  r.set_job(request.job);
  r.set_replica_id(request.replica_id);
  r.set_step(request.step);
  r.set_min_replicas(request.min_replicas);
  r.set_replicas(request.replicas);
  r.set_reform(request.reform);
  r.set_join_timeout_ms(request.join_timeout.count());
  r.set_heartbeat_timeout_ms(request.heartbeat_timeout.count());
  r.set_timeout_ms(timeout.count());
  proto::QuorumReply reply;
  // Not idempotent (it joins a round): tried once once the server is reachable.
  CallOptions options = impl_->Options(timeout);
  options.idempotent = false;
  FF_RETURN_IF_ERROR(
      CallRpc("hfreduce store " + impl_->address + " Quorum", options, [&](grpc::ClientContext* c) {
        c->set_wait_for_ready(impl_->wait_for_ready());
        return impl_->replicas.Attempt(
            [&](proto::Store::Stub& s) { return s.Quorum(c, r, &reply); });
      }));
  Quorum q;
  q.id = reply.id();
  for (const auto& m : reply.members())
    q.members.push_back({m.replica_id(), m.step()});
  q.replica_rank = reply.replica_rank();
  q.max_step = reply.max_step();
  q.recover_from = reply.recover_from();
  q.store_prefix = reply.store_prefix();
  q.stores.assign(reply.stores().begin(), reply.stores().end());
  return q;
}

Status StoreClient::QuorumHeartbeat(const std::string& job, const std::string& replica_id,
                                    std::chrono::milliseconds timeout) {
  proto::QuorumHeartbeatRequest r;
  r.set_job(job);
  r.set_replica_id(replica_id);
  proto::QuorumHeartbeatReply reply;
  CallOptions options = CallOptions::Idempotent(timeout);
  options.max_attempts = 1;
  return CallRpc("hfreduce store " + impl_->address + " QuorumHeartbeat", options,
                 [&](grpc::ClientContext* c) {
                   return impl_->replicas.Attempt(
                       [&](proto::Store::Stub& s) { return s.QuorumHeartbeat(c, r, &reply); });
                 });
}

}  // namespace ff::hfreduce
