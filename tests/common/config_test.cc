#include "common/config.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include "common/logging.h"
#include "common/rpc_server.h"
#include "tests/support/subprocess.h"

namespace ff {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

struct Peer {
  std::string name;
  int64_t weight = 1;
  void Bind(ConfigSection& s) {
    s.Required("name", name);
    s.Optional("weight", weight);
  }
};

struct StorageOptions {
  std::string data_dir;
  uint16_t port = 9000;
  double fill_ratio = 0.9;
  bool fsync = true;
  std::vector<std::string> disks;
  std::vector<int64_t> sizes;
  std::map<std::string, std::string> labels;
  void Bind(ConfigSection& s) {
    s.Required("data_dir", data_dir);
    s.Optional("port", port);
    s.Optional("fill_ratio", fill_ratio);
    s.Check(fill_ratio > 0 && fill_ratio <= 1, "fill_ratio", "must be in (0, 1]");
    s.Optional("fsync", fsync);
    s.Optional("disks", disks);
    s.Optional("sizes", sizes);
    s.Optional("labels", labels);
  }
};

struct TestConfig {
  RpcServerOptions server;
  LogOptions log;
  StorageOptions storage;
  std::vector<Peer> peers;
  void Bind(ConfigSection& s) {
    s.Section("server", server);
    s.Section("log", log);
    s.Section("storage", storage);
    s.Sections("peers", peers);
  }
};

constexpr char kGood[] = R"(
[server]
listen = "0.0.0.0:7000"

[storage]
data_dir = "/data"
port = 9100
fill_ratio = 0.5
disks = ["/d0", "/d1"]
sizes = [1, 2]
labels = { rack = "r1" }

[[peers]]
name = "a"

[[peers]]
name = "b"
weight = 3
)";

Result<TestConfig> Load(std::string_view text, std::vector<std::string> overrides = {}) {
  return LoadConfigString<TestConfig>(text, "test.toml", overrides);
}

std::string ErrorOf(std::string_view text, std::vector<std::string> overrides = {}) {
  Result<TestConfig> r = Load(text, std::move(overrides));
  EXPECT_FALSE(r.ok()) << "expected an error for:\n" << text;
  if (r.ok()) return "";
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(r.status().message().find('\n'), std::string::npos) << "error must be one line";
  return r.status().message();
}

TEST(ConfigTest, LoadsEveryKindOfValue) {
  Result<TestConfig> r = Load(kGood);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->server.listen, "0.0.0.0:7000");
  EXPECT_EQ(r->server.max_message_mib, 64);  // default kept
  EXPECT_EQ(r->log.level, "info");           // absent section: defaults
  EXPECT_EQ(r->storage.data_dir, "/data");
  EXPECT_EQ(r->storage.port, 9100);
  EXPECT_DOUBLE_EQ(r->storage.fill_ratio, 0.5);
  EXPECT_TRUE(r->storage.fsync);
  EXPECT_EQ(r->storage.disks, (std::vector<std::string>{"/d0", "/d1"}));
  EXPECT_EQ(r->storage.sizes, (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(r->storage.labels.at("rack"), "r1");
  ASSERT_EQ(r->peers.size(), 2u);
  EXPECT_EQ(r->peers[0].name, "a");
  EXPECT_EQ(r->peers[0].weight, 1);
  EXPECT_EQ(r->peers[1].weight, 3);
}

struct WithUnset {
  std::optional<int64_t> wait;
  std::optional<std::string> name;
  void Bind(ConfigSection& s) {
    s.Optional("wait", wait);
    s.Optional("name", name);
    s.Check(wait.value_or(0) >= 0, "wait", "must not be negative");
  }
};

TEST(ConfigTest, AnOptionalSettingLeftOutStaysUnsetAndIsNotWritten) {
  Result<WithUnset> absent = LoadConfigString<WithUnset>("", "t.toml");
  ASSERT_TRUE(absent.ok()) << absent.status().ToString();
  EXPECT_FALSE(absent->wait.has_value());
  EXPECT_FALSE(absent->name.has_value());
  EXPECT_THAT(ConfigToToml(*absent), Not(HasSubstr("wait")));

  Result<WithUnset> set = LoadConfigString<WithUnset>("wait = 0\nname = \"x\"", "t.toml");
  ASSERT_TRUE(set.ok()) << set.status().ToString();
  EXPECT_EQ(set->wait, 0);  // zero is a value, not "unset"
  EXPECT_EQ(set->name, "x");
  EXPECT_THAT(ConfigToToml(*set), HasSubstr("wait = 0"));

  Result<WithUnset> bad = LoadConfigString<WithUnset>("wait = \"soon\"", "t.toml");
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(), HasSubstr("wait"));
  EXPECT_FALSE(LoadConfigString<WithUnset>("wait = -1", "t.toml").ok());
  EXPECT_FALSE(
      LoadConfigString<WithUnset>("wiat = 5", "t.toml").ok());  // unknown keys still refused
}

TEST(ConfigTest, FloatKeyAcceptsInteger) {
  Result<TestConfig> r = Load("[storage]\ndata_dir = \"/d\"\nfill_ratio = 1\n");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_DOUBLE_EQ(r->storage.fill_ratio, 1.0);
}

TEST(ConfigTest, MissingRequiredKeyNamesFileKeyAndType) {
  std::string e = ErrorOf("[storage]\nport = 1\n");
  EXPECT_EQ(e, "test.toml: missing required key 'storage.data_dir' (string)");
}

TEST(ConfigTest, MissingRequiredKeyInAbsentSection) {
  EXPECT_EQ(ErrorOf(""), "test.toml: missing required key 'storage.data_dir' (string)");
}

TEST(ConfigTest, MissingRequiredKeyInArrayElement) {
  std::string e = ErrorOf("[storage]\ndata_dir = \"/d\"\n[[peers]]\nweight = 2\n");
  EXPECT_EQ(e, "test.toml: missing required key 'peers[0].name' (string)");
}

TEST(ConfigTest, WrongTypesNameLineKeyExpectedAndActual) {
  EXPECT_EQ(ErrorOf("[storage]\ndata_dir = 5\n"),
            "test.toml:2: key 'storage.data_dir': expected string, got integer");
  EXPECT_EQ(ErrorOf("[storage]\ndata_dir = \"/d\"\nport = \"9000\"\n"),
            "test.toml:3: key 'storage.port': expected integer, got string");
  EXPECT_EQ(ErrorOf("[storage]\ndata_dir = \"/d\"\nfsync = 1\n"),
            "test.toml:3: key 'storage.fsync': expected boolean, got integer");
  EXPECT_EQ(ErrorOf("[storage]\ndata_dir = \"/d\"\nfill_ratio = \"x\"\n"),
            "test.toml:3: key 'storage.fill_ratio': expected float, got string");
  EXPECT_EQ(ErrorOf("[storage]\ndata_dir = \"/d\"\ndisks = \"/d0\"\n"),
            "test.toml:3: key 'storage.disks': expected array of strings, got string");
  EXPECT_EQ(ErrorOf("[storage]\ndata_dir = \"/d\"\ndisks = [\"/d0\", 1]\n"),
            "test.toml:3: key 'storage.disks': element 1: expected string, got integer");
  EXPECT_EQ(ErrorOf("[storage]\ndata_dir = \"/d\"\nlabels = { a = 1 }\n"),
            "test.toml:3: key 'storage.labels.a': expected string, got integer");
  EXPECT_EQ(ErrorOf("storage = 3\n"), "test.toml:1: key 'storage': expected table, got integer");
  EXPECT_EQ(ErrorOf("peers = 3\n[storage]\ndata_dir = \"/d\"\n"),
            "test.toml:1: key 'peers': expected array of tables, got integer");
}

TEST(ConfigTest, IntegerOutOfRangeForTheField) {
  EXPECT_EQ(ErrorOf("[storage]\ndata_dir = \"/d\"\nport = 70000\n"),
            "test.toml:3: key 'storage.port': 70000 is out of range 0..65535");
  EXPECT_EQ(ErrorOf("[storage]\ndata_dir = \"/d\"\nport = -1\n"),
            "test.toml:3: key 'storage.port': -1 is out of range 0..65535");
}

TEST(ConfigTest, ValidationChecksNameTheKey) {
  EXPECT_EQ(ErrorOf("[storage]\ndata_dir = \"/d\"\nfill_ratio = 1.5\n"),
            "test.toml:3: key 'storage.fill_ratio': must be in (0, 1]");
  EXPECT_EQ(ErrorOf("[log]\nlevel = \"loud\"\n[storage]\ndata_dir = \"/d\"\n"),
            "test.toml:2: key 'log.level': expected one of trace, debug, info, warn, error, "
            "critical, off; got 'loud'");
  EXPECT_THAT(ErrorOf("[server]\nlisten = \"localhost\"\n[storage]\ndata_dir = \"/d\"\n"),
              HasSubstr("test.toml:2: key 'server.listen': address 'localhost': no port"));
}

TEST(ConfigTest, UnknownKeysAreErrorsAtEveryDepth) {
  EXPECT_EQ(ErrorOf("[storage]\ndata_dir = \"/d\"\ndata_dri = \"/e\"\n"),
            "test.toml:3: unknown key 'storage.data_dri'");
  EXPECT_EQ(ErrorOf("colour = 1\n[storage]\ndata_dir = \"/d\"\n"),
            "test.toml:1: unknown key 'colour'");
  EXPECT_EQ(ErrorOf("[storage]\ndata_dir = \"/d\"\n[[peers]]\nname = \"a\"\nwieght = 2\n"),
            "test.toml:5: unknown key 'peers[0].wieght'");
  EXPECT_EQ(ErrorOf("[storage]\ndata_dir = \"/d\"\n[sever]\nlisten = \":1\"\n"),
            "test.toml:3: unknown key 'sever'");
}

TEST(ConfigTest, SeveralErrorsReportTheFirstAndACount) {
  std::string e = ErrorOf("[storage]\nport = \"x\"\nfsync = 2\n");
  EXPECT_THAT(e, HasSubstr("(and 2 more errors)"));
}

TEST(ConfigTest, SyntaxErrorNamesLineAndColumn) {
  std::string e = ErrorOf("[storage]\ndata_dir = \"/d\n");
  EXPECT_THAT(e, HasSubstr("test.toml:2:"));
  EXPECT_THAT(e, HasSubstr("TOML syntax error"));
}

TEST(ConfigTest, OverridesWinOverTheFileAndAreTyped) {
  Result<TestConfig> r =
      Load(kGood, {"storage.port=9200", "server.listen=127.0.0.1:7100", "storage.fsync=false",
                   "storage.disks=[\"/x\"]", "log.level=debug"});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->storage.port, 9200);
  EXPECT_EQ(r->server.listen, "127.0.0.1:7100");  // bare string (not valid TOML) kept as text
  EXPECT_FALSE(r->storage.fsync);
  EXPECT_EQ(r->storage.disks, std::vector<std::string>{"/x"});
  EXPECT_EQ(r->log.level, "debug");
}

TEST(ConfigTest, OverridesWithoutFileUseDefaults) {
  Result<TestConfig> r = LoadConfigFile<TestConfig>("", {"storage.data_dir=/only"});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->storage.data_dir, "/only");
  EXPECT_EQ(r->storage.port, 9000);
}

TEST(ConfigTest, BadOverridesAreClearErrors) {
  EXPECT_EQ(ErrorOf(kGood, {"noequals"}),
            "override 'noequals': expected KEY=VALUE with a dotted KEY (e.g. server.listen=:7000)");
  EXPECT_EQ(ErrorOf(kGood, {"storage..port=1"}),
            "override 'storage..port=1': empty component in key 'storage..port'");
  EXPECT_EQ(ErrorOf(kGood, {"storage.data_dir.x=1"}),
            "override 'storage.data_dir.x=1': 'data_dir' is a string, not a table");
  EXPECT_EQ(ErrorOf(kGood, {"storage.port=\"abc\""}),
            "override 'storage.port=\"abc\"': key 'storage.port': expected integer, got string");
  EXPECT_EQ(ErrorOf(kGood, {"storage.typo=1"}),
            "override 'storage.typo=1': unknown key 'storage.typo'");
}

TEST(ConfigTest, UnreadableFilesAreClearErrors) {
  Result<TestConfig> missing = LoadConfigFile<TestConfig>("/nonexistent/x.toml");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(missing.status().message(),
            "cannot read config file '/nonexistent/x.toml': No such file or directory");

  test::TempDir dir;
  Result<TestConfig> directory = LoadConfigFile<TestConfig>(dir.path());
  ASSERT_FALSE(directory.ok());
  EXPECT_EQ(directory.status().code(), StatusCode::kIsADirectory);
  EXPECT_THAT(directory.status().message(), HasSubstr("Is a directory"));
}

TEST(ConfigTest, FileErrorsNameTheFile) {
  test::TempDir dir;
  std::string path = dir.File("storage.toml");
  test::WriteFile(path, "[storage]\ndata_dir = 1\n");
  Result<TestConfig> r = LoadConfigFile<TestConfig>(path);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(),
            path + ":2: key 'storage.data_dir': expected string, got integer");
}

TEST(ConfigTest, EffectiveConfigRoundTrips) {
  Result<TestConfig> r = Load(kGood);
  ASSERT_TRUE(r.ok()) << r.status();
  std::string text = ConfigToToml(*r);
  EXPECT_THAT(text, HasSubstr("listen = '0.0.0.0:7000'"));
  Result<TestConfig> again = LoadConfigString<TestConfig>(text, "effective.toml");
  ASSERT_TRUE(again.ok()) << again.status() << "\n" << text;
  EXPECT_EQ(ConfigToToml(*again), text);
  EXPECT_EQ(again->peers.size(), 2u);
  EXPECT_EQ(again->storage.labels, r->storage.labels);
}

// Found by tests/fuzz/config_fuzz.cc: with no [[peers]], --print-config wrote `peers = []`,
// which did not load back ("expected array of tables, got array").
TEST(ConfigTest, APrintedConfigWithNoSectionsLoadsBack) {
  Result<TestConfig> r = Load("[storage]\ndata_dir = \"/data\"\n");
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_TRUE(r->peers.empty());
  std::string text = ConfigToToml(*r);
  Result<TestConfig> again = LoadConfigString<TestConfig>(text, "effective.toml");
  ASSERT_TRUE(again.ok()) << again.status() << "\n" << text;
  EXPECT_TRUE(again->peers.empty());
  EXPECT_EQ(ConfigToToml(*again), text);
  // A non-empty array that is not of tables is still refused.
  Result<TestConfig> bad = Load("peers = [1]\n[storage]\ndata_dir = \"/d\"\n");
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(), HasSubstr("expected array of tables"));
}

}  // namespace
}  // namespace ff
