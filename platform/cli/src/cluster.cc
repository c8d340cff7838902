// hai's cluster subcommands, one function each: nodes, whoami, admin user add / ls, admin drain /
// undrain.
#include <cstdio>
#include <memory>

#include "cli.h"
#include "platform/names.h"

namespace ff::platform::cli {
namespace {

std::string NodeState(const hai::Node& n) {
  std::string s = NodeStateName(n.state());
  if (n.drained()) {
    s += ", drained";
    if (!n.drained_by().empty()) s += " by " + n.drained_by();
    s += ": " + n.drain_reason();
  } else if (n.suspect()) {
    s += ", suspect (a straggler): " + n.suspect_reason();
  }
  return s;
}

std::string HealthSummary(const hai::Node& n) {
  if (n.health_report_ms() == 0) return "-";
  std::string failing;
  for (const hai::HealthCheck& c : n.health())
    if (!c.ok()) failing += (failing.empty() ? "" : ",") + c.name();
  return (failing.empty() ? "ok" : "FAIL " + failing) + " (" + Ago(n.health_report_ms()) + ")";
}

std::string JobsOn(const hai::Node& n) {
  std::string s;
  for (int64_t id : n.jobs())
    s += (s.empty() ? "jobs " : ",") + std::to_string(id);
  return s;
}

struct NodesArgs {
  bool tree = false, health = false;
};

int Nodes(const NodesArgs& a, const Globals& g, Client& client) {
  hai::ListNodesRequest req;
  hai::ListNodesResponse resp;
  client.Call("ListNodes", [&](grpc::ClientContext* c, hai::Hai::Stub& stub) {
    return stub.ListNodes(c, req, &resp);
  });
  if (g.json) {
    std::printf("%s\n", ToJson(resp).c_str());
  } else if (a.health) {
    for (const hai::Node& n : resp.nodes()) {
      std::printf("%s: %s\n", n.name().c_str(), HealthSummary(n).c_str());
      for (const hai::HealthCheck& c : n.health())
        std::printf("  %-18s %-4s %s\n", c.name().c_str(), c.ok() ? "ok" : "FAIL",
                    c.message().c_str());
      if (n.suspect()) std::printf("  suspect: %s\n", n.suspect_reason().c_str());
      for (const hai::NodeEvent& e : n.events())
        std::printf("  %s  %s\n", Clock(e.time_ms()).c_str(), e.text().c_str());
    }
  } else if (a.tree) {
    std::string zone, leaf;
    for (const hai::Node& n : resp.nodes()) {
      if (n.zone() != zone) {
        zone = n.zone();
        leaf.clear();
        std::printf("zone %s\n", zone.c_str());
      }
      if (n.leaf() != leaf) {
        leaf = n.leaf();
        std::printf("  leaf %s\n", leaf.c_str());
      }
      std::printf("    %-16s %d GPUs  %s  %s\n", n.name().c_str(), n.gpus(), NodeState(n).c_str(),
                  JobsOn(n).c_str());
    }
  } else {
    std::printf("%-16s %-6s %-12s %4s  %-16s %-30s %s\n", "NODE", "ZONE", "LEAF", "GPUS", "HEALTH",
                "STATE", "JOBS");
    for (const hai::Node& n : resp.nodes()) {
      std::printf("%-16s %-6s %-12s %4d  %-16s %-30s %s\n", n.name().c_str(), n.zone().c_str(),
                  n.leaf().c_str(), n.gpus(), HealthSummary(n).c_str(), NodeState(n).c_str(),
                  JobsOn(n).c_str());
    }
  }
  return 0;
}

int WhoAmI(const Globals& g, Client& client) {
  hai::WhoAmIRequest req;
  hai::User u;
  client.Call("WhoAmI", [&](grpc::ClientContext* c, hai::Hai::Stub& stub) {
    return stub.WhoAmI(c, req, &u);
  });
  if (g.json) {
    std::printf("%s\n", ToJson(u).c_str());
  } else {
    std::printf("%s%s\n", u.name().c_str(), u.admin() ? " (admin)" : "");
  }
  return 0;
}

struct UserAddArgs {
  std::string name;
  bool admin = false;
  int quota = 0;
};

int UserAdd(const UserAddArgs& a, const Globals& g, Client& client) {
  hai::AddUserRequest req;
  req.set_name(a.name);
  req.set_admin(a.admin);
  req.set_node_quota(a.quota);
  hai::AddUserResponse resp;
  client.Call(
      "AddUser",
      [&](grpc::ClientContext* c, hai::Hai::Stub& stub) { return stub.AddUser(c, req, &resp); },
      /*idempotent=*/false);
  if (g.json) {
    std::printf("%s\n", ToJson(resp).c_str());
  } else {
    std::printf("user %s added; their token (shown only now):\n%s\n", resp.name().c_str(),
                resp.token().c_str());
  }
  return 0;
}

int UserList(const Globals& g, Client& client) {
  hai::ListUsersRequest req;
  hai::ListUsersResponse resp;
  client.Call("ListUsers", [&](grpc::ClientContext* c, hai::Hai::Stub& stub) {
    return stub.ListUsers(c, req, &resp);
  });
  if (g.json) {
    std::printf("%s\n", ToJson(resp).c_str());
  } else {
    std::printf("%-20s %-6s %s\n", "USER", "ADMIN", "NODE QUOTA");
    for (const hai::User& u : resp.users()) {
      std::printf("%-20s %-6s %s\n", u.name().c_str(), u.admin() ? "yes" : "no",
                  u.node_quota() > 0 ? std::to_string(u.node_quota()).c_str() : "-");
    }
  }
  return 0;
}

struct DrainArgs {
  std::string node, reason;
};

int Drain(const DrainArgs& a, bool drain, const Globals& g, Client& client) {
  hai::DrainRequest req;
  req.set_node(a.node);
  req.set_drain(drain);
  req.set_reason(a.reason);
  hai::Node n;
  client.Call("DrainNode", [&](grpc::ClientContext* c, hai::Hai::Stub& stub) {
    return stub.DrainNode(c, req, &n);
  });
  if (g.json) {
    std::printf("%s\n", ToJson(n).c_str());
  } else {
    std::printf("node %s %s\n", n.name().c_str(), drain ? "drained" : "undrained");
  }
  return 0;
}

}  // namespace

void AddClusterCommands(CLI::App& app, std::vector<Command>& out) {
  auto n = std::make_shared<NodesArgs>();
  CLI::App* nodes = app.add_subcommand("nodes", "List the cluster's nodes");
  nodes->add_flag("--tree", n->tree, "As the zone / leaf switch / node tree");
  nodes->add_flag("--health", n->health, "Every check of each node's last hai-health report");
  out.push_back({nodes, [n](const Globals& g, Client& c) { return Nodes(*n, g, c); }});

  out.push_back({app.add_subcommand("whoami", "Who the token belongs to"), WhoAmI});

  CLI::App* admin = app.add_subcommand("admin", "Administration (admins only)");
  admin->require_subcommand(1);
  CLI::App* user = admin->add_subcommand("user", "Users");
  user->require_subcommand(1);
  auto u = std::make_shared<UserAddArgs>();
  CLI::App* user_add = user->add_subcommand("add", "Add a user and print their token");
  user_add->add_option("name", u->name, "User name")->required();
  user_add->add_flag("--admin", u->admin, "Make an administrator");
  user_add->add_option("--quota", u->quota, "Most nodes the user's jobs may hold (0: no limit)");
  out.push_back({user_add, [u](const Globals& g, Client& c) { return UserAdd(*u, g, c); }});
  out.push_back({user->add_subcommand("ls", "List users"), UserList});

  auto d = std::make_shared<DrainArgs>();
  CLI::App* drain = admin->add_subcommand("drain", "Stop placing jobs on a node");
  drain->add_option("node", d->node, "Node")->required();
  drain->add_option("--reason", d->reason, "Why (shown in hai nodes)")->required();
  out.push_back({drain, [d](const Globals& g, Client& c) { return Drain(*d, true, g, c); }});
  CLI::App* undrain = admin->add_subcommand("undrain", "Place jobs on a node again");
  undrain->add_option("node", d->node, "Node")->required();
  out.push_back({undrain, [d](const Globals& g, Client& c) { return Drain(*d, false, g, c); }});
}

}  // namespace ff::platform::cli
