// How the states of hai.proto read to people: in `hai`'s tables, in hai-server's errors and logs,
// and as the hai_jobs / hai_nodes gauges' labels. (JSON output keeps the proto's enum names.)
#pragma once

#include <string>

#include "platform/proto/hai.pb.h"

namespace ff::platform {

std::string StateName(hai::JobState state);       // "running"
std::string NodeStateName(hai::NodeState state);  // "up", "lost", "unknown"
std::string RunEndName(hai::RunEnd end);          // "exited", "node lost", ... ("" while running)
// A duration of steps and their phases: "12 s", "0.21 s", "34.7 ms".
std::string StepSecondsText(double seconds);

}  // namespace ff::platform
