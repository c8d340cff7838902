#include "engine/waiter.h"

#include <immintrin.h>
#include <sched.h>
#include <signal.h>

#include <cerrno>
#include <fstream>
#include <sstream>

namespace ff::hfreduce {

Waiter::Waiter(NodeSegment& segment, std::vector<pid_t> watched, std::vector<std::string> names)
    : segment_(segment), watched_(std::move(watched)), names_(std::move(names)) {}

Status Waiter::CheckPeers() {
  for (std::size_t i = 0; i < watched_.size(); ++i) {
    if (ProcessDead(watched_[i])) {
      Status st = Unavailable("hfreduce: " + names_[i] + " (pid " + std::to_string(watched_[i]) +
                              ") exited during a collective");
      segment_.Abort(st);
      return segment_.AbortStatus();
    }
  }
  return Status::Ok();
}

Status Waiter::Until(const std::function<bool()>& pred, Clock::time_point deadline,
                     const std::function<std::string()>& what, bool check_peers,
                     std::chrono::microseconds yield_for, Doorbell* which) {
  Doorbell& bell = which != nullptr ? *which : segment_.header().doorbell;
  // A short spin first: most waits in a running pipeline end within microseconds.
  for (int i = 0; i < 64; ++i) {
    if (pred()) return Status::Ok();
    _mm_pause();
  }
  if (yield_for.count() > 0) {
    const auto until = Clock::now() + yield_for;
    do {
      sched_yield();
      if (pred()) return Status::Ok();
    } while (Clock::now() < until && !segment_.aborted());
  }
  auto next_check = Clock::now() + std::chrono::milliseconds(100);
  while (true) {
    uint32_t seen = bell.Value();
    if (pred()) return Status::Ok();
    if (segment_.aborted()) return segment_.AbortStatus();
    auto now = Clock::now();
    if (now >= deadline) {
      // "Timed out" as gloo words it: callers match that.
      segment_.Abort(DeadlineExceeded("hfreduce: Timed out waiting for " + what()));
      return segment_.AbortStatus();
    }
    if (check_peers && now >= next_check) {
      FF_RETURN_IF_ERROR(CheckPeers());
      next_check = now + std::chrono::milliseconds(100);
    }
    bell.Wait(seen, std::chrono::milliseconds(20));
  }
}

}  // namespace ff::hfreduce
