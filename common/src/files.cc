#include "common/files.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>

namespace ff {

Result<std::string> ReadWholeFile(const std::string& path, const std::string& what_prefix) {
  const std::string what = what_prefix + " '" + path + "'";
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Status::FromErrno(errno, what);
  std::string text;
  char buf[16384];
  while (true) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      int err = errno;
      ::close(fd);
      return Status::FromErrno(err, what);
    }
    if (n == 0) break;
    text.append(buf, static_cast<std::size_t>(n));
  }
  ::close(fd);
  return text;
}

}  // namespace ff
