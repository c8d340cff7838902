// What hai's subcommands share: the global options, the client that dies with one line on a
// failed call, formatting, and the registration of each subcommand (jobs.cc, cluster.cc).
#pragma once

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "common/rpc_client.h"
#include "platform/client.h"
#include "platform/proto/hai.grpc.pb.h"

namespace google::protobuf {
class Message;
}

namespace ff::platform::cli {

// Where and who, from --server / --token, $HAI_SERVER / $HAI_TOKEN or ~/.hai/config.toml.
struct Globals {
  std::string server;
  std::string token;
  bool json = false;
  // The words after the first "--": a submitted job's command, taken as they are (main splits
  // them off before CLI11 parses, which would otherwise read the command's own options as hai's
  // after a repeatable option such as --env).
  std::vector<std::string> after_dashes;
};

// Prints "hai: <message>" on stderr and exits with `code` (2: bad usage).
[[noreturn]] void Die(const std::string& message, int code = 1);

std::string Lower(std::string s);
std::string ToJson(const google::protobuf::Message& m);  // one line, field names as in hai.proto
std::string Ago(int64_t ms);                             // "42s", "5m", "3h", "2d"
std::string Clock(int64_t ms);                           // local "YYYY-MM-DD HH:MM:SS"
int64_t ParseDuration(const std::string& text);          // "1h30m" -> 5400; -1 when not a duration
int64_t ParseJobId(const std::string& s);                // dies (code 2) when not a job id
std::string Quote(const std::string& arg);               // for /bin/sh, only when needed

// hai-server through the client library; a failed call prints one line and exits 1.
class Client {
 public:
  explicit Client(const Globals& g) : g_(g), hai_(RequireServer(g), g.token) {}

  // Runs one call (`fn(context, stub)`); on failure prints the server's message and exits 1.
  template <typename Fn>
  void Call(const std::string& what, Fn&& fn, bool idempotent = true) {
    CallOptions o = idempotent ? CallOptions::Idempotent(std::chrono::seconds(10)) : CallOptions{};
    if (!idempotent) o.deadline = std::chrono::seconds(10);
    grpc::Status last;  // the last attempt's answer: the server's own message
    Status st = hai_.Call(what, o, [&](grpc::ClientContext* c, hai::Hai::Stub& stub) {
      last = fn(c, stub);
      return last;
    });
    if (st.ok()) return;
    const std::string m = last.ok() ? st.message() : last.error_message();
    switch (st.code()) {
      case StatusCode::kUnavailable:
      case StatusCode::kDeadlineExceeded:
        Die("cannot reach hai-server at " + g_.server + " (" + m + ")");
      case StatusCode::kUnauthenticated:
        Die("hai-server refused the token: " + m);
      default:
        Die(m);
    }
  }

  HaiClient& hai() { return hai_; }

 private:
  static std::string RequireServer(const Globals& g) {
    if (g.server.empty())
      Die("no server: set HAI_SERVER, --server or server in ~/.hai/config.toml");
    return g.server;
  }

  const Globals& g_;
  HaiClient hai_;
};

// A subcommand: its CLI11 node, and what runs when it was the one given.
struct Command {
  CLI::App* app;
  std::function<int(const Globals&, Client&)> run;
};

// jobs.cc: submit, ls, show, stop, suspend, logs, metrics, top.
void AddJobCommands(CLI::App& app, std::vector<Command>& out);
// cluster.cc: nodes, whoami, admin user add / ls, admin drain / undrain.
void AddClusterCommands(CLI::App& app, std::vector<Command>& out);

}  // namespace ff::platform::cli
