#include "common/logging.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <nlohmann/json.hpp>
#include <sstream>

#include "tests/support/subprocess.h"

namespace ff {
namespace {

using ::testing::HasSubstr;
using ::testing::MatchesRegex;

std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> lines;
  std::stringstream ss(text);
  for (std::string line; std::getline(ss, line);)
    lines.push_back(line);
  return lines;
}

TEST(LoggingTest, TextFormatIsOneLinePerEventWithDaemonName) {
  test::TempDir dir;
  LogOptions options;
  options.file = dir.File("d.log");
  options.level = "debug";
  ASSERT_TRUE(InitLogging("fs3-test", options).ok());
  spdlog::info("first event");
  spdlog::debug("multi\nline\tevent");
  spdlog::trace("below the level");
  spdlog::default_logger()->flush();

  std::vector<std::string> lines = Lines(test::ReadFileOrEmpty(options.file));
  ASSERT_EQ(lines.size(), 2u);
  std::string pid = std::to_string(getpid());
  EXPECT_THAT(lines[0],
              MatchesRegex("[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9:.]+[+-][0-9]{2}:[0-9]{2} info "
                           "fs3-test\\[" +
                           pid + "\\] first event"));
  EXPECT_THAT(lines[1], HasSubstr(" debug fs3-test[" + pid + "] multi\\nline\\tevent"));
}

TEST(LoggingTest, JsonFormatIsOneParseableObjectPerLine) {
  test::TempDir dir;
  LogOptions options;
  options.file = dir.File("d.log");
  options.format = "json";
  ASSERT_TRUE(InitLogging("hai-server", options).ok());
  spdlog::warn("quote \" backslash \\ newline \n bell \a");
  spdlog::default_logger()->flush();

  std::vector<std::string> lines = Lines(test::ReadFileOrEmpty(options.file));
  ASSERT_EQ(lines.size(), 1u);
  nlohmann::json event = nlohmann::json::parse(lines[0]);
  EXPECT_EQ(event["daemon"], "hai-server");
  EXPECT_EQ(event["level"], "warning");
  EXPECT_EQ(event["pid"], getpid());
  EXPECT_EQ(event["msg"], "quote \" backslash \\ newline \n bell \a");
}

TEST(LoggingTest, BadOptionsFailAndKeepTheCurrentLogger) {
  auto before = spdlog::default_logger();
  LogOptions bad_level;
  bad_level.level = "loud";
  EXPECT_EQ(InitLogging("x", bad_level).code(), StatusCode::kInvalidArgument);
  LogOptions bad_format;
  bad_format.format = "xml";
  EXPECT_EQ(InitLogging("x", bad_format).code(), StatusCode::kInvalidArgument);
  test::TempDir dir;
  test::WriteFile(dir.File("plain-file"), "");
  LogOptions bad_file;
  bad_file.file = dir.File("plain-file/x.log");  // a parent that is not a directory
  Status st = InitLogging("x", bad_file);
  EXPECT_EQ(st.code(), StatusCode::kIoError);
  EXPECT_THAT(st.message(), HasSubstr("plain-file/x.log"));
  EXPECT_EQ(spdlog::default_logger(), before);
}

TEST(LoggingTest, EscapeKeepsPrintableText) {
  EXPECT_EQ(EscapeLogText("plain text: ok", false), "plain text: ok");
  EXPECT_EQ(EscapeLogText("a\x01"
                          "b",
                          false),
            "a\\x01b");
  EXPECT_EQ(EscapeLogText("a\x01"
                          "b",
                          true),
            "a\\u0001b");
  EXPECT_EQ(EscapeLogText("\"q\"", false), "\"q\"");
  EXPECT_EQ(EscapeLogText("\"q\"", true), "\\\"q\\\"");
}

}  // namespace
}  // namespace ff
