#include "platform/tokens.h"

#include <fcntl.h>
#include <openssl/evp.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <filesystem>

#include "common/files.h"

namespace ff::platform {

Result<std::string> NewToken() {
  unsigned char bytes[32];
  int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Status::FromErrno(errno, "open /dev/urandom");
  std::size_t got = 0;
  while (got < sizeof bytes) {
    ssize_t n = read(fd, bytes + got, sizeof bytes - got);
    if (n <= 0) {
      int e = n < 0 ? errno : EIO;
      close(fd);
      return Status::FromErrno(e, "read /dev/urandom");
    }
    got += static_cast<std::size_t>(n);
  }
  close(fd);
  static constexpr char kHex[] = "0123456789abcdef";
  std::string token = "hai_";
  for (unsigned char b : bytes) {
    token += kHex[b >> 4];
    token += kHex[b & 15];
  }
  return token;
}

std::string HashToken(const std::string& token) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_Digest(token.data(), token.size(), digest, &len, EVP_sha256(), nullptr);
  return std::string(reinterpret_cast<const char*>(digest), len);
}

std::string BearerToken(const grpc::ServerContext& context) {
  const auto& md = context.client_metadata();
  auto it = md.find("authorization");
  if (it == md.end()) return "";
  std::string value(it->second.data(), it->second.size());
  constexpr std::string_view kPrefix = "Bearer ";
  if (value.rfind(kPrefix, 0) != 0) return "";
  return value.substr(kPrefix.size());
}

void SetBearerToken(grpc::ClientContext* context, const std::string& token) {
  if (!token.empty()) context->AddMetadata("authorization", "Bearer " + token);
}

Result<std::string> ReadTokenFile(const std::string& path, bool create) {
  auto text = ReadWholeFile(path, "cannot read token file");
  if (!text.ok() && text.status().code() == StatusCode::kNotFound && create) {
    FF_ASSIGN_OR_RETURN(std::string token, NewToken());
    std::error_code ec;
    std::filesystem::create_directories(std::filesystem::path(path).parent_path(), ec);
    int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0) return Status::FromErrno(errno, "create token file " + path);
    std::string line = token + "\n";
    bool ok = write(fd, line.data(), line.size()) == static_cast<ssize_t>(line.size());
    ok = fsync(fd) == 0 && ok;
    close(fd);
    if (!ok) return Status::FromErrno(EIO, "write token file " + path);
    return token;
  }
  if (!text.ok()) return text.status();
  std::string t = *text;
  while (!t.empty() && std::isspace(static_cast<unsigned char>(t.back())))
    t.pop_back();
  std::size_t start = 0;
  while (start < t.size() && std::isspace(static_cast<unsigned char>(t[start])))
    ++start;
  t = t.substr(start);
  if (t.empty()) return InvalidArgument("token file " + path + " is empty");
  return t;
}

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace ff::platform
