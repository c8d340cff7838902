// Shared-memory transport between two processes of one node: point-to-point between the local
// ranks (pipeline stages' activations), where TCP over loopback would pay two system calls, two
// copies through the kernel and a wake-up per segment.
//
// The two processes map one memfd: a header and two rings, one per direction, each written by
// one side and read by the other (single producer, single consumer; `head` and `tail` count bytes
// since the start). A Send copies into the ring as space frees; a Recv copies out as data comes.
//
// Direct sends (off by default: kDefaultDirectBytes). A Send of at least the threshold, when the
// receiver can read the sender's memory
// (cross-memory attach, process_vm_readv; checked once at setup, in each direction), does not
// go through the ring: the sender publishes where its bytes lie, the receiver reads them straight
// into its own buffer (one copy instead of two), and the Send returns when they have been read.
// The descriptor holds its place in the byte stream (`at`: the ring's head when it was posted),
// so a Recv may take any part of it, and bytes before and after it come in order.
//
// Waiting sleeps on doorbells in the mapping (futexes), after a short look; a side that waits
// checks every kLivenessCheck that its peer still runs, so a peer that dies cannot hold it.
// Shutdown (either side) ends both directions: blocked and later calls fail, data already in
// the ring is still delivered.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "common/result.h"
#include "shm/doorbell.h"
#include "transport/connection.h"

namespace ff::hfreduce {

// Each direction's ring.
constexpr std::size_t kShmRingBytes = std::size_t{4} << 20;
// Sends of at least this many bytes go direct where they can (HFREDUCE_P2P_DIRECT_BYTES; 0:
// never, the default). Measured on the 2-core machine (hfreduce-bench --op sendrecv, 1x2,
// 2026-11-28): with 4 KiB pages the ring's two copies, each on its own core and overlapped,
// beat one process_vm_readv at every size (64 MiB: 7.9 ms against 17.6; 1 MiB: 0.12 against
// 0.18), the kernel pinning every page it reads. A direct send also completes only once its
// receive has read it, where a send the ring holds completes as soon as it is copied in (as a
// send over TCP does once the socket's buffers hold it).
constexpr std::size_t kDefaultDirectBytes = 0;

class ShmConnection : public Connection {
 public:
  // The side that makes the memory (the lower rank). Send path() to the peer, which Opens it;
  // once the peer says it has, call Established().
  static Result<std::unique_ptr<ShmConnection>> Create(std::size_t direct_bytes);
  // The peer's side: opens the memory at `path` and checks that it can read the creator's.
  static Result<std::unique_ptr<ShmConnection>> Open(const std::string& path,
                                                     std::size_t direct_bytes);
  ~ShmConnection() override;

  // Where the peer opens the memory (this process's descriptor, under /proc).
  const std::string& path() const { return path_; }
  // The creator, after the peer opened: closes the descriptor (the memory lives on in both
  // mappings, nothing is left behind) and checks that it can read the peer's memory.
  Status Established();
  // Whether Sends to the peer can go direct (the peer can read this process's memory).
  bool direct() const;

  Status Send(const void* data, std::size_t n, bool more = false) override;
  Status Recv(void* data, std::size_t n) override;
  Status WaitReadable(std::chrono::steady_clock::time_point deadline) override;
  bool PeerGone() override;
  void Shutdown() override;

  struct Header;

 private:
  ShmConnection(void* base, std::size_t size, int side, std::size_t direct_bytes);
  struct Ring;
  Ring& out();
  Ring& in();
  char* out_data();
  char* in_data();
  // Sleeps on `bell` (seen: its value before the condition was checked) for a while, then says
  // whether waiting may go on: not when the connection was shut down or the peer has died.
  Status Pause(Doorbell& bell, uint32_t seen, int& spins,
               std::chrono::steady_clock::time_point& next_check);
  Status Closed(const char* doing) const;
  // Checks that this process can read the peer's memory (its probe word); records the answer for
  // the peer's sends.
  void ProbePeer();

  char* base_;
  std::size_t size_;
  int side_;  // 0: the creator, 1: the opener
  std::size_t direct_bytes_;
  int fd_ = -1;
  std::string path_;
  // Receiving: how far into the current direct descriptor this side has read.
  uint64_t direct_read_ = 0;
};

}  // namespace ff::hfreduce
