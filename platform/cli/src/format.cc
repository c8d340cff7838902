#include <google/protobuf/util/json_util.h>

#include <cstdio>
#include <ctime>

#include "cli.h"
#include "platform/tokens.h"

namespace ff::platform::cli {

void Die(const std::string& message, int code) {
  std::fprintf(stderr, "hai: %s\n", message.c_str());
  std::exit(code);
}

std::string Lower(std::string s) {
  for (char& c : s)
    c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::string ToJson(const google::protobuf::Message& m) {
  std::string out;
  google::protobuf::util::JsonPrintOptions o;
  o.add_whitespace = false;
  o.preserve_proto_field_names = true;
  o.always_print_primitive_fields = true;
  (void)google::protobuf::util::MessageToJsonString(m, &out, o);
  return out;
}

std::string Ago(int64_t ms) {
  if (ms <= 0) return "-";
  int64_t s = (NowMs() - ms) / 1000;
  if (s < 0) s = 0;
  if (s < 120) return std::to_string(s) + "s";
  if (s < 7200) return std::to_string(s / 60) + "m";
  if (s < 172800) return std::to_string(s / 3600) + "h";
  return std::to_string(s / 86400) + "d";
}

// "90", "90s", "30m", "2h", "1h30m", "2d12h" -> seconds; -1 when it is none of these.
int64_t ParseDuration(const std::string& text) {
  if (text.empty()) return -1;
  int64_t total = 0, number = -1;
  for (char c : text) {
    if (c >= '0' && c <= '9') {
      number = (number < 0 ? 0 : number) * 10 + (c - '0');
      if (number > 1000000000) return -1;
      continue;
    }
    const int64_t unit = c == 's' ? 1 : c == 'm' ? 60 : c == 'h' ? 3600 : c == 'd' ? 86400 : 0;
    if (unit == 0 || number < 0) return -1;
    total += number * unit;
    number = -1;
  }
  return number >= 0 ? total + number : total;
}

std::string Clock(int64_t ms) {
  if (ms <= 0) return "-";
  std::time_t t = ms / 1000;
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S", std::localtime(&t));
  return buf;
}

std::string Quote(const std::string& arg) {
  if (!arg.empty() &&
      arg.find_first_not_of(
          "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-./=:,+@%") ==
          std::string::npos) {
    return arg;
  }
  std::string q = "'";
  for (char c : arg)
    q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

int64_t ParseJobId(const std::string& s) {
  try {
    std::size_t used = 0;
    long long v = std::stoll(s, &used);
    if (used == s.size() && v > 0) return v;
  } catch (...) {
  }
  Die("'" + s + "' is not a job id", 2);
}

}  // namespace ff::platform::cli
