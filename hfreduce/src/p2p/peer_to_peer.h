// Point-to-point send and receive between any two ranks (pipeline parallelism's activations and
// gradients). Each pair of ranks gets one TCP connection, opened by the lower rank when either
// side first needs it; messages between a pair arrive in the order they were sent, and a receive
// takes the oldest message of its tag (messages whose receive is not posted yet are buffered). A
// receive must match its send in count and type, else both fail.
//
// Sends to one peer run in order on that peer's sender thread, receives from one peer in order on
// its receiver thread, so traffic with different peers proceeds in parallel. Thread-safe.
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
  PeerToPeer(int rank, std::unique_ptr<TcpListener> listener, std::vector<std::string> addresses,
             std::chrono::milliseconds timeout);
  ~PeerToPeer();  // fails pending operations with kCancelled

  std::shared_ptr<Work> Send(const void* buf, std::size_t count, DataType type, int peer,
                             uint32_t tag);
  std::shared_ptr<Work> Recv(void* buf, std::size_t count, DataType type, int peer, uint32_t tag);
  // Fails every pending operation with `status` and cuts every connection; later operations fail
  // with it too. Never blocks on a peer.
  void Abort(const Status& status);

 private:
  class Channel;
  Channel& ChannelTo(int peer);
  void AcceptLoop();

  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace ff::hfreduce
