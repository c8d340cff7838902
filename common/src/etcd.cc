#include "common/etcd.h"

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <thread>

#include "common/net.h"
#include "common/rpc_client.h"

namespace ff::etcd {
namespace {

using Clock = std::chrono::steady_clock;

// gRPC takes deadlines on the system clock.
std::chrono::system_clock::time_point Wall(Clock::time_point t) {
  return std::chrono::system_clock::now() +
         std::chrono::duration_cast<std::chrono::system_clock::duration>(t - Clock::now());
}

// etcd's errors come as gRPC codes with an "etcdserver: ..." message; ours keep the message and
// take the code a caller can act on.
Status FromEtcd(const char* what, const std::string& endpoint, const grpc::Status& s) {
  const std::string msg = s.error_message();
  StatusCode code = StatusCode::kUnavailable;
  switch (s.error_code()) {
    case grpc::StatusCode::OUT_OF_RANGE:
      code = StatusCode::kOutOfRange;  // "mvcc: required revision has been compacted"
      break;
    case grpc::StatusCode::RESOURCE_EXHAUSTED:
      code = StatusCode::kResourceExhausted;  // "mvcc: database space exceeded"
      break;
    case grpc::StatusCode::INVALID_ARGUMENT:
      code = StatusCode::kInvalidArgument;  // too many operations, duplicate key, too large
      break;
    case grpc::StatusCode::NOT_FOUND:
      code = StatusCode::kNotFound;  // "requested lease not found"
      break;
    case grpc::StatusCode::FAILED_PRECONDITION:
      code = StatusCode::kFailedPrecondition;
      break;
    case grpc::StatusCode::PERMISSION_DENIED:
    case grpc::StatusCode::UNAUTHENTICATED:
      code = StatusCode::kPermissionDenied;
      break;
    case grpc::StatusCode::DEADLINE_EXCEEDED:
      code = StatusCode::kDeadlineExceeded;
      break;
    default:
      code = StatusCode::kUnavailable;
  }
  return Status(code, std::string("etcd ") + what + " at " + endpoint + ": " + msg);
}

// Failures worth another member: the member is unreachable, has no quorum, or timed out.
bool TryAnother(const grpc::Status& s) {
  return s.error_code() == grpc::StatusCode::UNAVAILABLE ||
         s.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED;
}

}  // namespace

Result<std::vector<std::string>> ParseEndpoints(const std::string& list) {
  std::vector<std::string> out;
  std::size_t start = 0;
  while (start <= list.size()) {
    std::size_t comma = list.find(',', start);
    if (comma == std::string::npos) comma = list.size();
    std::string e = list.substr(start, comma - start);
    e.erase(0, e.find_first_not_of(" \t"));
    e.erase(e.find_last_not_of(" \t") + 1);
    for (const char* scheme : {"http://", "https://"}) {
      if (e.rfind(scheme, 0) == 0) e = e.substr(std::string(scheme).size());
    }
    if (!e.empty() && e.back() == '/') e.pop_back();
    if (!e.empty()) {
      std::string host;
      int port = 0;
      if (!SplitHostPort(e, &host, &port).ok() || port <= 0) {
        return InvalidArgument("etcd endpoint '" + e + "' is not host:port");
      }
      out.push_back(e);
    }
    start = comma + 1;
  }
  if (out.empty()) return InvalidArgument("no etcd endpoints in '" + list + "'");
  return out;
}

std::string PrefixEnd(const std::string& prefix) {
  std::string end = prefix;
  while (!end.empty()) {
    auto& c = reinterpret_cast<unsigned char&>(end.back());
    if (c < 0xff) {
      ++c;
      return end;
    }
    end.pop_back();
  }
  return std::string(1, '\0');  // every key
}

Kv FromProto(const etcdserverpb::KeyValue& kv) {
  return Kv{kv.key(),          kv.value(),   kv.create_revision(),
            kv.mod_revision(), kv.version(), kv.lease()};
}

Result<std::unique_ptr<Client>> Client::Make(const Options& options) {
  if (options.endpoints.empty()) return InvalidArgument("etcd: no endpoints");
  std::unique_ptr<Client> c(new Client(options));
  for (const std::string& e : options.endpoints) {
    Member m;
    m.endpoint = e;
    ChannelOptions co;
    co.max_reconnect_backoff_ms = 500;
    co.connect_timeout_ms = 1000;
    co.plain = true;  // (etcd's TLS is its own, not the cluster's: common/tls.h)
    m.channel = MakeChannel(e, co);
    m.kv = etcdserverpb::KV::NewStub(m.channel);
    m.lease = etcdserverpb::Lease::NewStub(m.channel);
    m.watch = etcdserverpb::Watch::NewStub(m.channel);
    m.maintenance = etcdserverpb::Maintenance::NewStub(m.channel);
    c->members_.push_back(std::move(m));
  }
  return c;
}

Result<std::unique_ptr<Client>> Client::Connect(const std::vector<std::string>& endpoints) {
  std::string list;
  for (const std::string& e : endpoints)
    list += (list.empty() ? "" : ",") + e;
  FF_ASSIGN_OR_RETURN(auto parsed, ParseEndpoints(list));
  return Make(Options{.endpoints = parsed});
}

Status Client::Call(const char* what, bool write, const Attempt& attempt) {
  const auto deadline = Clock::now() + options_.call_timeout;
  std::size_t first;
  {
    MutexLock lock(&mu_);
    first = preferred_;
  }
  Status last = Unavailable(std::string("etcd ") + what + ": no member tried");
  bool maybe_sent = false;  // a write attempt that may have reached a member
  auto fail = [&] {
    if (!write || !maybe_sent) return last;
    return Status(
        last.code(),
        last.message() + " (outcome unknown: the write may or may not have been applied)");
  };
  for (int round = 0;; ++round) {
    for (std::size_t i = 0; i < members_.size(); ++i) {
      const std::size_t idx = (first + i) % members_.size();
      Member& m = members_[idx];
      const auto now = Clock::now();
      if (now >= deadline) return fail();
      const auto attempt_deadline = std::min(deadline, now + options_.attempt_timeout);
      // Connect first (within the attempt's time): a member that cannot be reached is skipped
      // without sending anything; in the first round, one whose last connection attempt failed
      // is skipped at once (the others are tried before waiting for it).
      const grpc_connectivity_state state = m.channel->GetState(true);
      if (state == GRPC_CHANNEL_TRANSIENT_FAILURE && round == 0 && members_.size() > 1) {
        last = Unavailable(std::string("etcd ") + what + " at " + m.endpoint + ": unreachable");
        continue;
      }
      if (state != GRPC_CHANNEL_READY && !m.channel->WaitForConnected(Wall(attempt_deadline))) {
        last = Unavailable(std::string("etcd ") + what + " at " + m.endpoint + ": cannot connect");
        continue;
      }
      grpc::ClientContext ctx;
      ctx.set_deadline(Wall(attempt_deadline));
      grpc::Status s = attempt(m, &ctx);
      if (s.ok()) {
        MutexLock lock(&mu_);
        preferred_ = idx;
        return Status::Ok();
      }
      if (!TryAnother(s)) return FromEtcd(what, m.endpoint, s);
      maybe_sent = true;
      last = FromEtcd(what, m.endpoint, s);
    }
    // Every member failed this round: a pause before the next (a member restarting, an election).
    const auto pause = std::chrono::milliseconds(std::min(50 * (1 << std::min(round, 4)), 500));
    if (Clock::now() + pause >= deadline) return fail();
    std::this_thread::sleep_for(pause);
  }
}

Result<std::optional<Kv>> Client::Get(const std::string& key, int64_t revision,
                                      int64_t* read_revision) {
  FF_ASSIGN_OR_RETURN(RangeResult r, Range(key, "", 1, revision));
  if (read_revision) *read_revision = r.revision;
  if (r.kvs.empty()) return std::optional<Kv>();
  return std::optional<Kv>(std::move(r.kvs[0]));
}

Result<RangeResult> Client::Range(const std::string& key, const std::string& range_end,
                                  int64_t limit, int64_t revision, bool count_only,
                                  bool serializable) {
  etcdserverpb::RangeRequest req;
  req.set_key(key);
  req.set_range_end(range_end);
  req.set_limit(limit);
  req.set_revision(revision);
  req.set_count_only(count_only);
  req.set_serializable(serializable);
  etcdserverpb::RangeResponse resp;
  FF_RETURN_IF_ERROR(Call("range", false, [&](Member& m, grpc::ClientContext* ctx) {
    resp.Clear();
    return m.kv->Range(ctx, req, &resp);
  }));
  RangeResult out;
  for (const auto& kv : resp.kvs())
    out.kvs.push_back(FromProto(kv));
  out.more = resp.more();
  out.count = resp.count();
  out.revision = resp.header().revision();
  return out;
}

Result<int64_t> Client::Put(const std::string& key, const std::string& value, int64_t lease) {
  etcdserverpb::PutRequest req;
  req.set_key(key);
  req.set_value(value);
  req.set_lease(lease);
  etcdserverpb::PutResponse resp;
  FF_RETURN_IF_ERROR(Call("put", true, [&](Member& m, grpc::ClientContext* ctx) {
    return m.kv->Put(ctx, req, &resp);
  }));
  return resp.header().revision();
}

Result<int64_t> Client::Delete(const std::string& key, const std::string& range_end) {
  etcdserverpb::DeleteRangeRequest req;
  req.set_key(key);
  req.set_range_end(range_end);
  etcdserverpb::DeleteRangeResponse resp;
  FF_RETURN_IF_ERROR(Call("delete", true, [&](Member& m, grpc::ClientContext* ctx) {
    return m.kv->DeleteRange(ctx, req, &resp);
  }));
  return resp.deleted();
}

Result<etcdserverpb::TxnResponse> Client::Txn(const etcdserverpb::TxnRequest& request) {
  // A transaction of reads alone is retried on another member like any read.
  auto reads_only = [](const auto& ops) {
    return std::all_of(ops.begin(), ops.end(),
                       [](const etcdserverpb::RequestOp& op) { return op.has_request_range(); });
  };
  const bool write = !reads_only(request.success()) || !reads_only(request.failure());
  etcdserverpb::TxnResponse resp;
  FF_RETURN_IF_ERROR(Call("txn", write, [&](Member& m, grpc::ClientContext* ctx) {
    resp.Clear();
    return m.kv->Txn(ctx, request, &resp);
  }));
  return resp;
}

Result<int64_t> Client::GrantLease(int64_t ttl_s) {
  etcdserverpb::LeaseGrantRequest req;
  req.set_ttl(ttl_s);
  etcdserverpb::LeaseGrantResponse resp;
  FF_RETURN_IF_ERROR(Call("lease grant", true, [&](Member& m, grpc::ClientContext* ctx) {
    return m.lease->LeaseGrant(ctx, req, &resp);
  }));
  if (!resp.error().empty()) return Unavailable("etcd lease grant: " + resp.error());
  return resp.id();
}

Status Client::RevokeLease(int64_t id) {
  etcdserverpb::LeaseRevokeRequest req;
  req.set_id(id);
  etcdserverpb::LeaseRevokeResponse resp;
  return Call("lease revoke", true, [&](Member& m, grpc::ClientContext* ctx) {
    return m.lease->LeaseRevoke(ctx, req, &resp);
  });
}

Result<int64_t> Client::KeepAlive(int64_t id) {
  etcdserverpb::LeaseKeepAliveResponse resp;
  // Renewing is safe to repeat: it is retried like a read.
  FF_RETURN_IF_ERROR(Call("lease keepalive", false, [&](Member& m, grpc::ClientContext* ctx) {
    auto stream = m.lease->LeaseKeepAlive(ctx);
    etcdserverpb::LeaseKeepAliveRequest req;
    req.set_id(id);
    if (!stream->Write(req) || !stream->Read(&resp)) {
      stream->WritesDone();
      grpc::Status s = stream->Finish();
      return s.ok() ? grpc::Status(grpc::StatusCode::UNAVAILABLE, "keepalive stream ended") : s;
    }
    stream->WritesDone();
    ctx->TryCancel();  // the server keeps its end open; we have our answer
    stream->Finish();
    return grpc::Status::OK;
  }));
  if (resp.ttl() <= 0) {
    return Status(StatusCode::kNotFound, "etcd lease " + std::to_string(id) + " has expired");
  }
  return resp.ttl();
}

Result<std::vector<etcdserverpb::Event>> Client::WaitForChanges(const std::string& key,
                                                                const std::string& range_end,
                                                                int64_t start_revision,
                                                                std::chrono::milliseconds timeout) {
  std::vector<etcdserverpb::Event> events;
  Status compacted;
  Member* member;
  {
    MutexLock lock(&mu_);
    member = &members_[preferred_];
  }
  grpc::ClientContext ctx;
  ctx.set_deadline(Wall(Clock::now() + timeout));
  auto stream = member->watch->Watch(&ctx);
  etcdserverpb::WatchRequest req;
  auto* create = req.mutable_create_request();
  create->set_key(key);
  create->set_range_end(range_end);
  create->set_start_revision(start_revision);
  if (stream->Write(req)) {
    etcdserverpb::WatchResponse resp;
    while (stream->Read(&resp)) {
      if (resp.compact_revision() > 0) {
        compacted =
            Status(StatusCode::kOutOfRange,
                   "etcd watch: revision " + std::to_string(start_revision) +
                       " compacted (now from " + std::to_string(resp.compact_revision()) + ")");
        break;
      }
      if (resp.canceled()) break;
      if (resp.events_size() > 0) {
        events.assign(resp.events().begin(), resp.events().end());
        break;
      }
    }
  }
  ctx.TryCancel();
  (void)stream->Finish();
  if (!compacted.ok()) return compacted;
  if (!events.empty()) return events;
  // Nothing came: the deadline passed (the normal case) or the member is unreachable, which a
  // caller polling in a loop finds out on its next read.
  return events;
}

std::vector<MemberStatus> Client::Members() {
  std::vector<MemberStatus> out;
  for (Member& m : members_) {
    MemberStatus ms;
    ms.endpoint = m.endpoint;
    grpc::ClientContext ctx;
    ctx.set_deadline(Wall(Clock::now() + options_.attempt_timeout));
    etcdserverpb::StatusResponse resp;
    grpc::Status s = m.maintenance->Status(&ctx, etcdserverpb::StatusRequest(), &resp);
    if (!s.ok()) {
      ms.errors.push_back(s.error_message());
    } else {
      ms.version = resp.version();
      ms.member_id = resp.header().member_id();
      ms.leader = resp.leader();
      ms.raft_term = resp.raftterm();
      ms.db_size = resp.dbsize();
      ms.errors.assign(resp.errors().begin(), resp.errors().end());
    }
    out.push_back(std::move(ms));
  }
  return out;
}

namespace {

etcdserverpb::Compare MakeCompare(const std::string& key, etcdserverpb::Compare::CompareTarget t,
                                  etcdserverpb::Compare::CompareResult r) {
  etcdserverpb::Compare c;
  c.set_key(key);
  c.set_target(t);
  c.set_result(r);
  return c;
}

}  // namespace

etcdserverpb::Compare CompareMod(const std::string& key, etcdserverpb::Compare::CompareResult r,
                                 int64_t mod_revision) {
  etcdserverpb::Compare c = MakeCompare(key, etcdserverpb::Compare::MOD, r);
  c.set_mod_revision(mod_revision);
  return c;
}

etcdserverpb::Compare CompareCreate(const std::string& key, etcdserverpb::Compare::CompareResult r,
                                    int64_t create_revision) {
  etcdserverpb::Compare c = MakeCompare(key, etcdserverpb::Compare::CREATE, r);
  c.set_create_revision(create_revision);
  return c;
}

etcdserverpb::Compare CompareVersion(const std::string& key, etcdserverpb::Compare::CompareResult r,
                                     int64_t version) {
  etcdserverpb::Compare c = MakeCompare(key, etcdserverpb::Compare::VERSION, r);
  c.set_version(version);
  return c;
}

void AddPut(etcdserverpb::TxnRequest* txn, const std::string& key, const std::string& value,
            int64_t lease) {
  auto* put = txn->add_success()->mutable_request_put();
  put->set_key(key);
  put->set_value(value);
  put->set_lease(lease);
}

void AddDelete(etcdserverpb::TxnRequest* txn, const std::string& key,
               const std::string& range_end) {
  auto* del = txn->add_success()->mutable_request_delete_range();
  del->set_key(key);
  del->set_range_end(range_end);
}

void AddGet(etcdserverpb::TxnRequest* txn, const std::string& key, bool on_success) {
  auto* op = on_success ? txn->add_success() : txn->add_failure();
  op->mutable_request_range()->set_key(key);
}

}  // namespace ff::etcd
