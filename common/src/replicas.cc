#include "common/replicas.h"

namespace ff {
namespace {

constexpr const char* kLeaderIs = "the leader is at ";

}  // namespace

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
  m += leader.empty() ? " (no leader is known yet; try again)"
                      : "; " + std::string(kLeaderIs) + leader;
  return Unavailable(m);
}

std::string LeaderNamedIn(const std::string& message) {
  const std::size_t at = message.find(kLeaderIs);
  if (at == std::string::npos) return "";
  std::string rest = message.substr(at + std::string(kLeaderIs).size());
  const std::size_t end = rest.find_first_of(" ;()\n");
  return end == std::string::npos ? rest : rest.substr(0, end);
}

}  // namespace ff
