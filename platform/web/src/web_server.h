// hai-web: a read-only web view of the cluster, a client of hai-server's API (and of fs3-mgmtd's
// routing), logged in by the user's own token. It shows a user what `hai ls`, `hai show`,
// `hai logs` and `hai nodes` show them and nothing more: every page is fetched from hai-server
// with the user's token, so hai-server's checks decide (another user's job is "not found").
// It changes nothing: the only request that is not a GET is the login form.
//
//   WebOptions o; o.hai_server = "127.0.0.1:7700";
//   FF_ASSIGN_OR_RETURN(auto web, WebServer::Create(o));
//   FF_RETURN_IF_ERROR(web->Start());   // web->address(): "127.0.0.1:8090"
//   ...
//   web->Stop();
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <thread>

#include "common/config.h"
#include "common/result.h"
#include "monitoring/metrics.h"
#include "platform/client.h"

namespace httplib {
class Server;
}
namespace grpc {
class Channel;
}

namespace ff::platform::web {

struct WebOptions {
  static constexpr const char* kSection = "web";
  std::string listen = "127.0.0.1:8090";  // HTTP; port 0 picks a free one
  std::string hai_server;  // host:port, or every replica's, comma-separated (required)
  std::string fs3_mgmtd;   // host:port (or every replica's); empty: the fs3 page says it is not set
  int64_t log_tail_bytes = 16384;  // how much of rank 0's log a job page shows
  // Mark the login cookie Secure (the view is served through an HTTPS proxy).
  bool secure_cookie = false;
  // Serve HTTPS with this certificate (PEM, chain after it) and key: one the users' browsers
  // trust (the cluster's own authority, deploy/make-certs.sh, only where they import it). The
  // cookie is then Secure and browsers are told to come back over HTTPS only (HSTS). Empty:
  // plain HTTP.
  std::string https_cert_file;
  std::string https_key_file;

  bool https() const { return !https_cert_file.empty(); }

  void Bind(ConfigSection& s);
};

class WebServer {
 public:
  // `metrics` (may be null) gets hai_web_requests_total{page,code}, hai_web_request_seconds{page}
  // and hai_web_logins_total{result}; it must outlive the server.
  static Result<std::unique_ptr<WebServer>> Create(const WebOptions& options,
                                                   Metrics* metrics = nullptr);
  ~WebServer();

  // Binds options.listen and serves on a thread of its own.
  Status Start();
  void Stop();
  const std::string& address() const { return address_; }
  // "http://" or "https://" + address() + "/".
  std::string url() const { return (options_.https() ? "https://" : "http://") + address_ + "/"; }

 private:
  WebServer(const WebOptions& options, Metrics* metrics);
  void Routes();
  void Count(const std::string& page, int status);
  void Time(const std::string& page, std::chrono::steady_clock::time_point start);

  WebOptions options_;
  Metrics* metrics_;
  std::shared_ptr<HaiClient::Servers> hai_servers_;
  std::unique_ptr<httplib::Server> http_;
  std::thread thread_;
  std::string address_;
};

}  // namespace ff::platform::web
