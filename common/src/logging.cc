#include "common/logging.h"

#include <grpc/support/log.h>
#include <spdlog/pattern_formatter.h>
#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <array>

#include "common/config.h"

namespace ff {
namespace {

constexpr std::array<std::string_view, 7> kLevels = {"trace", "debug",    "info", "warn",
                                                     "error", "critical", "off"};

// %Q in a pattern: the message, escaped to one line; %J: the same, escaped for a JSON string.
class EscapedMessageFlag : public spdlog::custom_flag_formatter {
 public:
  explicit EscapedMessageFlag(bool json) : json_(json) {}
  void format(const spdlog::details::log_msg& msg, const std::tm&,
              spdlog::memory_buf_t& dest) override {
    std::string escaped =
        EscapeLogText(std::string_view(msg.payload.data(), msg.payload.size()), json_);
    dest.append(escaped.data(), escaped.data() + escaped.size());
  }
  std::unique_ptr<custom_flag_formatter> clone() const override {
    return std::make_unique<EscapedMessageFlag>(json_);
  }

 private:
  bool json_;
};

// gRPC's own messages (gRPC logs only at or above $GRPC_VERBOSITY, default ERROR) go through our
// logger, so they carry the daemon name and stay one line each.
void LogGrpcMessage(gpr_log_func_args* args) {
  switch (args->severity) {
    case GPR_LOG_SEVERITY_DEBUG:
      spdlog::debug("grpc: {}", args->message);
      break;
    case GPR_LOG_SEVERITY_INFO:
      spdlog::info("grpc: {}", args->message);
      break;
    default:
      spdlog::warn("grpc: {}", args->message);
      break;
  }
}

}  // namespace

void LogOptions::Bind(ConfigSection& s) {
  s.Optional("level", level);
  s.OneOf("level", level, {kLevels.begin(), kLevels.end()});
  s.Optional("format", format);
  s.OneOf("format", format, {"text", "json"});
  s.Optional("file", file);
}

std::string EscapeLogText(std::string_view in, bool json) {
  std::string out;
  out.reserve(in.size());
  for (char c : in) {
    auto u = static_cast<unsigned char>(c);
    if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (json && (c == '"' || c == '\\')) {
      out += '\\';
      out += c;
    } else if (u < 0x20 || u == 0x7f) {
      static constexpr char kHex[] = "0123456789abcdef";
      out += json ? "\\u00" : "\\x";
      out += kHex[u >> 4];
      out += kHex[u & 0xf];
    } else {
      out += c;
    }
  }
  return out;
}

Status InitLogging(std::string_view daemon, const LogOptions& options) {
  auto level = spdlog::level::from_str(options.level);
  if (level == spdlog::level::off && options.level != "off") {
    return InvalidArgument("log level '" + options.level +
                           "' is not one of trace, debug, info, warn, error, critical, off");
  }
  std::string pattern;
  bool json = options.format == "json";
  if (json) {
    pattern = R"({"ts":"%Y-%m-%dT%H:%M:%S.%e%z","level":"%l","daemon":")" +
              EscapeLogText(daemon, true) + R"(","pid":%P,"msg":"%J"})";
  } else if (options.format == "text") {
    pattern = "%Y-%m-%dT%H:%M:%S.%e%z %l " + EscapeLogText(daemon, false) + "[%P] %Q";
  } else {
    return InvalidArgument("log format '" + options.format + "' is not one of text, json");
  }

  spdlog::sink_ptr sink;
  if (options.file.empty()) {
    sink = std::make_shared<spdlog::sinks::stderr_sink_mt>();
  } else {
    try {
      sink = std::make_shared<spdlog::sinks::basic_file_sink_mt>(options.file, /*truncate=*/false);
    } catch (const spdlog::spdlog_ex& e) {
      return IoError("cannot open log file '" + options.file + "': " + e.what());
    }
  }
  auto formatter = std::make_unique<spdlog::pattern_formatter>();
  formatter->add_flag<EscapedMessageFlag>('Q', false).add_flag<EscapedMessageFlag>('J', true);
  formatter->set_pattern(pattern);
  sink->set_formatter(std::move(formatter));

  auto logger = std::make_shared<spdlog::logger>(std::string(daemon), std::move(sink));
  logger->set_level(level);
  logger->flush_on(spdlog::level::info);
  spdlog::set_default_logger(std::move(logger));
  gpr_set_log_function(LogGrpcMessage);
  return Status::Ok();
}

}  // namespace ff
