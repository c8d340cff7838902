// ibverbs transport: a Connection over an InfiniBand / RoCE reliable-connected queue pair, moving
// data with RDMA WRITE WITH IMMEDIATE into a ring of registered slots on the receiver.
//
// Built only where libibverbs is found (FF_WITH_VERBS), and usable only on a machine with an RDMA
// device: everywhere else VerbsAvailable() is false and HFReduce uses TCP. The queue pairs are
// set up over an existing TCP connection (the "bootstrap"), which stays open and is shut down
// with the verbs connection.
//
// Flow control: the receiver owns `kSlots` slots of `kSlotBytes`; the sender writes a slot only
// while it holds a credit, and the receiver returns credits (an RDMA write of its consumed-slot
// counter into the sender's memory) as it drains them. Every write carries its length in the
// immediate, so the receiver learns of each slot through its completion queue.
#pragma once

#include <memory>
#include <string>

#include "common/result.h"
#include "transport/connection.h"

namespace ff::hfreduce {

// True when this build has the verbs transport and the machine has at least one RDMA device.
bool VerbsAvailable();

// Sets up a verbs connection with the peer at the other end of `bootstrap`, in two steps so that
// a node can upgrade all its connections without waiting on any peer in between (which could
// deadlock around the trees): Begin on every connection (creates the queue pair, sends our
// endpoint), then Finish on every one (reads the peer's endpoint, connects). `device` names the
// RDMA device (empty: the first one); port 1 is used. The queue pair's packets carry
// `service_level` (InfiniBand SL, 0..15) and, routed by GID (RoCE), `dscp` in the traffic class.
class VerbsConnector {
 public:
  static Result<std::unique_ptr<VerbsConnector>> Begin(std::unique_ptr<Connection> bootstrap,
                                                       const std::string& device, int service_level,
                                                       int dscp);
  ~VerbsConnector();
  Result<std::unique_ptr<Connection>> Finish();

 private:
  struct Impl;
  explicit VerbsConnector(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace ff::hfreduce
