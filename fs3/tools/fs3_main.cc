// fs3: the admin CLI of the fs3 filesystem.
//
//   fs3 init --chunk-size 4MiB --replication 3   build chains from the registered targets
//   fs3 nodes | fs3 targets | fs3 chains         listings with states (--json for scripts)
//   fs3 routing                                  the whole routing table (JSON)
//   fs3 target offline ID                        take a target out of service
//   fs3 target add ID --chain C                  add a registered target to a chain (it syncs)
//   fs3 fsck [--repair] --meta HOST:PORT         check the namespace (exit 1 on problems)
//   fs3 fsck --data [--no-content] ...           and that every chunk's replicas agree
//   fs3 layout PATH [--stripe N] --meta HOST:PORT  show (or set, for a directory) a layout
//
// fs3-mgmtd's address comes from --mgmtd or $FS3_MGMTD. Exit code 0 only on success; errors are
// one line on stderr.
#include <google/protobuf/util/json_util.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <map>
#include <nlohmann/json.hpp>

#include "common/cli_exit.h"
#include "common/rpc_client.h"
#include "common/tls.h"
#include "fs3/meta_client.h"
#include "fs3/proto/mgmtd.grpc.pb.h"
#include "fs3/proto/storage.grpc.pb.h"
#include "fs3/replica_check.h"
#include "fs3/routing.h"

namespace ff::fs3 {
namespace {

[[noreturn]] void Die(const std::string& m, int code = 1) {
  std::fprintf(stderr, "fs3: %s\n", m.c_str());
  std::exit(code);
}

std::string ToJson(const google::protobuf::Message& m) {
  std::string out;
  google::protobuf::util::JsonPrintOptions o;
  o.preserve_proto_field_names = true;
  o.always_print_primitive_fields = true;
  (void)google::protobuf::util::MessageToJsonString(m, &out, o);
  return out;
}

// fs3-meta through the one client every fs3 tool uses (gRPC: a one-shot command has no use for
// the frame connection); a few quick tries, so that an unreachable fs3-meta is said soon.
MetaClientOptions CliMetaOptions(const std::string& address) {
  CallOptions call = CallOptions::Idempotent(std::chrono::seconds(10));
  call.max_attempts = 3;
  return MetaClientOptions{.address = address, .frames = false, .call = call};
}

// "4MiB", "1M", "64k", "4096" -> bytes.
uint64_t ParseSize(const std::string& s) {
  std::size_t used = 0;
  unsigned long long v = 0;
  try {
    v = std::stoull(s, &used);
  } catch (...) {
    Die("'" + s + "' is not a size (e.g. 4096, 64KiB, 4MiB)", 2);
  }
  std::string unit = s.substr(used);
  for (char& c : unit)
    c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  uint64_t mult = unit.empty() || unit == "b"                    ? 1
                  : unit == "k" || unit == "kib" || unit == "kb" ? 1024
                  : unit == "m" || unit == "mib" || unit == "mb" ? 1024 * 1024
                  : unit == "g" || unit == "gib" || unit == "gb" ? 1024ull * 1024 * 1024
                                                                 : 0;
  if (mult == 0) Die("unknown size unit in '" + s + "'", 2);
  return v * mult;
}

// Each target's disk, asked of its storage service (left out where it does not answer in time).
std::map<uint64_t, fs3rpc::SpaceInfoResponse> TargetSpace(const fs3rpc::RoutingInfo& info) {
  std::map<std::string, std::string> address_of;
  for (const auto& n : info.nodes())
    address_of[n.name()] = n.address();
  std::map<uint64_t, fs3rpc::SpaceInfoResponse> out;
  for (const auto& t : info.targets()) {
    auto it = address_of.find(t.node());
    if (it == address_of.end() || it->second.empty()) continue;
    auto stub = fs3rpc::Storage::NewStub(MakeChannel(it->second));
    fs3rpc::SpaceInfoRequest req;
    req.set_target(t.id());
    fs3rpc::SpaceInfoResponse resp;
    CallOptions once = CallOptions::Idempotent(std::chrono::seconds(1));
    once.max_attempts = 1;  // a service that is down shows "-", without holding the listing up
    Status st = CallRpc("fs3-storage SpaceInfo", once,
                        [&](grpc::ClientContext* c) { return stub->SpaceInfo(c, req, &resp); });
    if (st.ok()) out[t.id()] = resp;
  }
  return out;
}

// 1536 -> "1.5K", as df -h prints sizes.
std::string HumanBytes(uint64_t n) {
  const char* units = "BKMGTP";
  double v = static_cast<double>(n);
  int u = 0;
  while (v >= 1024 && u < 5) {
    v /= 1024;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f%c" : "%.1f%c", v, units[u]);
  return buf;
}

int Main(int argc, char** argv) {
  CLI::App app("fs3 administration", "fs3");
  app.require_subcommand(1);
  app.fallthrough();
  std::string mgmtd;
  bool json = false;
  app.add_option("--mgmtd", mgmtd, "fs3-mgmtd host:port (else $FS3_MGMTD)");
  app.add_flag("--json", json, "Print JSON");
  auto* init =
      app.add_subcommand("init", "Initialise the cluster: chains from the registered targets");
  std::string chunk_size = "4MiB";
  uint32_t replication = 3;
  init->add_option("--chunk-size", chunk_size, "Chunk size (power of two)")->capture_default_str();
  init->add_option("--replication,-r", replication, "Targets per chain")->capture_default_str();
  auto* nodes = app.add_subcommand("nodes", "Storage services and their leases");
  auto* targets = app.add_subcommand("targets", "Storage targets with states");
  auto* chains = app.add_subcommand("chains", "Chains: version and targets, head first");
  auto* routing = app.add_subcommand("routing", "The whole routing table (JSON)");
  auto* target = app.add_subcommand("target", "Change a target");
  target->require_subcommand(1);
  uint64_t target_id = 0;
  uint32_t chain_id = 0;
  auto* offline = target->add_subcommand("offline", "Take a target out of service");
  offline->add_option("id", target_id, "Target id")->required();
  auto* add = target->add_subcommand("add", "Add a registered target to a chain");
  add->add_option("id", target_id, "Target id")->required();
  add->add_option("--chain", chain_id, "Chain id")->required();
  auto* fsck = app.add_subcommand("fsck", "Check the namespace (fs3-meta) for inconsistencies");
  std::string meta;
  bool repair = false;
  fsck->add_option("--meta", meta, "fs3-meta host:port (else $FS3_META)");
  fsck->add_flag("--repair", repair, "Fix what is found");
  bool data = false, no_content = false;
  fsck->add_flag("--data", data,
                 "Also check that every chunk's serving replicas agree (version, length, "
                 "checksum) and that their contents match their checksums (needs --mgmtd)");
  fsck->add_flag("--no-content", no_content,
                 "With --data: compare the replicas' records only, reading no chunk content");
  double fsck_hours = 24;
  fsck->add_option("--timeout-hours", fsck_hours,
                   "Give up on fs3-meta's check after this long (it reports progress meanwhile)")
      ->capture_default_str();
  auto* layout = app.add_subcommand(
      "layout", "Show a file's or directory's layout; --stripe sets a directory's");
  std::string layout_path;
  uint32_t stripe = 0;
  layout->add_option("path", layout_path, "Path inside fs3 (from its root, e.g. /datasets)")
      ->required();
  layout->add_option("--stripe", stripe, "Chains each new file in the directory is spread over");
  layout->add_option("--meta", meta, "fs3-meta host:port (else $FS3_META)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return ExitForParseError(app, e);
  }
  // Where the cluster runs TLS: FF_TLS_CA_FILE, FF_TLS_CERT_FILE, FF_TLS_KEY_FILE (common/tls.h).
  if (Status st = InitProcessTlsFromEnvironment(); !st.ok()) Die(st.message(), 2);
  if (*layout) {
    if (meta.empty() && std::getenv("FS3_META")) meta = std::getenv("FS3_META");
    if (meta.empty()) Die("no fs3-meta address: --meta or $FS3_META");
    MetaClient client(CliMetaOptions(meta));
    auto check = [&](const Status& st) {
      if (st.ok()) return;
      if (st.code() == StatusCode::kUnavailable) {
        Die("cannot reach fs3-meta at " + meta + " (" + st.message() + ")");
      }
      Die(layout_path + ": " + st.message());
    };
    fs3rpc::Credentials cred;
    cred.set_uid(getuid());
    cred.set_gid(getgid());
    fs3rpc::Inode at;
    fs3rpc::InoRequest root;
    root.set_ino(1);
    check(client.GetAttr(root, &at));
    std::size_t i = 0;
    while (i < layout_path.size()) {  // each name of the path in turn
      std::size_t j = layout_path.find('/', i);
      if (j == std::string::npos) j = layout_path.size();
      if (j > i) {
        fs3rpc::NameRequest r;
        *r.mutable_cred() = cred;
        r.set_parent(at.ino());
        r.set_name(layout_path.substr(i, j - i));
        fs3rpc::Inode next;
        check(client.Lookup(r, &next));
        at = next;
      }
      i = j + 1;
    }
    if (stripe != 0) {
      fs3rpc::SetLayoutRequest r;
      *r.mutable_cred() = cred;
      r.set_ino(at.ino());
      r.set_stripe(stripe);
      check(client.SetLayout(r, &at));
    }
    if (json) {
      std::printf("%s\n", ToJson(at.layout()).c_str());
    } else {
      std::printf("%s: chunk size %llu, stripe %u", layout_path.c_str(),
                  static_cast<unsigned long long>(at.layout().chunk_size()), at.layout().stripe());
      if (at.layout().chains_size() > 0) {
        std::printf(", chains");
        for (uint32_t c : at.layout().chains())
          std::printf(" %u", c);
      }
      std::printf("\n");
    }
    return 0;
  }
  if (*fsck) {
    if (meta.empty() && std::getenv("FS3_META")) meta = std::getenv("FS3_META");
    if (meta.empty()) Die("no fs3-meta address: --meta or $FS3_META");
    MetaClient client(CliMetaOptions(meta));
    fs3rpc::FsckRequest req;
    req.set_repair(repair);
    fs3rpc::FsckReply reply;
    // Progress on stderr: a line per phase (and every 10 s), or one line kept current on a
    // terminal.
    const bool tty = isatty(STDERR_FILENO) != 0;
    std::string last_phase;
    auto last_line = std::chrono::steady_clock::now();
    auto progress = [&](const fs3rpc::FsckReply& p) {
      const auto now = std::chrono::steady_clock::now();
      if (!tty && p.phase() == last_phase && now - last_line < std::chrono::seconds(10)) return;
      std::fprintf(stderr, "%sfs3 fsck: %s: %llu done, %llu problem(s) so far%s", tty ? "\r" : "",
                   p.phase().c_str(), static_cast<unsigned long long>(p.phase_done()),
                   static_cast<unsigned long long>(p.found()), tty ? "   " : "\n");
      last_phase = p.phase();
      last_line = now;
    };
    Status st = client.Fsck(
        req, &reply,
        std::chrono::milliseconds(static_cast<int64_t>(std::max(0.0, fsck_hours) * 3600e3)),
        progress);
    if (tty && !last_phase.empty()) std::fprintf(stderr, "\n");
    if (!st.ok()) {
      if (st.code() == StatusCode::kUnavailable) {
        Die("cannot reach fs3-meta at " + meta + " (" + st.message() + ")");
      }
      Die(st.message());
    }
    // The replicas' check repairs nothing, so its problems make the exit code 1 even with
    // --repair.
    std::vector<std::string> replica_problems;
    if (data) {
      if (mgmtd.empty() && std::getenv("FS3_MGMTD")) mgmtd = std::getenv("FS3_MGMTD");
      if (mgmtd.empty()) Die("fsck --data needs fs3-mgmtd's address: --mgmtd or $FS3_MGMTD");
      MgmtdReplicas replicas(mgmtd);
      auto table = FetchRouting(replicas, RoutingFetch{.attempts = 3});
      if (!table.ok()) {
        Die("cannot reach fs3-mgmtd at " + mgmtd + " (" + table.status().message() + ")");
      }
      auto checked = CheckReplicas(*table, ReplicaCheckOptions{.read_content = !no_content});
      if (!checked.ok()) Die("checking the replicas: " + checked.status().message());
      replica_problems = checked->problems;
      if (!json) {
        std::fprintf(stderr, "fs3 fsck: %llu chain(s), %llu chunk(s) compared, %llu bytes read\n",
                     static_cast<unsigned long long>(checked->chains),
                     static_cast<unsigned long long>(checked->chunks),
                     static_cast<unsigned long long>(checked->bytes_read));
      }
    }
    if (json) {
      for (const std::string& p : replica_problems)
        reply.add_problems(p);
      std::printf("%s\n", ToJson(reply).c_str());
    } else if (reply.problems().empty() && replica_problems.empty()) {
      std::printf("fs3 fsck: clean\n");
    } else {
      for (const std::string& p : reply.problems())
        std::printf("%s\n", p.c_str());
      for (const std::string& p : replica_problems)
        std::printf("%s\n", p.c_str());
      std::string outcome = !replica_problems.empty()
                                ? "; --repair mends the namespace, not replicas"
                            : !repair ? "; run with --repair to fix them"
                                      : ", " + std::to_string(reply.repaired()) + " repaired";
      if (repair && reply.left() > 0) {
        outcome += ", " + std::to_string(reply.left()) +
                   " left alone (changed while the check ran: run fsck again)";
      }
      std::printf("fs3 fsck: %d problem(s)%s\n",
                  reply.problems_size() + static_cast<int>(replica_problems.size()),
                  outcome.c_str());
    }
    return replica_problems.empty() && (reply.problems().empty() || (repair && reply.left() == 0))
               ? 0
               : 1;
  }
  if (mgmtd.empty() && std::getenv("FS3_MGMTD")) mgmtd = std::getenv("FS3_MGMTD");
  if (mgmtd.empty()) Die("no fs3-mgmtd address: --mgmtd or $FS3_MGMTD");
  MgmtdReplicas replicas(mgmtd);
  fs3rpc::RoutingInfo info;
  auto report = [&](const Status& st) {
    if (st.ok()) return;
    if (st.code() == StatusCode::kUnavailable || st.code() == StatusCode::kDeadlineExceeded) {
      Die("cannot reach fs3-mgmtd at " + mgmtd + " (" + st.message() + ")");
    }
    std::string m = st.message();
    if (auto c = m.find(": "); c != std::string::npos) m = m.substr(c + 2);
    Die(m);
  };
  auto call = [&](const std::string& what, auto&& fn, bool idempotent) {
    CallOptions o = CallOptions::Idempotent(std::chrono::seconds(10));
    o.idempotent = idempotent;
    report(CallRpc("fs3-mgmtd " + what, o, fn));
  };
  if (*init) {
    fs3rpc::InitRequest req;
    req.set_chunk_size(ParseSize(chunk_size));
    req.set_replication(replication);
    call(
        "InitCluster",
        [&](grpc::ClientContext* c) {
          return replicas.Attempt(
              [&](fs3rpc::Mgmtd::Stub& s) { return s.InitCluster(c, req, &info); });
        },
        false);
  } else if (*offline) {
    fs3rpc::TargetRef req;
    req.set_id(target_id);
    call(
        "SetTargetOffline",
        [&](grpc::ClientContext* c) {
          return replicas.Attempt(
              [&](fs3rpc::Mgmtd::Stub& s) { return s.SetTargetOffline(c, req, &info); });
        },
        true);
  } else if (*add) {
    fs3rpc::AddTargetRequest req;
    req.set_target(target_id);
    req.set_chain(chain_id);
    call(
        "AddTarget",
        [&](grpc::ClientContext* c) {
          return replicas.Attempt(
              [&](fs3rpc::Mgmtd::Stub& s) { return s.AddTarget(c, req, &info); });
        },
        false);
  } else {
    auto fetched = FetchRouting(replicas, RoutingFetch{.deadline = std::chrono::seconds(10),
                                                       .attempts = CallOptions{}.max_attempts});
    report(fetched.status());
    info = std::move(*fetched);
  }
  if (*routing || (json && !*nodes && !*targets && !*chains)) {
    std::printf("%s\n", ToJson(info).c_str());
    return 0;
  }
  if (*nodes) {
    if (json) {
      std::printf("[");
      for (int i = 0; i < info.nodes_size(); ++i)
        std::printf("%s%s", i ? "," : "", ToJson(info.nodes(i)).c_str());
      std::printf("]\n");
      return 0;
    }
    std::printf("%-16s %-22s %-8s %s\n", "SERVICE", "ADDRESS", "LEASE", "TARGETS");
    for (const auto& n : info.nodes()) {
      std::string t;
      for (uint64_t id : n.targets())
        t += (t.empty() ? "" : ",") + std::to_string(id);
      std::printf("%-16s %-22s %-8s %s\n", n.name().c_str(), n.address().c_str(), n.state().c_str(),
                  t.c_str());
    }
    return 0;
  }
  if (*targets) {
    const auto space = TargetSpace(info);
    if (json) {
      nlohmann::json out = nlohmann::json::array();
      for (const auto& t : info.targets()) {
        nlohmann::json j = nlohmann::json::parse(ToJson(t));
        if (auto it = space.find(t.id()); it != space.end()) {
          j["space"] = nlohmann::json::parse(ToJson(it->second));
        }
        out.push_back(std::move(j));
      }
      std::printf("%s\n", out.dump().c_str());
      return 0;
    }
    // FREE: what writes may still take (the reserve kept for removals left out); "FULL" when
    // nothing: writes to the target's chain fail with ENOSPC until files are deleted.
    std::printf("%-8s %-16s %-6s %-10s %-11s %-7s %-7s %s\n", "TARGET", "SERVICE", "CHAIN",
                "PUBLIC", "LOCAL", "FREE", "SIZE", "PATH");
    for (const auto& t : info.targets()) {
      std::string free = "-", size = "-";
      if (auto it = space.find(t.id()); it != space.end()) {
        free = it->second.free_bytes() == 0 ? "FULL" : HumanBytes(it->second.free_bytes());
        size = HumanBytes(it->second.capacity_bytes());
      }
      std::printf("%-8llu %-16s %-6s %-10s %-11s %-7s %-7s %s%s\n",
                  static_cast<unsigned long long>(t.id()), t.node().c_str(),
                  t.chain() ? std::to_string(t.chain()).c_str() : "-",
                  t.public_state().empty() ? "-" : t.public_state().c_str(),
                  t.local_state().c_str(), free.c_str(), size.c_str(), t.path().c_str(),
                  t.admin_offline() ? "  (taken offline)" : "");
    }
    return 0;
  }
  if (*chains || *init || *offline || *add) {
    if (json) {
      std::printf("[");
      for (int i = 0; i < info.chains_size(); ++i)
        std::printf("%s%s", i ? "," : "", ToJson(info.chains(i)).c_str());
      std::printf("]\n");
      return 0;
    }
    if (*init) {
      std::printf("initialised: chunk size %llu, replication %u, %d chains\n",
                  static_cast<unsigned long long>(info.chunk_size()), info.replication(),
                  info.chains_size());
    }
    std::printf("%-6s %-8s %s\n", "CHAIN", "VERSION", "TARGETS (head first)");
    for (const auto& c : info.chains()) {
      std::string t;
      for (const auto& ct : c.targets())
        t += (t.empty() ? "" : "  ") + std::to_string(ct.target()) + ":" + ct.state();
      std::printf("%-6u %-8llu %s\n", c.id(), static_cast<unsigned long long>(c.version()),
                  t.c_str());
    }
  }
  return 0;
}

}  // namespace
}  // namespace ff::fs3

int main(int argc, char** argv) {
  return ff::fs3::Main(argc, argv);
}
