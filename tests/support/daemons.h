// The C++ integration tests' one way to run the stack's daemons (ffdeploy.daemons
// (deploy/ffdeploy/daemons.py) is the Python one): each daemon's config written as
// <dir>/<name>.toml, started with --config and
// --ready-file, waited for, its ports pinned so that a daemon killed and started again comes back
// at the same address, killed, restarted. Used by Fs3Cluster (fs3_cluster.h) and the service
// tests (fs3-mgmtd, fs3-meta, hai-server with its agents).
//
//   test::Daemons d(dir);
//   d.Write("meta", "[meta]\ndata_dir = \"" + dir.File("meta") + "\"\n");  // + [server], [metrics]
//   ASSERT_TRUE(d.Start("meta", FF_FS3_META_PATH));
//   std::string address = d.ReadyField("meta", "rpc");
//   d.Kill("meta"); ASSERT_TRUE(d.Start("meta", FF_FS3_META_PATH));   // same address
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "tests/support/subprocess.h"

namespace ff::test {

class Daemons {
 public:
  explicit Daemons(const TempDir& dir, bool metrics = false) : dir_(dir), metrics_(metrics) {}

  // <name>.toml: `sections` after a [server] on a free port of 127.0.0.1 and [metrics] (a free
  // port, or disabled). A config without [server] (fs3-fuse, hai-health): WriteRaw.
  void Write(const std::string& name, const std::string& sections) const {
    WriteRaw(name, "[server]\nlisten = \"127.0.0.1:0\"\n" +
                       std::string(metrics_ ? "[metrics]\nlisten = \"127.0.0.1:0\"\n"
                                            : "[metrics]\nenabled = false\n") +
                       sections);
  }
  void WriteRaw(const std::string& name, const std::string& text) const {
    WriteFile(dir_.File(name + ".toml"), text);
  }

  // Starts (again) `name` from its config: `binary --config <name>.toml --ready-file ... args`;
  // false, with the reason in the test's output, when it exits or does not get ready in 30 s.
  // After the first start the config holds the ports it bound.
  bool Start(const std::string& name, const std::string& binary,
             const std::vector<std::string>& args = {},
             const std::map<std::string, std::string>& env = {}) {
    std::vector<std::string> argv = {binary, "--config", dir_.File(name + ".toml")};
    argv.insert(argv.end(), args.begin(), args.end());
    if (!Launch(name, argv, env)) return false;
    Pin(name);
    return true;
  }

  // Starts `argv` (a daemon whose config is on its command line) with --ready-file.
  bool Launch(const std::string& name, std::vector<std::string> argv,
              const std::map<std::string, std::string>& env = {}) {
    const std::string ready = dir_.File(name + ".ready");
    std::remove(ready.c_str());
    argv.push_back("--ready-file");
    argv.push_back(ready);
    auto proc = Subprocess::Start(argv, {.env = env, .output_dir = dir_.path()});
    EXPECT_TRUE(proc.ok()) << proc.status();
    if (!proc.ok()) return false;
    if (auto old = procs_.find(name); old != procs_.end()) {  // kept for Log()
      earlier_[name] += old->second->Stderr() + "---- (" + name + " started again)\n";
    }
    procs_[name] = std::make_unique<Subprocess>(std::move(*proc));
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (std::chrono::steady_clock::now() < deadline) {
      if (WaitForFile(ready, std::chrono::milliseconds(100))) return true;
      if (procs_[name]->Wait(std::chrono::seconds(0)).has_value()) break;
    }
    ADD_FAILURE() << name << " did not start: " << procs_[name]->Stderr();
    return false;
  }

  // SIGKILL, and waits for it to be gone.
  void Kill(const std::string& name) { Signal(name, SIGKILL); }
  // Sends `signal` and waits up to 10 s for it to exit.
  void Signal(const std::string& name, int signal) {
    procs_.at(name)->Signal(signal);
    procs_.at(name)->Wait(std::chrono::seconds(10));
  }

  // Ends every daemon (a Subprocess kills its process when destroyed).
  void Clear() { procs_.clear(); }

  Subprocess& proc(const std::string& name) { return *procs_.at(name); }
  // What `name` wrote to stderr, in every run since the first start (restarts included).
  std::string Log(const std::string& name) const {
    auto it = procs_.find(name);
    auto before = earlier_.find(name);
    return (before == earlier_.end() ? "" : before->second) +
           (it == procs_.end() ? "" : it->second->Stderr());
  }
  bool has(const std::string& name) const { return procs_.contains(name); }
  const std::map<std::string, std::unique_ptr<Subprocess>>& procs() const { return procs_; }

  // What a daemon's ready file says under `key` ("rpc", "metrics", "mountpoint").
  std::string ReadyField(const std::string& name, const std::string& key) const {
    auto text = WaitForFile(dir_.File(name + ".ready"), std::chrono::seconds(1));
    if (!text) return "";
    auto j = nlohmann::json::parse(*text, nullptr, false);
    return j.is_object() && j.contains(key) && j[key].is_string() ? j[key].get<std::string>() : "";
  }

 private:
  // Rewrites the config's port-0 listen lines to the addresses the daemon bound.
  void Pin(const std::string& name) const {
    const std::string path = dir_.File(name + ".toml");
    std::ifstream in(path);
    std::string text((std::istreambuf_iterator<char>(in)), {});
    std::string out, section, line;
    std::istringstream lines(text);
    while (std::getline(lines, line)) {
      if (!line.empty() && line[0] == '[') section = line;
      if (line == "listen = \"127.0.0.1:0\"") {
        const std::string bound = ReadyField(name, section == "[server]"    ? "rpc"
                                                   : section == "[metrics]" ? "metrics"
                                                                            : "");
        if (!bound.empty()) line = "listen = \"" + bound + "\"";
      }
      out += line + "\n";
    }
    WriteFile(path, out);
  }

  const TempDir& dir_;
  const bool metrics_;
  std::map<std::string, std::unique_ptr<Subprocess>> procs_;
  std::map<std::string, std::string> earlier_;  // stderr of the runs before the current one
};

}  // namespace ff::test
