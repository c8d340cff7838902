// Fuzz target: the TOML config loader every daemon uses (common/config.h). Any input must give
// a config or a clear error, never a crash; a config that loads prints (--print-config) as TOML
// that loads back to the same config.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "common/config.h"

namespace {

struct Target {
  int64_t id = 0;
  std::string path;
  void Bind(ff::ConfigSection& s) {
    s.Required("id", id);
    s.Check(id > 0, "id", "must be positive");
    s.Required("path", path);
  }
};

struct Section {
  std::string node = "n";
  int64_t timeout_ms = 1000;
  uint32_t port = 0;
  double ratio = 0.5;
  bool enabled = true;
  std::vector<std::string> names;
  std::vector<int64_t> numbers;
  std::vector<double> weights;
  std::map<std::string, std::string> labels;
  std::vector<Target> targets;
  void Bind(ff::ConfigSection& s) {
    s.Optional("node", node);
    s.Optional("timeout_ms", timeout_ms);
    s.Check(timeout_ms > 0, "timeout_ms", "must be positive");
    s.Optional("port", port);
    s.Optional("ratio", ratio);
    s.Optional("enabled", enabled);
    s.Optional("names", names);
    s.Optional("numbers", numbers);
    s.Optional("weights", weights);
    s.Optional("labels", labels);
    s.Sections("targets", targets);
    s.OneOf("node", node, {"n", "a", "b"});
  }
};

struct Config {
  Section svc;
  Section other;
  void Bind(ff::ConfigSection& s) {
    s.Section("svc", svc);
    s.Section("other", other);
  }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  auto config = ff::LoadConfigString<Config>(text, "fuzz.toml");
  if (!config.ok()) {
    if (config.status().message().empty()) std::abort();  // an error says what is wrong
    return 0;
  }
  const std::string printed = ff::ConfigToToml(*config);
  auto again = ff::LoadConfigString<Config>(printed, "printed.toml");
  if (!again.ok() || ff::ConfigToToml(*again) != printed) {
    // A round trip must change nothing: show what did not load back, then stop.
    std::fprintf(stderr, "printed:\n%s\nloaded back: %s\n", printed.c_str(),
                 again.ok() ? "a different config" : again.status().message().c_str());
    std::abort();
  }
  return 0;
}
