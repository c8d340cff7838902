#include "shm/process.h"

#include <signal.h>

#include <cerrno>
#include <fstream>
#include <iterator>
#include <string>

namespace ff::hfreduce {

bool ProcessDead(pid_t pid) {
  if (pid <= 0) return false;
  if (kill(pid, 0) != 0 && errno == ESRCH) return true;
  // A zombie still answers kill(); its state in /proc/<pid>/stat is Z (or X).
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string content((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
  auto close_paren = content.rfind(')');
  if (close_paren == std::string::npos || close_paren + 2 >= content.size()) return false;
  char state = content[close_paren + 2];
  return state == 'Z' || state == 'X';
}

}  // namespace ff::hfreduce
