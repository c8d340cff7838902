// hai-web: the read-only web view of the cluster (jobs, a job's runs and log, nodes by zone and
// leaf, fs3 chains), logged in with a user's hai token.
//
//   hai-web --config deploy/config/hai-web.toml [--listen HOST:PORT] [--set web.key=value ...]
#include "common/daemon.h"
#include "monitoring/metrics.h"
#include "web_server.h"

namespace {

struct WebConfig {
  ff::MetricsOptions metrics;
  ff::LogOptions log;
  ff::platform::web::WebOptions web;
  ff::TlsOptions tls;  // its channel to hai-server and fs3-mgmtd (common/tls.h)

  void Bind(ff::ConfigSection& s) {
    s.Section("metrics", metrics);
    s.Section("log", log);
    s.Section("web", web);
    s.Section("tls", tls);
  }
};

}  // namespace

int main(int argc, char** argv) {
  ff::DaemonSpec<WebConfig> spec{"hai-web", "HAI-Platform's web view", nullptr, nullptr};
  spec.add_flags = [](CLI::App& app, ff::DaemonFlags& flags) {
    app.add_option_function<std::string>(
        "--listen",
        [&flags](const std::string& v) { flags.overrides.push_back("web.listen=" + v); },
        "Shorthand for --set web.listen=HOST:PORT");
  };
  spec.serve = [](WebConfig& config, ff::DaemonContext& context) -> ff::Status {
    ff::Metrics metrics(context.name());
    FF_ASSIGN_OR_RETURN(auto web, ff::platform::web::WebServer::Create(config.web, &metrics));
    FF_RETURN_IF_ERROR(metrics.Serve(config.metrics));
    FF_RETURN_IF_ERROR(web->Start());
    FF_RETURN_IF_ERROR(context.Ready(
        {{"http", web->address()}, {"url", web->url()}, {"metrics", metrics.address()}}));
    context.WaitForShutdown();
    web->Stop();
    return ff::Status::Ok();
  };
  return ff::RunDaemon(argc, argv, spec);
}
