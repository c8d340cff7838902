#include "platform/names.h"

#include <algorithm>
#include <cctype>
#include <cstdio>

namespace ff::platform {

std::string StateName(hai::JobState state) {
  std::string n = hai::JobState_Name(state);
  std::transform(n.begin(), n.end(), n.begin(), [](unsigned char c) { return std::tolower(c); });
  return n;
}

std::string NodeStateName(hai::NodeState state) {
  switch (state) {
    case hai::NODE_UP:
      return "up";
    case hai::NODE_LOST:
      return "lost";
    default:
      return "unknown";
  }
}

std::string RunEndName(hai::RunEnd end) {
  switch (end) {
    case hai::RUN_EXITED:
      return "exited";
    case hai::RUN_RANK_FAILED:
      return "a rank failed";
    case hai::RUN_NODE_LOST:
      return "node lost";
    case hai::RUN_STOPPED:
      return "stopped";
    case hai::RUN_SUSPENDED:
      return "suspended";
    default:
      return "";
  }
}

std::string StepSecondsText(double s) {
  char buf[32];
  if (s >= 10) {
    std::snprintf(buf, sizeof buf, "%.0f s", s);
  } else if (s >= 0.1) {
    std::snprintf(buf, sizeof buf, "%.2f s", s);
  } else {
    std::snprintf(buf, sizeof buf, "%.1f ms", s * 1000);
  }
  return buf;
}

}  // namespace ff::platform
