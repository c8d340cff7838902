// Point-to-point send and receive between any two ranks (pipeline parallelism's activations and
// gradients). Each pair of ranks gets one TCP connection, opened by the lower rank when either
// side first needs it; messages between a pair arrive in the order they were sent, and a receive
// takes the oldest message of its tag (messages whose receive is not posted yet are buffered). A
// receive must match its send in count and type, else both fail.
//
// A receive from any source waits in one queue shared by the channels; each channel reading a
// message of its tag with no receive of its own posted claims it.
//
// Sends to one peer run in order on that peer's sender thread, receives from one peer in order on
// its receiver thread, so traffic with different peers proceeds in parallel. Thread-safe.
//
// Ranks of one node talk through shared memory (transport/shm.h), not loopback TCP: the lower
// rank makes the memory and names it in its TCP hello; once the higher rank has opened it, the
// TCP connection is dropped. Where the memory cannot be opened, the pair stays on TCP.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "hfreduce/communicator.h"
#include "transport/tcp.h"

namespace ff::hfreduce {

class PeerToPeer {
 public:
  // `listener` accepts the higher ranks' connections; `addresses[r]` is rank r's listener.
  // `same_node`: the ranks reached through shared memory (empty: all over TCP); sends of at
  // least `direct_bytes` to them are read straight from the sender's buffer where the kernel
  // allows it (0: never).
  PeerToPeer(int rank, std::unique_ptr<TcpListener> listener, std::vector<std::string> addresses,
             std::chrono::milliseconds timeout, std::vector<int> same_node = {},
             std::size_t direct_bytes = 0);
  ~PeerToPeer();  // fails pending operations with kCancelled

  std::shared_ptr<Work> Send(const void* buf, std::size_t count, DataType type, int peer,
                             uint32_t tag);
  std::shared_ptr<Work> Recv(void* buf, std::size_t count, DataType type, int peer, uint32_t tag);
  // From any peer (Communicator::RecvAnyAsync). While one is pending, every peer's channel reads
  // (the lower rank opening each connection, as for a Recv), and the first message of its tag
  // from any of them is delivered to it; a buffered one is taken first.
  std::shared_ptr<Work> RecvAny(void* buf, std::size_t count, DataType type, uint32_t tag,
                                int* source);
  // How messages with `peer` travel (Communicator::PointToPointPath); "" before they connect.
  std::string Path(int peer);
  // Fails every pending operation with `status` and cuts every connection; later operations fail
  // with it too. Never blocks on a peer.
  void Abort(const Status& status);

 private:
  class Channel;
  Channel& ChannelTo(int peer);
  void AcceptLoop();
  // Fails every pending receive from any source, and later ones, with `status`.
  void FailAny(const Status& status);

  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace ff::hfreduce
