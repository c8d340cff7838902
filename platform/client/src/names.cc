#include "platform/names.h"

#include <algorithm>
#include <cctype>

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

}  // namespace ff::platform
