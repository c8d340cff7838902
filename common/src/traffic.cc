#include "common/traffic.h"

#include <netinet/in.h>
#include <netinet/ip.h>
#include <sys/socket.h>

#include <cerrno>
#include <mutex>

#include "common/config.h"

namespace ff {
namespace {

std::mutex traffic_mu;
TrafficOptions& Installed() {
  static TrafficOptions options;
  return options;
}

}  // namespace

std::string_view TrafficClassName(TrafficClass c) {
  switch (c) {
    case TrafficClass::kHfreduce:
      return "hfreduce";
    case TrafficClass::kNccl:
      return "nccl";
    case TrafficClass::kStorage:
      return "storage";
    case TrafficClass::kOther:
      return "other";
  }
  return "other";
}

int TrafficOptions::Dscp(TrafficClass c) const {
  switch (c) {
    case TrafficClass::kHfreduce:
      return hfreduce_dscp;
    case TrafficClass::kNccl:
      return nccl_dscp;
    case TrafficClass::kStorage:
      return storage_dscp;
    case TrafficClass::kOther:
      return other_dscp;
  }
  return other_dscp;
}

int TrafficOptions::ServiceLevel(TrafficClass c) const {
  switch (c) {
    case TrafficClass::kHfreduce:
      return hfreduce_sl;
    case TrafficClass::kNccl:
      return nccl_sl;
    case TrafficClass::kStorage:
      return storage_sl;
    case TrafficClass::kOther:
      return other_sl;
  }
  return other_sl;
}

void TrafficOptions::Bind(ConfigSection& s) {
  auto dscp = [&s](const char* key, int& v) {
    s.Optional(key, v);
    s.Check(v >= 0 && v <= 63, key, "a DSCP code point is 0..63");
  };
  auto sl = [&s](const char* key, int& v) {
    s.Optional(key, v);
    s.Check(v >= 0 && v <= 15, key, "an InfiniBand service level is 0..15");
  };
  dscp("hfreduce_dscp", hfreduce_dscp);
  dscp("nccl_dscp", nccl_dscp);
  dscp("storage_dscp", storage_dscp);
  dscp("other_dscp", other_dscp);
  sl("hfreduce_sl", hfreduce_sl);
  sl("nccl_sl", nccl_sl);
  sl("storage_sl", storage_sl);
  sl("other_sl", other_sl);
}

TrafficOptions ProcessTraffic() {
  std::lock_guard lock(traffic_mu);
  return Installed();
}

void SetProcessTraffic(const TrafficOptions& options) {
  std::lock_guard lock(traffic_mu);
  Installed() = options;
}

Status MarkSocket(int fd, int dscp) {
  if (dscp < 0 || dscp > 63) {
    return InvalidArgument("DSCP " + std::to_string(dscp) + " is outside 0..63");
  }
  sockaddr_storage addr{};
  socklen_t len = sizeof addr;
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    return Status::FromErrno(errno, "getsockname");
  }
  const int tos = dscp << 2;  // the low two bits are ECN's
  if (addr.ss_family == AF_INET) {
    if (setsockopt(fd, IPPROTO_IP, IP_TOS, &tos, sizeof tos) != 0) {
      return Status::FromErrno(errno, "setsockopt IP_TOS");
    }
  } else if (addr.ss_family == AF_INET6) {
    if (setsockopt(fd, IPPROTO_IPV6, IPV6_TCLASS, &tos, sizeof tos) != 0) {
      return Status::FromErrno(errno, "setsockopt IPV6_TCLASS");
    }
    // An IPv6 socket may carry IPv4 (mapped addresses): mark that too, where allowed.
    setsockopt(fd, IPPROTO_IP, IP_TOS, &tos, sizeof tos);
  }
  return Status::Ok();
}

Result<int> SocketDscp(int fd) {
  sockaddr_storage addr{};
  socklen_t len = sizeof addr;
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    return Status::FromErrno(errno, "getsockname");
  }
  int tos = 0;
  socklen_t n = sizeof tos;
  int rc = addr.ss_family == AF_INET6 ? getsockopt(fd, IPPROTO_IPV6, IPV6_TCLASS, &tos, &n)
                                      : getsockopt(fd, IPPROTO_IP, IP_TOS, &tos, &n);
  if (rc != 0) return Status::FromErrno(errno, "getsockopt");
  return tos >> 2;
}

}  // namespace ff
