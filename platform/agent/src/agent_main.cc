// hai-agent: HAI-Platform's node agent (one per node).
//
//   hai-agent --config deploy/config/hai-agent.toml [--node NAME] [--set key=value ...]
#include "agent.h"
#include "monitoring/service_daemon.h"

int main(int argc, char** argv) {
  using ff::platform::Agent;
  using ff::platform::AgentOptions;
  ff::ServiceDaemon<AgentOptions, Agent> daemon{"hai-agent", "HAI-Platform node agent"};
  daemon.make = [](AgentOptions& o, ff::Metrics& m) { return Agent::Create(o, &m); };
  daemon.start = [](Agent& a, const std::string& address) { a.Start(address); };
  daemon.stop = [](Agent& a) { a.Stop(); };  // jobs keep running; a new agent adopts them
  daemon.add_flags = [](CLI::App& app, ff::DaemonFlags& flags) {
    app.add_option_function<std::string>(
        "--node", [&flags](const std::string& v) { flags.overrides.push_back("agent.node=" + v); },
        "Shorthand for --set agent.node=NAME");
  };
  return daemon.Run(argc, argv);
}
