#include "web_server.h"

#include <httplib.h>
#include <spdlog/spdlog.h>

#include <cctype>
#include <chrono>
#include <functional>
#include <optional>
#include <set>

#include "common/files.h"
#include "common/net.h"
#include "common/rpc_client.h"
#include "common/rpc_status.h"
#include "fs3/routing.h"
#include "pages.h"
#include "platform/client.h"
#include "platform/tokens.h"

namespace ff::platform::web {
namespace {

constexpr const char* kCookie = "hai_token";
constexpr const char* kHtml = "text/html; charset=utf-8";

// The look of every page (served as /static/style.css: the pages carry no inline style, so the
// Content-Security-Policy can forbid it).
constexpr const char* kStyle = R"css(
body { font: 14px/1.45 system-ui, sans-serif; margin: 0; color: #1d2330; background: #f6f7f9; }
nav { display: flex; gap: 18px; align-items: center; padding: 10px 20px; background: #1d2a44; }
nav a, nav span { color: #e8ecf4; text-decoration: none; }
nav .brand { font-weight: 700; margin-right: 12px; }
nav .user { margin-left: auto; opacity: .8; }
main { padding: 8px 24px 40px; }
h1 { font-size: 22px; } h2 { font-size: 17px; margin-top: 26px; } h3 { font-size: 14px; }
table { border-collapse: collapse; background: #fff; min-width: 50%; }
th, td { text-align: left; padding: 5px 10px; border-bottom: 1px solid #e2e5ea; vertical-align: top; }
thead th { background: #eef1f5; }
table.facts th { width: 150px; color: #4a5568; }
code, pre { font-family: ui-monospace, monospace; font-size: 12.5px; }
pre { background: #111827; color: #e5e7eb; padding: 12px; overflow: auto; max-height: 480px; }
.badge { display: inline-block; padding: 1px 8px; border-radius: 9px; font-size: 12px; }
.ok { background: #d5f5e0; } .done { background: #dbe7ff; } .bad { background: #fcdada; }
.wait { background: #fdf0c8; } .other { background: #e5e7eb; }
.error { color: #a11; font-weight: 600; } .empty { color: #6b7280; }
.zone { margin-bottom: 24px; } .leaf { margin: 8px 0 14px 12px; }
.nodes { display: flex; flex-wrap: wrap; gap: 10px; }
.node { width: 200px; padding: 8px; border: 1px solid #d1d5db; border-radius: 6px; font-size: 12.5px; }
.node .name { font-weight: 600; }
.target { margin-right: 10px; white-space: nowrap; }
svg { background: #fff; } svg text { font-size: 11px; fill: #4a5568; }
svg .plot { fill: none; stroke: #d1d5db; } svg .curve { stroke: #2563eb; stroke-width: 1.6; }
svg .s1 { stroke: #16a34a; fill: #16a34a; } svg .s2 { stroke: #d97706; fill: #d97706; }
svg .s3 { stroke: #9333ea; fill: #9333ea; } svg .s4 { stroke: #dc2626; fill: #dc2626; }
svg text.s0 { fill: #2563eb; }
figure.metric { display: inline-block; margin: 0 16px 16px 0; vertical-align: top; }
form input { font-family: ui-monospace, monospace; }
)css";

// A token as hai-server makes them ("hai_" and hex); anything else is not sent anywhere.
bool PlausibleToken(const std::string& t) {
  if (t.size() < 8 || t.size() > 256) return false;
  for (char c : t) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '-') return false;
  }
  return true;
}

std::string CookieToken(const httplib::Request& req) {
  const std::string cookies = req.get_header_value("Cookie");
  const std::string key = std::string(kCookie) + "=";
  size_t at = 0;
  while (at < cookies.size()) {
    size_t end = cookies.find(';', at);
    if (end == std::string::npos) end = cookies.size();
    std::string item = cookies.substr(at, end - at);
    while (!item.empty() && item.front() == ' ')
      item.erase(0, 1);
    if (item.rfind(key, 0) == 0) {
      std::string token = item.substr(key.size());
      return PlausibleToken(token) ? token : "";
    }
    at = end + 1;
  }
  return "";
}

void Secure(httplib::Response& res) {
  res.set_header("Content-Security-Policy",
                 "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; "
                 "frame-ancestors 'none'; base-uri 'none'");
  res.set_header("X-Content-Type-Options", "nosniff");
  res.set_header("X-Frame-Options", "DENY");
  res.set_header("Referrer-Policy", "no-referrer");
  res.set_header("Cache-Control", "no-store");
}

void Redirect(httplib::Response& res, const std::string& to) {
  res.status = 303;
  res.set_header("Location", to);
}

bool IsNotYours(const Status& st) {
  return st.Is(StatusCode::kNotFound) || st.Is(StatusCode::kPermissionDenied) ||
         st.Is(StatusCode::kNotPermitted);
}

}  // namespace

void WebOptions::Bind(ConfigSection& s) {
  s.Optional("listen", listen);
  s.Required("hai_server", hai_server);
  s.Optional("fs3_mgmtd", fs3_mgmtd);
  s.Optional("log_tail_bytes", log_tail_bytes);
  s.Check(log_tail_bytes > 0 && log_tail_bytes <= (64 << 20), "log_tail_bytes",
          "must be between 1 and 64 MiB");
  s.Optional("secure_cookie", secure_cookie);
  s.Optional("https_cert_file", https_cert_file);
  s.Optional("https_key_file", https_key_file);
  s.Check(https_cert_file.empty() == https_key_file.empty(), "https_cert_file",
          "and https_key_file go together (one is set, not the other)");
}

WebServer::WebServer(const WebOptions& options, Metrics* metrics)
    : options_(options), metrics_(metrics) {}

void WebServer::Count(const std::string& page, int status) {
  if (metrics_ == nullptr) return;
  metrics_
      ->Counter("hai_web_requests_total", "Requests served, by page and HTTP status",
                {{"page", page}, {"code", std::to_string(status)}})
      .Increment();
}

void WebServer::Time(const std::string& page, std::chrono::steady_clock::time_point start) {
  if (metrics_ == nullptr) return;
  metrics_
      ->Histogram("hai_web_request_seconds",
                  "Time to render a page (hai-server's answers included)",
                  Metrics::LatencyBuckets(), {{"page", page}})
      .Observe(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
}

WebServer::~WebServer() {
  Stop();
}

Result<std::unique_ptr<WebServer>> WebServer::Create(const WebOptions& options, Metrics* metrics) {
  std::string host;
  int port = 0;
  FF_RETURN_IF_ERROR(SplitHostPort(options.listen, &host, &port));
  // hai-server and fs3-mgmtd: one address, or every replica's, comma-separated.
  for (const std::string* list : {&options.hai_server, &options.fs3_mgmtd}) {
    for (const std::string& address : SplitAddressList(*list))
      FF_RETURN_IF_ERROR(SplitHostPort(address, &host, &port));
  }
  if (SplitAddressList(options.hai_server).empty()) {
    return InvalidArgument("web.hai_server: no address");
  }
  std::unique_ptr<WebServer> web(new WebServer(options, metrics));
  web->hai_servers_ = std::make_shared<HaiClient::Servers>(options.hai_server);
  if (options.https()) {
    // (httplib reads them without saying what is wrong: read them first for a clear error.)
    FF_RETURN_IF_ERROR(
        ReadWholeFile(options.https_cert_file, "cannot read web.https_cert_file").status());
    FF_RETURN_IF_ERROR(
        ReadWholeFile(options.https_key_file, "cannot read web.https_key_file").status());
    auto https = std::make_unique<httplib::SSLServer>(options.https_cert_file.c_str(),
                                                      options.https_key_file.c_str());
    if (!https->is_valid()) {
      return InvalidArgument("web.https_cert_file '" + options.https_cert_file +
                             "' and web.https_key_file '" + options.https_key_file +
                             "' are not a PEM certificate and its key");
    }
    web->http_ = std::move(https);
  } else {
    web->http_ = std::make_unique<httplib::Server>();
  }
  web->Routes();
  return web;
}

Status WebServer::Start() {
  std::string host;
  int port = 0;
  FF_RETURN_IF_ERROR(SplitHostPort(options_.listen, &host, &port));
  if (port == 0) {
    port = http_->bind_to_any_port(host);
    if (port < 0)
      return Status(StatusCode::kUnavailable, "hai-web: cannot listen on " + options_.listen);
  } else if (!http_->bind_to_port(host, port)) {
    return Status(StatusCode::kUnavailable,
                  "hai-web: cannot listen on " + options_.listen + " (in use?)");
  }
  address_ = JoinHostPort(host, port);
  thread_ = std::thread([this] { http_->listen_after_bind(); });
  spdlog::info("hai-web: {} (hai-server {}, fs3-mgmtd {})", url(), options_.hai_server,
               options_.fs3_mgmtd.empty() ? "not set" : options_.fs3_mgmtd);
  return Status::Ok();
}

void WebServer::Stop() {
  if (http_) http_->stop();
  if (thread_.joinable()) thread_.join();
}

void WebServer::Routes() {
  httplib::Server& s = *http_;
  s.set_payload_max_length(64 << 10);  // a login form; nothing else is posted
  if (options_.https()) {              // browsers come back over HTTPS only, for a year
    s.set_post_routing_handler([](const httplib::Request&, httplib::Response& res) {
      res.set_header("Strict-Transport-Security", "max-age=31536000");
    });
  }

  // Each page: who is asking (hai-server's WhoAmI on the cookie's token), then the page, fetched
  // with that token. No token, or one hai-server does not know: the login page.
  using Render = std::function<Page(HaiClient&, const hai::User&, const httplib::Request&)>;
  auto page = [this](const std::string& name, Render render) {
    return [this, name, render](const httplib::Request& req, httplib::Response& res) {
      const auto start = std::chrono::steady_clock::now();
      Secure(res);
      std::string token = CookieToken(req);
      if (token.empty()) return Redirect(res, "/login");
      HaiClient hai(token, hai_servers_);
      hai::User user;
      Status st = hai.Call("WhoAmI", CallOptions::Idempotent(), [&](auto* c, auto& stub) {
        return stub.WhoAmI(c, hai::WhoAmIRequest{}, &user);
      });
      if (st.Is(StatusCode::kUnauthenticated) || st.Is(StatusCode::kPermissionDenied)) {
        return Redirect(res, "/login");
      }
      Page p = st.ok() ? render(hai, user, req) : ErrorPage(503, st.message());
      res.status = p.status;
      res.set_content(Layout(p, user), kHtml);
      Time(name, start);
    };
  };

  s.Get("/static/style.css", [](const httplib::Request&, httplib::Response& res) {
    Secure(res);
    res.set_header("Cache-Control", "max-age=3600");
    res.set_content(kStyle, "text/css; charset=utf-8");
  });

  s.Get("/login", [](const httplib::Request&, httplib::Response& res) {
    Secure(res);
    res.set_content(LoginPage(""), kHtml);
  });

  s.Post("/login", [this](const httplib::Request& req, httplib::Response& res) {
    Secure(res);
    std::string token = req.get_param_value("token");
    while (!token.empty() && std::isspace(static_cast<unsigned char>(token.back())))
      token.pop_back();
    while (!token.empty() && std::isspace(static_cast<unsigned char>(token.front())))
      token.erase(0, 1);
    hai::User user;
    Status st = Status(StatusCode::kUnauthenticated, "not a token");
    if (PlausibleToken(token)) {
      HaiClient hai(token, hai_servers_);
      st = hai.Call("WhoAmI", CallOptions::Idempotent(), [&](auto* c, auto& stub) {
        return stub.WhoAmI(c, hai::WhoAmIRequest{}, &user);
      });
    }
    if (metrics_ != nullptr) {
      metrics_
          ->Counter("hai_web_logins_total",
                    "Login attempts: ok, or refused (a token hai-server does not know)",
                    {{"result", st.ok() ? "ok" : "refused"}})
          .Increment();
    }
    if (!st.ok()) {
      const bool unknown =
          st.Is(StatusCode::kUnauthenticated) || st.Is(StatusCode::kPermissionDenied);
      res.status = unknown ? 401 : 503;
      res.set_content(LoginPage(unknown ? "hai-server does not know that token."
                                        : "hai-server did not answer: " + st.message()),
                      kHtml);
      return;
    }
    spdlog::info("hai-web: {} logged in", user.name());
    res.set_header("Set-Cookie",
                   std::string(kCookie) + "=" + token + "; Path=/; HttpOnly; SameSite=Strict" +
                       (options_.secure_cookie || options_.https() ? "; Secure" : ""));
    Redirect(res, "/");
  });

  s.Get("/logout", [](const httplib::Request&, httplib::Response& res) {
    Secure(res);
    res.set_header("Set-Cookie",
                   std::string(kCookie) + "=; Path=/; Max-Age=0; HttpOnly; SameSite=Strict");
    Redirect(res, "/login");
  });

  s.Get("/", page("jobs", [](HaiClient& hai, const hai::User& user, const httplib::Request& req) {
          hai::ListJobsRequest r;
          r.set_include_finished(true);
          r.set_all_users(user.admin() && req.get_param_value("all") == "1");
          hai::ListJobsResponse jobs;
          Status st = hai.Call("ListJobs", CallOptions::Idempotent(),
                               [&](auto* c, auto& stub) { return stub.ListJobs(c, r, &jobs); });
          if (!st.ok()) return ErrorPage(503, st.message());
          return JobsPage({jobs.jobs().begin(), jobs.jobs().end()}, r.all_users(), user.admin(),
                          NowMs());
        }));

  s.Get(R"(/jobs/(\d{1,18}))",
        page("job", [this](HaiClient& hai, const hai::User&, const httplib::Request& req) {
          hai::JobRef ref;
          ref.set_id(std::stoll(req.matches[1].str()));
          hai::Job job;
          Status st = hai.Call("GetJob", CallOptions::Idempotent(),
                               [&](auto* c, auto& stub) { return stub.GetJob(c, ref, &job); });
          // Another user's job reads as one that does not exist: the page tells nothing about it.
          if (IsNotYours(st))
            return ErrorPage(404, "You have no job " + std::to_string(ref.id()) + ".");
          if (!st.ok()) return ErrorPage(503, st.message());
          std::string tail;
          if (job.runs_size() > 0) {
            hai::LogsRequest lr;
            lr.set_id(job.id());
            lr.set_rank(0);
            grpc::ClientContext c;
            hai.Authorize(&c);
            c.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
            auto reader = hai.stub().ReadLogs(&c, lr);
            hai::LogChunk chunk;
            const size_t keep = static_cast<size_t>(options_.log_tail_bytes);
            while (reader->Read(&chunk)) {
              tail += chunk.data();
              if (tail.size() > 2 * keep) tail.erase(0, tail.size() - keep);
            }
            Status ls = FromGrpcStatus(reader->Finish());
            if (tail.size() > keep) tail.erase(0, tail.size() - keep);
            if (!ls.ok()) tail += "\n[hai-web: the log could not be read: " + ls.message() + "]\n";
          }
          std::optional<hai::JobMetrics> metrics;
          std::string metrics_error;
          if (job.runs_size() > 0) {
            hai::MetricsRequest mr;
            mr.set_id(job.id());
            mr.set_rank(0);
            mr.set_max_points(500);
            hai::JobMetrics m;
            Status ms = hai.Call("ReadMetrics", CallOptions::Idempotent(),
                                 [&](auto* c, auto& stub) { return stub.ReadMetrics(c, mr, &m); });
            if (ms.ok()) {
              metrics = std::move(m);
            } else {
              metrics_error = ms.message();
            }
          }
          // A running job's steps: hai top's view, and the step records of the rank it names
          // (else rank 0). Best effort: a job that does not record them has no such section.
          std::optional<hai::JobSteps> steps;
          std::optional<hai::JobMetrics> step_records;
          if (job.state() == hai::RUNNING) {
            hai::JobStepsRequest sr;
            sr.set_id(job.id());
            hai::JobSteps js;
            if (hai.Call("Steps", CallOptions::Idempotent(),
                         [&](auto* c, auto& stub) { return stub.Steps(c, sr, &js); })
                    .ok() &&
                js.ranks_size() > 0) {
              hai::MetricsRequest mr;
              mr.set_id(job.id());
              mr.set_rank(js.finding().rank() >= 0 ? js.finding().rank() : 0);
              mr.set_max_points(300);
              mr.set_steps(true);
              hai::JobMetrics m;
              if (hai.Call("ReadMetrics", CallOptions::Idempotent(),
                           [&](auto* c, auto& stub) { return stub.ReadMetrics(c, mr, &m); })
                      .ok()) {
                step_records = std::move(m);
              }
              steps = std::move(js);
            }
          }
          return JobPage(job, tail, metrics ? &*metrics : nullptr, metrics_error, NowMs(),
                         steps ? &*steps : nullptr, step_records ? &*step_records : nullptr);
        }));

  s.Get("/nodes", page("nodes", [](HaiClient& hai, const hai::User& user, const httplib::Request&) {
          hai::ListNodesResponse nodes;
          Status st = hai.Call("ListNodes", CallOptions::Idempotent(), [&](auto* c, auto& stub) {
            return stub.ListNodes(c, hai::ListNodesRequest{}, &nodes);
          });
          if (!st.ok()) return ErrorPage(503, st.message());
          // The jobs this user may see by number: their own (every job, for an admin).
          hai::ListJobsRequest r;
          r.set_all_users(user.admin());
          hai::ListJobsResponse jobs;
          st = hai.Call("ListJobs", CallOptions::Idempotent(),
                        [&](auto* c, auto& stub) { return stub.ListJobs(c, r, &jobs); });
          if (!st.ok()) return ErrorPage(503, st.message());
          std::set<int64_t> visible;
          for (const auto& j : jobs.jobs())
            visible.insert(j.id());
          return NodesPage({nodes.nodes().begin(), nodes.nodes().end()}, visible, NowMs());
        }));

  s.Get("/fs3", page("fs3", [this](HaiClient&, const hai::User&, const httplib::Request&) {
          if (options_.fs3_mgmtd.empty()) {
            return Fs3Page(nullptr,
                           "No fs3-mgmtd is set for hai-web (web.fs3_mgmtd in its config).");
          }
          fs3::MgmtdReplicas replicas(options_.fs3_mgmtd);
          Result<fs3rpc::RoutingInfo> routing =
              fs3::FetchRouting(replicas, fs3::RoutingFetch{.attempts = 3});
          if (!routing.ok()) {
            return Fs3Page(nullptr, "fs3-mgmtd at " + options_.fs3_mgmtd +
                                        " did not answer: " + routing.status().message());
          }
          return Fs3Page(&*routing, "");
        }));

  // Every response counted by page (the route, not the path: job ids do not become labels).
  s.set_logger([this](const httplib::Request& req, const httplib::Response& res) {
    std::string route = req.path == "/"                      ? "jobs"
                        : req.path.rfind("/jobs/", 0) == 0   ? "job"
                        : req.path == "/nodes"               ? "nodes"
                        : req.path == "/fs3"                 ? "fs3"
                        : req.path == "/login"               ? "login"
                        : req.path == "/logout"              ? "logout"
                        : req.path.rfind("/static/", 0) == 0 ? "static"
                                                             : "other";
    Count(route, res.status);
  });

  s.set_error_handler([](const httplib::Request&, httplib::Response& res) {
    if (!res.body.empty()) return;
    Secure(res);
    res.set_content("<!DOCTYPE html><html><head><title>" + std::to_string(res.status) +
                        "</title></head><body><p>" + std::to_string(res.status) +
                        (res.status == 404 ? ": no such page" : "") +
                        ". <a href=\"/\">Jobs</a></p></body></html>",
                    kHtml);
  });
  s.set_exception_handler(
      [](const httplib::Request& req, httplib::Response& res, std::exception_ptr ep) {
        std::string what = "unknown";
        try {
          std::rethrow_exception(ep);
        } catch (const std::exception& e) {
          what = e.what();
        } catch (...) {
        }
        spdlog::error("hai-web: {} {}: {}", req.method, req.path, what);
        res.status = 500;
        res.set_content("internal error", "text/plain");
      });
}

}  // namespace ff::platform::web
