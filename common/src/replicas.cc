#include "common/replicas.h"

namespace ff {

std::vector<std::string> SplitAddressList(const std::string& list) {
  std::vector<std::string> out;
  std::size_t start = 0;
  while (start <= list.size()) {
    std::size_t comma = list.find(',', start);
    if (comma == std::string::npos) comma = list.size();
    std::string part = list.substr(start, comma - start);
    part.erase(0, part.find_first_not_of(" \t"));
    part.erase(part.find_last_not_of(" \t") + 1);
    if (!part.empty()) out.push_back(part);
    start = comma + 1;
  }
  return out;
}

Status NotLeader(const std::string& service, const std::string& self, const std::string& leader) {
  std::string m = service + " at " + self + " is not the leader";
  m += leader.empty() ? " (no leader is known yet; try again)" : "; the leader is at " + leader;
  Status::Details details;
  if (!leader.empty()) details.emplace_back("leader", leader);
  return Unavailable(m).WithReason(kNotLeader, std::move(details));
}

}  // namespace ff
