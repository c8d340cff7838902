// TOML configuration loaded into typed structs.
//
// A config struct describes itself once, in a Bind method, and that one description is used both
// to load a file and to print the effective configuration:
//
//   struct ServerOptions {
//     std::string listen = "127.0.0.1:0";   // defaults are the member initialisers
//     int64_t max_message_mib = 64;
//     void Bind(ConfigSection& s) {
//       s.Optional("listen", listen);
//       s.Optional("max_message_mib", max_message_mib);
//       s.Check(max_message_mib > 0, "max_message_mib", "must be positive");
//     }
//   };
//   struct MyDaemonConfig {
//     ServerOptions server;
//     std::string data_dir;
//     void Bind(ConfigSection& s) {
//       s.Section("server", server);
//       s.Required("data_dir", data_dir);
//     }
//   };
//   Result<MyDaemonConfig> cfg = LoadConfigFile<MyDaemonConfig>("my.toml",
//   {"server.listen=:7000"});
//
// Loading is strict: a missing required key, a value of the wrong type, a value out of range, an
// unknown key (a typo must not be silently ignored), an unreadable file and a TOML syntax error
// are all errors (kInvalidArgument, or kNotFound / kPermissionDenied for the file) whose message
// names the file, the line, the dotted key and what was expected, on one line.
//
// Overrides ("dotted.key=value", from command-line flags) are applied on top of the file before
// binding. The value is read as a TOML value when it parses as one (7000, true, "x", [1, 2]) and
// as a bare string otherwise, so `--set server.listen=127.0.0.1:7000` works unquoted.
//
// Supported member types: std::string, bool, every integer type (range-checked), double,
// std::vector of those, std::map<std::string, std::string>, nested structs with Bind (Section) and
// vectors of them (arrays of tables, Sections).
#pragma once

#include <cstdint>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "common/files.h"
#include "common/result.h"
#include "common/status.h"

namespace toml {
inline namespace v3 {
class table;
class node;
}  // namespace v3
}  // namespace toml

namespace ff {

class ConfigSection;

namespace config_detail {
struct Shared;  // the source name and the error list, shared by all sections of one load

// Parses `text` (named `source` in messages) and applies `overrides`; returns the root section.
Result<ConfigSection> OpenRead(std::string_view text, std::string_view source,
                               const std::vector<std::string>& overrides);
// After binding: reports unknown keys, then the first error (with a count of the others).
Status Finish(ConfigSection& root);
// For ConfigToToml.
ConfigSection OpenWrite();
std::string WrittenToml(ConfigSection& root);
}  // namespace config_detail

class ConfigSection {
 public:
  enum class Mode { kRead, kWrite };

  // Reads `key` into `out` when present; keeps `out` (the default) when absent.
  template <typename T>
  void Optional(std::string_view key, T& out) {
    Field(key, out, /*required=*/false);
  }
  // Reads `key` into `out` when present; leaves it unset when absent (for a setting whose default
  // lives elsewhere, e.g. in the library that interprets it). Written only when set.
  template <typename T>
  void Optional(std::string_view key, std::optional<T>& out) {
    if (mode_ == Mode::kWrite) {
      if (out.has_value()) Field(key, *out, /*required=*/false);
      return;
    }
    T value{};
    if (Present(key)) {
      Field(key, value, /*required=*/false);
      out = value;
    } else {
      MarkUsed(key);
    }
  }
  // Reads `key` into `out`; an error when absent.
  template <typename T>
  void Required(std::string_view key, T& out) {
    Field(key, out, /*required=*/true);
  }
  // Binds the sub-table `key` (absent: the struct keeps its defaults; T::Bind still runs so that
  // its own Required keys are reported).
  template <typename T>
  void Section(std::string_view key, T& out);
  // Binds an array of tables ([[key]] ...) into a vector.
  template <typename T>
  void Sections(std::string_view key, std::vector<T>& out);

  // Records an error "key 'a.b': <message>" unless `ok`. Validation only; no-op when writing.
  void Check(bool ok, std::string_view key, std::string_view message);
  // Records an error unless `value` is one of `allowed`.
  void OneOf(std::string_view key, const std::string& value,
             const std::vector<std::string_view>& allowed);

  Mode mode() const { return mode_; }
  // Dotted path of this section ("" for the root).
  const std::string& path() const { return path_; }

 private:
  friend Result<ConfigSection> config_detail::OpenRead(std::string_view, std::string_view,
                                                       const std::vector<std::string>&);
  friend Status config_detail::Finish(ConfigSection&);
  friend ConfigSection config_detail::OpenWrite();
  friend std::string config_detail::WrittenToml(ConfigSection&);

  ConfigSection(Mode mode, toml::table* table, std::string path,
                std::shared_ptr<config_detail::Shared> shared);

  // One overload per supported scalar kind; integers are range-checked against T.
  void Field(std::string_view key, std::string& out, bool required);
  void Field(std::string_view key, bool& out, bool required);
  void Field(std::string_view key, double& out, bool required);
  void Field(std::string_view key, std::vector<std::string>& out, bool required);
  void Field(std::string_view key, std::vector<int64_t>& out, bool required);
  void Field(std::string_view key, std::vector<double>& out, bool required);
  void Field(std::string_view key, std::map<std::string, std::string>& out, bool required);
  template <typename T,
            typename = std::enable_if_t<std::is_integral_v<T> && !std::is_same_v<T, bool>>>
  void Field(std::string_view key, T& out, bool required) {
    int64_t v = static_cast<int64_t>(out);
    if (FieldInteger(key, v, required, IntMin<T>(), IntMax<T>())) out = static_cast<T>(v);
  }
  template <typename T>
  static int64_t IntMin() {
    return static_cast<int64_t>(std::numeric_limits<T>::min());
  }
  template <typename T>
  static int64_t IntMax() {
    if constexpr (std::numeric_limits<T>::max() >
                  static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return std::numeric_limits<int64_t>::max();
    } else {
      return static_cast<int64_t>(std::numeric_limits<T>::max());
    }
  }
  // True when `out` was assigned from the file.
  bool FieldInteger(std::string_view key, int64_t& out, bool required, int64_t min, int64_t max);

  // Returns the sub-section for `key` (creating the table when writing).
  ConfigSection Child(std::string_view key);
  // For arrays of tables: false when reading and `key` is absent (keep the defaults); else sets
  // `count` (the file's element count when reading) and prepares the array when writing.
  bool BeginArray(std::string_view key, std::size_t& count);
  ConfigSection ArrayElement(std::string_view key, std::size_t i);
  void MarkUsed(std::string_view key);
  bool Present(std::string_view key) const;
  void Fail(std::string_view key, const toml::node* where, std::string_view message);
  std::string KeyPath(std::string_view key) const;

  Mode mode_;
  toml::table* table_;  // null when the section is absent from the file
  std::string path_;
  std::shared_ptr<config_detail::Shared> shared_;
  bool invalid_ = false;  // the section's value had the wrong type (already reported)
};

// ---- Loading ------------------------------------------------------------------------------------

// Loads T from TOML text. `source` names the text in error messages (usually the file path).
template <typename T>
Result<T> LoadConfigString(std::string_view text, std::string_view source,
                           const std::vector<std::string>& overrides = {}) {
  FF_ASSIGN_OR_RETURN(ConfigSection root, config_detail::OpenRead(text, source, overrides));
  T value{};
  value.Bind(root);
  FF_RETURN_IF_ERROR(config_detail::Finish(root));
  return value;
}

// Loads T from a TOML file. An empty `path` means "no file": defaults plus overrides.
template <typename T>
Result<T> LoadConfigFile(const std::string& path, const std::vector<std::string>& overrides = {}) {
  if (path.empty()) return LoadConfigString<T>("", "<defaults>", overrides);
  FF_ASSIGN_OR_RETURN(std::string text, ReadWholeFile(path, "cannot read config file"));
  return LoadConfigString<T>(text, path, overrides);
}

// The effective configuration of `value` as TOML text (for --print-config).
template <typename T>
std::string ConfigToToml(T& value) {
  ConfigSection root = config_detail::OpenWrite();
  value.Bind(root);
  return config_detail::WrittenToml(root);
}

// ---- Template definitions -----------------------------------------------------------------------

template <typename T>
void ConfigSection::Section(std::string_view key, T& out) {
  ConfigSection child = Child(key);
  out.Bind(child);
}

template <typename T>
void ConfigSection::Sections(std::string_view key, std::vector<T>& out) {
  std::size_t n = out.size();
  if (!BeginArray(key, n)) return;
  if (mode_ == Mode::kRead) out.assign(n, T{});
  for (std::size_t i = 0; i < n; ++i) {
    ConfigSection element = ArrayElement(key, i);
    out[i].Bind(element);
  }
}

}  // namespace ff
