// Fuzz target: hai-sim's job-trace parser (scheduler/trace.h). Any input gives jobs or an error
// naming the line; the jobs it gives are valid (positive duration and GPUs, sorted by submission).
#include <cstdint>
#include <cstdlib>
#include <string>

#include "scheduler/trace.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto jobs = ff::scheduler::ParseTrace(text, "fuzz.csv");
  if (!jobs.ok()) {
    if (jobs.status().message().find("fuzz.csv") == std::string::npos) std::abort();
    return 0;
  }
  if (jobs->empty()) std::abort();
  for (std::size_t i = 0; i < jobs->size(); ++i) {
    const auto& j = (*jobs)[i];
    if (j.duration <= 0 || j.gpus <= 0 || j.line < 2) std::abort();
    if (i > 0 && (*jobs)[i - 1].submit > j.submit) std::abort();
  }
  ff::scheduler::WorkloadRules rules;
  auto requests = ff::scheduler::MakeWorkload(*jobs, rules);
  if (requests.size() != jobs->size()) std::abort();
  return 0;
}
