// Waiting for a condition on the node's shared state, bounded by the operation's deadline and
// broken off when the node aborts or a process it depends on dies.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <string>
#include <vector>

#include "common/status.h"
#include "shm/node_segment.h"
#include "shm/process.h"

namespace ff::hfreduce {

class Waiter {
 public:
  using Clock = std::chrono::steady_clock;

  // `watched` are processes whose death fails the wait (for the leader: the other local ranks;
  // for the others: the leader). Names are used in messages ("local rank 2").
  Waiter(NodeSegment& segment, std::vector<pid_t> watched, std::vector<std::string> names);

  // Blocks until pred() holds. Fails, aborting the node with the reason, when `deadline` passes
  // or (with `check_peers`) a watched process dies; fails with the node's abort status when it
  // has been aborted. `what` describes the wait for the timeout message. Waits between
  // operations pass check_peers = false: a rank that finished and exited is not a failure then.
  // `yield_for`: after the short spin, keep looking this long, yielding the CPU between looks,
  // before sleeping on the doorbell (the latency path: a wake-up from the futex costs more than
  // the whole operation, and the rank it waits for may need this very core).
  Status Until(const std::function<bool()>& pred, Clock::time_point deadline,
               const std::function<std::string()>& what, bool check_peers = true,
               std::chrono::microseconds yield_for = std::chrono::microseconds(0),
               Doorbell* bell = nullptr);  // null: the segment's doorbell

  // Checks the watched processes now; aborts the node and fails if one has died.
  Status CheckPeers();

 private:
  NodeSegment& segment_;
  std::vector<pid_t> watched_;
  std::vector<std::string> names_;
};

}  // namespace ff::hfreduce
