#include "common/config.h"

#include <fcntl.h>
#include <toml++/toml.h>
#include <unistd.h>

#include <cerrno>
#include <set>
#include <sstream>

namespace ff {
namespace config_detail {

struct Shared {
  std::string source;  // the file path (or a name for the text)
  std::unique_ptr<toml::table> root;
  struct Error {
    std::string message;
  };
  std::vector<Error> errors;
  // Keys consumed by Bind, per table; and the tables entered as sections (checked for unknown
  // keys recursively; a map field's table is not).
  std::map<const toml::table*, std::set<std::string, std::less<>>> used;
  std::set<const toml::table*> sections;
  // Values set by overrides, named by the override ("override 'a.b=1'") in messages.
  std::map<const toml::node*, std::string> override_names;
};

}  // namespace config_detail

namespace {

using config_detail::Shared;

std::string_view TypeName(const toml::node& node) {
  switch (node.type()) {
    case toml::node_type::string:
      return "string";
    case toml::node_type::integer:
      return "integer";
    case toml::node_type::floating_point:
      return "float";
    case toml::node_type::boolean:
      return "boolean";
    case toml::node_type::table:
      return "table";
    case toml::node_type::array:
      return "array";
    case toml::node_type::date:
      return "date";
    case toml::node_type::time:
      return "time";
    case toml::node_type::date_time:
      return "date-time";
    default:
      return "nothing";
  }
}

// "file.toml:12" for a node from a file, the override's own name for a node from a flag.
std::string Where(const Shared& shared, const toml::node* node) {
  if (node == nullptr) return shared.source;
  if (auto it = shared.override_names.find(node); it != shared.override_names.end()) {
    return it->second;
  }
  std::string where = shared.source;
  if (node->source().begin.line > 0) where += ":" + std::to_string(node->source().begin.line);
  return where;
}

Status ApplyOverride(Shared& shared, const std::string& assignment) {
  toml::table& root = *shared.root;
  auto eq = assignment.find('=');
  std::string name = "override '" + assignment + "'";
  if (eq == std::string::npos || eq == 0) {
    return InvalidArgument(name +
                           ": expected KEY=VALUE with a dotted KEY (e.g. server.listen=:7000)");
  }
  std::string key = assignment.substr(0, eq);
  std::string value = assignment.substr(eq + 1);

  std::vector<std::string> parts;
  std::stringstream ss(key);
  for (std::string part; std::getline(ss, part, '.');) {
    if (part.empty()) return InvalidArgument(name + ": empty component in key '" + key + "'");
    parts.push_back(part);
  }
  if (key.back() == '.') return InvalidArgument(name + ": empty component in key '" + key + "'");

  toml::table parsed;
  try {
    parsed = toml::parse("v = " + value);
  } catch (const toml::parse_error&) {
    parsed = toml::table{};
    parsed.insert("v", value);
  }
  if (!parsed.contains("v")) {  // e.g. a value holding a newline that started a new key
    parsed = toml::table{};
    parsed.insert("v", value);
  }
  toml::table* table = &root;
  for (std::size_t i = 0; i + 1 < parts.size(); ++i) {
    toml::node* child = table->get(parts[i]);
    if (child == nullptr) {
      table = table->insert(parts[i], toml::table{}).first->second.as_table();
      shared.override_names[table] = name;
    } else if (child->is_table()) {
      table = child->as_table();
    } else {
      return InvalidArgument(name + ": '" + parts[i] + "' is a " + std::string(TypeName(*child)) +
                             ", not a table");
    }
  }
  toml::node_view<toml::node> v = parsed["v"];
  auto it = table->insert_or_assign(parts.back(), *v.node()).first;
  shared.override_names[&it->second] = name;
  return Status::Ok();
}

void CollectUnknown(Shared& shared, const toml::table& table, const std::string& prefix) {
  const auto& used = shared.used[&table];
  for (const auto& [k, node] : table) {
    std::string path = prefix.empty() ? std::string(k.str()) : prefix + "." + std::string(k.str());
    if (!used.contains(k.str())) {
      shared.errors.push_back({Where(shared, &node) + ": unknown key '" + path + "'"});
      continue;
    }
    if (const toml::table* sub = node.as_table(); sub && shared.sections.contains(sub)) {
      CollectUnknown(shared, *sub, path);
    } else if (const toml::array* arr = node.as_array()) {
      for (std::size_t i = 0; i < arr->size(); ++i) {
        const toml::table* element = arr->get(i)->as_table();
        if (element && shared.sections.contains(element)) {
          CollectUnknown(shared, *element, path + "[" + std::to_string(i) + "]");
        }
      }
    }
  }
}

}  // namespace

// ---- ConfigSection
// --------------------------------------------------------------------------------

ConfigSection::ConfigSection(Mode mode, toml::table* table, std::string path,
                             std::shared_ptr<config_detail::Shared> shared)
    : mode_(mode), table_(table), path_(std::move(path)), shared_(std::move(shared)) {
  if (table_) shared_->sections.insert(table_);
}

std::string ConfigSection::KeyPath(std::string_view key) const {
  return path_.empty() ? std::string(key) : path_ + "." + std::string(key);
}

void ConfigSection::MarkUsed(std::string_view key) {
  if (table_) shared_->used[table_].emplace(key);
}

void ConfigSection::Fail(std::string_view key, const toml::node* where, std::string_view message) {
  shared_->errors.push_back(
      {Where(*shared_, where) + ": key '" + KeyPath(key) + "': " + std::string(message)});
}

void ConfigSection::Check(bool ok, std::string_view key, std::string_view message) {
  if (mode_ == Mode::kRead && !ok) {
    Fail(key, table_ ? table_->get(key) : nullptr, message);
  }
}

void ConfigSection::OneOf(std::string_view key, const std::string& value,
                          const std::vector<std::string_view>& allowed) {
  if (mode_ == Mode::kWrite) return;
  std::string list;
  for (std::string_view a : allowed) {
    if (a == value) return;
    if (!list.empty()) list += ", ";
    list += a;
  }
  Check(false, key, "expected one of " + list + "; got '" + value + "'");
}

// Looks `key` up for reading: nullptr when absent (an error when required).
#define FF_CONFIG_LOOKUP(node_var, type_name)                                                   \
  MarkUsed(key);                                                                                \
  toml::node* node_var = table_ ? table_->get(key) : nullptr;                                   \
  if (node_var == nullptr) {                                                                    \
    if (required && !invalid_) {                                                                \
      shared_->errors.push_back(                                                                \
          {shared_->source + ": missing required key '" + KeyPath(key) + "' (" type_name ")"}); \
    }                                                                                           \
    return;                                                                                     \
  }

namespace {
std::string Expected(std::string_view want, const toml::node& got) {
  return "expected " + std::string(want) + ", got " + std::string(TypeName(got));
}
}  // namespace

void ConfigSection::Field(std::string_view key, std::string& out, bool required) {
  if (mode_ == Mode::kWrite) {
    table_->insert_or_assign(key, out);
    return;
  }
  FF_CONFIG_LOOKUP(node, "string")
  if (auto v = node->value<std::string>(); v && node->is_string()) {
    out = *v;
  } else {
    Fail(key, node, Expected("string", *node));
  }
}

void ConfigSection::Field(std::string_view key, bool& out, bool required) {
  if (mode_ == Mode::kWrite) {
    table_->insert_or_assign(key, out);
    return;
  }
  FF_CONFIG_LOOKUP(node, "boolean")
  if (node->is_boolean()) {
    out = node->as_boolean()->get();
  } else {
    Fail(key, node, Expected("boolean", *node));
  }
}

void ConfigSection::Field(std::string_view key, double& out, bool required) {
  if (mode_ == Mode::kWrite) {
    table_->insert_or_assign(key, out);
    return;
  }
  FF_CONFIG_LOOKUP(node, "float")
  if (node->is_floating_point()) {
    out = node->as_floating_point()->get();
  } else if (node->is_integer()) {
    out = static_cast<double>(node->as_integer()->get());
  } else {
    Fail(key, node, Expected("float", *node));
  }
}

bool ConfigSection::Present(std::string_view key) const {
  return table_ != nullptr && table_->get(key) != nullptr;
}

bool ConfigSection::FieldInteger(std::string_view key, int64_t& out, bool required, int64_t min,
                                 int64_t max) {
  if (mode_ == Mode::kWrite) {
    table_->insert_or_assign(key, out);
    return false;
  }
  MarkUsed(key);
  toml::node* node = table_ ? table_->get(key) : nullptr;
  if (node == nullptr) {
    if (required && !invalid_) {
      shared_->errors.push_back(
          {shared_->source + ": missing required key '" + KeyPath(key) + "' (integer)"});
    }
    return false;
  }
  if (!node->is_integer()) {
    Fail(key, node, Expected("integer", *node));
    return false;
  }
  int64_t v = node->as_integer()->get();
  if (v < min || v > max) {
    Fail(
        key, node,
        std::to_string(v) + " is out of range " + std::to_string(min) + ".." + std::to_string(max));
    return false;
  }
  out = v;
  return true;
}

namespace {
template <typename T>
bool ReadArray(const toml::array& arr, std::vector<T>& out, std::string& error) {
  std::vector<T> values;
  for (std::size_t i = 0; i < arr.size(); ++i) {
    const toml::node& element = *arr.get(i);
    if constexpr (std::is_same_v<T, std::string>) {
      if (!element.is_string()) {
        error = "element " + std::to_string(i) + ": " + Expected("string", element);
        return false;
      }
      values.push_back(*element.value<std::string>());
    } else if constexpr (std::is_same_v<T, int64_t>) {
      if (!element.is_integer()) {
        error = "element " + std::to_string(i) + ": " + Expected("integer", element);
        return false;
      }
      values.push_back(element.as_integer()->get());
    } else {
      if (!element.is_number()) {
        error = "element " + std::to_string(i) + ": " + Expected("float", element);
        return false;
      }
      values.push_back(*element.value<double>());
    }
  }
  out = std::move(values);
  return true;
}

template <typename T>
toml::array WriteArray(const std::vector<T>& values) {
  toml::array arr;
  for (const T& v : values)
    arr.push_back(v);
  return arr;
}
}  // namespace

#define FF_CONFIG_ARRAY_FIELD(T, type_name)                                             \
  void ConfigSection::Field(std::string_view key, std::vector<T>& out, bool required) { \
    if (mode_ == Mode::kWrite) {                                                        \
      table_->insert_or_assign(key, WriteArray(out));                                   \
      return;                                                                           \
    }                                                                                   \
    FF_CONFIG_LOOKUP(node, "array of " type_name)                                       \
    std::string error;                                                                  \
    if (!node->is_array()) {                                                            \
      Fail(key, node, Expected("array of " type_name, *node));                          \
    } else if (!ReadArray(*node->as_array(), out, error)) {                             \
      Fail(key, node, error);                                                           \
    }                                                                                   \
  }
FF_CONFIG_ARRAY_FIELD(std::string, "strings")
FF_CONFIG_ARRAY_FIELD(int64_t, "integers")
FF_CONFIG_ARRAY_FIELD(double, "floats")
#undef FF_CONFIG_ARRAY_FIELD

void ConfigSection::Field(std::string_view key, std::map<std::string, std::string>& out,
                          bool required) {
  if (mode_ == Mode::kWrite) {
    toml::table t;
    for (const auto& [k, v] : out)
      t.insert(k, v);
    table_->insert_or_assign(key, std::move(t));
    return;
  }
  FF_CONFIG_LOOKUP(node, "table of strings")
  const toml::table* t = node->as_table();
  if (t == nullptr) {
    Fail(key, node, Expected("table of strings", *node));
    return;
  }
  std::map<std::string, std::string> values;
  for (const auto& [k, v] : *t) {
    if (!v.is_string()) {
      Fail(std::string(key) + "." + std::string(k.str()), &v, Expected("string", v));
      return;
    }
    values[std::string(k.str())] = *v.value<std::string>();
  }
  out = std::move(values);
}
#undef FF_CONFIG_LOOKUP

ConfigSection ConfigSection::Child(std::string_view key) {
  if (mode_ == Mode::kWrite) {
    auto* t = table_->insert_or_assign(key, toml::table{}).first->second.as_table();
    return ConfigSection(mode_, t, KeyPath(key), shared_);
  }
  MarkUsed(key);
  toml::node* node = table_ ? table_->get(key) : nullptr;
  ConfigSection child(mode_, node ? node->as_table() : nullptr, KeyPath(key), shared_);
  if (node != nullptr && !node->is_table()) {
    Fail(key, node, Expected("table", *node));
    child.invalid_ = true;  // its keys' "missing" errors would only repeat this one
  }
  child.invalid_ = child.invalid_ || invalid_;
  return child;
}

bool ConfigSection::BeginArray(std::string_view key, std::size_t& count) {
  if (mode_ == Mode::kWrite) {
    toml::array arr;
    for (std::size_t i = 0; i < count; ++i)
      arr.push_back(toml::table{});
    table_->insert_or_assign(key, std::move(arr));
    return true;
  }
  MarkUsed(key);
  toml::node* node = table_ ? table_->get(key) : nullptr;
  if (node == nullptr) return false;
  toml::array* arr = node->as_array();
  // An empty array is an empty list of tables: --print-config writes `key = []` for none
  // (found by tests/fuzz/config_fuzz.cc: printed configs did not load back).
  if (arr == nullptr || (!arr->empty() && !arr->is_array_of_tables())) {
    Fail(key, node, Expected("array of tables", *node));
    return false;
  }
  count = arr->size();
  return true;
}

ConfigSection ConfigSection::ArrayElement(std::string_view key, std::size_t i) {
  toml::table* element = table_->get(key)->as_array()->get(i)->as_table();
  return ConfigSection(mode_, element, KeyPath(key) + "[" + std::to_string(i) + "]", shared_);
}

// ---- Loading
// --------------------------------------------------------------------------------------

namespace config_detail {

Result<ConfigSection> OpenRead(std::string_view text, std::string_view source,
                               const std::vector<std::string>& overrides) {
  auto shared = std::make_shared<Shared>();
  shared->source = std::string(source);
  try {
    shared->root = std::make_unique<toml::table>(toml::parse(text, source));
  } catch (const toml::parse_error& e) {
    std::string message = std::string(source) + ":" + std::to_string(e.source().begin.line) + ":" +
                          std::to_string(e.source().begin.column) +
                          ": TOML syntax error: " + std::string(e.description());
    return InvalidArgument(message);
  }
  for (const std::string& o : overrides) {
    FF_RETURN_IF_ERROR(ApplyOverride(*shared, o));
  }
  toml::table* root = shared->root.get();
  return ConfigSection(ConfigSection::Mode::kRead, root, "", std::move(shared));
}

Status Finish(ConfigSection& root) {
  Shared& shared = *root.shared_;
  CollectUnknown(shared, *shared.root, "");
  if (shared.errors.empty()) return Status::Ok();
  std::string message = shared.errors.front().message;
  if (shared.errors.size() > 1) {
    message += " (and " + std::to_string(shared.errors.size() - 1) + " more error" +
               (shared.errors.size() > 2 ? "s" : "") + ")";
  }
  return InvalidArgument(message);
}

ConfigSection OpenWrite() {
  auto shared = std::make_shared<Shared>();
  shared->source = "<effective config>";
  shared->root = std::make_unique<toml::table>();
  toml::table* root = shared->root.get();
  return ConfigSection(ConfigSection::Mode::kWrite, root, "", std::move(shared));
}

std::string WrittenToml(ConfigSection& root) {
  std::stringstream out;
  out << toml::toml_formatter(*root.shared_->root);
  out << "\n";
  return out.str();
}

}  // namespace config_detail
}  // namespace ff
