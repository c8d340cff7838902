// hai: the researcher's command line for HAI-Platform.
//
//   hai submit [--name N] [--nodes N] [--gpus-per-node G] [--priority P] [--env K=V] -- CMD...
//   hai ls [-a] [--all-users] | hai show JOB | hai logs JOB [-f] [--rank R]
//   hai metrics JOB [--rank R] [--points N]
//   hai stop JOB | hai suspend JOB | hai nodes [--tree|--health] | hai whoami
//   hai admin user add NAME [--admin] [--quota N] | hai admin user ls
//   hai admin drain NODE --reason TEXT | hai admin undrain NODE
//
// Server and token come from --server / --token, else $HAI_SERVER / $HAI_TOKEN, else
// ~/.hai/config.toml (server = "host:port", token = "..."); where the cluster runs TLS,
// $FF_TLS_CA_FILE is its authority (common/tls.h). Human tables by default, --json for
// scripts; exit code 0 only on success; errors are one line on stderr. Each subcommand is one
// function: jobs.cc (submit, ls, show, stop, suspend, logs, metrics), cluster.cc (nodes,
// whoami, admin).
#include <unistd.h>

#include <cstdlib>
#include <string_view>

#include "cli.h"
#include "common/cli_exit.h"
#include "common/config.h"
#include "common/tls.h"

namespace ff::platform::cli {
namespace {

struct CliConfig {
  std::string server;
  std::string token;
  void Bind(ConfigSection& s) {
    s.Optional("server", server);
    s.Optional("token", token);
  }
};

// Where and who: flags, then the environment, then ~/.hai/config.toml.
void ResolveGlobals(Globals& g) {
  if (g.server.empty() && std::getenv("HAI_SERVER")) g.server = std::getenv("HAI_SERVER");
  if (g.token.empty() && std::getenv("HAI_TOKEN")) g.token = std::getenv("HAI_TOKEN");
  if ((g.server.empty() || g.token.empty()) && std::getenv("HOME")) {
    std::string path = std::string(std::getenv("HOME")) + "/.hai/config.toml";
    if (access(path.c_str(), F_OK) == 0) {
      auto cfg = LoadConfigFile<CliConfig>(path, {});
      if (!cfg.ok()) Die(cfg.status().message());
      if (g.server.empty()) g.server = cfg->server;
      if (g.token.empty()) g.token = cfg->token;
    }
  }
}

int Main(int argc, char** argv) {
  CLI::App app("HAI-Platform: submit and watch jobs on the cluster", "hai");
  app.require_subcommand(1);
  app.fallthrough();
  Globals g;
  app.add_option("--server", g.server,
                 "hai-server host:port (else $HAI_SERVER, ~/.hai/config.toml)");
  app.add_option("--token", g.token, "Your token (else $HAI_TOKEN, ~/.hai/config.toml)");
  app.add_flag("--json", g.json, "Print JSON instead of tables");
  std::vector<Command> commands;
  AddJobCommands(app, commands);
  AddClusterCommands(app, commands);
  int parsed = argc;
  for (int i = 1; i < argc; ++i) {
    if (std::string_view(argv[i]) == "--") {
      parsed = i;
      g.after_dashes.assign(argv + i + 1, argv + argc);
      break;
    }
  }
  try {
    app.parse(parsed, argv);
  } catch (const CLI::ParseError& e) {
    return ExitForParseError(app, e);
  }
  ResolveGlobals(g);
  // Where the cluster runs TLS: FF_TLS_CA_FILE, the authority hai-server's certificate is checked
  // against (common/tls.h).
  if (Status st = InitProcessTlsFromEnvironment(); !st.ok()) Die(st.message(), 2);
  Client client(g);
  for (const Command& c : commands) {
    if (!c.app->parsed()) continue;
    if (parsed < argc && c.app->get_name() != "submit") {
      Die("only `hai submit` takes words after \"--\" (its command)", 2);
    }
    return c.run(g, client);
  }
  return 0;
}

}  // namespace
}  // namespace ff::platform::cli

int main(int argc, char** argv) {
  return ff::platform::cli::Main(argc, argv);
}
