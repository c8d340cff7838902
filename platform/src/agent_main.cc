// hai-agent: HAI-Platform's node agent (one per node).
//
//   hai-agent --config deploy/config/hai-agent.toml [--set agent.node=NAME ...]
#include "agent.h"
#include "common/daemon.h"
#include "common/rpc_server.h"
#include "monitoring/metrics.h"

namespace {

struct AgentConfig {
  ff::RpcServerOptions server;
  ff::MetricsOptions metrics;
  ff::LogOptions log;
  ff::platform::AgentOptions agent;

  void Bind(ff::ConfigSection& s) {
    s.Section("server", server);
    s.Section("metrics", metrics);
    s.Section("log", log);
    s.Section("agent", agent);
  }
};

ff::Status Serve(AgentConfig& config, ff::DaemonContext& context) {
  ff::Metrics metrics(context.name());
  FF_ASSIGN_OR_RETURN(auto agent, ff::platform::Agent::Create(config.agent, &metrics));
  FF_RETURN_IF_ERROR(metrics.Serve(config.metrics));
  FF_ASSIGN_OR_RETURN(auto server, ff::RpcServer::Start(config.server, {agent.get()}));
  agent->Start(server->address());
  FF_RETURN_IF_ERROR(context.Ready({{"rpc", server->address()}, {"metrics", metrics.address()}}));
  context.WaitForShutdown();
  agent->Stop();  // jobs keep running; a new agent adopts them
  server->Shutdown();
  return ff::Status::Ok();
}

}  // namespace

int main(int argc, char** argv) {
  ff::DaemonSpec<AgentConfig> spec{"hai-agent", "HAI-Platform node agent", nullptr, Serve};
  spec.add_flags = [](CLI::App& app, ff::DaemonFlags& flags) {
    app.add_option_function<std::string>(
        "--node", [&flags](const std::string& v) { flags.overrides.push_back("agent.node=" + v); },
        "Shorthand for --set agent.node=NAME");
  };
  return ff::RunDaemon(argc, argv, spec);
}
