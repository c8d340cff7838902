// Traffic classes on the wire: HFReduce, a GPU collective library (NCCL), storage and other.
//
// Fire-Flyer puts each class on its own InfiniBand service level, mapped to weighted virtual
// lanes, so that one class cannot block another. Here a class is a DSCP code point on TCP sockets
// (IP_TOS / IPV6_TCLASS) and a service level on verbs queue pairs. The defaults below are the one
// mapping (deploy/NETLAB.md documents it; deploy/netlab.py's TRAFFIC_CLASSES shapes by it); every
// daemon's config overrides it in its [traffic] section, HFReduce ranks by HFREDUCE_DSCP and
// HFREDUCE_IB_SL.
//
// Who marks what:
//   hfreduce  HFReduce's inter-node tree connections (both directions)
//   nccl      reserved for a GPU collective library beside HFReduce
//   storage   fs3 chunk data: fs3-storage's server and chain forwarding, clients' storage channels
//   other     control RPCs (fs3-mgmtd, fs3-meta, hai-server, hai-agent, rendezvous stores)
#pragma once

#include <cstdint>
#include <string_view>

#include "common/result.h"

namespace ff {

class ConfigSection;

enum class TrafficClass { kHfreduce, kNccl, kStorage, kOther };

std::string_view TrafficClassName(TrafficClass c);

// The [traffic] section of a daemon's config: the DSCP (0..63) and InfiniBand service level
// (0..15) of each class.
struct TrafficOptions {
  int hfreduce_dscp = 34;  // AF41
  int nccl_dscp = 26;      // AF31
  int storage_dscp = 18;   // AF21
  int other_dscp = 0;      // best effort
  int hfreduce_sl = 1;
  int nccl_sl = 2;
  int storage_sl = 3;
  int other_sl = 0;

  int Dscp(TrafficClass c) const;
  int ServiceLevel(TrafficClass c) const;
  void Bind(ConfigSection& s);
};

// The process's mapping: the defaults until a daemon installs its config's (SetProcessTraffic,
// once at start, before it opens sockets). Channels and servers read it when they are made.
TrafficOptions ProcessTraffic();
void SetProcessTraffic(const TrafficOptions& options);

// Marks the socket `fd` with `dscp` (IPv4 and IPv6; 0 clears the mark). Unix sockets and other
// families are left alone. kInvalidArgument outside 0..63.
Status MarkSocket(int fd, int dscp);
// The DSCP the socket's outgoing packets carry (for tests), or an error.
Result<int> SocketDscp(int fd);

}  // namespace ff
