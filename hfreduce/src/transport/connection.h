// A reliable, ordered, full-duplex byte stream between two nodes' leaders: what the tree
// algorithm is written against. Implementations: TCP (tcp.h), ibverbs RC (verbs.h, where built).
// One thread may Send while another Recvs; two concurrent Sends (or Recvs) are not allowed.
#pragma once

#include <chrono>
#include <cstddef>
#include <string>

#include "common/status.h"

namespace ff::hfreduce {

class Connection {
 public:
  virtual ~Connection() = default;
  // Sends all `n` bytes, blocking. `more` hints that another Send follows at once.
  virtual Status Send(const void* data, std::size_t n, bool more = false) = 0;
  // Receives exactly `n` bytes, blocking. kAborted when the peer closed or failed.
  virtual Status Recv(void* data, std::size_t n) = 0;
  // Blocks until data can be received (or the stream ended), up to `deadline`;
  // kDeadlineExceeded when nothing arrived in time.
  virtual Status WaitReadable(std::chrono::steady_clock::time_point deadline) = 0;
  // Receives exactly `n` bytes by `deadline` (handshakes): kDeadlineExceeded when they have not
  // all come, so a peer that sends part of a message and stops cannot hold the caller past it.
  // By default WaitReadable then Recv, right for transports that deliver messages whole.
  virtual Status RecvBefore(void* data, std::size_t n,
                            std::chrono::steady_clock::time_point deadline) {
    Status st = WaitReadable(deadline);
    return st.ok() ? Recv(data, n) : st;
  }
  // True when the peer has ended the stream and nothing it sent is left to receive: a check that
  // neither blocks nor consumes, for a watcher while no thread reads (the transport cannot tell:
  // false).
  virtual bool PeerGone() { return false; }
  // Makes blocked and future Send/Recv fail; the peer sees the stream end. Idempotent.
  virtual void Shutdown() = 0;
  // Names the peer in messages ("node 3 (10.0.0.7:4000)"); the transport's address by default.
  const std::string& peer() const { return peer_; }
  void set_peer(std::string name) { peer_ = std::move(name); }

 protected:
  explicit Connection(std::string peer) : peer_(std::move(peer)) {}

 private:
  std::string peer_;
};

}  // namespace ff::hfreduce
